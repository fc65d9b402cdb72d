//! The ExecutorStart and ExecutorRun hooks: a new statement for the overlay cache, the locks a world's
//! write takes before it reads, no write of main from a world; row-level security's error wording.
use super::*;

/// A thin frame, as process_utility: pg_worlds' work guarded, Postgres's executor called directly.
pub(super) unsafe extern "C-unwind" fn executor_start(query_desc: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int) {
    unsafe {
        let freeze = guarded(|| executor_start_before(query_desc, eflags));
        match PREV_EXECUTOR_START {
            Some(prev) => prev(query_desc, eflags),
            None => raw::standard_ExecutorStart(query_desc, eflags),
        }
        if freeze {
            guarded(|| executor_start_after(query_desc));
        }
        // what it reads, in a world that checks its reads (governance/reads); main pays one test
        if !crate::guc::in_main() {
            guarded(|| crate::governance::reads::record(query_desc, eflags));
        }
        // which columns clients read, main's and worlds' (governance/readers/clients.rs): a repeated read
        // touches only this backend's map
        if crate::governance::readers::clients::wanted(eflags) {
            guarded(|| crate::governance::readers::clients::record(query_desc));
        }
    }
}

/// Whether the plan's world parts are to be kept once it started (a portal's own SELECT).
pub(super) unsafe fn executor_start_before(query_desc: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int) -> bool {
    unsafe {
        if !storage::internal() {
            overlay::next_statement();
            // (EXPLAIN without ANALYZE runs nothing: no agent's write to count)
            if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as std::ffi::c_int == 0 {
                agent_gates(query_desc);
            }
        }
        // (a MERGE's plan never runs in a world: executor_run runs it through merge_command)
        if !matches!((*query_desc).operation, pg_sys::CmdType::CMD_SELECT | pg_sys::CmdType::CMD_MERGE) && routing_active() {
            refuse_writes_to_main((*query_desc).plannedstmt);
            lock_world_before_reading(query_desc);
        } else if (*query_desc).operation == pg_sys::CmdType::CMD_SELECT && routing_active() && !storage::internal() {
            // SELECT ... FOR UPDATE / SHARE in a world
            lock_world_before_reading(query_desc);
        }
        // a portal's own SELECT (a cursor, a FOR loop's query) reads the world as of its start, whenever its
        // rows are fetched: the world parts of the tables it reads are kept once it has started
        let freeze = (*query_desc).operation == pg_sys::CmdType::CMD_SELECT
            && routing_active()
            && !overlay::override_active()
            && overlay::starting_portal_select();
        freeze
    }
}

/// An agent's write (governance/agents.rs): of main, it needs write_main; of a world, write or write_own.
unsafe fn agent_gates(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        let stmt = (*query_desc).plannedstmt;
        let results = (*stmt).resultRelations;
        if results.is_null() || (*results).length == 0 {
            return;
        }
        let relations: Vec<pg_sys::Oid> = (0..(*results).length)
            .map(|i| (*(crate::fast_ffi::list_nth((*stmt).rtable, crate::fast_ffi::list_nth_int(results, i) - 1) as *mut pg_sys::RangeTblEntry)).relid)
            .collect();
        if routing_active() {
            // past worlds.max_disk_bytes a world's writes fail (53100; storage/disk_limit.rs): with no
            // limit set, one read of the setting
            if storage::disk_limit::limit() > 0 {
                if let Some(world) = overlay::routing_world().filter(|w| w.num > 0) {
                    storage::disk_limit::check_world_write(&world.name);
                }
            }
            // a write the router sent to a world (the overlay views and twins in worlds_data; a MERGE
            // names the table itself), not pg_worlds' own catalog writes
            let tracked = storage::routed_tables();
            let storage_schema = storage::storage_namespace();
            let routed = relations.iter().any(|r| tracked.contains_key(r) || pg_sys::get_rel_namespace(*r) == storage_schema);
            if routed {
                if let Some(world) = overlay::routing_world().filter(|w| w.num > 0) {
                    crate::governance::agents::check_world_write(world.num, &world.name, query_desc);
                }
            }
            return;
        }
        crate::governance::agents::check_main_write(&relations, query_desc);
    }
}

pub(super) unsafe fn executor_start_after(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        if !(*query_desc).estate.is_null() {
            let rtable = (*(*query_desc).plannedstmt).rtable;
            let tracked = storage::routed_tables();
            let tabnos: Vec<i32> = (0..if rtable.is_null() { 0 } else { (*rtable).length })
                .map(|i| crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry)
                .filter(|rte| (**rte).rtekind == pg_sys::RTEKind::RTE_RELATION)
                .filter_map(|rte| tracked.get(&(*rte).relid).copied())
                .collect();
            if !tabnos.is_empty() {
                overlay::freeze_for_query((*(*query_desc).estate).es_query_cxt, &tabnos);
            }
        }
    }
}

unsafe extern "C-unwind" {
    fn errcode(sqlerrcode: std::ffi::c_int) -> std::ffi::c_int;
}

/// ExecutorRun: while a statement that checks row-level security policies in a world runs, a failed
/// check reads as Postgres words it for the table (42501), not as a view's WITH CHECK OPTION (44000).
pub(super) unsafe extern "C-unwind" fn executor_run(
    query_desc: *mut pg_sys::QueryDesc,
    direction: pg_sys::ScanDirection::Type,
    count: u64,
    execute_once: bool,
) {
    unsafe {
        // (a thin frame, as process_utility; the callback lives in the query's memory, and an error
        // unwinds error_context_stack as Postgres's own handlers do)
        let Some(callback) = guarded(|| executor_run_before(query_desc)) else { return };
        // a world's session: its namespaces' names reach the client as the schemas they stand for
        // (route/present.rs)
        let (plan, rtable) = if (*query_desc).plannedstmt.is_null() {
            (std::ptr::null_mut(), std::ptr::null_mut())
        } else {
            ((*(*query_desc).plannedstmt).planTree, (*(*query_desc).plannedstmt).rtable)
        };
        let shown = if crate::storage::search_path::own_world().is_some() && crate::route::present::needs_receiver((*query_desc).tupDesc, plan, rtable) {
            guarded(|| crate::route::present::wrap((*query_desc).dest, false, false, plan, rtable))
        } else {
            None
        };
        let original = (*query_desc).dest;
        if let Some(d) = shown {
            (*query_desc).dest = d;
        }
        match PREV_EXECUTOR_RUN {
            Some(prev) => prev(query_desc, direction, count, execute_once),
            None => raw::standard_ExecutorRun(query_desc, direction, count, execute_once),
        }
        if shown.is_some() {
            (*query_desc).dest = original;
        }
        if !callback.is_null() {
            pg_sys::error_context_stack = (*callback).previous;
        }
    }
}

/// None: pg_worlds ran the statement itself. Else the error context callback pushed for it (or null).
pub(super) unsafe fn executor_run_before(query_desc: *mut pg_sys::QueryDesc) -> Option<*mut pg_sys::ErrorContextCallback> {
    unsafe {
        if (*query_desc).operation == pg_sys::CmdType::CMD_MERGE && routing_active() && overlay::routing_world().is_some() {
            if let Some(written) = crate::route::merge_command::run_in_world(query_desc) {
                (*(*query_desc).estate).es_processed = written;
                return None;
            }
        }
        let Some(table) = row_security_checked_table(query_desc) else { return Some(std::ptr::null_mut()) };
        let cxt = if (*query_desc).estate.is_null() { pg_sys::CurrentMemoryContext } else { (*(*query_desc).estate).es_query_cxt };
        let name = pg_sys::MemoryContextStrdup(cxt, table.as_ptr());
        let cb = pg_sys::MemoryContextAlloc(cxt, std::mem::size_of::<pg_sys::ErrorContextCallback>()) as *mut pg_sys::ErrorContextCallback;
        (*cb).previous = pg_sys::error_context_stack;
        (*cb).callback = Some(row_security_violation);
        (*cb).arg = name as *mut std::ffi::c_void;
        pg_sys::error_context_stack = cb;
        Some(cb)
    }
}

/// The table whose row-level security this statement checks as WITH CHECK options, when those are the
/// only ones it checks (a user's view with CHECK OPTION keeps its own wording).
pub(super) unsafe fn row_security_checked_table(query_desc: *mut pg_sys::QueryDesc) -> Option<std::ffi::CString> {
    unsafe {
        let op = (*query_desc).operation;
        if op != pg_sys::CmdType::CMD_INSERT && op != pg_sys::CmdType::CMD_UPDATE {
            return None;
        }
        let plan = (*(*query_desc).plannedstmt).planTree;
        if plan.is_null() || (*plan).type_ != pg_sys::NodeTag::T_ModifyTable {
            return None;
        }
        let lists = (*(plan as *mut pg_sys::ModifyTable)).withCheckOptionLists;
        if lists.is_null() {
            return None;
        }
        let mut table = None;
        for i in 0..(*lists).length {
            let list = crate::fast_ffi::list_nth(lists, i) as *mut pg_sys::List;
            for k in 0..if list.is_null() { 0 } else { (*list).length } {
                let wco = crate::fast_ffi::list_nth(list, k) as *mut pg_sys::WithCheckOption;
                if (*wco).kind != pg_sys::WCOKind::WCO_VIEW_CHECK {
                    continue;
                }
                if !(*wco).polname.is_null() && std::ffi::CStr::from_ptr((*wco).polname) == RLS_CHECK {
                    table = Some(std::ffi::CStr::from_ptr((*wco).relname).to_owned());
                } else {
                    return None;
                }
            }
        }
        table
    }
}

/// An error context callback: runs inside errfinish, so it can reword the error being raised.
pub(super) unsafe extern "C-unwind" fn row_security_violation(arg: *mut std::ffi::c_void) {
    unsafe {
        if pg_sys::geterrcode() == PgSqlErrorCode::ERRCODE_WITH_CHECK_OPTION_VIOLATION as i32 {
            errcode(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE as i32);
            pg_sys::errmsg_internal(
                c"new row violates row-level security policy for table \"%s\"".as_ptr(),
                arg as *const std::ffi::c_char,
            );
        }
    }
}

/// The last line of defence: a statement about to run inside a world must not write a tracked table
/// itself (whatever rewrote it: a rule, a view the router didn't see). Writes go to overlays only.
pub(super) unsafe fn refuse_writes_to_main(stmt: *mut pg_sys::PlannedStmt) {
    unsafe {
        let results = (*stmt).resultRelations;
        if results.is_null() {
            return;
        }
        let tracked = storage::tracked_tables();
        for i in 0..(*results).length {
            let index = crate::fast_ffi::list_nth_int(results, i);
            let rte = crate::fast_ffi::list_nth((*stmt).rtable, index - 1) as *mut pg_sys::RangeTblEntry;
            // (the world is resolved only for a write of a tracked table: pg_worlds' own catalog writes
            // run in a session whose world doesn't exist)
            if tracked.contains_key(&(*rte).relid) && overlay::routing_world().is_some() {
                raise(
                    "0A000",
                    format!(
                        "this statement would write table {} of main from inside a world (through a rule or a view pg_worlds can't route); nothing was written",
                        relation_name((*rte).relid)
                    ),
                );
            }
        }
    }
}

