//! Blast radius: everything that reads what a change touches, one table at a time: the definitions traced
//! inside the database (trace.rs), the clients seen reading (clients.rs), the registered readers
//! (registry.rs), each with whether a mark makes it critical. DIFF ... READERS lists them
//! (statements/readers.rs); the merge policy's critical rule holds an agent's merge that changes what a
//! critical one reads (`critical_reads`, judged by the judge through policies.rs).
use super::registry::{self, Entry};
use super::trace::{self, Change};
use crate::plan::Planned;
use pgrx::prelude::*;
use std::collections::BTreeMap;

/// One reader of one changed table, as DIFF ... READERS shows it.
#[derive(Clone, Debug)]
pub struct ReaderRow {
    pub table: String,
    /// the changed columns it reads, in the table's order
    pub columns: Vec<String>,
    pub kind: String,
    pub reader: String,
    pub detail: String,
    pub critical: bool,
}

/// The table's live columns, in order: (attnum, name).
pub fn table_columns(relid: pg_sys::Oid) -> Vec<(i16, String)> {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT attnum, attname::text FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            None,
            &[relid.into()],
            |t| t.filter_map(|r| Some((r.get::<i16>(1).ok().flatten()?, r.get::<String>(2).ok().flatten()?))).collect(),
        )
        .unwrap_or_default()
    })
}

/// The columns a change touches for a reader of named columns: updated ones, or every column when rows
/// come or go. (A column added reaches only readers of every column.)
fn touched(change: &Change, columns: &[(i16, String)]) -> Vec<String> {
    if change.rows_added || change.rows_deleted {
        return columns.iter().map(|c| c.1.clone()).collect();
    }
    columns.iter().filter(|c| change.updated.contains(&c.1)).map(|c| c.1.clone()).collect()
}

/// What a reader of every column gets: every touched column, the added ones too.
fn touched_all(change: &Change, columns: &[(i16, String)]) -> Vec<String> {
    let mut t = touched(change, columns);
    for c in &change.columns_added {
        if !t.contains(c) {
            t.push(c.clone());
        }
    }
    t
}

/// Every reader of one changed table (`table`: as a person names it) as the worlds of `chain` (a world's
/// chain, own first; empty: main) define them, with the registered readers and marks `entries` has.
/// Clients: every one seen reading the columns, whoever asks (as pg_stat_activity names every session's
/// role and program; the policy's rule doesn't depend on who merges). worlds.client_reads(), which lists
/// each read, keeps other roles' to pg_read_all_stats.
pub fn readers_of(change: &Change, table: &str, entries: &[Entry], chain: &[i32]) -> Vec<ReaderRow> {
    let columns = table_columns(change.relid);
    let critical = |reader: &str, kind: &str| registry::marked(entries, reader, kind).is_some();
    let mut out: Vec<ReaderRow> = trace::readers_seen_from(change, chain)
        .into_iter()
        .map(|r| ReaderRow { table: table.to_string(), critical: critical(&r.name, r.kind), columns: r.columns, kind: r.kind.to_string(), reader: r.name, detail: r.detail })
        .collect();
    // clients seen reading: per client, the touched columns it read, and when it last read one
    let touched_cols = touched(change, &columns);
    let mut clients: BTreeMap<String, (Vec<String>, pgrx::datum::TimestampWithTimeZone)> = BTreeMap::new();
    for (client, attnum, at) in super::clients::reads_of(change.relid) {
        let Some((_, name)) = columns.iter().find(|c| c.0 == attnum) else { continue };
        if !touched_cols.contains(name) {
            continue;
        }
        let e = clients.entry(client).or_insert_with(|| (Vec::new(), at));
        e.0.push(name.clone());
        if at > e.1 {
            e.1 = at;
        }
    }
    for (client, (mut cols, at)) in clients {
        cols.sort_by_key(|c| columns.iter().position(|x| &x.1 == c));
        cols.dedup();
        out.push(ReaderRow {
            table: table.to_string(),
            critical: critical(&client, "client"),
            columns: cols,
            kind: "client".into(),
            detail: format!("last read one of these columns at {at}"),
            reader: client,
        });
    }
    // registered readers on the table
    for e in registry::registered_on(change.relid, entries) {
        let cols: Vec<String> = match &e.columns {
            None => touched_all(change, &columns),
            Some(c) => touched(change, &columns).into_iter().filter(|x| c.contains(x)).collect(),
        };
        if cols.is_empty() {
            continue;
        }
        let what = match &e.columns {
            None => format!("reads every column of {table}"),
            Some(c) => format!("reads {}", c.join(", ")),
        };
        out.push(ReaderRow {
            table: table.to_string(),
            critical: critical(&e.name, "registered reader"),
            columns: cols,
            kind: "registered reader".into(),
            reader: e.name.clone(),
            detail: format!("{what}; registered by {}", e.by),
        });
    }
    out
}

/// The table-by-table changes a merge's plan applies (its rows; the tables it changes the shape of come
/// with their statements, counted as schema changes).
pub fn plan_changes(plan: &[Planned]) -> Vec<(String, Change)> {
    let mut by_table: Vec<(String, Change)> = Vec::new();
    for p in plan.iter().filter(|p| p.changes()) {
        let relid = p.layout.relid;
        let i = match by_table.iter().position(|(_, c)| c.relid == relid) {
            Some(i) => i,
            None => {
                // (`"schema"."table"` as layouts name tables; public's shown unqualified, as the rules show them)
                let shown = worlds_core::rules::table_list(p.layout.table_name.as_str())
                    .ok()
                    .and_then(|mut l| l.pop())
                    .map(|t| worlds_core::rules::TableName { schema: t.schema.filter(|s| s != "public"), name: t.name }.to_string())
                    .unwrap_or_else(|| p.layout.table_name.to_string());
                by_table.push((shown, Change { relid, updated: Vec::new(), rows_added: false, rows_deleted: false, columns_added: Vec::new() }));
                by_table.len() - 1
            }
        };
        let c = &mut by_table[i].1;
        let obj = |v: &Option<serde_json::Value>| v.as_ref().and_then(|v| v.as_object()).cloned();
        match (obj(&p.row.theirs), obj(&p.decision.result)) {
            (Some(before), Some(after)) => {
                for (k, v) in &after {
                    if before.get(k) != Some(v) && !c.updated.contains(k) {
                        c.updated.push(k.clone());
                    }
                }
            }
            (None, Some(_)) => c.rows_added = true,
            (Some(_), None) => c.rows_deleted = true,
            (None, None) => {}
        }
    }
    by_table
}

/// The critical readers of what a merge's plan changes (the policy's critical rule): with the marks the
/// world has and the ones its target has (a mark either side holds the merge).
pub fn critical_reads(plan: &[Planned], world: &crate::world::World, target: Option<&crate::world::World>) -> Vec<worlds_core::rules::CriticalRead> {
    let mut entries = registry::effective(Some(world));
    for e in registry::effective(target) {
        if !entries.contains(&e) {
            entries.push(e);
        }
    }
    if !entries.iter().any(|e| e.kind == registry::Kind::Mark) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (table, change) in plan_changes(plan) {
        for r in readers_of(&change, &table, &entries, &world.chain).into_iter().filter(|r| r.critical) {
            out.push(worlds_core::rules::CriticalRead { table: r.table, columns: r.columns, kind: r.kind, reader: r.reader });
        }
    }
    out
}
