//! The ProcessUtility hook: DDL and utility statements in main and in worlds (the router's half for
//! statements that aren't planned): the spec's statements typed in psql, DDL keeping storage in step,
//! drops guarded, COPY FROM into a world, TRUNCATE in a world.
use super::*;
use crate::backend_local::BackendLocal;

#[allow(clippy::too_many_arguments)]
/// What ProcessUtility passes on to Postgres, and what it does after.
#[derive(Clone, Copy)]
pub(super) struct UtilityPass {
    pstmt: *mut pg_sys::PlannedStmt,
    read_only_tree: bool,
    stmt: *mut pg_sys::Node,
    guards_extension: bool,
    dropping_extension: bool,
    /// tracked tables whose storage a DROP TYPE / DOMAIN / COLLATION / SCHEMA changed: synced after it
    /// (boxed: the pass is Copy; freed after the drop, lost with an error)
    synced_after: *mut Vec<i32>,
    /// DDL run in this world (its number; 0: none) and the statement as world_ddl.rs saw it: what it
    /// deferred is recorded after it
    world_ddl: i32,
    world_stmt: *mut pg_sys::Node,
    /// the GUC level allowing reserved names for this statement (0: none), popped after it
    reserved_level: i32,
}

/// The hook itself is a thin frame holding nothing to drop: pg_worlds' work before and after runs guarded,
/// and Postgres's own utility processing is called directly, so an error it raises reaches the client as
/// Postgres raised it (position, context, every field), not re-raised by pgrx's guard.
pub(super) unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    unsafe {
        let pass = guarded(|| process_utility_before(pstmt, query_string, read_only_tree, context, params, query_env, dest, qc));
        let Some(b) = pass else { return };
        // pg_worlds' own DDL on its storage (from its functions, or its Rust code's SPI) runs as a subcommand,
        // as DDL Postgres runs inside another command does: event triggers, the user's and ours, don't fire
        // for it or collect it (main's DDL shows the user's event triggers what stock Postgres would)
        let context = if context == pg_sys::ProcessUtilityContext::PROCESS_UTILITY_QUERY && (crate::guc::INTERNAL_DDL.get() || storage::internal()) {
            pg_sys::ProcessUtilityContext::PROCESS_UTILITY_SUBCOMMAND
        } else {
            context
        };
        // EXPLAIN and FETCH in a world's session: its namespaces named as the schemas they stand for
        // (route/present.rs)
        let tag = if (*b.pstmt).utilityStmt.is_null() { pg_sys::NodeTag::T_Invalid } else { (*(*b.pstmt).utilityStmt).type_ };
        let shown = if matches!(tag, pg_sys::NodeTag::T_ExplainStmt | pg_sys::NodeTag::T_FetchStmt) && crate::storage::search_path::own_world().is_some() {
            guarded(|| crate::route::present::wrap(dest, tag == pg_sys::NodeTag::T_ExplainStmt, true, std::ptr::null_mut(), std::ptr::null_mut()))
        } else {
            None
        };
        let dest = shown.unwrap_or(dest);
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(b.pstmt, query_string, b.read_only_tree, context, params, query_env, dest, qc),
            None => raw::standard_ProcessUtility(b.pstmt, query_string, b.read_only_tree, context, params, query_env, dest, qc),
        }
        guarded(|| process_utility_after(b));
    }
}


#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn process_utility_before(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) -> Option<UtilityPass> {
    unsafe {
        let mut pstmt = pstmt;
        let mut read_only_tree = read_only_tree;
        let stmt = (*pstmt).utilityStmt;
        // the world's namespaces, if its setting changed where they couldn't be read
        storage::search_path::refresh_if_pending();
        let mut world_ddl = 0;
        let mut world_stmt: *mut pg_sys::Node = std::ptr::null_mut();
        let mut reserved_level = 0;
        if !stmt.is_null() && !storage::internal() && !crate::guc::INTERNAL_DDL.get() {
            // a read-only call (worlds.read_only: MCP safe mode) runs only statements that read
            crate::governance::read_only::check_utility(stmt);
            crate::route::world_ddl::refuse_world_namespace_names(stmt);
        }
        // DDL refuses a table the session holds open: capture's storage relations among them (transaction
        // control and settings close them, or need not)
        if stmt.is_null()
            || !matches!((*stmt).type_, pg_sys::NodeTag::T_TransactionStmt | pg_sys::NodeTag::T_VariableSetStmt | pg_sys::NodeTag::T_VariableShowStmt)
        {
            storage::capture::close_targets();
        }
        if !stmt.is_null() && (*stmt).type_ == pg_sys::NodeTag::T_TransactionStmt {
            let kind = (*(stmt as *mut pg_sys::TransactionStmt)).kind;
            if kind == pg_sys::TransactionStmtKind::TRANS_STMT_BEGIN || kind == pg_sys::TransactionStmtKind::TRANS_STMT_START {
                crate::api::note_transaction_block();
            }
        }
        if !stmt.is_null() && (*stmt).type_ == pg_sys::NodeTag::T_DropRoleStmt && this_extension_exists() && !pg_sys::XactReadOnly {
            // what pg_worlds granted the roles on its storage goes first: they drop as without pg_worlds
            let roles = (*(stmt as *mut pg_sys::DropRoleStmt)).roles;
            for i in 0..if roles.is_null() { 0 } else { (*roles).length } {
                let role = pg_sys::get_rolespec_oid(crate::fast_ffi::list_nth(roles, i) as *mut pg_sys::RoleSpec, true);
                if role != pg_sys::Oid::INVALID {
                    storage::as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._forget_role($1)", &[role.into()])).ok();
                }
            }
        }
        if !stmt.is_null() && (*stmt).type_ == pg_sys::NodeTag::T_RuleStmt && this_extension_exists() && !pg_sys::XactReadOnly {
            let rule = stmt as *mut pg_sys::RuleStmt;
            if (*rule).event == pg_sys::CmdType::CMD_SELECT
                && !(*rule).rulename.is_null()
                && std::ffi::CStr::from_ptr((*rule).rulename).to_bytes() == b"_RETURN"
            {
                // a table made a view: untracked first, as its capture triggers would refuse the conversion
                let rel = pg_sys::RangeVarGetRelidExtended((*rule).relation, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
                if rel != pg_sys::Oid::INVALID && storage::tracked_tables().contains_key(&rel) {
                    storage::as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._before_view_conversion($1)", &[rel.into()]))
                        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
                }
            }
        }
        let dropping_extension =
            !stmt.is_null() && (*stmt).type_ == pg_sys::NodeTag::T_DropStmt && drops_this_extension(stmt as *mut pg_sys::DropStmt);
        if dropping_extension {
            // triggers on user tables and storage tracked after CREATE EXTENSION are not its members:
            // remove them first, so a plain DROP EXTENSION works and leaves nothing behind
            storage::as_internal(|| crate::spi_calls::run("SELECT worlds._uninstall()")).ok();
        }
        // a DROP ... CASCADE of a type, domain, function or schema that pg_worlds' storage uses (its history
        // and deltas keep the table's column types, its deltas the table's CHECK and generated expressions)
        // would cascade to the whole extension, every world with it: checked after it ran, refused then
        let guards_extension = !stmt.is_null()
            && !dropping_extension
            && matches!((*stmt).type_, pg_sys::NodeTag::T_DropStmt | pg_sys::NodeTag::T_DropOwnedStmt)
            && this_extension_exists();
        if let Some(value) = history_retention_value(stmt) {
            // as Postgres's ALTER SYSTEM: not in a transaction block (25001), before any right is checked
            crate::api::refuse_in_transaction("ALTER SYSTEM");
            crate::spi_calls::run_with_args("SELECT worlds.set_history_retention(value => $1)", &[value.into()])
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            return None;
        }
        if !stmt.is_null() && (*stmt).type_ == pg_sys::NodeTag::T_CreateTrigStmt && capture_trigger_exists(stmt as *mut pg_sys::CreateTrigStmt) {
            // a restore (pg_dump) re-creating the history capture that tracking already put on the table
            return None;
        }
        if !stmt.is_null() && !routing_active() && !pg_sys::creating_extension {
            if (*stmt).type_ == pg_sys::NodeTag::T_AlterTableStmt && sets_merge_by_columns(stmt) {
                if read_only_tree {
                    pstmt = pg_sys::copyObjectImpl(pstmt as *const std::ffi::c_void) as *mut pg_sys::PlannedStmt;
                    read_only_tree = false;
                }
                if take_merge_by_columns((*pstmt).utilityStmt as *mut pg_sys::AlterTableStmt) {
                    return None; // nothing left for Postgres to do
                }
            }
            release_overlays_before_ddl((*pstmt).utilityStmt);
        }
        // (after the rows of tables it drops went to history, in their own types)
        let own_ddl = crate::guc::INTERNAL_DDL.get() || storage::internal();
        let synced_after = if guards_extension && !own_ddl && (*stmt).type_ == pg_sys::NodeTag::T_DropStmt {
            let tables = before_drop_of_storage_types(stmt as *mut pg_sys::DropStmt);
            if tables.is_empty() { std::ptr::null_mut() } else { Box::into_raw(Box::new(tables)) }
        } else {
            std::ptr::null_mut()
        };
        if !stmt.is_null() && !storage::internal() && matches!((*stmt).type_, pg_sys::NodeTag::T_TruncateStmt | pg_sys::NodeTag::T_CopyStmt) {
            // an agent's COPY FROM or TRUNCATE: of main, it needs write_main; of a world, write or write_own
            let targets = crate::governance::agents::utility_write_targets(stmt);
            if !targets.is_empty() {
                match overlay::routing_world().filter(|w| w.num > 0 && routing_active()) {
                    Some(world) => crate::governance::agents::check_world_write(world.num, &world.name, std::ptr::null()),
                    None if !routing_active() => crate::governance::agents::check_main_write(&targets, std::ptr::null()),
                    None => {}
                }
            }
        }
        if !stmt.is_null() && routing_active() && (*stmt).type_ == pg_sys::NodeTag::T_NotifyStmt {
            if let Some(num) = crate::governance::outbox::session_world_num() {
                let n = stmt as *mut pg_sys::NotifyStmt;
                let text = |p: *mut std::ffi::c_char| if p.is_null() { String::new() } else { std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned() };
                crate::governance::outbox::keep(num, &text((*n).conditionname), &text((*n).payload));
                if !qc.is_null() {
                    pg_sys::SetQueryCompletion(qc, pg_sys::CommandTag::CMDTAG_NOTIFY, 0);
                }
                return None;
            }
        }
        if !stmt.is_null() && routing_active() {
            let tag = (*stmt).type_;
            if tag == pg_sys::NodeTag::T_TruncateStmt {
                if let Some(world) = overlay::session_world() {
                    if truncate_in_world(stmt as *mut pg_sys::TruncateStmt, world) {
                        crate::governance::agents::after_write_statement(std::ptr::null());
                        return None;
                    }
                }
            }
            if tag == pg_sys::NodeTag::T_LockStmt {
                // a moment of the past takes no locks on today's tables (as a read-only transaction)
                refuse_write_in_past();
            }
            crate::route::world_ddl::maintenance(crate::route::world_ddl::rebuilds_storage(stmt));
            if crate::route::world_ddl::is_schema_change(tag) && !creates_temp_table(stmt) {
                if let Some(world) = overlay::session_world() {
                    // a moment of the past is read only, schema included
                    refuse_write_in_past();
                    if read_only_tree {
                        pstmt = pg_sys::copyObjectImpl(pstmt as *const std::ffi::c_void) as *mut pg_sys::PlannedStmt;
                        read_only_tree = false;
                    }
                    let source = crate::route::world_ddl::statement_text(query_string, (*pstmt).stmt_location, (*pstmt).stmt_len);
                    crate::route::world_ddl::before((*pstmt).utilityStmt, &world, &source);
                    if crate::route::world_ddl::consumed() {
                        // (DROP TABLE of main's tables only: pg_worlds did it, in the world)
                        crate::route::world_ddl::after((*pstmt).utilityStmt, world.num);
                        if !qc.is_null() {
                            pg_sys::SetQueryCompletion(qc, pg_sys::CommandTag::CMDTAG_DROP_TABLE, 0);
                        }
                        return None;
                    }
                    world_ddl = world.num;
                    world_stmt = (*pstmt).utilityStmt;
                    if crate::route::world_ddl::names_world_namespace(world_stmt) {
                        // (the world's namespaces have reserved names: made under this statement's own
                        // allow_system_table_mods, the role's rights checked by Postgres as always)
                        reserved_level = storage::allow_reserved_names();
                    }
                }
            }
            if tag == pg_sys::NodeTag::T_CopyStmt && overlay::session_world().is_some() {
                if read_only_tree {
                    // the cached tree must not change: route a copy
                    pstmt = pg_sys::copyObjectImpl(pstmt as *const std::ffi::c_void) as *mut pg_sys::PlannedStmt;
                    read_only_tree = false;
                }
                let copy = (*pstmt).utilityStmt as *mut pg_sys::CopyStmt;
                if let Some(staging) = route_copy(copy) {
                    // (past worlds.max_disk_bytes: 53100, as the world's other writes)
                    if storage::disk_limit::limit() > 0 {
                        if let Some(world) = overlay::session_world() {
                            storage::disk_limit::check_world_write(&world.name);
                        }
                    }
                    copy_from_into_world(pstmt, query_string, context, params, query_env, dest, qc, copy, staging);
                    // (an agent's world past its max_changes fails the COPY: nothing it wrote stays)
                    crate::governance::agents::after_write_statement(std::ptr::null());
                    return None;
                }
            }
        }
        Some(UtilityPass { pstmt, read_only_tree, stmt, guards_extension, dropping_extension, synced_after, world_ddl, world_stmt, reserved_level })
    }
}

pub(super) unsafe fn process_utility_after(b: UtilityPass) {
    unsafe {
        let UtilityPass { stmt, guards_extension, dropping_extension, synced_after, world_ddl, world_stmt, reserved_level, .. } = b;
        if reserved_level > 0 {
            storage::pop_setting(reserved_level);
        }
        crate::route::world_ddl::maintenance(false);
        if world_ddl > 0 {
            crate::route::world_ddl::after(world_stmt, world_ddl);
        }
        if guards_extension && !this_extension_exists() {
            refuse_storage_drop();
        }
        if !stmt.is_null()
            && (*stmt).type_ == pg_sys::NodeTag::T_CreateStmt
            && !pg_sys::creating_extension
            && !crate::guc::INTERNAL_DDL.get()
            && !storage::internal()
            && this_extension_exists()
        {
            track_created((*(stmt as *mut pg_sys::CreateStmt)).relation);
        }
        if !stmt.is_null() {
            keep_internal_out_of_decoding(stmt);
        }
        if !synced_after.is_null() {
            let tables = *Box::from_raw(synced_after);
            storage::as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._after_drop($1)", &[tables.into()]))
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        }
        if !stmt.is_null() && changes_world_setting(stmt) {
            if (*stmt).type_ == pg_sys::NodeTag::T_DiscardStmt {
                crate::time::past_schema::forget(); // DISCARD ALL / TEMP dropped the views
            }
            // the views of a session in the past are made (or dropped) at once: the next statement may carry
            // parameters, and then it can't be analysed again
            sync_past_schema();
        }
        if dropping_extension {
            // CREATE EXTENSION made schema worlds (the control file names it); it goes too when left empty
            storage::as_internal(|| {
                crate::spi_calls::run(
                    "DO $$ BEGIN
                       IF to_regnamespace('worlds') IS NOT NULL
                          AND NOT EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = 'worlds'::regnamespace)
                          AND NOT EXISTS (SELECT 1 FROM pg_proc WHERE pronamespace = 'worlds'::regnamespace)
                          AND NOT EXISTS (SELECT 1 FROM pg_type WHERE typnamespace = 'worlds'::regnamespace) THEN
                         DROP SCHEMA worlds;
                       END IF;
                     END $$",
                )
            })
            .ok();
        }
    }
}

/// After a CREATE TABLE or ALTER TABLE of one of pg_worlds' own tables (a world's delta, main's history,
/// made as a table is first written): the table is kept out of logical decoding and given a replica
/// identity (storage/decoding.rs). A user's table is left as it is.
unsafe fn keep_internal_out_of_decoding(stmt: *mut pg_sys::Node) {
    unsafe {
        let relation = match (*stmt).type_ {
            pg_sys::NodeTag::T_CreateStmt => (*(stmt as *mut pg_sys::CreateStmt)).relation,
            pg_sys::NodeTag::T_AlterTableStmt => (*(stmt as *mut pg_sys::AlterTableStmt)).relation,
            _ => return,
        };
        if relation.is_null() || (*relation).schemaname.is_null() || !crate::fast_ffi::IsTransactionState() {
            return;
        }
        let schema = std::ffi::CStr::from_ptr((*relation).schemaname).to_bytes();
        if schema != b"worlds" && schema != b"worlds_data" {
            return;
        }
        let relid = pg_sys::RangeVarGetRelidExtended(relation, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        storage::decoding::keep_out_of_decoding(relid);
    }
}

/// After CREATE TABLE (of any context: a function's, CREATE SCHEMA's elements): the new table is tracked
/// (`worlds.track`; with `worlds.lazy_storage`, `worlds._track_lazy`: its row and its capture triggers, the
/// storage made by its first captured write). Here rather than in the event trigger, which runs a plpgsql function and lists
/// the command's objects for every CREATE TABLE: a migration creating hundreds of tables pays little more
/// than stock (bench P10). In a subtransaction: tracking never fails the user's own DDL (the reason is
/// logged, as `worlds._on_ddl` does for CREATE TABLE AS).
unsafe fn track_created(relation: *mut pg_sys::RangeVar) {
    unsafe {
        if relation.is_null() {
            return;
        }
        let relid = pg_sys::RangeVarGetRelidExtended(relation, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        if relid == pg_sys::Oid::INVALID {
            return;
        }
        let track = if crate::guc::LAZY_STORAGE.get() { "_track_lazy" } else { "track" };
        let sql = format!("SELECT worlds.{track}(c.oid::regclass) FROM pg_catalog.pg_class c WHERE c.oid = $1 AND worlds._trackable(c.oid::regclass)");
        let tracked = crate::subxact::in_subtransaction(|| storage::as_internal(|| crate::spi_calls::run_with_args(&sql, &[relid.into()])));
        let failed = match tracked {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(e) => crate::subxact::state_and_message(&e).1,
        };
        pgrx::log!("pg_worlds could not track table {}: {failed}", relid.to_u32());
    }
}

/// Before DROP TYPE / DOMAIN / COLLATION / FUNCTION / SCHEMA / EXTENSION: the storage columns of what goes
/// become text, and the delta's copies of expressions calling a function that goes are dropped
/// (`worlds._before_drop`); returns the tracked tables to sync after the drop. Postgres then drops as
/// stock: it finds nothing of pg_worlds' depending on what it drops.
pub(super) unsafe fn before_drop_of_storage_types(d: *mut pg_sys::DropStmt) -> Vec<i32> {
    unsafe {
        if (*d).objects.is_null() || pg_sys::XactReadOnly {
            return Vec::new();
        }
        let cascade = (*d).behavior == pg_sys::DropBehavior::DROP_CASCADE;
        let mut found: [Vec<pg_sys::Oid>; 6] = Default::default();
        let [types, schemas, collations, functions, extensions, tables] = &mut found;
        for i in 0..(*(*d).objects).length {
            let o = crate::fast_ffi::list_nth((*d).objects, i);
            match (*d).removeType {
                pg_sys::ObjectType::OBJECT_TYPE | pg_sys::ObjectType::OBJECT_DOMAIN => {
                    types.push(pg_sys::LookupTypeNameOid(std::ptr::null_mut(), o as *const pg_sys::TypeName, true))
                }
                pg_sys::ObjectType::OBJECT_SCHEMA => schemas.push(pg_sys::get_namespace_oid((*(o as *mut pg_sys::String)).sval, true)),
                pg_sys::ObjectType::OBJECT_EXTENSION => {
                    extensions.push(pg_sys::get_extension_oid((*(o as *mut pg_sys::String)).sval, true))
                }
                pg_sys::ObjectType::OBJECT_COLLATION => collations.push(pg_sys::get_collation_oid(o as *mut pg_sys::List, true)),
                t @ (pg_sys::ObjectType::OBJECT_FUNCTION | pg_sys::ObjectType::OBJECT_PROCEDURE | pg_sys::ObjectType::OBJECT_ROUTINE) => {
                    functions.push(pg_sys::LookupFuncWithArgs(t, o as *mut pg_sys::ObjectWithArgs, true))
                }
                pg_sys::ObjectType::OBJECT_TABLE
                | pg_sys::ObjectType::OBJECT_VIEW
                | pg_sys::ObjectType::OBJECT_MATVIEW
                | pg_sys::ObjectType::OBJECT_FOREIGN_TABLE => {
                    // a relation's row type goes with it (a column of another table may be of it)
                    let rv = pg_sys::makeRangeVarFromNameList(o as *mut pg_sys::List);
                    let rel = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
                    if rel != pg_sys::Oid::INVALID {
                        tables.push(rel);
                        types.push(pg_sys::get_rel_type_id(rel));
                    }
                }
                _ => return Vec::new(),
            }
        }
        for v in found.iter_mut() {
            v.retain(|t| *t != pg_sys::Oid::INVALID);
        }
        if found.iter().all(|v| v.is_empty()) {
            return Vec::new();
        }
        let [types, schemas, collations, functions, extensions, tables] = found;
        if !tables.is_empty() && !row_type_in_storage(&types) {
            return Vec::new(); // (the common DROP TABLE: no storage column is of its row type)
        }
        storage::as_internal(|| {
            crate::spi_calls::get_one_with_args::<Vec<i32>>(
                "SELECT worlds._before_drop($1, $2, $3, $4, $5, $6, $7)",
                &[types.into(), schemas.into(), collations.into(), functions.into(), extensions.into(), tables.into(), cascade.into()],
            )
        })
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
        .unwrap_or_default()
    }
}

/// Is any storage column of one of these row types, or of an array or domain of them? (One index probe per
/// type on pg_attribute would need its own index; this is one query, run only for DROP TABLE / VIEW.)
fn row_type_in_storage(types: &[pg_sys::Oid]) -> bool {
    storage::as_internal(|| {
        crate::spi_calls::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_type ty JOIN pg_catalog.pg_attribute a ON a.atttypid = ty.oid
                             JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
                            WHERE (ty.oid = ANY ($1) OR ty.typelem = ANY ($1) OR ty.typbasetype = ANY ($1))
                              AND c.relnamespace = 'worlds_data'::regnamespace)",
            &[types.to_vec().into()],
        )
    })
    .ok()
    .flatten()
    .unwrap_or(true)
}

pub(super) fn refuse_storage_drop() -> ! {
    crate::api::raise_with(
        "2BP01",
        "cannot drop objects that pg_worlds' storage uses",
        Some("The drop cascades to extension pg_worlds: the history and worlds of a tracked table keep its columns' types, and its CHECK and generated expressions.".into()),
        Some("Untrack the tables that use them first (SELECT worlds.untrack('table')), or drop without CASCADE to see what depends on them.".into()),
    )
}

pub(super) fn this_extension_exists() -> bool {
    unsafe { pg_sys::get_extension_oid(c"pg_worlds".as_ptr(), true) != pg_sys::Oid::INVALID }
}

/// DROP TABLE, ALTER TABLE (DROP COLUMN, ALTER COLUMN TYPE, ...) on a tracked table would be refused
/// because the overlay views depend on its columns: release them first; the event trigger at the end of
/// the DDL rebuilds them.
pub(super) unsafe fn release_overlays_before_ddl(stmt: *mut pg_sys::Node) {
    unsafe {
        let mut rels: Vec<pg_sys::Oid> = Vec::new();
        let lookup = |rv: *mut pg_sys::RangeVar| {
            if rv.is_null() {
                return pg_sys::Oid::INVALID;
            }
            pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut())
        };
        match (*stmt).type_ {
            // only what the overlay views would trip over (their columns): SET (...), constraints, ADD
            // COLUMN and the like leave them in place (the DDL's end rebuilds them if the table's shape moved)
            pg_sys::NodeTag::T_AlterTableStmt => {
                let a = stmt as *mut pg_sys::AlterTableStmt;
                let cmds = (*a).cmds;
                let trips = !cmds.is_null()
                    && (0..(*cmds).length).any(|i| {
                        let c = crate::fast_ffi::list_nth(cmds, i) as *mut pg_sys::AlterTableCmd;
                        matches!((*c).subtype, pg_sys::AlterTableType::AT_AlterColumnType | pg_sys::AlterTableType::AT_DropColumn)
                    });
                if trips {
                    rels.push(lookup((*a).relation));
                }
            }
            pg_sys::NodeTag::T_DropStmt => {
                let d = stmt as *mut pg_sys::DropStmt;
                if (*d).removeType == pg_sys::ObjectType::OBJECT_TABLE && !(*d).objects.is_null() {
                    for i in 0..(*(*d).objects).length {
                        let names = crate::fast_ffi::list_nth((*d).objects, i) as *mut pg_sys::List;
                        let rv = pg_sys::makeRangeVarFromNameList(names);
                        rels.push(lookup(rv));
                    }
                }
                // DROP SCHEMA ... CASCADE drops the tracked tables in it: as DROP TABLE (the overlay views,
                // the extension's, depend on them: left in place they would carry the drop to the extension)
                if (*d).removeType == pg_sys::ObjectType::OBJECT_SCHEMA
                    && (*d).behavior == pg_sys::DropBehavior::DROP_CASCADE
                    && !(*d).objects.is_null()
                    && crate::storage::extension_installed()
                {
                    let schemas: Vec<pg_sys::Oid> = (0..(*(*d).objects).length)
                        .map(|i| pg_sys::get_namespace_oid((*(crate::fast_ffi::list_nth((*d).objects, i) as *mut pg_sys::String)).sval, true))
                        .filter(|o| *o != pg_sys::Oid::INVALID)
                        .collect();
                    rels.extend(storage::tracked_tables().keys().copied().filter(|r| schemas.contains(&pg_sys::get_rel_namespace(*r))));
                }
            }
            // DROP OWNED drops the role's tables: the same
            pg_sys::NodeTag::T_DropOwnedStmt if crate::storage::extension_installed() => {
                let roles = (*(stmt as *mut pg_sys::DropOwnedStmt)).roles;
                let owners: Vec<pg_sys::Oid> = (0..if roles.is_null() { 0 } else { (*roles).length })
                    .map(|i| pg_sys::get_rolespec_oid(crate::fast_ffi::list_nth(roles, i) as *mut pg_sys::RoleSpec, true))
                    .filter(|o| *o != pg_sys::Oid::INVALID)
                    .collect();
                for r in storage::tracked_tables().keys().copied() {
                    let rel = pg_sys::RelationIdGetRelation(r);
                    if !rel.is_null() {
                        if owners.contains(&(*(*rel).rd_rel).relowner) {
                            rels.push(r);
                        }
                        pg_sys::RelationClose(rel);
                    }
                }
            }
            _ => return,
        }
        rels.retain(|r| *r != pg_sys::Oid::INVALID);
        if rels.is_empty() || !crate::storage::extension_installed() {
            return;
        }
        if pg_sys::XactReadOnly {
            // (Postgres refuses the DDL itself, with its own words)
            return;
        }
        let tracked = storage::tracked_tables();
        let dropping = matches!((*stmt).type_, pg_sys::NodeTag::T_DropStmt | pg_sys::NodeTag::T_DropOwnedStmt);
        for rel in rels.into_iter().filter(|r| tracked.contains_key(r)) {
            if dropping {
                // every row into history first: worlds forked before, and AS OF, still read the table
                storage::as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._capture_drop($1)", &[rel.into()]))
                    .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            }
            if !dropping {
                // (a drop needs no release: the views don't hold the table; its end forgets them)
                storage::as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._release_overlay($1)", &[rel.into()])).ok();
            }
        }
    }
}

/// The (SET|RESET) (merge_by_columns ...) options of an ALTER TABLE, if any.
pub(super) unsafe fn merge_by_columns_options(stmt: *mut pg_sys::AlterTableStmt) -> Vec<(usize, usize, bool)> {
    unsafe {
        let mut found = Vec::new();
        let cmds = (*stmt).cmds;
        if cmds.is_null() {
            return found;
        }
        for i in 0..(*cmds).length as usize {
            let cmd = crate::fast_ffi::list_nth(cmds, i as i32) as *mut pg_sys::AlterTableCmd;
            let set = (*cmd).subtype == pg_sys::AlterTableType::AT_SetRelOptions;
            if !set && (*cmd).subtype != pg_sys::AlterTableType::AT_ResetRelOptions {
                continue;
            }
            let opts = (*cmd).def as *mut pg_sys::List;
            if opts.is_null() {
                continue;
            }
            for j in 0..(*opts).length as usize {
                let d = crate::fast_ffi::list_nth(opts, j as i32) as *mut pg_sys::DefElem;
                if std::ffi::CStr::from_ptr((*d).defname).to_bytes() == b"merge_by_columns" {
                    found.push((i, j, set && ((*d).arg.is_null() || pg_sys::defGetBoolean(d))));
                }
            }
        }
        found
    }
}

pub(super) unsafe fn sets_merge_by_columns(stmt: *mut pg_sys::Node) -> bool {
    unsafe { !merge_by_columns_options(stmt as *mut pg_sys::AlterTableStmt).is_empty() }
}

/// ALTER TABLE t SET (merge_by_columns = true) / RESET (merge_by_columns): pg_worlds' per-table setting
/// (rows both sides changed merge column by column). Taken out of the statement before Postgres sees it
/// (it is no storage parameter of Postgres's); returns true when nothing else is left to run.
pub(super) unsafe fn take_merge_by_columns(stmt: *mut pg_sys::AlterTableStmt) -> bool {
    unsafe {
        let found = merge_by_columns_options(stmt);
        let rel = pg_sys::RangeVarGetRelidExtended((*stmt).relation, pg_sys::NoLock as i32, 0, None, std::ptr::null_mut());
        let value = found.last().map(|f| f.2).unwrap_or(false);
        let updated = storage::as_internal(|| {
            crate::spi_calls::get_one_with_args::<bool>(
                "UPDATE worlds.tables SET merge_by_columns = $2 WHERE relid = $1 RETURNING true",
                &[rel.into(), value.into()],
            )
        })
        .ok()
        .flatten()
        .unwrap_or(false);
        if !updated {
            raise("55000", format!("merge_by_columns is a setting of tracked tables: {} isn't tracked by pg_worlds", relation_name(rel)));
        }
        // drop the options (last first, so indexes stay valid), then the commands left empty
        let cmds = (*stmt).cmds;
        for &(i, j, _) in found.iter().rev() {
            let cmd = crate::fast_ffi::list_nth(cmds, i as i32) as *mut pg_sys::AlterTableCmd;
            (*cmd).def = pg_sys::list_delete_nth_cell((*cmd).def as *mut pg_sys::List, j as i32) as *mut pg_sys::Node;
        }
        let mut i = (*cmds).length - 1;
        while i >= 0 {
            let cmd = crate::fast_ffi::list_nth((*stmt).cmds, i) as *mut pg_sys::AlterTableCmd;
            let opts = (*cmd).def as *mut pg_sys::List;
            if ((*cmd).subtype == pg_sys::AlterTableType::AT_SetRelOptions || (*cmd).subtype == pg_sys::AlterTableType::AT_ResetRelOptions)
                && (opts.is_null() || (*opts).length == 0)
            {
                (*stmt).cmds = pg_sys::list_delete_nth_cell((*stmt).cmds, i);
            }
            i -= 1;
        }
        (*stmt).cmds.is_null() || (*(*stmt).cmds).length == 0
    }
}

pub(super) unsafe fn drops_this_extension(drop: *mut pg_sys::DropStmt) -> bool {
    unsafe {
        if (*drop).removeType != pg_sys::ObjectType::OBJECT_EXTENSION || (*drop).objects.is_null() {
            return false;
        }
        let objects = (*drop).objects;
        (0..(*objects).length).any(|i| {
            let name = crate::fast_ffi::list_nth(objects, i) as *mut pg_sys::String;
            !name.is_null() && std::ffi::CStr::from_ptr((*name).sval).to_bytes() == b"pg_worlds"
        }) && crate::spi_calls::get_one::<bool>("SELECT to_regnamespace('worlds') IS NOT NULL AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_worlds')")
            .ok()
            .flatten()
            .unwrap_or(false)
    }
}

/// `COPY t TO` reads the world: it becomes `COPY (SELECT cols FROM t) TO`, whose query the router sends
/// into the world. `COPY t FROM` inside a world is refused: it would write main.
pub(super) unsafe fn route_copy(copy: *mut pg_sys::CopyStmt) -> Option<pg_sys::Oid> {
    unsafe {
        if (*copy).relation.is_null() {
            return None; // COPY (query) is analyzed, and so routed, like any query
        }
        let relid = pg_sys::RangeVarGetRelidExtended((*copy).relation, pg_sys::NoLock as i32, 0, None, std::ptr::null_mut());
        if !storage::routed_tables().contains_key(&relid) {
            if (*copy).is_from {
                refuse_untracked_write(relid); // never into main from a world
            }
            return None;
        }
        if (*copy).is_from {
            refuse_write_in_past();
            return Some(relid);
        }
        // build the raw parse tree of SELECT <cols or *> FROM <relation>
        let rv = (*copy).relation;
        let name = |p: *const std::ffi::c_char| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        let mut qualified = String::new();
        if !(*rv).schemaname.is_null() {
            qualified.push_str(crate::sql_text::quote_ident(&name((*rv).schemaname)).as_str());
            qualified.push('.');
        }
        qualified.push_str(crate::sql_text::quote_ident(&name((*rv).relname)).as_str());
        let cols = if (*copy).attlist.is_null() {
            "*".to_string()
        } else {
            let l = (*copy).attlist;
            (0..(*l).length)
                .map(|i| {
                    let s = crate::fast_ffi::list_nth(l, i) as *mut pg_sys::String;
                    crate::sql_text::quote_ident(&name((*s).sval)).to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let sql = std::ffi::CString::new(format!("SELECT {cols} FROM {qualified}")).unwrap();
        let raw = pg_sys::raw_parser(sql.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        let raw_stmt = crate::fast_ffi::list_nth(raw, 0) as *mut pg_sys::RawStmt;
        (*copy).query = (*raw_stmt).stmt;
        (*copy).relation = std::ptr::null_mut();
        (*copy).attlist = std::ptr::null_mut();
        None
    }
}

/// COPY t FROM ... inside a world: Postgres copies into a temporary staging table with t's columns (the
/// ones COPY names), then the rows go into t with an INSERT ... SELECT that is routed like any other, so
/// the world's constraints and triggers apply and main is never written. The tag stays COPY n.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn copy_from_into_world(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
    copy: *mut pg_sys::CopyStmt,
    relid: pg_sys::Oid,
) {
    unsafe {
        let name = |p: *const std::ffi::c_char| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        // the columns COPY fills: its list, or every column that takes a value
        let rel = pg_sys::relation_open(relid, pg_sys::AccessShareLock as i32);
        let desc = (*rel).rd_att;
        let mut all: Vec<(String, String)> = Vec::new();
        let mut generated: Vec<String> = Vec::new();
        for i in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(i);
            if !att.attisdropped && att.attgenerated != 0 {
                generated.push(name(att.attname.data.as_ptr()));
            }
            if att.attisdropped || att.attgenerated != 0 {
                continue;
            }
            let ty = name(pg_sys::format_type_with_typemod(att.atttypid, att.atttypmod));
            all.push((name(att.attname.data.as_ptr()), ty));
        }
        let table = storage::relation_layout(storage::routed_tables()[&relid]).table_name.clone();
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        let cols: Vec<(String, String)> = if (*copy).attlist.is_null() {
            all
        } else {
            let l = (*copy).attlist;
            (0..(*l).length)
                .map(|i| {
                    let c = name((*(crate::fast_ffi::list_nth(l, i) as *mut pg_sys::String)).sval);
                    if generated.contains(&c) {
                        crate::api::raise_with(
                            "42P10",
                            format!("column \"{c}\" is a generated column"),
                            Some("Generated columns cannot be used in COPY.".into()),
                            None,
                        );
                    }
                    all.iter().find(|(n, _)| *n == c).cloned().unwrap_or_else(|| {
                        raise("42703", format!("column \"{c}\" of relation \"{}\" does not exist", relation_name(relid)))
                    })
                })
                .collect()
        };
        static STAGING_SEQ: BackendLocal<std::cell::Cell<u64>> = BackendLocal::new(std::cell::Cell::new(0));
        let seq = STAGING_SEQ.with(|s| {
            s.set(s.get() + 1);
            s.get()
        });
        let staging = format!("_w_copy_{}_{seq}", std::process::id());
        let defs = cols.iter().map(|(n, t)| format!("{} {t}", crate::sql_text::quote_ident(n))).collect::<Vec<_>>().join(", ");
        let list = cols.iter().map(|(n, _)| crate::sql_text::quote_ident(n).to_string()).collect::<Vec<_>>().join(", ");
        // as the session's role: COPY into the staging table, and the INSERT into t, check its rights
        crate::spi_calls::run(&format!("CREATE TEMP TABLE {staging} ({defs}) ON COMMIT DROP")).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        let staged = pg_sys::copyObjectImpl(copy as *const std::ffi::c_void) as *mut pg_sys::CopyStmt;
        let schema = std::ffi::CString::new("pg_temp").unwrap();
        let relname = std::ffi::CString::new(staging.clone()).unwrap();
        (*staged).relation = pg_sys::makeRangeVar(pg_sys::pstrdup(schema.as_ptr()), pg_sys::pstrdup(relname.as_ptr()), -1);
        let staged_stmt = pg_sys::copyObjectImpl(pstmt as *const std::ffi::c_void) as *mut pg_sys::PlannedStmt;
        (*staged_stmt).utilityStmt = staged as *mut pg_sys::Node;
        match PREV_PROCESS_UTILITY {
            Some(prev) => pg_guard_ffi_boundary(|| prev(staged_stmt, query_string, false, context, params, query_env, dest, qc)),
            None => pg_sys::standard_ProcessUtility(staged_stmt, query_string, false, context, params, query_env, dest, qc),
        }
        // (COPY sets identity columns GENERATED ALWAYS as it is given them, as into the table itself)
        crate::spi_calls::run(&format!("INSERT INTO {table} ({list}) OVERRIDING SYSTEM VALUE SELECT {list} FROM pg_temp.{staging}"))
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        crate::spi_calls::run(&format!("DROP TABLE pg_temp.{staging}")).ok();
    }
}
