//! Schema changes inside a world: the world's objects are real objects in its own namespaces
//! (storage/world_schemas.rs), found first by the world's sessions (storage/search_path.rs).
//!
//! Two parts:
//! - `before` (ProcessUtility, for DDL in a world): refuses what belongs to the whole database
//!   (extensions, event triggers, publications, ...; 0A000 naming the statement), sends what a statement
//!   creates into the world's namespace of the schema it names (or the first schema of the path), and
//!   keeps a CREATE from quietly shadowing an object main already has (it fails, or skips with IF NOT
//!   EXISTS, as in main).
//! - `judge` (object_access_hook): every catalog object a world's session creates, alters or drops must be
//!   the world's own (in its namespaces), temporary, or cluster-wide (roles, databases, tablespaces,
//!   which Postgres shares between all databases). Anything else, main's tables above all, is refused with
//!   0A000 before the statement ends, so nothing a world runs can change what main sees.
use crate::api::{raise, raise_with};
use crate::storage::{self, overlay, search_path, world_schemas};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{CStr, CString};

mod foreign_keys;
mod judge;
mod names;
mod twins;
pub use twins::{consumed, statement_text};
pub(crate) use names::without_world_namespaces as without_world_namespaces_pub;
pub use foreign_keys::{after, forget_deferred};
use foreign_keys::*;
use judge::*;
use names::*;
use crate::backend_local::BackendLocal;

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

pub fn install() {
    unsafe {
        PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(object_access);
        PREV_EMIT_LOG = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(hint_qualified_name);
    }
}

/// What a DDL statement is, for a world.
enum Kind {
    /// Postgres shares it between all databases of the cluster: it runs as in main
    Cluster,
    /// it belongs to the whole database: refused in a world
    Database(&'static str),
    /// it creates, changes or drops schema objects: the world's own
    Schema,
}

fn kind(tag: pg_sys::NodeTag) -> Kind {
    use pg_sys::NodeTag::*;
    match tag {
        T_CreateRoleStmt | T_AlterRoleStmt | T_AlterRoleSetStmt | T_DropRoleStmt | T_GrantRoleStmt | T_CreatedbStmt
        | T_DropdbStmt | T_AlterDatabaseStmt | T_CreateTableSpaceStmt | T_DropTableSpaceStmt
        | T_AlterTableSpaceOptionsStmt | T_AlterSystemStmt => {
            if matches!(tag, T_AlterDatabaseStmt) {
                Kind::Database("a database's settings are the database's")
            } else {
                Kind::Cluster
            }
        }
        T_AlterDatabaseSetStmt | T_AlterDatabaseRefreshCollStmt => Kind::Database("a database's settings are the database's"),
        T_CreateExtensionStmt | T_AlterExtensionStmt | T_AlterExtensionContentsStmt => Kind::Database("extensions belong to the whole database"),
        T_CreateEventTrigStmt | T_AlterEventTrigStmt => Kind::Database("event triggers belong to the whole database"),
        T_CreatePublicationStmt | T_AlterPublicationStmt | T_CreateSubscriptionStmt | T_AlterSubscriptionStmt
        | T_DropSubscriptionStmt => Kind::Database("publications and subscriptions belong to the whole database"),
        T_CreatePLangStmt | T_CreateAmStmt | T_CreateTransformStmt => {
            Kind::Database("languages, access methods and transforms belong to the whole database")
        }
        T_CreateFdwStmt | T_AlterFdwStmt | T_CreateForeignServerStmt | T_AlterForeignServerStmt | T_CreateUserMappingStmt
        | T_AlterUserMappingStmt | T_DropUserMappingStmt | T_ImportForeignSchemaStmt | T_CreateForeignTableStmt => {
            Kind::Database("foreign data wrappers, servers and foreign tables belong to the whole database")
        }
        T_AlterDefaultPrivilegesStmt => Kind::Database("default privileges apply to the whole database"),
        T_SecLabelStmt => Kind::Database("security labels are not kept per world"),
        T_DropOwnedStmt | T_ReassignOwnedStmt => Kind::Database("it acts on every object of the database"),
        _ => Kind::Schema,
    }
}

/// Is this utility statement one that changes the schema (or the database, or the cluster)?
pub fn is_schema_change(tag: pg_sys::NodeTag) -> bool {
    use pg_sys::NodeTag::*;
    matches!(
        tag,
        T_CreateStmt | T_AlterTableStmt | T_DropStmt | T_RenameStmt | T_IndexStmt | T_ViewStmt | T_CreateTableAsStmt
            | T_CreateSeqStmt | T_AlterSeqStmt | T_CreateFunctionStmt | T_AlterFunctionStmt | T_CreateSchemaStmt
            | T_CreateTrigStmt | T_RuleStmt | T_CompositeTypeStmt | T_CreateEnumStmt | T_AlterEnumStmt
            | T_CreateRangeStmt | T_CreateDomainStmt | T_AlterDomainStmt | T_CommentStmt | T_AlterObjectSchemaStmt
            | T_AlterOwnerStmt | T_CreatePolicyStmt | T_AlterPolicyStmt | T_GrantStmt | T_DefineStmt
            | T_CreateStatsStmt | T_AlterStatsStmt | T_CreateConversionStmt | T_CreateOpClassStmt
            | T_CreateOpFamilyStmt | T_AlterOpFamilyStmt | T_AlterOperatorStmt | T_AlterTypeStmt
            | T_AlterCollationStmt | T_AlterTSDictionaryStmt | T_AlterTSConfigurationStmt | T_AlterObjectDependsStmt
            | T_CreateExtensionStmt | T_AlterExtensionStmt | T_AlterExtensionContentsStmt | T_CreateEventTrigStmt
            | T_AlterEventTrigStmt | T_CreatePublicationStmt | T_AlterPublicationStmt | T_CreateSubscriptionStmt
            | T_AlterSubscriptionStmt | T_DropSubscriptionStmt | T_CreateCastStmt | T_CreatePLangStmt
            | T_CreateAmStmt | T_CreateTransformStmt | T_CreateFdwStmt | T_AlterFdwStmt | T_CreateForeignServerStmt
            | T_AlterForeignServerStmt | T_CreateUserMappingStmt | T_AlterUserMappingStmt | T_DropUserMappingStmt
            | T_ImportForeignSchemaStmt | T_CreateForeignTableStmt | T_AlterDefaultPrivilegesStmt | T_SecLabelStmt
            | T_DropOwnedStmt | T_ReassignOwnedStmt | T_AlterDatabaseSetStmt | T_AlterDatabaseRefreshCollStmt
            | T_AlterDatabaseStmt | T_RefreshMatViewStmt | T_AlterTableMoveAllStmt | T_ClusterStmt
    )
}

fn statement_name(stmt: *mut pg_sys::Node) -> String {
    unsafe {
        let p = pg_sys::CreateCommandName(stmt);
        if p.is_null() { "this statement".into() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
    }
}

/// Set while a statement that stores a query (a view, a rule, a policy, a SQL-standard function
/// body) runs in a world: the query it stores is analysed as written, not routed into the world (the
/// world's rows are read when it is used, as for main's views).
static DEFINING: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// Set while VACUUM, REINDEX or CLUSTER (without USING) runs in a world: they rebuild storage, main's
/// tables' too, and change no definition (their transient tables and swaps aren't the world's DDL).
static MAINTENANCE: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// A utility statement in a world starts (`maintenance`: it only rebuilds storage) and ends.
pub fn maintenance(on: bool) {
    MAINTENANCE.with(|m| m.set(on));
}

/// Does this statement only rebuild storage (VACUUM, REINDEX, CLUSTER without USING)?
///
/// # Safety
/// `stmt` is a utility statement.
pub unsafe fn rebuilds_storage(stmt: *mut pg_sys::Node) -> bool {
    unsafe {
        match (*stmt).type_ {
            pg_sys::NodeTag::T_VacuumStmt | pg_sys::NodeTag::T_ReindexStmt => true,
            pg_sys::NodeTag::T_ClusterStmt => (*(stmt as *mut pg_sys::ClusterStmt)).indexname.is_null(),
            _ => false,
        }
    }
}

/// After `before`: does the statement make or rename one of the world's namespaces (`pg_w<num>_...`, a
/// reserved name Postgres lets only allow_system_table_mods make)? The utility hook sets that for it.
///
/// # Safety
/// `stmt` is a utility statement.
pub unsafe fn names_world_namespace(stmt: *mut pg_sys::Node) -> bool {
    unsafe {
        let name = match (*stmt).type_ {
            pg_sys::NodeTag::T_CreateSchemaStmt => (*(stmt as *mut pg_sys::CreateSchemaStmt)).schemaname,
            pg_sys::NodeTag::T_RenameStmt if (*(stmt as *mut pg_sys::RenameStmt)).renameType == pg_sys::ObjectType::OBJECT_SCHEMA => {
                (*(stmt as *mut pg_sys::RenameStmt)).newname
            }
            _ => return false,
        };
        !name.is_null() && search_path::world_of_namespace(&CStr::from_ptr(name).to_string_lossy()).is_some()
    }
}

/// Is a statement of the world storing a query now (route/hooks/analyze.rs leaves its analysis alone)?
pub fn defining() -> bool {
    DEFINING.with(|d| d.get())
}

/// The statement stores a query (`defining`): from `before` to its end (`after`, or an abort).
unsafe fn stores_query(stmt: *mut pg_sys::Node) -> bool {
    unsafe {
        use pg_sys::NodeTag::*;
        match (*stmt).type_ {
            T_ViewStmt | T_RuleStmt | T_CreatePolicyStmt | T_AlterPolicyStmt => true,
            T_CreateFunctionStmt => !(*(stmt as *mut pg_sys::CreateFunctionStmt)).sql_body.is_null(),
            _ => false,
        }
    }
}

/// DDL in world `world` (a live world, the session's): refused, or made the world's own. `stmt` may be
/// changed (the caller passes a tree it may write).
///
/// # Safety
/// `stmt` is the utility statement of a plan being processed, writable.
pub unsafe fn before(stmt: *mut pg_sys::Node, world: &overlay::World, source: &str) {
    unsafe {
        DEFERRED.with(|d| d.borrow_mut().retain(|e| e.0 != stmt as usize));
        CURRENT.with(|c| c.set(stmt as usize));
        if stores_query(stmt) {
            DEFINING.with(|d| d.set(true));
        }
        let tag = (*stmt).type_;
        match kind(tag) {
            Kind::Cluster => return,
            Kind::Database(why) => raise(
                "0A000",
                format!(
                    "{} is not supported inside a world: {why} (the session is in world \"{}\"); switch to main to run it",
                    statement_name(stmt),
                    world.name
                ),
            ),
            Kind::Schema => {}
        }
        if tag == pg_sys::NodeTag::T_CreateSchemaStmt {
            let s = stmt as *mut pg_sys::CreateSchemaStmt;
            // (CREATE SCHEMA AUTHORIZATION r is named after the role)
            let name = if (*s).schemaname.is_null() {
                CStr::from_ptr(pg_sys::get_rolespec_name((*s).authrole)).to_string_lossy().into_owned()
            } else {
                CStr::from_ptr((*s).schemaname).to_string_lossy().into_owned()
            };
            if namespace_oid(&name) != pg_sys::Oid::INVALID {
                // as in main: it exists (IF NOT EXISTS skips)
                return;
            }
            let nsp = world_schemas::ensure(world.num, &name, true);
            (*s).schemaname = pstr(&nsp);
            return;
        }
        // names of what the world already made, qualified with the schema they stand for
        route_existing_names(stmt, world);
        // one of main's tables: its twin, made at the first such statement (storage/world_twins.rs); the
        // statement is recorded for the merge to run on main's table
        let constraint_only = twins::constraint_only(stmt);
        if let Some(twin) = twins::route_main_tables(stmt, world) {
            crate::storage::world_twins::record_statement(world.num, twin, source, constraint_only);
        }
        // a foreign key from the world's table to main's: made at the merge, not now
        defer_foreign_keys(stmt, world);
        // statements whose changes Postgres makes without telling the object access hook: their targets
        // are judged here
        refuse_main_targets(stmt, world);
        for target in creation_targets(stmt) {
            route_target(target, world);
        }
        // an unqualified name is made where the path says: the world's namespace of the first schema
        ensure_first_schema(world);
        refuse_shadowing(stmt, world, source);
    }
}

/// COMMENT, GRANT / REVOKE, REFRESH MATERIALIZED VIEW and CLUSTER ... USING change catalogs (or a
/// matview's rows) without an object access event: refused unless what they name is the world's own.
unsafe fn refuse_main_targets(stmt: *mut pg_sys::Node, world: &overlay::World) {
    unsafe {
        use pg_sys::NodeTag::*;
        let name = statement_name(stmt);
        let refuse = |what: String| -> ! {
            raise(
                "0A000",
                format!("{name} on {what} inside a world is not supported yet: only the world's own objects can change there (the session is in world \"{}\"); switch to main to change main's schema", world.name),
            )
        };
        let check = |address: pg_sys::ObjectAddress| {
            if address.objectId != pg_sys::Oid::INVALID {
                if let Err(what) = owned_by_world(address.classId, address.objectId, 0, world) {
                    refuse(what);
                }
            }
        };
        let relation = |rv: *mut pg_sys::RangeVar| {
            if rv.is_null() {
                return;
            }
            let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
            check(pg_sys::ObjectAddress { classId: pg_sys::RelationRelationId, objectId: relid, objectSubId: 0 });
        };
        match (*stmt).type_ {
            T_CommentStmt => {
                let c = stmt as *mut pg_sys::CommentStmt;
                let mut rel: pg_sys::Relation = std::ptr::null_mut();
                let address = pg_sys::get_object_address((*c).objtype, (*c).object, &mut rel, pg_sys::AccessShareLock as i32, true);
                if !rel.is_null() {
                    pg_sys::relation_close(rel, pg_sys::NoLock as i32);
                }
                if matches!((*c).objtype, pg_sys::ObjectType::OBJECT_DATABASE | pg_sys::ObjectType::OBJECT_EXTENSION | pg_sys::ObjectType::OBJECT_EVENT_TRIGGER | pg_sys::ObjectType::OBJECT_LARGEOBJECT | pg_sys::ObjectType::OBJECT_CAST | pg_sys::ObjectType::OBJECT_LANGUAGE | pg_sys::ObjectType::OBJECT_ACCESS_METHOD | pg_sys::ObjectType::OBJECT_PUBLICATION | pg_sys::ObjectType::OBJECT_FDW | pg_sys::ObjectType::OBJECT_FOREIGN_SERVER | pg_sys::ObjectType::OBJECT_TRANSFORM)
                {
                    refuse(describe(address.classId, address.objectId, 0));
                }
                check(address);
            }
            T_GrantStmt => {
                let g = stmt as *mut pg_sys::GrantStmt;
                if (*g).targtype != pg_sys::GrantTargetType::ACL_TARGET_OBJECT {
                    // ON ALL ... IN SCHEMA s: the schema's objects are main's unless it is the world's own
                    for i in 0..list_len((*g).objects) {
                        let s = crate::fast_ffi::list_nth((*g).objects, i) as *mut pg_sys::String;
                        let name = CStr::from_ptr((*s).sval).to_string_lossy().into_owned();
                        if search_path::world_of_namespace(&name) != Some(world.num) {
                            refuse(format!("all objects in schema {name}"));
                        }
                    }
                    return;
                }
                use pg_sys::ObjectType::*;
                match (*g).objtype {
                    OBJECT_TABLE | OBJECT_SEQUENCE => {
                        for i in 0..list_len((*g).objects) {
                            relation(crate::fast_ffi::list_nth((*g).objects, i) as *mut pg_sys::RangeVar);
                        }
                    }
                    OBJECT_SCHEMA => {
                        // a schema's privileges in a world are its namespace's there: what the world's
                        // roles may create (main's schema, and its objects' privileges, stay main's)
                        for i in 0..list_len((*g).objects) {
                            let s = crate::fast_ffi::list_nth((*g).objects, i) as *mut pg_sys::String;
                            let name = CStr::from_ptr((*s).sval).to_string_lossy().into_owned();
                            if let Some(nsp) = world_namespace_for(&name, world) {
                                (*s).sval = pstr(&nsp);
                            }
                        }
                    }
                    OBJECT_FUNCTION | OBJECT_PROCEDURE | OBJECT_ROUTINE => {
                        for i in 0..list_len((*g).objects) {
                            let obj = crate::fast_ffi::list_nth((*g).objects, i) as *mut pg_sys::Node;
                            let mut rel: pg_sys::Relation = std::ptr::null_mut();
                            let address = pg_sys::get_object_address((*g).objtype, obj, &mut rel, pg_sys::AccessShareLock as i32, true);
                            check(address);
                        }
                    }
                    OBJECT_TYPE | OBJECT_DOMAIN => {
                        for i in 0..list_len((*g).objects) {
                            let names = crate::fast_ffi::list_nth((*g).objects, i) as *mut pg_sys::List;
                            let typ = pg_sys::LookupTypeNameOid(std::ptr::null_mut(), pg_sys::makeTypeNameFromNameList(names), true);
                            check(pg_sys::ObjectAddress { classId: pg_sys::TypeRelationId, objectId: typ, objectSubId: 0 });
                        }
                    }
                    OBJECT_TABLESPACE => {}
                    _ => refuse(format!("a {}", statement_object((*g).objtype))),
                }
            }
            T_RefreshMatViewStmt => {
                let rv = (*(stmt as *mut pg_sys::RefreshMatViewStmt)).relation;
                relation(rv);
                // the world's own materialized view over main's tracked tables: a refresh runs its stored
                // query unrouted (no parse analysis to route), so it would read main's rows, not the world's
                let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
                let reads = storage::as_internal(|| {
                    crate::spi_calls::get_one_with_args::<String>(
                        "SELECT string_agg(DISTINCT t.relid::text, ', ') FROM pg_rewrite r
                           JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid AND d.refclassid = 'pg_class'::regclass
                           JOIN worlds.tables t ON t.relid::oid = d.refobjid
                          WHERE r.ev_class = $1",
                        &[relid.into()],
                    )
                    .ok()
                    .flatten()
                });
                if let Some(tables) = reads {
                    raise_with(
                        "0A000",
                        format!("REFRESH MATERIALIZED VIEW inside a world is not supported yet for one that reads main's tables ({tables}): it would read their rows as main has them, not as the world does"),
                        None,
                        Some("Drop it and create it again in the world: CREATE MATERIALIZED VIEW reads the world's rows.".into()),
                    );
                }
            }
            // (the object access hook would refuse it too, at its first change: named here by the statement)
            T_AlterTableStmt => relation((*(stmt as *mut pg_sys::AlterTableStmt)).relation),
            T_IndexStmt => relation((*(stmt as *mut pg_sys::IndexStmt)).relation),
            T_CreateTrigStmt => relation((*(stmt as *mut pg_sys::CreateTrigStmt)).relation),
            T_RuleStmt => relation((*(stmt as *mut pg_sys::RuleStmt)).relation),
            T_CreatePolicyStmt => relation((*(stmt as *mut pg_sys::CreatePolicyStmt)).table),
            // (CLUSTER t USING i marks i as t's clustering index: a definition)
            T_ClusterStmt if !(*(stmt as *mut pg_sys::ClusterStmt)).indexname.is_null() => relation((*(stmt as *mut pg_sys::ClusterStmt)).relation),
            _ => {}
        }
    }
}

fn statement_object(t: pg_sys::ObjectType::Type) -> &'static str {
    use pg_sys::ObjectType::*;
    match t {
        OBJECT_DATABASE => "database",
        OBJECT_LARGEOBJECT => "large object",
        OBJECT_LANGUAGE => "language",
        OBJECT_FDW => "foreign-data wrapper",
        OBJECT_FOREIGN_SERVER => "foreign server",
        OBJECT_PARAMETER_ACL => "parameter",
        _ => "database-wide object",
    }
}

unsafe fn list_len(l: *mut pg_sys::List) -> i32 {
    unsafe { if l.is_null() { 0 } else { (*l).length } }
}


fn namespace_oid(name: &str) -> pg_sys::Oid {
    let c = CString::new(name).unwrap_or_default();
    unsafe { pg_sys::get_namespace_oid(c.as_ptr(), true) }
}

fn namespace_name(oid: pg_sys::Oid) -> String {
    unsafe {
        let p = pg_sys::get_namespace_name(oid);
        if p.is_null() { String::new() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
    }
}

fn pstr(s: &str) -> *mut std::ffi::c_char {
    let c = CString::new(s).unwrap_or_default();
    unsafe { pg_sys::pstrdup(c.as_ptr()) }
}

/// In main: a schema named like a world's namespace (`pg_w<num>_<schema>`) would be found by that world's
/// sessions as the world's own, so only pg_worlds makes one (42939).
///
/// # Safety
/// `stmt` is a utility statement.
pub unsafe fn refuse_world_namespace_names(stmt: *mut pg_sys::Node) {
    unsafe {
        let name = match (*stmt).type_ {
            pg_sys::NodeTag::T_CreateSchemaStmt => (*(stmt as *mut pg_sys::CreateSchemaStmt)).schemaname,
            pg_sys::NodeTag::T_RenameStmt if (*(stmt as *mut pg_sys::RenameStmt)).renameType == pg_sys::ObjectType::OBJECT_SCHEMA => {
                (*(stmt as *mut pg_sys::RenameStmt)).newname
            }
            _ => return,
        };
        if name.is_null() {
            return;
        }
        let name = CStr::from_ptr(name).to_string_lossy();
        if search_path::world_of_namespace(&name).is_some() {
            // (as Postgres words it for any pg_ name; this one even with allow_system_table_mods)
            raise_with("42939", format!("unacceptable schema name \"{name}\""), Some("The prefix \"pg_\" is reserved for system schemas.".into()), None);
        }
    }
}
