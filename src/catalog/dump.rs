//! Worlds through pg_dump and back.
//!
//! A world's storage is bound to this cluster (row positions, transaction ids), so it isn't dumped. What
//! travels is each live world as its catalog row and its own changes (the rows DIFF lists), in the
//! portable tables `worlds.dumped_world` and `worlds.dumped_row`. Nothing keeps those filled while worlds
//! are written (that would cost every write): they are registered with `pg_extension_config_dump` with a
//! filter that pg_dump appends to its `COPY (SELECT ... FROM table <filter>)`, and the filter adds, at dump
//! time and in pg_dump's own snapshot, the rows `_portable_worlds()` / `_portable_rows()` compute. A
//! restore loads them into those tables; `worlds.restore_worlds()` (run by the first worlds statement or
//! SHOW WORLDS after the restore, or by hand) makes each world again, forked from what was restored, and
//! writes its changes into it.
use crate::spi_calls::Fresh;
use crate::api::raise;
use crate::merge;
use crate::world::resolve_world;
use crate::storage::{as_internal, overlay};
use pgrx::iter::TableIterator;
use pgrx::prelude::*;
use pgrx::{name, JsonB};
use serde_json::Value;

/// Every live world's own changes (as DIFF WORLD lists them: a world of a world against its parent as of
/// the fork), parents before their forks.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn _portable_rows() -> TableIterator<
    'static,
    (name!(world, String), name!(table_name, String), name!(change, String), name!(before, Option<JsonB>), name!(after, Option<JsonB>)),
> {
    let names: Vec<String> = Spi::connect(|c| {
        c.fresh("SELECT name FROM worlds.world WHERE dropped IS NULL AND num <> 0 ORDER BY depth, num", None, &[])
            .map(|r| r.into_iter().filter_map(|r| r.get::<String>(1).ok().flatten()).collect())
            .unwrap_or_default()
    });
    let mut out = Vec::new();
    // pg_dump runs with restrict_nonsystem_relation_kind = view: the views read here are pg_worlds' own
    let level = crate::storage::push_setting(c"restrict_nonsystem_relation_kind", c"");
    as_internal(|| {
        for name in names {
            let world = resolve_world(&name);
            for t in merge::own_changes(&world) {
                for r in t.rows.into_iter().filter(|r| r.base != r.ours) {
                    let change = match (&r.base, &r.ours) {
                        (None, _) => "insert",
                        (_, None) => "delete",
                        _ => "update",
                    };
                    out.push((name.clone(), t.name.clone(), change.to_string(), r.base.map(JsonB), r.ours.map(JsonB)));
                }
            }
        }
    });
    crate::storage::pop_setting(level);
    TableIterator::new(out)
}

/// Runs restore_worlds when a restore brought worlds not made yet (and this transaction may write).
pub fn restore_pending() {
    // (the catalog is pg_worlds' own: any role's worlds statement may find the worlds a restore brought)
    let pending = as_internal(|| {
        crate::spi_calls::get_one::<bool>(
            "SELECT EXISTS (SELECT 1 FROM worlds.dumped_world) AND NOT current_setting('transaction_read_only')::boolean",
        )
    })
    .ok()
    .flatten()
    .unwrap_or(false);
    if pending {
        restore_worlds();
    }
}

#[pg_extern]
fn _restore_pending() {
    restore_pending()
}

/// Makes again the worlds a restore brought (worlds.dumped_world / dumped_row), parents first, each
/// forked from its parent as restored, with its own changes written into it; returns how many. A world
/// whose name is taken, or whose parent didn't come back, is skipped with a WARNING (its rows are kept
/// out). Deletes of rows of a table without a key are written as the multiset they leave.
#[pg_extern]
fn restore_worlds() -> i64 {
    if unsafe { pg_sys::XactReadOnly } {
        raise("25006", "worlds from a restored dump are made in a transaction that can write: run SELECT worlds.restore_worlds() outside a read-only transaction");
    }
    let worlds: Vec<(String, Option<String>, Option<String>)> = as_internal(|| {
        Spi::connect_mut(|c| {
            c.update("LOCK TABLE worlds.dumped_world IN EXCLUSIVE MODE", None, &[]).ok();
            c.fresh("SELECT name, id, parent FROM worlds.dumped_world ORDER BY depth, name", None, &[])
                .map(|r| {
                    r.into_iter()
                        .filter_map(|r| Some((r.get::<String>(1).ok().flatten()?, r.get::<String>(2).ok().flatten(), r.get::<String>(3).ok().flatten())))
                        .collect()
                })
                .unwrap_or_default()
        })
    });
    // the worlds see what the restore loaded, and their parents' rows this transaction writes
    let snapshot: String = crate::spi_calls::get_one(
        "WITH s AS (SELECT pg_current_snapshot() AS s, pg_current_xact_id() AS me),
              m AS (SELECT greatest(pg_snapshot_xmax(s.s)::text::bigint, s.me::text::bigint + 1) AS xmax FROM s),
              x AS (SELECT x::text::bigint AS x FROM s, pg_snapshot_xip(s.s) x WHERE x <> s.me)
         SELECT format('%s:%s:%s', coalesce((SELECT min(x) FROM x), m.xmax), m.xmax,
                       coalesce((SELECT string_agg(x::text, ',' ORDER BY x) FROM x), ''))
         FROM m",
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    let mut made = 0;
    for (name, id, parent) in worlds {
        let num: Option<i32> = as_internal(|| {
            crate::spi_calls::get_one_with_args(
                "SELECT worlds._restore_world($1, $2, $3, $4::pg_snapshot)",
                &[name.as_str().into(), id.into(), parent.clone().unwrap_or_else(|| "main".into()).into(), snapshot.as_str().into()],
            )
            .ok()
            .flatten()
        });
        if let Some(num) = num {
            let world = overlay::world_by_num(num);
            let rows = changes_of(&name);
            // written as pg_worlds itself (a restore brings what the dump's owner could read), routed
            as_internal(|| {
                overlay::with_world(world, || {
                    for (table, items) in rows {
                        write_changes(&name, &table, &items);
                    }
                })
            });
            made += 1;
        }
        as_internal(|| {
            crate::spi_calls::run_with_args("DELETE FROM worlds.dumped_row WHERE world = $1", &[name.as_str().into()]).ok();
            crate::spi_calls::run_with_args("DELETE FROM worlds.dumped_world WHERE name = $1", &[name.as_str().into()]).ok();
        });
    }
    made
}

type Change = (String, Option<Value>, Option<Value>);

/// A restored world's changes, by table.
fn changes_of(world: &str) -> Vec<(String, Vec<Change>)> {
    let rows: Vec<(String, Change)> = as_internal(|| {
        Spi::connect(|c| {
            c.fresh(
                "SELECT table_name, change, before, after FROM worlds.dumped_row WHERE world = $1 ORDER BY table_name",
                None,
                &[world.into()],
            )
            .map(|r| {
                r.into_iter()
                    .map(|r| {
                        let table: String = r.get(1).ok().flatten().unwrap_or_default();
                        let change: String = r.get(2).ok().flatten().unwrap_or_default();
                        let before = r.get::<JsonB>(3).ok().flatten().map(|j| j.0);
                        let after = r.get::<JsonB>(4).ok().flatten().map(|j| j.0);
                        (table, (change, before, after))
                    })
                    .collect()
            })
            .unwrap_or_default()
        })
    });
    let mut out: Vec<(String, Vec<Change>)> = Vec::new();
    for (table, change) in rows {
        match out.last_mut() {
            Some((t, items)) if *t == table => items.push(change),
            _ => out.push((table, vec![change])),
        }
    }
    out
}

/// Writes a world's changes to one table, routed into the world (under with_world).
fn write_changes(world: &str, table: &str, items: &[Change]) {
    let Some(relid) = crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[table.into()]).ok().flatten() else {
        pgrx::warning!("world \"{world}\" from the restored dump changed table {table}, which the restore didn't bring; those changes are left out");
        return;
    };
    let Some(&tabno) = crate::storage::tracked_tables().get(&relid) else {
        pgrx::warning!("world \"{world}\" from the restored dump changed table {table}, which isn't tracked; those changes are left out");
        return;
    };
    let layout = crate::storage::relation_layout(tabno);
    let t = &layout.table_name;
    let insertable = merge::insertable_columns(relid);
    let cols = crate::sql_text::column_list(&insertable);
    let insert = format!("INSERT INTO {t} ({cols}) SELECT {cols} FROM jsonb_populate_record(NULL::{t}, $1)");
    let keyed = layout.key_kind != b'r';
    let match_cols: Vec<String> = if keyed { layout.key_columns.clone() } else { merge::live_columns(relid) };
    // (ROW on both sides: a sub-select may return one column only, and a key may have several)
    let matching = format!(
        "ROW({}) IS NOT DISTINCT FROM (SELECT ROW({}) FROM jsonb_populate_record(NULL::{t}, $1) r)",
        match_cols.iter().map(|c| format!("{t}.{}", crate::sql_text::quote_ident(c))).collect::<Vec<_>>().join(", "),
        match_cols.iter().map(|c| format!("r.{}", crate::sql_text::quote_ident(c))).collect::<Vec<_>>().join(", ")
    );
    let delete = format!("DELETE FROM {t} WHERE {matching}");
    let run = |sql: &str, row: &Value| {
        crate::spi_calls::run_with_args(sql, &[JsonB(row.clone()).into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: restoring world \"{world}\" (table {table}): {e}")));
    };
    if keyed {
        for (change, before, after) in items {
            if let (Some(b), true) = (before, change != "insert") {
                run(&delete, b);
            }
            if let Some(a) = after {
                run(&insert, a);
            }
        }
        return;
    }
    // a table without a key is a multiset: a row removed n times leaves (copies now) - n of it
    let mut removed: Vec<(Value, usize)> = Vec::new();
    for (_, before, after) in items {
        if let Some(b) = before {
            match removed.iter_mut().find(|(r, _)| r == b) {
                Some((_, n)) => *n += 1,
                None => removed.push((b.clone(), 1)),
            }
        }
        if let Some(a) = after {
            run(&insert, a);
        }
    }
    for (row, n) in removed {
        let copies: i64 = crate::spi_calls::get_one_with_args(&format!("SELECT count(*) FROM {t} WHERE {matching}"), &[JsonB(row.clone()).into()])
            .ok()
            .flatten()
            .unwrap_or(0);
        run(&delete, &row);
        for _ in 0..(copies - n as i64).max(0) {
            run(&insert, &row);
        }
    }
}
