//! The review queue (SHOW REVIEWS) and its notifications.
//!
//! A refused merge's transaction is rolled back, but the world must stay queued: the queue row is written
//! by a short-lived background worker, in a transaction of its own (an autonomous write, as
//! pg_background does it), started by the refusing backend with the world, its version and the policy in
//! the worker's `bgw_extra`. Without a free worker slot (max_worker_processes) the world isn't queued and
//! the refusal says so in a WARNING; the agent asking again queues it.
//!
//! Every change of the queue is sent on channel `worlds_reviews` (LISTEN worlds_reviews), payload JSON
//! `{"world": ..., "event": "queued" | "merged" | "dropped", "policy": ...}`: an inbox needs no polling.
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags};
use pgrx::prelude::*;

/// Queues the world for a person (asynchronously: the worker commits the row and its notification).
pub fn queue(world_num: i32, version: i64, policy: &str) {
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let extra = format!("{db} {world_num} {version} {policy}");
    let loaded = BackgroundWorkerBuilder::new("pg_worlds review queue")
        .set_type("pg_worlds review queue")
        .set_library("pg_worlds")
        .set_function("worlds_review_queue_main")
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .enable_spi_access()
        .set_extra(&extra)
        .load_dynamic();
    if loaded.is_ok() {
        crate::metrics::count(crate::metrics::Counter::QueuedReviews);
    } else {
        pgrx::warning!("pg_worlds: no background worker slot free to queue world {world_num} for review (max_worker_processes)");
    }
}

/// The worker: writes (or refreshes) the queue row and notifies, then exits.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_review_queue_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGTERM);
    let extra = BackgroundWorker::get_extra().to_string();
    let mut parts = extra.splitn(4, ' ');
    let (Some(db), Some(num), Some(version), Some(policy)) = (parts.next(), parts.next(), parts.next(), parts.next()) else { return };
    let (Ok(db), Ok(num), Ok(version)) = (db.parse::<u32>(), num.parse::<i32>(), version.parse::<i64>()) else { return };
    let policy = policy.to_string();
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
    BackgroundWorker::transaction(move || {
        Spi::connect_mut(|c| {
            c.update(
                "INSERT INTO worlds.review (world, policy, asked, version)
                 SELECT w.num, $2, clock_timestamp(), $3 FROM worlds.world w WHERE w.num = $1 AND w.dropped IS NULL
                 ON CONFLICT (world) DO UPDATE SET policy = excluded.policy, asked = excluded.asked, version = excluded.version",
                None,
                &[num.into(), policy.clone().into(), version.into()],
            )
            .ok();
            c.update(
                "SELECT pg_notify('worlds_reviews', jsonb_build_object('world', w.name, 'event', 'queued', 'policy', $2)::text)
                 FROM worlds.world w WHERE w.num = $1 AND w.dropped IS NULL",
                None,
                &[num.into(), policy.clone().into()],
            )
            .ok();
        });
    });
}

/// The world leaves the queue (merged or dropped): its row goes, and listeners hear why.
pub fn leave(world_num: i32, event: &str) {
    crate::storage::as_internal(|| {
        crate::spi_calls::written(crate::spi_calls::run_with_args("SELECT worlds._leave_reviews($1, $2)", &[world_num.into(), event.into()]), "leaving the review queue");
    });
}
