//! DIFF, MERGE (and its DRY RUN) and REBASE of a world into main.
//!
//! One gathering step serves all three: for every row the world changed (its own delta layer, O(rows
//! changed)), read `ours` (the world's row), `theirs` (main's row now) and `base` (main's row at the fork,
//! from history: the before-image of the first change main made to it after the fork, or after the
//! world's own last partial merge of it). The decision per row is `worlds_core::merge::decide`.
//!
//! A merge into main is DML on the real tables inside the caller's transaction, in foreign-key order:
//! constraints, the app's triggers and history capture all run as for any write. The phases, a file each
//! where they stand apart: resolve and gather and decide (here), lock (`lock.rs`: the rows main's side
//! holds, in one order, never waiting while holding one), apply (`apply.rs`), subtransactions
//! (`subxact.rs`), DIFF (`diff.rs`) and REBASE (`rebase.rs`).
use crate::api::{raise, raise_with};
use crate::storage::capture::MERGE_SOURCE;
use crate::storage::overlay::quote_ident;
use crate::storage::overlay::{base_of, with_world, world_by_num, World};
use crate::storage::{as_internal, relation_layout, Layout};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use std::collections::HashMap;
use worlds_core::merge::{changed_columns, decide, Decision, Outcome, Pick, Settle};

pub mod lock;
mod apply;
mod diff;
pub use apply::*;
pub use diff::*;
mod subxact;
pub(crate) use subxact::{in_subtransaction_keep, rolled_back};
use subxact::{in_subtransaction, trial};
mod rebase;
pub use rebase::rebase;

/// A live world as the engine needs it.
#[derive(Clone, Debug)]
pub struct WorldRow {
    pub num: i32,
    pub id: String,
    pub name: String,
    pub parent: Option<i32>,
    pub version: i64,
    pub fork_snapshot: Option<String>,
}

/// A world of that name already merged whole at version `v` (its last merge): the tag that merge
/// returned (an approval repeated, or made twice at once, applies once).
fn merged_at_version(name: &str, v: i64) -> Option<Vec<Value>> {
    if world_row("(name = $1 OR id = $1)", name.into()).is_some_and(|w| w.version != v) {
        return None;
    }
    crate::spi_calls::get_one_with_args::<i64>(
        "SELECT coalesce(e.rows, 0) FROM worlds.world w JOIN worlds.event e ON e.world = w.num
         WHERE (w.name = $1 OR w.id = $1) AND w.dropped IS NOT NULL AND w.version = $2 AND e.event LIKE 'merged into %'
           AND NOT EXISTS (SELECT 1 FROM worlds.world l WHERE l.name = w.name AND l.dropped IS NULL)
         ORDER BY e.seq DESC LIMIT 1",
        &[name.into(), v.into()],
    )
    .ok()
    .flatten()
    .map(|n| vec![serde_json::json!({ "tag": format!("MERGE {n}") })])
}

/// The world again, after waiting for its lock: another session may have merged or dropped it meanwhile
/// (3D000, by the name it was asked for).
fn resolve_again(world: &WorldRow) -> WorldRow {
    world_row("id = $1", world.id.as_str().into())
        .unwrap_or_else(|| raise("3D000", format!("world \"{}\" does not exist (it was merged or dropped meanwhile)", world.name)))
}

pub fn resolve_world(name: &str) -> WorldRow {
    // a world past its TTL is discarded first: it can't be merged, rebased or diffed any more
    if unsafe { !pg_sys::XactReadOnly } {
        crate::spi_calls::run("SELECT worlds._expire()").ok();
    }
    let row = world_row("(name = $1 OR id = $1) ORDER BY (name = $1) DESC", name.into());
    row.unwrap_or_else(|| {
        if name.contains('@') {
            raise(
                "0A000",
                format!("a world as it was ({name}) can only be read: in SWITCH, DIFF ... TO, or as the source of FORK WORLD / CREATE WORLD ... FROM"),
            );
        }
        raise("3D000", format!("world \"{name}\" does not exist"))
    })
}

/// The live world that `condition` (on worlds.world, with `$1`) finds first.
fn world_row(condition: &str, arg: DatumWithOid) -> Option<WorldRow> {
    Spi::connect(|c| {
        c.select(
            &format!(
                "SELECT num, id, name, parent, version, coalesce(fork_snapshot::text, '@' || fork_at::text) FROM worlds.world
                 WHERE dropped IS NULL AND {condition} LIMIT 1"
            ),
            None,
            &[arg],
        )
        .ok()
        .and_then(|r| {
            r.into_iter().next().map(|r| WorldRow {
                num: r.get(1).ok().flatten().unwrap_or(0),
                id: r.get(2).ok().flatten().unwrap_or_default(),
                name: r.get(3).ok().flatten().unwrap_or_default(),
                parent: r.get(4).ok().flatten(),
                version: r.get(5).ok().flatten().unwrap_or(0),
                fork_snapshot: r.get(6).ok().flatten(),
            })
        })
    })
}

/// SHOW BRANCHES' `changes`: the rows a world changed since its fork, counted as DIFF lists them (a row
/// inserted and deleted again, or changed back, is no change). O(rows the world wrote).
#[pg_extern(name = "_changes")]
fn changes_since_fork(world_num: i32) -> Option<i64> {
    as_internal(|| {
        let world = world_row("num = $1", world_num.into()).filter(|w| w.num != 0)?;
        Some(own_changes(&world).iter().map(|t| t.rows.iter().filter(|r| r.base != r.ours).count() as i64).sum())
    })
}

/// One row the world changed, with the three sides.
#[derive(Clone, Debug)]
pub struct Changed {
    pub key: String,
    /// the key's columns as a JSON object (the row itself for a table without a key)
    pub key_obj: Value,
    pub base: Option<Value>,
    pub ours: Option<Value>,
    pub theirs: Option<Value>,
}

pub struct TableChanges {
    pub layout: std::rc::Rc<Layout>,
    pub name: String,
    pub rows: Vec<Changed>,
}

pub fn live_columns(relid: pg_sys::Oid) -> Vec<String> {
    table_columns(relid, false)
}

/// The columns an INSERT may give (not generated ones).
pub fn insertable_columns(relid: pg_sys::Oid) -> Vec<String> {
    table_columns(relid, true)
}

/// The table's columns in order; `insertable_only` leaves out generated columns (Postgres computes them).
fn table_columns(relid: pg_sys::Oid, insertable_only: bool) -> Vec<String> {
    Spi::connect(|c| {
        c.select(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             AND (NOT $2 OR attgenerated = '') ORDER BY attnum",
            None,
            &[relid.into(), insertable_only.into()],
        )
        .map(|r| r.into_iter().filter_map(|r| r.get::<String>(1).ok().flatten()).collect())
        .unwrap_or_default()
    })
}

pub fn json_object_expr(alias: &str, cols: &[String]) -> String {
    // jsonb_build_object takes at most 100 arguments: concatenate chunks of 50 columns
    let parts: Vec<String> = cols
        .chunks(50)
        .map(|chunk| {
            format!(
                "jsonb_build_object({})",
                chunk.iter().map(|c| format!("{}, {alias}.{}", quote_literal(c), quote_ident(c))).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    if parts.is_empty() {
        "'{}'::jsonb".into()
    } else {
        parts.join(" || ")
    }
}

pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub(crate) fn key_text_expr(layout: &Layout, alias: &str) -> String {
    match layout.key_columns.len() {
        0 => format!("ROW({alias}.*)::text"),
        1 => format!("{alias}.{}::text", quote_ident(&layout.key_columns[0])),
        _ => format!(
            "ROW({})::text",
            layout.key_columns.iter().map(|c| format!("{alias}.{}", quote_ident(c))).collect::<Vec<_>>().join(", ")
        ),
    }
}

pub fn key_match(layout: &Layout, a: &str, b: &str) -> String {
    layout
        .key_columns
        .iter()
        .map(|c| format!("{a}.{} = {b}.{}", quote_ident(c), quote_ident(c)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// Every tracked table, with its layout.
pub fn tracked_layouts() -> Vec<std::rc::Rc<Layout>> {
    let tabnos: Vec<i32> = Spi::connect(|c| {
        c.select("SELECT tabno FROM worlds.tables ORDER BY relid::oid", None, &[])
            .map(|r| r.into_iter().filter_map(|r| r.get::<i32>(1).ok().flatten()).collect())
            .unwrap_or_default()
    });
    tabnos.into_iter().map(relation_layout).collect()
}

/// The rows `world` changed in one table, with base, ours and theirs, in key order.
pub fn gather(layout: &std::rc::Rc<Layout>, world: &WorldRow) -> TableChanges {
    let table = layout.table_name.clone();
    let delta = layout.delta_name.clone();
    let history = layout.history_name.clone();
    let cols = live_columns(layout.relid);
    let snapshot = world.fork_snapshot.clone().unwrap_or_default();
    let rows: Vec<Changed> = if layout.key_kind == b'r' {
        // a table without a key: the rows the world added (less those it removed again), and main's
        // physical rows it removed (by tid); theirs is that row as main has it now, followed through main's
        // updates since the fork (its current tid is where a merge deletes it), or none when main deleted it
        let row_text = format!("ROW({})", cols.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", "));
        let sql = format!(
            "SELECT {row_text}::text, {dobj}, NULL::text, NULL::jsonb FROM {delta} d
              WHERE d._w_world = $1 AND NOT d._w_del
                AND NOT EXISTS (SELECT 1 FROM {delta} c WHERE c._w_world = $1 AND c._w_of = d._w_dseq)
             UNION ALL
             SELECT {row_text}::text, {dobj}, cur.tid::text,
                    CASE WHEN cur.gone THEN NULL ELSE (SELECT {tobj} FROM ONLY {table} t WHERE t.ctid = cur.tid) END
               FROM {delta} d,
                    LATERAL (WITH RECURSIVE chain(tid, depth) AS (
                                 SELECT d._w_base_tid, 0
                                 UNION ALL
                                 SELECT h._w_new_tid, c.depth + 1 FROM chain c
                                   JOIN {history} h ON h._w_old_tid = c.tid AND h._w_op = 'U' AND h._w_new_tid IS NOT NULL AND {after_fork})
                             SELECT c.tid, EXISTS (SELECT 1 FROM {history} h WHERE h._w_old_tid = c.tid AND h._w_op = 'D' AND {after_fork}) AS gone
                             FROM chain c ORDER BY c.depth DESC LIMIT 1) cur
              WHERE d._w_world = $1 AND d._w_del AND d._w_base_tid IS NOT NULL",
            dobj = json_object_expr("d", &cols),
            tobj = json_object_expr("t", &cols),
            after_fork = if snapshot.starts_with('@') {
                "h._w_at > substr($2, 2)::timestamptz"
            } else {
                "h._w_xid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $2::pg_snapshot)"
            },
        );
        Spi::connect(|c| {
            c.select(&sql, None, &[world.num.into(), snapshot.clone().into()])
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                .map(|r| {
                    let row = r.get::<JsonB>(2).ok().flatten().map(|j| j.0);
                    let key = r.get::<String>(1).ok().flatten().unwrap_or_default();
                    match r.get::<String>(3).ok().flatten() {
                        // removed: base is the row as the world saw it, ours nothing
                        Some(tid) => Changed {
                            key,
                            key_obj: serde_json::json!({ "_w_ctid": tid }),
                            base: row,
                            ours: None,
                            theirs: r.get::<JsonB>(4).ok().flatten().map(|j| j.0),
                        },
                        None => Changed { key, key_obj: row.clone().unwrap_or(Value::Null), base: None, ours: row, theirs: None },
                    }
                })
                .collect()
        })
    } else {
        let cols_of = |alias: &str| layout.key_columns.iter().map(|c| format!("{alias}.{}", quote_ident(c))).collect::<Vec<_>>().join(", ");
        let kcols = cols_of("d");
        let after_fork = |alias: &str| {
            if snapshot.starts_with('@') {
                format!("{alias}._w_at > substr($2, 2)::timestamptz")
            } else {
                format!("{alias}._w_xid >= pg_snapshot_xmin($2::pg_snapshot) AND NOT pg_visible_in_snapshot({alias}._w_xid, $2::pg_snapshot)")
            }
        };
        // main didn't touch the table since the fork (the common case): base is theirs for every row, and
        // the look into history can go
        let main_changed = {
            // the same parameters as the gather below ($2: the fork point)
            let probe = format!("SELECT EXISTS (SELECT 1 FROM {history} h WHERE {})", after_fork("h"));
            crate::spi_calls::get_one_with_args::<bool>(&probe, &[world.num.into(), snapshot.clone().into()]).ok().flatten().unwrap_or(true)
        };
        // main's first change of each key since the fork, after the world's own last partial merge of it
        // (only worlds partly merged before have one): one pass over history since the fork, joined to the
        // world's rows by key (history has no index on the key: capture would pay for one on every write)
        let (first_change, join_first, history_entry) = if main_changed {
            let (own_join, own_filter) = if partly_merged(world) {
                (
                    format!(
                        "LEFT JOIN (SELECT {h2}, max(h2._w_hseq) AS m FROM {history} h2 WHERE {} AND h2._w_src = $3 GROUP BY {h2}) own ON {}",
                        after_fork("h2"),
                        key_match(layout, "own", "h"),
                        h2 = cols_of("h2"),
                    ),
                    "h._w_hseq > coalesce(own.m, 0)".to_string(),
                )
            } else {
                (String::new(), "$3::text IS NOT NULL".to_string())
            };
            (
                format!(
                    ", f AS (SELECT DISTINCT ON ({hk}) {hk}, jsonb_build_object('op', h._w_op::text, 'row', {hobj}) AS _w_e
                             FROM {history} h {own_join} WHERE {} AND {own_filter} ORDER BY {hk}, h._w_hseq)",
                    after_fork("h"),
                    hk = cols_of("h"),
                    hobj = json_object_expr("h", &cols),
                ),
                format!("LEFT JOIN f ON {}", key_match(layout, "f", "o")),
                "f._w_e",
            )
        } else {
            (String::new(), String::new(), "NULL::jsonb")
        };
        let sql = format!(
            "WITH o AS (
                SELECT DISTINCT ON ({kcols}) {kcols}, {ktext} AS _w_k, d._w_del, {dobj} AS _w_row
                FROM {delta} d WHERE d._w_world = $1 ORDER BY {kcols}, d._w_dseq DESC){first_change}
             SELECT o._w_k,
                    CASE WHEN o._w_del THEN NULL ELSE o._w_row END,
                    (SELECT to_jsonb(t.*) FROM {table} t WHERE {tmatch}),
                    {history_entry},
                    {kobj}
             FROM o {join_first} ORDER BY {okeys}",
            kobj = json_object_expr("o", &layout.key_columns),
            ktext = key_text_expr(layout, "d"),
            dobj = json_object_expr("d", &cols),
            tmatch = key_match(layout, "t", "o"),
            okeys = layout.key_columns.iter().map(|c| format!("o.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
        );
        Spi::connect(|c| {
            c.select(&sql, None, &[world.num.into(), snapshot.clone().into(), world.id.clone().into()])
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                .map(|r| {
                    let theirs = r.get::<JsonB>(3).ok().flatten().map(|j| j.0);
                    let entry = r.get::<JsonB>(4).ok().flatten().map(|j| j.0);
                    let base = match entry {
                        None => theirs.clone(),
                        Some(e) if e["op"] == "I" => None,
                        Some(e) => Some(e["row"].clone()),
                    };
                    Changed {
                        key: r.get::<String>(1).ok().flatten().unwrap_or_default(),
                        key_obj: r.get::<JsonB>(5).ok().flatten().map(|j| j.0).unwrap_or(Value::Null),
                        ours: r.get::<JsonB>(2).ok().flatten().map(|j| j.0),
                        theirs,
                        base,
                    }
                })
                .collect()
        })
    };
    TableChanges { layout: layout.clone(), name: table, rows }
}

fn partly_merged(world: &WorldRow) -> bool {
    crate::spi_calls::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT 1 FROM worlds.event WHERE world = $1 AND event LIKE 'merged part into %')",
        &[world.num.into()],
    )
    .ok()
    .flatten()
    .unwrap_or(true)
}

/// The table name as the spec prints it in ids ('orders/7'): unqualified when in the search path.
/// A table as Postgres names it on the session's search_path (`orders`; `app."Orders"` where it isn't on
/// the path or needs quotes), so a name DIFF or a DRY RUN prints pastes back into ONLY KEYS and RESOLVE.
/// Remembered per (name, search_path): plans name a table once per row.
pub fn short_name(table: &str) -> String {
    thread_local! {
        static NAMES: std::cell::RefCell<HashMap<(String, String), String>> = std::cell::RefCell::new(HashMap::new());
    }
    let path = unsafe {
        let p = pg_sys::namespace_search_path;
        if p.is_null() { String::new() } else { std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned() }
    };
    let key = (table.to_string(), path);
    if let Some(name) = NAMES.with(|n| n.borrow().get(&key).cloned()) {
        return name;
    }
    let name = crate::storage::in_session_search_path(|| crate::spi_calls::get_one_with_args::<String>("SELECT to_regclass($1)::text", &[table.into()]))
        .ok()
        .flatten()
        .unwrap_or_else(|| table.rsplit('.').next().unwrap_or(table).trim_matches('"').to_string());
    NAMES.with(|n| {
        let mut n = n.borrow_mut();
        if n.len() > 10_000 {
            n.clear();
        }
        n.insert(key, name.clone());
    });
    name
}

fn change_kind(before: &Option<Value>, after: &Option<Value>) -> &'static str {
    match (before.is_some(), after.is_some()) {
        (false, true) => "insert",
        (true, false) => "delete",
        _ => "update",
    }
}

/// Everything the world changed, table by table (only tables it touched).
pub fn world_changes(world: &WorldRow) -> Vec<TableChanges> {
    tracked_layouts()
        .iter()
        .map(|l| gather(l, world))
        .filter(|t| !t.rows.is_empty())
        .collect()
}

/// What a world changed since its fork, as DIFF shows it: for a world of main, as gathered (base: main as
/// of the fork); for a world of a world, its rows against that parent as of the fork.
pub fn own_changes(world: &WorldRow) -> Vec<TableChanges> {
    let mut tables = world_changes(world);
    if world.parent.unwrap_or(0) == 0 {
        return tables;
    }
    let base = world_by_num(world.num).as_ref().and_then(base_of);
    for t in tables.iter_mut().filter(|t| t.layout.key_kind != b'r') {
        let keys: Vec<Value> = t.rows.iter().map(|r| r.key_obj.clone()).collect();
        let before = with_world(base.clone(), || read_rows(&t.layout, &keys));
        for r in t.rows.iter_mut() {
            r.base = before.get(&r.key_obj.to_string()).cloned();
        }
    }
    tables
}

#[derive(Default, Clone)]
pub struct MergeRequest {
    pub world: Option<String>,
    pub into: Option<String>,
    pub only_tables: Option<Vec<String>>,
    pub only_keys: Option<Vec<String>>,
    pub using_ours: Option<bool>,
    pub by_columns: bool,
    pub resolve: Vec<(String, Pick)>,
    pub confirm: bool,
    pub confirm_deletes: Option<i64>,
    pub target: Option<i64>,
    pub at_version: Option<i64>,
    pub dry_run: bool,
}

/// One row of a plan: the three sides and what to do with it.
pub struct Planned {
    pub table: String,
    pub layout: std::rc::Rc<Layout>,
    pub merge_by_columns: bool,
    pub row: Changed,
    pub decision: Decision,
}

fn regclass_of(name: &str) -> pg_sys::Oid {
    crate::storage::in_session_search_path(|| crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[name.into()]))
        .ok()
        .flatten()
        .unwrap_or_else(|| raise("42P01", format!("relation \"{name}\" does not exist")))
}

/// 't/1' or 't/(1,abc)' -> (table oid, key text). The key must have the table's key's shape: as many
/// parts as key columns (a value of an integer column must be an integer).
fn parse_row_ref(r: &str) -> (pg_sys::Oid, String) {
    let not_a_row = || -> ! { raise("22023", format!("'{r}' is not a row: write 'table/id', or 'table/(a,b)' for a key of several columns")) };
    let Some((t, k)) = r.split_once('/') else { not_a_row() };
    if t.is_empty() || k.is_empty() {
        not_a_row();
    }
    let relid = regclass_of(t);
    if let Some(&tabno) = crate::storage::tracked_tables().get(&relid) {
        let layout = relation_layout(tabno);
        let n = layout.key_columns.len();
        let parts = if n > 1 { record_parts(k) } else { Some(vec![k.to_string()]) };
        let fits = parts.is_some_and(|p| {
            p.len() == n && (layout.key_kind != b'i' || p.iter().all(|v| v.trim().parse::<i64>().is_ok()))
        });
        if n > 0 && !fits {
            raise(
                "22023",
                format!("'{r}' is not a row of {t}: its key is {}", if n == 1 { layout.key_columns[0].clone() } else { format!("({})", layout.key_columns.join(", ")) }),
            );
        }
    }
    (relid, k.to_string())
}

/// A row given to RESOLVE: an object of the table's columns, carrying the key it resolves (22023 otherwise).
fn check_resolve_row(relid: pg_sys::Oid, key: &str, row: &Value) {
    let Some(obj) = row.as_object() else {
        raise("22023", format!("RESOLVE of row {key}: the row must be a JSON object of the table's columns"));
    };
    let columns = live_columns(relid);
    if let Some(unknown) = obj.keys().find(|c| !columns.contains(c)) {
        raise("22023", format!("RESOLVE of row {key}: the table has no column \"{unknown}\""));
    }
    if let Some(&tabno) = crate::storage::tracked_tables().get(&relid) {
        let layout = relation_layout(tabno);
        let given = key_texts(&layout, std::slice::from_ref(row)).pop().unwrap_or_default();
        if !layout.key_columns.is_empty() && given != key {
            raise("22023", format!("RESOLVE of row {key}: the row given has key {given} (a row resolves its own key)"));
        }
    }
}

/// The parts of a key written as a record, `(1,"a,b")`: None when it isn't one.
fn record_parts(k: &str) -> Option<Vec<String>> {
    let inner = k.strip_prefix('(')?.strip_suffix(')')?;
    let (mut parts, mut cur, mut quoted, mut chars) = (Vec::new(), String::new(), false, inner.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            '\\' => cur.extend(chars.next()),
            ',' if !quoted => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    (!quoted).then_some(parts)
}

fn target_fingerprint(plan: &[Planned]) -> i64 {
    // FNV-1a over what the merge saw of main for the rows it settles, kept to 53 bits (exact in JSON)
    let mut h: u64 = 0xcbf29ce484222325;
    for p in plan {
        for b in p.layout.table_name.bytes().chain(p.row.key.bytes()).chain(p.row.theirs.as_ref().map(|t| t.to_string()).unwrap_or_default().bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    (h & ((1u64 << 53) - 1)) as i64
}

pub fn merge(req: MergeRequest) -> Vec<Value> {
    if !req.dry_run {
        crate::api::refuse_in_transaction("MERGE WORLD");
    }
    if req.confirm && req.at_version.is_some() {
        raise("42601", "AT VERSION can't be given with CONFIRM");
    }
    if let Some(n) = req.confirm_deletes.filter(|n| *n < 0) {
        raise("22023", format!("CONFIRM DELETES {n}: a count of deleted rows can't be negative"));
    }
    let session_world = crate::guc::current_world_setting().to_string_lossy().into_owned();
    as_internal(|| {
        let name = match &req.world {
            Some(n) => n.clone(),
            None if session_world == "main" || session_world.is_empty() => raise(
                "0A000",
                "MERGE WORLD names no world and the session is in main, which has no parent: name the world to merge (MERGE WORLD name), or quote a world named like one of MERGE's words (MERGE WORLD \"ours\")",
            ),
            None => session_world.clone(),
        };
        // an approval given again (AT VERSION n of a world already merged at version n) returns what the
        // first returned, applying nothing twice
        if let Some(done) = req.at_version.filter(|_| !req.dry_run).and_then(|v| merged_at_version(&name, v)) {
            return done;
        }
        let world = resolve_world(&name);
        if world.num == 0 {
            raise("0A000", "main has no parent to merge into");
        }
        // its rights (governance/agents.rs): a dry run reads; a merge needs merge (or merge_own), and
        // INTO a world writes that world
        let into = req.into.as_ref().map(|n| resolve_world(n));
        if req.dry_run {
            crate::governance::agents::require("read", Some(world.num));
        } else {
            crate::governance::agents::require("merge", Some(world.num));
            if let Some(i) = into.as_ref().filter(|i| i.num != 0) {
                crate::governance::agents::require("write", Some(i.num));
            }
        }
        if let Some(i) = &into {
            if i.num == world.num {
                raise("22023", format!("MERGE WORLD {} INTO itself", world.name));
            }
        }
        let target_num = into.as_ref().map(|i| i.num).unwrap_or(world.parent.unwrap_or(0));
        // a world target is read and written through its overlay; main through its tables and history
        let target_world = world_by_num(target_num);
        let target_name = target_world.as_ref().map(|t| t.name.clone()).unwrap_or_else(|| "main".into());
        // the write locks of this world (its rows stay as they are while it merges) and of a world merged
        // into, in world-number order (lock.rs: the order of all locks)
        // (a dry run changes nothing: it takes no lock, so it also runs in a read-only transaction)
        if !req.dry_run {
            lock::worlds(&[world.num, target_num]);
        }
        let world = match (req.at_version, world_row("id = $1", world.id.as_str().into())) {
            (_, Some(w)) => w,
            // (a concurrent approval of the same version merged it while this one waited for its lock)
            (Some(v), None) if !req.dry_run => match merged_at_version(&name, v) {
                Some(done) => return done,
                None => resolve_again(&world),
            },
            _ => resolve_again(&world),
        };
        if let Some(v) = req.at_version {
            if v != world.version {
                raise(
                    "55000",
                    format!("world {} is at version {}, not {v}: it was written to or partly merged since; nothing was merged", world.name, world.version),
                );
            }
        }
        // which tables, and lock them (fixed order: relid) before reading main
        let only_tables: Option<Vec<pg_sys::Oid>> = req.only_tables.as_ref().map(|ts| ts.iter().map(|t| regclass_of(t)).collect());
        if let Some(ts) = &only_tables {
            // (a table worlds don't track has no rows in a world: naming it is a mistake, not MERGE 0)
            let tracked = crate::storage::tracked_tables();
            if ts.is_empty() {
                raise("22023", "ONLY TABLES needs at least one table");
            }
            if let Some((name, _)) = req.only_tables.iter().flatten().zip(ts).find(|(_, r)| !tracked.contains_key(r)) {
                raise("22023", format!("ONLY TABLES ({name}): it is not a table pg_worlds tracks, so no world changes it"));
            }
        }
        let only_keys: Option<Vec<(pg_sys::Oid, String)>> = req.only_keys.as_ref().map(|ks| ks.iter().map(|k| parse_row_ref(k)).collect());
        let mut layouts: Vec<std::rc::Rc<Layout>> = tracked_layouts()
            .into_iter()
            .filter(|l| only_tables.as_ref().map(|o| o.contains(&l.relid)).unwrap_or(true))
            .filter(|l| only_keys.as_ref().map(|o| o.iter().any(|(r, _)| *r == l.relid)).unwrap_or(true))
            .collect();
        layouts.retain(|l| world_touched(l, &world));
        if !req.dry_run && target_world.is_none() {
            // main's rows this world changed, held until commit; everything below reads on snapshots
            // taken after they are held, so what is decided on is what is applied to
            lock::keyless_tables(&layouts);
            lock::main_rows(&layouts, world.num, lock::Hold::Write);
        }
        let resolve: HashMap<(pg_sys::Oid, String), Pick> =
            req.resolve.iter().map(|(r, p)| (parse_row_ref(r), p.clone())).collect();
        for ((relid, key), pick) in &resolve {
            if let Pick::Row(row) = pick {
                check_resolve_row(*relid, key, row);
            }
        }
        let mut plan: Vec<Planned> = Vec::new();
        let base_world = world_by_num(world.num).and_then(|w| base_of(&w));
        for l in &layouts {
            let mut t = gather(l, &world);
            other_sides(l, &mut t.rows, base_world.as_ref(), target_world.as_ref());
            let mbc = merge_by_columns(l);
            for row in t.rows {
                if let Some(keys) = &only_keys {
                    if !keys.iter().any(|(r, k)| *r == l.relid && *k == row.key) {
                        continue;
                    }
                }
                let settle = Settle {
                    resolve: resolve.get(&(l.relid, row.key.clone())).cloned(),
                    by_columns: req.by_columns || mbc,
                    using_ours: req.using_ours,
                };
                let given_row = matches!(settle.resolve, Some(Pick::Row(_)));
                let mut decision = decide(row.base.as_ref(), row.ours.as_ref(), row.theirs.as_ref(), &settle);
                if let (true, Some(Value::Object(result))) = (given_row, decision.result.as_mut()) {
                    // a RESOLVE row's columns left out are NULL, as the merge writes them: shown so
                    for c in live_columns(l.relid) {
                        result.entry(c).or_insert(Value::Null);
                    }
                }
                plan.push(Planned { table: t.name.clone(), layout: l.clone(), merge_by_columns: mbc, row, decision });
            }
        }
        // a table without a key has no row identity to tell a merged row from an unmerged one: once a world
        // merged into this target (in part, or whole while it stays open), its rows there would be applied again
        if let Some(p) = plan.iter().find(|p| p.layout.key_kind == b'r') {
            let before = crate::spi_calls::get_one_with_args::<bool>(
                "SELECT EXISTS (SELECT 1 FROM worlds.event WHERE world = $1 AND event IN ('merged into ' || $2, 'merged part into ' || $2))",
                &[world.num.into(), target_name.as_str().into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false);
            if before {
                crate::api::raise_with(
                    "0A000",
                    format!(
                        "world {} was merged into {target_name} before, and table {} has no key: its rows would be applied there again; nothing was merged",
                        world.name,
                        short_name(&p.table)
                    ),
                    None,
                    Some("Merge the rest with ONLY TABLES leaving that table out, or make its change again in a new world.".into()),
                );
            }
        }
        if req.dry_run {
            // the plan shows whole rows: the role must may read them
            let mut checked: Vec<pg_sys::Oid> = Vec::new();
            for p in &plan {
                if !checked.contains(&p.layout.relid) {
                    require_read(&p.layout);
                    checked.push(p.layout.relid);
                }
            }
        }
        let fingerprint = target_fingerprint(&plan);
        if req.dry_run && !WHOLE_MERGE_PROBE.with(|q| q.get()) {
            // (SHOW REVIEWS judging a queued world runs this dry run for its reasons: no NOTICE then)
            if !crate::governance::policies::checking() {
                pgrx::notice!(
                "{}: version {}; to merge exactly what this dry run saw, add AT VERSION {} TARGET {}",
                world.name, world.version, world.version, fingerprint
            );
            }
            let mut rows = dry_run_rows(&plan);
            let blocked = |why: String| {
                serde_json::json!({
                    "table": null, "id": null, "outcome": "blocked", "detail": why,
                    "base": null, "ours": null, "theirs": null, "result": null, "postgres": null,
                })
            };
            if let Some(t) = req.target.filter(|t| *t != fingerprint) {
                // the merge itself would refuse (55000): so does the plan
                rows.push(blocked(format!("main changed since the dry run that named TARGET {t} (it is now TARGET {fingerprint})")));
                return rows;
            }
            // the rules of the policy the merging agent keeps to (governance/policies.rs)
            let why = crate::governance::policies::refusals(&plan, &world, target_world.is_none());
            if !why.is_empty() {
                rows.push(blocked(format!("needs a person: {}", why.join("; "))));
            }
            // with no conflict, the merge is tried and rolled back: a constraint (or the app's trigger) that
            // would refuse it shows as a last row, blocked. A read-only transaction can't try it: the plan
            // is shown without that row
            if !plan.iter().any(|p| matches!(p.decision.outcome, Outcome::Conflict(_))) && unsafe { !pg_sys::XactReadOnly } {
                let why = trial(|| {
                    match &target_world {
                        None => apply(&plan, &world),
                        Some(t) => apply_into_world(&plan, &world, t),
                    };
                });
                if let Some(why) = why {
                    rows.push(blocked(why));
                }
            }
            return rows;
        }
        if let Some(t) = req.target {
            if t != fingerprint {
                raise("55000", format!("main changed since the dry run that named TARGET {t} (it is now TARGET {fingerprint}); nothing was merged"));
            }
        }
        let conflicts: Vec<String> = plan
            .iter()
            .filter(|p| matches!(p.decision.outcome, Outcome::Conflict(_)))
            .map(|p| format!("{}/{}", short_name(&p.table), p.row.key))
            .collect();
        if !conflicts.is_empty() {
            let shown = conflicts.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            let more = if conflicts.len() > 10 { format!(" and {} more", conflicts.len() - 10) } else { String::new() };
            raise_with(
                "40001",
                format!("merging {} conflicts: rows changed on both sides: {shown}{more}; nothing was merged", world.name),
                None,
                Some("Settle them with RESOLVE, BY COLUMNS or USING OURS | THEIRS, or REBASE WORLD first.".into()),
            );
        }
        // the gates (governance/): a person confirms a policy's deletes; an agent's merge that breaks its
        // policy's rules waits for a person
        crate::governance::policies::confirm_deletes(&plan, &world, req.confirm_deletes);
        let why = crate::governance::policies::refusals(&plan, &world, target_world.is_none());
        if !why.is_empty() {
            crate::governance::policies::refuse(&world, &why);
        }
        let deletes = plan
            .iter()
            .filter(|p| !matches!(p.decision.outcome, Outcome::Conflict(_)) && p.decision.result.is_none() && p.row.theirs.is_some())
            .count() as i64;
        let partial = only_tables.is_some() || only_keys.is_some();
        let run = || match &target_world {
            None => apply(&plan, &world),
            Some(t) => apply_into_world(&plan, &world, t),
        };
        let applied = if partial {
            // a reference or unique value a partial merge breaks: a row tied to one ONLY leaves out (22023)
            // when merging the whole world would not break it; else the data's own clash (23505 / 23503),
            // as for a whole merge
            match in_subtransaction(run).map_err(|e| *e) {
                Ok(n) => n,
                Err(pgrx::pg_sys::panic::CaughtError::PostgresError(r))
                    if matches!(r.sql_error_code(), PgSqlErrorCode::ERRCODE_FOREIGN_KEY_VIOLATION | PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION) =>
                {
                    let whole = MergeRequest { only_tables: None, only_keys: None, dry_run: true, target: None, at_version: None, ..req.clone() };
                    // the same clash (same message) in the whole merge: the data's own; another clash elsewhere
                    // in the world says nothing of this one
                    let whole_blocked = {
                        let previous = WHOLE_MERGE_PROBE.with(|q| q.replace(true));
                        // (the whole plan's trial may raise the clash rather than show it as its blocked row)
                        let whole_error = match in_subtransaction(|| merge(whole)) {
                            Ok(rows) => rows.iter().find(|b| b["outcome"] == "blocked").and_then(|b| b["detail"].as_str().map(str::to_string)),
                            Err(e) => match *e {
                                pgrx::pg_sys::panic::CaughtError::PostgresError(x) => Some(x.message().to_string()),
                                _ => None,
                            },
                        };
                        WHOLE_MERGE_PROBE.with(|q| q.set(previous));
                        whole_error.is_some_and(|d| d.starts_with(r.message()))
                    };
                    if whole_blocked {
                        pgrx::pg_sys::panic::CaughtError::PostgresError(r).rethrow();
                    }
                    raise_with(
                        "22023",
                        format!("a row merged is tied to a row ONLY leaves out: {}; nothing was merged", r.message()),
                        r.detail().map(|d| d.to_string()),
                        Some("Include the rows it is tied to in ONLY TABLES / ONLY KEYS, or merge the whole world.".into()),
                    )
                }
                Err(e) => e.rethrow(),
            }
        } else {
            run()
        };
        let target_name = target_name.as_str();
        Spi::connect_mut(|c| {
            if partial {
                c.update("UPDATE worlds.world SET version = version + 1 WHERE num = $1", None, &[world.num.into()]).ok();
                c.update(
                    "INSERT INTO worlds.event (world, event, rows) VALUES ($1, 'merged part into ' || $3, $4), ($5, 'merged part of ' || $2, $4)",
                    None,
                    &[world.num.into(), world.name.clone().into(), target_name.into(), (applied as i64).into(), target_num.into()],
                )
                .ok();
            } else {
                c.update(
                    "INSERT INTO worlds.event (world, event, rows) VALUES ($1, 'merged into ' || $3, $4), ($5, 'merged ' || $2, $4)",
                    None,
                    &[world.num.into(), world.name.clone().into(), target_name.into(), (applied as i64).into(), target_num.into()],
                )
                .ok();
            }
        });
        crate::governance::reviews::leave(world.num, "merged");
        // a whole merge lands the world's effects: sent by this transaction into main, moved into a world
        let effects = if partial { 0 } else { crate::governance::outbox::land(world.num, target_num) };
        if !partial && target_num == world.parent.unwrap_or(0) {
            // a whole merge into the parent (named with INTO or not) ends the world (unless worlds were
            // forked from it)
            Spi::connect_mut(|c| {
                // its row FOR UPDATE: a CREATE WORLD forking it key-share locks that row, so a fork under
                // way is waited for (and seen below), and one that comes after waits and finds it gone
                c.update("SELECT 1 FROM worlds.world WHERE num = $1 FOR UPDATE", None, &[world.num.into()]).ok();
                c.update(
                    "SELECT worlds._discard(w) FROM worlds.world w WHERE num = $1
                       AND NOT EXISTS (SELECT 1 FROM worlds.world c WHERE c.parent = w.num AND c.dropped IS NULL)",
                    None,
                    &[world.num.into()],
                )
                .ok();
            });
        }
        crate::governance::agents::audit_merge("merge", &world.name, Some(applied as i64), Some(deletes), Some(target_name), Some(effects));
        vec![serde_json::json!({ "tag": format!("MERGE {applied}") })]
    })
}

/// For merges that don't go straight into main from a world of main: the parent as of the fork (when the
/// parent is a world) and the target now (when the target is a world), read through their overlays.
fn other_sides(l: &Layout, rows: &mut [Changed], base_world: Option<&World>, target_world: Option<&World>) {
    if l.key_kind == b'r' || rows.is_empty() {
        return;
    }
    let keys: Vec<Value> = rows.iter().map(|r| r.key_obj.clone()).collect();
    if let Some(b) = base_world {
        let seen = with_world(Some(b.clone()), || read_rows(l, &keys));
        for r in rows.iter_mut() {
            r.base = seen.get(&r.key_obj.to_string()).cloned();
        }
    }
    if let Some(t) = target_world {
        let seen = with_world(Some(t.clone()), || read_rows(l, &keys));
        for r in rows.iter_mut() {
            r.theirs = seen.get(&r.key_obj.to_string()).cloned();
        }
    }
}

/// The rows with these keys as the current reader (a world under `with_world`, or main) sees them,
/// by key (the key object's JSON text).
pub fn read_rows(l: &Layout, keys: &[Value]) -> HashMap<String, Value> {
    let cols = live_columns(l.relid);
    let table = &l.table_name;
    let sql = format!(
        "SELECT {}, {} FROM jsonb_populate_recordset(NULL::{table}, $1) k JOIN {table} t ON {}",
        json_object_expr("t", &l.key_columns),
        json_object_expr("t", &cols),
        key_match(l, "t", "k")
    );
    Spi::connect(|c| {
        c.select(&sql, None, &[JsonB(Value::Array(keys.to_vec())).into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .filter_map(|r| {
                let k = r.get::<JsonB>(1).ok().flatten()?.0;
                let row = r.get::<JsonB>(2).ok().flatten()?.0;
                Some((k.to_string(), row))
            })
            .collect()
    })
}

fn world_touched(l: &Layout, world: &WorldRow) -> bool {
    let sql = format!("SELECT EXISTS (SELECT 1 FROM {} WHERE _w_world = $1)", l.delta_name);
    crate::spi_calls::get_one_with_args::<bool>(&sql, &[world.num.into()]).ok().flatten().unwrap_or(false)
}

fn merge_by_columns(l: &Layout) -> bool {
    crate::spi_calls::get_one_with_args::<bool>("SELECT merge_by_columns FROM worlds.tables WHERE tabno = $1", &[l.tabno.into()])
        .ok()
        .flatten()
        .unwrap_or(false)
}

fn dry_run_rows(plan: &[Planned]) -> Vec<Value> {
    // summary per table: what the merge does to it (conflicts not counted), destructive first
    let mut per_table: Vec<(String, Vec<DiffRow>)> = Vec::new();
    for p in plan {
        // every table the plan has rows of gets its summary, even when all of them conflict or change nothing
        let name = short_name(&p.table);
        let entry = match per_table.iter_mut().find(|(t, _)| *t == name) {
            Some(e) => e,
            None => {
                per_table.push((name.clone(), Vec::new()));
                per_table.last_mut().unwrap()
            }
        };
        if matches!(p.decision.outcome, Outcome::Conflict(_)) || p.decision.result == p.row.theirs {
            continue;
        }
        entry.1.push((p.row.key.clone(), p.row.theirs.clone(), p.decision.result.clone()));
    }
    per_table.sort_by(|a, b| counts(&b.1).0.cmp(&counts(&a.1).0).then(a.0.cmp(&b.0)));
    let mut out = Vec::new();
    for (t, rows) in &per_table {
        let (d, u, i) = counts(rows);
        out.push(serde_json::json!({
            "table": t, "id": null, "outcome": "summary",
            "detail": format!("{} deleted, {} updated, {} inserted", fmt_count(d), fmt_count(u), fmt_count(i)),
            "base": null, "ours": null, "theirs": null, "result": null, "postgres": null,
        }));
    }
    let order: Vec<String> = per_table.iter().map(|(t, _)| t.clone()).collect();
    let deletes = |p: &Planned| p.row.theirs.is_some() && p.decision.result.is_none() && !matches!(p.decision.outcome, Outcome::Conflict(_));
    let mut sorted: Vec<&Planned> = plan.iter().collect();
    sorted.sort_by_key(|p| order.iter().position(|t| *t == short_name(&p.table)).unwrap_or(usize::MAX));
    for p in sorted.iter().filter(|p| deletes(p)) {
        out.push(plan_row(p, "DELETE: the merge deletes this row".into()));
    }
    for p in sorted.iter().filter(|p| !deletes(p)) {
        let detail = match &p.decision.outcome {
            Outcome::Conflict(d) => d.clone(),
            Outcome::ByColumns => format!(
                "combined column by column{}",
                if p.merge_by_columns { " (the table merges by columns)" } else { "" }
            ),
            // the parent already has the row as the merge would leave it (both sides made the same change)
            Outcome::Apply if p.decision.result == p.row.theirs => "no change: the parent already has this row".to_string(),
            Outcome::Apply => change_kind(&p.row.theirs, &p.decision.result).to_string(),
            other => other.label().to_string(),
        };
        out.push(plan_row(p, detail));
    }
    out
}

fn plan_row(p: &Planned, detail: String) -> Value {
    let conflict = matches!(p.decision.outcome, Outcome::Conflict(_));
    serde_json::json!({
        "table": short_name(&p.table), "id": p.row.key, "outcome": p.decision.outcome.label(), "detail": detail,
        "base": p.row.base, "ours": p.row.ours, "theirs": p.row.theirs,
        "result": if conflict { Value::Null } else { p.decision.result.clone().unwrap_or(Value::Null) },
        // the spec's row in an attached folder; pg_worlds is Postgres itself: no separate copy to show
        "postgres": null,
    })
}

thread_local! {
    /// Set while a partial merge that failed asks whether the whole merge would fail too (its dry run
    /// prints no notice of its own)
    static WHOLE_MERGE_PROBE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub struct RebaseRequest {
    pub world: Option<String>,
    pub using_ours: Option<bool>,
    pub by_columns: bool,
    pub resolve: Vec<(String, Pick)>,
    pub at_version: Option<i64>,
}
