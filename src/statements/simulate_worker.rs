//! SIMULATE's background workers (THREADS of them): each connects as the role that ran SIMULATE and runs
//! its share of the worlds (index ≡ its number mod THREADS), one transaction per world: fork it from the
//! run's snapshot, run the script and score (a subtransaction: a failure is recorded with its SQLSTATE),
//! record the result in `worlds.sim_result`, and drop what falls out of the best KEEP k so far (the run's
//! results are ranked under one lock, so at most k + THREADS worlds exist at once).
//!
//! The run's parameters reach the workers in a dynamic shared memory segment (JSON: the script may be
//! 32 KB, more than a worker's `bgw_extra`). The SIMULATE that started them holds the run's lock
//! (2092161, run) for its whole transaction: a worker stops when it finds the lock free (the SIMULATE was
//! cancelled or failed), and worlds of such a run left behind are discarded by the next world statement's
//! expiry (`worlds._expire`: they carry `_worlds_sim` in their metadata until the SIMULATE ends well).
use super::simulate_world::{drop_sim_world, fork_sim_world, run_world_named, ForkPlan};
use crate::api::raise;
use worlds_core::grammar::better;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, DynamicBackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;

/// What every worker of a run needs.
#[derive(Serialize, Deserialize, Clone)]
pub(super) struct RunParams {
    pub run: i32,
    pub worker: i64,
    pub threads: i64,
    pub n: i64,
    pub prefix: String,
    pub script: String,
    pub score: String,
    pub descending: bool,
    pub keep: Option<i64>,
    pub seed: i64,
    pub plan: ForkPlan,
    pub database: u32,
    pub role: u32,
}

thread_local! {
    /// The workers this backend's SIMULATE started (terminated if its transaction aborts).
    static WORKERS: RefCell<Vec<DynamicBackgroundWorker>> = const { RefCell::new(Vec::new()) };
}

/// At abort (registered from lib.rs): a cancelled or failed SIMULATE stops its workers.
pub fn on_abort() {
    let workers: Vec<DynamicBackgroundWorker> = WORKERS.with(|w| std::mem::take(&mut *w.borrow_mut()));
    for w in workers {
        let _ = w.terminate();
    }
}

/// Starts up to `threads` workers for the run; how many started (0: none free).
pub(super) fn start(params: &RunParams, threads: i64) -> i64 {
    let mut started = 0;
    for worker in 0..threads {
        let mut p = params.clone();
        p.worker = worker;
        p.threads = threads;
        let json = serde_json::to_vec(&p).unwrap_or_default();
        // the parameters in a segment of their own: [u32 length][JSON]
        let handle = unsafe {
            let seg = pg_sys::dsm_create(json.len() + 4, 0);
            let base = pg_sys::dsm_segment_address(seg) as *mut u8;
            std::ptr::copy_nonoverlapping((json.len() as u32).to_le_bytes().as_ptr(), base, 4);
            std::ptr::copy_nonoverlapping(json.as_ptr(), base.add(4), json.len());
            // kept until this backend detaches it (its transaction's end), long after the worker read it
            let handle = pg_sys::dsm_segment_handle(seg);
            SEGMENTS.with(|s| s.borrow_mut().push(seg as usize));
            handle
        };
        let loaded = BackgroundWorkerBuilder::new(&format!("pg_worlds simulate {} #{worker}", params.run))
            .set_type("pg_worlds simulate")
            .set_library("pg_worlds")
            .set_function("worlds_simulate_worker_main")
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(None)
            .enable_spi_access()
            .set_argument(Some(pg_sys::Datum::from(handle)))
            .set_notify_pid(unsafe { pg_sys::MyProcPid })
            .load_dynamic();
        match loaded {
            Ok(w) => {
                WORKERS.with(|ws| ws.borrow_mut().push(w));
                started += 1;
            }
            Err(_) => break,
        }
    }
    started
}

thread_local! {
    static SEGMENTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Waits for this run's workers to end, answering cancels (the abort then stops them).
pub(super) fn wait_all() {
    loop {
        pgrx::check_for_interrupts!();
        let running = WORKERS.with(|ws| ws.borrow().iter().filter(|w| !matches!(w.pid(), Err(pgrx::bgworkers::BackgroundWorkerStatus::Stopped))).count());
        if running == 0 {
            break;
        }
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                200,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
    }
    WORKERS.with(|ws| ws.borrow_mut().clear());
    SEGMENTS.with(|s| {
        for seg in s.borrow_mut().drain(..) {
            unsafe { pg_sys::dsm_detach(seg as *mut pg_sys::dsm_segment) };
        }
    });
}

fn read_params(handle: u32) -> Option<RunParams> {
    unsafe {
        let seg = pg_sys::dsm_attach(handle);
        if seg.is_null() {
            return None;
        }
        let base = pg_sys::dsm_segment_address(seg) as *const u8;
        let mut len = [0u8; 4];
        std::ptr::copy_nonoverlapping(base, len.as_mut_ptr(), 4);
        let len = u32::from_le_bytes(len) as usize;
        let bytes = std::slice::from_raw_parts(base.add(4), len).to_vec();
        pg_sys::dsm_detach(seg);
        serde_json::from_slice(&bytes).ok()
    }
}

fn in_transaction<R>(f: impl FnOnce() -> R) -> R {
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    let r = f();
    unsafe {
        pg_sys::PopActiveSnapshot();
        pg_sys::CommitTransactionCommand();
    }
    r
}

/// Is the SIMULATE that started the run still running it? (its transaction holds the run's lock)
fn run_alive(run: i32) -> bool {
    // (taken, it is released with this transaction)
    !crate::spi_calls::get_one_with_args::<bool>("SELECT pg_try_advisory_xact_lock(2092161, $1)", &[run.into()])
        .ok()
        .flatten()
        .unwrap_or(true)
}

/// Forks world i, in a transaction of its own (CREATE WORLD's lock is held to its end: the worlds'
/// scripts must not wait for it).
fn fork_world(p: &RunParams, i: i64) -> Result<String, String> {
    let name = format!("{}_{i}", p.prefix);
    crate::subxact::in_subtransaction(|| fork_sim_world(&p.plan, &name, Some(p.run)))
    .map_err(|e| {
        let (state, message) = crate::subxact::state_and_message(&e);
        format!("{state}: {message}")
    })
}

/// Runs world i (forked, or not: `forked`), records its result and ranks it.
fn one_world(p: &RunParams, i: i64, forked: Result<String, String>, home: &str) {
    let name = format!("{}_{i}", p.prefix);
    let seed = p.seed.wrapping_add(i);
    let (id, score, error) = match forked {
        Err(e) => (None, None, Some(e)),
        Ok(id) => match run_world_named(&p.script, &p.score, &name, i, seed, home) {
            Ok(s) => (Some(id), Some(s), None),
            Err(e) => (Some(id), None, Some(e)),
        },
    };
    // the score in ascending order (DESC negates it), so one index keeps the run's worlds best first
    let rank_key = score.map(|s| if p.descending { -s } else { s });
    crate::storage::as_internal(|| {
        // ranked under the run's own lock: each worker sees every result committed before it
        crate::spi_calls::run_with_args("SELECT pg_advisory_xact_lock(2092162, $1)", &[p.run.into()]).ok();
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.sim_result (run, idx, world, id, seed, score, error, rank_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[p.run.into(), i.into(), name.clone().into(), id.clone().into(), seed.into(), score.into(), error.clone().into(), rank_key.into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    });
    // KEEP k: the run's kept worlds were its best k before this one. The results at place k + 1 and after
    // are the dropped ones; with this world among them, either this world lands there (it is dropped) or
    // it pushes the k-th before it to place k + 1 (that one is). Insert-only: see simulate.sql.
    // (a world that didn't fork isn't among them: nothing moves)
    if let (Some(k), true) = (p.keep, id.is_some()) {
        let at_k1: Option<(String, Option<f64>, i64)> = crate::storage::as_internal(|| {
            crate::spi_calls::rows(
                "SELECT world, score, idx FROM worlds.sim_result WHERE run = $1 AND id IS NOT NULL
                  ORDER BY rank_key NULLS LAST, idx OFFSET $2 LIMIT 1",
                None,
                &[p.run.into(), k.into()],
                |mut t| {
                    t.next().map(|r| {
                        (r.get::<String>(1).ok().flatten().unwrap_or_default(), r.get::<f64>(2).ok().flatten(), r.get::<i64>(3).ok().flatten().unwrap_or(0))
                    })
                },
            )
            .unwrap_or_default()
        });
        if let Some((other, other_score, other_i)) = at_k1 {
            let out = if better((score, i), (other_score, other_i), p.descending) { other } else { name };
            drop_sim_world(&out);
        }
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_simulate_worker_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    let Some(p) = read_params(arg.value() as u32) else { return };
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(p.database)), Some(pg_sys::Oid::from(p.role)));
    let home = "main".to_string();
    let mut i = p.worker;
    let mut done = 0i64;
    while i < p.n {
        if BackgroundWorker::sigterm_received() {
            break;
        }
        super::simulate_world::replan_as_catalog_grows(done);
        done += 1;
        let forked = in_transaction(|| run_alive(p.run).then(|| fork_world(&p, i)));
        let Some(forked) = forked else { break };
        let go_on = in_transaction(|| {
            if !run_alive(p.run) {
                return false;
            }
            one_world(&p, i, forked, &home);
            true
        });
        if !go_on {
            break;
        }
        i += p.threads;
    }
}
