//! Names in a world's DDL: what it creates goes to the world's namespace of its schema; names of what it
//! made, qualified with the schema they stand for, reach it; a CREATE doesn't quietly hide main's object.
use super::*;
/// made that schema (main has none of that name). For a schema main has too, see `route_relation`.
pub(super) fn world_schema_named(name: &str, world: &overlay::World) -> Option<String> {
    if search_path::world_of_namespace(name).is_some() || namespace_oid(name) != pg_sys::Oid::INVALID {
        return None;
    }
    world_schemas::of_world(world.num).into_iter().find(|(s, _)| s == name).map(|(_, n)| n)
}

/// A qualified relation a statement names: its schema becomes the world's namespace when the relation is
/// the world's (there, and not in main's schema of that name).
pub(super) unsafe fn route_relation(rv: *mut pg_sys::RangeVar, world: &overlay::World) {
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
pub(super) unsafe fn route_relation_names(names: *mut pg_sys::List, world: &overlay::World) {
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
pub(super) unsafe fn route_existing_names(stmt: *mut pg_sys::Node, world: &overlay::World) {
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
pub(super) enum Target {
    Rel(*mut pg_sys::RangeVar),
    Names(*mut pg_sys::List),
}

pub(super) unsafe fn creation_targets(stmt: *mut pg_sys::Node) -> Vec<Target> {
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
pub(super) unsafe fn route_target(target: Target, world: &overlay::World) {
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
pub(super) fn world_namespace_for(schema: &str, world: &overlay::World) -> Option<String> {
    if schema == "pg_temp" || schema.starts_with("pg_") || search_path::world_of_namespace(schema).is_some() {
        return None;
    }
    if schema == "worlds" || schema == "worlds_data" {
        raise("42501", format!("schema \"{schema}\" is pg_worlds' own"));
    }
    Some(world_schemas::ensure(world.num, schema, false))
}

/// Makes the world's namespace of the first schema on the path, if the path doesn't lead with one.
pub(super) unsafe fn ensure_first_schema(world: &overlay::World) {
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
pub(super) unsafe fn refuse_shadowing(stmt: *mut pg_sys::Node, world: &overlay::World, source: &str) {
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
                            // the world's version, its own (made where the statement was routed), merged
                            // by running the statement on main
                            record_replacement(world, "function", &main_schema, &name, source);
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
        let main_rel = pg_sys::get_relname_relid(relname_c.as_ptr(), main_nsp);
        if main_rel == pg_sys::Oid::INVALID {
            return;
        }
        // main's table the world dropped: the name is free in the world
        if crate::storage::world_twins::twins_of(world.num).get(&main_rel) == Some(&pg_sys::Oid::INVALID) {
            return;
        }
        // does the world already have its own (made here earlier)? then Postgres answers on that one
        if let Some(own) = own_namespace(&main_schema, world) {
            if pg_sys::get_relname_relid(relname_c.as_ptr(), own) != pg_sys::Oid::INVALID {
                return;
            }
        }
        if replace && pg_sys::get_rel_relkind(pg_sys::get_relname_relid(relname_c.as_ptr(), main_nsp)) == pg_sys::RELKIND_VIEW as std::ffi::c_char {
            // main's view replaced: the world's version is its own view (made where the statement was
            // routed, found first by its names), merged by running the statement on main
            record_replacement(world, "view", &main_schema, &relname, source);
            return;
        }
        // main's schema: Postgres finds main's relation there and answers as in main
        (*rv).schemaname = pstr(&main_schema);
    }
}

/// Main's view or function replaced by the world (CREATE OR REPLACE): recorded with main's definition
/// now, the role, its search_path and the statement, for the merge (merge/twins.rs). A second replacement
/// keeps main's definition from the first.
fn record_replacement(world: &overlay::World, kind: &str, schema: &str, name: &str, source: &str) {
    let path = search_path::user_path();
    let role = unsafe { pg_sys::GetUserId() };
    storage::as_internal(|| {
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.world_replaced (world, kind, schema, name, main_def, role, path, command)
             VALUES ($1, $2, $3, $4, coalesce(worlds._main_definition($2, $3, $4), ''), $5, $6, $7)
             ON CONFLICT (world, kind, schema, name) DO UPDATE SET role = EXCLUDED.role, path = EXCLUDED.path, command = EXCLUDED.command",
            &[world.num.into(), kind.into(), schema.into(), name.into(), role.into(), path.as_str().into(), source.into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
    });
}

/// The schema a relation being created would land in in main: the one named, or the first on the path.
pub(super) unsafe fn main_schema_of_rel(rv: *mut pg_sys::RangeVar, world: &overlay::World) -> Option<String> {
    unsafe {
        if !(*rv).schemaname.is_null() {
            let s = CStr::from_ptr((*rv).schemaname).to_string_lossy().into_owned();
            return main_schema_of(&s, world);
        }
        first_main_schema()
    }
}

pub(super) unsafe fn main_schema_of_names(list: *mut pg_sys::List, world: &overlay::World) -> Option<String> {
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

pub(super) unsafe fn last_name(list: *mut pg_sys::List) -> String {
    unsafe {
        let cell = crate::fast_ffi::list_nth(list, (*list).length - 1) as *mut pg_sys::String;
        CStr::from_ptr((*cell).sval).to_string_lossy().into_owned()
    }
}

/// The main schema a (possibly world) namespace name stands for.
pub(super) fn main_schema_of(nsp: &str, world: &overlay::World) -> Option<String> {
    if search_path::world_of_namespace(nsp) == Some(world.num) {
        return world_schemas::of_world(world.num).into_iter().find(|(_, n)| n == nsp).map(|(s, _)| s);
    }
    Some(nsp.to_string())
}

/// The first schema of the path that is main's (not temporary, not a world's namespace).
pub(super) unsafe fn first_main_schema() -> Option<String> {
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

pub(super) fn own_namespace(schema: &str, world: &overlay::World) -> Option<pg_sys::Oid> {
    let nsp = search_path::world_namespace(schema, world.num);
    let oid = namespace_oid(&nsp);
    (oid != pg_sys::Oid::INVALID).then_some(oid)
}

pub(super) fn function_exists(schema: &str, name: &str) -> bool {
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


pub(super) static mut PREV_EMIT_LOG: pg_sys::emit_log_hook_type = None;

/// 42P01 for a name qualified with a schema, in a world that made objects of its own: Postgres looked the
/// name up in main's schema (a query's names resolve before any hook can send them to the world's
/// namespace), so the error says where the world's objects are found. Read from the error alone: no
/// catalog access while an error is being reported.
#[pg_guard]
pub(super) unsafe extern "C-unwind" fn hint_qualified_name(edata: *mut pg_sys::ErrorData) {
    unsafe {
        if let Some(prev) = PREV_EMIT_LOG {
            prev(edata);
        }
        if edata.is_null() || (*edata).elevel < 17 /* INFO */ || (*edata).message.is_null() {
            return;
        }
        let Some(num) = search_path::own_world() else { return };
        // a message of the world's session names its objects as the world's sessions name them: by the
        // schema they stand for (`permission denied for schema public`, `drop cascades to table
        // public.notes`), not by the namespace that holds them
        for field in [&raw mut (*edata).message, &raw mut (*edata).detail] {
            if (*field).is_null() {
                continue;
            }
            let text = CStr::from_ptr(*field).to_string_lossy();
            if let Some(plain) = without_world_namespaces(&text) {
                let c = CString::new(plain).unwrap_or_default();
                *field = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, c.as_ptr());
            }
        }
        const UNDEFINED_TABLE: i32 = sqlstate(*b"42P01");
        if (*edata).elevel < 21 /* ERROR */ || (*edata).sqlerrcode != UNDEFINED_TABLE || !(*edata).hint.is_null() {
            return;
        }
        let message = CStr::from_ptr((*edata).message).to_string_lossy();
        let Some(name) = message.strip_prefix("relation \"").and_then(|m| m.strip_suffix("\" does not exist")) else { return };
        let Some((schema, _)) = name.split_once('.') else { return };
        let hint = format!(
            "Inside a world, a query finds the world's own tables by their unqualified name (or as {}.{}); a name qualified with schema {schema} finds main's.",
            crate::sql_text::QuotedName::ident(&search_path::world_namespace(schema, num)),
            name.split_once('.').map(|x| x.1).unwrap_or_default()
        );
        let c = CString::new(hint).unwrap_or_default();
        (*edata).hint = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, c.as_ptr());
    }
}

/// `text` with every world namespace's name (`pg_w12_public`, quoted or not) written as the schema it
/// stands for; None when it names none.
pub(crate) fn without_world_namespaces(text: &str) -> Option<String> {
    if !text.contains("pg_w") {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("pg_w") {
        let after = &rest[at + 4..];
        let digits = after.bytes().take_while(|b| b.is_ascii_digit()).count();
        // (the start of a name: not inside another word)
        let starts_name = rest[..at].chars().last().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if starts_name && digits > 0 && !after.starts_with('0') && after[digits..].starts_with('_') {
            out.push_str(&rest[..at]);
            rest = &after[digits + 1..];
            changed = true;
        } else {
            out.push_str(&rest[..at + 4]);
            rest = after;
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// A SQLSTATE as Postgres packs it (MAKE_SQLSTATE).
const fn sqlstate(c: [u8; 5]) -> i32 {
    const fn six(ch: u8) -> i32 {
        (ch.wrapping_sub(b'0') & 0x3F) as i32
    }
    six(c[0]) + (six(c[1]) << 6) + (six(c[2]) << 12) + (six(c[3]) << 18) + (six(c[4]) << 24)
}

#[cfg(test)]
mod tests {
    use super::without_world_namespaces;

    #[test]
    fn messages_name_the_schema() {
        assert_eq!(without_world_namespaces("permission denied for schema pg_w1_public").as_deref(), Some("permission denied for schema public"));
        assert_eq!(
            without_world_namespaces("drop cascades to table pg_w12_app.notes\ndrop cascades to view \"pg_w12_My App\".v").as_deref(),
            Some("drop cascades to table app.notes\ndrop cascades to view \"My App\".v")
        );
        assert_eq!(without_world_namespaces("relation \"notes\" does not exist"), None);
        assert_eq!(without_world_namespaces("xpg_w1_a and pg_w_a and pg_w01_a").as_deref(), None);
    }
}
