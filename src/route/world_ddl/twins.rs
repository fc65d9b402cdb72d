//! DDL in a world on one of main's tables: the statement is sent to the table's twin (made at the first
//! such statement: storage/world_twins.rs), and recorded for the merge to run again on main's table.
use super::*;
use crate::storage::world_twins;
use crate::backend_local::BackendLocal;

/// The twin a relation stands for in this statement: main's tracked table (or its index) becomes its
/// twin (made now if need be) and `rv` is pointed at it; a twin already named is itself.
unsafe fn relation_twin(relid: pg_sys::Oid, world: &overlay::World, what: &str) -> Option<(pg_sys::Oid, String)> {
    unsafe {
        if relid == pg_sys::Oid::INVALID {
            return None;
        }
        let twins = world_twins::twins_of(world.num);
        // (an index stands for its table)
        let table = match pg_sys::get_rel_relkind(relid) as u8 {
            b'i' | b'I' => pg_sys::IndexGetRelation(relid, true),
            _ => relid,
        };
        if table == pg_sys::Oid::INVALID {
            return None;
        }
        if twins.values().any(|t| *t == table) {
            return Some((table, namespace_name(pg_sys::get_rel_namespace(table))));
        }
        if twins.get(&table) == Some(&pg_sys::Oid::INVALID) {
            world_twins::dropped_in_world(table);
        }
        if !storage::tracked_tables().contains_key(&table) || owned_by_world(pg_sys::RelationRelationId, table, 0, world).is_ok() {
            return None;
        }
        let twin = world_twins::ensure(world, table, what);
        Some((twin, namespace_name(pg_sys::get_rel_namespace(twin))))
    }
}

unsafe fn range_var_twin(rv: *mut pg_sys::RangeVar, world: &overlay::World, what: &str) -> Option<pg_sys::Oid> {
    unsafe {
        if rv.is_null() {
            return None;
        }
        let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        let (twin, nsp) = relation_twin(relid, world, what)?;
        (*rv).schemaname = pstr(&nsp);
        Some(twin)
    }
}

/// A name list (`[schema.]name`) of a relation: pointed at the twin's namespace. Returns the new list.
unsafe fn names_twin(names: *mut pg_sys::List, world: &overlay::World, what: &str) -> (*mut pg_sys::List, Option<pg_sys::Oid>) {
    unsafe {
        if list_len(names) == 0 {
            return (names, None);
        }
        let rv = pg_sys::makeRangeVarFromNameList(names);
        let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        let Some((twin, nsp)) = relation_twin(relid, world, what) else { return (names, None) };
        let n = list_len(names);
        if n >= 2 {
            let schema = crate::fast_ffi::list_nth(names, n - 2) as *mut pg_sys::String;
            (*schema).sval = pstr(&nsp);
            (names, Some(twin))
        } else {
            (pg_sys::lcons(pg_sys::makeString(pstr(&nsp)).cast(), names), Some(twin))
        }
    }
}

/// `names` less its last element (a column, constraint or trigger of a relation), and that element.
unsafe fn split_last(names: *mut pg_sys::List) -> (*mut pg_sys::List, *mut std::ffi::c_void) {
    unsafe {
        let n = list_len(names);
        let mut head = std::ptr::null_mut();
        for i in 0..n - 1 {
            head = pg_sys::lappend(head, crate::fast_ffi::list_nth(names, i));
        }
        (head, crate::fast_ffi::list_nth(names, n - 1))
    }
}

/// A statement of the world on one of main's tables: sent to its twin. Returns the twin it changes.
pub(super) unsafe fn route_main_tables(stmt: *mut pg_sys::Node, world: &overlay::World) -> Option<pg_sys::Oid> {
    unsafe {
        use pg_sys::NodeTag::*;
        use pg_sys::ObjectType::*;
        let what = statement_name(stmt);
        match (*stmt).type_ {
            T_AlterTableStmt => range_var_twin((*(stmt as *mut pg_sys::AlterTableStmt)).relation, world, &what),
            T_IndexStmt => range_var_twin((*(stmt as *mut pg_sys::IndexStmt)).relation, world, &what),
            T_CreateTrigStmt => range_var_twin((*(stmt as *mut pg_sys::CreateTrigStmt)).relation, world, &what),
            T_RenameStmt => {
                let r = stmt as *mut pg_sys::RenameStmt;
                match (*r).renameType {
                    OBJECT_TABLE => {
                        // (a twin renamed would leave main's table under the name, seen by the world again)
                        if !(*r).relation.is_null() {
                            let relid = pg_sys::RangeVarGetRelidExtended((*r).relation, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
                            refuse_twin_of(relid, world, "ALTER TABLE ... RENAME TO");
                        }
                        None
                    }
                    OBJECT_COLUMN | OBJECT_TABCONSTRAINT | OBJECT_INDEX | OBJECT_TRIGGER => range_var_twin((*r).relation, world, &what),
                    _ => None,
                }
            }
            T_CommentStmt => {
                let c = stmt as *mut pg_sys::CommentStmt;
                match (*c).objtype {
                    OBJECT_TABLE | OBJECT_INDEX => {
                        let (names, twin) = names_twin((*c).object as *mut pg_sys::List, world, &what);
                        (*c).object = names.cast();
                        twin
                    }
                    OBJECT_COLUMN | OBJECT_TABCONSTRAINT | OBJECT_TRIGGER => {
                        let (head, last) = split_last((*c).object as *mut pg_sys::List);
                        let (head, twin) = names_twin(head, world, &what);
                        if twin.is_some() {
                            (*c).object = pg_sys::lappend(head, last).cast();
                        }
                        twin
                    }
                    _ => None,
                }
            }
            T_GrantStmt => {
                let g = stmt as *mut pg_sys::GrantStmt;
                if (*g).targtype != pg_sys::GrantTargetType::ACL_TARGET_OBJECT || (*g).objtype != OBJECT_TABLE {
                    return None;
                }
                let mut twin = None;
                for i in 0..list_len((*g).objects) {
                    twin = range_var_twin(crate::fast_ffi::list_nth((*g).objects, i) as *mut pg_sys::RangeVar, world, &what).or(twin);
                }
                twin
            }
            T_DropStmt => {
                let d = stmt as *mut pg_sys::DropStmt;
                let mut twin = None;
                let mut dropped: Vec<i32> = Vec::new();
                for i in 0..list_len((*d).objects) {
                    let cell = (*(*d).objects).elements.add(i as usize);
                    let names = (*cell).ptr_value as *mut pg_sys::List;
                    match (*d).removeType {
                        OBJECT_TABLE => {
                            let rv = pg_sys::makeRangeVarFromNameList(names);
                            let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
                            // main's table (or the world's copy of it): dropped in the world, by the merge in main
                            if let Some(main) = main_table_of(relid, world) {
                                if world_twins::twins_of(world.num).get(&main) == Some(&pg_sys::Oid::INVALID) {
                                    // dropped in the world before: not there, as Postgres says
                                    if !(*d).missing_ok {
                                        world_twins::dropped_in_world(main);
                                    }
                                    let name = CStr::from_ptr(pg_sys::get_rel_name(main)).to_string_lossy().into_owned();
                                    pgrx::notice!("table \"{name}\" does not exist, skipping");
                                } else {
                                    world_twins::mark_dropped(world, main, (*d).behavior == pg_sys::DropBehavior::DROP_CASCADE);
                                }
                                dropped.push(i);
                            }
                        }
                        OBJECT_INDEX => {
                            let (names, t) = names_twin(names, world, &what);
                            (*cell).ptr_value = names.cast();
                            twin = t.or(twin);
                        }
                        OBJECT_TRIGGER => {
                            let (head, last) = split_last(names);
                            let (head, t) = names_twin(head, world, &what);
                            if t.is_some() {
                                (*cell).ptr_value = pg_sys::lappend(head, last).cast();
                            }
                            twin = t.or(twin);
                        }
                        _ => {}
                    }
                }
                if !dropped.is_empty() {
                    // main's tables leave the statement (done above); the rest is Postgres's to drop
                    let mut kept = std::ptr::null_mut();
                    for i in 0..list_len((*d).objects) {
                        if !dropped.contains(&i) {
                            kept = pg_sys::lappend(kept, crate::fast_ffi::list_nth((*d).objects, i));
                        }
                    }
                    (*d).objects = kept;
                    if kept.is_null() {
                        CONSUMED.with(|c| c.set(true));
                    }
                }
                twin
            }
            _ => None,
        }
    }
}

/// The statement was done by pg_worlds (a DROP TABLE of main's tables only): Postgres runs nothing.
pub(super) static CONSUMED: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// Did `before` do the whole statement (nothing left for Postgres to run)? Reset by asking.
pub fn consumed() -> bool {
    CONSUMED.with(|c| c.replace(false))
}

/// Main's tracked table `relid` stands for in the world: itself, or the table its twin copies.
unsafe fn main_table_of(relid: pg_sys::Oid, world: &overlay::World) -> Option<pg_sys::Oid> {
    unsafe {
        if relid == pg_sys::Oid::INVALID {
            return None;
        }
        let twins = world_twins::twins_of(world.num);
        if let Some((m, _)) = twins.iter().find(|(_, t)| **t == relid) {
            return Some(*m);
        }
        (storage::tracked_tables().contains_key(&relid) && owned_by_world(pg_sys::RelationRelationId, relid, 0, world).is_err()).then_some(relid)
    }
}

/// A statement that would take main's table away from the world (its twin dropped or renamed: the world
/// would see main's table under the name again): not yet.
unsafe fn refuse_twin_of(relid: pg_sys::Oid, world: &overlay::World, what: &str) {
    unsafe {
        if relid == pg_sys::Oid::INVALID {
            return;
        }
        let twins = world_twins::twins_of(world.num);
        let is_main = storage::tracked_tables().contains_key(&relid) && owned_by_world(pg_sys::RelationRelationId, relid, 0, world).is_err();
        if twins.values().any(|t| *t == relid) || is_main {
            let name = CStr::from_ptr(pg_sys::get_rel_name(relid)).to_string_lossy().into_owned();
            raise(
                "0A000",
                format!("{what} of main's table {name} inside a world is not supported yet (the session is in world \"{}\"); switch to main to run it", world.name),
            );
        }
    }
}

/// Does the statement only add constraints or indexes? (A trailing run of these is run by the merge after
/// the world's rows, which may be what makes them hold.)
pub(super) unsafe fn constraint_only(stmt: *mut pg_sys::Node) -> bool {
    unsafe {
        match (*stmt).type_ {
            pg_sys::NodeTag::T_IndexStmt => true,
            pg_sys::NodeTag::T_AlterTableStmt => {
                let a = stmt as *mut pg_sys::AlterTableStmt;
                (0..list_len((*a).cmds)).all(|i| {
                    let cmd = crate::fast_ffi::list_nth((*a).cmds, i) as *mut pg_sys::AlterTableCmd;
                    {
                        use pg_sys::AlterTableType as A;
                        matches!((*cmd).subtype, A::AT_AddConstraint | A::AT_AddIndex | A::AT_AddIndexConstraint | A::AT_SetNotNull | A::AT_ValidateConstraint)
                    }
                })
            }
            _ => false,
        }
    }
}

/// The statement's own text in `source` (a string of several statements: this one's).
pub fn statement_text(source: *const std::ffi::c_char, location: i32, len: i32) -> String {
    if source.is_null() {
        return String::new();
    }
    let all = unsafe { CStr::from_ptr(source) }.to_bytes();
    let start = if location < 0 { 0 } else { (location as usize).min(all.len()) };
    let end = if len <= 0 || location < 0 { all.len() } else { (start + len as usize).min(all.len()) };
    String::from_utf8_lossy(&all[start..end]).trim().trim_end_matches(';').to_string()
}
