//! The expiry worker: worlds past their TTL, worlds idle past `worlds.world_idle_ttl` (unless pinned) and a
//! SIMULATE's stray worlds are discarded, and history older than history_retention is purged, in every
//! database that has pg_worlds, with no statement run (docs/architecture.md, "The expiry worker").
//!
//! A background worker connects to one database for its whole life, so the work is split as autovacuum
//! splits it:
//! - **the launcher** (one per cluster, registered at server start when pg_worlds is preloaded) connects to
//!   no database. Every `worlds.expiry_interval` it lists pg_database (a shared catalog, read as autovacuum's
//!   launcher reads it) and, one database after the other, starts a short-lived worker in it and waits for
//!   that worker to end;
//! - **the round** (that worker) connects to its database, leaves at once when pg_worlds isn't installed,
//!   discards what is due (`worlds._expire_worlds`: one world per transaction, try-locks only), purges
//!   history in batches (`worlds._purge_batch`, a few tables a transaction) for what is left of the round's
//!   purge budget (a couple of seconds for all databases together, each round starting one database
//!   further), and exits: no connection
//!   is held between rounds, so DROP DATABASE finds none, and one that starts during a round is seen
//!   between two steps (its lock on the database), where the worker leaves.
//!
//! The decisions (which databases, how long, what to log) are worlds_core::expiry's.
use crate::guc;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime, SignalWakeFlags};
use pgrx::prelude::*;
use std::time::{Duration, Instant};
use worlds_core::expiry::{self, Database};

/// From _PG_init, while preloading: the launcher (a standby runs none: its primary discards and purges,
/// and the standby replays that).
pub fn register_launcher() {
    BackgroundWorkerBuilder::new("pg_worlds expiry launcher")
        .set_type("pg_worlds expiry launcher")
        .set_library("pg_worlds")
        .set_function("worlds_expiry_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(10)))
        .load();
}

/// Has the server asked this process to stop (SIGTERM)? (pgrx's handler sets the flag Postgres's own
/// main loops read; reading it doesn't reset it.)
fn stopping() -> bool {
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ShutdownRequestPending) != 0 }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_expiry_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    // no database: pg_database is shared, and a launcher connected to one would hold up its DROP DATABASE
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut next = Instant::now() + guc::expiry_interval();
    let mut round = 0u64;
    loop {
        let now = Instant::now();
        if now < next {
            if !BackgroundWorker::wait_latch(Some(next - now)) {
                return;
            }
            if BackgroundWorker::sighup_received() {
                unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
                // a shorter interval counts from the last round
                next = next.min(Instant::now() + guc::expiry_interval());
            }
            continue;
        }
        // one purge budget for the whole round (a database late in the round doesn't wait for every other
        // one's purge before its worlds are discarded), and each round starts one database further
        let listed = databases();
        let first = expiry::round_start(listed.len(), round);
        round = round.wrapping_add(1);
        let round_started = Instant::now();
        for i in 0..listed.len() {
            let db = &listed[(first + i) % listed.len()];
            if stopping() {
                return;
            }
            // listed at the round's start: dropped (or closed) since, it is left alone (a worker started
            // in a database that no longer exists would end on a FATAL in the log)
            if !databases().iter().any(|d| d.oid == db.oid) {
                continue;
            }
            if !visit(db, expiry::purge_budget_left(round_started.elapsed().as_millis() as u64)) {
                return;
            }
        }
        next = Instant::now() + guc::expiry_interval();
    }
}

/// The databases a round visits (worlds_core::expiry::visits), read from pg_database in a transaction of
/// its own.
fn databases() -> Vec<Database> {
    let mut found = Vec::new();
    unsafe {
        pg_sys::StartTransactionCommand();
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let scan = pg_sys::systable_beginscan(rel, pg_sys::InvalidOid, false, std::ptr::null_mut(), 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            let form = ((*tuple).t_data as *mut u8).add((*(*tuple).t_data).t_hoff as usize) as *const pg_sys::FormData_pg_database;
            let db = Database {
                oid: (*form).oid.to_u32(),
                name: std::ffi::CStr::from_ptr((*form).datname.data.as_ptr()).to_string_lossy().into_owned(),
                is_template: (*form).datistemplate,
                allows_connections: (*form).datallowconn,
                conn_limit: (*form).datconnlimit,
            };
            if expiry::visits(&db) {
                found.push(db);
            }
        }
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        pg_sys::CommitTransactionCommand();
    }
    found
}

/// Runs one round in `db` (a worker of its own), its purge given `purge_ms` of the round's budget, and
/// waits for it to end. false: the launcher must stop. Without a free worker slot (max_worker_processes)
/// the database waits for the next round.
fn visit(db: &Database, purge_ms: u64) -> bool {
    let worker = BackgroundWorkerBuilder::new(&format!("pg_worlds expiry in database {}", db.oid))
        .set_type("pg_worlds expiry")
        .set_library("pg_worlds")
        .set_function("worlds_expiry_round_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_extra(&format!("{} {purge_ms}", db.oid))
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic();
    let Ok(worker) = worker else { return true };
    // a round is short (one world or batch per transaction, the purge's budget); one that runs on (a lock
    // it waits for without lock_timeout, a huge discard) is stopped, and the next round goes on
    let limit = Duration::from_secs(60);
    let started = Instant::now();
    loop {
        match worker.pid() {
            Err(BackgroundWorkerStatus::Stopped) => return true,
            Err(BackgroundWorkerStatus::PostmasterDied) => return false,
            _ => {}
        }
        if stopping() || started.elapsed() > limit {
            let _ = worker.terminate().wait_for_shutdown();
            return !stopping();
        }
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                100,
                pg_sys::WaitEventIPC::WAIT_EVENT_BGWORKER_SHUTDOWN,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
    }
}

/// What one step of a round found.
enum Step<T> {
    Done(T),
    /// a DROP DATABASE waits for this worker to leave
    Dropping,
}

/// A step of the round in a transaction of its own, after asking whether a DROP DATABASE of this
/// database is waiting (it holds its lock on the database while it waits for the sessions in it to end).
fn step<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe + std::panic::RefUnwindSafe) -> Step<T> {
    BackgroundWorker::transaction(|| {
        let dropping = crate::spi_calls::get_one::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                            WHERE l.locktype = 'object' AND l.database = 0 AND l.classid = 'pg_catalog.pg_database'::pg_catalog.regclass
                              AND l.objid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
                              AND l.mode = 'AccessExclusiveLock')",
        )
        .ok()
        .flatten()
        .unwrap_or(false);
        if dropping { Step::Dropping } else { Step::Done(f()) }
    })
}

unsafe extern "C-unwind" {
    /// Postgres's own SIGTERM handler of a session (tcop/postgres.c `die`: ProcDiePending, then the latch),
    /// the C symbol itself (pg_sys wraps its functions as Rust ones).
    #[link_name = "die"]
    fn postgres_die(signal: std::ffi::c_int);
}

/// The round in one database (bgw_extra: its oid, then the milliseconds its purge may take). An error ends
/// the worker (logged as any background worker's); the next round starts afresh.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_expiry_round_main(_arg: pg_sys::Datum) {
    // SIGTERM (shutdown, pg_terminate_backend, DROP DATABASE ... WITH (FORCE)) ends it at its next
    // interrupt check, as it ends a session
    unsafe {
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(postgres_die));
        pg_sys::BackgroundWorkerUnblockSignals();
    }
    let extra = BackgroundWorker::get_extra();
    let mut fields = extra.split(' ');
    let Some(Ok(oid)) = fields.next().map(str::parse::<u32>) else { return };
    let purge_ms = fields.next().and_then(|f| f.parse::<u64>().ok()).unwrap_or(expiry::PURGE_BUDGET_MS);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(oid)), None);
    // a database without pg_worlds (or with one older than this worker): nothing to do
    let database = BackgroundWorker::transaction(|| {
        let ready = crate::spi_calls::get_one::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_worlds')
                    AND pg_catalog.to_regprocedure('worlds._expire_worlds(interval,integer,boolean)') IS NOT NULL
                    AND pg_catalog.to_regprocedure('worlds._purge_batch(integer[],integer)') IS NOT NULL",
        )
        .ok()
        .flatten()
        .unwrap_or(false);
        if !ready {
            return None;
        }
        // for the session: never wait long for a user's lock (a busy world or table waits for the next
        // round), main (a per-database worlds.world doesn't apply), and a bound on any one statement
        crate::spi_calls::run(
            "SELECT pg_catalog.set_config('lock_timeout', '200ms', false), pg_catalog.set_config('statement_timeout', '30s', false),
                    pg_catalog.set_config('worlds.world', 'main', false), pg_catalog.set_config('application_name', 'pg_worlds expiry', false)",
        )
        .ok()?;
        crate::spi_calls::get_one::<String>("SELECT pg_catalog.current_database()::text").ok().flatten()
    });
    let Some(database) = database else { return };

    // the worlds due to go, one per transaction (each holds its world's lock only for its own discard)
    for _ in 0..expiry::MAX_DISCARDS_PER_ROUND {
        let found = step(|| {
            crate::spi_calls::rows(
                "SELECT world, reason, since::text FROM worlds._expire_worlds(worlds._world_idle_ttl(), 1, true)",
                None,
                &[],
                |mut t| t.next().map(|r| (r.get::<String>(1).ok().flatten(), r.get::<String>(2).ok().flatten(), r.get::<String>(3).ok().flatten())),
            )
            .ok()
            .flatten()
        });
        match found {
            Step::Dropping => return,
            Step::Done(None) => break,
            Step::Done(Some((world, reason, since))) => {
                log!(
                    "{}",
                    expiry::discarded_message(world.as_deref().unwrap_or("?"), &database, reason.as_deref().unwrap_or("?"), since.as_deref())
                );
            }
        }
    }
    // (SHOW METRICS' "worlds expired" is counted by worlds._expire_worlds, for the worker and the sweeps alike)

    // history past history_retention, for at most what the launcher handed it of the round's budget
    // (expiry::purge_budget_left: at least PURGE_MIN_MS); the dropped tables' part, then a
    // batch of each tracked table, `PURGE_TABLES` tables a transaction (a few tables' locks at a time,
    // never every table's at once: see worlds._purge_batch), over the tables again while one had rows to
    // purge. A round starts where the clock says (`purge_start`), so that when one budget reaches only
    // some of the tables, every table is reached in turn.
    let started = Instant::now();
    let mut purged = 0i64;
    let batch = |tabs: Option<Vec<i32>>| {
        step(move || crate::spi_calls::get_one_with_args::<i64>("SELECT worlds._purge_batch($1, $2)", &[tabs.into(), expiry::PURGE_BATCH.into()]).ok().flatten().unwrap_or(0))
    };
    if let Step::Dropping = batch(None) {
        return;
    }
    let tables = match step(|| {
        crate::spi_calls::get_one::<Vec<i32>>("SELECT coalesce(array_agg(tabno ORDER BY tabno), '{}') FROM worlds.tables WHERE history IS NOT NULL").ok().flatten().unwrap_or_default()
    }) {
        Step::Dropping => return,
        Step::Done(t) => t,
    };
    let chunks: Vec<Vec<i32>> = tables.chunks(expiry::PURGE_TABLES).map(|c| c.to_vec()).collect();
    let start = expiry::purge_start(chunks.len(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()));
    'passes: loop {
        let mut this_pass = 0i64;
        for i in 0..chunks.len() {
            // (a DROP DATABASE waiting: leave, saying what was purged)
            let Step::Done(n) = batch(Some(chunks[(start + i) % chunks.len()].clone())) else { break 'passes };
            this_pass += n.max(0);
            purged += n.max(0);
            if started.elapsed().as_millis() as u64 >= purge_ms {
                break 'passes;
            }
        }
        if !expiry::purge_goes_on(this_pass, started.elapsed().as_millis() as u64, purge_ms) {
            break;
        }
    }
    if let Some(message) = expiry::purged_message(purged, &database) {
        log!("{message}");
    }
}
