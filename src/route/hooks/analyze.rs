//! The post_parse_analyze hook: a tracked table of a query in a world (or a moment of the past) becomes its
//! overlay view, or is marked for the world scan; views are expanded, row-level security applied, writes
//! checked (route_range_table).
use super::*;
use crate::backend_local::BackendLocal;

/// Is this session routed into a world right now? (Not in main, not pg_worlds' own work, and inside a
/// transaction where the catalog can be read.)
pub(super) fn routing_active() -> bool {
    if overlay::override_active() {
        // a merge or diff reading or writing another world on purpose
        return unsafe { crate::fast_ffi::IsTransactionState() };
    }
    !guc::in_main() && !storage::internal() && unsafe { crate::fast_ffi::IsTransactionState() }
}

#[pg_guard]
pub(super) unsafe extern "C-unwind" fn post_parse_analyze(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    unsafe {
        if let Some(prev) = PREV_POST_PARSE_ANALYZE {
            pg_guard_ffi_boundary(|| prev(pstate, query, jstate));
        }
        if pg_sys::am_walsender {
            // a subscriber asking which tables a publication has
            storage::decoding::publication_tables_for_subscriber(query);
            return;
        }
        if crate::route::world_ddl::defining() {
            // a view's, rule's or policy's query a world stores: kept as written
            return;
        }
        // a SIMULATE script's gen_random_uuid() calls made from its seeded random() (governance/read_only.rs)
        if crate::governance::read_only::confined() {
            crate::governance::read_only::seed_uuids(query);
        }
        if PAST_SYNC.with(|s| s.get()) {
            // the views' own statements: their definitions read main's tables and storage as written
            return;
        }
        if crate::time::past_schema::out_of_step()
            && past_schema_can_sync()
            && crate::fast_ffi::ActiveSnapshotSet()
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
                crate::route::merge_command::remember(pstate, query);
            }
            if route_query(query) {
                return; // (its walk kept the query's pg_notify() calls too)
            }
        }
        if (*query).commandType != pg_sys::CmdType::CMD_UTILITY && routing_active() {
            // pg_notify() in a world (in any query, with tables or none): kept in its outbox
            keep_notifies(query);
        }
    }
}

/// Set while the views of a session in the past are made or dropped (their own statements are analysed
/// too)
static PAST_SYNC: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// Can the views of a session in the past be made now? (A user's statement, not inside a SECURITY DEFINER
/// function (the views are the session role's, resolved on its search_path), in a transaction, in a
/// database with pg_worlds.)
pub(super) fn past_schema_can_sync() -> bool {
    let mut user = pg_sys::Oid::INVALID;
    let mut context = 0;
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut context) };
    !PAST_SYNC.with(|s| s.get())
        && !storage::internal()
        && !overlay::override_active()
        && context & pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32 == 0
        && unsafe { crate::fast_ffi::IsTransactionState() && pg_sys::get_namespace_oid(c"worlds".as_ptr(), true) != pg_sys::Oid::INVALID }
}

/// Makes (or drops) the views of a session in the past now, if they are out of step (after SWITCH WORLD).
pub fn sync_past_schema() {
    if crate::time::past_schema::out_of_step() && past_schema_can_sync() {
        PAST_SYNC.with(|s| s.set(true));
        // SET runs without a snapshot; the views' statements need one
        let pushed = unsafe { !crate::fast_ffi::ActiveSnapshotSet() };
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
pub(super) unsafe fn analyse_again(pstate: *mut pg_sys::ParseState, query: *mut pg_sys::Query) -> bool {
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
            crate::fast_ffi::list_nth(raw, 0) as *mut pg_sys::RawStmt,
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
/// BRANCHES, SHOW HISTORY, SHOW history_retention, SHOW AGENTS, SHOW AUDIT, SHOW REVIEWS, SHOW READERS, SHOW CHECKPOINTS, SHOW METRICS, SHOW STORAGE, SHOW DISK), as the query that answers them, in a database with
/// pg_worlds (elsewhere Postgres answers as it always has).
pub(super) unsafe fn spec_show(stmt: *mut pg_sys::Node) -> Option<&'static std::ffi::CStr> {
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
            b"agents" => c"SELECT * FROM worlds.show_agents()",
            b"audit" => c"SELECT * FROM worlds.show_audit()",
            b"reviews" => c"SELECT * FROM worlds.show_reviews()",
            b"readers" => c"SELECT * FROM worlds.show_readers()",
            b"checkpoints" => c"SELECT * FROM worlds.show_checkpoints()",
            b"metrics" => c"SELECT * FROM worlds.show_metrics()",
            b"storage" => c"SELECT * FROM worlds.show_storage()",
            b"disk" => c"SELECT * FROM worlds.show_disk()",
            _ => return None,
        };
        (crate::storage::storage_namespace() != pg_sys::Oid::INVALID).then_some(select)
    }
}

/// Puts the analysed `select` in the place of `query` (which keeps its place in the statement's text).
pub(super) unsafe fn replace_with_select(pstate: *mut pg_sys::ParseState, query: *mut pg_sys::Query, select: &std::ffi::CStr) {
    unsafe {
        let text = pg_sys::pstrdup(select.as_ptr());
        let raw = pg_sys::raw_parser(text, pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        let fresh = pg_sys::parse_analyze_fixedparams(crate::fast_ffi::list_nth(raw, 0) as *mut pg_sys::RawStmt, text, std::ptr::null(), 0, (*pstate).p_queryEnv);
        (*fresh).stmt_location = (*query).stmt_location;
        (*fresh).stmt_len = (*query).stmt_len;
        std::ptr::copy_nonoverlapping(fresh, query, 1);
    }
}

/// ALTER SYSTEM SET history_retention = '<interval>' (or TO '0'), typed as in the spec: the setting is
/// pg_worlds', not the server's (Postgres would refuse it as an unknown parameter). Its value as text.
pub(super) unsafe fn history_retention_value(stmt: *mut pg_sys::Node) -> Option<String> {
    unsafe {
        if stmt.is_null() || (*stmt).type_ != pg_sys::NodeTag::T_AlterSystemStmt {
            return None;
        }
        let set = (*(stmt as *mut pg_sys::AlterSystemStmt)).setstmt;
        if set.is_null() || (*set).name.is_null() || std::ffi::CStr::from_ptr((*set).name).to_bytes() != b"history_retention" {
            return None;
        }
        if crate::storage::storage_namespace() == pg_sys::Oid::INVALID {
            return None;
        }
        if (*set).kind != pg_sys::VariableSetKind::VAR_SET_VALUE || (*set).args.is_null() || (*(*set).args).length != 1 {
            raise("42601", "ALTER SYSTEM SET history_retention takes one value: = '<interval>' or TO '0'");
        }
        let arg = crate::fast_ffi::list_nth((*set).args, 0) as *mut pg_sys::Node;
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
pub(super) unsafe fn changes_world_setting(stmt: *mut pg_sys::Node) -> bool {
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
