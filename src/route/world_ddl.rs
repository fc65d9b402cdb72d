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
use crate::api::raise;
use crate::storage::{self, overlay, search_path, world_schemas};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{CStr, CString};

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

pub fn install() {
    unsafe {
        PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(object_access);
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
        T_CreateCastStmt | T_CreatePLangStmt | T_CreateAmStmt | T_CreateTransformStmt => {
            Kind::Database("casts, languages, access methods and transforms belong to the whole database")
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
            | T_AlterDatabaseStmt | T_RefreshMatViewStmt | T_AlterTableMoveAllStmt | T_ClusterStmt | T_ReindexStmt
    )
}

fn statement_name(stmt: *mut pg_sys::Node) -> String {
    unsafe {
        let p = pg_sys::CreateCommandName(stmt);
        if p.is_null() { "this statement".into() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
    }
}

thread_local! {
    /// Set while a statement that stores a query (a view, a rule, a policy, a SQL-standard function
    /// body) runs in a world: the query it stores is analysed as written, not routed into the world (the
    /// world's rows are read when it is used, as for main's views).
    static DEFINING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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
pub unsafe fn before(stmt: *mut pg_sys::Node, world: &overlay::World) {
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
        refuse_shadowing(stmt, world);
    }
}

/// COMMENT, GRANT / REVOKE, REFRESH MATERIALIZED VIEW, CLUSTER and REINDEX change catalogs (or a
/// relation's storage) without an object access event: refused unless what they name is the world's own.
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
            T_RefreshMatViewStmt => relation((*(stmt as *mut pg_sys::RefreshMatViewStmt)).relation),
            // (the object access hook would refuse it too, at its first change: named here by the statement)
            T_AlterTableStmt => relation((*(stmt as *mut pg_sys::AlterTableStmt)).relation),
            T_IndexStmt => relation((*(stmt as *mut pg_sys::IndexStmt)).relation),
            T_CreateTrigStmt => relation((*(stmt as *mut pg_sys::CreateTrigStmt)).relation),
            T_RuleStmt => relation((*(stmt as *mut pg_sys::RuleStmt)).relation),
            T_CreatePolicyStmt => relation((*(stmt as *mut pg_sys::CreatePolicyStmt)).table),
            T_ClusterStmt => {
                let c = stmt as *mut pg_sys::ClusterStmt;
                if (*c).relation.is_null() {
                    refuse("every clustered table of the database".into());
                }
                relation((*c).relation);
            }
            T_ReindexStmt => {
                let r = stmt as *mut pg_sys::ReindexStmt;
                if (*r).relation.is_null() {
                    refuse("a whole schema or database".into());
                }
                relation((*r).relation);
            }
            _ => {}
        }
    }
}

thread_local! {
    /// Foreign keys a statement in a world left out (to main's tables): (the table as the statement names
    /// it, the constraint's text), recorded once the statement succeeded (`after`).
    /// (the statement that left them out, its table, the constraint)
    static DEFERRED: std::cell::RefCell<Vec<(usize, *mut pg_sys::RangeVar, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A foreign key from a table of the world to one of main's can't be made in the world: it would put
/// Postgres's checks on main's table (its deletes would look for the world's rows). Worlds check foreign
/// keys at their merge: the constraint is left out of the statement and recorded, and the merge adds it
/// once the world's rows are in, where Postgres checks every row (23503, nothing merged).
unsafe fn defer_foreign_keys(stmt: *mut pg_sys::Node, world: &overlay::World) {
    unsafe {
        use pg_sys::NodeTag::*;
        match (*stmt).type_ {
            T_CreateStmt => {
                let c = stmt as *mut pg_sys::CreateStmt;
                (*c).tableElts = without_main_keys((*c).tableElts, (*c).relation, None, world);
            }
            T_AlterTableStmt => {
                let a = stmt as *mut pg_sys::AlterTableStmt;
                let cmds = (*a).cmds;
                let mut kept = std::ptr::null_mut();
                for i in 0..list_len(cmds) {
                    let cmd = crate::fast_ffi::list_nth(cmds, i) as *mut pg_sys::AlterTableCmd;
                    let def = (*cmd).def;
                    let mut keep = true;
                    if !def.is_null() {
                        if (*cmd).subtype == pg_sys::AlterTableType::AT_AddConstraint && (*def).type_ == T_Constraint {
                            let one = pg_sys::lappend(std::ptr::null_mut(), def.cast());
                            keep = !without_main_keys(one, (*a).relation, None, world).is_null();
                        } else if (*cmd).subtype == pg_sys::AlterTableType::AT_AddColumn && (*def).type_ == T_ColumnDef {
                            let one = pg_sys::lappend(std::ptr::null_mut(), def.cast());
                            without_main_keys(one, (*a).relation, None, world);
                        }
                    }
                    if keep {
                        kept = pg_sys::lappend(kept, cmd.cast());
                    }
                }
                (*a).cmds = kept;
            }
            _ => {}
        }
    }
}

/// `elements` (a CREATE TABLE's columns and constraints) without the foreign keys to main's tables,
/// recorded for the merge; a column's own REFERENCES comes out of its constraints.
unsafe fn without_main_keys(elements: *mut pg_sys::List, table: *mut pg_sys::RangeVar, column: Option<&str>, world: &overlay::World) -> *mut pg_sys::List {
    unsafe {
        let mut kept = std::ptr::null_mut();
        for i in 0..list_len(elements) {
            let node = crate::fast_ffi::list_nth(elements, i) as *mut pg_sys::Node;
            match (*node).type_ {
                pg_sys::NodeTag::T_ColumnDef => {
                    let col = node as *mut pg_sys::ColumnDef;
                    let name = CStr::from_ptr((*col).colname).to_string_lossy().into_owned();
                    (*col).constraints = without_main_keys((*col).constraints, table, Some(&name), world);
                    kept = pg_sys::lappend(kept, node.cast());
                }
                pg_sys::NodeTag::T_Constraint if (*(node as *mut pg_sys::Constraint)).contype == pg_sys::ConstrType::CONSTR_FOREIGN => {
                    let c = node as *mut pg_sys::Constraint;
                    match main_table_named((*c).pktable, world) {
                        Some((target, relid)) => {
                            // (the right Postgres checks when the key is made: checked now, as it is left out)
                            if pg_sys::pg_class_aclcheck(relid, pg_sys::GetUserId(), pg_sys::ACL_REFERENCES as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
                                raise("42501", format!("permission denied for table {}", CStr::from_ptr(pg_sys::get_rel_name(relid)).to_string_lossy()));
                            }
                            let text = foreign_key_text(c, &target, column);
                            DEFERRED.with(|d| d.borrow_mut().push((CURRENT.with(|c| c.get()), table, text)));
                        }
                        None => kept = pg_sys::lappend(kept, node.cast()),
                    }
                }
                _ => kept = pg_sys::lappend(kept, node.cast()),
            }
        }
        kept
    }
}

/// The table a REFERENCES names, qualified as main names it, when it is main's (not the world's own, not
/// temporary).
unsafe fn main_table_named(rv: *mut pg_sys::RangeVar, world: &overlay::World) -> Option<(String, pg_sys::Oid)> {
    unsafe {
        if rv.is_null() {
            return None;
        }
        let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        if relid == pg_sys::Oid::INVALID {
            return None; // (Postgres says it doesn't exist)
        }
        if owned_by_world(pg_sys::RelationRelationId, relid, 0, world).is_ok() {
            return None;
        }
        let nsp = namespace_name(pg_sys::get_rel_namespace(relid));
        let rel = CStr::from_ptr(pg_sys::get_rel_name(relid)).to_string_lossy().into_owned();
        Some((crate::sql_text::QuotedName::qualified(&nsp, &rel).to_string(), relid))
    }
}

/// A foreign key constraint as `ALTER TABLE ... ADD` takes it.
unsafe fn foreign_key_text(c: *mut pg_sys::Constraint, target: &str, column: Option<&str>) -> String {
    unsafe {
        let names = |l: *mut pg_sys::List| -> Vec<String> {
            (0..list_len(l)).map(|i| CStr::from_ptr((*(crate::fast_ffi::list_nth(l, i) as *mut pg_sys::String)).sval).to_string_lossy().into_owned()).collect()
        };
        let q = |v: Vec<String>| crate::sql_text::column_list(&v);
        let mut text = String::new();
        if !(*c).conname.is_null() {
            text.push_str(&format!("CONSTRAINT {} ", crate::sql_text::QuotedName::ident(&CStr::from_ptr((*c).conname).to_string_lossy())));
        }
        let fk = match column {
            Some(col) => vec![col.to_string()],
            None => names((*c).fk_attrs),
        };
        text.push_str(&format!("FOREIGN KEY ({}) REFERENCES {target}", q(fk)));
        let pk = names((*c).pk_attrs);
        if !pk.is_empty() {
            text.push_str(&format!(" ({})", q(pk)));
        }
        match (*c).fk_matchtype as u8 {
            b'f' => text.push_str(" MATCH FULL"),
            b'p' => text.push_str(" MATCH PARTIAL"),
            _ => {}
        }
        let action = |a: std::ffi::c_char| match a as u8 {
            b'r' => Some("RESTRICT"),
            b'c' => Some("CASCADE"),
            b'n' => Some("SET NULL"),
            b'd' => Some("SET DEFAULT"),
            _ => None,
        };
        if let Some(a) = action((*c).fk_upd_action) {
            text.push_str(&format!(" ON UPDATE {a}"));
        }
        if let Some(a) = action((*c).fk_del_action) {
            text.push_str(&format!(" ON DELETE {a}"));
        }
        if (*c).deferrable {
            text.push_str(" DEFERRABLE");
        }
        if (*c).initdeferred {
            text.push_str(" INITIALLY DEFERRED");
        }
        if (*c).skip_validation {
            text.push_str(" NOT VALID");
        }
        text
    }
}

/// After a DDL statement in a world succeeded: the foreign keys it left out are recorded on its table
/// (a CREATE TABLE's own subcommands, its sequences, run in between: their entries are theirs).
pub fn after(stmt: *mut pg_sys::Node, world_num: i32) {
    DEFINING.with(|d| d.set(false));
    let deferred: Vec<(usize, *mut pg_sys::RangeVar, String)> = DEFERRED.with(|d| {
        let mut all = d.borrow_mut();
        let (mine, rest) = std::mem::take(&mut *all).into_iter().partition(|e| e.0 == stmt as usize);
        *all = rest;
        mine
    });
    for (_, rv, text) in deferred {
        let relid = unsafe { pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut()) };
        if relid == pg_sys::Oid::INVALID {
            continue;
        }
        storage::as_internal(|| {
            crate::spi_calls::run_with_args(
                "INSERT INTO worlds.world_fk (world, relid, definition) VALUES ($1, $2, $3)",
                &[world_num.into(), relid.into(), text.as_str().into()],
            )
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        });
    }
}

/// Forgets foreign keys left out by statements that failed (at abort).
pub fn forget_deferred() {
    DEFERRED.with(|d| d.borrow_mut().clear());
    DEFINING.with(|d| d.set(false));
}

thread_local! {
    /// The statement `before` is working on (its entries in DEFERRED are tagged with it).
    static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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

/// A schema name a statement uses for something that exists: the world's namespace of it, when the world
/// made that schema (main has none of that name). For a schema main has too, see `route_relation`.
fn world_schema_named(name: &str, world: &overlay::World) -> Option<String> {
    if search_path::world_of_namespace(name).is_some() || namespace_oid(name) != pg_sys::Oid::INVALID {
        return None;
    }
    world_schemas::of_world(world.num).into_iter().find(|(s, _)| s == name).map(|(_, n)| n)
}

/// A qualified relation a statement names: its schema becomes the world's namespace when the relation is
/// the world's (there, and not in main's schema of that name).
unsafe fn route_relation(rv: *mut pg_sys::RangeVar, world: &overlay::World) {
    unsafe {
        if rv.is_null() || (*rv).schemaname.is_null() {
            return;
        }
        let schema = CStr::from_ptr((*rv).schemaname).to_string_lossy().into_owned();
        if let Some(nsp) = world_schema_named(&schema, world) {
            (*rv).schemaname = pstr(&nsp);
            return;
        }
        let Some(own) = own_namespace(&schema, world) else { return };
        let main = namespace_oid(&schema);
        let rel = (*rv).relname;
        if pg_sys::get_relname_relid(rel, own) != pg_sys::Oid::INVALID && (main == pg_sys::Oid::INVALID || pg_sys::get_relname_relid(rel, main) == pg_sys::Oid::INVALID) {
            (*rv).schemaname = pstr(&search_path::world_namespace(&schema, world.num));
        }
    }
}

/// `route_relation` for a name list ([schema.]name).
unsafe fn route_relation_names(names: *mut pg_sys::List, world: &overlay::World) {
    unsafe {
        if list_len(names) < 2 {
            return;
        }
        let n = list_len(names);
        let schema = crate::fast_ffi::list_nth(names, n - 2) as *mut pg_sys::String;
        let rel = crate::fast_ffi::list_nth(names, n - 1) as *mut pg_sys::String;
        let rv = pg_sys::makeRangeVar((*schema).sval, (*rel).sval, -1);
        route_relation(rv, world);
        (*schema).sval = (*rv).schemaname;
    }
}

/// Names of objects the world made, qualified with the schema they stand for (`DROP TABLE app.t`,
/// `ALTER TABLE public.notes ...`, `DROP SCHEMA app`, `ALTER TABLE t SET SCHEMA app`): the world's
/// namespaces, where the object is the world's.
unsafe fn route_existing_names(stmt: *mut pg_sys::Node, world: &overlay::World) {
    unsafe {
        use pg_sys::NodeTag::*;
        use pg_sys::ObjectType::*;
        let schema_string = |s: *mut pg_sys::String| {
            if s.is_null() || (*s).sval.is_null() {
                return;
            }
            let name = CStr::from_ptr((*s).sval).to_string_lossy().into_owned();
            if let Some(nsp) = world_schema_named(&name, world) {
                (*s).sval = pstr(&nsp);
            }
        };
        match (*stmt).type_ {
            T_DropStmt => {
                let d = stmt as *mut pg_sys::DropStmt;
                for i in 0..list_len((*d).objects) {
                    let obj = crate::fast_ffi::list_nth((*d).objects, i);
                    match (*d).removeType {
                        OBJECT_SCHEMA => schema_string(obj as *mut pg_sys::String),
                        OBJECT_TABLE | OBJECT_VIEW | OBJECT_MATVIEW | OBJECT_SEQUENCE | OBJECT_INDEX => {
                            route_relation_names(obj as *mut pg_sys::List, world)
                        }
                        _ => {}
                    }
                }
            }
            T_AlterTableStmt => route_relation((*(stmt as *mut pg_sys::AlterTableStmt)).relation, world),
            T_IndexStmt => route_relation((*(stmt as *mut pg_sys::IndexStmt)).relation, world),
            T_CreateTrigStmt => route_relation((*(stmt as *mut pg_sys::CreateTrigStmt)).relation, world),
            T_RuleStmt => route_relation((*(stmt as *mut pg_sys::RuleStmt)).relation, world),
            T_CreatePolicyStmt => route_relation((*(stmt as *mut pg_sys::CreatePolicyStmt)).table, world),
            T_RefreshMatViewStmt => route_relation((*(stmt as *mut pg_sys::RefreshMatViewStmt)).relation, world),
            T_RenameStmt => {
                let r = stmt as *mut pg_sys::RenameStmt;
                if (*r).renameType == OBJECT_SCHEMA {
                    let old = CStr::from_ptr((*r).subname).to_string_lossy().into_owned();
                    if let Some(nsp) = world_schema_named(&old, world) {
                        // a schema the world made, renamed: its namespace takes the new name's (and the
                        // registry with it, in this transaction)
                        let new = CStr::from_ptr((*r).newname).to_string_lossy().into_owned();
                        let new_nsp = search_path::world_namespace(&new, world.num);
                        storage::as_internal(|| {
                            crate::spi_calls::run_with_args(
                                "UPDATE worlds.world_schema SET schema = $3, nsp = $4 WHERE world = $1 AND schema = $2",
                                &[world.num.into(), old.as_str().into(), new.as_str().into(), new_nsp.as_str().into()],
                            )
                            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
                        });
                        (*r).subname = pstr(&nsp);
                        (*r).newname = pstr(&new_nsp);
                    }
                } else {
                    route_relation((*r).relation, world);
                }
            }
            T_AlterObjectSchemaStmt => {
                let a = stmt as *mut pg_sys::AlterObjectSchemaStmt;
                route_relation((*a).relation, world);
                // the schema it moves to: the world's namespace of it
                if !(*a).newschema.is_null() {
                    let name = CStr::from_ptr((*a).newschema).to_string_lossy().into_owned();
                    if let Some(nsp) = world_namespace_for(&name, world) {
                        (*a).newschema = pstr(&nsp);
                    }
                }
            }
            T_AlterOwnerStmt => {
                let a = stmt as *mut pg_sys::AlterOwnerStmt;
                if (*a).objectType == OBJECT_SCHEMA {
                    schema_string((*a).object as *mut pg_sys::String);
                } else {
                    route_relation((*a).relation, world);
                }
            }
            T_CommentStmt => {
                let c = stmt as *mut pg_sys::CommentStmt;
                if (*c).objtype == OBJECT_SCHEMA {
                    schema_string((*c).object as *mut pg_sys::String);
                }
            }
            _ => {}
        }
    }
}

/// Where a statement names what it creates.
enum Target {
    Rel(*mut pg_sys::RangeVar),
    Names(*mut pg_sys::List),
}

unsafe fn creation_targets(stmt: *mut pg_sys::Node) -> Vec<Target> {
    unsafe {
        use pg_sys::NodeTag::*;
        let mut out = Vec::new();
        match (*stmt).type_ {
            T_CreateStmt => out.push(Target::Rel((*(stmt as *mut pg_sys::CreateStmt)).relation)),
            T_ViewStmt => out.push(Target::Rel((*(stmt as *mut pg_sys::ViewStmt)).view)),
            T_CreateSeqStmt => out.push(Target::Rel((*(stmt as *mut pg_sys::CreateSeqStmt)).sequence)),
            T_CreateTableAsStmt => {
                let into = (*(stmt as *mut pg_sys::CreateTableAsStmt)).into;
                if !into.is_null() {
                    out.push(Target::Rel((*into).rel));
                }
            }
            T_CompositeTypeStmt => out.push(Target::Rel((*(stmt as *mut pg_sys::CompositeTypeStmt)).typevar)),
            T_CreateFunctionStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateFunctionStmt)).funcname)),
            T_DefineStmt => out.push(Target::Names((*(stmt as *mut pg_sys::DefineStmt)).defnames)),
            T_CreateEnumStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateEnumStmt)).typeName)),
            T_CreateRangeStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateRangeStmt)).typeName)),
            T_CreateDomainStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateDomainStmt)).domainname)),
            T_CreateStatsStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateStatsStmt)).defnames)),
            T_CreateConversionStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateConversionStmt)).conversion_name)),
            T_CreateOpClassStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateOpClassStmt)).opclassname)),
            T_CreateOpFamilyStmt => out.push(Target::Names((*(stmt as *mut pg_sys::CreateOpFamilyStmt)).opfamilyname)),
            _ => {}
        }
        out
    }
}

/// A qualified name of something created: its schema becomes the world's namespace of that schema.
unsafe fn route_target(target: Target, world: &overlay::World) {
    unsafe {
        match target {
            Target::Rel(rv) => {
                if rv.is_null() || (*rv).relpersistence == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char || (*rv).schemaname.is_null() {
                    return;
                }
                let schema = CStr::from_ptr((*rv).schemaname).to_string_lossy().into_owned();
                if let Some(nsp) = world_namespace_for(&schema, world) {
                    (*rv).schemaname = pstr(&nsp);
                }
            }
            Target::Names(list) => {
                if list.is_null() || (*list).length < 2 {
                    return;
                }
                let at = (*list).length - 2; // [catalog.]schema.name
                let cell = crate::fast_ffi::list_nth(list, at) as *mut pg_sys::String;
                if cell.is_null() || (*cell).sval.is_null() {
                    return;
                }
                let schema = CStr::from_ptr((*cell).sval).to_string_lossy().into_owned();
                if let Some(nsp) = world_namespace_for(&schema, world) {
                    (*cell).sval = pstr(&nsp);
                }
            }
        }
    }
}

/// The world's namespace for a schema a statement names (made if need be); None where the name is to
/// stay (temporary, the catalog, a world's namespace itself).
fn world_namespace_for(schema: &str, world: &overlay::World) -> Option<String> {
    if schema == "pg_temp" || schema.starts_with("pg_") || search_path::world_of_namespace(schema).is_some() {
        return None;
    }
    if schema == "worlds" || schema == "worlds_data" {
        raise("42501", format!("schema \"{schema}\" is pg_worlds' own"));
    }
    Some(world_schemas::ensure(world.num, schema, false))
}

/// Makes the world's namespace of the first schema on the path, if the path doesn't lead with one.
unsafe fn ensure_first_schema(world: &overlay::World) {
    unsafe {
        let path = pg_sys::fetch_search_path(false);
        let first = if path.is_null() || (*path).length == 0 { None } else { Some(crate::fast_ffi::list_nth_oid(path, 0)) };
        let Some(first) = first else { return };
        if pg_sys::isAnyTempNamespace(first) || first == pg_sys::PG_CATALOG_NAMESPACE.into() {
            return;
        }
        let name = namespace_name(first);
        if search_path::world_of_namespace(&name) == Some(world.num) {
            return;
        }
        if search_path::world_of_namespace(&name).is_some() {
            return;
        }
        if name == "worlds" || name == "worlds_data" {
            return;
        }
        world_schemas::ensure(world.num, &name, false);
        pg_sys::CommandCounterIncrement();
    }
}

/// A CREATE (or CREATE OR REPLACE) of a relation or function main already has under that name, in the
/// schema it would land in main: Postgres answers as in main (42P07, or IF NOT EXISTS skips it) rather
/// than the world quietly getting a second object that hides main's. Replacing main's view or function
/// from a world is not supported yet (0A000).
unsafe fn refuse_shadowing(stmt: *mut pg_sys::Node, world: &overlay::World) {
    unsafe {
        use pg_sys::NodeTag::*;
        let (rv, replace) = match (*stmt).type_ {
            T_CreateStmt => ((*(stmt as *mut pg_sys::CreateStmt)).relation, false),
            T_ViewStmt => ((*(stmt as *mut pg_sys::ViewStmt)).view, (*(stmt as *mut pg_sys::ViewStmt)).replace),
            T_CreateSeqStmt => ((*(stmt as *mut pg_sys::CreateSeqStmt)).sequence, false),
            T_CreateTableAsStmt => {
                let into = (*(stmt as *mut pg_sys::CreateTableAsStmt)).into;
                (if into.is_null() { std::ptr::null_mut() } else { (*into).rel }, false)
            }
            T_CompositeTypeStmt => ((*(stmt as *mut pg_sys::CompositeTypeStmt)).typevar, false),
            T_CreateFunctionStmt => {
                let f = stmt as *mut pg_sys::CreateFunctionStmt;
                if (*f).replace {
                    if let Some(main_schema) = main_schema_of_names((*f).funcname, world) {
                        let name = last_name((*f).funcname);
                        if function_exists(&main_schema, &name) {
                            raise(
                                "0A000",
                                format!("replacing main's function {main_schema}.{name} inside a world is not supported yet (the session is in world \"{}\")", world.name),
                            );
                        }
                    }
                }
                return;
            }
            _ => return,
        };
        if rv.is_null() || (*rv).relpersistence == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
            return;
        }
        let relname = CStr::from_ptr((*rv).relname).to_string_lossy().into_owned();
        let Some(main_schema) = main_schema_of_rel(rv, world) else { return };
        let main_nsp = namespace_oid(&main_schema);
        if main_nsp == pg_sys::Oid::INVALID {
            return;
        }
        let relname_c = CString::new(relname.as_str()).unwrap_or_default();
        if pg_sys::get_relname_relid(relname_c.as_ptr(), main_nsp) == pg_sys::Oid::INVALID {
            return;
        }
        // does the world already have its own (made here earlier)? then Postgres answers on that one
        if let Some(own) = own_namespace(&main_schema, world) {
            if pg_sys::get_relname_relid(relname_c.as_ptr(), own) != pg_sys::Oid::INVALID {
                return;
            }
        }
        if replace {
            raise(
                "0A000",
                format!("replacing main's view {main_schema}.{relname} inside a world is not supported yet (the session is in world \"{}\")", world.name),
            );
        }
        // main's schema: Postgres finds main's relation there and answers as in main
        (*rv).schemaname = pstr(&main_schema);
    }
}

/// The schema a relation being created would land in in main: the one named, or the first on the path.
unsafe fn main_schema_of_rel(rv: *mut pg_sys::RangeVar, world: &overlay::World) -> Option<String> {
    unsafe {
        if !(*rv).schemaname.is_null() {
            let s = CStr::from_ptr((*rv).schemaname).to_string_lossy().into_owned();
            return main_schema_of(&s, world);
        }
        first_main_schema()
    }
}

unsafe fn main_schema_of_names(list: *mut pg_sys::List, world: &overlay::World) -> Option<String> {
    unsafe {
        if list.is_null() {
            return None;
        }
        if (*list).length >= 2 {
            let cell = crate::fast_ffi::list_nth(list, (*list).length - 2) as *mut pg_sys::String;
            let s = CStr::from_ptr((*cell).sval).to_string_lossy().into_owned();
            return main_schema_of(&s, world);
        }
        first_main_schema()
    }
}

unsafe fn last_name(list: *mut pg_sys::List) -> String {
    unsafe {
        let cell = crate::fast_ffi::list_nth(list, (*list).length - 1) as *mut pg_sys::String;
        CStr::from_ptr((*cell).sval).to_string_lossy().into_owned()
    }
}

/// The main schema a (possibly world) namespace name stands for.
fn main_schema_of(nsp: &str, world: &overlay::World) -> Option<String> {
    if search_path::world_of_namespace(nsp) == Some(world.num) {
        return world_schemas::of_world(world.num).into_iter().find(|(_, n)| n == nsp).map(|(s, _)| s);
    }
    Some(nsp.to_string())
}

/// The first schema of the path that is main's (not temporary, not a world's namespace).
unsafe fn first_main_schema() -> Option<String> {
    unsafe {
        let path = pg_sys::fetch_search_path(false);
        if path.is_null() {
            return None;
        }
        for i in 0..(*path).length {
            let oid = crate::fast_ffi::list_nth_oid(path, i);
            if pg_sys::isAnyTempNamespace(oid) || oid == pg_sys::PG_CATALOG_NAMESPACE.into() {
                continue;
            }
            let name = namespace_name(oid);
            if search_path::world_of_namespace(&name).is_some() {
                continue;
            }
            return Some(name);
        }
        None
    }
}

fn own_namespace(schema: &str, world: &overlay::World) -> Option<pg_sys::Oid> {
    let nsp = search_path::world_namespace(schema, world.num);
    let oid = namespace_oid(&nsp);
    (oid != pg_sys::Oid::INVALID).then_some(oid)
}

fn function_exists(schema: &str, name: &str) -> bool {
    storage::as_internal(|| {
        crate::spi_calls::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2)",
            &[schema.into(), name.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    })
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

/// In main: a schema named like a world's namespace (`<schema>@w<num>`) would be found by that world's
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
            raise("42939", format!("unacceptable schema name \"{name}\""));
        }
    }
}

// ---------------------------------------------------------------- the judge

/// Is the session working in a live world, as a user (not pg_worlds' own work)?
fn judging() -> Option<overlay::World> {
    if crate::guc::in_main() || storage::internal() || crate::guc::INTERNAL_DDL.get() || unsafe { pg_sys::creating_extension } {
        return None;
    }
    overlay::resolved_routing_world().filter(|w| w.num > 0 && !w.read_only)
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
        use pg_sys::ObjectAccessType::*;
        if !matches!(access, OAT_POST_CREATE | OAT_POST_ALTER | OAT_DROP) {
            return;
        }
        let Some(world) = judging() else { return };
        // what Postgres makes, changes or drops on its own (a VACUUM FULL's transient table, its swap of
        // files, the index behind a constraint) follows from a command whose own events are judged
        if !arg.is_null() {
            let internal = match access {
                OAT_POST_CREATE => (*(arg as *mut pg_sys::ObjectAccessPostCreate)).is_internal,
                OAT_POST_ALTER => (*(arg as *mut pg_sys::ObjectAccessPostAlter)).is_internal,
                _ => (*(arg as *mut pg_sys::ObjectAccessDrop)).dropflags & pg_sys::PERFORM_DELETION_INTERNAL as i32 != 0,
            };
            // (but a trigger: the foreign-key checks Postgres would put on main's table, were one made)
            if internal && class_id != pg_sys::TriggerRelationId {
                return;
            }
        }
        if let Err(what) = owned_by_world(class_id, object_id, sub_id, &world) {
            let verb = match access {
                OAT_POST_CREATE => "creating",
                OAT_DROP => "dropping",
                _ => "changing",
            };
            raise(
                "0A000",
                format!(
                    "{verb} {what} inside a world is not supported yet: only the world's own objects can change there (the session is in world \"{}\"); switch to main to change main's schema",
                    world.name
                ),
            );
        }
    }
}

/// Ok when the object is the world's own, temporary, or cluster-wide; else what it is, for the error.
unsafe fn owned_by_world(class_id: pg_sys::Oid, object_id: pg_sys::Oid, sub_id: i32, world: &overlay::World) -> Result<(), String> {
    unsafe {
        if pg_sys::IsSharedRelation(class_id) {
            return Ok(());
        }
        let c = class_id.to_u32();
        if c == catalog::INHERITS || c == catalog::INDEX {
            // (their events name the relation: the child, the index)
            return owned_by_world(pg_sys::RelationRelationId, object_id, 0, world);
        }
        let nsp = if c == pg_sys::NamespaceRelationId.to_u32() {
            // a namespace: the world's own by its name (read as this command sees it: one being made)
            let name = read_name(class_id, pg_sys::Oid::from(2685u32), object_id, 2).unwrap_or_default();
            // (the session's temporary namespaces, made at its first temporary table)
            if search_path::world_of_namespace(&name) == Some(world.num) || name.starts_with("pg_temp_") || name.starts_with("pg_toast_temp_") {
                return Ok(());
            }
            return Err(if name.is_empty() { describe(class_id, object_id, 0) } else { format!("schema {name}") });
        } else if let Some((attr, index, of_class)) = owner_attribute(c) {
            // an object that belongs to another one (a default, a trigger, a rule, a policy): its owner's
            match read_oid(class_id, pg_sys::Oid::from(index), object_id, attr) {
                Some(owner) => {
                    return owned_by_world(of_class, owner, 0, world).map_err(|_| {
                        let what = match c {
                            catalog::ATTRDEF => "a column default",
                            catalog::REWRITE => "a rule",
                            catalog::POLICY => "a policy",
                            catalog::AMOP | catalog::AMPROC => "a member",
                            catalog::CAST => "a cast",
                            _ => "a trigger",
                        };
                        format!("{what} on {}", describe(of_class, owner, 0))
                    })
                }
                None => return Ok(()), // (gone or not there yet: nothing to judge)
            }
        } else if has_namespace(c) {
            read_oid(class_id, pg_sys::get_object_oid_index(class_id), object_id, pg_sys::get_object_attnum_namespace(class_id) as i32)
        } else {
            return Err(describe(class_id, object_id, sub_id));
        };
        let Some(nsp) = nsp else { return Ok(()) };
        if nsp == pg_sys::PG_TOAST_NAMESPACE.into() || pg_sys::isAnyTempNamespace(nsp) {
            return Ok(());
        }
        let name = namespace_name(nsp);
        if search_path::world_of_namespace(&name) == Some(world.num) {
            return Ok(());
        }
        let what = describe(class_id, object_id, sub_id);
        // (an object being made isn't readable yet: where it was going is)
        Err(if what == UNKNOWN_OBJECT { format!("an object in schema {name}") } else { what })
    }
}

const UNKNOWN_OBJECT: &str = "an object of the database";

/// The catalogs Postgres's getObjectDescription describes (catalog/objectaddress.c, getObjectClass).
const DESCRIBED: [u32; 38] = [
    1259, 1255, 1247, 2605, 3456, 2606, 2607, 2604, 2612, 2613, 2617, 2616, 2753, 2601, 2602, 2603, 2618, 2620,
    2615, 3381, 3601, 3600, 3764, 3602, 1260, 3576, 1262, 1213, 2328, 1417, 1418, 826, 3079, 3466, 3256, 6104, 6106, 6100,
];

/// The catalogs' OIDs pgrx doesn't bind (catalog/pg_*.h: fixed since they were made).
mod catalog {
    pub const ATTRDEF: u32 = 2604;
    pub const REWRITE: u32 = 2618;
    pub const POLICY: u32 = 3256;
    pub const AMOP: u32 = 2602;
    pub const AMPROC: u32 = 2603;
    pub const CONSTRAINT: u32 = 2606;
    pub const CONVERSION: u32 = 2607;
    pub const TS_PARSER: u32 = 3601;
    pub const TS_DICT: u32 = 3600;
    pub const TS_TEMPLATE: u32 = 3764;
    pub const TS_CONFIG: u32 = 3602;
    pub const INHERITS: u32 = 2611;
    pub const CAST: u32 = 2605;
    pub const INDEX: u32 = 2610;
}

/// Catalogs whose rows belong to a row of another catalog: (the attribute naming it, that catalog).
/// (pg_attrdef.adrelid, pg_amop.amopfamily, pg_amproc.amprocfamily are the second column; pg_rewrite's
/// ev_class, pg_policy's polrelid the third; pg_trigger's tgrelid is bound.)
/// Also each catalog's index on its oid (the first column of them all).
fn owner_attribute(class: u32) -> Option<(i32, u32, pg_sys::Oid)> {
    let rel = pg_sys::RelationRelationId;
    Some(match class {
        catalog::ATTRDEF => (2, 2657, rel),
        c if c == pg_sys::TriggerRelationId.to_u32() => (pg_sys::Anum_pg_trigger_tgrelid as i32, 2702, rel),
        catalog::REWRITE => (3, 2692, rel),
        catalog::POLICY => (3, 3257, rel),
        catalog::AMOP => (2, 2756, pg_sys::OperatorFamilyRelationId),
        catalog::AMPROC => (2, 2757, pg_sys::OperatorFamilyRelationId),
        // (a cast Postgres makes for a type it makes: a range type's to its multirange; CREATE CAST itself
        // is the whole database's, refused before it runs)
        catalog::CAST => (2, 2660, pg_sys::TypeRelationId),
        _ => return None,
    })
}

/// Catalogs whose rows live in a namespace.
fn has_namespace(class: u32) -> bool {
    [
        pg_sys::RelationRelationId.to_u32(),
        pg_sys::ProcedureRelationId.to_u32(),
        pg_sys::TypeRelationId.to_u32(),
        catalog::CONSTRAINT,
        pg_sys::OperatorRelationId.to_u32(),
        pg_sys::OperatorClassRelationId.to_u32(),
        pg_sys::OperatorFamilyRelationId.to_u32(),
        pg_sys::CollationRelationId.to_u32(),
        catalog::CONVERSION,
        pg_sys::StatisticExtRelationId.to_u32(),
        catalog::TS_PARSER,
        catalog::TS_DICT,
        catalog::TS_TEMPLATE,
        catalog::TS_CONFIG,
    ]
    .contains(&class)
}

/// Attribute `attr` (an oid) of the row `object_id` of catalog `class_id` (found through `index`, on its
/// oid), read as the current command sees it (SnapshotSelf: a row this command just made, before the
/// next command counter, included).
unsafe fn read_oid(class_id: pg_sys::Oid, index: pg_sys::Oid, object_id: pg_sys::Oid, attr: i32) -> Option<pg_sys::Oid> {
    unsafe {
        let rel = pg_sys::table_open(class_id, pg_sys::AccessShareLock as i32);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            1,
            pg_sys::BTEqualStrategyNumber as u16,
            pg_sys::Oid::from(pg_sys::F_OIDEQ),
            pg_sys::Datum::from(object_id),
        );
        let scan = pg_sys::systable_beginscan(rel, index, true, &raw mut pg_sys::SnapshotSelfData, 1, &mut key);
        let tuple = pg_sys::systable_getnext(scan);
        let found = if tuple.is_null() {
            None
        } else {
            let mut isnull = false;
            let d = pg_sys::heap_getattr(tuple, attr, (*rel).rd_att, &mut isnull);
            (!isnull).then(|| pg_sys::Oid::from(d.value() as u32))
        };
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        found
    }
}

/// A name attribute of a catalog row, read as `read_oid` reads.
unsafe fn read_name(class_id: pg_sys::Oid, index: pg_sys::Oid, object_id: pg_sys::Oid, attr: i32) -> Option<String> {
    unsafe {
        let rel = pg_sys::table_open(class_id, pg_sys::AccessShareLock as i32);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut key, 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_OIDEQ), pg_sys::Datum::from(object_id));
        let scan = pg_sys::systable_beginscan(rel, index, true, &raw mut pg_sys::SnapshotSelfData, 1, &mut key);
        let tuple = pg_sys::systable_getnext(scan);
        let found = if tuple.is_null() {
            None
        } else {
            let mut isnull = false;
            let d = pg_sys::heap_getattr(tuple, attr, (*rel).rd_att, &mut isnull);
            (!isnull).then(|| CStr::from_ptr(d.cast_mut_ptr::<std::ffi::c_char>()).to_string_lossy().into_owned())
        };
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        found
    }
}

/// "table t", "schema public", ... (Postgres's own description; the object may not be readable yet).
unsafe fn describe(class_id: pg_sys::Oid, object_id: pg_sys::Oid, sub_id: i32) -> String {
    unsafe {
        // (getObjectDescription raises for a catalog it doesn't describe)
        if !DESCRIBED.contains(&class_id.to_u32()) {
            return format!("an object of catalog {}", CStr::from_ptr(pg_sys::get_rel_name(class_id)).to_string_lossy());
        }
        let address = pg_sys::ObjectAddress { classId: class_id, objectId: object_id, objectSubId: sub_id };
        let p = pg_sys::getObjectDescription(&address, true);
        if p.is_null() {
            // (a column being made isn't readable yet: its table is)
            if sub_id != 0 { format!("a column of {}", describe(class_id, object_id, 0)) } else { UNKNOWN_OBJECT.into() }
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}
