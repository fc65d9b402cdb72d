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
use std::collections::HashMap;

thread_local! {
    /// Set by BEGIN / START TRANSACTION, cleared when the top-level transaction ends.
    static IN_BLOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub fn explicit_transaction_block() -> bool {
    IN_BLOCK.with(|b| b.get()) && unsafe { pg_sys::IsTransactionBlock() }
}

/// At a transaction's end (called by storage's one transaction callback, last).
pub fn on_xact_end(event: pg_sys::XactEvent::Type) {
    use pg_sys::XactEvent::*;
    if matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PARALLEL_ABORT) {
        IN_BLOCK.with(|b| b.set(false));
    }
    if matches!(event, XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT) {
        routing_aborted();
    }
}

/// An error raised while a query was being routed (by Postgres, under a frame that longjmps past
/// route_query's guard) aborts the (sub)transaction: the next query is routed again. Without this, one
/// error inside routing (`FOR UPDATE` of a view with GROUP BY) left the session reading and writing main.
pub fn routing_aborted() {
    ROUTING.with(|r| r.set(false));
}

mod finish;
mod utility;
mod write_locks;
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
    }
    super::world_scan::install();
    super::history_lookup::install();
}

/// Is this session routed into a world right now? (Not in main, not pg_worlds' own work, and inside a
/// transaction where the catalog can be read.)
fn routing_active() -> bool {
    if overlay::override_active() {
        // a merge or diff reading or writing another world on purpose
        return unsafe { pg_sys::IsTransactionState() };
    }
    !guc::in_main() && !storage::internal() && unsafe { pg_sys::IsTransactionState() }
}

#[pg_guard]
unsafe extern "C-unwind" fn post_parse_analyze(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    unsafe {
        if let Some(prev) = PREV_POST_PARSE_ANALYZE {
            pg_guard_ffi_boundary(|| prev(pstate, query, jstate));
        }
        if PAST_SYNC.with(|s| s.get()) {
            // the views' own statements: their definitions read main's tables and storage as written
            return;
        }
        if crate::time::past_schema::out_of_step()
            && past_schema_can_sync()
            && pg_sys::ActiveSnapshotSet()
            // a write's target is open until analysis ends: its view can't be dropped now (and a write in
            // the past fails anyway)
            && matches!((*query).commandType, pg_sys::CmdType::CMD_SELECT | pg_sys::CmdType::CMD_UTILITY)
        {
            // a session that entered or left 'main@when' since its views were made: make or drop them, then
            // analyse this statement again (its names may resolve to them, or no longer should)
            let changed = {
                PAST_SYNC.with(|s| s.set(true));
                struct Reset;
                impl Drop for Reset {
                    fn drop(&mut self) {
                        PAST_SYNC.with(|s| s.set(false));
                    }
                }
                let _reset = Reset;
                crate::time::past_schema::sync()
            };
            if changed && (*query).commandType != pg_sys::CmdType::CMD_UTILITY && analyse_again(pstate, query) {
                return; // the fresh analysis was routed by this hook
            }
        }
        if (*query).commandType == pg_sys::CmdType::CMD_UTILITY {
            if let Some(select) = spec_show((*query).utilityStmt) {
                // SHOW WORLDS typed as it is in the spec (Postgres reads it as SHOW of a setting)
                replace_with_select(pstate, query, select);
                return;
            }
            // DECLARE CURSOR and CREATE TABLE AS / SELECT INTO hold their analysed query inside (other
            // utility statements are analysed without a snapshot: no catalog lookups for them)
            if let Some(inner) = utility_query((*query).utilityStmt) {
                if routing_active() && overlay::routing_world().is_some() {
                    if overlay::routing_world().is_some_and(|w| w.read_only) && locks_rows(inner) {
                        refuse_write_in_past(); // DECLARE ... FOR UPDATE in a moment of the past
                    }
                    route_query(inner);
                }
            }
        } else if routing_active() && reads_relations(query) && reads_user_relations(query) && overlay::routing_world().is_some() {
            if overlay::routing_world().is_some_and(|w| w.read_only) && locks_rows(query) {
                // FOR UPDATE / SHARE in a moment of the past: as in a read-only transaction
                refuse_write_in_past();
            }
            if (*query).commandType == pg_sys::CmdType::CMD_MERGE && merge_into_tracked(query) {
                super::merge_command::remember(pstate, query);
            }
            route_query(query);
        }
    }
}

thread_local! {
    /// Set while the views of a session in the past are made or dropped (their own statements are analysed
    /// too)
    static PAST_SYNC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Can the views of a session in the past be made now? (A user's statement, not inside a SECURITY DEFINER
/// function (the views are the session role's, resolved on its search_path), in a transaction, in a
/// database with pg_worlds.)
fn past_schema_can_sync() -> bool {
    let mut user = pg_sys::Oid::INVALID;
    let mut context = 0;
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut context) };
    !PAST_SYNC.with(|s| s.get())
        && !storage::internal()
        && !overlay::override_active()
        && context & pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32 == 0
        && unsafe { pg_sys::IsTransactionState() && pg_sys::get_namespace_oid(c"worlds".as_ptr(), true) != pg_sys::Oid::INVALID }
}

/// Makes (or drops) the views of a session in the past now, if they are out of step (after SWITCH WORLD).
pub fn sync_past_schema() {
    if crate::time::past_schema::out_of_step() && past_schema_can_sync() {
        PAST_SYNC.with(|s| s.set(true));
        // SET runs without a snapshot; the views' statements need one
        let pushed = unsafe { !pg_sys::ActiveSnapshotSet() };
        if pushed {
            unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
        }
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(crate::time::past_schema::sync));
        if pushed && done.is_ok() {
            unsafe { pg_sys::PopActiveSnapshot() };
        }
        PAST_SYNC.with(|s| s.set(false));
        if let Err(e) = done {
            std::panic::resume_unwind(e);
        }
    }
}

/// Analyses the statement behind `query` again from its text and puts the result in its place. Only for
/// statements without parameters (their types live in the caller's parse state); false when not done.
unsafe fn analyse_again(pstate: *mut pg_sys::ParseState, query: *mut pg_sys::Query) -> bool {
    unsafe {
        if (*pstate).p_paramref_hook.is_some() || (*pstate).p_sourcetext.is_null() || (*query).stmt_location < 0 {
            return false;
        }
        let text = std::ffi::CStr::from_ptr((*pstate).p_sourcetext).to_bytes();
        let start = (*query).stmt_location as usize;
        let end = if (*query).stmt_len > 0 { start + (*query).stmt_len as usize } else { text.len() };
        if end > text.len() || start >= end {
            return false;
        }
        let Ok(statement) = std::ffi::CString::new(&text[start..end]) else { return false };
        let statement = pg_sys::pstrdup(statement.as_ptr());
        let raw = pg_sys::raw_parser(statement, pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        if raw.is_null() || (*raw).length != 1 {
            return false;
        }
        let fresh = pg_sys::parse_analyze_fixedparams(
            pg_sys::list_nth(raw, 0) as *mut pg_sys::RawStmt,
            statement,
            std::ptr::null(),
            0,
            (*pstate).p_queryEnv,
        );
        (*fresh).stmt_location = (*query).stmt_location;
        (*fresh).stmt_len = (*query).stmt_len;
        std::ptr::copy_nonoverlapping(fresh, query, 1);
        true
    }
}

/// The spec's SHOW statements that Postgres's grammar reads as SHOW of a setting (SHOW WORLDS, SHOW
/// BRANCHES, SHOW HISTORY, SHOW history_retention), as the query that answers them, in a database with
/// pg_worlds (elsewhere Postgres answers as it always has).
unsafe fn spec_show(stmt: *mut pg_sys::Node) -> Option<&'static std::ffi::CStr> {
    unsafe {
        if stmt.is_null() || (*stmt).type_ != pg_sys::NodeTag::T_VariableShowStmt {
            return None;
        }
        let name = (*(stmt as *mut pg_sys::VariableShowStmt)).name;
        if name.is_null() {
            return None;
        }
        let select = match std::ffi::CStr::from_ptr(name).to_bytes() {
            b"worlds" => c"SELECT * FROM worlds.show_worlds()",
            b"branches" => c"SELECT * FROM worlds.show_branches()",
            b"history" => c"SELECT * FROM worlds.show_history()",
            b"history_retention" => c"SELECT worlds.history_retention() AS history_retention",
            _ => return None,
        };
        (pg_sys::get_namespace_oid(c"worlds_data".as_ptr(), true) != pg_sys::Oid::INVALID).then_some(select)
    }
}

/// Puts the analysed `select` in the place of `query` (which keeps its place in the statement's text).
unsafe fn replace_with_select(pstate: *mut pg_sys::ParseState, query: *mut pg_sys::Query, select: &std::ffi::CStr) {
    unsafe {
        let text = pg_sys::pstrdup(select.as_ptr());
        let raw = pg_sys::raw_parser(text, pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        let fresh = pg_sys::parse_analyze_fixedparams(pg_sys::list_nth(raw, 0) as *mut pg_sys::RawStmt, text, std::ptr::null(), 0, (*pstate).p_queryEnv);
        (*fresh).stmt_location = (*query).stmt_location;
        (*fresh).stmt_len = (*query).stmt_len;
        std::ptr::copy_nonoverlapping(fresh, query, 1);
    }
}

/// ALTER SYSTEM SET history_retention = '<interval>' (or TO '0'), typed as in the spec: the setting is
/// pg_worlds', not the server's (Postgres would refuse it as an unknown parameter). Its value as text.
unsafe fn history_retention_value(stmt: *mut pg_sys::Node) -> Option<String> {
    unsafe {
        if stmt.is_null() || (*stmt).type_ != pg_sys::NodeTag::T_AlterSystemStmt {
            return None;
        }
        let set = (*(stmt as *mut pg_sys::AlterSystemStmt)).setstmt;
        if set.is_null() || (*set).name.is_null() || std::ffi::CStr::from_ptr((*set).name).to_bytes() != b"history_retention" {
            return None;
        }
        if pg_sys::get_namespace_oid(c"worlds_data".as_ptr(), true) == pg_sys::Oid::INVALID {
            return None;
        }
        if (*set).kind != pg_sys::VariableSetKind::VAR_SET_VALUE || (*set).args.is_null() || (*(*set).args).length != 1 {
            raise("42601", "ALTER SYSTEM SET history_retention takes one value: = '<interval>' or TO '0'");
        }
        let arg = pg_sys::list_nth((*set).args, 0) as *mut pg_sys::Node;
        if (*arg).type_ != pg_sys::NodeTag::T_A_Const {
            raise("42601", "ALTER SYSTEM SET history_retention takes an interval as a string: = '<interval>'");
        }
        let value = &(*(arg as *mut pg_sys::A_Const)).val;
        let text = match value.node.type_ {
            pg_sys::NodeTag::T_String => std::ffi::CStr::from_ptr(value.sval.sval).to_string_lossy().into_owned(),
            pg_sys::NodeTag::T_Integer => value.ival.ival.to_string(),
            pg_sys::NodeTag::T_Float => std::ffi::CStr::from_ptr(value.fval.fval).to_string_lossy().into_owned(),
            _ => raise("42601", "ALTER SYSTEM SET history_retention takes an interval as a string: = '<interval>'"),
        };
        Some(text)
    }
}

/// Does this utility statement change the session's world (SET / RESET worlds.world, RESET ALL, DISCARD)?
unsafe fn changes_world_setting(stmt: *mut pg_sys::Node) -> bool {
    unsafe {
        match (*stmt).type_ {
            pg_sys::NodeTag::T_DiscardStmt => true,
            pg_sys::NodeTag::T_VariableSetStmt => {
                let v = stmt as *mut pg_sys::VariableSetStmt;
                (*v).kind == pg_sys::VariableSetKind::VAR_RESET_ALL
                    || (!(*v).name.is_null() && std::ffi::CStr::from_ptr((*v).name).to_bytes().eq_ignore_ascii_case(b"worlds.world"))
            }
            _ => false,
        }
    }
}

struct RouteContext {
    tracked: std::rc::Rc<HashMap<pg_sys::Oid, i32>>,
    /// a plain SELECT (no row locks, no writes in WITH): the tables it reads can be left as they are,
    /// for the world scan to read (see world_scan.rs)
    world_scan: bool,
    /// the overlay views themselves (already routed; never inlined again)
    overlays: std::rc::Rc<std::collections::HashMap<pg_sys::Oid, i32>>,
}

thread_local! {
    /// Set while a query is being routed: the catalog lookups routing makes are never routed themselves.
    static ROUTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The analysed query a utility statement runs: DECLARE CURSOR's, CREATE TABLE AS's (also under EXPLAIN).
unsafe fn utility_query(stmt: *mut pg_sys::Node) -> Option<*mut pg_sys::Query> {
    unsafe {
        if stmt.is_null() {
            return None;
        }
        let inner = match (*stmt).type_ {
            pg_sys::NodeTag::T_DeclareCursorStmt => (*(stmt as *mut pg_sys::DeclareCursorStmt)).query,
            pg_sys::NodeTag::T_CreateTableAsStmt => (*(stmt as *mut pg_sys::CreateTableAsStmt)).query,
            pg_sys::NodeTag::T_ExplainStmt => {
                let q = (*(stmt as *mut pg_sys::ExplainStmt)).query;
                // EXPLAIN of a plain query is routed when it is planned; EXPLAIN CREATE TABLE AS is not
                if !q.is_null() && (*q).type_ == pg_sys::NodeTag::T_Query {
                    let q = q as *mut pg_sys::Query;
                    if (*q).commandType == pg_sys::CmdType::CMD_UTILITY {
                        return utility_query((*q).utilityStmt);
                    }
                }
                return None;
            }
            _ => return None,
        };
        (!inner.is_null() && (*inner).type_ == pg_sys::NodeTag::T_Query).then_some(inner as *mut pg_sys::Query)
    }
}

unsafe fn merge_into_tracked(query: *mut pg_sys::Query) -> bool {
    unsafe {
        let rte = pg_sys::list_nth((*query).rtable, (*query).resultRelation - 1) as *mut pg_sys::RangeTblEntry;
        storage::tracked_tables().contains_key(&(*rte).relid)
    }
}

/// Routes a query pg_worlds built itself (MERGE's join).
pub(super) unsafe fn route_select(query: *mut pg_sys::Query) {
    unsafe { route_query(query) }
}

unsafe fn route_query(query: *mut pg_sys::Query) {
    if ROUTING.with(|r| r.replace(true)) {
        return;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ROUTING.with(|r| r.set(false));
        }
    }
    let _reset = Reset;
    let tracked = storage::tracked_tables();
    if tracked.is_empty() {
        return;
    }
    let overlays = storage::overlay_relations();
    // FOR UPDATE / SHARE of a world's rows: key locks (row_locks.rs), read through the overlay views (whose
    // key lookups name the keys a statement locks before it reads)
    let row_locks = match overlay::routing_world().filter(|w| w.num > 0 && !w.read_only) {
        Some(w) => unsafe { super::row_locks::rewrite(query, &tracked, w.num) },
        None => false,
    };
    let world_scan = guc::WORLD_SCAN.get()
        && !row_locks
        && unsafe { (*query).commandType == pg_sys::CmdType::CMD_SELECT && !(*query).hasModifyingCTE && !locks_rows(query) };
    let mut ctx = RouteContext { tracked, world_scan, overlays };
    unsafe {
        // called directly, not through the guarded walker: an error must unwind through this frame (so
        // the ROUTING flag resets), not longjmp over it
        route_node(query as *mut pg_sys::Node, &mut ctx as *mut RouteContext as *mut std::ffi::c_void);
    }
}

/// Does the query (or any sub-query) lock rows (FOR UPDATE / SHARE)? The planner then marks every table of
/// that level, which the world scan doesn't support.
unsafe fn locks_rows(query: *mut pg_sys::Query) -> bool {
    unsafe { any_query_level(query, |q| !(*q).rowMarks.is_null()) }
}

/// Does any level of the statement (itself, its sub-queries, CTEs and sub-links) pass `test`?
unsafe fn any_query_level(query: *mut pg_sys::Query, test: unsafe fn(*mut pg_sys::Query) -> bool) -> bool {
    #[pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            if (*node).type_ == pg_sys::NodeTag::T_Query {
                let q = node as *mut pg_sys::Query;
                let test = *(context as *const unsafe fn(*mut pg_sys::Query) -> bool);
                return test(q) || pg_sys::query_tree_walker(q, Some(walker), context, 0);
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    unsafe { walker(query as *mut pg_sys::Node, &test as *const _ as *mut std::ffi::c_void) }
}

#[pg_guard]
unsafe extern "C-unwind" fn route_walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    unsafe { route_node(node, context) }
}

unsafe fn route_node(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        if (*node).type_ == pg_sys::NodeTag::T_Query {
            let query = node as *mut pg_sys::Query;
            let ctx = &mut *(context as *mut RouteContext);
            route_range_table(query, ctx);
            return pg_sys::query_tree_walker(query, Some(route_walker), context, 0);
        }
        pg_sys::expression_tree_walker(node, Some(route_walker), context)
    }
}

unsafe fn route_range_table(query: *mut pg_sys::Query, ctx: &mut RouteContext) {
    unsafe {
        let rtable = (*query).rtable;
        let n = if rtable.is_null() { 0 } else { (*rtable).length };
        let mut perm_copies: Vec<*mut pg_sys::RangeTblEntry> = Vec::new();
        for i in 0..n {
            let rte = pg_sys::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            if (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION {
                continue;
            }
            let is_result = (*query).resultRelation == i + 1;
            // user views in FROM (not a view body's own OLD/NEW entries, nor our permission copies)
            if (*rte).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char && !ctx.overlays.contains_key(&(*rte).relid) {
                if is_result {
                    // the views a session in the past reads its tables through (time/past_schema.rs) too
                    refuse_write_in_past();
                    if view_reads_tracked((*rte).relid, ctx) {
                        let (instead_of, rules) = write_actions((*rte).relid, (*query).commandType);
                        if instead_of && (*query).commandType == pg_sys::CmdType::CMD_INSERT {
                            // the view's INSTEAD OF trigger runs as in main: its own statements are routed
                            continue;
                        }
                        if instead_of || rules {
                            raise(
                                "0A000",
                                format!(
                                    "{} through view {} inside a world is not supported yet: it has {}; write its tables directly",
                                    command_word((*query).commandType),
                                    relation_name((*rte).relid),
                                    if instead_of { "an INSTEAD OF trigger" } else { "rules" }
                                ),
                            );
                        }
                        if !(*query).onConflict.is_null() {
                            raise("0A000", "INSERT ... ON CONFLICT through a view inside a world is not supported yet; write the table itself");
                        }
                        // the write goes to the view's world twin; rights are checked as Postgres would: the
                        // role's on the view, the view owner's on the table
                        let (twin, bases) = super::view_writes::world_twin((*rte).relid, &ctx.tracked);
                        let copy = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
                        (*copy).inFromCl = false;
                        perm_copies.push(copy);
                        let owner = view_owner((*rte).relid);
                        for base in bases {
                            let b = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
                            (*b).inFromCl = false;
                            (*b).relid = base;
                            (*b).relkind = pg_sys::RELKIND_RELATION as std::ffi::c_char;
                            (*b).checkAsUser = owner;
                            (*b).selectedCols = std::ptr::null_mut();
                            (*b).insertedCols = std::ptr::null_mut();
                            (*b).updatedCols = std::ptr::null_mut();
                            perm_copies.push(b);
                        }
                        (*rte).relid = twin;
                        (*rte).requiredPerms = 0;
                        pg_sys::LockRelationOid(twin, (*rte).rellockmode);
                    }
                } else if (*rte).inFromCl {
                    inline_view(rte);
                }
                continue;
            }
            // AS OF reads main's table itself (as `_w_main`, see worlds._as_of_query); never a write
            if !is_result && !(*rte).eref.is_null() && std::ffi::CStr::from_ptr((*(*rte).eref).aliasname).to_bytes() == b"_w_main" {
                continue;
            }
            let tracked = ctx.tracked.get(&(*rte).relid).copied();
            if is_result && tracked.is_some() {
                // a moment is read only, whether or not the statement would touch a row
                refuse_write_in_past();
            }
            if tracked.is_none() && is_result {
                refuse_untracked_write((*rte).relid);
            }
            if is_result && write_actions((*rte).relid, (*query).commandType).1 {
                // rules rewrite the statement against the table itself, which a world's write doesn't reach
                raise(
                    "0A000",
                    format!(
                        "{} into table {} inside a world is not supported: it has rules for it",
                        command_word((*query).commandType),
                        relation_name((*rte).relid)
                    ),
                );
            }
            if tracked.is_none() && (*rte).relkind == pg_sys::RELKIND_PARTITIONED_TABLE as std::ffi::c_char {
                raise("0A000", format!("partitioned table {} can't be used inside a world yet", relation_name((*rte).relid)));
            }
            if let Some(tabno) = tracked {
                let layout = storage::relation_layout(tabno);
                if (*query).commandType == pg_sys::CmdType::CMD_MERGE && is_result {
                    // Postgres can't MERGE into the overlay view: ExecutorRun runs it (merge_command)
                    super::merge_command::check_target(&layout);
                    continue;
                }
                if let Some(why) = &layout.unsupported {
                    raise("0A000", why.clone());
                }
                if is_result && layout.delta == pg_sys::Oid::INVALID {
                    // (every tracked table has one once the database has a world: storage/world_storage.rs)
                    raise("55000", format!("table {} has no storage for worlds' rows", relation_name((*rte).relid)));
                }
                if is_result && matches!((*query).commandType, pg_sys::CmdType::CMD_INSERT | pg_sys::CmdType::CMD_UPDATE) {
                    refuse_generated_values(query, (*rte).relid);
                }
                // the overlay reads the table with its owner's rights: the role's row-level security
                // policies for this command, as Postgres would apply them to the table, go onto the
                // swapped entry (see apply_row_security)
                let row_security = if pg_sys::check_enable_rls((*rte).relid, pg_sys::Oid::INVALID, true)
                    == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
                {
                    if is_result && !(*query).onConflict.is_null() {
                        raise("0A000", "INSERT ... ON CONFLICT into a table with row-level security is not supported inside a world yet");
                    }
                    Some(row_security_of(query, rte, i + 1))
                } else {
                    None
                };
                if ctx.world_scan
                    && !is_result
                    && row_security.is_none()
                    && (*query).commandType == pg_sys::CmdType::CMD_SELECT
                    && super::world_scan::supports(&layout)
                {
                    // read in place by the world scan: the entry stays the table's (its rights included)
                    refuse_system_columns(query, i + 1);
                    super::world_scan::mark(rte);
                    continue;
                }
                let mut overlay = layout.overlay;
                // UPDATE / DELETE of a table without a key: the rows twin, which tells the trigger which
                // physical row each row is
                if is_result
                    && layout.overlay_rows != pg_sys::Oid::INVALID
                    && matches!((*query).commandType, pg_sys::CmdType::CMD_UPDATE | pg_sys::CmdType::CMD_DELETE)
                {
                    overlay = layout.overlay_rows;
                }
                if is_result && !(*query).onConflict.is_null() {
                    if (*(*query).onConflict).action == pg_sys::OnConflictAction::ONCONFLICT_UPDATE {
                        // DO UPDATE: its action travels to the twin's trigger in the twin's extra column
                        let action = super::upsert::action_sql(query, i + 1, &layout);
                        add_action_column(query, overlay_width(&layout), super::upsert::action_value(&action));
                    }
                    // the conflict twin of the overlay: its trigger skips (DO NOTHING) or updates (DO
                    // UPDATE) a row whose key the world already has
                    overlay = layout.overlay_nothing;
                    (*query).onConflict = std::ptr::null_mut();
                }
                refuse_system_columns(query, i + 1);
                if !(*rte).tablesample.is_null() {
                    // the overlay is a view: the sample would be dropped and every row read
                    raise(
                        "0A000",
                        format!(
                            "TABLESAMPLE of table {} is not supported inside a world: only tables with one integer key column are sampled there",
                            layout.table_name
                        ),
                    );
                }
                // the permission check stays on the real table: a copy of the entry, outside the join tree
                let copy = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
                (*copy).inFromCl = false;
                (*copy).inh = false;
                perm_copies.push(copy);
                (*rte).relid = overlay;
                (*rte).relkind = pg_sys::RELKIND_VIEW as std::ffi::c_char;
                (*rte).inh = false;
                (*rte).requiredPerms = 0;
                (*rte).tablesample = std::ptr::null_mut();

                // the rewriter expands the view without locking it: lock it as the table was
                pg_sys::LockRelationOid(overlay, (*rte).rellockmode);
                if let Some(policies) = row_security {
                    apply_row_security(query, rte, i + 1, is_result, policies);
                }
            }
        }
        for copy in perm_copies {
            (*query).rtable = pg_sys::lappend((*query).rtable, copy as *mut std::ffi::c_void);
        }
    }
}

/// 25006 in a session in 'name@when' (a moment of the past is read only).
fn refuse_write_in_past() {
    if let Some(past) = overlay::routing_world().filter(|w| w.read_only) {
        raise("25006", format!("{} is a moment of the past: it can be read, not written", past.name));
    }
}

/// Postgres refuses a value for a generated column, and for an identity column GENERATED ALWAYS (unless
/// INSERT ... OVERRIDING SYSTEM VALUE), when it rewrites the statement; a write in a world targets the
/// overlay, which has neither kind of column, so the same check is made here (428C9, Postgres's words).
unsafe fn refuse_generated_values(query: *mut pg_sys::Query, relid: pg_sys::Oid) {
    unsafe {
        let insert = (*query).commandType == pg_sys::CmdType::CMD_INSERT;
        let rel = pg_sys::relation_open(relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        if insert && (*query).override_ == pg_sys::OverridingKind::OVERRIDING_USER_VALUE {
            // the values given for identity columns are ignored: the columns get their defaults, as the
            // rewriter does for the table itself (which no longer is the target once routed)
            let tlist = (*query).targetList;
            let mut kept: *mut pg_sys::List = std::ptr::null_mut();
            for i in 0..if tlist.is_null() { 0 } else { (*tlist).length } {
                let tle = pg_sys::list_nth(tlist, i) as *mut pg_sys::TargetEntry;
                let attno = (*tle).resno as i32;
                let identity = !(*tle).resjunk
                    && attno > 0
                    && attno <= (*desc).natts
                    && (*(*desc).attrs.as_ptr().add(attno as usize - 1)).attidentity != 0;
                if !identity {
                    kept = pg_sys::lappend(kept, tle as *mut std::ffi::c_void);
                }
            }
            (*query).targetList = kept;
        }
        let tlist = (*query).targetList;
        let mut refused: Option<(String, bool)> = None;
        for i in 0..if tlist.is_null() { 0 } else { (*tlist).length } {
            let tle = pg_sys::list_nth(tlist, i) as *mut pg_sys::TargetEntry;
            let attno = (*tle).resno as i32;
            if (*tle).resjunk || attno <= 0 || attno > (*desc).natts {
                continue;
            }
            let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
            let generated = att.attgenerated != 0;
            let always = att.attidentity == pg_sys::ATTRIBUTE_IDENTITY_ALWAYS as std::ffi::c_char;
            // neither kind, or an identity column an INSERT ... OVERRIDING SYSTEM VALUE may set
            if !generated && (!always || (insert && (*query).override_ == pg_sys::OverridingKind::OVERRIDING_SYSTEM_VALUE)) {
                continue;
            }
            if !is_default(query, (*tle).expr as *mut pg_sys::Node) {
                refused = Some((std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned(), generated));
                break;
            }
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        if let Some((name, generated)) = refused {
            let detail = if generated {
                format!("Column \"{name}\" is a generated column.")
            } else {
                format!("Column \"{name}\" is an identity column defined as GENERATED ALWAYS.")
            };
            if insert {
                let hint = (!generated).then(|| "Use OVERRIDING SYSTEM VALUE to override.".to_string());
                crate::api::raise_with("428C9", format!("cannot insert a non-DEFAULT value into column \"{name}\""), Some(detail), hint);
            }
            crate::api::raise_with("428C9", format!("column \"{name}\" can only be updated to DEFAULT"), Some(detail), None);
        }
    }
}

/// Is this target value DEFAULT (also in every row of a multi-row VALUES)?
unsafe fn is_default(query: *mut pg_sys::Query, expr: *mut pg_sys::Node) -> bool {
    unsafe {
        if expr.is_null() {
            return false;
        }
        match (*expr).type_ {
            pg_sys::NodeTag::T_SetToDefault => true,
            pg_sys::NodeTag::T_Var => {
                let var = expr as *mut pg_sys::Var;
                let rte = pg_sys::list_nth((*query).rtable, (*var).varno - 1) as *mut pg_sys::RangeTblEntry;
                if (*var).varlevelsup != 0 || (*rte).rtekind != pg_sys::RTEKind::RTE_VALUES {
                    return false;
                }
                let rows = (*rte).values_lists;
                (0..(*rows).length).all(|r| {
                    let row = pg_sys::list_nth(rows, r) as *mut pg_sys::List;
                    let v = pg_sys::list_nth(row, (*var).varattno as i32 - 1) as *mut pg_sys::Node;
                    !v.is_null() && (*v).type_ == pg_sys::NodeTag::T_SetToDefault
                })
            }
            _ => false,
        }
    }
}

/// A world's rows are not heap tuples of the table: `ctid`, `xmin` and the other system columns of a
/// tracked table have no meaning there (0A000, rather than the planner's internal error).
unsafe fn refuse_system_columns(query: *mut pg_sys::Query, rt_index: i32) {
    unsafe {
        let mut attnos: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        for node in [(*query).targetList as *mut pg_sys::Node, (*query).jointree as *mut pg_sys::Node, (*query).returningList as *mut pg_sys::Node] {
            pg_sys::pull_varattnos(node, rt_index as pg_sys::Index, &mut attnos);
        }
        let mut member = -1;
        loop {
            member = pg_sys::bms_next_member(attnos, member);
            if member < 0 {
                break;
            }
            if member + pg_sys::FirstLowInvalidHeapAttributeNumber < 0 {
                raise("0A000", "system columns (ctid, xmin, ...) of a tracked table can't be used inside a world: a world's rows are not the table's heap tuples");
            }
        }
    }
}

/// The row-level security a role's command on a table gets in main: (security quals, WITH CHECK options,
/// whether the quals have sub-links). Asked of Postgres before the entry is swapped.
struct RowSecurity(*mut pg_sys::List, *mut pg_sys::List, bool);

unsafe fn row_security_of(query: *mut pg_sys::Query, rte: *mut pg_sys::RangeTblEntry, rt_index: i32) -> RowSecurity {
    unsafe {
        let mut quals: *mut pg_sys::List = std::ptr::null_mut();
        let mut checks: *mut pg_sys::List = std::ptr::null_mut();
        let mut has_row_security = false;
        let mut has_sublinks = false;
        pg_sys::get_row_security_policies(query, rte, rt_index, &mut quals, &mut checks, &mut has_row_security, &mut has_sublinks);
        RowSecurity(quals, checks, has_sublinks)
    }
}

/// The policies on the overlay's entry. USING quals: a read becomes a security-barrier sub-query of the
/// overlay filtered by them, so they run before any of the query's own conditions, as on the table (the
/// planner would drop security quals on a view entry it flattens); for UPDATE and DELETE they join the
/// statement's WHERE. WITH CHECK: Postgres checks a view with an INSTEAD OF trigger only for WITH CHECK
/// OPTION, so the policies' checks run as such, marked, and executor_run words a violation as Postgres
/// does for the table (42501).
unsafe fn apply_row_security(query: *mut pg_sys::Query, rte: *mut pg_sys::RangeTblEntry, rt_index: i32, is_result: bool, policies: RowSecurity) {
    unsafe {
        let RowSecurity(quals, checks, has_sublinks) = policies;
        if !quals.is_null() {
            if is_result {
                let qual = pg_sys::make_ands_explicit(quals) as *mut pg_sys::Node;
                (*(*query).jointree).quals = pg_sys::make_and_qual((*(*query).jointree).quals, qual);
            } else {
                filter_with_barrier(rte, quals, rt_index, has_sublinks);
            }
        }
        if !checks.is_null() {
            for k in 0..(*checks).length {
                let wco = pg_sys::list_nth(checks, k) as *mut pg_sys::WithCheckOption;
                (*wco).kind = pg_sys::WCOKind::WCO_VIEW_CHECK;
                (*wco).polname = pg_sys::pstrdup(RLS_CHECK.as_ptr());
            }
            (*query).withCheckOptions = pg_sys::list_concat(checks, (*query).withCheckOptions);
        }
        if has_sublinks {
            (*query).hasSubLinks = true;
        }
        (*query).hasRowSecurity = true;
    }
}

/// Turns the (already swapped) entry into `(SELECT * FROM overlay WHERE quals)` as a security barrier.
unsafe fn filter_with_barrier(rte: *mut pg_sys::RangeTblEntry, quals: *mut pg_sys::List, rt_index: i32, has_sublinks: bool) {
    unsafe {
        let inner = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
        (*inner).inFromCl = true;
        (*inner).requiredPerms = 0;
        (*inner).securityQuals = std::ptr::null_mut();
        pg_sys::ChangeVarNodes(quals as *mut pg_sys::Node, rt_index, 1, 0);
        let sub = pg_sys::palloc0(std::mem::size_of::<pg_sys::Query>()) as *mut pg_sys::Query;
        (*sub).type_ = pg_sys::NodeTag::T_Query;
        (*sub).commandType = pg_sys::CmdType::CMD_SELECT;
        (*sub).querySource = pg_sys::QuerySource::QSRC_ORIGINAL;
        (*sub).canSetTag = true;
        (*sub).rtable = pg_sys::lappend(std::ptr::null_mut(), inner as *mut std::ffi::c_void);
        let rtr = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblRef>()) as *mut pg_sys::RangeTblRef;
        (*rtr).type_ = pg_sys::NodeTag::T_RangeTblRef;
        (*rtr).rtindex = 1;
        (*sub).jointree = pg_sys::makeFromExpr(
            pg_sys::lappend(std::ptr::null_mut(), rtr as *mut std::ffi::c_void),
            pg_sys::make_ands_explicit(quals) as *mut pg_sys::Node,
        );
        (*sub).hasSubLinks = has_sublinks;
        let rel = pg_sys::relation_open((*rte).relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        let mut tlist: *mut pg_sys::List = std::ptr::null_mut();
        for a in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(a);
            let var = pg_sys::makeVar(1, (a + 1) as i16, att.atttypid, att.atttypmod, att.attcollation, 0);
            let te = pg_sys::makeTargetEntry(var as *mut pg_sys::Expr, (a + 1) as i16, pg_sys::pstrdup(att.attname.data.as_ptr()), false);
            tlist = pg_sys::lappend(tlist, te as *mut std::ffi::c_void);
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        (*sub).targetList = tlist;
        (*rte).rtekind = pg_sys::RTEKind::RTE_SUBQUERY;
        (*rte).subquery = sub;
        (*rte).security_barrier = true;
        (*rte).relid = pg_sys::Oid::INVALID;
        (*rte).relkind = 0;
        (*rte).rellockmode = 0;
        (*rte).inh = false;
    }
}

/// The number of attributes of the tracked table (and so of its overlay): the conflict twin's action
/// column comes right after them.
unsafe fn overlay_width(layout: &storage::Layout) -> i16 {
    unsafe {
        let rel = pg_sys::relation_open(layout.relid, pg_sys::NoLock as i32);
        let n = (*(*rel).rd_att).natts as i16;
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        n
    }
}

/// Supplies the conflict twin's action column in an INSERT's target list.
unsafe fn add_action_column(query: *mut pg_sys::Query, width: i16, value: *mut pg_sys::Expr) {
    unsafe {
        let name = std::ffi::CString::new(super::upsert::ACTION_COLUMN).unwrap();
        let te = pg_sys::makeTargetEntry(value, width + 1, pg_sys::pstrdup(name.as_ptr()), false);
        (*query).targetList = pg_sys::lappend((*query).targetList, te as *mut std::ffi::c_void);
    }
}

/// A write inside a world must never reach main: a table pg_worlds doesn't track (tracking failed, or it
/// was untracked) is refused, unless it is the session's own temporary table or pg_worlds' own.
unsafe fn refuse_untracked_write(relid: pg_sys::Oid) {
    unsafe {
        if is_own_or_system(relid) {
            return;
        }
        raise(
            "0A000",
            format!(
                "table {} is not tracked by pg_worlds, so it can't be written inside a world (the write would reach main); track it with SELECT worlds.track('{}')",
                relation_name(relid),
                relation_name(relid)
            ),
        );
    }
}

unsafe fn relation_name(relid: pg_sys::Oid) -> String {
    unsafe {
        let name = pg_sys::get_rel_name(relid);
        if name.is_null() { relid.to_u32().to_string() } else { std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned() }
    }
}

/// A user view read inside a world becomes the sub-query it stands for, so the tracked tables it reads are
/// swapped too (the rewriter would otherwise expand it later, unrouted). The view's own permission check
/// moves to its OLD entry, as the rewriter does; its body keeps the view owner's rights (or the invoker's,
/// for security_invoker views) and its security_barrier.
pub(super) unsafe fn inline_view(rte: *mut pg_sys::RangeTblEntry) {
    unsafe {
        let rel = pg_sys::relation_open((*rte).relid, pg_sys::NoLock as i32);
        let body = pg_sys::copyObjectImpl(pg_sys::get_view_query(rel) as *const std::ffi::c_void) as *mut pg_sys::Query;
        pg_sys::AcquireRewriteLocks(body, true, false);
        let old = pg_sys::list_nth((*body).rtable, 0) as *mut pg_sys::RangeTblEntry;
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

unsafe fn view_is_security_barrier(rel: pg_sys::Relation) -> bool {
    unsafe {
        let opts = (*rel).rd_options as *const pg_sys::ViewOptions;
        !opts.is_null() && (*opts).security_barrier
    }
}

unsafe fn view_owner(view: pg_sys::Oid) -> pg_sys::Oid {
    unsafe {
        let rel = pg_sys::relation_open(view, pg_sys::NoLock as i32);
        let owner = (*(*rel).rd_rel).relowner;
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        owner
    }
}

/// Can the statement touch a table at all? (`SELECT 1`, `SELECT worlds.switch_world('main')` can't: they
/// need no world resolved, so they still run when the session's world is gone or never existed.)
unsafe fn reads_relations(query: *mut pg_sys::Query) -> bool {
    unsafe {
        if (*query).hasSubLinks || !(*query).cteList.is_null() || (*query).resultRelation != 0 {
            return true;
        }
        let rtable = (*query).rtable;
        (0..if rtable.is_null() { 0 } else { (*rtable).length }).any(|i| {
            let rte = pg_sys::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            matches!((*rte).rtekind, pg_sys::RTEKind::RTE_RELATION | pg_sys::RTEKind::RTE_SUBQUERY | pg_sys::RTEKind::RTE_JOIN)
        })
    }
}

/// Does the statement (its sub-queries and CTEs included) name a relation outside pg_worlds' own schemas,
/// the system catalogs and temporary tables? Those alone are never routed, so a statement over them needs
/// no world resolved: a session whose world doesn't exist (a mistyped `options=-c worlds.world=...`) can
/// still run SWITCH WORLD, whose functions read only the catalog.
unsafe fn reads_user_relations(query: *mut pg_sys::Query) -> bool {
    unsafe fn names_user_relation(q: *mut pg_sys::Query) -> bool {
        unsafe {
            let rtable = (*q).rtable;
            (0..if rtable.is_null() { 0 } else { (*rtable).length }).any(|i| {
                let rte = pg_sys::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
                (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION
                    // a temporary view may read tracked tables (the views of a session in the past do)
                    && ((*rte).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char || !is_own_or_system((*rte).relid))
            })
        }
    }
    unsafe { any_query_level(query, names_user_relation) }
}

/// A relation of pg_worlds' own schemas, of the system catalogs, or a temporary one.
unsafe fn is_own_or_system(relid: pg_sys::Oid) -> bool {
    unsafe {
        if pg_sys::get_rel_persistence(relid) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
            return true;
        }
        let ns = pg_sys::get_rel_namespace(relid);
        if ns == pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE) {
            return true;
        }
        let name = pg_sys::get_namespace_name(ns);
        !name.is_null() && matches!(std::ffi::CStr::from_ptr(name).to_bytes(), b"worlds" | b"worlds_data")
    }
}

/// For a write of this kind to a relation: does it have an INSTEAD OF row trigger, and rules (other than a
/// view's own SELECT rule)?
unsafe fn write_actions(relid: pg_sys::Oid, cmd: pg_sys::CmdType::Type) -> (bool, bool) {
    unsafe {
        let rel = pg_sys::relation_open(relid, pg_sys::NoLock as i32);
        let td = (*rel).trigdesc;
        let instead_of = !td.is_null()
            && match cmd {
                pg_sys::CmdType::CMD_INSERT => (*td).trig_insert_instead_row,
                pg_sys::CmdType::CMD_UPDATE => (*td).trig_update_instead_row,
                pg_sys::CmdType::CMD_DELETE => (*td).trig_delete_instead_row,
                _ => false,
            };
        let locks = (*rel).rd_rules;
        let rules = !locks.is_null()
            && (0..(*locks).numLocks as usize).any(|i| {
                let r = *(*locks).rules.add(i);
                (*r).event == cmd && (*r).enabled as u8 != b'D'
            });
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        (instead_of, rules)
    }
}

fn command_word(cmd: pg_sys::CmdType::Type) -> &'static str {
    match cmd {
        pg_sys::CmdType::CMD_INSERT => "INSERT",
        pg_sys::CmdType::CMD_UPDATE => "UPDATE",
        pg_sys::CmdType::CMD_DELETE => "DELETE",
        _ => "MERGE",
    }
}

/// Does a view (through other views) read a tracked table?
unsafe fn view_reads_tracked(view: pg_sys::Oid, ctx: &RouteContext) -> bool {
    unsafe {
        let rel = pg_sys::relation_open(view, pg_sys::AccessShareLock as i32);
        let body = pg_sys::get_view_query(rel);
        let rtable = (*body).rtable;
        let n = if rtable.is_null() { 0 } else { (*rtable).length };
        let mut found = false;
        for i in 0..n {
            let r = pg_sys::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            if (*r).rtekind == pg_sys::RTEKind::RTE_RELATION
                && (ctx.tracked.contains_key(&(*r).relid)
                    || ((*r).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char && (*r).relid != view && view_reads_tracked((*r).relid, ctx)))
            {
                found = true;
            }
        }
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        found
    }
}

/// A thin frame, as process_utility: pg_worlds' work guarded, Postgres's executor called directly.
unsafe extern "C-unwind" fn executor_start(query_desc: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int) {
    unsafe {
        let freeze = guarded(|| executor_start_before(query_desc));
        match PREV_EXECUTOR_START {
            Some(prev) => prev(query_desc, eflags),
            None => raw::standard_ExecutorStart(query_desc, eflags),
        }
        if freeze {
            guarded(|| executor_start_after(query_desc));
        }
    }
}

/// Whether the plan's world parts are to be kept once it started (a portal's own SELECT).
unsafe fn executor_start_before(query_desc: *mut pg_sys::QueryDesc) -> bool {
    unsafe {
        if !storage::internal() {
            overlay::next_statement();
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

unsafe fn executor_start_after(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        if !(*query_desc).estate.is_null() {
            let rtable = (*(*query_desc).plannedstmt).rtable;
            let tracked = storage::tracked_tables();
            let tabnos: Vec<i32> = (0..if rtable.is_null() { 0 } else { (*rtable).length })
                .map(|i| pg_sys::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry)
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

/// Marks the WITH CHECK options that are a table's row-level security policies (run as a view's checks).
const RLS_CHECK: &std::ffi::CStr = c"pg_worlds: row-level security";

/// ExecutorRun: while a statement that checks row-level security policies in a world runs, a failed
/// check reads as Postgres words it for the table (42501), not as a view's WITH CHECK OPTION (44000).
unsafe extern "C-unwind" fn executor_run(
    query_desc: *mut pg_sys::QueryDesc,
    direction: pg_sys::ScanDirection::Type,
    count: u64,
    execute_once: bool,
) {
    unsafe {
        // (a thin frame, as process_utility; the callback lives in the query's memory, and an error
        // unwinds error_context_stack as Postgres's own handlers do)
        let Some(callback) = guarded(|| executor_run_before(query_desc)) else { return };
        match PREV_EXECUTOR_RUN {
            Some(prev) => prev(query_desc, direction, count, execute_once),
            None => raw::standard_ExecutorRun(query_desc, direction, count, execute_once),
        }
        if !callback.is_null() {
            pg_sys::error_context_stack = (*callback).previous;
        }
    }
}

/// None: pg_worlds ran the statement itself. Else the error context callback pushed for it (or null).
unsafe fn executor_run_before(query_desc: *mut pg_sys::QueryDesc) -> Option<*mut pg_sys::ErrorContextCallback> {
    unsafe {
        if (*query_desc).operation == pg_sys::CmdType::CMD_MERGE && routing_active() && overlay::routing_world().is_some() {
            if let Some(written) = super::merge_command::run_in_world(query_desc) {
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
unsafe fn row_security_checked_table(query_desc: *mut pg_sys::QueryDesc) -> Option<std::ffi::CString> {
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
            let list = pg_sys::list_nth(lists, i) as *mut pg_sys::List;
            for k in 0..if list.is_null() { 0 } else { (*list).length } {
                let wco = pg_sys::list_nth(list, k) as *mut pg_sys::WithCheckOption;
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
unsafe extern "C-unwind" fn row_security_violation(arg: *mut std::ffi::c_void) {
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
unsafe fn refuse_writes_to_main(stmt: *mut pg_sys::PlannedStmt) {
    unsafe {
        let results = (*stmt).resultRelations;
        if results.is_null() {
            return;
        }
        let tracked = storage::tracked_tables();
        for i in 0..(*results).length {
            let index = pg_sys::list_nth_int(results, i);
            let rte = pg_sys::list_nth((*stmt).rtable, index - 1) as *mut pg_sys::RangeTblEntry;
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

/// Utility statements that change the schema; refused inside a world until worlds learn schema changes.
fn is_ddl(tag: pg_sys::NodeTag) -> bool {
    use pg_sys::NodeTag::*;
    matches!(
        tag,
        T_CreateStmt | T_AlterTableStmt | T_DropStmt | T_RenameStmt | T_IndexStmt | T_ViewStmt | T_CreateTableAsStmt
            | T_TruncateStmt | T_CreateSeqStmt | T_AlterSeqStmt | T_CreateFunctionStmt | T_AlterFunctionStmt
            | T_CreateSchemaStmt | T_CreateTrigStmt | T_RuleStmt | T_CompositeTypeStmt | T_CreateEnumStmt
            | T_AlterEnumStmt | T_CreateDomainStmt | T_AlterDomainStmt | T_CommentStmt | T_ClusterStmt
            | T_AlterObjectSchemaStmt | T_AlterOwnerStmt | T_CreatePolicyStmt | T_AlterPolicyStmt
            | T_RefreshMatViewStmt | T_ReindexStmt | T_GrantStmt | T_CreateExtensionStmt | T_AlterExtensionStmt
    )
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
        let tracked = storage::tracked_tables();
        let rels = (*t).relations;
        let mut statements = Vec::new();
        let mut any_tracked = false;
        for i in 0..if rels.is_null() { 0 } else { (*rels).length } {
            let rv = pg_sys::list_nth(rels, i) as *mut pg_sys::RangeVar;
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
                    && (0..(*rels).length).all(|i| is_temp_relation(pg_sys::list_nth(rels, i) as *mut pg_sys::RangeVar));
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
            let rv = pg_sys::makeRangeVarFromNameList(pg_sys::list_nth((*d).objects, i) as *mut pg_sys::List);
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
    }
}
