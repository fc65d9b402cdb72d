//! When a tracked table gets the storage worlds write into (its delta).
//!
//! Tracking a table gives it what main's history needs (history, inserts, the capture triggers) and the
//! overlay views a session in a past moment of main reads through. The delta, where worlds keep their own
//! rows, comes only once the database has a world: until then main carries nothing of worlds' (no table
//! in `information_schema` with the table's generated columns, no copies of its CHECK constraints in
//! `pg_constraint`), and CREATE TABLE costs less.
//!
//! "Has a world" is: a world other than main was ever made (dropped worlds keep their row). The first
//! CREATE WORLD (or a restore making its worlds) gives every tracked table its delta, and from then on
//! tracking gives one to each new table. The race between the two, a CREATE TABLE in flight while the
//! first world is made, is closed by one lock (a `userlock` in pg_locks, in pg_worlds' own space): tracking holds it
//! SHARED until its transaction ends, the first CREATE WORLD takes it EXCLUSIVE, so it waits for tables
//! being created and then sees them, and a table tracked after it sees its world. Both read on the latest
//! snapshot, whatever the isolation level.
use super::snapshot_spi;
use pgrx::prelude::*;

/// The tracking lock's field4. Its tag type is LOCKTAG_USERLOCK (pg_locks shows `userlock`), not an
/// advisory lock: apps and PostgreSQL's own advisory_lock test list `locktype = 'advisory'` locks of
/// the database, and a CREATE TABLE in another session must not show among them.
const TRACKING_SPACE: u16 = 0x7768;

/// Takes the tracking lock for the rest of the transaction: SHARED while tracking a table, EXCLUSIVE
/// while giving every tracked table its delta.
#[pg_extern(volatile, parallel_unsafe)]
fn _lock_tracking(exclusive: bool) {
    let tag = pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: 0,
        locktag_field3: 0,
        locktag_field4: TRACKING_SPACE,
        locktag_type: pg_sys::LockTagType::LOCKTAG_USERLOCK as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    let mode = if exclusive { pg_sys::ExclusiveLock } else { pg_sys::ShareLock } as pg_sys::LOCKMODE;
    unsafe {
        pg_sys::LockAcquire(&tag, mode, false, false);
    }
}

/// Has this database had a world (other than main)? Read on the latest snapshot.
#[pg_extern(volatile, parallel_unsafe)]
fn _world_storage_on() -> bool {
    snapshot_spi::query_latest_generic("SELECT EXISTS (SELECT 1 FROM worlds.world WHERE num <> 0)", &[], &[], |r| r.get::<bool>(1))
        .into_iter()
        .next()
        .flatten()
        .unwrap_or(false)
}

/// The tracked tables without a delta yet, by number, on the latest snapshot.
#[pg_extern(volatile, parallel_unsafe)]
fn _tables_without_delta() -> Vec<i32> {
    snapshot_spi::query_latest_generic("SELECT tabno FROM worlds.tables WHERE delta IS NULL ORDER BY tabno", &[], &[], |r| r.get::<i32>(1))
        .into_iter()
        .flatten()
        .collect()
}

/// Before the database's first world, with many tracked tables without a delta: a worker gives them
/// theirs ahead, a few tables a transaction (storage/maker.rs), so the first world's own transaction
/// doesn't take every table's locks at once (with 2,000 tables they overflowed the shared lock table: "out
/// of shared memory"). With few, the first world's transaction makes them itself, as it always did.
#[pg_extern(volatile, parallel_unsafe)]
fn _prepare_world_storage() {
    if _world_storage_on() {
        return;
    }
    if _tables_without_delta().len() > super::maker::WORLD_STORAGE_BATCH as usize {
        super::maker::world_storage_made_ahead();
    }
}
