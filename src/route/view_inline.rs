//! A user's view, in a query routed into a world, expanded in place as the rewriter would expand it (so the
//! tracked tables it reads are routed too). Used by the query rewrite (route/rewrite/) and by row locks
//! (route/row_locks.rs); it imports neither.
use pgrx::pg_sys;

/// A user view read inside a world becomes the sub-query it stands for, so the tracked tables it reads are
/// swapped too (the rewriter would otherwise expand it later, unrouted). The view's own permission check
/// moves to its OLD entry, as the rewriter does; its body keeps the view owner's rights (or the invoker's,
/// for security_invoker views) and its security_barrier.
pub(crate) unsafe fn inline_view(rte: *mut pg_sys::RangeTblEntry) {
    unsafe {
        let rel = pg_sys::relation_open((*rte).relid, pg_sys::NoLock as i32);
        let body = pg_sys::copyObjectImpl(pg_sys::get_view_query(rel) as *const std::ffi::c_void) as *mut pg_sys::Query;
        pg_sys::AcquireRewriteLocks(body, true, false);
        let old = crate::fast_ffi::list_nth((*body).rtable, 0) as *mut pg_sys::RangeTblEntry;
        (*old).requiredPerms = (*rte).requiredPerms;
        (*old).checkAsUser = (*rte).checkAsUser;
        (*old).selectedCols = (*rte).selectedCols;
        (*old).insertedCols = (*rte).insertedCols;
        (*old).updatedCols = (*rte).updatedCols;
        (*rte).requiredPerms = 0;
        (*rte).rtekind = pg_sys::RTEKind::RTE_SUBQUERY;
        (*rte).subquery = body;
        (*rte).security_barrier = view_is_security_barrier(rel);
        (*rte).relid = pg_sys::Oid::INVALID;
        (*rte).relkind = 0;
        (*rte).rellockmode = 0;
        (*rte).tablesample = std::ptr::null_mut();
        (*rte).inh = false;
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
    }
}

pub(crate) unsafe fn view_is_security_barrier(rel: pg_sys::Relation) -> bool {
    unsafe {
        let opts = (*rel).rd_options as *const pg_sys::ViewOptions;
        !opts.is_null() && (*opts).security_barrier
    }
}
