//! The namespaces that hold a world's own objects (`worlds.world_schema`): made at the world's first DDL
//! in a schema, with the owner and privileges of the schema they stand for, so a role may create in a
//! world exactly where it may create in main; dropped with the world.
use super::as_internal;
use super::search_path::world_namespace;
use crate::api::raise;
use crate::sql_text::QuotedName;
use pgrx::prelude::*;

/// The namespace of `world`'s objects of `schema`, made now if it isn't yet (registered first: two
/// sessions of one world making it at once wait for each other, and the second finds the first's).
/// `new_schema`: the world's own CREATE SCHEMA makes it (as the session's role), not this.
pub fn ensure(world: i32, schema: &str, new_schema: bool) -> String {
    let nsp = world_namespace(schema, world);
    as_internal(|| {
        let existing = crate::spi_calls::get_one_with_args::<String>(
            "SELECT nsp::text FROM worlds.world_schema WHERE world = $1 AND schema = $2",
            &[world.into(), schema.into()],
        )
        .ok()
        .flatten();
        if let Some(nsp) = existing {
            return nsp;
        }
        // (two sessions of the world at once: the second waits on the first's row, then finds it)
        let inserted: Vec<String> = crate::spi_calls::rows(
            "INSERT INTO worlds.world_schema (world, schema, nsp) VALUES ($1, $2, $3)
             ON CONFLICT (world, schema) DO NOTHING RETURNING nsp::text",
            None,
            &[world.into(), schema.into(), nsp.as_str().into()],
            |t| t.filter_map(|r| r.get::<String>(1).ok().flatten()).collect(),
        )
        .unwrap_or_else(|e| raise("42939", format!("the world's namespace for schema \"{schema}\" can't be made: {e}")));
        if inserted.is_empty() {
            return crate::spi_calls::get_one_with_args::<String>(
                "SELECT nsp::text FROM worlds.world_schema WHERE world = $1 AND schema = $2",
                &[world.into(), schema.into()],
            )
            .ok()
            .flatten()
            .unwrap_or(nsp);
        }
        if new_schema {
            return nsp;
        }
        if unsafe { pg_sys::get_namespace_oid(std::ffi::CString::new(nsp.as_str()).unwrap_or_default().as_ptr(), true) } != pg_sys::Oid::INVALID {
            raise("42P06", format!("schema \"{nsp}\" already exists and is not pg_worlds'"));
        }
        let q = QuotedName::ident(&nsp);
        super::with_reserved_names(|| crate::spi_calls::run(&format!("CREATE SCHEMA {q}")))
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        // the owner and privileges of the schema it stands for
        let owner = crate::spi_calls::get_one_with_args::<String>(
            "SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = $1",
            &[schema.into()],
        )
        .ok()
        .flatten();
        if let Some(owner) = owner {
            crate::spi_calls::run(&format!("ALTER SCHEMA {q} OWNER TO {}", QuotedName::ident(&owner)))
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            let grants: Vec<(String, String, bool)> = crate::spi_calls::rows(
                "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)::text) END,
                        a.privilege_type, a.is_grantable
                 FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname = $1 AND a.grantee <> n.nspowner",
                None,
                &[schema.into()],
                |t| t.map(|r| (r.get::<String>(1).ok().flatten().unwrap_or_default(), r.get::<String>(2).ok().flatten().unwrap_or_default(), r.get::<bool>(3).ok().flatten().unwrap_or(false))).collect(),
            )
            .unwrap_or_default();
            for (grantee, privilege, grantable) in grants {
                // (grantee comes quoted by quote_ident, or is PUBLIC; privilege_type is USAGE or CREATE)
                if !matches!(privilege.as_str(), "USAGE" | "CREATE") {
                    continue;
                }
                let option = if grantable { " WITH GRANT OPTION" } else { "" };
                crate::spi_calls::run(&format!("GRANT {privilege} ON SCHEMA {q} TO {grantee}{option}"))
                    .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            }
        }
        nsp
    })
}

/// `world`'s namespaces: (the schema each stands for, its name), by schema.
pub fn of_world(world: i32) -> Vec<(String, String)> {
    as_internal(|| {
        crate::spi_calls::rows(
            "SELECT schema::text, nsp::text FROM worlds.world_schema WHERE world = $1 ORDER BY schema",
            None,
            &[world.into()],
            |t| t.map(|r| (r.get::<String>(1).ok().flatten().unwrap_or_default(), r.get::<String>(2).ok().flatten().unwrap_or_default())).collect(),
        )
        .unwrap_or_default()
    })
}

/// `worlds._drop_world_schemas(num)`: a dropped (or merged) world's namespaces go, with what is left in
/// them.
#[pg_extern]
fn _drop_world_schemas(world: i32) {
    for (_, nsp) in of_world(world) {
        as_internal(|| {
            super::quietly(|| crate::spi_calls::run(&format!("DROP SCHEMA IF EXISTS {} CASCADE", QuotedName::ident(&nsp))))
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        });
    }
    as_internal(|| {
        crate::spi_calls::run_with_args("DELETE FROM worlds.world_schema WHERE world = $1", &[world.into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        // (its copies of main's tables went with its namespaces: storage/world_twins.rs)
        for sql in [
            "DELETE FROM worlds.world_fk WHERE world = $1",
            "DELETE FROM worlds.world_twin WHERE world = $1",
            "DELETE FROM worlds.world_twin_ddl WHERE world = $1",
            "DELETE FROM worlds.world_twin_keys WHERE world = $1",
            "DELETE FROM worlds.world_replaced WHERE world = $1",
        ] {
            crate::spi_calls::run_with_args(sql, &[world.into()]).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        }
    });
}

/// `worlds._free_world_rows(num)`: a world's rows in every tracked table's delta deleted (its end). Each
/// table is locked first (ACCESS SHARE, in relid order): a DROP TABLE in main waits for this
/// transaction, or committed first and its delta went with it (skipped). Each table is looked at in a
/// subtransaction of its own, its locks kept only where the world has rows to delete: with 2,000 tracked
/// tables, deleting from every delta took five locks a table at once and overflowed the shared lock table.
#[pg_extern]
fn _free_world_rows(world: i32) {
    let tables: Vec<(pg_sys::Oid, pg_sys::Oid)> = as_internal(|| {
        crate::spi_calls::rows(
            "SELECT relid::oid, delta::oid FROM worlds.tables WHERE delta IS NOT NULL ORDER BY relid::oid",
            None,
            &[],
            |t| t.filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok().flatten()?, r.get::<pg_sys::Oid>(2).ok().flatten()?))).collect(),
        )
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
    });
    for (relid, delta) in tables {
        // (a first look through the delta's index: storage/index_probe.rs)
        if super::index_probe::world_has_rows(delta, world) == Some(false) {
            continue;
        }
        let exists = |oid: pg_sys::Oid| unsafe {
            pg_sys::SearchSysCacheExists(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(oid), 0.into(), 0.into(), 0.into())
        };
        crate::subxact::in_subtransaction_keep(
            || {
                unsafe { pg_sys::LockRelationOid(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
                if !exists(relid) || !exists(delta) {
                    return false;
                }
                let Some(name) = crate::sql_text::QuotedName::of_relation(delta) else { return false };
                // (deleted: its locks kept; none: released with the subtransaction)
                as_internal(|| {
                    crate::spi_calls::get_one_with_args::<bool>(
                        &format!("WITH d AS (DELETE FROM {name} WHERE _w_world = $1 RETURNING 1) SELECT count(*) > 0 FROM d"),
                        &[world.into()],
                    )
                    .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                    .unwrap_or(false)
                })
            },
            |deleted| *deleted,
        );
    }
}
