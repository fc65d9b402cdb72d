//! SHOW HISTORY of main: main's own writes since a moment, read from the history of every tracked table
//! (dropped ones too), one table at a time.
//!
//! Main pays nothing in worlds.event for its writes: SHOW HISTORY finds them in the tables' histories
//! (their `changes` views). Read in one query over every table's view, 2,000 tracked tables took some
//! 10,000 locks at once (each view's history, inserts and their indexes) and the statement failed with
//! "out of shared memory", as would any other session of the cluster needing a lock just then. Here
//! each table is read in a subtransaction of its own, rolled back once read: its locks go with it.
use pgrx::prelude::*;
use std::collections::HashMap;

/// `worlds._main_writes_parts(since)`: per transaction of main (`_w_xid`) and moment of its statements
/// (`_w_at`), the rows it changed since `since` in every tracked table, not counting what merges brought
/// in (`_w_src`). worlds._main_writes makes SHOW HISTORY's events of them.
#[pg_extern(volatile, parallel_unsafe)]
fn _main_writes_parts(
    since: TimestampWithTimeZone,
) -> TableIterator<'static, (name!(xid, String), name!(at, TimestampWithTimeZone), name!(rows, i64))> {
    let views: Vec<pg_sys::Oid> = crate::spi_calls::rows(
        "SELECT changes::oid FROM worlds.tables WHERE changes IS NOT NULL UNION ALL SELECT changes::oid FROM worlds.dropped_table",
        None,
        &[],
        |t| t.filter_map(|r| r.get::<pg_sys::Oid>(1).ok().flatten()).collect(),
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
    let mut parts: HashMap<(String, String), (TimestampWithTimeZone, i64)> = HashMap::new();
    for view in views {
        let read = crate::subxact::rolled_back(|| {
            unsafe { pg_sys::LockRelationOid(view, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
            // (its table dropped, and its history with it, before the lock)
            let Some(name) = crate::sql_text::QuotedName::of_relation(view) else { return Vec::new() };
            crate::spi_calls::rows(
                &format!("SELECT _w_xid::text, _w_at::text, _w_at, count(*) FROM {name} WHERE _w_at >= $1 AND _w_src IS NULL GROUP BY _w_xid, _w_at"),
                None,
                &[since.into()],
                |t| {
                    t.filter_map(|r| {
                        Some((
                            r.get::<String>(1).ok().flatten()?,
                            r.get::<String>(2).ok().flatten()?,
                            r.get::<TimestampWithTimeZone>(3).ok().flatten()?,
                            r.get::<i64>(4).ok().flatten()?,
                        ))
                    })
                    .collect::<Vec<_>>()
                },
            )
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
        })
        .unwrap_or_else(|e| crate::api::raise("XX000", e));
        for (xid, at_text, at, n) in read {
            parts.entry((xid, at_text)).or_insert((at, 0)).1 += n;
        }
    }
    TableIterator::new(parts.into_iter().map(|((xid, _), (at, n))| (xid, at, n)).collect::<Vec<_>>())
}
