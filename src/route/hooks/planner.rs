//! The planner hook: an UPDATE or DELETE of a world reads its target rows in place, with the world scan
//! (route/scans/world_scan/), and writes them through the INSTEAD OF trigger of the table's write twin
//! `k_` (storage/writes.rs).
//!
//! The router leaves such a statement's target as the table itself, marked for the world scan
//! (route/rewrite: an integer key, no row-level security, no inheritance children, no dropped column, not
//! `WHERE CURRENT OF`), so the rewriter treats it as main's write of the table: its DEFAULTs, identity and
//! generated columns, with no view to expand. Here, before Postgres plans it, the statement gets the shape
//! the rewriter gives a write to a view with an INSTEAD OF trigger (`write_in_place`): the write twin is
//! the target, the table's entry the source of the rows, read by the world scan as for a SELECT (the
//! planner plans the table as main's UPDATE would, its index on `WHERE id = $1`), and a `wholerow` junk
//! column hands the trigger OLD. The twin's columns are the table's, attnum for attnum.
//!
//! A write whose target is the overlay view itself (a statement analysed inside pg_worlds' own work and
//! planned outside it) had the view's body expanded by the rewriter: that sub-query entry goes back to
//! being the table, marked for the world scan (`convert_source`), instead of planning the overlay's
//! three-branch UNION ALL. Everything else is planned as it is.
use super::*;

static mut PREV_PLANNER: pg_sys::planner_hook_type = None;

pub(super) fn install() {
    unsafe {
        PREV_PLANNER = pg_sys::planner_hook;
        pg_sys::planner_hook = Some(planner);
    }
}

/// A thin frame: pg_worlds' change of the query guarded, Postgres's planner called directly.
unsafe extern "C-unwind" fn planner(
    parse: *mut pg_sys::Query,
    query_string: *const std::ffi::c_char,
    cursor_options: std::ffi::c_int,
    bound_params: pg_sys::ParamListInfo,
) -> *mut pg_sys::PlannedStmt {
    unsafe {
        if matches!((*parse).commandType, pg_sys::CmdType::CMD_UPDATE | pg_sys::CmdType::CMD_DELETE) && (*parse).resultRelation > 0 {
            guarded(|| read_target_in_place(parse));
        }
        match PREV_PLANNER {
            Some(prev) => prev(parse, query_string, cursor_options, bound_params),
            None => raw::standard_planner(parse, query_string, cursor_options, bound_params),
        }
    }
}

/// The overlay view's body under an UPDATE / DELETE of a world becomes the table, read by the world scan;
/// a target the router left as the table itself, marked, gets the write twin as its target.
unsafe fn read_target_in_place(parse: *mut pg_sys::Query) {
    unsafe {
        if !crate::fast_ffi::IsTransactionState() {
            return;
        }
        let rtable = (*parse).rtable;
        let result = crate::fast_ffi::list_nth(rtable, (*parse).resultRelation - 1) as *mut pg_sys::RangeTblEntry;
        if (*result).rtekind != pg_sys::RTEKind::RTE_RELATION {
            return;
        }
        if crate::route::scans::world_scan::marked(result) {
            // (only the router marks a target, and only inside a world; a switch of world analyses every
            // statement again. Whatever holds now, the table itself must not be planned as the target.)
            let converted = match storage::routed_tables().get(&(*result).relid) {
                Some(&tabno) => write_in_place(parse, &storage::relation_layout(tabno)),
                None => false,
            };
            if !converted {
                raise(
                    "XX000",
                    format!(
                        "pg_worlds: the {} of table {} inside a world can't read its rows in place; run it again",
                        command_word((*parse).commandType),
                        relation_name((*result).relid)
                    ),
                );
            }
            return;
        }
        // (in main no target is a world's: a switch of world analyses every statement again)
        if guc::in_main() || (*result).relkind != pg_sys::RELKIND_VIEW as std::ffi::c_char {
            return;
        }
        let Some(&tabno) = storage::overlay_relations().get(&(*result).relid) else { return };
        let layout = storage::relation_layout(tabno);
        if storage::internal() || !guc::WORLD_SCAN.get() {
            return;
        }
        // the overlay itself (not a conflict or rows twin), whose body the rewriter expanded
        if (*result).relid != layout.overlay {
            return;
        }
        convert_source(parse, &layout);
    }
}

/// A world's UPDATE / DELETE whose target the router left as the table, marked: made here what the rewriter
/// makes of a write to a view with an INSTEAD OF trigger (`ApplyRetrieveRule`), with no view to expand. The
/// write twin `k_` (the overlay's columns, attnum for attnum) becomes the target, a copy of the entry outside
/// the join tree; the table's own entry stays the source, read by the world scan, with the role's rights on
/// the table; RETURNING reads the new row (the target's); a `wholerow` junk column hands the trigger OLD,
/// typed as the twin's row. False (nothing changed) where it can't.
unsafe fn write_in_place(parse: *mut pg_sys::Query, layout: &storage::Layout) -> bool {
    unsafe {
        // (the router checked the rest when it marked the target: the table's shape and row-level security,
        // whose change invalidates the statement, which is analysed again; `WHERE CURRENT OF`, which the
        // statement has or hasn't)
        if layout.key_kind != b'i' || layout.overlay_rows == pg_sys::Oid::INVALID || layout.unsupported.is_some() {
            return false;
        }
        let source = (*parse).resultRelation;
        let rte = crate::fast_ffi::list_nth((*parse).rtable, source - 1) as *mut pg_sys::RangeTblEntry;
        // (the planner opens its target unlocked: locked as the table is)
        pg_sys::LockRelationOid(layout.overlay_rows, (*rte).rellockmode);
        let target = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
        (*target).relid = layout.overlay_rows;
        (*target).relkind = pg_sys::RELKIND_VIEW as std::ffi::c_char;
        (*target).security_barrier = false;
        (*target).inh = false;
        (*target).inFromCl = false;
        (*target).requiredPerms = 0;
        (*target).checkAsUser = pg_sys::Oid::INVALID;
        (*target).selectedCols = std::ptr::null_mut();
        (*target).insertedCols = std::ptr::null_mut();
        (*target).updatedCols = std::ptr::null_mut();
        (*target).extraUpdatedCols = std::ptr::null_mut();
        (*parse).rtable = pg_sys::lappend((*parse).rtable, target as *mut std::ffi::c_void);
        let result = (*(*parse).rtable).length;
        (*parse).resultRelation = result;
        if !(*parse).returningList.is_null() {
            (*parse).returningList = pg_sys::copyObjectImpl((*parse).returningList as *const std::ffi::c_void) as *mut pg_sys::List;
            pg_sys::ChangeVarNodes((*parse).returningList as *mut pg_sys::Node, source, result, 0);
        }
        let old = pg_sys::makeVar(source, 0, pg_sys::get_rel_type_id(layout.overlay_rows), -1, pg_sys::Oid::INVALID, 0);
        let width = if (*parse).targetList.is_null() { 0 } else { (*(*parse).targetList).length };
        let entry = pg_sys::makeTargetEntry(old as *mut pg_sys::Expr, (width + 1) as i16, pg_sys::pstrdup(c"wholerow".as_ptr()), true);
        (*parse).targetList = pg_sys::lappend((*parse).targetList, entry as *mut std::ffi::c_void);
        // (no inheritance children: in_place_target)
        (*rte).inh = false;
        true
    }
}

/// Turns the sub-query entry the rewriter expanded the view's body into back into the table, marked for the
/// world scan; nothing changed where it can't.
unsafe fn convert_source(parse: *mut pg_sys::Query, layout: &storage::Layout) {
    unsafe {
        if !in_place_target(layout) || has_current_of(parse) {
            return;
        }
        // the entry the rewriter expanded the view's body into: the one the `wholerow` junk column reads
        let Some(source) = wholerow_source(parse) else { return };
        let rte = crate::fast_ffi::list_nth((*parse).rtable, source - 1) as *mut pg_sys::RangeTblEntry;
        if (*rte).rtekind != pg_sys::RTEKind::RTE_SUBQUERY || !(*rte).securityQuals.is_null() || (*rte).lateral {
            return;
        }
        if pg_sys::check_enable_rls(layout.relid, pg_sys::Oid::INVALID, true) == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32 {
            return;
        }
        // (the table is locked: the rewriter locked the view body's relations; a cached plan locks it again)
        (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
        (*rte).relid = layout.relid;
        (*rte).relkind = pg_sys::RELKIND_RELATION as std::ffi::c_char;
        (*rte).rellockmode = pg_sys::AccessShareLock as i32;
        (*rte).subquery = std::ptr::null_mut();
        (*rte).tablesample = std::ptr::null_mut();
        // the role's rights were checked on the table by the router's permission copy of the entry
        (*rte).requiredPerms = 0;
        (*rte).checkAsUser = pg_sys::Oid::INVALID;
        crate::route::scans::world_scan::mark(rte);
    }
}

/// The range-table index the `wholerow` junk column of an UPDATE / DELETE of a view reads.
unsafe fn wholerow_source(parse: *mut pg_sys::Query) -> Option<i32> {
    unsafe {
        let tl = (*parse).targetList;
        for i in 0..if tl.is_null() { 0 } else { (*tl).length } {
            let te = crate::fast_ffi::list_nth(tl, i) as *mut pg_sys::TargetEntry;
            if !(*te).resjunk || (*te).resname.is_null() || std::ffi::CStr::from_ptr((*te).resname).to_bytes() != b"wholerow" {
                continue;
            }
            let e = (*te).expr as *mut pg_sys::Node;
            if !e.is_null() && (*e).type_ == pg_sys::NodeTag::T_Var {
                let v = e as *mut pg_sys::Var;
                if (*v).varattno == 0 && (*v).varlevelsup == 0 {
                    return Some((*v).varno as i32);
                }
            }
            return None;
        }
        None
    }
}
