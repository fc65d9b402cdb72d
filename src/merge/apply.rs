//! The merge's apply step: set-based DELETE / INSERT / UPDATE in foreign-key order, into main (as the
//! session's role, capture recording the world as source) or into another world (through its overlay).
use crate::spi_calls::Fresh;
use super::*;

/// Foreign-key depth of each table among the tracked ones: referenced tables first.
pub(super) fn fk_depth() -> HashMap<pg_sys::Oid, i32> {
    Spi::connect(|c| {
        c.fresh(
            "WITH RECURSIVE d(rel, depth) AS (
                 SELECT relid::oid, 0 FROM worlds.tables
                 UNION ALL
                 SELECT c.conrelid, d.depth + 1 FROM pg_constraint c JOIN d ON c.confrelid = d.rel
                 WHERE c.contype = 'f' AND c.conrelid <> c.confrelid AND d.depth < 50)
             SELECT rel, max(depth) FROM d GROUP BY rel",
            None,
            &[],
        )
        .map(|r| {
            r.into_iter()
                .filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok()??, r.get::<i32>(2).ok()??)))
                .collect()
        })
        .unwrap_or_default()
    })
}

/// Applies the settled rows to main: deletes children-first, then inserts and updates parents-first,
/// one set-based statement per table and kind. Returns the rows applied.
pub(super) fn apply(plan: &[Planned], world: &World) -> usize {
    apply_plan(plan, Some(world.id.clone()))
}

/// Writes each planned row's result where the row is now `theirs` (the reader's table: main, or a world
/// under `with_world`). History records `source` as where the changes came from.
pub fn apply_plan(plan: &[Planned], source: Option<String>) -> usize {
    with_merge_source(source, || apply_rows(plan))
}

/// Runs f with history recording `source` as where the changes it captures came from.
pub(super) fn with_merge_source<R>(source: Option<String>, f: impl FnOnce() -> R) -> R {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            MERGE_SOURCE.with(|s| *s.borrow_mut() = None);
        }
    }
    MERGE_SOURCE.with(|s| *s.borrow_mut() = source);
    let _g = Guard;
    f()
}

fn apply_rows(plan: &[Planned]) -> usize {
    let depth = fk_depth();
    let mut by_table: Vec<(pg_sys::Oid, &std::rc::Rc<Layout>, String)> = Vec::new();
    for p in plan {
        if !by_table.iter().any(|(r, _, _)| *r == p.layout.relid) {
            by_table.push((p.layout.relid, &p.layout, p.table.clone()));
        }
    }
    by_table.sort_by_key(|(r, _, _)| (depth.get(r).copied().unwrap_or(0), r.to_u32()));
    let mut applied = 0usize;
    // (the plan's rows, not copies: typed.rs reads them into arrays, or copies them into JSON)
    static NULL: Value = Value::Null;
    let rows_of = |relid: pg_sys::Oid, pred: &dyn Fn(&Planned) -> bool| -> Vec<&Value> {
        plan.iter()
            .filter(|p| p.layout.relid == relid && p.decision.result != p.row.theirs && pred(p))
            .map(|p| p.decision.result.as_ref().or(p.row.theirs.as_ref()).unwrap_or(&NULL))
            .collect()
    };
    // deletes, children first
    for (relid, layout, table) in by_table.iter().rev() {
        let rows = rows_of(*relid, &|p| p.decision.result.is_none());
        if rows.is_empty() {
            continue;
        }
        let sql = if layout.key_kind == b'r' {
            // by physical row (its current tid), and only while it still holds what the plan saw there
            if crate::storage::overlay::override_active() && crate::storage::overlay::routing_world().is_some() {
                raise("0A000", format!("merging rows of {table} (a table without a primary key) that a world removed into another world is not supported yet"));
            }
            let rows: Vec<Value> = plan
                .iter()
                .filter(|p| p.layout.relid == *relid && p.decision.result.is_none() && p.row.theirs.is_some() && p.row.key_obj.get("_w_ctid").is_some())
                .map(|p| serde_json::json!({ "ctid": p.row.key_obj["_w_ctid"], "row": p.row.theirs }))
                .collect();
            let sql = format!(
                "DELETE FROM ONLY {table} t USING jsonb_array_elements($1) _w_e WHERE t.ctid = (_w_e->>'ctid')::tid AND {} = _w_e->'row'",
                json_object_expr("t", &live_columns(*relid))
            );
            applied += run_dml(&sql, rows);
            continue;
        } else {
            // (by key: typed arrays of the key's columns where they are plain, typed.rs)
            let key: Vec<&String> = layout.key_columns.iter().collect();
            let (from, args) = super::typed::rows_source(table, *relid, rows, &key, 1);
            (format!("DELETE FROM {table} t USING {from} WHERE {}", key_match(&layout.key_columns, "t", "r")), args)
        };
        applied += run_dml_args(&sql.0, &sql.1);
    }
    for (relid, layout, table) in by_table.iter() {
        let cols = table_columns(*relid, true);
        let col_list = crate::sql_text::column_list(&cols);
        let inserts = rows_of(*relid, &|p| p.decision.result.is_some() && p.row.theirs.is_none());
        // each from its rows as a FROM item `r` (typed.rs: arrays of the columns' types where the values
        // are plain, else jsonb_populate_recordset), its parameters numbered from `param`
        let all_cols: Vec<&String> = cols.iter().collect();
        let insert = |rows: Vec<&Value>, param: usize| {
            let (from, args) = super::typed::rows_source(table, *relid, rows, &all_cols, param);
            (format!("INSERT INTO {table} ({col_list}) OVERRIDING SYSTEM VALUE SELECT {col_list} FROM {from}"), args)
        };
        let updates = rows_of(*relid, &|p| p.decision.result.is_some() && p.row.theirs.is_some());
        let set_cols: Vec<&String> = cols.iter().filter(|c| !layout.key_columns.contains(c)).collect();
        let update_cols: Vec<&String> = layout.key_columns.iter().chain(set_cols.iter().copied()).collect();
        let update = |rows: Vec<&Value>, param: usize| {
            let (from, args) = super::typed::rows_source(table, *relid, rows, &update_cols, param);
            (
                format!(
                    "UPDATE {table} t SET ({}) = ROW({}) FROM {from} WHERE {}",
                    crate::sql_text::column_list(&set_cols),
                    set_cols.iter().map(|c| format!("r.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
                    key_match(&layout.key_columns, "t", "r")
                ),
                args,
            )
        };
        let updates = if set_cols.is_empty() { Vec::new() } else { updates };
        let into_world = crate::storage::overlay::override_active() && crate::storage::overlay::routing_world().is_some();
        if !inserts.is_empty() && !updates.is_empty() && !into_world {
            // one statement, its updates first: a unique value moved from an updated row to a new one merges
            // (the updates free it first), and so does an updated row referencing a new one (a foreign key is
            // checked at the statement's end). The insert waits on the updates' count, so they run first.
            let (u, mut args) = update(updates, 1);
            let (i, more) = insert(inserts, args.len() + 1);
            args.extend(more);
            let sql = format!(
                "WITH _w_u AS ({u} RETURNING 1), _w_i AS ({i} WHERE (SELECT count(*) FROM _w_u) >= 0 RETURNING 1)
                 SELECT (SELECT count(*) FROM _w_u) + (SELECT count(*) FROM _w_i)"
            );
            applied += run_dml_counted(&sql, &args);
            continue;
        }
        if !inserts.is_empty() {
            let (sql, args) = insert(inserts, 1);
            applied += run_dml_args(&sql, &args);
        }
        if !updates.is_empty() {
            let (sql, args) = update(updates, 1);
            applied += run_dml_args(&sql, &args);
        }
    }
    applied
}

/// Runs a statement that returns the number of rows it changed.
pub(super) fn run_dml_counted(sql: &str, args: &[DatumWithOid]) -> usize {
    crate::storage::as_session_user(|| {
        Spi::connect_mut(|c| {
            c.update(sql, None, args)
                .and_then(|t| t.first().get::<i64>(1))
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                .unwrap_or(0) as usize
        })
    })
}

/// A merge into another world: the plan applied through that world's overlays, then the foreign keys the
/// merged rows take part in checked there, as Postgres checks them for a merge into main (a world's writes
/// are not checked at write time). O(rows merged): only the merged rows and the rows that reference them.
pub(super) fn apply_into_world(plan: &[Planned], world: &World, target: &World) -> usize {
    with_world(Some(target.clone()), || {
        let applied = crate::storage::write_events::as_merge_writes(|| apply(plan, world));
        check_foreign_keys(plan);
        applied
    })
}

/// 23503, worded as Postgres words it, when a merged row references a row the world merged into lacks,
/// or a row the merge deleted (or re-keyed) is still referenced there. Runs routed into that world.
pub(super) fn check_foreign_keys(plan: &[Planned]) {
    let relids: Vec<pg_sys::Oid> = {
        let mut r: Vec<pg_sys::Oid> = Vec::new();
        for p in plan {
            if !r.contains(&p.layout.relid) {
                r.push(p.layout.relid);
            }
        }
        r
    };
    if relids.is_empty() {
        return;
    }
    // (conname, child, parent, child columns, parent columns) of every foreign key the tables take part in
    type ForeignKey = (String, pg_sys::Oid, pg_sys::Oid, Vec<String>, Vec<String>);
    let keys: Vec<ForeignKey> = Spi::connect(|c| {
        c.fresh(
            "SELECT c.conname::text, c.conrelid, c.confrelid,
                    (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY k(n, ord)
                       JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n),
                    (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.confkey) WITH ORDINALITY k(n, ord)
                       JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n)
             FROM pg_constraint c WHERE c.contype = 'f' AND (c.conrelid = ANY($1) OR c.confrelid = ANY($1))
               AND c.conrelid IN (SELECT relid FROM worlds.tables) AND c.confrelid IN (SELECT relid FROM worlds.tables)
             ORDER BY c.conname",
            None,
            &[relids.into()],
        )
        .map(|rows| {
            rows.filter_map(|r| {
                Some((r.get::<String>(1).ok()??, r.get::<pg_sys::Oid>(2).ok()??, r.get::<pg_sys::Oid>(3).ok()??, r.get::<Vec<String>>(4).ok()??, r.get::<Vec<String>>(5).ok()??))
            })
            .collect()
        })
        .unwrap_or_default()
    });
    let name_of = |relid: pg_sys::Oid| relation_layout_of(relid).map(|l| l.table_name.clone()).unwrap_or_default();
    let short = |relid: pg_sys::Oid| short_name(&name_of(relid));
    for (conname, child, parent, ccols, pcols) in keys {
        let (child_t, parent_t) = (name_of(child), name_of(parent));
        let eq = |a: &str, ac: &[String], b: &str, bc: &[String]| {
            ac.iter().zip(bc).map(|(x, y)| format!("{a}.{} = {b}.{}", quote_ident(x), quote_ident(y))).collect::<Vec<_>>().join(" AND ")
        };
        let text_of = |alias: &str, cols: &[String]| {
            format!("concat_ws(', ', {})", cols.iter().map(|c| format!("{alias}.{}::text", quote_ident(c))).collect::<Vec<_>>().join(", "))
        };
        // merged rows of the child: each reference (all its columns non-null, MATCH SIMPLE) finds its row
        let written: Vec<Value> = plan.iter().filter(|p| p.layout.relid == child).filter_map(|p| p.decision.result.clone()).collect();
        if !written.is_empty() {
            let sql = format!(
                "SELECT {} FROM jsonb_populate_recordset(NULL::{child_t}, $1) r WHERE {} AND NOT EXISTS (SELECT 1 FROM {parent_t} p WHERE {}) LIMIT 1",
                text_of("r", &ccols),
                ccols.iter().map(|c| format!("r.{} IS NOT NULL", quote_ident(c))).collect::<Vec<_>>().join(" AND "),
                eq("p", &pcols, "r", &ccols),
            );
            if let Some(missing) = crate::spi_calls::get_one_with_args::<String>(&sql, &[JsonB(Value::Array(written)).into()]).ok().flatten() {
                crate::api::raise_with(
                    "23503",
                    format!("insert or update on table \"{}\" violates foreign key constraint \"{conname}\"", short(child)),
                    Some(format!("Key ({})=({missing}) is not present in table \"{}\".", ccols.join(", "), short(parent))),
                    None,
                );
            }
        }
        // rows of the parent the merge removed or changed: nothing still references what they were
        let replaced: Vec<Value> = plan
            .iter()
            .filter(|p| p.layout.relid == parent && p.row.theirs.is_some() && p.decision.result != p.row.theirs)
            .filter_map(|p| p.row.theirs.clone())
            .collect();
        if !replaced.is_empty() {
            let sql = format!(
                "SELECT {} FROM jsonb_populate_recordset(NULL::{parent_t}, $1) r
                 WHERE NOT EXISTS (SELECT 1 FROM {parent_t} p WHERE {})
                   AND EXISTS (SELECT 1 FROM {child_t} c WHERE {}) LIMIT 1",
                text_of("r", &pcols),
                eq("p", &pcols, "r", &pcols),
                eq("c", &ccols, "r", &pcols),
            );
            if let Some(held) = crate::spi_calls::get_one_with_args::<String>(&sql, &[JsonB(Value::Array(replaced)).into()]).ok().flatten() {
                crate::api::raise_with(
                    "23503",
                    format!("update or delete on table \"{}\" violates foreign key constraint \"{conname}\" on table \"{}\"", short(parent), short(child)),
                    Some(format!("Key ({})=({held}) is still referenced from table \"{}\".", pcols.join(", "), short(child))),
                    None,
                );
            }
        }
    }
}

/// The layout of a tracked table by its relid.
pub(super) fn relation_layout_of(relid: pg_sys::Oid) -> Option<std::rc::Rc<Layout>> {
    let tabno = crate::spi_calls::get_one_with_args::<i32>("SELECT tabno FROM worlds.tables WHERE relid = $1", &[relid.into()]).ok().flatten()?;
    Some(relation_layout(tabno))
}

/// Runs DML with these arguments as the session's user (its privileges and RLS apply); the rows it changed.
pub(super) fn run_dml_args(sql: &str, args: &[DatumWithOid]) -> usize {
    crate::storage::as_session_user(|| {
        Spi::connect_mut(|c| c.update(sql, None, args).map(|t| t.len()).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}"))))
    })
}

/// Runs DML over a JSON array of rows as the session's user (so the role's privileges and RLS on main
/// apply to its merge), outside pg_worlds' internal rights.
pub(super) fn run_dml(sql: &str, rows: Vec<Value>) -> usize {
    let arg: DatumWithOid = JsonB(Value::Array(rows)).into();
    crate::storage::as_session_user(|| {
        Spi::connect_mut(|c| c.update(sql, None, &[arg]).map(|t| t.len()).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}"))))
    })
}

// ---------------------------------------------------------------- REBASE
