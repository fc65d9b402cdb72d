//! What a world that checks its reads read that its parent changed since the fork: the facts the stale-read
//! gate judges (governance/judge.rs), gathered with the merge's own readers of the parent's changes.
//!
//! For each tracked table the world read: the rows its parent changed since the fork (`merge::
//! parent_changes`: the row at the fork and now; the world's own rows left out). A changed row holds
//! the world when its table was read whole, or when a read used a column it changed (any column, for a
//! row added or deleted) and the read found it: a key lookup of its key, or a scan whose conditions it
//! matches before or after the change (tested in SQL, on the rows as records of the table, with the
//! operators and constants the scan used).
use crate::api::raise;
use crate::spi_calls::Fresh;
use crate::governance::reads::{record, shmem};
use crate::plan::Stale;
use super::{parent_changes, short_name};
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use std::collections::HashMap;
use worlds_core::reads::{self, conjunct_sql, Columns, ConjunctSql, Test};

/// The world's columns by name → attnum.
fn attnums(relid: pg_sys::Oid) -> HashMap<String, i32> {
    crate::spi_calls::rows(
        "SELECT attname::text, attnum::int4 FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped",
        None,
        &[relid.into()],
        |t| t.filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<i32>(2).ok()??))).collect(),
    )
    .unwrap_or_default()
}

fn type_name(oid: u32) -> String {
    crate::spi_calls::get_one_with_args::<String>("SELECT pg_catalog.format_type($1, NULL)", &[pg_sys::Oid::from(oid).into()]).ok().flatten().unwrap_or_default()
}

fn op_parts(opno: u32) -> (String, u32, u32) {
    crate::spi_calls::rows(
        "SELECT oprname::text, oprleft, oprright FROM pg_catalog.pg_operator WHERE oid = $1",
        None,
        &[pg_sys::Oid::from(opno).into()],
        |mut t| t.next().map(|r| (r.get::<String>(1).ok().flatten().unwrap_or_default(), r.get::<pg_sys::Oid>(2).ok().flatten().unwrap_or_default().to_u32(), r.get::<pg_sys::Oid>(3).ok().flatten().unwrap_or_default().to_u32())),
    )
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// For each scan, which of these rows (before or after) its conditions match: one query per table.
fn matching(l: &crate::storage::Layout, scans: &[Vec<reads::Conjunct>], rows: &[(Option<Value>, Option<Value>)], names: &HashMap<i32, String>) -> Vec<Vec<bool>> {
    let mut values: Vec<String> = Vec::new();
    let mut exprs: Vec<String> = Vec::new();
    for conjs in scans {
        let mut side = |row: &str| -> Option<String> {
            let mut parts = Vec::new();
            for c in conjs {
                let column = names.get(&(c.attno as i32))?;
                let sql = if c.test == Test::IsNull {
                    conjunct_sql(Test::IsNull, &ConjunctSql { column, opname: "", left_type: "", right_type: "", param: 0 }, row, "$2")
                } else {
                    let (opname, left, right) = op_parts(c.opno);
                    values.push(c.value.clone());
                    let (lt, rt) = (type_name(left), type_name(right));
                    conjunct_sql(c.test, &ConjunctSql { column, opname: &opname, left_type: &lt, right_type: &rt, param: values.len() }, row, "$2")
                };
                parts.push(sql);
            }
            Some(parts.join(" AND "))
        };
        // (a column gone since: the scan matches every row)
        let e = match (side("r.b"), side("r.a")) {
            (Some(b), Some(a)) => format!("coalesce((r.hb AND {b}), false) OR coalesce((r.ha AND {a}), false)"),
            _ => "true".to_string(),
        };
        exprs.push(e);
    }
    let input: Vec<Value> = rows.iter().enumerate().map(|(i, (b, a))| serde_json::json!({"i": i, "b": b, "a": a})).collect();
    let sql = format!(
        "SELECT (e ->> 'i')::int4, ARRAY[{}]::bool[] FROM jsonb_array_elements($1) e,
         LATERAL (SELECT jsonb_typeof(e -> 'b') = 'object' AS hb, jsonb_typeof(e -> 'a') = 'object' AS ha,
                         jsonb_populate_record(NULL::{t}, CASE WHEN jsonb_typeof(e -> 'b') = 'object' THEN e -> 'b' ELSE '{{}}' END) AS b,
                         jsonb_populate_record(NULL::{t}, CASE WHEN jsonb_typeof(e -> 'a') = 'object' THEN e -> 'a' ELSE '{{}}' END) AS a) r",
        exprs.join(", "),
        t = l.table_name
    );
    let mut out = vec![vec![false; scans.len()]; rows.len()];
    Spi::connect(|c| {
        let rs = c
            .fresh(&sql, None, &[JsonB(Value::Array(input)).into(), values.clone().into()])
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: checking reads of {}: {e}", l.table_name)));
        for r in rs {
            let i = r.get::<i32>(1).ok().flatten().unwrap_or(0) as usize;
            if let Some(m) = r.get::<Vec<Option<bool>>>(2).ok().flatten() {
                out[i] = m.into_iter().map(|x| x.unwrap_or(true)).collect();
            }
        }
    });
    out
}

/// What world `num` read that its parent changed since the fork (None: nothing, or it doesn't check
/// its reads). Runs as pg_worlds (`as_internal`).
pub fn stale(num: i32) -> Option<Stale> {
    if !record::checks_reads_now(num) {
        return None;
    }
    let Some((full, tables)) = shmem::reads_of(num) else { return Some(Stale::Restarted) };
    let world = crate::storage::overlay::world_by_num(num)?;
    let mut held: Vec<String> = Vec::new();
    let all = shmem::TableReads { whole: true, ..Default::default() };
    // each table checked under its lock, released once checked (gather.rs): a world that read every table
    // doesn't hold every tracked table's locks at once
    super::layouts_where(|t| full || tables.contains_key(&t.relid.to_u32()), |l| {
        let Some(tr) = tables.get(&l.relid.to_u32()).or(if full { Some(&all) } else { None }) else { return false };
        let whole = full || tr.whole;
        let short = short_name(&l.table_name);
        if l.key_kind == b'r' {
            // a table without a key: any row its parent changed since the fork (no row to name)
            if !parent_changes_keyless(&l, &world) {
                return false;
            }
            held.push(short);
            return false;
        }
        let changes = parent_changes(&l, &world);
        if changes.is_empty() {
            return false;
        }
        let names = attnums(l.relid);
        let by_num: HashMap<i32, String> = names.iter().map(|(k, v)| (*v, k.clone())).collect();
        // per changed row: added or deleted, and the columns it changed
        let facts: Vec<(bool, Vec<i32>)> = changes
            .iter()
            .map(|(_, b, a)| match (b.as_ref().and_then(|v| v.as_object()), a.as_ref().and_then(|v| v.as_object())) {
                (Some(b), Some(a)) => (false, a.iter().filter(|(k, v)| b.get(*k) != Some(*v)).filter_map(|(k, _)| names.get(k).copied()).collect()),
                _ => (true, Vec::new()),
            })
            .collect();
        let uses = |cols: &Columns, i: usize| facts[i].0 || cols.any_of(&facts[i].1);
        let mut hit = vec![false; changes.len()];
        for (i, (key, _, _)) in changes.iter().enumerate() {
            if whole {
                hit[i] = facts[i].0 || !facts[i].1.is_empty();
            } else if let Some(cols) = tr.keys.get(&reads::hash(key.as_bytes())) {
                hit[i] = uses(cols, i);
            }
        }
        if !whole && !tr.scans.is_empty() {
            let scans: Vec<(Columns, Vec<reads::Conjunct>)> = tr.scans.iter().filter_map(|(c, b)| Some((*c, reads::decode(b)?))).collect();
            // only the rows some scan's columns make relevant, and only those scans
            let todo: Vec<usize> = (0..changes.len()).filter(|&i| !hit[i] && scans.iter().any(|(c, _)| uses(c, i))).collect();
            if !todo.is_empty() {
                let rows: Vec<(Option<Value>, Option<Value>)> = todo.iter().map(|&i| (changes[i].1.clone(), changes[i].2.clone())).collect();
                let preds: Vec<Vec<reads::Conjunct>> = scans.iter().map(|(_, p)| p.clone()).collect();
                let m = matching(&l, &preds, &rows, &by_num);
                for (k, &i) in todo.iter().enumerate() {
                    hit[i] = scans.iter().enumerate().any(|(j, (c, _))| uses(c, i) && m[k].get(j).copied().unwrap_or(true));
                }
            }
        }
        held.extend(changes.iter().zip(hit).filter(|(_, h)| *h).map(|((k, _, _), _)| format!("{short}/{k}")));
    false
    });
    (!held.is_empty()).then_some(Stale::Rows(held))
}

/// Did the parent change rows of a keyless table since the world's fork?
fn parent_changes_keyless(l: &crate::storage::Layout, world: &crate::storage::overlay::World) -> bool {
    let main = crate::spi_calls::get_one_with_args::<bool>(
        &format!(
            "SELECT EXISTS (SELECT 1 FROM {} h WHERE CASE WHEN $1 LIKE '@%' THEN h._w_at > substr($1, 2)::timestamptz
             ELSE h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot) END)",
            l.history_name
        ),
        &[world.main_snapshot.as_str().into()],
    )
    .ok()
    .flatten()
    .unwrap_or(true);
    let chain = crate::spi_calls::get_one_with_args::<bool>(
        &format!("SELECT EXISTS (SELECT 1 FROM {} d WHERE d._w_world = ANY($1))", l.delta_name),
        &[world.chain[1..].to_vec().into()],
    )
    .ok()
    .flatten()
    .unwrap_or(true);
    main || chain
}

/// CHECK READS [OF WORLD w] (`worlds.check_reads(w)`): what the world read that changed since its fork,
/// with what it was checked against; changes nothing. 55000 for a world that doesn't check its reads.
#[pg_extern(volatile, parallel_unsafe)]
fn check_reads(world: default!(Option<&str>, "NULL")) -> TableIterator<'static, (name!(checked_against, String), name!(changed, String))> {
    let session = crate::guc::current_world_setting().to_string_lossy().into_owned();
    let _timer = crate::metrics::time(crate::metrics::Timed::CheckReads);
    let rows = crate::storage::as_internal(|| {
        let name = world.map(str::to_string).unwrap_or(session);
        let w = crate::world::resolve_world(&name);
        if w.num == 0 {
            raise("55000", "main doesn't check its reads: it has no fork point to check them against");
        }
        crate::governance::agents::require("read", Some(w.num));
        if !record::checks_reads_now(w.num) {
            crate::api::raise_with(
                "55000",
                format!("world {} doesn't check its reads", w.name),
                None,
                Some("Fork a world WITH (check_reads = true) to have its reads checked.".into()),
            );
        }
        let parent = crate::spi_calls::get_one_with_args::<String>("SELECT name FROM worlds.world WHERE num = $1", &[w.parent.unwrap_or(0).into()])
            .ok()
            .flatten()
            .unwrap_or_else(|| "main".into());
        stale(w.num).map(|s| vec![(parent, s.what())]).unwrap_or_default()
    });
    TableIterator::new(rows)
}
