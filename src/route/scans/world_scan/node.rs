//! The world scan's method tables (found by name by parallel workers) and the state node it runs in.
use crate::route::scans::methods::{exec_methods, scan_methods, Methods};
use pgrx::pg_sys;
use pgrx::prelude::*;
use super::exec::*;
use super::parallel::*;

pub(crate) static SCAN_METHODS: Methods<pg_sys::CustomScanMethods> = Methods(scan_methods(crate::route::scans::methods::WORLD_SCAN, create_state));

pub(crate) static EXEC_METHODS: Methods<pg_sys::CustomExecMethods> = Methods(pg_sys::CustomExecMethods {
    EstimateDSMCustomScan: Some(estimate_dsm),
    InitializeDSMCustomScan: Some(initialize_dsm),
    ReInitializeDSMCustomScan: Some(reinitialize_dsm),
    InitializeWorkerCustomScan: Some(initialize_worker),
    ..exec_methods(crate::route::scans::methods::WORLD_SCAN, begin, exec, end, rescan)
});

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn create_state(cscan: *mut pg_sys::CustomScan) -> *mut pg_sys::Node {
    unsafe {
        let node = pg_sys::palloc0(std::mem::size_of::<ScanNode>()) as *mut ScanNode;
        (*node).css.ss.ps.type_ = pg_sys::NodeTag::T_CustomScanState;
        (*node).css.flags = (*cscan).flags;
        (*node).css.methods = &EXEC_METHODS.0;
        node as *mut pg_sys::Node
    }
}
