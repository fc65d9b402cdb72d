//! The schema a world changed: the objects it made in its own namespaces (route/world_ddl.rs), as DIFF
//! shows them (before the rows, `id` null) and MERGE brings them (first, before the rows, in one
//! transaction).
//!
//! A merge moves each object into the schema it stands for (`ALTER ... SET SCHEMA`, or the namespace
//! renamed for a schema the world made): O(objects), whatever their rows, and everything that refers to
//! them by OID (views, defaults, foreign keys, indexes) comes along. Its tables are then tracked, as a
//! table made in main is. An object main made under the same name since the world forked is a conflict
//! (40001, naming both sides); anything a merge can't move yet refuses it (0A000), nothing merged.
use super::*;
use crate::plan::TableLevel;
use crate::sql_text::QuotedName;

/// One object a world made.
#[derive(Clone, Debug)]
pub struct WorldObject {
    /// the schema it stands for, and the world's namespace it is in
    pub schema: String,
    pub nsp: String,
    /// schema, type, sequence, table, view, materialized view, function
    pub kind: String,
    pub name: String,
    pub change: String,
    pub columns: Option<Value>,
    pub sql: Vec<String>,
    pub objid: pg_sys::Oid,
    /// its foreign keys to main's tables (ALTER TABLE ... ADD ...), made after the rows
    pub keys: Vec<String>,
}

impl WorldObject {
    /// As DIFF names it: `notes`, `app.notes` (public's unqualified, as a person names them).
    pub fn shown_name(&self) -> String {
        if self.kind == "schema" || self.schema == "public" { self.name.clone() } else { format!("{}.{}", self.schema, self.name) }
    }
}

/// The objects `world` made, in the order a merge moves them.
pub fn objects(world: i32) -> Vec<WorldObject> {
    let keys = deferred_keys(world);
    as_internal(|| {
        crate::spi_calls::rows(
            "SELECT schema, nsp, kind, name, change, columns, sql, objid FROM worlds._world_objects($1) ORDER BY ord, schema, objid",
            None,
            &[world.into()],
            |t| {
                t.map(|r| WorldObject {
                    schema: r.get::<String>(1).ok().flatten().unwrap_or_default(),
                    nsp: r.get::<String>(2).ok().flatten().unwrap_or_default(),
                    kind: r.get::<String>(3).ok().flatten().unwrap_or_default(),
                    name: r.get::<String>(4).ok().flatten().unwrap_or_default(),
                    change: r.get::<String>(5).ok().flatten().unwrap_or_default(),
                    columns: r.get::<JsonB>(6).ok().flatten().map(|j| j.0),
                    sql: r.get::<Vec<String>>(7).ok().flatten().unwrap_or_default(),
                    objid: r.get::<pg_sys::Oid>(8).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                    keys: Vec::new(),
                })
                .collect::<Vec<WorldObject>>()
            },
        )
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
    })
    .into_iter()
    .map(|mut o| {
        // its foreign keys to main's tables, made last (after the rows they need)
        if o.kind == "table" {
            let target = QuotedName::qualified(&o.schema, &o.name);
            o.keys = keys.iter().filter(|(r, _)| *r == o.objid).map(|(_, d)| format!("ALTER TABLE {target} ADD {d};")).collect();
        }
        o
    })
    .collect()
}

/// The foreign keys from the world's tables to main's, left out in the world (route/world_ddl.rs):
/// (the table as main will name it, the constraint), for tables still there.
pub fn deferred_keys(world: i32) -> Vec<(pg_sys::Oid, String)> {
    as_internal(|| {
        crate::spi_calls::rows(
            "SELECT f.relid, f.definition FROM worlds.world_fk f JOIN pg_class c ON c.oid = f.relid WHERE f.world = $1 ORDER BY f.ctid",
            None,
            &[world.into()],
            |t| t.map(|r| (r.get::<pg_sys::Oid>(1).ok().flatten().unwrap_or(pg_sys::Oid::INVALID), r.get::<String>(2).ok().flatten().unwrap_or_default())).collect(),
        )
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
    })
}

/// The world's foreign keys to main's tables, added once its rows are in: Postgres checks every row
/// (23503: nothing merged).
pub fn add_keys(world: i32) {
    for (relid, definition) in deferred_keys(world) {
        as_internal(|| {
            let table = printed(relid, "regclass");
            crate::spi_calls::run(&format!("ALTER TABLE {table} ADD {definition}")).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        });
    }
    as_internal(|| {
        crate::spi_calls::run_with_args("DELETE FROM worlds.world_fk WHERE world = $1", &[world.into()]).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
    });
}

/// The plan's table-level changes for these objects.
/// DIFF a TO b's row for an object only a made: dropped (its rows go with it).
pub fn drop_row(o: &WorldObject, as_sql_out: bool) -> Value {
    let what = match o.kind.as_str() {
        "domain" | "type" => "TYPE",
        "schema" => "SCHEMA",
        "function" => "ROUTINE",
        "materialized view" => "MATERIALIZED VIEW",
        "view" => "VIEW",
        "sequence" => "SEQUENCE",
        _ => "TABLE",
    };
    if as_sql_out {
        let name = match o.kind.as_str() {
            "schema" => QuotedName::ident(&o.schema).to_string(),
            // (a routine by its quoted name and its argument types, in the schema it stands for)
            "function" => as_internal(|| {
                crate::spi_calls::get_one_with_args::<String>(
                    "SELECT format('%I.%I(%s)', $1::text, p.proname,
                                   replace(pg_get_function_identity_arguments(p.oid), quote_ident($3) || '.', quote_ident($1) || '.'))
                     FROM pg_proc p WHERE p.oid = $2",
                    &[o.schema.as_str().into(), o.objid.into(), o.nsp.as_str().into()],
                )
                .ok()
                .flatten()
                .unwrap_or_default()
            }),
            _ => QuotedName::qualified(&o.schema, &o.name).to_string(),
        };
        serde_json::json!({ "sql": format!("DROP {what} {name};") })
    } else {
        serde_json::json!({
            "table": o.shown_name(), "id": Value::Null, "change": o.change.replacen("create", "drop", 1),
            "before": Value::Null, "after": Value::Null, "columns": Value::Null,
        })
    }
}

pub fn keys_sql(objects: &[WorldObject]) -> Vec<Value> {
    objects.iter().flat_map(|o| o.keys.iter().map(|k| serde_json::json!({ "sql": k }))).collect()
}

pub fn table_levels(objects: &[WorldObject], twins: &[super::twins::Twin], replaced: &[super::twins::Replaced]) -> Vec<TableLevel> {
    objects
        .iter()
        .map(|o| TableLevel::Create { table: o.shown_name(), definition: o.sql.iter().chain(&o.keys).cloned().collect::<Vec<_>>().join("\n") })
        .chain(twins.iter().map(|t| {
            if t.dropped {
                TableLevel::Drop { table: t.shown.clone() }
            } else {
                TableLevel::Alter {
                    table: t.shown.clone(),
                    columns: super::twins::columns(t).as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect()).unwrap_or_default(),
                }
            }
        }))
        .chain(replaced.iter().map(|r| TableLevel::Create { table: r.shown(), definition: r.ddl.command.clone() }))
        .collect()
}

/// DIFF's rows for the schema a world made: each object (`id` null), then the rows of its tables as
/// inserts, in key order; AS SQL, the statements that make the same on the other side (its foreign keys
/// to main's tables: `keys_sql`, written after every row).
pub fn diff_rows(objects: &[WorldObject], as_sql_out: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for o in objects {
        if as_sql_out {
            out.extend(o.sql.iter().map(|s| serde_json::json!({ "sql": s })));
        } else {
            out.push(serde_json::json!({
                "table": o.shown_name(), "id": Value::Null, "change": o.change,
                "before": Value::Null, "after": Value::Null, "columns": o.columns,
            }));
        }
    }
    for o in objects.iter().filter(|o| o.kind == "table") {
        out.extend(table_rows(o, as_sql_out));
    }
    out
}

/// A DRY RUN's rows for the schema it brings first: each object, with what the merge runs for it.
pub fn dry_run_rows(objects: &[WorldObject]) -> Vec<Value> {
    objects
        .iter()
        .map(|o| {
            serde_json::json!({
                "table": o.shown_name(), "id": Value::Null, "outcome": o.change, "detail": o.sql.iter().chain(&o.keys).cloned().collect::<Vec<_>>().join("\n"),
                "base": Value::Null, "ours": Value::Null, "theirs": Value::Null, "result": Value::Null, "postgres": Value::Null,
            })
        })
        .collect()
}

/// The rows of a table the world made: every one is an insert.
fn table_rows(o: &WorldObject, as_sql_out: bool) -> Vec<Value> {
    let key: Vec<String> = as_internal(|| {
        crate::spi_calls::get_one_with_args::<Vec<String>>("SELECT worlds._primary_key($1::regclass)", &[o.objid.into()])
        .ok()
        .flatten()
        .unwrap_or_default()
    });
    let table = QuotedName::qualified(&o.nsp, &o.name);
    let key_text = key_text_expr(&key, "t");
    let order = if key.is_empty() { "1".to_string() } else { key.iter().map(|k| format!("t.{}", quote_ident(k))).collect::<Vec<_>>().join(", ") };
    // (the columns an INSERT may give: generated ones are computed on the other side)
    let target = QuotedName::qualified(&o.schema, &o.name);
    let columns: Vec<String> = as_internal(|| {
        crate::spi_calls::get_one_with_args::<Vec<String>>(
            "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
            &[o.objid.into()],
        )
        .ok()
        .flatten()
        .unwrap_or_default()
    });
    let list = crate::sql_text::column_list(&columns);
    // (the target and the column list go to format() as parameters: a column named it's or 50% stays a
    // name, whatever the session's standard_conforming_strings)
    let sql = format!(
        "SELECT {key_text}, to_jsonb(t), format('INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM jsonb_populate_record(NULL::%s, %L);', $1, $2, $2, $1, to_jsonb(t)::text)
         FROM {table} t ORDER BY {order}"
    );
    let shown = o.shown_name();
    as_internal(|| {
        crate::storage::with_fixed_output(|| {
            crate::spi_calls::rows(&sql, None, &[target.to_string().into(), list.as_str().into()], |t| {
                t.map(|r| {
                    if as_sql_out {
                        serde_json::json!({ "sql": r.get::<String>(3).ok().flatten() })
                    } else {
                        let after = r.get::<JsonB>(2).ok().flatten().map(|j| j.0);
                        let cols: Vec<Value> = after.as_ref().and_then(|a| a.as_object()).map(|m| m.keys().map(|k| Value::String(k.clone())).collect()).unwrap_or_default();
                        serde_json::json!({
                            "table": shown, "id": r.get::<String>(1).ok().flatten(), "change": "insert",
                            "before": Value::Null, "after": after, "columns": cols,
                        })
                    }
                })
                .collect::<Vec<_>>()
            })
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
        })
    })
}

/// Objects main (or the world merged into) made under the same names since: "table notes (both sides
/// made it)".
pub fn conflicts(objects: &[WorldObject], target: Option<&World>) -> Vec<String> {
    let mut out = Vec::new();
    // (main's tables the world dropped: their names are the world's to take)
    let dropped: Vec<pg_sys::Oid> = objects
        .first()
        .and_then(|o| crate::storage::search_path::world_of_namespace(&o.nsp))
        .map(|w| crate::storage::world_twins::twins_of(w).iter().filter(|(_, t)| **t == pg_sys::Oid::INVALID).map(|(m, _)| *m).collect())
        .unwrap_or_default();
    for o in objects {
        let there = match target {
            None => o.schema.clone(),
            Some(t) => crate::storage::search_path::world_namespace(&o.schema, t.num),
        };
        let taken = as_internal(|| {
            let sql = match o.kind.as_str() {
                // (a schema main made since is no longer the world's own: its objects are listed instead)
                "schema" => return false,
                "function" => {
                    "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_proc w ON w.oid = $2
                                    WHERE n.nspname = $1 AND p.proname = w.proname AND p.proargtypes = w.proargtypes)"
                }
                "type" | "domain" => {
                    "SELECT EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace JOIN pg_type w ON w.oid = $2
                                    WHERE n.nspname = $1 AND t.typname = w.typname)"
                }
                _ => {
                    "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_class w ON w.oid = $2
                                    WHERE n.nspname = $1 AND c.relname = w.relname AND c.oid <> ALL ($3))"
                }
            };
            crate::spi_calls::get_one_with_args::<bool>(sql, &[there.as_str().into(), o.objid.into(), dropped.clone().into()]).ok().flatten().unwrap_or(false)
        });
        if taken {
            out.push(format!("{} {}", o.kind, o.shown_name()));
        }
    }
    out
}

/// 40001 when both sides made an object of one name (nothing merged).
pub fn refuse_conflicts(world: &World, objects: &[WorldObject], target: Option<&World>, target_name: &str) {
    let both = conflicts(objects, target);
    if !both.is_empty() {
        raise_with(
            "40001",
            format!(
                "merging {} conflicts: both sides made {}: {} made it in its own schema change, and {target_name} made one of that name since the fork; nothing was merged",
                world.name,
                both.join(", "),
                world.name
            ),
            None,
            Some("Rename or drop one of them, then merge again.".into()),
        );
    }
}

/// Moves the world's objects into the schemas they stand for (main's, or the target world's namespaces);
/// its tables merged into main are tracked from now on. Returns how many rows its tables brought.
pub fn apply(world: &World, objects: &[WorldObject], target: Option<&World>, twins: &[super::twins::Twin], replaced: &[super::twins::Replaced]) -> usize {
    if objects.is_empty() && twins.is_empty() && replaced.is_empty() {
        return 0;
    }
    // main's tables it dropped go first (one of its own objects may take the name)
    super::twins::apply_drops(world, twins);
    as_internal(|| {
        let mut renamed: Vec<String> = Vec::new();
        let mut moved_tables: Vec<pg_sys::Oid> = Vec::new();
        for o in objects {
            if renamed.contains(&o.nsp) {
                // (moved with its namespace)
                if o.kind == "table" {
                    moved_tables.push(o.objid);
                }
                continue;
            }
            let to = match target {
                None => o.schema.clone(),
                Some(t) => crate::storage::world_schemas::ensure(t.num, &o.schema, false),
            };
            let stmt = match o.kind.as_str() {
                "schema" if target.is_none() => {
                    renamed.push(o.nsp.clone());
                    forget_namespace(world.num, &o.schema);
                    format!("ALTER SCHEMA {} RENAME TO {}", QuotedName::ident(&o.nsp), QuotedName::ident(&o.schema))
                }
                "schema" => continue,
                "function" => format!("ALTER ROUTINE {} SET SCHEMA {}", printed(o.objid, "regprocedure"), QuotedName::ident(&to)),
                "type" => format!("ALTER TYPE {} SET SCHEMA {}", printed(o.objid, "regtype"), QuotedName::ident(&to)),
                "domain" => format!("ALTER DOMAIN {} SET SCHEMA {}", printed(o.objid, "regtype"), QuotedName::ident(&to)),
                kind => {
                    let what = match kind {
                        "sequence" => "SEQUENCE",
                        "view" => "VIEW",
                        "materialized view" => "MATERIALIZED VIEW",
                        _ => "TABLE",
                    };
                    format!("ALTER {what} {} SET SCHEMA {}", QuotedName::qualified(&o.nsp, &o.name), QuotedName::ident(&to))
                }
            };
            crate::spi_calls::run(&stmt).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            if o.kind == "table" {
                moved_tables.push(o.objid);
            }
        }
        // main's tables it changed the shape of: its statements run on them, then its rows of them
        // (merge/twins.rs); their twins go
        let twin_rows = super::twins::apply(world, twins);
        // main's views and functions it replaced: its statements run on main, its versions go
        super::twins::apply_replaced(world, replaced);
        // SHOW HISTORY's `schema` event (UNDO MERGE finds by it, and the merge's transaction, that this
        // merge brought schema)
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.event (world, event, rows, xid) VALUES ($1, 'schema', $2, pg_current_xact_id())",
            &[world.num.into(), ((objects.len() + twins.len() + replaced.len()) as i64).into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        // what is left in its namespaces (objects a merge can't move yet): refused, nothing merged
        for (schema, nsp) in crate::storage::world_schemas::of_world(world.num) {
            if renamed.contains(&nsp) {
                continue;
            }
            let left = crate::spi_calls::get_one_with_args::<String>(
                "SELECT string_agg(pg_describe_object(d.classid, d.objid, d.objsubid), ', ')
                 FROM pg_depend d JOIN pg_namespace n ON d.refclassid = 'pg_namespace'::regclass AND d.refobjid = n.oid
                 WHERE n.nspname = $1 AND d.deptype = 'n'",
                &[nsp.as_str().into()],
            )
            .ok()
            .flatten();
            if let Some(left) = left {
                raise_with(
                    "0A000",
                    format!("merging {}: a merge can't bring {left} yet (made in the world, in schema {schema}); nothing was merged", world.name),
                    None,
                    Some("Drop it in the world, or make it in main.".into()),
                );
            }
            crate::spi_calls::run(&format!("DROP SCHEMA {}", QuotedName::ident(&nsp))).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            forget_namespace(world.num, &schema);
        }
        if let Some(t) = target {
            // (its foreign keys to main's tables go with its tables, to that world's merge)
            crate::spi_calls::run_with_args("UPDATE worlds.world_fk SET world = $2 WHERE world = $1", &[world.num.into(), t.num.into()])
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        }
        if target.is_none() {
            let track = if crate::guc::LAZY_STORAGE.get() { "_track_lazy" } else { "track" };
            for relid in &moved_tables {
                crate::spi_calls::run_with_args(
                    &format!("SELECT worlds.{track}(c.oid::regclass) FROM pg_catalog.pg_class c WHERE c.oid = $1 AND worlds._trackable(c.oid::regclass)"),
                    &[(*relid).into()],
                )
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            }
        }
        // the rows its tables brought, for the merge's count
        twin_rows + moved_tables
            .iter()
            .map(|r| crate::spi_calls::get_one::<i64>(&format!("SELECT count(*) FROM {}", printed(*r, "regclass"))).ok().flatten().unwrap_or(0) as usize)
            .sum::<usize>()
    })
}

fn forget_namespace(world: i32, schema: &str) {
    crate::spi_calls::run_with_args("DELETE FROM worlds.world_schema WHERE world = $1 AND schema = $2", &[world.into(), schema.into()])
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
}


/// An object as Postgres prints it by its OID (`regclass`, `regprocedure`, `regtype`: quoted, and
/// qualified where pg_worlds' search_path doesn't find it).
fn printed(oid: pg_sys::Oid, reg: &str) -> String {
    let sql = match reg {
        "regprocedure" => "SELECT $1::regprocedure::text",
        "regtype" => "SELECT $1::regtype::text",
        _ => "SELECT $1::regclass::text",
    };
    crate::spi_calls::get_one_with_args::<String>(sql, &[oid.into()]).ok().flatten().unwrap_or_default()
}
