//! The purge worker: keeps history within history_retention, in small batches, one transaction each.
//! One worker per database named in `worlds.purge_databases` (a database without pg_worlds is skipped).
use crate::guc;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::prelude::*;
use std::time::Duration;

pub fn register_workers() {
    for db in guc::purge_databases() {
        BackgroundWorkerBuilder::new(&format!("pg_worlds history purge ({db})"))
            .set_library("pg_worlds")
            .set_function("worlds_purge_worker_main")
            .set_extra(&db)
            .enable_spi_access()
            .set_restart_time(Some(Duration::from_secs(30)))
            .load();
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_purge_worker_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db = BackgroundWorker::get_extra().to_string();
    BackgroundWorker::connect_worker_to_spi(Some(&db), None);
    while BackgroundWorker::wait_latch(Some(Duration::from_secs(guc::purge_naptime()))) {
        // batch after batch, each in its own short transaction, until nothing is left to purge
        loop {
            let purged = BackgroundWorker::transaction(|| {
                let installed = crate::spi_calls::get_one::<bool>("SELECT to_regproc('worlds.purge_history') IS NOT NULL")
                    .ok()
                    .flatten()
                    .unwrap_or(false);
                if !installed {
                    return 0;
                }
                crate::spi_calls::get_one::<i64>("SELECT worlds.purge_history(1000)").ok().flatten().unwrap_or(0)
            });
            if purged == 0 || BackgroundWorker::sigterm_received() {
                break;
            }
        }
    }
}
