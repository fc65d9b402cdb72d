//! `worlds.max_disk_bytes`: past it, CREATE WORLD (FORK WORLD) and writes in worlds fail with 53100; main's
//! own writes never do (main stays stock). The size compared is SHOW DISK's total: the database as
//! `pg_database_size` counts it plus the WAL kept (`pg_ls_waldir`, read as pg_worlds' internal work: it
//! needs pg_monitor). Measuring stats every file of the database, so a session measures at most once every
//! `MEASURE_EVERY` and acts on that figure in between: a world's write pays a setting's read and, with a
//! limit set, a clock read.
use crate::api::raise;
use pgrx::prelude::*;
use std::cell::Cell;
use std::time::{Duration, Instant};
use crate::backend_local::BackendLocal;

/// How long a session acts on a size it measured before measuring again (docs/sql.md: the guarantee).
pub const MEASURE_EVERY: Duration = Duration::from_secs(5);

/// The latest measurement: (database, total bytes, when)
static MEASURED: BackendLocal<Cell<Option<(pg_sys::Oid, i64, Instant)>>> = BackendLocal::new(Cell::new(None));

/// What the database takes on disk now: its files (`pg_database_size`) and the WAL the server keeps.
#[derive(Clone, Copy, Debug)]
pub struct DiskUse {
    pub database: i64,
    pub log: i64,
}

impl DiskUse {
    pub fn total(&self) -> i64 {
        self.database.saturating_add(self.log)
    }
}

/// Measures now (and keeps the figure for the write checks of the next `MEASURE_EVERY`).
pub fn measure() -> DiskUse {
    let (database, log) = super::as_internal(|| {
        Spi::connect(|c| {
            let t = c
                .select(
                    "SELECT pg_catalog.pg_database_size(pg_catalog.current_database())::int8,
                            (SELECT coalesce(sum(w.size), 0)::int8 FROM pg_catalog.pg_ls_waldir() w)",
                    None,
                    &[],
                )
                .unwrap_or_else(|e| raise("XX000", format!("measuring the database's size: {e}")));
            let row = t.first();
            (row.get::<i64>(1).ok().flatten().unwrap_or(0), row.get::<i64>(2).ok().flatten().unwrap_or(0))
        })
    });
    let used = DiskUse { database, log };
    MEASURED.with(|m| m.set(Some((unsafe { pg_sys::MyDatabaseId }, used.total(), Instant::now()))));
    used
}

/// `worlds.max_disk_bytes` in bytes; 0 for no limit.
pub fn limit() -> i64 {
    let v = crate::guc::MAX_DISK_BYTES.get();
    if v >= 1.0 {
        v.round() as i64
    } else {
        0
    }
}

/// The total as last measured in this session, measured again when older than `MEASURE_EVERY`.
fn recent_total() -> i64 {
    let db = unsafe { pg_sys::MyDatabaseId };
    match MEASURED.with(|m| m.get()) {
        Some((d, total, at)) if d == db && at.elapsed() < MEASURE_EVERY => total,
        _ => measure().total(),
    }
}

/// Fails with 53100 when the database is past `worlds.max_disk_bytes`; `what` names what was refused.
fn check(what: impl FnOnce() -> String) {
    let limit = limit();
    if limit == 0 {
        return;
    }
    let total = recent_total();
    if total > limit {
        crate::api::raise_with(
            "53100",
            format!(
                "{}: the database uses {total} bytes on disk, over worlds.max_disk_bytes ({limit} bytes): drop worlds (SHOW STORAGE shows what each holds) or purge history (worlds.purge_history)",
                what()
            ),
            Some("The size is SHOW DISK's total: the database's files and the WAL kept. Main's own writes are not refused.".into()),
            None,
        );
    }
}

/// A write in a world (a statement the router sends there, a COPY into it): refused past the limit.
pub fn check_world_write(world: &str) {
    check(|| format!("cannot write in world \"{world}\""))
}

/// SIMULATE, whose worlds are made without CREATE WORLD: refused past the limit before any is made.
pub fn check_simulate(prefix: &str) {
    check(|| format!("cannot SIMULATE worlds {prefix}_*"))
}

/// `worlds._check_disk_limit(name)`: CREATE WORLD / FORK WORLD (catalog/lifecycle.sql) refused past the limit.
#[pg_extern(volatile, parallel_unsafe)]
fn _check_disk_limit(name: Option<&str>) {
    check(|| format!("cannot create world \"{}\"", name.unwrap_or_default()))
}
