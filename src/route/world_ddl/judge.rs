//! The judge (object_access_hook): every catalog object a world's session creates, alters or drops must be
//! the world's own, temporary, or the cluster's.
use super::*;
// ---------------------------------------------------------------- the judge

/// Is the session working in a live world, as a user (not pg_worlds' own work)?
pub(super) fn judging() -> Option<overlay::World> {
    if crate::guc::in_main() || storage::internal() || crate::guc::INTERNAL_DDL.get() || unsafe { pg_sys::creating_extension } || MAINTENANCE.with(|m| m.get()) {
        return None;
    }
    overlay::resolved_routing_world().filter(|w| w.num > 0 && !w.read_only)
}

#[pg_guard]
pub(super) unsafe extern "C-unwind" fn object_access(
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
pub(super) unsafe fn owned_by_world(class_id: pg_sys::Oid, object_id: pg_sys::Oid, sub_id: i32, world: &overlay::World) -> Result<(), String> {
    unsafe {
        if pg_sys::IsSharedRelation(class_id) {
            return Ok(());
        }
        let c = class_id.to_u32();
        if c == catalog::INHERITS || c == catalog::INDEX {
            // (their events name the relation: the child, the index)
            return owned_by_world(pg_sys::RelationRelationId, object_id, 0, world);
        }
        if c == catalog::CAST {
            // a cast is the world's when one of its types is (it goes with that type); between main's
            // types it is the whole database's
            let (source, target) = (read_oid(class_id, pg_sys::Oid::from(2660u32), object_id, 2), read_oid(class_id, pg_sys::Oid::from(2660u32), object_id, 3));
            let own = |t: Option<pg_sys::Oid>| t.is_some_and(|t| owned_by_world(pg_sys::TypeRelationId, t, 0, world).is_ok());
            return if source.is_none() || own(source) || own(target) { Ok(()) } else { Err("a cast between types the world didn't make".into()) };
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

pub(super) const UNKNOWN_OBJECT: &str = "an object of the database";

/// The catalogs Postgres's getObjectDescription describes (catalog/objectaddress.c, getObjectClass).
pub(super) const DESCRIBED: [u32; 38] = [
    1259, 1255, 1247, 2605, 3456, 2606, 2607, 2604, 2612, 2613, 2617, 2616, 2753, 2601, 2602, 2603, 2618, 2620,
    2615, 3381, 3601, 3600, 3764, 3602, 1260, 3576, 1262, 1213, 2328, 1417, 1418, 826, 3079, 3466, 3256, 6104, 6106, 6100,
];

/// The catalogs' OIDs pgrx doesn't bind (catalog/pg_*.h: fixed since they were made).
pub(super) mod catalog {
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
pub(super) fn owner_attribute(class: u32) -> Option<(i32, u32, pg_sys::Oid)> {
    let rel = pg_sys::RelationRelationId;
    Some(match class {
        catalog::ATTRDEF => (2, 2657, rel),
        c if c == pg_sys::TriggerRelationId.to_u32() => (pg_sys::Anum_pg_trigger_tgrelid as i32, 2702, rel),
        catalog::REWRITE => (3, 2692, rel),
        catalog::POLICY => (3, 3257, rel),
        catalog::AMOP => (2, 2756, pg_sys::OperatorFamilyRelationId),
        catalog::AMPROC => (2, 2757, pg_sys::OperatorFamilyRelationId),
        _ => return None,
    })
}

/// Catalogs whose rows live in a namespace.
pub(super) fn has_namespace(class: u32) -> bool {
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
pub(super) unsafe fn read_oid(class_id: pg_sys::Oid, index: pg_sys::Oid, object_id: pg_sys::Oid, attr: i32) -> Option<pg_sys::Oid> {
    unsafe { read_attr(class_id, index, object_id, attr, |d| pg_sys::Oid::from(d.value() as u32)) }
}

/// A name attribute of a catalog row, read as `read_oid` reads.
pub(super) unsafe fn read_name(class_id: pg_sys::Oid, index: pg_sys::Oid, object_id: pg_sys::Oid, attr: i32) -> Option<String> {
    unsafe { read_attr(class_id, index, object_id, attr, |d| CStr::from_ptr(d.cast_mut_ptr::<std::ffi::c_char>()).to_string_lossy().into_owned()) }
}

/// Attribute `attr` of the row `object_id` of a catalog, found through its oid index, as `value` reads it
/// (None: no such row, or null).
unsafe fn read_attr<T>(class_id: pg_sys::Oid, index: pg_sys::Oid, object_id: pg_sys::Oid, attr: i32, value: impl FnOnce(pg_sys::Datum) -> T) -> Option<T> {
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
            (!isnull).then(|| value(d))
        };
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        found
    }
}

/// "table t", "schema public", ... (Postgres's own description; the object may not be readable yet).
pub(super) unsafe fn describe(class_id: pg_sys::Oid, object_id: pg_sys::Oid, sub_id: i32) -> String {
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

