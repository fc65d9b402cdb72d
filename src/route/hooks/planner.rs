//! The planner hook: an UPDATE or DELETE of a world reads its target rows in place, with the world scan
//! (route/scans/world_scan/), instead of through the overlay view's three-branch UNION ALL.
//!
//! The router makes a world's write target the table's overlay view (hooks/analyze.rs); its INSTEAD OF
//! trigger writes the world's rows (storage/writes.rs). For UPDATE / DELETE the rewriter then does what it
//! does for any view with an INSTEAD OF trigger: the view stays the result relation (a copy of its entry),
//! and the original entry becomes a sub-query of the view's body, the source of the rows, which a
//! `wholerow` junk column hands to the trigger as OLD. Planning that body — an append of main's rows, the
//! delta and history, each with a visibility condition — was a quarter of a world's TPC-B transaction, and
//! initialising its plan another tenth. Here, before Postgres plans the statement, that sub-query entry
//! goes back to being the table itself, marked for the world scan: the planner plans the table as main's
//! UPDATE would (its index on `WHERE id = $1`), and the world scan adds the world's rows and drops the rows
//! the world doesn't see, exactly as for a SELECT. The view's columns are the table's, attnum for attnum
//! (storage/overlay: a dropped column is a placeholder), so every Var of the entry reads the same column.
//!
//! Taken only where the world scan reads the table for a SELECT (one integer key column, no row-level
//! security) and the table has no inheritance children and no dropped column (OLD is typed as the view's
//! row, whose placeholder for a dropped column Postgres's check of a whole-row Var refuses); never for
//! `WHERE CURRENT OF` (a cursor's position in another plan). Everything else is planned as before.
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

/// The overlay view's body under an UPDATE / DELETE of a world becomes the table, read by the world scan.
unsafe fn read_target_in_place(parse: *mut pg_sys::Query) {
    unsafe {
        // (in main no target is a world's: the write twin is chosen in a world only, and a switch of world
        // analyses every statement again)
        if guc::in_main() || !crate::fast_ffi::IsTransactionState() {
            return;
        }
        let rtable = (*parse).rtable;
        let result = crate::fast_ffi::list_nth(rtable, (*parse).resultRelation - 1) as *mut pg_sys::RangeTblEntry;
        if (*result).rtekind != pg_sys::RTEKind::RTE_RELATION || (*result).relkind != pg_sys::RELKIND_VIEW as std::ffi::c_char {
            return;
        }
        let Some(&tabno) = storage::overlay_relations().get(&(*result).relid) else { return };
        let layout = storage::relation_layout(tabno);
        // the write twin (hooks/analyze.rs chose it): its body is the bare table, which must become the world
        // scan, whatever else holds now (a plan made again for a statement analyzed then)
        let twin = is_write_twin(&layout, (*result).relid);
        if !twin {
            // (a twin is converted even inside pg_worlds' own work: a statement of the app's analysed outside
            // it, planned again inside, still reads the world's rows)
            if storage::internal() || !guc::WORLD_SCAN.get() {
                return;
            }
            // the overlay itself (not a conflict or rows twin)
            if (*result).relid != layout.overlay {
                return;
            }
        }
        let converted = convert_source(parse, &layout);
        if twin && !converted {
            // (never expected: everything that decides it invalidates the statement, which is analyzed again)
            raise(
                "XX000",
                format!("pg_worlds: the {} of table {} inside a world can't read its rows in place; run it again", command_word((*parse).commandType), layout.table_name),
            );
        }
    }
}

/// The table's write twin `k_` (an integer key: the UPDATE / DELETE target whose body is the bare table).
pub(super) fn is_write_twin(layout: &storage::Layout, relid: pg_sys::Oid) -> bool {
    layout.key_kind == b'i' && layout.overlay_rows != pg_sys::Oid::INVALID && relid == layout.overlay_rows
}

/// Turns the sub-query entry the rewriter expanded the view's body into back into the table, marked for the
/// world scan; false (nothing changed) where it can't.
unsafe fn convert_source(parse: *mut pg_sys::Query, layout: &storage::Layout) -> bool {
    unsafe {
        if !in_place_target(layout) || has_current_of(parse) {
            return false;
        }
        // the entry the rewriter expanded the view's body into: the one the `wholerow` junk column reads
        let Some(source) = wholerow_source(parse) else { return false };
        let rte = crate::fast_ffi::list_nth((*parse).rtable, source - 1) as *mut pg_sys::RangeTblEntry;
        if (*rte).rtekind != pg_sys::RTEKind::RTE_SUBQUERY || !(*rte).securityQuals.is_null() || (*rte).lateral {
            return false;
        }
        if pg_sys::check_enable_rls(layout.relid, pg_sys::Oid::INVALID, true) == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32 {
            return false;
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
        true
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
