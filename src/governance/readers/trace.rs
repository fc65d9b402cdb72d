//! DIFF ... READERS, traced inside the database: what reads a table's changed columns.
//!
//! - Views and materialized views, found through pg_depend (rules depending on the table, or on a view
//!   depending on it, transitively), and merge checks (their text parsed and analysed as CREATE MERGE
//!   CHECK reads it), each traced column by column through its query tree (`query.rs`).
//! - The table's constraints (primary key, unique, CHECK, its foreign keys) by their columns and
//!   expressions, foreign keys of other tables pointing at it (when its key changes or rows are deleted),
//!   its indexes (keys, expressions, WHERE) other than those of its keys.
//! - Its triggers, when their event fires (UPDATE OF included); row triggers read every column.
//! - SQL and PL/pgSQL functions whose text names the table and a changed column (or the table at all when
//!   rows are added or deleted). The functions of the table's triggers aren't (their trigger is, when
//!   its event fires).
//!
//! What the session sees: objects in main's schemas, and a world's own objects (namespaces
//! `pg_w<num>_<schema>`) only of the session's world and its ancestors (the chain its names resolve
//! in), shown under the schema they stand for; main's views and functions that world replaced
//! (`worlds.world_replaced`) are left out (the world's version is there instead). Main's objects a world
//! dropped are not this module's concern. pg_worlds' own objects never count.
//!
//! Rules (spec, "DIFF ... READERS"): rows added or deleted change every column of their table; a column
//! added reaches only what reads every column (a whole-row reference, a row trigger without UPDATE OF, a
//! function naming the table); updated columns reach what reads any of them.
use crate::sql_text::QuotedName;
use pgrx::iter::TableIterator;
use pgrx::prelude::*;
use std::collections::{BTreeSet, HashSet};

pub mod query;

/// What a diff changes in one table.
#[derive(Clone, Debug, Default)]
pub struct Change {
    pub relid: pg_sys::Oid,         // the table, as the session sees it
    pub updated: Vec<String>,       // columns some row's UPDATE changed
    pub rows_added: bool,
    pub rows_deleted: bool,
    pub columns_added: Vec<String>, // ALTER TABLE ... ADD COLUMN (reaches only what reads every column)
}

/// One reader of a changed table.
#[derive(Clone, Debug, PartialEq)]
pub struct Reader {
    /// "view", "materialized view", "merge check", "trigger", "function", "primary key", "unique",
    /// "foreign key", "check", "index"
    pub kind: &'static str,
    /// its name as a user writes it (relation/constraint/trigger/function/check name)
    pub name: String,
    /// the changed columns it reads, in the table's column order; never empty
    pub columns: Vec<String>,
    /// its definition, or how it reads
    pub detail: String,
    /// it reads every column of the table (whole row, or all columns): a column added reaches it
    pub every_column: bool,
}

/// Every reader of `change`, in a stable order (kind, name), as the session sees the catalog (its
/// world's own objects and its ancestors').
pub fn readers(change: &Change) -> Vec<Reader> {
    crate::storage::search_path::refresh_if_pending();
    readers_seen_from(change, &crate::storage::search_path::chain())
}

/// Every reader of `relid` with all the columns of it each reads (every column changed, rows added and
/// deleted): what registered / critical readers are matched against.
pub fn all_readers(relid: pg_sys::Oid) -> Vec<Reader> {
    let Some(table) = Table::of(relid) else { return Vec::new() };
    let change = Change {
        relid,
        updated: table.columns.iter().map(|(_, n)| n.clone()).collect(),
        rows_added: true,
        rows_deleted: true,
        columns_added: Vec::new(),
    };
    readers(&change)
}

/// `readers`, with the worlds whose own objects count given (`worlds`: a world's chain, own first;
/// empty: main's objects only).
pub fn readers_seen_from(change: &Change, worlds: &[i32]) -> Vec<Reader> {
    let Some(table) = Table::of(change.relid) else { return Vec::new() };
    let reach = Reach::new(&table, change);
    if reach.is_empty() {
        return Vec::new();
    }
    let seen = Seen::new(worlds);
    let mut out = Vec::new();
    views(&table, &reach, &seen, &mut out);
    merge_checks(&table, &reach, &mut out);
    constraints(&table, &reach, &seen, &mut out);
    indexes(&table, &reach, &mut out);
    let trigger_functions = triggers(&table, &reach, &mut out);
    functions(&table, &reach, &seen, &trigger_functions, &mut out);
    // (one name of one kind once: a foreign key referencing its own table is both)
    let mut merged: Vec<Reader> = Vec::new();
    for r in out {
        match merged.iter_mut().find(|m| m.kind == r.kind && m.name == r.name) {
            Some(m) => {
                let cols: BTreeSet<&String> = m.columns.iter().chain(r.columns.iter()).collect();
                m.columns = table.in_order(cols.into_iter().cloned().collect());
                if !r.detail.is_empty() && m.detail != r.detail {
                    m.detail = format!("{}; {}", m.detail, r.detail);
                }
                m.every_column |= r.every_column;
            }
            None => merged.push(r),
        }
    }
    merged.sort_by(|a, b| (a.kind, &a.name, &a.detail).cmp(&(b.kind, &b.name, &b.detail)));
    merged
}

/// The changed table: its live columns, and the relations whose readers are its readers (itself, and
/// main's table when it is a world's twin: main's views read the twin in that world).
struct Table {
    relid: pg_sys::Oid,
    name: String,
    columns: Vec<(i16, String)>,
    traced: Vec<pg_sys::Oid>,
}

impl Table {
    fn of(relid: pg_sys::Oid) -> Option<Table> {
        let name = crate::spi_calls::get_one_with_args::<String>(
            "SELECT relname::text FROM pg_catalog.pg_class WHERE oid = $1 AND relkind IN ('r', 'p', 'f')",
            &[relid.into()],
        )
        .ok()
        .flatten()?;
        let columns = crate::spi_calls::rows(
            "SELECT attnum, attname::text FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            None,
            &[relid.into()],
            |t| t.filter_map(|r| Some((r.get::<i16>(1).ok()??, r.get::<String>(2).ok()??))).collect(),
        )
        .unwrap_or_default();
        let mut traced = vec![relid];
        if let Some((_, _, main)) = crate::storage::world_twins::twin_info(relid) {
            traced.push(main);
        }
        Some(Table { relid, name, columns, traced })
    }

    fn attnum(&self, name: &str) -> Option<i16> {
        self.columns.iter().find(|(_, n)| n == name).map(|(a, _)| *a)
    }

    fn name_of(&self, attnum: i16) -> Option<&str> {
        self.columns.iter().find(|(a, _)| *a == attnum).map(|(_, n)| n.as_str())
    }

    fn all(&self) -> BTreeSet<i16> {
        self.columns.iter().map(|(a, _)| *a).collect()
    }

    /// Names in the table's column order (names it hasn't last, as given).
    fn in_order(&self, names: Vec<String>) -> Vec<String> {
        let mut known: Vec<(i16, String)> = Vec::new();
        let mut unknown: Vec<String> = Vec::new();
        for n in names {
            match self.attnum(&n) {
                Some(a) => known.push((a, n)),
                None => unknown.push(n),
            }
        }
        known.sort();
        known.dedup();
        let mut out: Vec<String> = known.into_iter().map(|(_, n)| n).collect();
        for n in unknown {
            if !out.contains(&n) {
                out.push(n);
            }
        }
        out
    }
}

/// The change as attnums of the table (names it hasn't — a column only the diff's side has — kept as
/// names: only what reads every column can read those).
struct Reach {
    updated: BTreeSet<i16>,
    updated_unknown: Vec<String>,
    rows: bool,
    inserted: bool,
    deleted: bool,
    added: BTreeSet<i16>,
    added_unknown: Vec<String>,
    all: BTreeSet<i16>,
    names: Vec<(i16, String)>,
}

impl Reach {
    fn new(table: &Table, change: &Change) -> Reach {
        let split = |names: &[String]| {
            let mut known = BTreeSet::new();
            let mut unknown: Vec<String> = Vec::new();
            for n in names {
                match table.attnum(n) {
                    Some(a) => {
                        known.insert(a);
                    }
                    None if !unknown.contains(n) => unknown.push(n.clone()),
                    None => {}
                }
            }
            (known, unknown)
        };
        let (updated, updated_unknown) = split(&change.updated);
        let (added, added_unknown) = split(&change.columns_added);
        Reach {
            updated,
            updated_unknown,
            rows: change.rows_added || change.rows_deleted,
            inserted: change.rows_added,
            deleted: change.rows_deleted,
            added,
            added_unknown,
            all: table.all(),
            names: table.columns.clone(),
        }
    }

    fn is_empty(&self) -> bool {
        !self.rows && self.updated.is_empty() && self.updated_unknown.is_empty() && self.added.is_empty() && self.added_unknown.is_empty()
    }

    /// The changed columns a reader reading `read` (every column when `every`) reads; a column added
    /// reaches it only when `every`.
    fn hit(&self, read: &BTreeSet<i16>, every: bool) -> Vec<String> {
        let read = if every { &self.all } else { read };
        let mut hit: BTreeSet<i16> = if self.rows { read.clone() } else { read.intersection(&self.updated).copied().collect() };
        if every {
            hit.extend(self.added.iter().copied());
        }
        let mut out: Vec<String> = self.names.iter().filter(|(a, _)| hit.contains(a)).map(|(_, n)| n.clone()).collect();
        if every {
            for n in self.updated_unknown.iter().chain(self.added_unknown.iter()) {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
        }
        out
    }

    fn names_of(&self, attnums: &BTreeSet<i16>) -> Vec<String> {
        self.names.iter().filter(|(a, _)| attnums.contains(a)).map(|(_, n)| n.clone()).collect()
    }
}

/// Which namespaces' objects the session sees, and main's objects its worlds replaced.
struct Seen {
    worlds: Vec<i32>,
    replaced: HashSet<(String, String, String)>,
}

const OWN_SCHEMAS: &[&str] = &["pg_catalog", "information_schema", "worlds", "worlds_data"];

impl Seen {
    fn new(worlds: &[i32]) -> Seen {
        let replaced = if worlds.is_empty() {
            HashSet::new()
        } else {
            crate::storage::as_internal(|| {
                crate::spi_calls::rows(
                    "SELECT kind, schema::text, name::text FROM worlds.world_replaced WHERE world = ANY($1)",
                    None,
                    &[worlds.to_vec().into()],
                    |t| t.filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<String>(2).ok()??, r.get::<String>(3).ok()??))).collect(),
                )
                .unwrap_or_default()
            })
        };
        Seen { worlds: worlds.to_vec(), replaced }
    }

    /// Does the session see an object of `kind` ("view", "function") named `name` in namespace `nsp`?
    /// `other_temp`: another session's temporary namespace.
    fn sees(&self, kind: &str, nsp: &str, name: &str, other_temp: bool) -> bool {
        if other_temp || OWN_SCHEMAS.contains(&nsp) || nsp.starts_with("pg_toast") {
            return false;
        }
        match crate::storage::search_path::world_of_namespace(nsp) {
            Some(num) => self.worlds.contains(&num),
            None => !self.replaced.contains(&(kind.to_string(), nsp.to_string(), name.to_string())),
        }
    }

    /// Its name as the session writes it: bare when its schema is on the path, else qualified by the
    /// schema it stands for (a world's namespace by main's schema name).
    fn display(nsp: &str, name: &str, visible: bool) -> String {
        if visible {
            return QuotedName::ident(name).to_string();
        }
        let schema = match crate::storage::search_path::world_of_namespace(nsp) {
            Some(num) => nsp.strip_prefix(&format!("pg_w{num}_")).unwrap_or(nsp),
            None => nsp,
        };
        QuotedName::qualified(schema, name).to_string()
    }
}

/// Views and materialized views reading the table (directly or through views), traced.
fn views(table: &Table, reach: &Reach, seen: &Seen, out: &mut Vec<Reader>) {
    let candidates: Vec<ObjectRow> = crate::spi_calls::rows(
        "WITH RECURSIVE r(oid) AS (
             SELECT rw.ev_class FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite rw ON rw.oid = d.objid
              WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
                AND d.refobjid = ANY($1) AND rw.ev_class <> d.refobjid
             UNION
             SELECT rw.ev_class FROM r JOIN pg_catalog.pg_class v ON v.oid = r.oid AND v.relkind = 'v'
               JOIN pg_catalog.pg_depend d ON d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = r.oid
                AND d.classid = 'pg_catalog.pg_rewrite'::regclass
               JOIN pg_catalog.pg_rewrite rw ON rw.oid = d.objid
              WHERE rw.ev_class <> r.oid)
         SELECT c.oid, c.relkind::text, c.relname::text, n.nspname::text, pg_catalog.pg_table_is_visible(c.oid),
                (n.nspname ~ '^pg_(toast_)?temp_' AND n.oid <> pg_catalog.pg_my_temp_schema())
           FROM r JOIN pg_catalog.pg_class c ON c.oid = r.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('v', 'm') ORDER BY c.oid",
        None,
        &[table.traced.clone().into()],
        |t| t.filter_map(|r| object_row(&r)).collect(),
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: readers: {e}")));
    for (oid, relkind, relname, nsp, visible, other_temp) in candidates {
        if !seen.sees("view", &nsp, &relname, other_temp) {
            continue;
        }
        let reads = query::reads_of_view(oid);
        let kind = if relkind == "m" { "materialized view" } else { "view" };
        if let Some(r) = reader_of_reads(table, reach, &reads, kind, Seen::display(&nsp, &relname, visible), None) {
            out.push(r);
        }
    }
}

/// A traced query's reader of the table, if the change reaches it. `detail`: its own (a merge check's
/// query), else how it reads.
fn reader_of_reads(table: &Table, reach: &Reach, reads: &query::Reads, kind: &'static str, name: String, detail: Option<String>) -> Option<Reader> {
    let mut merged = query::RelReads::default();
    for relid in &table.traced {
        if let Some(r) = reads.get(relid) {
            merged.columns.extend(r.columns.iter().copied());
            merged.whole_row |= r.whole_row;
            merged.scanned |= r.scanned;
            merged.direct |= r.direct;
            merged.through.extend(r.through.iter().cloned());
        }
    }
    if !merged.scanned {
        return None;
    }
    let mut columns = reach.hit(&merged.columns, merged.whole_row);
    let mut how = if merged.whole_row {
        format!("reads every column of {}", table.name)
    } else if !merged.direct {
        format!("through {}", merged.through.iter().cloned().collect::<Vec<_>>().join(", "))
    } else {
        String::new()
    };
    if columns.is_empty() && reach.rows && merged.columns.is_empty() && !merged.whole_row {
        // it reads the table's rows but none of its columns (count(*), EXISTS): rows added or deleted
        // change what it finds
        columns = reach.names_of(&reach.all);
        how = format!("counts rows of {}", table.name);
    }
    if columns.is_empty() {
        return None;
    }
    Some(Reader { kind, name, columns, detail: detail.unwrap_or(how), every_column: merged.whole_row })
}

/// Merge checks, their text analysed as CREATE MERGE CHECK reads it; a check that no longer analyses is
/// skipped.
fn merge_checks(table: &Table, reach: &Reach, out: &mut Vec<Reader>) {
    let checks: Vec<(String, String)> = crate::spi_calls::rows(
        "SELECT name, query FROM worlds.merge_check ORDER BY name",
        None,
        &[],
        |t| t.filter_map(|r| Some((r.get::<String>(1).ok()??, r.get::<String>(2).ok()??))).collect(),
    )
    .unwrap_or_default();
    for (name, text) in checks {
        let Some(reads) = query::reads_of_text(&text) else { continue };
        if let Some(r) = reader_of_reads(table, reach, &reads, "merge check", name, Some(text)) {
            out.push(r);
        }
    }
}

/// Its primary key, unique and CHECK constraints and foreign keys; foreign keys of other tables
/// pointing at it.
fn constraints(table: &Table, reach: &Reach, seen: &Seen, out: &mut Vec<Reader>) {
    type Row = (String, String, Vec<Option<i16>>, Option<String>, String);
    let own: Vec<Row> = crate::spi_calls::rows(
        "SELECT conname::text, contype::text, coalesce(conkey, '{}'), conbin::text, pg_catalog.pg_get_constraintdef(oid)
           FROM pg_catalog.pg_constraint WHERE conrelid = $1 AND contype IN ('p', 'u', 'c', 'f') ORDER BY conname",
        None,
        &[table.relid.into()],
        |t| {
            t.filter_map(|r| {
                Some((
                    r.get::<String>(1).ok()??,
                    r.get::<String>(2).ok()??,
                    r.get::<Vec<Option<i16>>>(3).ok()??,
                    r.get::<String>(4).ok()?,
                    r.get::<String>(5).ok()?.unwrap_or_default(),
                ))
            })
            .collect()
        },
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: readers: {e}")));
    for (name, contype, conkey, conbin, def) in own {
        let mut cols: BTreeSet<i16> = conkey.into_iter().flatten().filter(|a| *a > 0).collect();
        let mut whole = false;
        if let Some(bin) = conbin {
            let (c, w) = query::attnos_of_node_text(&bin);
            cols.extend(c);
            whole = w;
        }
        let kind = match contype.as_str() {
            "p" => "primary key",
            "u" => "unique",
            "c" => "check",
            _ => "foreign key",
        };
        let columns = reach.hit(&cols, whole);
        if !columns.is_empty() {
            out.push(Reader { kind, name, columns, detail: def, every_column: whole });
        }
    }
    // foreign keys pointing at it: its referenced key updated, or rows deleted
    // (name, referenced key, referencing table, its namespace, another session's temporary one)
    type Referencing = (String, Vec<Option<i16>>, String, String, bool);
    let referencing: Vec<Referencing> = crate::spi_calls::rows(
        "SELECT c.conname::text, c.confkey, r.relname::text, n.nspname::text,
                (n.nspname ~ '^pg_(toast_)?temp_' AND n.oid <> pg_catalog.pg_my_temp_schema())
           FROM pg_catalog.pg_constraint c JOIN pg_catalog.pg_class r ON r.oid = c.conrelid
           JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace
          WHERE c.contype = 'f' AND c.confrelid = ANY($1) ORDER BY c.conname",
        None,
        &[table.traced.clone().into()],
        |t| {
            t.filter_map(|r| {
                Some((
                    r.get::<String>(1).ok()??,
                    r.get::<Vec<Option<i16>>>(2).ok()??,
                    r.get::<String>(3).ok()??,
                    r.get::<String>(4).ok()??,
                    r.get::<bool>(5).ok()?.unwrap_or(false),
                ))
            })
            .collect()
        },
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: readers: {e}")));
    for (name, confkey, from, nsp, other_temp) in referencing {
        if !seen.sees("table", &nsp, &from, other_temp) {
            continue;
        }
        let key: BTreeSet<i16> = confkey.into_iter().flatten().collect();
        let hit: BTreeSet<i16> = if reach.deleted { key } else { key.intersection(&reach.updated).copied().collect() };
        let columns = reach.names_of(&hit);
        if !columns.is_empty() {
            out.push(Reader { kind: "foreign key", name, columns, detail: format!("{from} references {}", table.name), every_column: false });
        }
    }
}

/// Its indexes (by key columns, expressions and WHERE), but those of its primary key and unique
/// constraints (listed as those).
fn indexes(table: &Table, reach: &Reach, out: &mut Vec<Reader>) {
    // (name, key columns, expressions, WHERE, definition)
    type Index = (String, Vec<Option<i16>>, Option<String>, Option<String>, String);
    let rows: Vec<Index> = crate::spi_calls::rows(
        "SELECT ic.relname::text, i.indkey::int2[], i.indexprs::text, i.indpred::text, pg_catalog.pg_get_indexdef(i.indexrelid)
           FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
          WHERE i.indrelid = $1
            AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                             WHERE k.conrelid = i.indrelid AND k.conindid = i.indexrelid AND k.contype IN ('p', 'u'))
          ORDER BY ic.relname",
        None,
        &[table.relid.into()],
        |t| {
            t.filter_map(|r| {
                Some((
                    r.get::<String>(1).ok()??,
                    r.get::<Vec<Option<i16>>>(2).ok()??,
                    r.get::<String>(3).ok()?,
                    r.get::<String>(4).ok()?,
                    r.get::<String>(5).ok()?.unwrap_or_default(),
                ))
            })
            .collect()
        },
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: readers: {e}")));
    for (name, indkey, exprs, pred, def) in rows {
        let mut cols: BTreeSet<i16> = indkey.into_iter().flatten().filter(|a| *a > 0).collect();
        let mut whole = false;
        for text in [exprs, pred].into_iter().flatten() {
            let (c, w) = query::attnos_of_node_text(&text);
            cols.extend(c);
            whole |= w;
        }
        let columns = reach.hit(&cols, whole);
        if !columns.is_empty() {
            out.push(Reader { kind: "index", name, columns, detail: def, every_column: whole });
        }
    }
}

/// Its triggers whose event the change fires (pg_worlds' own and internal ones left out); returns the
/// functions of all its triggers.
fn triggers(table: &Table, reach: &Reach, out: &mut Vec<Reader>) -> HashSet<pg_sys::Oid> {
    // (name, tgtype, UPDATE OF columns, function, its name)
    type Trigger = (String, i32, Vec<Option<i16>>, pg_sys::Oid, String);
    let rows: Vec<Trigger> = crate::spi_calls::rows(
        "SELECT t.tgname::text, t.tgtype::int, t.tgattr::int2[], t.tgfoid, p.proname::text
           FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
           JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace
          WHERE t.tgrelid = $1 AND NOT t.tgisinternal AND t.tgname !~ '^worlds'
            AND pn.nspname NOT IN ('worlds', 'worlds_data')
          ORDER BY t.tgname",
        None,
        &[table.relid.into()],
        |t| {
            t.filter_map(|r| {
                Some((
                    r.get::<String>(1).ok()??,
                    r.get::<i32>(2).ok()??,
                    r.get::<Vec<Option<i16>>>(3).ok()?.unwrap_or_default(),
                    r.get::<pg_sys::Oid>(4).ok()??,
                    r.get::<String>(5).ok()??,
                ))
            })
            .collect()
        },
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: readers: {e}")));
    // (a trigger function runs when a trigger fires: the trigger says when, so its text isn't searched
    // again as a function's, whether or not this change fires it)
    let functions: HashSet<pg_sys::Oid> = rows.iter().map(|r| r.3).collect();
    for (name, tgtype, tgattr, _, proname) in rows {
        let tgtype = tgtype as u32;
        let row = tgtype & pg_sys::TRIGGER_TYPE_ROW != 0;
        let on_insert = tgtype & pg_sys::TRIGGER_TYPE_INSERT != 0;
        let on_update = tgtype & pg_sys::TRIGGER_TYPE_UPDATE != 0;
        let on_delete = tgtype & pg_sys::TRIGGER_TYPE_DELETE != 0;
        let of: BTreeSet<i16> = tgattr.into_iter().flatten().collect();
        let mut hit: BTreeSet<i16> = BTreeSet::new();
        let inserted_or_deleted = (on_insert && reach.inserted) || (on_delete && reach.deleted);
        if inserted_or_deleted {
            hit.extend(reach.all.iter().copied());
        }
        // (a column the table doesn't have, as the session sees it, fires only an UPDATE without OF)
        let updated_fires = on_update
            && ((!reach.updated.is_empty() && (of.is_empty() || !of.is_disjoint(&reach.updated))) || (of.is_empty() && !reach.updated_unknown.is_empty()));
        if updated_fires {
            // a row trigger sees every column of the row it fires for; a statement trigger the ones it names
            if row || of.is_empty() {
                hit.extend(reach.updated.iter().copied());
            } else {
                hit.extend(of.intersection(&reach.updated).copied());
            }
        }
        let every = row && of.is_empty();
        let mut columns = reach.names_of(&hit);
        if every {
            // a column added reaches a row trigger that reads every column
            for n in reach.names_of(&reach.added).into_iter().chain(reach.added_unknown.iter().cloned()) {
                if !columns.contains(&n) {
                    columns.push(n);
                }
            }
        }
        if (updated_fires && of.is_empty()) || (every && inserted_or_deleted) {
            for n in &reach.updated_unknown {
                if !columns.contains(n) {
                    columns.push(n.clone());
                }
            }
        }
        let columns = table.in_order(columns);
        if columns.is_empty() {
            continue;
        }
        let mut events = Vec::new();
        if on_insert {
            events.push("INSERT".to_string());
        }
        if on_update {
            if of.is_empty() {
                events.push("UPDATE".to_string());
            } else {
                let names: Vec<String> = of.iter().filter_map(|a| table.name_of(*a)).map(|n| QuotedName::ident(n).to_string()).collect();
                events.push(format!("UPDATE OF {}", names.join(", ")));
            }
        }
        if on_delete {
            events.push("DELETE".to_string());
        }
        if tgtype & pg_sys::TRIGGER_TYPE_TRUNCATE != 0 {
            events.push("TRUNCATE".to_string());
        }
        let detail = format!("{} runs {}()", events.join(" OR "), QuotedName::ident(&proname));
        out.push(Reader { kind: "trigger", name, columns, detail, every_column: row });
    }
    functions
}

/// SQL and PL/pgSQL functions (not pg_worlds' nor another extension's) whose text names the table and a
/// changed column, or the table at all when rows are added or deleted or a column is added (what
/// names the table may read every column of it). Case-insensitive, whole words; queries a function
/// builds as strings for EXECUTE are followed only as far as their text names them.
fn functions(table: &Table, reach: &Reach, seen: &Seen, trigger_functions: &HashSet<pg_sys::Oid>, out: &mut Vec<Reader>) {
    let rows: Vec<ObjectRow> = crate::spi_calls::rows(
        "SELECT f.oid, f.proname::text, f.nspname::text, f.src, f.visible, f.other_temp FROM (
             SELECT p.oid, p.proname, n.nspname,
                    CASE WHEN coalesce(p.prosrc, '') = '' THEN pg_catalog.pg_get_functiondef(p.oid) ELSE p.prosrc END AS src,
                    pg_catalog.pg_function_is_visible(p.oid) AS visible,
                    (n.nspname ~ '^pg_(toast_)?temp_' AND n.oid <> pg_catalog.pg_my_temp_schema()) AS other_temp
               FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
               JOIN pg_catalog.pg_language l ON l.oid = p.prolang
              WHERE l.lanname IN ('sql', 'plpgsql') AND p.prokind IN ('f', 'p')
                AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'worlds', 'worlds_data')
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                 WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')) f
          WHERE strpos(lower(f.src), lower($1)) > 0
          ORDER BY f.proname, f.oid",
        None,
        &[table.name.as_str().into()],
        |t| t.filter_map(|r| object_row(&r)).collect(),
    )
    .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: readers: {e}")));
    let table_word = table.name.to_lowercase();
    for (oid, proname, nsp, src, visible, other_temp) in rows {
        if trigger_functions.contains(&oid) || !seen.sees("function", &nsp, &proname, other_temp) {
            continue;
        }
        let text = src.to_lowercase();
        if !names_word(&text, &table_word) {
            continue;
        }
        let named: BTreeSet<i16> = table.columns.iter().filter(|(_, n)| names_word(&text, &n.to_lowercase())).map(|(a, _)| *a).collect();
        let mut hit: BTreeSet<i16> = named.intersection(&reach.updated).copied().collect();
        if reach.rows {
            hit.extend(if named.is_empty() { reach.all.iter() } else { named.iter() }.copied());
        }
        hit.extend(reach.added.iter().copied());
        let mut columns = reach.names_of(&hit);
        for n in reach.added_unknown.iter().chain(reach.updated_unknown.iter().filter(|n| names_word(&text, &n.to_lowercase()))) {
            if !columns.contains(n) {
                columns.push(n.clone());
            }
        }
        if columns.is_empty() {
            continue;
        }
        let named_hit: Vec<String> = reach.names_of(&named.intersection(&hit).copied().collect());
        let detail = if named_hit.is_empty() {
            format!("names {}", table.name)
        } else {
            format!("names {} and {}", table.name, named_hit.join(", "))
        };
        out.push(Reader { kind: "function", name: Seen::display(&nsp, &proname, visible), columns, detail, every_column: true });
    }
}

/// Does lower-cased `text` hold `word` as a whole word (not inside a longer identifier)?
fn names_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// `worlds._readers_of(rel, updated, rows_added, rows_deleted, columns_added)`: `readers` as rows
/// (behind `worlds._readers`, which takes a regclass; both for tests and pg_worlds' own statements).
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn _readers_of(
    rel: Option<pg_sys::Oid>,
    updated: Option<Vec<Option<String>>>,
    rows_added: Option<bool>,
    rows_deleted: Option<bool>,
    columns_added: Option<Vec<Option<String>>>,
) -> TableIterator<'static, (name!(kind, String), name!(reader, String), name!(columns, Vec<String>), name!(detail, String))> {
    let rel = rel.unwrap_or_else(|| crate::api::raise("22004", "worlds._readers: the table must not be null"));
    let change = Change {
        relid: rel,
        updated: updated.unwrap_or_default().into_iter().flatten().collect(),
        rows_added: rows_added.unwrap_or(false),
        rows_deleted: rows_deleted.unwrap_or(false),
        columns_added: columns_added.unwrap_or_default().into_iter().flatten().collect(),
    };
    TableIterator::new(readers(&change).into_iter().map(|r| (r.kind.to_string(), r.name, r.columns, r.detail)))
}

pgrx::extension_sql!(
    r#"
-- DIFF ... READERS traced inside the database (governance/readers/trace.rs), for tests and pg_worlds' own
-- statements
CREATE FUNCTION worlds._readers(rel regclass, updated text[], rows_added boolean, rows_deleted boolean, columns_added text[])
RETURNS TABLE (kind text, reader text, columns text[], detail text)
LANGUAGE sql VOLATILE AS $$ SELECT * FROM worlds._readers_of($1::oid, $2, $3, $4, $5) $$;
REVOKE EXECUTE ON FUNCTION worlds._readers(regclass, text[], boolean, boolean, text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION worlds._readers_of(oid, text[], boolean, boolean, text[]) FROM PUBLIC;
"#,
    name = "readers_trace",
    requires = ["checks", _readers_of]
);

/// A catalog object a reader may be: (oid, kind, name, namespace, visible on the search path, another
/// session's temporary object), as the views' and functions' queries list them.
type ObjectRow = (pg_sys::Oid, String, String, String, bool, bool);

fn object_row(r: &pgrx::spi::SpiHeapTupleData) -> Option<ObjectRow> {
    Some((
        r.get::<pg_sys::Oid>(1).ok()??,
        r.get::<String>(2).ok()??,
        r.get::<String>(3).ok()??,
        r.get::<String>(4).ok()??,
        r.get::<bool>(5).ok()?.unwrap_or(false),
        r.get::<bool>(6).ok()?.unwrap_or(false),
    ))
}
