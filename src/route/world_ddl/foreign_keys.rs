//! Foreign keys from a world's table to one of main's: left out in the world, made by the merge.
use super::*;
use crate::backend_local::BackendLocal;
/// Foreign keys a statement in a world left out (to main's tables): (the table as the statement names
/// it, the constraint's text), recorded once the statement succeeded (`after`).
/// (the statement that left them out, its table, the constraint)
pub(super) static DEFERRED: BackendLocal<std::cell::RefCell<Vec<(usize, *mut pg_sys::RangeVar, String)>>> = BackendLocal::new(std::cell::RefCell::new(Vec::new()));

/// A foreign key from a table of the world to one of main's can't be made in the world: it would put
/// Postgres's checks on main's table (its deletes would look for the world's rows). Worlds check foreign
/// keys at their merge: the constraint is left out of the statement and recorded, and the merge adds it
/// once the world's rows are in, where Postgres checks every row (23503, nothing merged).
pub(super) unsafe fn defer_foreign_keys(stmt: *mut pg_sys::Node, world: &overlay::World) {
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
pub(super) unsafe fn without_main_keys(elements: *mut pg_sys::List, table: *mut pg_sys::RangeVar, column: Option<&str>, world: &overlay::World) -> *mut pg_sys::List {
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
pub(super) unsafe fn main_table_named(rv: *mut pg_sys::RangeVar, world: &overlay::World) -> Option<(String, pg_sys::Oid)> {
    unsafe {
        if rv.is_null() {
            return None;
        }
        let relid = pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as i32, pg_sys::RVROption::RVR_MISSING_OK, None, std::ptr::null_mut());
        if relid == pg_sys::Oid::INVALID {
            return None; // (Postgres says it doesn't exist)
        }
        // a twin of main's table (storage/world_twins.rs): the key is main's table's, made by the merge
        let twin_of = crate::storage::world_twins::twins_of(world.num).iter().find(|(_, t)| **t == relid).map(|(m, _)| *m);
        let relid = twin_of.unwrap_or(relid);
        if twin_of.is_none() && owned_by_world(pg_sys::RelationRelationId, relid, 0, world).is_ok() {
            return None;
        }
        let nsp = namespace_name(pg_sys::get_rel_namespace(relid));
        let rel = CStr::from_ptr(pg_sys::get_rel_name(relid)).to_string_lossy().into_owned();
        Some((crate::sql_text::QuotedName::qualified(&nsp, &rel).to_string(), relid))
    }
}

/// A foreign key constraint as `ALTER TABLE ... ADD` takes it.
pub(super) unsafe fn foreign_key_text(c: *mut pg_sys::Constraint, target: &str, column: Option<&str>) -> String {
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
    MAINTENANCE.with(|m| m.set(false));
}

/// The statement `before` is working on (its entries in DEFERRED are tagged with it).
pub(super) static CURRENT: BackendLocal<std::cell::Cell<usize>> = BackendLocal::new(std::cell::Cell::new(0));
