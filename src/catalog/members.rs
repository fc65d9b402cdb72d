//! What pg_worlds adds to the database must not show in main or change how main locks.
//!
//! - Generated storage belongs to the extension (pg_dump leaves it out; DROP EXTENSION takes it), recorded
//!   as CREATE EXTENSION's script records its objects: a pg_depend row of type 'e', with the object's ACL
//!   as its initial privileges. Not through ALTER EXTENSION ADD / DROP, which lock the extension itself
//!   (15.20: ShareUpdateExclusiveLock, self-conflicting), so that every session's DDL on tracked tables
//!   queued on one lock and deadlocked with the locks the DDL itself held.
//! - Capture triggers are internal triggers (as foreign keys' are): psql's \d, pg_dump and
//!   information_schema leave them out, and ALTER TABLE ... DISABLE TRIGGER USER doesn't reach them.
use crate::spi_calls::Fresh;
use pgrx::prelude::*;

fn extension_oid() -> pg_sys::Oid {
    unsafe { pg_sys::get_extension_oid(c"pg_worlds".as_ptr(), false) }
}

fn address(class: pg_sys::Oid, object: pg_sys::Oid) -> pg_sys::ObjectAddress {
    pg_sys::ObjectAddress { classId: class, objectId: object, objectSubId: 0 }
}

/// Makes the relation the extension's (no-op when it is already).
#[pg_extern]
fn _add_member(rel: pg_sys::Oid) {
    unsafe {
        if pg_sys::get_rel_relkind(rel) == 0 {
            crate::api::raise("42P01", format!("relation with OID {} does not exist", rel.to_u32()));
        }
        let ext = extension_oid();
        let object = address(pg_sys::RelationRelationId, rel);
        if pg_sys::getExtensionOfObject(pg_sys::RelationRelationId, rel) == ext {
            return;
        }
        let extension = address(pg_sys::ExtensionRelationId, ext);
        pg_sys::recordDependencyOn(&object, &extension, pg_sys::DependencyType::DEPENDENCY_EXTENSION);
        pg_sys::recordExtObjInitPriv(rel, pg_sys::RelationRelationId);
        pg_sys::CommandCounterIncrement();
    }
}

/// Releases the relation from the extension, so pg_worlds may drop it.
#[pg_extern]
fn _drop_member(rel: pg_sys::Oid) {
    unsafe {
        let ext = extension_oid();
        let n = pg_sys::deleteDependencyRecordsForSpecific(
            pg_sys::RelationRelationId,
            rel,
            pg_sys::DependencyType::DEPENDENCY_EXTENSION as std::ffi::c_char,
            pg_sys::ExtensionRelationId,
            ext,
        );
        if n > 0 {
            pg_sys::removeExtObjInitPriv(rel, pg_sys::RelationRelationId);
        }
        pg_sys::CommandCounterIncrement();
    }
}

/// History capture's two triggers on a tracked table, internal, firing always: AFTER INSERT OR UPDATE OR DELETE FOR EACH
/// ROW (worlds._capture(tabno)) and BEFORE TRUNCATE FOR EACH STATEMENT (worlds._capture_truncate(tabno)).
#[pg_extern]
fn _create_capture_triggers(rel: pg_sys::Oid, tabno: i32, capture: pg_sys::Oid, capture_truncate: pg_sys::Oid) {
    unsafe {
        // only on a table, with pg_worlds' own capture functions (internal triggers skip Postgres's checks)
        if pg_sys::get_rel_relkind(rel) != pg_sys::RELKIND_RELATION as std::ffi::c_char {
            crate::api::raise("42809", format!("relation with OID {} is not a table", rel.to_u32()));
        }
        let ours = |f: pg_sys::Oid, name: &str| {
            crate::spi_calls::get_one_with_args::<bool>(
                "SELECT $1 = to_regprocedure($2)::oid",
                &[f.into(), name.into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false)
        };
        if !ours(capture, "worlds._capture()") || !ours(capture_truncate, "worlds._capture_truncate()") {
            crate::api::raise("42883", "capture triggers run pg_worlds' own capture functions only");
        }
        for (name, func, row, timing, events) in [
            (
                c"worlds_capture",
                capture,
                true,
                pg_sys::TRIGGER_TYPE_AFTER as i16,
                (pg_sys::TRIGGER_TYPE_INSERT | pg_sys::TRIGGER_TYPE_UPDATE | pg_sys::TRIGGER_TYPE_DELETE) as i16,
            ),
            (c"worlds_capture_truncate", capture_truncate, false, pg_sys::TRIGGER_TYPE_BEFORE as i16, pg_sys::TRIGGER_TYPE_TRUNCATE as i16),
        ] {
            let mut stmt = PgBox::<pg_sys::CreateTrigStmt>::alloc_node(pg_sys::NodeTag::T_CreateTrigStmt);
            stmt.trigname = pg_sys::pstrdup(name.as_ptr());
            stmt.row = row;
            stmt.timing = timing;
            stmt.events = events;
            let arg = std::ffi::CString::new(tabno.to_string()).unwrap();
            stmt.args = pg_sys::lappend(std::ptr::null_mut(), pg_sys::makeString(pg_sys::pstrdup(arg.as_ptr())).cast());
            // ALWAYS: main's history is kept also for changes made under session_replication_role =
            // replica, a logical replication subscriber's apply worker's among them (its changes to main
            // would otherwise move every world of the subscriber). pg_dump never lists internal triggers.
            pg_sys::CreateTriggerFiringOn(
                stmt.as_ptr(),
                std::ptr::null(),
                rel,
                pg_sys::Oid::INVALID,
                pg_sys::Oid::INVALID,
                pg_sys::Oid::INVALID,
                func,
                pg_sys::Oid::INVALID,
                std::ptr::null_mut(),
                true,
                false,
                pg_sys::TRIGGER_FIRES_ALWAYS as std::ffi::c_char,
            );
        }
        pg_sys::CommandCounterIncrement();
    }
}

/// Removes what ties a view's rules and column defaults to the user's relations (the table it reads, a
/// serial column's sequence): pg_worlds' overlay views must not hold the user's table, its columns or its
/// drop. (The view still reads them; the DDL's end rebuilds it, or forgets it with the table.)
#[pg_extern]
fn _forget_reads_of(view: pg_sys::Oid, rel: pg_sys::Oid) {
    let _ = rel;
    // (class of the depending object, its oid, the user's relation it depends on)
    let deps: Vec<(pg_sys::Oid, pg_sys::Oid, pg_sys::Oid)> = Spi::connect(|c| {
        c.fresh(
            // (the view's rules and defaults first, then their entries by pg_depend's depender index)
            "WITH objects(classid, objid) AS (
                 SELECT 'pg_catalog.pg_rewrite'::regclass::oid, oid FROM pg_catalog.pg_rewrite WHERE ev_class = $1
                 UNION ALL SELECT 'pg_catalog.pg_attrdef'::regclass::oid, oid FROM pg_catalog.pg_attrdef WHERE adrelid = $1)
             SELECT DISTINCT d.classid, d.objid, d.refobjid FROM objects o
               JOIN pg_catalog.pg_depend d ON d.classid = o.classid AND d.objid = o.objid
               JOIN pg_catalog.pg_class r ON r.oid = d.refobjid
              WHERE d.deptype = 'n' AND d.refclassid = 'pg_catalog.pg_class'::regclass
                AND r.relnamespace NOT IN ('worlds'::regnamespace, 'worlds_data'::regnamespace, 'pg_catalog'::regnamespace)",
            None,
            &[view.into()],
        )
        .map(|rows| {
            rows.filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok().flatten()?, r.get::<pg_sys::Oid>(2).ok().flatten()?, r.get::<pg_sys::Oid>(3).ok().flatten()?)))
                .collect()
        })
        .unwrap_or_default()
    });
    unsafe {
        for (class, object, referenced) in deps {
            pg_sys::deleteDependencyRecordsForSpecific(
                class,
                object,
                pg_sys::DependencyType::DEPENDENCY_NORMAL as std::ffi::c_char,
                pg_sys::RelationRelationId,
                referenced,
            );
            // (each deletion seen by the next: one object may depend on a relation through several columns)
            pg_sys::CommandCounterIncrement();
        }
    }
}

/// Was this xid (a catalog row's xmin) written by the current transaction or one of its subtransactions?
#[pg_extern(volatile, parallel_unsafe)]
fn _made_now(xid: i64) -> bool {
    u32::try_from(xid).is_ok_and(|x| unsafe { pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(x)) })
}

/// Lets go of the locks this transaction holds on storage relations it made itself: these relations, their
/// indexes, toast tables and toast indexes, each only if its pg_class row is this (sub)transaction's (made now,
/// not yet committed: no other session can see it, so none can lock or use it before the commit, and a
/// rollback removes it without a lock). Postgres would hold each creation's ACCESS EXCLUSIVE lock to the
/// end, one shared lock-table entry per relation: the database's first world making the storage of 1,000
/// tables in one transaction would run out of max_locks_per_transaction (as would any migration after it).
/// A relation made and dropped again in this transaction keeps its lock (it isn't found any more).
#[pg_extern(volatile, parallel_unsafe)]
fn _release_made_now(rels: Vec<Option<pg_sys::Oid>>) {
    let rels: Vec<pg_sys::Oid> = rels.into_iter().flatten().filter(|r| *r != pg_sys::Oid::INVALID).collect();
    if rels.is_empty() {
        return;
    }
    let all: Vec<pg_sys::Oid> = crate::spi_calls::get_one_with_args::<Vec<pg_sys::Oid>>(
        "WITH r AS (SELECT unnest($1::oid[]) AS oid),
              b AS (SELECT oid FROM r UNION ALL SELECT c.reltoastrelid FROM pg_catalog.pg_class c JOIN r ON c.oid = r.oid WHERE c.reltoastrelid <> 0)
         SELECT array_agg(x.oid) FROM (SELECT oid FROM b UNION ALL SELECT i.indexrelid FROM pg_catalog.pg_index i JOIN b ON i.indrelid = b.oid) x",
        &[rels.into()],
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
    .unwrap_or_default();
    unsafe {
        for relid in all {
            let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid));
            if tuple.is_null() {
                continue;
            }
            let xmin = (*(*tuple).t_data).t_choice.t_heap.t_xmin;
            pg_sys::ReleaseSysCache(tuple);
            // made by this very (sub)transaction: its locks are the current resource owner's (one made by
            // an enclosing transaction keeps its lock: releasing it here isn't this owner's to do)
            if xmin != pg_sys::GetCurrentTransactionIdIfAny() {
                continue;
            }
            let tag = pg_sys::LOCKTAG {
                locktag_field1: pg_sys::MyDatabaseId.to_u32(),
                locktag_field2: relid.to_u32(),
                locktag_field3: 0,
                locktag_field4: 0,
                locktag_type: pg_sys::LockTagType::LOCKTAG_RELATION as u8,
                locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
            };
            release_all_modes(&tag);
            // its row type, which making it (a view's rules, a table's columns) also locked
            let reltype = pg_sys::get_rel_type_id(relid);
            if reltype != pg_sys::Oid::INVALID {
                let tag = pg_sys::LOCKTAG {
                    locktag_field1: pg_sys::MyDatabaseId.to_u32(),
                    locktag_field2: pg_sys::TypeRelationId.to_u32(),
                    locktag_field3: reltype.to_u32(),
                    locktag_field4: 0,
                    locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
                    locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
                };
                release_all_modes(&tag);
            }
        }
    }
}

/// Lets go of every mode of this lock the backend holds.
unsafe fn release_all_modes(tag: &pg_sys::LOCKTAG) {
    unsafe {
        for mode in 1..=pg_sys::MaxLockMode as pg_sys::LOCKMODE {
            while pg_sys::LockHeldByMe(tag, mode) {
                if !pg_sys::LockRelease(tag, mode, false) {
                    break;
                }
            }
        }
    }
}

/// Removes what ties pg_worlds' storage (its tables, their indexes, defaults and constraints, its views and
/// their rules) to the user's types and collations. With those ties Postgres walks from a DROP TYPE,
/// DOMAIN, COLLATION or SCHEMA into the extension: it locks every member (deadlocks with other sessions'
/// DDL) and names the extension in its error. Without them the drop behaves as in stock Postgres, and the
/// router converts the storage columns of a type about to go to text first (`worlds._before_drop`).
///
/// `rels`: the storage relations to look at (their own entries, their rules', defaults' and constraints',
/// each found by index: O(their entries)); NULL: every entry this transaction made (a pass over pg_depend).
#[pg_extern]
fn _forget_user_types(rels: default!(Option<Vec<Option<pg_sys::Oid>>>, "NULL")) {
    // (a null element names no relation)
    let rels: Option<Vec<pg_sys::Oid>> = rels.map(|r| r.into_iter().flatten().collect());
    // only entries this transaction made: every storage change calls this before it commits, so older ones
    // were forgotten then
    let sql = match rels {
        // every entry this transaction made (one pass over pg_depend)
        None => "WITH storage AS (SELECT oid FROM pg_catalog.pg_class WHERE relnamespace = 'worlds_data'::regnamespace),
                  recent AS (SELECT d.classid, d.objid, d.refclassid, d.refobjid, d.deptype FROM pg_catalog.pg_depend d
                              WHERE d.deptype = 'n' AND d.refobjid >= 16384 AND worlds._made_now(d.xmin::text::int8))
             SELECT DISTINCT d.classid, d.objid, d.refclassid, d.refobjid FROM recent d
              WHERE d.deptype = 'n' AND d.refobjid >= 16384
                AND d.refclassid IN ('pg_catalog.pg_type'::regclass, 'pg_catalog.pg_collation'::regclass)
                AND ((d.classid = 'pg_catalog.pg_class'::regclass AND d.objid IN (SELECT oid FROM storage))
                  OR (d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid IN (SELECT oid FROM pg_catalog.pg_rewrite WHERE ev_class IN (SELECT oid FROM storage)))
                  OR (d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid IN (SELECT oid FROM pg_catalog.pg_attrdef WHERE adrelid IN (SELECT oid FROM storage)))
                  OR (d.classid = 'pg_catalog.pg_constraint'::regclass AND d.objid IN (SELECT oid FROM pg_catalog.pg_constraint WHERE conrelid IN (SELECT oid FROM storage))))
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type ty WHERE d.refclassid = 'pg_catalog.pg_type'::regclass AND ty.oid = d.refobjid
                                   AND ty.typnamespace IN ('worlds'::regnamespace, 'worlds_data'::regnamespace))
             UNION
             -- a CHECK copy or generated expression reading a field of a row type names the type's relation
             -- (a table's): dropping that table drops the row type, for which the router prepares the storage
             SELECT DISTINCT d.classid, d.objid, d.refclassid, d.refobjid FROM recent d
              WHERE d.deptype = 'n' AND d.refobjid >= 16384 AND d.refclassid = 'pg_catalog.pg_class'::regclass
                AND d.refobjid NOT IN (SELECT oid FROM storage)
                AND ((d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid IN (SELECT oid FROM pg_catalog.pg_attrdef WHERE adrelid IN (SELECT oid FROM storage)))
                  OR (d.classid = 'pg_catalog.pg_constraint'::regclass AND d.objid IN (SELECT oid FROM pg_catalog.pg_constraint WHERE conrelid IN (SELECT oid FROM storage))))",
        // the entries of these storage relations and of their rules, defaults and constraints, by index
        Some(_) => "WITH objects(classid, objid) AS (
                        SELECT 'pg_catalog.pg_class'::regclass::oid, r FROM unnest($1::oid[]) r
                        UNION ALL SELECT 'pg_catalog.pg_rewrite'::regclass::oid, oid FROM pg_catalog.pg_rewrite WHERE ev_class = ANY ($1::oid[])
                        UNION ALL SELECT 'pg_catalog.pg_attrdef'::regclass::oid, oid FROM pg_catalog.pg_attrdef WHERE adrelid = ANY ($1::oid[])
                        UNION ALL SELECT 'pg_catalog.pg_constraint'::regclass::oid, oid FROM pg_catalog.pg_constraint WHERE conrelid = ANY ($1::oid[]))
                    SELECT DISTINCT d.classid, d.objid, d.refclassid, d.refobjid FROM objects o
                      JOIN pg_catalog.pg_depend d ON d.classid = o.classid AND d.objid = o.objid
                     WHERE d.deptype = 'n' AND d.refobjid >= 16384
                       AND ((d.refclassid IN ('pg_catalog.pg_type'::regclass, 'pg_catalog.pg_collation'::regclass)
                             AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_type ty WHERE d.refclassid = 'pg_catalog.pg_type'::regclass AND ty.oid = d.refobjid
                                               AND ty.typnamespace IN ('worlds'::regnamespace, 'worlds_data'::regnamespace)))
                         -- a CHECK copy or generated expression reading a field of a row type names the type's
                         -- relation (a table's)
                         OR (d.refclassid = 'pg_catalog.pg_class'::regclass
                             AND d.classid IN ('pg_catalog.pg_attrdef'::regclass, 'pg_catalog.pg_constraint'::regclass)
                             AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class k WHERE k.oid = d.refobjid AND k.relnamespace = 'worlds_data'::regnamespace)))",
    };
    let args: Vec<pgrx::datum::DatumWithOid> = match &rels {
        None => vec![],
        Some(r) => vec![r.clone().into()],
    };
    // (class of the depending object, its oid, class of the type or collation, its oid)
    let deps: Vec<(pg_sys::Oid, pg_sys::Oid, pg_sys::Oid, pg_sys::Oid)> = Spi::connect(|c| {
        c.fresh(
            sql,
            None,
            &args,
        )
        .map(|rows| {
            rows.filter_map(|r| {
                Some((
                    r.get::<pg_sys::Oid>(1).ok().flatten()?,
                    r.get::<pg_sys::Oid>(2).ok().flatten()?,
                    r.get::<pg_sys::Oid>(3).ok().flatten()?,
                    r.get::<pg_sys::Oid>(4).ok().flatten()?,
                ))
            })
            .collect()
        })
        .unwrap_or_default()
    });
    unsafe {
        for (class, object, refclass, referenced) in deps {
            pg_sys::deleteDependencyRecordsForSpecific(
                class,
                object,
                pg_sys::DependencyType::DEPENDENCY_NORMAL as std::ffi::c_char,
                refclass,
                referenced,
            );
            pg_sys::CommandCounterIncrement();
        }
    }
}
