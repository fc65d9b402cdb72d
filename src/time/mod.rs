//! RESTORE WORLD and UNDO MERGE: writing rows back as they were, as ordinary writes (history keeps what
//! they replace). Moments, AS OF, checkpoints and SHOW HISTORY are SQL (catalog/time.sql); `expiry` keeps
//! history within history_retention and discards expired and idle worlds, in every database.
pub mod past_schema;
pub mod expiry;
mod main_writes;
mod undo_agent;
pub use undo_agent::undo_agent;

use crate::spi_calls::Fresh;
use crate::api::{raise, raise_with};
use crate::sql_text::{json_object_expr, key_match};
use crate::merge::{apply_plan, live_columns, short_name, tracked_layouts_where, Changed, Planned};
use crate::storage::overlay::{base_of, with_world, world_by_num};
use crate::storage::{as_internal, Layout};
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use worlds_core::merge::{Decision, Outcome};

fn planned(layout: &std::rc::Rc<Layout>, key: String, key_obj: Value, now: Option<Value>, then: Option<Value>) -> Planned {
    Planned {
        table: layout.table_name.to_string(),
        layout: layout.clone(),
        merge_by_columns: false,
        row: Changed { key, key_obj, base: then.clone(), ours: then.clone(), theirs: now },
        decision: Decision { outcome: Outcome::Apply, result: then },
    }
}

/// Runs `f` on each tracked table with a key; `f` adds to `plan` the rows it plans there. A table's locks
/// are kept only when rows of it were planned (merge/gather.rs: the others' released at once).
pub(super) fn plan_keyed_tables(plan: &mut Vec<Planned>, mut f: impl FnMut(&std::rc::Rc<Layout>, &mut Vec<Planned>)) {
    tracked_layouts_where(|l| {
        if l.key_kind == b'r' {
            return false;
        }
        let before = plan.len();
        f(l, plan);
        plan.len() > before
    });
}

fn key_text_of(obj: &Value, cols: &[String]) -> String {
    let part = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if cols.len() == 1 {
        part(&obj[&cols[0]])
    } else {
        format!("({})", cols.iter().map(|c| part(&obj[c])).collect::<Vec<_>>().join(","))
    }
}

/// For each key of main's table changed since `at`: (key object, the row then, the row now).
fn main_changes_since(l: &Layout, at: &str) -> Vec<(Value, Option<Value>, Option<Value>)> {
    let cols = live_columns(l.relid);
    let kobj_h = json_object_expr("h", &l.key_columns);
    let sql = format!(
        "WITH first AS (
             SELECT DISTINCT ON ({kobj_h}::text) {kobj_h} AS k, h._w_op AS op, {hrow} AS row
             FROM {hist} h WHERE h._w_at > $1::timestamptz ORDER BY {kobj_h}::text, h._w_hseq)
         SELECT f.k, CASE WHEN f.op = 'I' THEN NULL ELSE f.row END,
                (SELECT to_jsonb(t.*) FROM {table} t, jsonb_populate_record(NULL::{table}, f.k) k WHERE {kmatch})
         FROM first f",
        hrow = json_object_expr("h", &cols),
        hist = l.history_name,
        table = l.table_name,
        kmatch = key_match(&l.key_columns, "t", "k"),
    );
    key_rows(&sql, &[at.into()]).into_iter().map(|(k, then, now, _)| (k, then, now)).collect()
}

/// What undoing some of main's history entries puts back: for each key the entries matching `entries`
/// (a condition on history `h`, with `args`) changed, (key, the row before the first of them, the row
/// now, whether a later entry by anyone else changed it since). UNDO MERGE and UNDO AGENT.
fn undo_rows(l: &Layout, entries: &str, args: &[pgrx::datum::DatumWithOid]) -> Vec<(Value, Option<Value>, Option<Value>, bool)> {
    let cols = live_columns(l.relid);
    let kobj = json_object_expr("h", &l.key_columns);
    let sql = format!(
        "WITH m AS (SELECT * FROM {hist} h WHERE {entries}),
              first AS (SELECT DISTINCT ON ({kobj}::text) {kobj} AS k, h._w_op AS op, {hrow} AS row
                        FROM m h ORDER BY {kobj}::text, h._w_hseq),
              last AS (SELECT {kobj}::text AS kt, max(h._w_hseq) AS hseq FROM m h GROUP BY 1)
         SELECT f.k, CASE WHEN f.op = 'I' THEN NULL ELSE f.row END,
                (SELECT to_jsonb(t.*) FROM {table} t, jsonb_populate_record(NULL::{table}, f.k) kk WHERE {kmatch}),
                EXISTS (SELECT 1 FROM {hist} h JOIN last ON last.kt = {kobj}::text
                        WHERE last.kt = f.k::text AND h._w_hseq > last.hseq)
         FROM first f",
        hist = l.history_name,
        hrow = json_object_expr("h", &cols),
        table = l.table_name,
        kmatch = key_match(&l.key_columns, "t", "kk"),
    );
    key_rows(&sql, args)
}

/// Rows of (key object, a row, another row, a flag) from a query returning them in that order (the
/// flag is false when the query has no fourth column).
fn key_rows(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> Vec<(Value, Option<Value>, Option<Value>, bool)> {
    Spi::connect(|c| {
        c.fresh(sql, None, args)
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .map(|r| {
                (
                    r.get::<JsonB>(1).ok().flatten().map(|j| j.0).unwrap_or(Value::Null),
                    r.get::<JsonB>(2).ok().flatten().map(|j| j.0),
                    r.get::<JsonB>(3).ok().flatten().map(|j| j.0),
                    r.get::<bool>(4).ok().flatten().unwrap_or(false),
                )
            })
            .collect()
    })
}

/// RESTORE WORLD name TO when | TO CHECKPOINT 'label'. `when` is already a moment's text.
pub fn restore(name: &str, when: Option<String>, checkpoint: Option<String>) -> String {
    crate::api::refuse_in_transaction("RESTORE WORLD");
    let _timer = crate::metrics::time(crate::metrics::Timed::Restore);
    as_internal(|| {
        let world = crate::world::resolve_world(name);
        crate::governance::agents::require("restore", Some(world.num));
        let at: String = match (&when, &checkpoint) {
            (_, Some(label)) => crate::spi_calls::get_one_with_args::<String>(
                "SELECT at::text FROM worlds.checkpoint WHERE world = $1 AND label = $2",
                &[world.num.into(), label.clone().into()],
            )
            .ok()
            .flatten()
            .unwrap_or_else(|| raise("22023", format!("world {} has no checkpoint '{label}'", world.name))),
            (Some(w), None) => w.clone(),
            (None, None) => raise("42601", "RESTORE WORLD needs TO when or TO CHECKPOINT 'label'"),
        };
        // inside the history window (22023), and not before the world's last rebase (55000)
        crate::spi_calls::get_one_with_args::<String>("SELECT worlds._in_window($1::timestamptz)::text", &[at.clone().into()]).ok();
        if world.num != 0 {
            // (as 'name@when' reads it: 22023 before the world existed)
            let (before_created, before_rebase) = Spi::connect(|c| {
                c.fresh(
                    "SELECT created > $2::timestamptz, coalesce(rebased > $2::timestamptz, false) FROM worlds.world WHERE num = $1",
                    None,
                    &[world.num.into(), at.clone().into()],
                )
                .ok()
                .and_then(|r| r.into_iter().next().map(|r| (r.get::<bool>(1).ok().flatten(), r.get::<bool>(2).ok().flatten())))
            })
            .map(|(c, r)| (c.unwrap_or(false), r.unwrap_or(false)))
            .unwrap_or((false, false));
            if before_created {
                raise("22023", format!("world \"{}\" did not exist yet at {at}", world.name));
            }
            if before_rebase {
                raise(
                    "55000",
                    format!("{} is before world {}'s last rebase: put back on the new fork point, the old rows would undo at its merge what the parent changed in between", at, world.name),
                );
            }
        }
        let mut plan = Vec::new();
        // (each table's locks kept only when the plan has rows of it)
        plan_keyed_tables(&mut plan, |l, plan| {
            let rows = if world.num == 0 { main_changes_since(l, &at) } else { world_changes_since(l, world.num, &at) };
            for (k, then, now) in rows {
                if then != now {
                    plan.push(planned(l, key_text_of(&k, &l.key_columns), k, now, then));
                }
            }
        });
        let n = if world.num == 0 {
            apply_plan(&plan, None)
        } else {
            with_world(world_by_num(world.num), || apply_plan(&plan, None))
        };
        crate::governance::agents::audit("restore", &world.name, Some(n as i64));
        format!("RESTORE {n}")
    })
}

/// For a world: each key its own layer wrote since `at` — (key, the row it saw then, the row it sees now).
fn world_changes_since(l: &std::rc::Rc<Layout>, num: i32, at: &str) -> Vec<(Value, Option<Value>, Option<Value>)> {
    let cols = live_columns(l.relid);
    let kobj_d = json_object_expr("d", &l.key_columns);
    // the latest version of each key written at or before `at`, and whether it was written after
    let sql = format!(
        "SELECT k, (SELECT CASE WHEN d2._w_del THEN NULL ELSE {drow2} END FROM {delta} d2
                    WHERE d2._w_world = $1 AND {kobj_d2}::text = x.k::text AND d2._w_at <= $2::timestamptz
                    ORDER BY d2._w_dseq DESC LIMIT 1),
                EXISTS (SELECT 1 FROM {delta} d3 WHERE d3._w_world = $1 AND {kobj_d3}::text = x.k::text AND d3._w_at <= $2::timestamptz)
         FROM (SELECT DISTINCT {kobj_d} AS k FROM {delta} d WHERE d._w_world = $1 AND d._w_at > $2::timestamptz) x",
        delta = l.delta_name,
        drow2 = json_object_expr("d2", &cols),
        kobj_d2 = json_object_expr("d2", &l.key_columns),
        kobj_d3 = json_object_expr("d3", &l.key_columns),
    );
    let rows: Vec<(Value, Option<Value>, bool)> = Spi::connect(|c| {
        c.fresh(&sql, None, &[num.into(), at.into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .map(|r| {
                (
                    r.get::<JsonB>(1).ok().flatten().map(|j| j.0).unwrap_or(Value::Null),
                    r.get::<JsonB>(2).ok().flatten().map(|j| j.0),
                    r.get::<bool>(3).ok().flatten().unwrap_or(false),
                )
            })
            .collect()
    });
    if rows.is_empty() {
        return Vec::new();
    }
    let keys: Vec<Value> = rows.iter().map(|r| r.0.clone()).collect();
    let w = world_by_num(num);
    let now = with_world(w.clone(), || crate::merge::read_rows(l, &keys));
    // keys the world hadn't written by then read as its parent did at the fork
    let unwritten: Vec<Value> = rows.iter().filter(|r| !r.2).map(|r| r.0.clone()).collect();
    let base = if unwritten.is_empty() {
        Default::default()
    } else {
        with_world(w.as_ref().and_then(base_of), || crate::merge::read_rows(l, &unwritten))
    };
    rows.into_iter()
        .map(|(k, then, written)| {
            let t = k.to_string();
            let then = if written { then } else { base.get(&t).cloned() };
            (k, then, now.get(&t).cloned())
        })
        .collect()
}

/// UNDO MERGE [OF] [WORLD] name [SKIP CHANGED]: puts back in main every row the world's latest merge
/// changed; rows changed again since refuse it (40001, naming up to 10) unless SKIP CHANGED.
pub fn undo_merge(name: &str, skip_changed: bool) -> String {
    crate::api::refuse_in_transaction("UNDO MERGE");
    let _timer = crate::metrics::time(crate::metrics::Timed::Undo);
    if name.contains('@') {
        crate::world::refuse_moment(name);
    }
    as_internal(|| {
        crate::governance::agents::require("undo", None);
        // the merged world is usually gone: its name still works
        let found = Spi::connect(|c| {
            c.fresh(
                "SELECT w.id, w.name, e.at >= now() - worlds.history_retention(), e.event, e.xid::text
                 FROM worlds.world w JOIN worlds.event e ON e.world = w.num
                 WHERE (w.name = $1 OR w.id = $1) AND e.event LIKE 'merged %into %'
                 ORDER BY e.seq DESC LIMIT 1",
                None,
                &[name.into()],
            )
            .ok()
            .and_then(|r| {
                r.into_iter().next().map(|r| {
                    (
                        r.get::<String>(1).ok().flatten().unwrap_or_default(),
                        r.get::<String>(2).ok().flatten().unwrap_or_default(),
                        r.get::<bool>(3).ok().flatten().unwrap_or(false),
                        r.get::<String>(4).ok().flatten().unwrap_or_default(),
                        r.get::<String>(5).ok().flatten(),
                    )
                })
            })
        });
        let Some((id, wname, in_window, event, xid)) = found else {
            raise("22023", format!("no merge of {name} within the history window"));
        };
        if !in_window {
            raise("22023", format!("no merge of {wname} within the history window"));
        }
        // a merge that brought schema (tables, views, functions the world made): its objects aren't put back
        let schema = crate::spi_calls::get_one_with_args::<i64>(
            "SELECT e.rows FROM worlds.world w JOIN worlds.event e ON e.world = w.num
             WHERE w.id = $1 AND e.event = 'schema' AND e.xid::text = $2",
            &[id.as_str().into(), xid.clone().unwrap_or_default().into()],
        )
        .ok()
        .flatten();
        if let Some(n) = schema {
            crate::api::raise_with(
                "0A000",
                format!(
                    "UNDO MERGE of {wname} is not supported: that merge brought schema ({} the world made), which UNDO MERGE doesn't take back",
                    if n == 1 { "1 object".to_string() } else { format!("{n} objects") }
                ),
                None,
                Some("Drop the objects it brought and RESTORE the rows, or make the change again in a new world.".into()),
            );
        }
        if !event.ends_with("into main") {
            let target = event.rsplit_once(" into ").map(|(_, t)| t.to_string()).unwrap_or_default();
            return undo_merge_into_world(&wname, &target, xid, skip_changed);
        }
        let mut plan = Vec::new();
        let mut changed_since = Vec::new();
        // (each table's locks kept only when the plan has rows of it)
        plan_keyed_tables(&mut plan, |l, plan| {
            // the merge's own entries: the latest transaction that wrote main with this world as source
            let hist = &l.history_name;
            let rows = undo_rows(
                l,
                &format!("h._w_src = $1 AND h._w_xid = (SELECT max(_w_xid) FROM {hist} WHERE _w_src = $1)"),
                &[id.clone().into()],
            );
            for (k, before, now, again) in rows {
                let key = key_text_of(&k, &l.key_columns);
                if again {
                    changed_since.push(format!("{}/{}", short_name(&l.table_name), key));
                    continue;
                }
                if before != now {
                    plan.push(planned(l, key, k, now, before));
                }
            }
        });
        if !skip_changed {
            refuse_changed_since(&wname, &changed_since);
        }
        let n = apply_plan(&plan, None);
        crate::governance::agents::audit("undo merge", &wname, Some(n as i64));
        format!("UNDO MERGE {n}")
    })
}

/// UNDO MERGE of a merge into another world: that world's versions written by the merge's transaction
/// are replaced by what the world had before them (its own earlier version, or what it stood on), as an
/// ordinary write in the world. Rows the world changed again since: 40001 unless SKIP CHANGED.
fn undo_merge_into_world(merged: &str, target_name: &str, xid: Option<String>, skip_changed: bool) -> String {
    let Some(xid) = xid else {
        raise("22023", format!("the merge of {merged} into {target_name} was not recorded with its transaction; it can't be undone"));
    };
    let num = crate::spi_calls::get_one_with_args::<i32>("SELECT num FROM worlds.world WHERE name = $1 AND dropped IS NULL", &[target_name.into()])
        .ok()
        .flatten()
        .unwrap_or_else(|| raise("3D000", format!("world \"{target_name}\" that {merged} was merged into no longer exists")));
    let Some(target) = world_by_num(num) else { raise("3D000", format!("world \"{target_name}\" does not exist")) };
    // what the world stood on: its parent world as of its fork, or main as of its fork
    let beneath = target.at_fork(-2_000_000 - target.num);
    let mut plan = Vec::new();
    let mut changed_since = Vec::new();
    // (each table's locks kept only when the plan has rows of it)
    plan_keyed_tables(&mut plan, |l, plan| {
        let cols = live_columns(l.relid);
        let kobj = json_object_expr("d", &l.key_columns);
        let sql = format!(
            "WITH m AS (SELECT {kobj} AS k, d._w_dseq FROM {delta} d WHERE d._w_world = $1 AND d._w_xid = $2::xid8),
                  keys AS (SELECT k, min(_w_dseq) AS first, max(_w_dseq) AS last FROM m GROUP BY k)
             SELECT keys.k,
                    (SELECT CASE WHEN d._w_del THEN NULL ELSE {drow} END FROM {delta} d
                      WHERE d._w_world = $1 AND {kobj}::text = keys.k::text AND d._w_dseq < keys.first ORDER BY d._w_dseq DESC LIMIT 1),
                    EXISTS (SELECT 1 FROM {delta} d WHERE d._w_world = $1 AND {kobj}::text = keys.k::text AND d._w_dseq < keys.first),
                    EXISTS (SELECT 1 FROM {delta} d WHERE d._w_world = $1 AND {kobj}::text = keys.k::text AND d._w_dseq > keys.last)
             FROM keys",
            delta = l.delta_name,
            drow = json_object_expr("d", &cols),
        );
        let rows: Vec<(Value, Option<Value>, bool, bool)> = Spi::connect(|c| {
            c.fresh(&sql, None, &[num.into(), xid.as_str().into()])
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                .map(|r| {
                    (
                        r.get::<JsonB>(1).ok().flatten().map(|j| j.0).unwrap_or(Value::Null),
                        r.get::<JsonB>(2).ok().flatten().map(|j| j.0),
                        r.get::<bool>(3).ok().flatten().unwrap_or(false),
                        r.get::<bool>(4).ok().flatten().unwrap_or(false),
                    )
                })
                .collect()
        });
        if rows.is_empty() {
            return;
        }
        let keys: Vec<Value> = rows.iter().map(|r| r.0.clone()).collect();
        let now = with_world(Some(target.clone()), || crate::merge::read_rows(l, &keys));
        let unwritten: Vec<Value> = rows.iter().filter(|r| !r.2).map(|r| r.0.clone()).collect();
        let under = if unwritten.is_empty() { Default::default() } else { with_world(Some(beneath.clone()), || crate::merge::read_rows(l, &unwritten)) };
        for (k, own_before, had_own, again) in rows {
            let key = key_text_of(&k, &l.key_columns);
            if again {
                changed_since.push(format!("{}/{}", short_name(&l.table_name), key));
                continue;
            }
            let t = k.to_string();
            let before = if had_own { own_before } else { under.get(&t).cloned() };
            let current = now.get(&t).cloned();
            if before != current {
                plan.push(planned(l, key, k, current, before));
            }
        }
    });
    if !skip_changed {
        refuse_changed_since(&format!("{merged} into {target_name}"), &changed_since);
    }
    let n = with_world(Some(target), || apply_plan(&plan, None));
    crate::governance::agents::audit("undo merge", merged, Some(n as i64));
    format!("UNDO MERGE {n}")
}

/// UNDO MERGE without SKIP CHANGED: rows changed again since the merge refuse it (40001, naming up to 10).
fn refuse_changed_since(merge: &str, changed_since: &[String]) {
    if changed_since.is_empty() {
        return;
    }
    let shown = changed_since.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    raise_with(
        "40001",
        format!("undoing the merge of {merge}: rows changed again since: {shown}; nothing was undone"),
        None,
        Some("UNDO MERGE ... SKIP CHANGED leaves those rows and undoes the rest.".into()),
    );
}
