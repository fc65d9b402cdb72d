//! A committed table's storage, made in a transaction of its own.
//!
//! A table is tracked at CREATE TABLE and gets its storage (history, inserts, views) at its first captured
//! write. Made in the writer's transaction, the storage stays invisible to every other session until that
//! transaction ends, so the next first writer of the table has to wait for it, and two transactions that
//! first-write two new tables in opposite orders deadlock where stock Postgres wouldn't. So the writer asks
//! a short-lived background worker to make it and commit, and waits for the worker (an autonomous
//! transaction, as the review queue's worker writes its row): no lock of the making outlives it, the next
//! writer finds the storage made.
//!
//! The writer makes it itself (the way before, in its own transaction) when the worker couldn't see the
//! table as the writer does (the writer's transaction created or altered it, or holds a lock on it that
//! DDL takes), when no worker slot is free (max_worker_processes), and when the worker didn't make it for
//! any reason. The worker waits for a lock at most `deadlock_timeout`: a wait the deadlock detector can't
//! see (the worker queued behind a session that waits for the writer) ends there, and the writer goes on
//! the old way, where Postgres sees every wait.
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::prelude::*;

/// Asks a worker to make the storage of table `tabno` (relation `relid`) and waits for it. true: the
/// worker ran (whether it made the storage the caller reads from the catalog); false: the caller makes it.
pub fn made_by_worker(tabno: i32, relid: pg_sys::Oid) -> bool {
    if !worker_can_make(relid) {
        return false;
    }
    let Some(worker) = launch(&format!("pg_worlds storage of table {tabno}"), "worlds_storage_maker_main", &tabno.to_string()) else { return false };
    let limit = std::time::Duration::from_millis((unsafe { pg_sys::DeadlockTimeout }.max(1) as u64) * 4 + 10_000);
    if !waited_out(worker, Some(limit)) {
        return false;
    }
    // what the worker committed: its relcache invalidations (the table's routing) read now
    unsafe { pg_sys::AcceptInvalidationMessages() };
    true
}

/// Starts a storage maker running `function` in this database, told `what` (its extra: "<database oid>
/// <what>"), this backend notified when it ends. None: no worker slot free (max_worker_processes).
fn launch(name: &str, function: &str, what: &str) -> Option<pgrx::bgworkers::DynamicBackgroundWorker> {
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    BackgroundWorkerBuilder::new(name)
        .set_type("pg_worlds storage maker")
        .set_library("pg_worlds")
        .set_function(function)
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .enable_spi_access()
        .set_extra(&format!("{db} {what}"))
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic()
        .ok()
}

/// In a maker: lock waits bounded by deadlock_timeout, set before connecting to database `db` (the
/// connection's own catalog reads wait for locks too: behind a VACUUM FULL pg_class that waits for the
/// caller, say, and over the database's or role's lock_timeout), then connected.
fn connect_bounded(db: u32) {
    let timeout = std::ffi::CString::new(format!("{}ms", unsafe { pg_sys::DeadlockTimeout }.max(1))).unwrap_or_default();
    unsafe {
        pg_sys::SetConfigOption(c"lock_timeout".as_ptr(), timeout.as_ptr(), pg_sys::GucContext::PGC_SUSET, pg_sys::GucSource::PGC_S_OVERRIDE);
    }
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
}

/// Waits for the worker to end (a cancel or statement_timeout of the waiter ends the wait). Each of the
/// worker's lock waits ends at deadlock_timeout; should it still run after `limit` (the longest the
/// making should take), it is stopped and the waiter does the work itself. false: it didn't end normally.
fn waited_out(worker: pgrx::bgworkers::DynamicBackgroundWorker, limit: Option<std::time::Duration>) -> bool {
    use pgrx::bgworkers::BackgroundWorkerStatus;
    let started = std::time::Instant::now();
    loop {
        match worker.pid() {
            Err(BackgroundWorkerStatus::Stopped) => return true,
            Err(BackgroundWorkerStatus::PostmasterDied) => return false,
            _ => {}
        }
        if limit.is_some_and(|limit| started.elapsed() > limit) {
            let _ = worker.terminate().wait_for_shutdown();
            return false;
        }
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                100,
                pg_sys::WaitEventIPC::WAIT_EVENT_BGWORKER_SHUTDOWN,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
            pg_sys::check_for_interrupts!();
        }
    }
}

/// Could a worker run now, in a transaction of its own beside this one?
fn worker_can_run() -> bool {
    unsafe {
        pg_sys::IsUnderPostmaster
            && !pg_sys::IsBackgroundWorker
            && !pg_sys::IsBinaryUpgrade
            && !pg_sys::creating_extension
            && !pg_sys::RecoveryInProgress()
            && !pg_sys::IsInParallelMode()
            && crate::fast_ffi::IsTransactionState()
    }
}

/// Would a worker see the table as this transaction does, and get the locks the making takes on it?
fn worker_can_make(relid: pg_sys::Oid) -> bool {
    unsafe {
        if !worker_can_run() {
            return false;
        }
        // created or altered (its pg_class row written) by this transaction: the worker can't see it as it is
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid));
        if tuple.is_null() {
            return false;
        }
        let header = (*tuple).t_data;
        let xmin = (*header).t_choice.t_heap.t_xmin;
        let xmax = (*header).t_choice.t_heap.t_xmax;
        pg_sys::ReleaseSysCache(tuple);
        if pg_sys::TransactionIdIsCurrentTransactionId(xmin) || pg_sys::TransactionIdIsCurrentTransactionId(xmax) {
            return false;
        }
        // a lock DDL takes (ALTER TABLE, CREATE INDEX, ...): its columns may be changing, and the worker's
        // read of the table would wait for this transaction
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return false;
        }
        let ddl_locked = pg_sys::CheckRelationLockedByMe(rel, pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE, true);
        pg_sys::RelationClose(rel);
        !ddl_locked
    }
}

/// The worker: in a transaction of its own, on the table's making lock, makes its storage (if nobody has
/// since) and commits. Every lock wait is bounded by deadlock_timeout; any failure is the writer's to
/// handle (it makes the storage itself), so it ends quietly.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_storage_maker_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    let extra = BackgroundWorker::get_extra().to_string();
    let mut parts = extra.split(' ');
    let (Some(Ok(db)), Some(Ok(tabno))) = (parts.next().map(str::parse::<u32>), parts.next().map(str::parse::<i32>)) else { return };
    connect_bounded(db);
    BackgroundWorker::transaction(move || {
        let made = crate::subxact::in_subtransaction(|| {
            unsafe {
                let worlds = pg_sys::get_namespace_oid(c"worlds".as_ptr(), true);
                let tables = pg_sys::get_relname_relid(c"tables".as_ptr(), worlds);
                if tables == pg_sys::Oid::INVALID {
                    return; // (the extension isn't there any more)
                }
                pg_sys::LockDatabaseObject(tables, pg_sys::Oid::from(tabno as u32), 0, pg_sys::ExclusiveLock as pg_sys::LOCKMODE);
            }
            super::as_internal(|| {
                crate::spi_calls::run_with_args(
                    "SELECT worlds._make_history(t) FROM worlds.tables t WHERE t.tabno = $1 AND t.history IS NULL",
                    &[tabno.into()],
                )
            })
            .ok();
        });
        if let Err(e) = made {
            let (state, message) = crate::subxact::state_and_message(&e);
            pgrx::debug1!("pg_worlds: the storage of table {tabno} was left to its writer: {state} {message}");
        }
    });
}

/// Tracked tables a worker gives their delta in one of its transactions. Each takes about twenty locks
/// until its transaction ends (the table, its history's views replaced: their relations, row types,
/// rules and triggers), so the whole of 2,000 tables in one transaction was 44,000 locks, ten times the
/// shared lock table of a default server (max_locks_per_transaction 64).
pub const WORLD_STORAGE_BATCH: i32 = 32;

/// Before the database's first world: asks a worker to give every tracked table without a delta its
/// delta, `WORLD_STORAGE_BATCH` tables a transaction, and waits for it (as long as it takes; a cancel or
/// statement_timeout of the caller ends the wait, not the worker's work). The caller's own transaction
/// then makes whatever the worker left (worlds._ensure_world_storage, under the tracking lock): tables
/// tracked meanwhile, or all of them when no worker could run. A delta made ahead of a world that then
/// fails to be made stays: internal storage in worlds_data, as a later first world would make it.
pub fn world_storage_made_ahead() -> bool {
    // (a read-only transaction's CREATE WORLD fails with 25006: nothing is made ahead of it either)
    if !worker_can_run() || unsafe { pg_sys::XactReadOnly } {
        return false;
    }
    let Some(worker) = launch("pg_worlds storage of the first world", "worlds_world_storage_main", "") else { return false };
    let ran = waited_out(worker, None);
    unsafe { pg_sys::AcceptInvalidationMessages() };
    ran
}

/// The worker of `world_storage_made_ahead`: batches of tables, each batch in a transaction of its own,
/// until none is left (worlds._make_world_storage: each table locked, then its row, as every maker of a
/// table's storage locks them). Every lock wait is bounded by deadlock_timeout: a wait the deadlock
/// detector can't see (behind a session that waits for the caller) ends there. A table busy that long is
/// skipped; any other failure stops the worker. Whatever it left, the caller makes where Postgres sees
/// every wait.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_world_storage_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    let Some(Ok(db)) = BackgroundWorker::get_extra().split(' ').next().map(str::parse::<u32>) else { return };
    connect_bounded(db);
    let mut after = 0i32;
    while !BackgroundWorker::sigterm_received() {
        let step = BackgroundWorker::transaction(move || {
            crate::subxact::in_subtransaction(|| {
                super::as_internal(|| {
                    crate::spi_calls::get_one_with_args::<i32>(
                        "SELECT worlds._make_world_storage($1, $2)",
                        &[after.into(), WORLD_STORAGE_BATCH.into()],
                    )
                })
            })
        });
        match step {
            Ok(Ok(Some(last))) => after = last,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                pgrx::debug1!("pg_worlds: the first world's storage was left to its maker after table {after}: {e}");
                return;
            }
            Err(e) => {
                let (state, message) = crate::subxact::state_and_message(&e);
                pgrx::debug1!("pg_worlds: the first world's storage was left to its maker after table {after}: {state} {message}");
                return;
            }
        }
    }
}
