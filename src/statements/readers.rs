//! DIFF ... READERS and SHOW READERS (spec, "DIFF ... READERS"): what reads each column a diff changes,
//! critical readers first, then the tables with the most readers, then the readers of the most changed
//! columns, and three rows of coverage; and the readers the session's world knows of.
use crate::api::raise;
use crate::governance::readers::{blast, clients, registry, trace};
use crate::merge::{self, DiffRequest};
use crate::world::World;
use pgrx::prelude::*;
use serde_json::{json, Value};

/// The world a name stands for (main: None; a moment 'w@when': w as it stands).
fn world_named(name: &str) -> Option<World> {
    let name = name.split('@').next().unwrap_or(name);
    if name == "main" {
        return None;
    }
    let w = crate::world::resolve_live(name);
    (w.num > 0).then_some(w)
}

/// A table as the diff names it (`leads`, `sales.orders`), in the session's names, or among `world`'s own
/// (its namespaces `pg_w<num>_<schema>`, nearest world first).
fn table_of(shown: &str, world: Option<&World>) -> Option<pg_sys::Oid> {
    let found = crate::storage::as_internal(|| {
        crate::storage::in_session_search_path(|| crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[shown.into()]))
    })
    .ok()
    .flatten();
    if found.is_some() {
        return found;
    }
    let parts = worlds_core::rules::identifiers(shown).ok()?;
    let (schema, name) = match parts.as_slice() {
        [n] => ("public".to_string(), n.clone()),
        [s, n] => (s.clone(), n.clone()),
        _ => return None,
    };
    let chain: Vec<i32> = world.map(|w| w.chain.clone()).unwrap_or_default();
    crate::storage::as_internal(|| {
        crate::spi_calls::get_one_with_args::<pg_sys::Oid>(
            "SELECT c.oid FROM unnest($1::int[]) WITH ORDINALITY w(num, i)
               JOIN pg_catalog.pg_namespace n ON n.nspname = left('pg_w' || w.num || '_' || $2, 63)
               JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = $3
              ORDER BY w.i LIMIT 1",
            &[chain.into(), schema.as_str().into(), name.as_str().into()],
        )
    })
    .ok()
    .flatten()
}

/// The changes of a diff's rows, table by table (in the order they first appear).
fn changes_of(rows: &[Value], world: Option<&World>) -> Vec<(String, trace::Change)> {
    let mut out: Vec<(String, trace::Change)> = Vec::new();
    for r in rows {
        let (Some(table), Some(change)) = (r["table"].as_str(), r["change"].as_str()) else { continue };
        if !matches!(change, "insert" | "update" | "delete" | "alter table") {
            continue;
        }
        let i = match out.iter().position(|(t, _)| t == table) {
            Some(i) => i,
            None => {
                let Some(relid) = table_of(table, world) else { continue };
                out.push((table.to_string(), trace::Change { relid, updated: Vec::new(), rows_added: false, rows_deleted: false, columns_added: Vec::new() }));
                out.len() - 1
            }
        };
        let c = &mut out[i].1;
        let columns: Vec<String> = r["columns"].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default();
        match change {
            "insert" => c.rows_added = true,
            "delete" => c.rows_deleted = true,
            "update" => {
                for col in columns {
                    if !c.updated.contains(&col) {
                        c.updated.push(col);
                    }
                }
            }
            _ => {
                // ALTER TABLE: "+email text" adds a column ("+index ...", "+constraint ..." add no column)
                for col in columns.iter().filter_map(|x| x.strip_prefix('+')) {
                    let mut words = col.split_whitespace();
                    if let (Some(name), Some(_)) = (words.next(), words.next()) {
                        if !["index", "constraint", "unique", "check", "foreign", "primary", "trigger"].contains(&name) {
                            c.columns_added.push(name.trim_matches('"').to_string());
                        }
                    }
                }
            }
        }
    }
    out
}

/// DIFF [WORLD a [TO b]] READERS.
pub fn diff_readers(from: Option<String>, to: Option<String>) -> Vec<Value> {
    let session = || crate::guc::current_world_setting().to_string_lossy().into_owned();
    let (rows, readers_world) = match &to {
        Some(to) => {
            let from = from.clone().unwrap_or_else(session);
            (merge::quietly(|| merge::diff_to(&from, to, false, None)), world_named(to))
        }
        None => {
            let name = from.clone().unwrap_or_else(session);
            (merge::quietly(|| merge::diff(DiffRequest { world: from.clone(), as_sql: false, limit: None })), world_named(&name))
        }
    };
    let entries = registry::effective(readers_world.as_ref());
    let chain: Vec<i32> = readers_world.as_ref().map(|w| w.chain.clone()).unwrap_or_default();
    let mut found: Vec<blast::ReaderRow> = Vec::new();
    for (table, change) in changes_of(&rows, readers_world.as_ref()) {
        found.extend(blast::readers_of(&change, &table, &entries, &chain));
    }
    // critical first, then the tables with the most readers, then the readers of the most changed columns
    let per_table = |t: &str| found.iter().filter(|r| r.table == t).count();
    let mut order: Vec<(bool, usize, usize, String, String, String, usize)> =
        found.iter().enumerate().map(|(i, r)| (!r.critical, usize::MAX - per_table(&r.table), usize::MAX - r.columns.len(), r.table.clone(), r.kind.clone(), r.reader.clone(), i)).collect();
    order.sort();
    let mut out: Vec<Value> = order
        .into_iter()
        .map(|o| {
            let r = &found[o.6];
            json!({ "table": r.table, "columns": r.columns.join(", "), "kind": r.kind, "reader": r.reader, "detail": r.detail, "critical": r.critical })
        })
        .collect();
    out.extend(coverage(readers_world.as_ref()).into_iter().map(|d| json!({ "table": null, "columns": null, "kind": "coverage", "reader": null, "detail": d, "critical": null })));
    out
}

/// The three rows that say what was looked at.
fn coverage(world: Option<&World>) -> [String; 3] {
    let whose = world.map(|w| format!("world {}'s definitions (its own and main's)", w.name)).unwrap_or_else(|| "main's definitions".into());
    let clients = match clients::since() {
        Some(t) => format!(
            "clients seen reading since {t}: SQL over the Postgres protocol in main and every world, by role and application_name (worlds-mcp's tools by their agent's role); a session records a column at most once a minute"
        ),
        None => "clients' reads are not recorded (worlds.record_reads is off, or pg_worlds is not in shared_preload_libraries)".into(),
    };
    [
        format!(
            "traced inside the database, from {whose}: views, materialized views and merge checks column by column (the views they read inlined), keys, unique constraints, foreign keys, CHECKs and indexes by their columns and expressions, triggers by their events, functions by their text; registered readers"
        ),
        clients,
        "not followed: queries a function builds as strings for EXECUTE, and anything reading outside SQL that isn't registered (REGISTER READER); no readers means none found, not that nothing reads the field".into(),
    ]
}

/// SHOW READERS: the registered readers and marks the session's world has, and the clients seen reading
/// (those the role may see: worlds.client_reads()).
#[pg_extern(name = "show_readers")]
#[allow(clippy::type_complexity)]
fn show_readers() -> TableIterator<
    'static,
    (
        name!(reader, String),
        name!(kind, String),
        name!(table, Option<String>),
        name!(columns, Option<String>),
        name!(last_read, Option<pgrx::datum::TimestampWithTimeZone>),
        name!(critical, bool),
        name!(marked_by, Option<String>),
        name!(marked_at, Option<pgrx::datum::TimestampWithTimeZone>),
    ),
> {
    let entries = registry::effective_here();
    let mark_of = |name: &str, kind: &str| registry::marked(&entries, name, kind).map(|m| (m.by.clone(), m.at));
    let mut out = Vec::new();
    for e in entries.iter().filter(|e| e.kind == registry::Kind::Registered) {
        let m = mark_of(&e.name, "registered reader");
        out.push((e.name.clone(), "registered".to_string(), Some(e.table.clone()), Some(e.columns.as_ref().map(|c| c.join(", ")).unwrap_or_else(|| "*".into())), None, m.is_some(), m.as_ref().map(|m| m.0.clone()), m.and_then(|m| m.1)));
    }
    // clients, as the role may see them: per client and table, the columns it read and when last
    let clients: Vec<(String, String, String, Option<pgrx::datum::TimestampWithTimeZone>)> = Spi::connect(|c| {
        c.select(
            "SELECT client, \"table\"::text, string_agg(\"column\"::text, ', ' ORDER BY \"column\"), max(last_read)
               FROM worlds.client_reads() GROUP BY 1, 2 ORDER BY 1, 2",
            None,
            &[],
        )
        .map(|t| {
            t.filter_map(|r| {
                Some((r.get::<String>(1).ok().flatten()?, r.get::<String>(2).ok().flatten()?, r.get::<String>(3).ok().flatten().unwrap_or_default(), r.get(4).ok().flatten()))
            })
            .collect()
        })
        .unwrap_or_else(|e| raise("XX000", format!("reading clients' reads: {e}")))
    });
    for (client, table, columns, last) in &clients {
        let m = mark_of(client, "client");
        out.push((client.clone(), "client".into(), Some(table.clone()), Some(columns.clone()), *last, m.is_some(), m.as_ref().map(|m| m.0.clone()), m.and_then(|m| m.1)));
    }
    // marks of readers listed nowhere above (a view, a function, a client not seen yet)
    for m in entries.iter().filter(|e| e.kind == registry::Kind::Mark) {
        if out.iter().any(|r| r.0 == m.name || (r.1 == "client" && r.0.split(" (").next() == Some(m.name.as_str()))) {
            continue;
        }
        out.push((m.name.clone(), "marked".into(), None, None, None, true, Some(m.by.clone()), m.at));
    }
    out.sort_by(|a, b| (!a.5, &a.0, &a.2).cmp(&(!b.5, &b.0, &b.2)));
    TableIterator::new(out)
}
