//! A parallel world scan: the leader's cache of the table passed to the workers in shared memory.
use crate::storage::overlay;
use pgrx::pg_sys;
use pgrx::prelude::*;
use super::exec::*;
use std::sync::atomic::{AtomicU32, Ordering};

// A parallel world scan: each participant runs its share of main's scan; the first to start adds the
// world's rows. The leader passes its cache of the table in the shared memory, so workers don't rebuild it.
// Layout: the flag (8 bytes), the number of i64 that follow, then `overlay::export_for_workers`.

/// Past this, workers build their own cache (the shared memory would be too large).
pub(crate) const MAX_SHARED_CACHE: usize = 8 << 20;

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn estimate_dsm(node: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext) -> pg_sys::Size {
    unsafe {
        let run = run_of(node);
        let mut export = overlay::export_for_workers(run.tabno, &run.cache);
        if export.len() > MAX_SHARED_CACHE {
            export.clear();
        }
        let size = 16 + 8 * export.len();
        run.export = export;
        size as pg_sys::Size
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn initialize_dsm(node: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext, coordinate: *mut std::ffi::c_void) {
    unsafe {
        let run = run_of(node);
        let flag = coordinate as *const AtomicU32;
        (*flag).store(0, Ordering::Release);
        run.shared = flag;
        let words = (coordinate as *mut i64).add(1);
        *words = run.export.len() as i64;
        std::ptr::copy_nonoverlapping(run.export.as_ptr(), words.add(1), run.export.len());
        run.export = Vec::new();
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn reinitialize_dsm(_node: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext, coordinate: *mut std::ffi::c_void) {
    unsafe { (*(coordinate as *const AtomicU32)).store(0, Ordering::Release) }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn initialize_worker(node: *mut pg_sys::CustomScanState, _toc: *mut pg_sys::shm_toc, coordinate: *mut std::ffi::c_void) {
    unsafe {
        let run = run_of(node);
        run.shared = coordinate as *const AtomicU32;
        let words = (coordinate as *const i64).add(1);
        let n = *words as usize;
        if n > 0 {
            overlay::import_from_leader(run.tabno, std::slice::from_raw_parts(words.add(1), n));
        }
    }
}
