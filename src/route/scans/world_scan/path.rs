//! The world scan for the planner: the paths it wraps around main's scan paths, and the plan it makes.
use crate::route::scans::methods::{list_items, path_methods, Methods};
use crate::storage::{self};
use pgrx::pg_sys;
use pgrx::prelude::*;
use super::node::SCAN_METHODS;

/// The marker on a range-table entry the world scan reads: `security_barrier`, which Postgres uses only
/// for sub-query entries (it survives copying, so cached plans keep it).
///
/// # Safety
/// `rte` is a valid range-table entry of a relation.
pub unsafe fn mark(rte: *mut pg_sys::RangeTblEntry) {
    unsafe {
        (*rte).security_barrier = true;
        (*rte).inh = false;
    }
}

pub(crate) unsafe fn marked(rte: *mut pg_sys::RangeTblEntry) -> bool {
    unsafe { (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION && (*rte).security_barrier }
}

pub(crate) static PATH_METHODS: Methods<pg_sys::CustomPathMethods> = Methods(path_methods(crate::route::scans::methods::WORLD_SCAN, plan_path));

pub(crate) static mut PREV_SET_REL_PATHLIST: pg_sys::set_rel_pathlist_hook_type = None;

pub fn install() {
    unsafe {
        // parallel workers find the scan's methods by name when they read the plan
        pg_sys::RegisterCustomScanMethods(&SCAN_METHODS.0);
        PREV_SET_REL_PATHLIST = pg_sys::set_rel_pathlist_hook;
        pg_sys::set_rel_pathlist_hook = Some(set_rel_pathlist);
    }
}

// ---------------------------------------------------------------------------------------------- planning

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn set_rel_pathlist(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    rti: pg_sys::Index,
    rte: *mut pg_sys::RangeTblEntry,
) {
    unsafe {
        if let Some(prev) = PREV_SET_REL_PATHLIST {
            prev(root, rel, rti, rte);
        }
        crate::route::scans::key_lookup::add_path(rel, rte);
        if !marked(rte) || (*rel).reloptkind != pg_sys::RelOptKind::RELOPT_BASEREL || pg_sys::is_dummy_rel(rel) {
            return;
        }
        let Some(&tabno) = storage::routed_tables().get(&(*rte).relid) else { return };
        let key_attno = storage::relation_layout(tabno).key_attnos[0];
        let paths = (*rel).pathlist;
        let partial = (*rel).partial_pathlist;
        (*rel).pathlist = std::ptr::null_mut();
        (*rel).partial_pathlist = std::ptr::null_mut();
        // the source of an UPDATE / DELETE (hooks/planner.rs): the world part is read live (see ScanCache::live)
        let live = (*(*root).parse).resultRelation != 0;
        for p in list_items::<pg_sys::Path>(paths) {
            if let Some(wrapped) = wrap(rel, p, tabno, key_attno, false, live) {
                pg_sys::add_path(rel, wrapped);
            }
        }
        for p in list_items::<pg_sys::Path>(partial) {
            if let Some(wrapped) = wrap(rel, p, tabno, key_attno, true, live) {
                pg_sys::add_partial_path(rel, wrapped);
            }
        }
    }
}

/// main's scan path under a world scan, or None for a path the world scan can't run under it.
pub(crate) unsafe fn wrap(
    rel: *mut pg_sys::RelOptInfo,
    path: *mut pg_sys::Path,
    tabno: i32,
    key_attno: i32,
    partial: bool,
    live: bool,
) -> Option<*mut pg_sys::Path> {
    use pg_sys::NodeTag::*;
    unsafe {
        let mut child = path;
        match (*path).pathtype {
            T_SeqScan | T_IndexScan | T_BitmapHeapScan | T_TidScan | T_TidRangeScan | T_SampleScan => {}
            T_IndexOnlyScan => {
                // the world scan needs each row's tid and key from the heap tuple: a plain index scan
                let copy = pg_sys::palloc(std::mem::size_of::<pg_sys::IndexPath>()) as *mut pg_sys::IndexPath;
                std::ptr::copy_nonoverlapping(path as *const pg_sys::IndexPath, copy, 1);
                (*copy).path.pathtype = T_IndexScan;
                child = copy as *mut pg_sys::Path;
            }
            _ => return None,
        }
        let order = key_order(rel, child, key_attno);
        let cp = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomPath>()) as *mut pg_sys::CustomPath;
        (*cp).path.type_ = T_CustomPath;
        (*cp).path.pathtype = T_CustomScan;
        (*cp).path.parent = rel;
        (*cp).path.pathtarget = (*rel).reltarget;
        (*cp).path.param_info = (*child).param_info;
        (*cp).path.parallel_aware = partial;
        (*cp).path.parallel_safe = (*child).parallel_safe;
        (*cp).path.parallel_workers = (*child).parallel_workers;
        (*cp).path.rows = (*child).rows;
        (*cp).path.startup_cost = (*child).startup_cost;
        (*cp).path.total_cost = (*child).total_cost;
        (*cp).path.pathkeys = if order != 0 { (*child).pathkeys } else { std::ptr::null_mut() };
        (*cp).custom_paths = pg_sys::lappend(std::ptr::null_mut(), child as *mut std::ffi::c_void);
        let mut private = pg_sys::lappend(std::ptr::null_mut(), pg_sys::makeInteger(tabno) as *mut std::ffi::c_void);
        private = pg_sys::lappend(private, pg_sys::makeInteger(order) as *mut std::ffi::c_void);
        // in the plan, so a parallel worker's begin needn't load the table's layout (SPI, on its cold caches)
        private = pg_sys::lappend(private, pg_sys::makeInteger(key_attno) as *mut std::ffi::c_void);
        private = pg_sys::lappend(private, pg_sys::makeInteger(live as i32) as *mut std::ffi::c_void);
        (*cp).custom_private = private;
        (*cp).methods = &PATH_METHODS.0;
        Some(cp as *mut pg_sys::Path)
    }
}

/// 1 / -1 when main's path returns rows in ascending / descending key order (the world's rows are then
/// merged in), 0 when in no order the world scan can keep.
pub(crate) unsafe fn key_order(rel: *mut pg_sys::RelOptInfo, path: *mut pg_sys::Path, key_attno: i32) -> i32 {
    unsafe {
        let keys = (*path).pathkeys;
        if keys.is_null() || (*keys).length != 1 {
            return 0;
        }
        let pk = crate::fast_ffi::list_nth(keys, 0) as *mut pg_sys::PathKey;
        let ec = (*pk).pk_eclass;
        let on_key = list_items::<pg_sys::EquivalenceMember>((*ec).ec_members).into_iter().any(|em| {
            let e = (*em).em_expr as *mut pg_sys::Node;
            !e.is_null() && (*e).type_ == pg_sys::NodeTag::T_Var && {
                let v = e as *mut pg_sys::Var;
                (*v).varno as u32 == (*rel).relid && (*v).varattno as i32 == key_attno && (*v).varlevelsup == 0
            }
        });
        if !on_key {
            return 0;
        }
        match (*pk).pk_strategy as u32 {
            pg_sys::BTLessStrategyNumber => 1,
            pg_sys::BTGreaterStrategyNumber => -1,
            _ => 0,
        }
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn plan_path(
    _root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    best_path: *mut pg_sys::CustomPath,
    tlist: *mut pg_sys::List,
    clauses: *mut pg_sys::List,
    custom_plans: *mut pg_sys::List,
) -> *mut pg_sys::Plan {
    unsafe {
        let cscan = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomScan>()) as *mut pg_sys::CustomScan;
        (*cscan).scan.plan.type_ = pg_sys::NodeTag::T_CustomScan;
        (*cscan).scan.plan.targetlist = tlist;
        // main's scan checks the quals on main's rows; the world scan checks them on the world's own rows
        // only, so they are its expressions, not its filter
        (*cscan).scan.plan.qual = std::ptr::null_mut();
        (*cscan).custom_exprs = pg_sys::extract_actual_clauses(clauses, false);
        (*cscan).scan.scanrelid = (*rel).relid;
        (*cscan).flags = (*best_path).flags;
        (*cscan).custom_plans = pg_sys::lappend(std::ptr::null_mut(), ungated(crate::fast_ffi::list_nth(custom_plans, 0) as *mut pg_sys::Plan) as *mut std::ffi::c_void);
        (*cscan).custom_private = (*best_path).custom_private;
        (*cscan).methods = &SCAN_METHODS.0;
        cscan as *mut pg_sys::Plan
    }
}

/// Main's scan plan without the gating Result Postgres puts over it for a condition that names no column of
/// the table (`where (select 1) is not null`: a one-time filter). The same gate sits above the world scan (Postgres
/// gates every scan of the relation), so the one under it is redundant, and the world scan reads its child as the
/// scan node itself (its scan slot, its relation, its index): a Result there was read as a scan, and crashed.
/// The gate's target list is the scan's own (both built from the path's target), kept on the scan.
pub(crate) unsafe fn ungated(plan: *mut pg_sys::Plan) -> *mut pg_sys::Plan {
    unsafe {
        let mut plan = plan;
        while (*plan).type_ == pg_sys::NodeTag::T_Result {
            let result = plan as *mut pg_sys::Result;
            let inner = (*result).plan.lefttree;
            if inner.is_null() || (*result).resconstantqual.is_null() || !(*result).plan.qual.is_null() {
                break;
            }
            (*inner).targetlist = (*result).plan.targetlist;
            plan = inner;
        }
        plan
    }
}
