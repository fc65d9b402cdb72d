//! `worlds.read_only`: a transaction that can only read, stricter than Postgres's READ ONLY.
//!
//! A read-only transaction still lets through what writes outside the tables: `pg_notify()`,
//! `gin_clean_pending_list()`, `lo_*`, `dblink` (another connection, not read-only), advisory locks,
//! `pg_terminate_backend()`, a replication slot consumed. The MCP server's safe mode (and anyone else who
//! wants a call that can only read) runs `BEGIN READ ONLY; SET LOCAL worlds.read_only = on;` and then the
//! caller's SQL. While it is on:
//! - functions that act outside the tables are refused with 25006 where they are called, at any depth
//!   (a view, a function, a DO block calling them): `object_access_hook`'s OAT_FUNCTION_EXECUTE runs for
//!   every function an expression, a scan, an aggregate or CALL is about to run;
//! - utility statements other than reads (SHOW, EXPLAIN, cursors, prepared statements, COPY TO STDOUT,
//!   SET/RESET but RESET ALL, transaction control) are refused with 25006: NOTIFY, LISTEN, LOCK, ANALYZE, REINDEX,
//!   CLUSTER, CHECKPOINT and DO, which a READ ONLY transaction allows.
//!
//! It can only be turned on: setting it off (SET, RESET, RESET ALL, `set_config`, a function's SET clause)
//! in a transaction where it was on fails with 25006, or is ignored until the transaction ends (a
//! `set_config(..., NULL)`). SET LOCAL ends with the transaction, as every setting does.
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use crate::backend_local::BackendLocal;

pub static READ_ONLY: GucSetting<bool> = GucSetting::<bool>::new(false);

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

/// Functions of pg_catalog that act outside the tables a read-only transaction protects.
const REFUSED: &[&str] = &[
    "pg_notify",
    "gin_clean_pending_list",
    "brin_summarize_new_values",
    "brin_summarize_range",
    "brin_desummarize_range",
    "pg_logical_emit_message",
    "pg_switch_wal",
    "pg_create_restore_point",
    "pg_create_physical_replication_slot",
    "pg_create_logical_replication_slot",
    "pg_drop_replication_slot",
    "pg_copy_physical_replication_slot",
    "pg_copy_logical_replication_slot",
    "pg_replication_slot_advance",
    "pg_logical_slot_get_changes",
    "pg_logical_slot_get_binary_changes",
    "pg_replication_origin_create",
    "pg_replication_origin_drop",
    "pg_replication_origin_advance",
    "pg_replication_origin_session_setup",
    "pg_replication_origin_session_reset",
    "pg_replication_origin_xact_setup",
    "pg_replication_origin_xact_reset",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_promote",
    "pg_backup_start",
    "pg_backup_stop",
    "pg_wal_replay_pause",
    "pg_wal_replay_resume",
    "pg_import_system_collations",
    "pg_log_backend_memory_contexts",
    "pg_stat_reset",
    "pg_stat_reset_shared",
    "pg_stat_reset_single_table_counters",
    "pg_stat_reset_single_function_counters",
    "pg_stat_reset_slru",
    "pg_stat_reset_replication_slot",
    "pg_stat_reset_subscription_stats",
    "lowrite",
    "loread",
];

/// Name prefixes refused in any schema: large objects, and extensions that reach outside the transaction
/// (dblink opens a connection of its own; adminpack writes files). (Advisory locks write nothing; a
/// session-level one a caller leaves is released by the DISCARD ALL the MCP server runs after each call.)
const REFUSED_PREFIXES: &[&str] = &["lo_", "dblink", "pg_file_", "pg_logdir_"];

pgrx::extension_sql!(
    r#"
-- a version 4 UUID from random(): a SIMULATE script's gen_random_uuid() (governance/read_only.rs)
CREATE FUNCTION worlds._seeded_uuid() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT overlay(overlay(md5(random()::text || ':' || random()::text) PLACING '4' FROM 13) PLACING '8' FROM 17)::uuid
$$;
"#,
    name = "seeded_uuid",
    requires = ["catalog"]
);

pub fn register() {
    unsafe {
        GucRegistry::define_bool_guc_with_hooks(
            c"worlds.read_only",
            c"This transaction only reads: stricter than READ ONLY (no pg_notify, lo_*, dblink, advisory locks, NOTIFY, LOCK, ANALYZE...).",
            c"Set with SET LOCAL worlds.read_only = on after BEGIN READ ONLY. Once on it can't be turned off in the transaction (25006). The MCP server's safe mode uses it.",
            &READ_ONLY,
            GucContext::Userset,
            GucFlags::default(),
            Some(check_read_only),
            Some(assign_read_only),
            None,
        );
    }
}

/// Installs the check of functions (preloaded only, from lib.rs; utility statements are checked by
/// route's ProcessUtility hook through `check_utility`).
pub fn install() {
    unsafe {
        PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(object_access);
    }
}

/// Seen on in this transaction: it stays on until the transaction ends, however the setting is put
/// back (RESET and `set_config(..., NULL)` reset a setting without asking its check).
static STICKY: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

fn held() -> bool {
    let on = READ_ONLY.get() || STICKY.with(|s| s.get());
    if on {
        STICKY.with(|s| s.set(true));
    }
    on
}

/// A SIMULATE script (or its score) is running: what would leave its world is refused (0A000).
static CONFINED: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// Set by SIMULATE around a world's script and score (statements/simulate.rs).
pub fn set_confined(on: bool) {
    if on && SEEDED_UUID.with(|c| c.get()) == pg_sys::InvalidOid {
        // (looked up before the script is confined: the lookup's own analysis isn't the script's)
        let oid = crate::spi_calls::get_one::<pg_sys::Oid>("SELECT 'worlds._seeded_uuid()'::regprocedure::oid").ok().flatten();
        SEEDED_UUID.with(|c| c.set(oid.unwrap_or(pg_sys::InvalidOid)));
    }
    CONFINED.with(|c| c.set(on));
}

/// worlds._seeded_uuid()'s oid, once looked up.
static SEEDED_UUID: BackendLocal<std::cell::Cell<pg_sys::Oid>> = BackendLocal::new(std::cell::Cell::new(pg_sys::InvalidOid));

/// gen_random_uuid() (pg_catalog, oid 3432) draws from the operating system: in a SIMULATE script its
/// calls become `worlds._seeded_uuid()`, a version 4 UUID made from random(), which SIMULATE seeds per
/// world, so the script gives the same UUIDs each run. (A column default calling it isn't in the
/// statement's tree at this point: it stays random.)
pub fn seed_uuids(query: *mut pg_sys::Query) {
    const GEN_RANDOM_UUID: u32 = 3432;
    let ours = SEEDED_UUID.with(|c| c.get());
    if ours == pg_sys::InvalidOid {
        return;
    }
    #[pg_guard]
    unsafe extern "C-unwind" fn walk(node: *mut pg_sys::Node, ours: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            match (*node).type_ {
                pg_sys::NodeTag::T_FuncExpr => {
                    let f = node as *mut pg_sys::FuncExpr;
                    if (*f).funcid == pg_sys::Oid::from(GEN_RANDOM_UUID) {
                        (*f).funcid = *(ours as *mut pg_sys::Oid);
                    }
                }
                pg_sys::NodeTag::T_Query => {
                    return pg_sys::query_tree_walker(node as *mut pg_sys::Query, Some(walk), ours, 0);
                }
                _ => {}
            }
            pg_sys::expression_tree_walker(node, Some(walk), ours)
        }
    }
    let mut ours = ours;
    unsafe {
        pg_sys::query_tree_walker(query, Some(walk), &mut ours as *mut pg_sys::Oid as *mut std::ffi::c_void, 0);
    }
}

/// A SIMULATE script is running, and the work at hand is the script's own.
pub fn confined() -> bool {
    CONFINED.with(|c| c.get()) && !crate::storage::internal() && !crate::guc::INTERNAL_DDL.get()
}

/// What a SIMULATE script may not do: fork, merge, restore, switch or drop worlds, or change settings.
pub fn refuse_leaving(what: &str) -> ! {
    crate::api::raise_with(
        "0A000",
        format!("a SIMULATE script can't {what}: it runs inside its own world"),
        None,
        Some("Keep the script to reading and writing the world's tables.".into()),
    )
}

/// pg_worlds' functions that fork, merge, restore, switch or drop worlds (schema worlds).
const LEAVING: &[&str] = &[
    "create_world", "fork_world", "drop_world", "switch_world", "alter_world", "merge", "rebase", "restore_world",
    "undo_merge", "undo_agent", "checkpoint_world", "set_history_retention", "create_agent", "alter_agent", "drop_agent",
];

/// On, and the work at hand is the caller's (pg_worlds' own reads run under it too, as themselves).
fn on() -> bool {
    held() && !crate::storage::internal() && !crate::guc::INTERNAL_DDL.get()
}

/// The transaction ended (registered from lib.rs): a later one is on only if the setting is.
pub fn on_xact_end(_event: pg_sys::XactEvent::Type) {
    STICKY.with(|s| s.set(false));
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_read_only(newval: bool, _extra: *mut std::ffi::c_void) {
    if newval {
        STICKY.with(|s| s.set(true));
    }
}

/// Turning it off while on is refused (a transaction's end puts the old value back without asking).
#[pg_guard]
unsafe extern "C-unwind" fn check_read_only(newval: *mut bool, _extra: *mut *mut std::ffi::c_void, _source: pg_sys::GucSource::Type) -> bool {
    unsafe {
        if held() && !*newval {
            pg_sys::GUC_check_errcode(PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION as i32);
            pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(c"worlds.read_only can't be turned off in a read-only call".as_ptr());
            return false;
        }
        true
    }
}

fn refused_name(name: &str, in_catalog: bool) -> bool {
    (in_catalog && REFUSED.contains(&name)) || REFUSED_PREFIXES.iter().any(|p| name.starts_with(p))
}

fn refuse(what: &str) -> ! {
    crate::api::raise_with(
        "25006",
        format!("cannot execute {what} in a read-only call"),
        Some("worlds.read_only is on: this transaction may only read (MCP safe mode).".into()),
        None,
    )
}

unsafe fn resets_this(v: *mut pg_sys::VariableSetStmt) -> bool {
    unsafe {
        use pg_sys::VariableSetKind::*;
        matches!((*v).kind, VAR_RESET | VAR_SET_DEFAULT)
            && !(*v).name.is_null()
            && std::ffi::CStr::from_ptr((*v).name).to_bytes().eq_ignore_ascii_case(b"worlds.read_only")
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: i32,
    arg: *mut std::ffi::c_void,
) {
    unsafe {
        if let Some(prev) = PREV_OBJECT_ACCESS {
            prev(access, class_id, object_id, sub_id, arg);
        }
        if access != pg_sys::ObjectAccessType::OAT_FUNCTION_EXECUTE {
            return;
        }
        let (read_only, confined) = (on(), confined());
        if !read_only && !confined {
            return;
        }
        let name = pg_sys::get_func_name(object_id);
        if name.is_null() {
            return;
        }
        let name = std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned();
        let nsp = pg_sys::get_func_namespace(object_id);
        let in_catalog = nsp == pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE);
        if read_only && refused_name(&name, in_catalog) {
            refuse(&format!("{name}()"));
        }
        if confined {
            if in_catalog && name == "set_config" {
                refuse_leaving("change settings");
            }
            let schema = pg_sys::get_namespace_name(nsp);
            if !schema.is_null() && std::ffi::CStr::from_ptr(schema).to_bytes() == b"worlds" && LEAVING.contains(&name.as_str()) {
                refuse_leaving(&format!("call worlds.{name}()"));
            }
        }
    }
}

/// The utility statements a read-only call may run.
fn utility_allowed(stmt: *mut pg_sys::Node) -> Result<(), &'static str> {
    use pg_sys::NodeTag::*;
    unsafe {
        match (*stmt).type_ {
            // (RESET ALL puts settings back without asking their checks: it would turn this off)
            T_VariableSetStmt if (*(stmt as *mut pg_sys::VariableSetStmt)).kind == pg_sys::VariableSetKind::VAR_RESET_ALL => Err("RESET ALL"),
            // (RESET and SET ... TO DEFAULT of this setting don't ask its check either)
            T_VariableSetStmt if resets_this(stmt as *mut pg_sys::VariableSetStmt) => Err("RESET worlds.read_only"),
            T_VariableShowStmt | T_ExplainStmt | T_DeclareCursorStmt | T_FetchStmt | T_ClosePortalStmt | T_PrepareStmt
            | T_ExecuteStmt | T_DeallocateStmt | T_VariableSetStmt | T_TransactionStmt => Ok(()),
            T_CopyStmt => {
                let c = stmt as *mut pg_sys::CopyStmt;
                if !(*c).is_from && (*c).filename.is_null() { Ok(()) } else { Err("COPY to or from a file or program") }
            }
            T_NotifyStmt => Err("NOTIFY"),
            T_ListenStmt => Err("LISTEN"),
            T_LockStmt => Err("LOCK TABLE"),
            T_VacuumStmt => Err("VACUUM or ANALYZE"),
            T_DoStmt => Err("DO"),
            T_CallStmt => Err("CALL"),
            _ => Err("this statement"),
        }
    }
}

/// Refuses a utility statement a read-only call may not run (from route's ProcessUtility hook, at any
/// depth: NOTIFY in a function the caller calls is the caller's).
pub fn check_utility(stmt: *mut pg_sys::Node) {
    if confined() && unsafe { (*stmt).type_ } == pg_sys::NodeTag::T_VariableSetStmt {
        refuse_leaving("change settings");
    }
    if on() {
        if let Err(what) = utility_allowed(stmt) {
            refuse(what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::refused_name;

    #[test]
    fn refuses_what_writes_outside_the_tables() {
        assert!(refused_name("pg_notify", true));
        assert!(!refused_name("pg_notify", false)); // a user's own function of that name elsewhere
        assert!(refused_name("lo_import", true));
        assert!(refused_name("lo_creat", false));
        assert!(refused_name("dblink_exec", false));
        assert!(!refused_name("count", true));
        assert!(!refused_name("lower", true));
    }
}
