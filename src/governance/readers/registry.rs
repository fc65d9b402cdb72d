//! Registered readers and critical marks (spec, "DIFF ... READERS"): REGISTER READER, UNREGISTER READER,
//! MARK READER ... CRITICAL, UNMARK READER, and what a world has of them.
//!
//! They live in a world like a view (registry.sql): main's entries (world 0), and each world's own over
//! its ancestors' (nearest first; `removed` unregisters or unmarks what an ancestor has). A fork sees its
//! chain's; DIFF shows a world's own (register reader, unregister reader, mark critical, unmark critical);
//! MERGE brings them into its target, each a schema change under a merge policy (merge/mod.rs puts them
//! in the plan's table-level changes; `apply` brings them).
//!
//! Rights. In a world: what writing in it needs (an agent: write, or write_own for its own worlds). In
//! main, and when a merge brings one into main: REGISTER and UNREGISTER need the table's ownership (as
//! COMMENT ON does) or pg_worlds' admin; MARK and UNMARK need the admin (worlds_admin, a superuser, an
//! agent with admin): a mark holds agents' merges.
use crate::api::raise;
use crate::world::World;
use pgrx::prelude::*;
use serde_json::{json, Value};

extension_sql_file!("registry.sql", name = "readers_registry", requires = ["agents"]);

/// What an entry is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// REGISTER READER: a reader outside SQL, named by hand, on one table
    Registered,
    /// MARK READER ... CRITICAL: a reader of any kind, by name
    Mark,
}

impl Kind {
    fn sql(self) -> &'static str {
        match self {
            Kind::Registered => "registered",
            Kind::Mark => "mark",
        }
    }
}

/// One entry as a world has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub world: i32,
    pub kind: Kind,
    pub name: String,
    /// registered: the table it reads (0 for a mark)
    pub relid: pg_sys::Oid,
    /// the table as a person names it (public's unqualified); empty for a mark
    pub table: String,
    /// registered: the columns it reads (None: every column)
    pub columns: Option<Vec<String>>,
    pub removed: bool,
    pub by: String,
    pub at: Option<pgrx::datum::TimestampWithTimeZone>,
}

impl Entry {
    /// Does a registered reader read this column?
    pub fn reads(&self, column: &str) -> bool {
        self.columns.as_ref().is_none_or(|c| c.iter().any(|x| x == column))
    }

    fn same_as(&self, other: &Entry) -> bool {
        self.columns == other.columns && self.relid == other.relid
    }

    fn as_json(&self) -> Value {
        match self.kind {
            Kind::Registered => json!({ "reader": self.name, "table": self.table, "columns": self.columns, "registered_by": self.by, "registered_at": self.at.map(|t| t.to_string()) }),
            Kind::Mark => json!({ "reader": self.name, "critical": true, "marked_by": self.by, "marked_at": self.at.map(|t| t.to_string()) }),
        }
    }
}

/// The chain whose entries a world sees: the world, its ancestors, main last.
fn chain_of(world: Option<&World>) -> Vec<i32> {
    let mut c: Vec<i32> = world.map(|w| w.chain.clone()).unwrap_or_default();
    c.retain(|n| *n > 0);
    c.push(0);
    c
}

/// The session's world for a change of the registry: main, or a live world (a moment can't be changed).
fn session_world() -> Option<World> {
    let w = crate::storage::overlay::session_world();
    if let Some(w) = &w {
        if w.read_only || w.num <= 0 {
            raise("25006", format!("cannot change readers in {}: a moment of the past is read only", w.name));
        }
    }
    w
}

/// The entries of exactly these worlds (every entry, removed ones too), nearest world first per key.
fn rows_of(worlds: &[i32]) -> Vec<Entry> {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT r.world, r.kind, r.name, r.tbl::oid, coalesce(CASE WHEN n.nspname = 'public' THEN quote_ident(c.relname)
                    ELSE quote_ident(regexp_replace(n.nspname, '^pg_w[0-9]+_', '')) || '.' || quote_ident(c.relname) END, ''),
                    r.columns, r.removed, r.by_role, r.at
               FROM worlds.reader r
               LEFT JOIN pg_catalog.pg_class c ON c.oid = r.tbl
               LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE r.world = ANY ($1) AND (r.kind = 'mark' OR c.oid IS NOT NULL)
              ORDER BY r.kind, r.name, r.tbl, array_position($1, r.world)",
            None,
            &[worlds.to_vec().into()],
            |t| {
                t.map(|r| Entry {
                    world: r.get::<i32>(1).ok().flatten().unwrap_or(0),
                    kind: if r.get::<String>(2).ok().flatten().as_deref() == Some("mark") { Kind::Mark } else { Kind::Registered },
                    name: r.get::<String>(3).ok().flatten().unwrap_or_default(),
                    relid: r.get::<pg_sys::Oid>(4).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                    table: r.get::<String>(5).ok().flatten().unwrap_or_default(),
                    columns: r.get::<Vec<String>>(6).ok().flatten(),
                    removed: r.get::<bool>(7).ok().flatten().unwrap_or(false),
                    by: r.get::<String>(8).ok().flatten().unwrap_or_default(),
                    at: r.get::<pgrx::datum::TimestampWithTimeZone>(9).ok().flatten(),
                })
                .collect()
            },
        )
        .unwrap_or_else(|e| raise("XX000", format!("reading the readers: {e}")))
    })
}

/// What a chain of worlds sees (the nearest entry of each key, removed ones left out).
fn effective_of(chain: &[i32]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for e in rows_of(chain) {
        // (rows come ordered by key, nearest world first)
        if out.last().is_some_and(|l: &Entry| l.kind == e.kind && l.name == e.name && l.relid == e.relid) {
            continue;
        }
        out.push(e);
    }
    out.retain(|e| !e.removed);
    out
}

/// What `world` sees (None: main): registered readers and marks.
pub fn effective(world: Option<&World>) -> Vec<Entry> {
    effective_of(&chain_of(world))
}

/// What the session's world sees.
pub fn effective_here() -> Vec<Entry> {
    effective(crate::storage::overlay::session_world().as_ref())
}

/// The marks a name matches: a mark names a reader, or a client by its role (`billing` marks
/// `billing (nightly)` too).
pub fn marked<'a>(marks: &'a [Entry], reader: &str, kind: &str) -> Option<&'a Entry> {
    let role = (kind == "client").then(|| reader.split(" (").next().unwrap_or(reader));
    marks.iter().find(|m| m.kind == Kind::Mark && (m.name == reader || role.is_some_and(|r| m.name == r)))
}

fn require_here(world: Option<&World>, admin_or_owner_of: Option<pg_sys::Oid>) {
    match world {
        Some(w) => crate::governance::agents::require("write", Some(w.num)),
        None => require_in_main(admin_or_owner_of),
    }
}

/// In main: the admin, or (for a registered reader) the table's owner (42501).
fn require_in_main(owner_of: Option<pg_sys::Oid>) {
    let Some(relid) = owner_of else {
        crate::governance::agents::require("admin", None);
        return;
    };
    let (owns, name) = crate::storage::as_session_user(|| {
        crate::spi_calls::rows(
            "SELECT pg_catalog.pg_has_role(c.relowner, 'USAGE'), c.relname::text FROM pg_catalog.pg_class c WHERE c.oid = $1",
            None,
            &[relid.into()],
            |mut t| t.next().map(|r| (r.get::<bool>(1).ok().flatten().unwrap_or(false), r.get::<String>(2).ok().flatten().unwrap_or_default())),
        )
    })
    .ok()
    .flatten()
    .unwrap_or((false, String::new()));
    // (pg_worlds' admin: a superuser, worlds_admin, an agent with admin; read from its catalog)
    let admin = crate::storage::as_internal(|| crate::spi_calls::get_one::<bool>("SELECT worlds._is_admin()")).ok().flatten().unwrap_or(false);
    if !owns && !admin {
        crate::api::raise_with(
            "42501",
            format!("must be owner of table {name} to register or unregister its readers"),
            None,
            Some("In main the table's owner or an admin of pg_worlds (worlds_admin) does it; in a world, whoever may write there.".into()),
        );
    }
}

/// The table a statement names, as the session resolves it (its world's own tables too): 42P01 if none.
fn table_oid(table: &str) -> pg_sys::Oid {
    let oid = crate::storage::as_internal(|| {
        crate::storage::in_session_search_path(|| {
            crate::spi_calls::get_one_with_args::<pg_sys::Oid>(
                "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                &[table.into()],
            )
        })
    })
    .ok()
    .flatten();
    oid.unwrap_or_else(|| raise("42P01", format!("relation \"{table}\" does not exist")))
}

fn check_columns(relid: pg_sys::Oid, table: &str, columns: &[String]) {
    for c in columns {
        let exists = crate::storage::as_internal(|| {
            crate::spi_calls::get_one_with_args::<bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped)",
                &[relid.into(), c.as_str().into()],
            )
        })
        .ok()
        .flatten()
        .unwrap_or(false);
        if !exists {
            raise("42703", format!("column \"{c}\" of relation \"{table}\" does not exist"));
        }
    }
}

/// Writes the world's own entry for a key (world 0: main's).
fn put(world: i32, kind: Kind, name: &str, relid: pg_sys::Oid, columns: Option<&[String]>, removed: bool) {
    crate::storage::as_internal(|| {
        crate::spi_calls::run_with_args(
            "INSERT INTO worlds.reader (world, kind, name, tbl, columns, removed, by_role, at)
             VALUES ($1, $2, $3, coalesce($4::oid, 0)::regclass, $5, $6, session_user, clock_timestamp())
             ON CONFLICT (world, kind, name, tbl) DO UPDATE SET columns = excluded.columns, removed = excluded.removed,
                 by_role = excluded.by_role, at = excluded.at",
            &[world.into(), kind.sql().into(), name.into(), relid.into(), columns.map(|c| c.to_vec()).into(), removed.into()],
        )
    })
    .unwrap_or_else(|e| raise("XX000", format!("writing a reader: {e}")));
}

fn delete(world: i32, kind: Kind, name: &str, relid: pg_sys::Oid) {
    crate::storage::as_internal(|| {
        crate::spi_calls::run_with_args(
            "DELETE FROM worlds.reader WHERE world = $1 AND kind = $2 AND name = $3 AND tbl = coalesce($4::oid, 0)::regclass",
            &[world.into(), kind.sql().into(), name.into(), relid.into()],
        )
    })
    .unwrap_or_else(|e| raise("XX000", format!("removing a reader: {e}")));
}

/// Takes an entry away in `world` (0: main): its own row goes; one an ancestor has is covered by a
/// removed row of its own.
fn take_away(world: i32, chain: &[i32], e: &Entry) {
    delete(world, e.kind, &e.name, e.relid);
    if world != 0 && effective_of(&chain[1..]).iter().any(|a| a.kind == e.kind && a.name == e.name && a.relid == e.relid) {
        put(world, e.kind, &e.name, e.relid, None, true);
    }
}

/// REGISTER READER name ON table [(column, ...)]: no columns, every column. Adds the table to what it reads
/// (registering it again on the same table replaces its columns).
pub fn register(name: &str, table: &str, columns: &[String]) -> Vec<Value> {
    let world = session_world();
    let relid = table_oid(table);
    check_columns(relid, table, columns);
    require_here(world.as_ref(), Some(relid));
    let num = world.as_ref().map(|w| w.num).unwrap_or(0);
    put(num, Kind::Registered, name, relid, (!columns.is_empty()).then_some(columns), false);
    crate::governance::agents::audit("register reader", world.as_ref().map(|w| w.name.as_str()).unwrap_or("main"), None);
    vec![json!({ "tag": "REGISTER READER" })]
}

/// UNREGISTER READER name [ON table]: 42704 if it isn't registered (on that table).
pub fn unregister(name: &str, table: Option<&str>) -> Vec<Value> {
    let world = session_world();
    let relid = table.map(table_oid);
    let chain = chain_of(world.as_ref());
    let found: Vec<Entry> = effective_of(&chain)
        .into_iter()
        .filter(|e| e.kind == Kind::Registered && e.name == name && relid.is_none_or(|r| r == e.relid))
        .collect();
    if found.is_empty() {
        match table {
            Some(t) => raise("42704", format!("reader \"{name}\" is not registered on table {t}")),
            None => raise("42704", format!("reader \"{name}\" is not registered")),
        }
    }
    for e in &found {
        require_here(world.as_ref(), Some(e.relid));
        take_away(chain[0], &chain, e);
    }
    crate::governance::agents::audit("unregister reader", world.as_ref().map(|w| w.name.as_str()).unwrap_or("main"), None);
    vec![json!({ "tag": "UNREGISTER READER" })]
}

/// MARK READER name CRITICAL: a reader of any kind, by name (a client's role marks its every program).
pub fn mark(name: &str) -> Vec<Value> {
    let world = session_world();
    require_here(world.as_ref(), None);
    put(world.as_ref().map(|w| w.num).unwrap_or(0), Kind::Mark, name, pg_sys::Oid::INVALID, None, false);
    crate::governance::agents::audit("mark reader", world.as_ref().map(|w| w.name.as_str()).unwrap_or("main"), None);
    vec![json!({ "tag": "MARK READER" })]
}

/// UNMARK READER name: 42704 if it isn't marked.
pub fn unmark(name: &str) -> Vec<Value> {
    let world = session_world();
    let chain = chain_of(world.as_ref());
    let Some(e) = effective_of(&chain).into_iter().find(|e| e.kind == Kind::Mark && e.name == name) else {
        raise("42704", format!("reader \"{name}\" is not marked critical"))
    };
    require_here(world.as_ref(), None);
    take_away(chain[0], &chain, &e);
    crate::governance::agents::audit("unmark reader", world.as_ref().map(|w| w.name.as_str()).unwrap_or("main"), None);
    vec![json!({ "tag": "UNMARK READER" })]
}

/// One change between two sets of entries: (change, before, after).
pub struct Change {
    pub change: &'static str,
    pub before: Option<Entry>,
    pub after: Option<Entry>,
}

impl Change {
    /// As DIFF shows it: the table (a registered reader's), the reader's name as the row's id.
    pub fn diff_row(&self) -> Value {
        let e = self.after.as_ref().or(self.before.as_ref()).expect("a change has a side");
        let columns: Value = match e.kind {
            Kind::Registered => json!(e.columns.clone().unwrap_or_else(|| vec!["*".to_string()])),
            Kind::Mark => json!(["critical"]),
        };
        json!({
            "table": (e.kind == Kind::Registered).then(|| e.table.clone()),
            "id": e.name,
            "change": self.change,
            "before": self.before.as_ref().map(Entry::as_json),
            "after": self.after.as_ref().map(Entry::as_json),
            "columns": columns,
        })
    }

    /// As a merge's plan lists it (a table-level change: a schema change under a policy).
    pub fn describe(&self) -> String {
        let e = self.after.as_ref().or(self.before.as_ref()).expect("a change has a side");
        match e.kind {
            Kind::Registered => format!("{} {} on {}", self.change, e.name, e.table),
            Kind::Mark => format!("{} {}", self.change, e.name),
        }
    }
}

impl Change {
    /// As a dry run lists it, before the rows.
    pub fn dry_run_row(&self) -> Value {
        let e = self.after.as_ref().or(self.before.as_ref()).expect("a change has a side");
        json!({
            "table": (e.kind == Kind::Registered).then(|| e.table.clone()), "id": e.name, "outcome": self.change, "detail": self.describe(),
            "base": Value::Null, "ours": Value::Null, "theirs": Value::Null, "result": Value::Null, "postgres": Value::Null,
        })
    }
}

/// What turns set `a` into set `b`, in key order.
fn changes_between(a: &[Entry], b: &[Entry]) -> Vec<Change> {
    let key = |e: &Entry| (e.kind == Kind::Mark, e.name.clone(), e.relid.to_u32());
    let mut keys: Vec<(bool, String, u32)> = a.iter().chain(b.iter()).map(key).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        let before = a.iter().find(|e| key(e) == k).cloned();
        let after = b.iter().find(|e| key(e) == k).cloned();
        let mark = k.0;
        let change = match (&before, &after) {
            (Some(x), Some(y)) if x.same_as(y) => continue,
            (None, None) => continue,
            (_, Some(_)) if mark => "mark critical",
            (_, None) if mark => "unmark critical",
            (_, Some(_)) => "register reader",
            (_, None) => "unregister reader",
        };
        out.push(Change { change, before, after });
    }
    out
}

/// What a world changed of the registry since its fork: its own entries against what its parent has.
pub fn changes_of(world: &World) -> Vec<Change> {
    let chain = chain_of(Some(world));
    let own: Vec<Entry> = rows_of(&chain[..1]);
    if own.is_empty() {
        return Vec::new();
    }
    let parent = effective_of(&chain[1..]);
    // (the parent's entries under the keys the world has its own of)
    let touched = |e: &Entry| own.iter().any(|o| o.kind == e.kind && o.name == e.name && o.relid == e.relid);
    let before: Vec<Entry> = parent.into_iter().filter(|e| touched(e)).collect();
    let after: Vec<Entry> = effective_of(&chain).into_iter().filter(|e| touched(e)).collect();
    changes_between(&before, &after)
}

/// What turns world (or main) `a`'s registry into `b`'s (DIFF WORLD a TO b).
pub fn changes_between_worlds(a: Option<&World>, b: Option<&World>) -> Vec<Change> {
    changes_between(&effective(a), &effective(b))
}

/// MERGE: brings the world's own entries into its target (main: 0, or a world), each as the target
/// would have it made there; into main with main's rights for each (42501). A table the world made is
/// found in the target by its name. Returns how many it brought.
pub fn apply(world: &World, target: Option<&World>) -> usize {
    let changes = changes_of(world);
    let target_chain = chain_of(target);
    for c in &changes {
        let e = c.after.as_ref().or(c.before.as_ref()).expect("a change has a side");
        let relid = if e.kind == Kind::Registered { target_oid(e) } else { pg_sys::Oid::INVALID };
        if target.is_none() {
            crate::storage::as_session_user(|| require_in_main((e.kind == Kind::Registered).then_some(relid)));
        }
        match &c.after {
            Some(a) => put(target_chain[0], a.kind, &a.name, relid, a.columns.as_deref(), false),
            None => take_away(target_chain[0], &target_chain, &Entry { relid, ..e.clone() }),
        }
    }
    changes.len()
}

/// The table an entry names, as the merge's target has it: the same table, or (one the world made, in
/// its own namespace) the target's table of that name, made by the merge before this.
fn target_oid(e: &Entry) -> pg_sys::Oid {
    crate::storage::as_internal(|| {
        crate::spi_calls::get_one_with_args::<pg_sys::Oid>(
            "SELECT coalesce(t.oid, c.oid) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               LEFT JOIN pg_catalog.pg_namespace tn ON n.nspname ~ '^pg_w[0-9]+_' AND tn.nspname = regexp_replace(n.nspname, '^pg_w[0-9]+_', '')
               LEFT JOIN pg_catalog.pg_class t ON t.relnamespace = tn.oid AND t.relname = c.relname
              WHERE c.oid = $1",
            &[e.relid.into()],
        )
    })
    .ok()
    .flatten()
    .unwrap_or(e.relid)
}

/// The registered readers the session's world sees on one table.
pub fn registered_on(relid: pg_sys::Oid, entries: &[Entry]) -> Vec<Entry> {
    entries.iter().filter(|e| e.kind == Kind::Registered && e.relid == relid).cloned().collect()
}
