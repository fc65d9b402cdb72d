//! Twins: main's tables a world changed the shape of.
//!
//! The first statement of a world that changes one of main's tracked tables (ALTER TABLE, CREATE INDEX,
//! CREATE TRIGGER, COMMENT, GRANT, a rename) makes the world a copy of that table as the world sees it
//! (main's rows as of the fork, with the world's own changes), in the world's namespace of the table's
//! schema and under the table's name: its twin. The statement then changes the twin, with everything
//! Postgres does for it (USING, defaults, constraints checked against the world's rows, rollback).
//!
//! - The world's names find the twin first (storage/search_path.rs); a query that reaches main's table
//!   another way (a qualified name, one of main's views) reads the twin instead where its columns are the
//!   same, and is refused where the world changed them (route/rewrite).
//! - The columns keep main's numbers (a dropped column of main's stays a dropped column of the twin), so
//!   main's views and qualified names read the same columns in both.
//! - Its columns that take main's sequences (serial, identity) keep taking them: a world's new rows and
//!   main's never get the same number.
//! - Statement triggers of its own (internal: `\d` doesn't show them) record the keys of the rows each
//!   statement writes (worlds.world_twin_keys), with the world's rows of the table from before the copy.
//! - The merge (merge/twins.rs) runs the world's statements again on main's table and brings those rows.
//!
//! The copy is O(rows of the table), once per table and world: the price of exact DDL semantics on the
//! world's rows without a second catalog. Tables with row-level security, without a primary key, or in
//! an inheritance tree are refused (0A000).
use super::as_internal;
use crate::api::raise;
use crate::sql_text::{QuotedName, SqlLiteral};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use crate::backend_local::BackendLocal;

/// (world, main's table -> its twin), for the last world asked about; dropped at every relcache
/// invalidation (a twin made or dropped invalidates its main table).
static TWINS: BackendLocal<RefCell<Option<(i32, Rc<HashMap<pg_sys::Oid, pg_sys::Oid>>)>>> = BackendLocal::new(RefCell::new(None));

pub(super) fn on_relcache_invalidation(_relid: pg_sys::Oid) {
    TWINS.with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            *t = None;
        }
    });
}

/// Main's tables `world` has twins of: main's table -> the twin.
pub fn twins_of(world: i32) -> Rc<HashMap<pg_sys::Oid, pg_sys::Oid>> {
    if let Some(m) = TWINS.with(|t| t.borrow().as_ref().filter(|(w, _)| *w == world).map(|(_, m)| m.clone())) {
        return m;
    }
    let map: HashMap<pg_sys::Oid, pg_sys::Oid> = if world <= 0 || !super::extension_installed() {
        HashMap::new()
    } else if super::catalog_scan::serializable() {
        // (no predicate lock on the catalog: catalog_scan.rs)
        let relid = super::catalog_scan::catalog_table(c"world_twin");
        let mut map = HashMap::new();
        if relid != pg_sys::Oid::INVALID {
            let attno = unsafe { pg_sys::get_attnum(relid, c"world".as_ptr()) };
            let mut keys = [super::catalog_scan::key_eq(attno, pg_sys::F_INT4EQ, pg_sys::Datum::from(world))];
            unsafe {
                super::catalog_scan::visible_rows(relid, pg_sys::Oid::INVALID, &mut keys, pg_sys::GetTransactionSnapshot(), |r| {
                    if let (Some(m), Some(t)) = (r.oid("relid"), r.oid("twin")) {
                        map.insert(m, t);
                    }
                    true
                })
            };
        }
        map
    } else {
        as_internal(|| {
            crate::spi_calls::rows(
                "SELECT relid, twin FROM worlds.world_twin WHERE world = $1 AND to_regclass('worlds.world_twin') IS NOT NULL",
                None,
                &[world.into()],
                |t| t.filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok()??, r.get::<pg_sys::Oid>(2).ok()??))).collect(),
            )
            .unwrap_or_default()
        })
    };
    let map = Rc::new(map);
    TWINS.with(|t| *t.borrow_mut() = Some((world, map.clone())));
    map
}

/// 42P01 for main's table the world dropped, as Postgres says it of a table that isn't there.
pub fn dropped_in_world(main: pg_sys::Oid) -> ! {
    let name = unsafe {
        let n = pg_sys::get_rel_name(main);
        if n.is_null() { String::new() } else { std::ffi::CStr::from_ptr(n).to_string_lossy().into_owned() }
    };
    raise("42P01", format!("relation \"{name}\" does not exist"))
}

/// Is `relid` a twin (of any world)? Its world, main's table's number and main's table.
pub fn twin_info(relid: pg_sys::Oid) -> Option<(i32, i32, pg_sys::Oid)> {
    as_internal(|| {
        crate::spi_calls::rows(
            "SELECT world, tabno, relid FROM worlds.world_twin WHERE twin = $1",
            None,
            &[relid.into()],
            |t| t.filter_map(|r| Some((r.get::<i32>(1).ok()??, r.get::<i32>(2).ok()??, r.get::<pg_sys::Oid>(3).ok()??))).next(),
        )
        .ok()
        .flatten()
    })
}

fn fail(e: impl std::fmt::Display) -> ! {
    raise("XX000", format!("pg_worlds: {e}"))
}

/// The first column of a query's rows, as text (statements pg_worlds' own SQL wrote, with quote_ident /
/// %I for names and %L for values).
fn texts(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> Vec<String> {
    crate::spi_calls::rows(sql, None, args, |t| t.filter_map(|r| r.get::<String>(1).ok().flatten()).collect()).unwrap_or_else(|e| fail(e))
}

/// The twin of main's tracked table `main` in `world`, made now (the world's rows of it copied) if it
/// isn't yet. `what` names the statement, for a refusal.
pub fn ensure(world: &super::overlay::World, main: pg_sys::Oid, what: &str) -> pg_sys::Oid {
    if let Some(t) = twins_of(world.num).get(&main) {
        if *t == pg_sys::Oid::INVALID {
            dropped_in_world(main);
        }
        return *t;
    }
    let Some(&tabno) = super::tracked_tables().get(&main) else {
        raise("0A000", format!("{what} inside a world is not supported for a table pg_worlds doesn't track; switch to main to run it"))
    };
    // main's table keeps its definition while it is copied (main's DDL waits for this transaction)
    unsafe { pg_sys::LockRelationOid(main, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
    // one copy of a table made at a time (two sessions of one world changing it at once: the second finds
    // the first's, once it committed)
    let made = as_internal(|| {
        crate::spi_calls::run_with_args("SELECT pg_advisory_xact_lock(2092151, $1)", &[tabno.into()]).unwrap_or_else(|e| fail(e));
        crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT twin FROM worlds.world_twin WHERE world = $1 AND tabno = $2", &[world.num.into(), tabno.into()])
            .ok()
            .flatten()
    });
    if let Some(t) = made {
        on_relcache_invalidation(main);
        if t == pg_sys::Oid::INVALID {
            dropped_in_world(main);
        }
        return t;
    }
    let layout = super::relation_layout(tabno);
    let (schema, name, rls, inherits, kind): (String, String, bool, bool, String) = as_internal(|| {
        crate::spi_calls::rows(
            "SELECT n.nspname::text, c.relname::text, c.relrowsecurity,
                    c.relhassubclass OR c.relispartition OR EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid),
                    c.relkind::text
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            None,
            &[main.into()],
            |t| {
                t.map(|r| {
                    (
                        r.get::<String>(1).ok().flatten().unwrap_or_default(),
                        r.get::<String>(2).ok().flatten().unwrap_or_default(),
                        r.get::<bool>(3).ok().flatten().unwrap_or(false),
                        r.get::<bool>(4).ok().flatten().unwrap_or(false),
                        r.get::<String>(5).ok().flatten().unwrap_or_default(),
                    )
                })
                .next()
                .unwrap_or_default()
            },
        )
        .unwrap_or_else(|e| fail(e))
    });
    let refuse = |why: &str| -> ! {
        raise(
            "0A000",
            format!("{what} on table {} inside a world is not supported yet: {why} (the session is in world \"{}\"); switch to main to change it", QuotedName::qualified(&schema, &name), world.name),
        )
    };
    if kind != "r" || inherits {
        refuse("it is partitioned or in an inheritance tree");
    }
    if rls {
        refuse("it has row-level security");
    }
    if layout.key_kind == b'r' || layout.key_columns.is_empty() {
        refuse("it has no primary key");
    }
    if layout.delta == pg_sys::Oid::INVALID {
        refuse("it has no storage for worlds' rows yet");
    }
    let generated = as_internal(|| {
        crate::spi_calls::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1 AND attgenerated <> '' AND NOT attisdropped)",
            &[main.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    });
    if generated {
        refuse("it has generated columns");
    }
    let nsp = super::world_schemas::ensure(world.num, &schema, false);
    let main_name = QuotedName::qualified(&schema, &name);
    let twin_name = QuotedName::qualified(&nsp, &name);
    let twin = as_internal(|| {
        let run = |sql: &str| crate::spi_calls::run(sql).unwrap_or_else(|e| fail(e));
        // the columns, with main's numbers: a dropped column of main's is one of the twin's too
        let columns: Vec<(i16, String, bool)> = crate::spi_calls::rows(
            "SELECT a.attnum, CASE WHEN a.attisdropped THEN format('%I integer', '_w_dropped_' || a.attnum)
                                   ELSE format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod))
                                        || CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                                                THEN ' COLLATE ' || (SELECT format('%I.%I', cn.nspname, co.collname) FROM pg_collation co
                                                                      JOIN pg_namespace cn ON cn.oid = co.collnamespace WHERE co.oid = a.attcollation)
                                                ELSE '' END END,
                    a.attisdropped
             FROM pg_attribute a LEFT JOIN pg_type t ON t.oid = a.atttypid
             WHERE a.attrelid = $1 AND a.attnum > 0 ORDER BY a.attnum",
            None,
            &[main.into()],
            |t| t.map(|r| (r.get::<i16>(1).ok().flatten().unwrap_or(0), r.get::<String>(2).ok().flatten().unwrap_or_default(), r.get::<bool>(3).ok().flatten().unwrap_or(false))).collect(),
        )
        .unwrap_or_else(|e| fail(e));
        let defs: Vec<&str> = columns.iter().map(|c| c.1.as_str()).collect();
        run(&format!("CREATE TABLE {twin_name} ({})", defs.join(", ")));
        for (num, _, dropped) in &columns {
            if *dropped {
                run(&format!("ALTER TABLE {twin_name} DROP COLUMN {}", QuotedName::ident(&format!("_w_dropped_{num}"))));
            }
        }
        let twin = crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT $1::regclass::oid", &[twin_name.as_str().into()])
            .ok()
            .flatten()
            .unwrap_or_else(|| fail("the twin wasn't made"));
        // defaults (an identity column's: main's sequence, as main's serial columns already take it),
        // generated columns, NOT NULL, storage, comments
        let alters: Vec<String> = texts(
            "SELECT format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT nextval(%L::regclass)', $2, a.attname, pg_get_serial_sequence($3, a.attname))
               FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity <> ''
             UNION ALL
             SELECT format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', $2, a.attname, pg_get_expr(d.adbin, d.adrelid))
               FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
             UNION ALL
             SELECT format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', $2, a.attname)
               FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull
             UNION ALL
             SELECT format('COMMENT ON COLUMN %s.%I IS %L', $2, a.attname, d.description)
               FROM pg_attribute a JOIN pg_description d ON d.objoid = a.attrelid AND d.classoid = 'pg_class'::regclass AND d.objsubid = a.attnum
              WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
             UNION ALL
             SELECT format('COMMENT ON TABLE %s IS %L', $2, d.description)
               FROM pg_description d WHERE d.objoid = $1 AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0",
            &[main.into(), twin_name.as_str().into(), main_name.as_str().into()],
        );
        for a in alters {
            run(&a);
        }
        // constraints (keys, unique, exclusion, checks; not foreign keys: main's table keeps them, and the
        // merge's rows meet them there), then the other indexes, under main's names
        let constraints: Vec<String> = texts(
            "SELECT format('ALTER TABLE %s ADD CONSTRAINT %I %s', $2, k.conname, pg_get_constraintdef(k.oid))
               FROM pg_constraint k WHERE k.conrelid = $1 AND k.contype IN ('p', 'u', 'x', 'c')
              ORDER BY k.contype <> 'p', k.oid",
            &[main.into(), twin_name.as_str().into()],
        );
        for c in constraints {
            run(&c);
        }
        let indexes: Vec<String> = texts(
            "SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ' || $3 || ' USING ', ' ON ' || $2 || ' USING ')
               FROM pg_index i WHERE i.indrelid = $1
                AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = $1)
              ORDER BY i.indexrelid",
            &[main.into(), twin_name.as_str().into(), main_name.as_str().into()],
        );
        for i in indexes {
            run(&i);
        }
        // the rows as the world sees them
        let cols: Vec<String> = crate::spi_calls::get_one_with_args::<Vec<String>>(
            "SELECT array_agg(quote_ident(attname) ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
            &[main.into()],
        )
        .ok()
        .flatten()
        .unwrap_or_default();
        let list = cols.join(", ");
        super::overlay::with_world(Some(world.clone()), || {
            crate::spi_calls::run(&format!("INSERT INTO {twin_name} ({list}) SELECT {list} FROM {main_name}")).unwrap_or_else(|e| fail(e));
        });
        // main's owner and privileges (table and columns): a role reads and writes the twin as it may main's
        let grants: Vec<String> = texts(
            "SELECT format('ALTER TABLE %s OWNER TO %I', $2, pg_get_userbyid(c.relowner)) FROM pg_class c WHERE c.oid = $1
             UNION ALL
             SELECT format('GRANT %s ON %s TO %s%s', a.privilege_type, $2,
                           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                           CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
               FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = $1 AND a.grantee <> c.relowner
             UNION ALL
             SELECT format('GRANT %s (%I) ON %s TO %s%s', a.privilege_type, at.attname, $2,
                           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                           CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
               FROM pg_attribute at, aclexplode(at.attacl) a WHERE at.attrelid = $1 AND at.attnum > 0 AND NOT at.attisdropped",
            &[main.into(), twin_name.as_str().into()],
        );
        // the app's triggers, on the twin as on main's table
        let triggers: Vec<String> = texts(
            "SELECT replace(pg_get_triggerdef(t.oid), ' ON ' || $3 || ' ', ' ON ' || $2 || ' ')
               FROM pg_trigger t WHERE t.tgrelid = $1 AND NOT t.tgisinternal ORDER BY t.tgname",
            &[main.into(), twin_name.as_str().into(), main_name.as_str().into()],
        );
        for t in triggers {
            run(&t);
        }
        // the keys each statement of the world writes (internal triggers: \d leaves them out)
        for (event, tables) in [
            ("INSERT", "REFERENCING NEW TABLE AS _w_new"),
            ("UPDATE", "REFERENCING OLD TABLE AS _w_old NEW TABLE AS _w_new"),
            ("DELETE", "REFERENCING OLD TABLE AS _w_old"),
            ("TRUNCATE", ""),
        ] {
            run(&format!(
                "CREATE TRIGGER {} AFTER {event} ON {twin_name} {tables} FOR EACH STATEMENT EXECUTE FUNCTION worlds._twin_log({}, {})",
                QuotedName::ident(&format!("_w_twin_{}", event.to_lowercase())),
                SqlLiteral::text(&world.num.to_string()),
                SqlLiteral::text(&tabno.to_string())
            ));
        }
        // (and the world's lock, shared, before each writing statement: as every writer of the world)
        run(&format!(
            "CREATE TRIGGER _w_twin_lock BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON {twin_name} FOR EACH STATEMENT EXECUTE FUNCTION worlds._twin_write({})",
            SqlLiteral::text(&world.num.to_string())
        ));
        crate::spi_calls::run_with_args("UPDATE pg_catalog.pg_trigger SET tgisinternal = true WHERE tgrelid = $1 AND tgname LIKE '\\_w\\_twin\\_%'", &[twin.into()])
            .unwrap_or_else(|e| fail(e));
        for g in grants {
            run(&g);
        }
        // registered, with main's shape now and the world's rows of the table from before the copy
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.world_twin (world, tabno, relid, twin, shape) VALUES ($1, $2, $3, $4, worlds._table_shape($3))",
            &[world.num.into(), tabno.into(), main.into(), twin.into()],
        )
        .unwrap_or_else(|e| fail(e));
        crate::spi_calls::run_with_args(
            &format!(
                "INSERT INTO worlds.world_twin_keys (world, tabno, key) SELECT DISTINCT $1, $2, {} FROM {} d WHERE d._w_world = $1 ON CONFLICT DO NOTHING",
                crate::sql_text::key_text_expr(&layout.key_columns, "d"),
                layout.delta_name
            ),
            &[world.num.into(), tabno.into()],
        )
        .unwrap_or_else(|e| fail(e));
        twin
    });
    unsafe {
        pg_sys::CommandCounterIncrement();
        // plans that read main's table (this session's, others' of the world) are made again: the world's
        // read the twin now
        pg_sys::CacheInvalidateRelcacheByRelid(main);
    }
    on_relcache_invalidation(main);
    twin
}

/// Main's tracked table `main` dropped in `world`: its twin (if the world had one) goes, and the registry
/// keeps the table as dropped (twin 0): the world's names and queries no longer find it (42P01), and the
/// merge drops main's table. Refused like Postgres would refuse it: 2BP01 when main's views or other
/// tables' foreign keys depend on it (CASCADE, which would drop main's objects from a world: 0A000).
pub fn mark_dropped(world: &super::overlay::World, main: pg_sys::Oid, cascade: bool) {
    let Some(&tabno) = super::tracked_tables().get(&main) else {
        raise("0A000", "DROP TABLE inside a world is not supported for a table pg_worlds doesn't track; switch to main to run it")
    };
    unsafe { pg_sys::LockRelationOid(main, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
    // (main's tables the world dropped before: their keys no longer stand on this one there)
    let gone: Vec<pg_sys::Oid> = twins_of(world.num).iter().filter(|(_, t)| **t == pg_sys::Oid::INVALID).map(|(m, _)| *m).collect();
    let (name, dependents) = as_internal(|| {
        let name = crate::spi_calls::get_one_with_args::<String>(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[main.into()],
        )
        .ok()
        .flatten()
        .unwrap_or_default();
        // main's objects that stand on the table (not pg_worlds' own storage and views)
        let dependents = crate::spi_calls::get_one_with_args::<String>(
            "SELECT string_agg(DISTINCT pg_describe_object(d.classid, d.objid, 0), ', ') FROM pg_depend d
              WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = $1 AND d.deptype = 'n'
                AND (d.classid = 'pg_rewrite'::regclass AND EXISTS (
                        SELECT 1 FROM pg_rewrite r JOIN pg_class v ON v.oid = r.ev_class JOIN pg_namespace n ON n.oid = v.relnamespace
                         WHERE r.oid = d.objid AND r.ev_class <> $1 AND n.nspname NOT IN ('worlds', 'worlds_data'))
                     OR d.classid = 'pg_constraint'::regclass AND EXISTS (
                        SELECT 1 FROM pg_constraint k WHERE k.oid = d.objid AND k.conrelid <> $1 AND k.conrelid <> ALL ($2)))",
            &[main.into(), gone.clone().into()],
        )
        .ok()
        .flatten();
        (name, dependents)
    });
    if let Some(d) = dependents {
        if cascade {
            raise("0A000", format!("DROP TABLE {name} CASCADE inside a world is not supported yet: it would drop main's {d} (the session is in world \"{}\")", world.name));
        }
        crate::api::raise_with(
            "2BP01",
            format!("cannot drop table {name} because other objects depend on it"),
            Some(format!("{d} depends on table {name}")),
            Some("Use DROP ... CASCADE to drop the dependent objects too.".into()),
        );
    }
    let had = twins_of(world.num).get(&main).copied();
    // (the session's search_path and role, for the merge to run the drop as: read before internal work)
    let path = super::search_path::user_path();
    let role = unsafe { pg_sys::GetUserId() };
    as_internal(|| {
        if let Some(t) = had.filter(|t| *t != pg_sys::Oid::INVALID) {
            let twin = crate::spi_calls::get_one_with_args::<String>("SELECT $1::regclass::text", &[t.into()]).ok().flatten().unwrap_or_default();
            crate::spi_calls::run(&format!("DROP TABLE {twin}")).unwrap_or_else(|e| fail(e));
        }
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.world_twin (world, tabno, relid, twin, shape) VALUES ($1, $2, $3, 0, worlds._table_shape($3))
             ON CONFLICT (world, tabno) DO UPDATE SET twin = 0",
            &[world.num.into(), tabno.into(), main.into()],
        )
        .unwrap_or_else(|e| fail(e));
        // (the statement the merge runs: the table by main's name, whatever the world's statement named)
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.world_twin_ddl (world, tabno, role, path, command, constraint_only) VALUES ($1, $2, $3, $4, 'DROP TABLE ' || $5, false)",
            &[world.num.into(), tabno.into(), role.into(), path.as_str().into(), name.as_str().into()],
        )
        .unwrap_or_else(|e| fail(e));
    });
    unsafe {
        pg_sys::CommandCounterIncrement();
        pg_sys::CacheInvalidateRelcacheByRelid(main);
    }
    on_relcache_invalidation(main);
}

/// Records a statement the world ran on a twin, for the merge to run again on main's table.
pub fn record_statement(world: i32, twin: pg_sys::Oid, command: &str, constraint_only: bool) {
    let Some((w, tabno, _)) = twin_info(twin) else { return };
    if w != world {
        return;
    }
    let path = super::search_path::user_path();
    let role = unsafe { pg_sys::GetUserId() };
    as_internal(|| {
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.world_twin_ddl (world, tabno, role, path, command, constraint_only) VALUES ($1, $2, $3, $4, $5, $6)",
            &[world.into(), tabno.into(), role.into(), path.as_str().into(), command.into(), constraint_only.into()],
        )
        .unwrap_or_else(|e| fail(e));
    });
}
