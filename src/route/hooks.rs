//! The executor and utility hooks pg_worlds installs. Each chains to the hook that was there before it, so other
//! extensions (pg_stat_statements, auto_explain) keep working beside it. In main they only chain.
//!
//! - post_parse_analyze: in a world, swaps every tracked table's range-table entry for its overlay view
//!   (in sub-queries, CTEs and sub-links too) and inlines user views so the tables they read are swapped
//!   as well. Privileges stay checked on the real table: the swapped entry's checks move to a
//!   permission-only copy of the original entry; row-level security policies are applied to the overlay.
//!   Writes through a user's view go to its world twin; ON CONFLICT goes to the overlay's conflict twin.
//! - ExecutorStart: marks a new statement, so the overlay cache is re-validated once per statement, and
//!   refuses any plan in a world that would write a tracked table itself.
//! - ExecutorRun: words a failed row-level security check in a world as Postgres does for the table.
//! - ExecutorFinish: clears the capture triggers' counters, so EXPLAIN ANALYZE lists the user's triggers only.
//! - ProcessUtility: refuses DDL inside a world, routes `COPY t TO` through a query and `COPY t FROM`
//!   through a staging table.
use crate::storage::{self, overlay};
use crate::{api::raise, guc};
use pgrx::pg_sys;
use pgrx::pg_sys::ffi::pg_guard_ffi_boundary;
use pgrx::prelude::*;

/// At a transaction's end (called by storage's one transaction callback, last).
pub fn on_xact_end(event: pg_sys::XactEvent::Type) {
    use pg_sys::XactEvent::*;
    if matches!(event, XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT) {
        routing_aborted();
    }
}

/// An error raised while a query was being routed (by Postgres, under a frame that longjmps past
/// route_query's guard) aborts the (sub)transaction: the next query is routed again. Without this, one
/// error inside routing (`FOR UPDATE` of a view with GROUP BY) left the session reading and writing main.
pub fn routing_aborted() {
    ROUTING.with(|r| r.set(false));
    crate::governance::agents::on_abort();
}

mod finish;
mod planner;
mod utility;
mod write_locks;
mod analyze;
mod executor;
use analyze::*;
use executor::*;
use crate::route::rewrite::*;
pub use analyze::sync_past_schema;
use write_locks::lock_world_before_reading;
use utility::process_utility;

static mut PREV_POST_PARSE_ANALYZE: pg_sys::post_parse_analyze_hook_type = None;
static mut PREV_EXECUTOR_START: pg_sys::ExecutorStart_hook_type = None;
static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;
static mut PREV_EXECUTOR_RUN: pg_sys::ExecutorRun_hook_type = None;

pub fn install_hooks() {
    unsafe {
        PREV_POST_PARSE_ANALYZE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(post_parse_analyze);
        PREV_EXECUTOR_START = pg_sys::ExecutorStart_hook;
        pg_sys::ExecutorStart_hook = Some(executor_start);
        PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility);
        PREV_EXECUTOR_RUN = pg_sys::ExecutorRun_hook;
        pg_sys::ExecutorRun_hook = Some(executor_run);
        finish::PREV_EXECUTOR_FINISH = pg_sys::ExecutorFinish_hook;
        pg_sys::ExecutorFinish_hook = Some(finish::executor_finish);
        planner::install();
    }
    super::world_ddl::install();
    super::scans::world_scan::install();
    super::scans::key_lookup::install();
}

/// Is this CREATE TRIGGER one of pg_worlds' history capture triggers, already on its table? pg_dump dumps
/// them with the table; on restore, tracking the table as it is created made them first.
unsafe fn capture_trigger_exists(t: *mut pg_sys::CreateTrigStmt) -> bool {
    unsafe {
        let name = if (*t).trigname.is_null() { return false } else { std::ffi::CStr::from_ptr((*t).trigname).to_bytes() };
        if !finish::is_capture_trigger(name) || (*t).relation.is_null() {
            return false;
        }
        let relid = pg_sys::RangeVarGetRelidExtended((*t).relation, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        if relid == pg_sys::Oid::INVALID {
            return false;
        }
        pg_sys::get_trigger_oid(relid, (*t).trigname, true) != pg_sys::Oid::INVALID
    }
}

/// TRUNCATE inside a world empties the world's view of each tracked table: a DELETE of all its rows,
/// written as pg_worlds (TRUNCATE fires no row triggers) once the role's TRUNCATE right on the table is
/// checked. Returns false when it names only temporary tables (Postgres truncates them as always); beside
/// tracked ones they are emptied by DELETE. CASCADE and RESTART IDENTITY are refused (0A000): worlds don't
/// check foreign keys until a merge, and sequences are main's.
unsafe fn truncate_in_world(t: *mut pg_sys::TruncateStmt, world: overlay::World) -> bool {
    unsafe {
        let tracked = storage::routed_tables();
        let rels = (*t).relations;
        let mut statements = Vec::new();
        let mut any_tracked = false;
        for i in 0..if rels.is_null() { 0 } else { (*rels).length } {
            let rv = crate::fast_ffi::list_nth(rels, i) as *mut pg_sys::RangeVar;
            let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::AccessShareLock as i32, 0, None, std::ptr::null_mut());
            let name = crate::spi_calls::get_one_with_args::<String>("SELECT $1::regclass::text", &[relid.into()]).ok().flatten().unwrap_or_default();
            if pg_sys::get_rel_persistence(relid) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
                statements.push((false, format!("DELETE FROM {name}")));
                continue;
            }
            let Some(&tabno) = tracked.get(&relid) else { refuse_untracked_write(relid); continue };
            if pg_sys::pg_class_aclcheck(relid, pg_sys::GetUserId(), pg_sys::ACL_TRUNCATE as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
                raise("42501", format!("permission denied for table {}", relation_name(relid)));
            }
            any_tracked = true;
            statements.push((true, format!("DELETE FROM {}", storage::relation_layout(tabno).table_name)));
        }
        if !any_tracked {
            return false;
        }
        if world.read_only {
            raise("25006", format!("{} is a moment of the past: it can be read, not written", world.name));
        }
        if (*t).behavior == pg_sys::DropBehavior::DROP_CASCADE {
            raise("0A000", "TRUNCATE ... CASCADE is not supported inside a world; name the referencing tables too");
        }
        if (*t).restart_seqs {
            raise("0A000", "TRUNCATE ... RESTART IDENTITY is not supported inside a world: sequences are main's");
        }
        for (is_tracked, sql) in statements {
            let run = || crate::spi_calls::run(&sql).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            if is_tracked {
                storage::as_internal(|| overlay::with_world(Some(world.clone()), run));
            } else {
                run();
            }
        }
        true
    }
}

/// Temporary tables are the session's own, not the database's schema: allowed inside a world.
unsafe fn creates_temp_table(stmt: *mut pg_sys::Node) -> bool {
    unsafe {
        let rel = match (*stmt).type_ {
            pg_sys::NodeTag::T_CreateStmt => (*(stmt as *mut pg_sys::CreateStmt)).relation,
            pg_sys::NodeTag::T_CreateTableAsStmt => {
                let into = (*(stmt as *mut pg_sys::CreateTableAsStmt)).into;
                if into.is_null() { std::ptr::null_mut() } else { (*into).rel }
            }
            pg_sys::NodeTag::T_ViewStmt => (*(stmt as *mut pg_sys::ViewStmt)).view,
            pg_sys::NodeTag::T_DropStmt => return drops_only_temp_tables(stmt as *mut pg_sys::DropStmt),
            // a temporary table's own indexes (its primary key too) and its ALTERs
            pg_sys::NodeTag::T_IndexStmt => return is_temp_relation((*(stmt as *mut pg_sys::IndexStmt)).relation),
            pg_sys::NodeTag::T_AlterTableStmt => return is_temp_relation((*(stmt as *mut pg_sys::AlterTableStmt)).relation),
            pg_sys::NodeTag::T_TruncateStmt => {
                let rels = (*(stmt as *mut pg_sys::TruncateStmt)).relations;
                return !rels.is_null()
                    && (0..(*rels).length).all(|i| is_temp_relation(crate::fast_ffi::list_nth(rels, i) as *mut pg_sys::RangeVar));
            }
            _ => std::ptr::null_mut(),
        };
        !rel.is_null() && (*rel).relpersistence == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char
    }
}

unsafe fn is_temp_relation(rv: *mut pg_sys::RangeVar) -> bool {
    unsafe {
        if rv.is_null() {
            return false;
        }
        let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        relid != pg_sys::Oid::INVALID && pg_sys::get_rel_persistence(relid) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char
    }
}

/// DROP TABLE of the session's own temporary tables only (they live outside every world).
unsafe fn drops_only_temp_tables(d: *mut pg_sys::DropStmt) -> bool {
    unsafe {
        if !matches!((*d).removeType, pg_sys::ObjectType::OBJECT_TABLE | pg_sys::ObjectType::OBJECT_VIEW) || (*d).objects.is_null() {
            return false;
        }
        (0..(*(*d).objects).length).all(|i| {
            let rv = pg_sys::makeRangeVarFromNameList(crate::fast_ffi::list_nth((*d).objects, i) as *mut pg_sys::List);
            let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
            relid != pg_sys::Oid::INVALID && pg_sys::get_rel_persistence(relid) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char
        })
    }
}

/// Runs pg_worlds' own work of a hook: a Rust panic or an error it raises becomes a Postgres error.
#[inline]
unsafe fn guarded<R>(f: impl FnOnce() -> R) -> R {
    unsafe { pgrx::pg_sys::submodules::panic::pgrx_extern_c_guard(f) }
}

/// Postgres's own functions, called without pgrx's guard (an error they raise is left as it is).
pub(super) mod raw {
    use pgrx::pg_sys;
    unsafe extern "C-unwind" {
        pub fn standard_ProcessUtility(
            pstmt: *mut pg_sys::PlannedStmt,
            query_string: *const std::ffi::c_char,
            read_only_tree: bool,
            context: pg_sys::ProcessUtilityContext::Type,
            params: pg_sys::ParamListInfo,
            query_env: *mut pg_sys::QueryEnvironment,
            dest: *mut pg_sys::DestReceiver,
            qc: *mut pg_sys::QueryCompletion,
        );
        pub fn standard_ExecutorStart(query_desc: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int);
        pub fn standard_ExecutorRun(query_desc: *mut pg_sys::QueryDesc, direction: pg_sys::ScanDirection::Type, count: u64, execute_once: bool);
        pub fn standard_ExecutorFinish(query_desc: *mut pg_sys::QueryDesc);
        pub fn standard_planner(
            parse: *mut pg_sys::Query,
            query_string: *const std::ffi::c_char,
            cursor_options: std::ffi::c_int,
            bound_params: pg_sys::ParamListInfo,
        ) -> *mut pg_sys::PlannedStmt;
    }
}
