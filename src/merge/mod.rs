//! DIFF, MERGE (and its DRY RUN) and REBASE of a world into main.
//!
//! One gathering step serves all three: for every row the world changed (its own delta layer, O(rows
//! changed)), read `ours` (the world's row), `theirs` (main's row now) and `base` (main's row at the fork,
//! from history: the before-image of the first change main made to it after the fork, or after the
//! world's own last partial merge of it). The decision per row is `worlds_core::merge::decide`.
//!
//! A merge into main is DML on the real tables inside the caller's transaction, in foreign-key order:
//! constraints, the app's triggers and history capture all run as for any write. The tables it changes
//! are locked SHARE ROW EXCLUSIVE in relid order first (concurrent writers of main wait, concurrent merges
//! queue in one order: no lost update, no deadlock).
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

/// The world again, after waiting for its lock: another session may have merged or dropped it meanwhile
/// (3D000, by the name it was asked for).
fn resolve_again(world: &WorldRow) -> WorldRow {
    world_row("id = $1", world.id.as_str().into())
        .unwrap_or_else(|| raise("3D000", format!("world \"{}\" does not exist (it was merged or dropped meanwhile)", world.name)))
}

pub fn resolve_world(name: &str) -> WorldRow {
    // a world past its TTL is discarded first: it can't be merged, rebased or diffed any more
    if unsafe { !pg_sys::XactReadOnly } {
        Spi::run("SELECT worlds._expire()").ok();
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
            Spi::get_one_with_args::<bool>(&probe, &[world.num.into(), snapshot.clone().into()]).ok().flatten().unwrap_or(true)
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
    Spi::get_one_with_args::<bool>(
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
    let name = Spi::get_one_with_args::<String>("SELECT to_regclass($1)::text", &[table.into()])
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

fn counts(rows: &[(String, Option<Value>, Option<Value>)]) -> (usize, usize, usize) {
    let mut c = (0, 0, 0);
    for (_, b, a) in rows {
        match change_kind(b, a) {
            "delete" => c.0 += 1,
            "update" => c.1 += 1,
            _ => c.2 += 1,
        }
    }
    c
}

fn fmt_count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

// ---------------------------------------------------------------- DIFF

pub struct DiffRequest {
    pub world: Option<String>,
    pub as_sql: bool,
    pub limit: Option<i64>,
}

/// DIFF [WORLD a]: what the world changed since its fork. Destructive first: a NOTICE with what each
/// table loses (tables that delete most first), then deleted rows, then the rest, each part in key order.
pub fn diff(req: DiffRequest) -> Vec<Value> {
    as_internal(|| {
        let name = req.world.clone().unwrap_or_else(|| crate::guc::current_world_setting().to_string_lossy().into_owned());
        if name.contains('@') {
            raise_with(
                "0A000",
                format!("DIFF compares a world with its fork point: '{name}' is a moment, not a world"),
                None,
                Some(format!("Compare a moment with DIFF WORLD '{name}' TO name.")),
            );
        }
        let world = resolve_world(&name);
        if world.num == 0 {
            raise("0A000", "DIFF compares a world with its fork point: main has none; name a world (DIFF WORLD name)");
        }
        let tables: Vec<DiffTable> = own_changes(&world)
            .into_iter()
            .map(|t| {
                let rows = t.rows.into_iter().filter(|r| r.base != r.ours).map(|r| (r.key, r.base, r.ours)).collect::<Vec<_>>();
                (t.name, t.layout, rows)
            })
            .filter(|t| !t.2.is_empty())
            .collect();
        for t in &tables {
            require_read(&t.1);
        }
        render_diff(&world.name, tables, req.as_sql, req.limit)
    })
}

/// 42501 unless the role running the statement may read every row and column of the table, as a SELECT
/// of it in main would show them: DIFF and DRY RUN show whole rows, so a role kept from the table, from
/// some of its columns (column grants) or from some of its rows (row-level security) is refused, not shown
/// them.
fn require_read(layout: &Layout) {
    let (select, rls) = crate::storage::as_session_user(|| {
        Spi::connect(|c| {
            c.select("SELECT has_table_privilege($1, 'SELECT'), row_security_active($1)", None, &[layout.relid.into()])
                .ok()
                .and_then(|r| r.into_iter().next().map(|r| (r.get::<bool>(1).ok().flatten(), r.get::<bool>(2).ok().flatten())))
        })
    })
    .map(|(s, r)| (s.unwrap_or(false), r.unwrap_or(true)))
    .unwrap_or((false, true));
    let table = short_name(&layout.table_name);
    if !select {
        raise("42501", format!("permission denied for table {table}"));
    }
    if rls {
        crate::api::raise_with(
            "42501",
            format!("permission denied for table {table}: its rows are shown whole, and row-level security keeps some of them from this role"),
            None,
            Some("Compare it as the table's owner or a role that bypasses row-level security.".into()),
        );
    }
}

/// One row of a diff: its key, the row before and the row after (None: absent).
type DiffRow = (String, Option<Value>, Option<Value>);
type DiffTable = (String, std::rc::Rc<Layout>, Vec<DiffRow>);

/// DIFF's output: a NOTICE with what each table loses (tables that delete most first), then deleted rows,
/// then the rest, each part in key order; or the statements that make the change (AS SQL).
fn render_diff(label: &str, mut tables: Vec<DiffTable>, as_sql_out: bool, limit: Option<i64>) -> Vec<Value> {
    if limit.is_some_and(|n| n < 0) {
        raise("2201W", "LIMIT must not be negative");
    }
    tables.sort_by(|a, b| counts(&b.2).0.cmp(&counts(&a.2).0).then(a.0.cmp(&b.0)));
    for (_, layout, rows) in tables.iter_mut().filter(|t| t.1.key_columns.is_empty()) {
        // a table without a key: the whole row is the key, so rows go in the order of their values
        let order = live_columns(layout.relid);
        let values = |row: &Option<Value>| {
            row.as_ref().map(|r| order.iter().map(|c| r[c].clone()).collect::<Vec<_>>()).unwrap_or_default()
        };
        rows.sort_by(|x, y| {
            let (a, b) = (values(if x.2.is_some() { &x.2 } else { &x.1 }), values(if y.2.is_some() { &y.2 } else { &y.1 }));
            a.iter().zip(b.iter()).map(|(p, q)| compare_value(p, q)).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    if !tables.is_empty() {
        let summary = tables
            .iter()
            .map(|(t, _, rows)| {
                let (d, u, i) = counts(rows);
                format!("{}: {} deleted, {} updated, {} inserted", short_name(t), fmt_count(d), fmt_count(u), fmt_count(i))
            })
            .collect::<Vec<_>>()
            .join("; ");
        pgrx::notice!("{}: {}", label, summary);
    }
    let mut out = Vec::new();
    // deleted rows first, then the rest; a page (LIMIT) stays in key order, so the next can start after
    // its last key
    let passes: &[Option<bool>] = if limit.is_some() { &[None] } else { &[Some(true), Some(false)] };
    for &pass in passes {
        for (table, layout, rows) in &tables {
            let order = live_columns(layout.relid);
            let columns = if as_sql_out { column_types(layout.relid) } else { ColumnTypes::new() };
            for (key, before, after) in rows {
                if pass.is_some_and(|deletes| (change_kind(before, after) == "delete") != deletes) {
                    continue;
                }
                if as_sql_out {
                    // (nothing to say for a row whose only changes are computed on the other side)
                    let sql = as_sql(table, layout, &order, &columns, before, after);
                    if !sql.is_empty() {
                        out.push(serde_json::json!({ "sql": sql }));
                    }
                } else {
                    let cols = in_table_order(changed_columns(before.as_ref(), after.as_ref()), &order);
                    out.push(serde_json::json!({
                        "table": short_name(table), "id": key, "change": change_kind(before, after),
                        "before": before, "after": after, "columns": cols,
                    }));
                }
            }
        }
    }
    if let Some(n) = limit {
        out.truncate(n.max(0) as usize);
    }
    out
}

/// DIFF WORLD a TO b: what turns a into b, for any two worlds (main included). The rows compared are the
/// ones either side's chain changed, and the ones main changed since either side forked: O(rows changed).
pub fn diff_to(from: &str, to: &str, as_sql_out: bool, limit: Option<i64>) -> Vec<Value> {
    as_internal(|| {
        let side = |name: &str| -> Option<World> {
            if let Some((n, when)) = name.split_once('@') {
                return Some(crate::storage::overlay::past_of(n, when));
            }
            let w = resolve_world(name);
            world_by_num(w.num)
        };
        let (a, b) = (side(from), side(to));
        let worlds: Vec<i32> = a.iter().chain(b.iter()).flat_map(|w| w.chain.clone()).collect();
        let snapshots: Vec<String> = a.iter().chain(b.iter()).map(|w| w.main_snapshot.clone()).collect();
        let mut tables: Vec<DiffTable> = Vec::new();
        for l in tracked_layouts().iter().filter(|l| l.key_kind != b'r') {
            let keys = candidate_keys(l, &worlds, &snapshots);
            if keys.is_empty() {
                continue;
            }
            let before = with_world(a.clone(), || read_rows(l, &keys));
            let after = with_world(b.clone(), || read_rows(l, &keys));
            let mut rows: Vec<(Value, Option<Value>, Option<Value>)> = keys
                .into_iter()
                .filter_map(|k| {
                    let t = k.to_string();
                    let (x, y) = (before.get(&t).cloned(), after.get(&t).cloned());
                    (x != y).then_some((k, x, y))
                })
                .collect();
            rows.sort_by(|x, y| compare_keys(&x.0, &y.0, &l.key_columns));
            let rows: Vec<(String, Option<Value>, Option<Value>)> =
                {
                    let texts = key_texts(l, &rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>());
                    rows.into_iter().zip(texts).map(|((_, x, y), t)| (t, x, y)).collect()
                };
            if !rows.is_empty() {
                tables.push((l.table_name.clone(), l.clone(), rows));
            }
        }
        for l in tracked_layouts().iter().filter(|l| l.key_kind == b'r') {
            let rows = keyless_difference(l, &a, &b, &worlds);
            if !rows.is_empty() {
                tables.push((l.table_name.clone(), l.clone(), rows));
            }
        }
        for t in &tables {
            require_read(&t.1);
        }
        // AS SQL runs in order on the other side: tables and columns are made before the rows that need
        // them, and dropped after the rows that go with them
        let (drops, mut out): (Vec<Value>, Vec<Value>) = schema_changes(from, to, as_sql_out).into_iter().partition(|c| {
            let sql = c["sql"].as_str().unwrap_or_default().to_ascii_uppercase();
            as_sql_out && (sql.starts_with("DROP ") || (sql.starts_with("ALTER TABLE") && sql.contains(" DROP COLUMN ")))
        });
        out.extend(render_diff(&format!("{from} to {to}"), tables, as_sql_out, limit));
        out.extend(drops);
        if let Some(n) = limit {
            out.truncate(n.max(0) as usize);
        }
        out
    })
}

/// DIFF a TO b of a table without a key: the rows as multisets, each side read whole and counted by value
/// (O(table): such a table has no key to find the changed rows by). One row of output per copy more or
/// less. Skipped when neither side's chain wrote the table and main never changed it.
fn keyless_difference(l: &Layout, a: &Option<World>, b: &Option<World>, worlds: &[i32]) -> Vec<DiffRow> {
    let touched = Spi::get_one_with_args::<bool>(
        &format!(
            "SELECT EXISTS (SELECT 1 FROM {} d WHERE d._w_world = ANY($1)) OR EXISTS (SELECT 1 FROM {} h)",
            l.delta_name, l.history_name
        ),
        &[worlds.to_vec().into()],
    )
    .ok()
    .flatten()
    .unwrap_or(true);
    if !touched {
        return Vec::new();
    }
    let sql = format!("SELECT ROW(r.*)::text, to_jsonb(r.*), count(*) FROM {} r GROUP BY 1, 2", l.table_name);
    let count = |side: &Option<World>| -> HashMap<String, (Value, i64)> {
        with_world(side.clone(), || {
            Spi::connect(|c| {
                c.select(&sql, None, &[])
                    .map(|rows| {
                        rows.filter_map(|r| {
                            let text = r.get::<String>(1).ok().flatten()?;
                            let row = r.get::<JsonB>(2).ok().flatten()?.0;
                            Some((text, (row, r.get::<i64>(3).ok().flatten().unwrap_or(0))))
                        })
                        .collect()
                    })
                    .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            })
        })
    };
    let (before, after) = (count(a), count(b));
    let mut out = Vec::new();
    for (text, (row, n)) in &before {
        let m = after.get(text).map(|x| x.1).unwrap_or(0);
        out.extend((m..*n).map(|_| (text.clone(), Some(row.clone()), None)));
    }
    for (text, (row, m)) in &after {
        let n = before.get(text).map(|x| x.1).unwrap_or(0);
        out.extend((n..*m).map(|_| (text.clone(), None, Some(row.clone()))));
    }
    out
}

/// DIFF between moments: the tables' schema changes between their times (a world's schema is main's
/// now), before the rows, as DIFF rows (`id` null) or statements.
fn schema_changes(from: &str, to: &str, as_sql_out: bool) -> Vec<Value> {
    let time_of = |side: &str| -> Option<String> {
        side.contains('@').then(|| {
            Spi::get_one_with_args::<String>("SELECT m.at::text FROM worlds._moment_of($1) m", &[side.into()]).ok().flatten().unwrap_or_default()
        })
    };
    let (a, b) = (time_of(from), time_of(to));
    if a.is_none() && b.is_none() {
        return Vec::new();
    }
    Spi::connect(|c| {
        c.select(
            "SELECT \"table\", change, columns, sql FROM worlds._schema_changes(coalesce($1::timestamptz, now()), coalesce($2::timestamptz, now()))",
            None,
            &[a.into(), b.into()],
        )
        .map(|rows| {
            rows.flat_map(|r| {
                if as_sql_out {
                    let statements = r.get::<Vec<String>>(4).ok().flatten().unwrap_or_default();
                    statements.into_iter().map(|s| serde_json::json!({ "sql": s })).collect::<Vec<_>>()
                } else {
                    vec![serde_json::json!({
                        "table": r.get::<String>(1).ok().flatten(), "id": Value::Null, "change": r.get::<String>(2).ok().flatten(),
                        "before": Value::Null, "after": Value::Null,
                        "columns": r.get::<pgrx::JsonB>(3).ok().flatten().map(|j| j.0),
                    })]
                }
            })
            .collect()
        })
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
    })
}

/// Keys of one table that any of these worlds wrote, or main changed since any of these snapshots.
fn candidate_keys(l: &Layout, worlds: &[i32], snapshots: &[String]) -> Vec<Value> {
    let kobj_d = json_object_expr("d", &l.key_columns);
    let kobj_h = json_object_expr("h", &l.key_columns);
    let sql = format!(
        "SELECT DISTINCT k FROM (
             SELECT {kobj_d} AS k FROM {} d WHERE d._w_world = ANY($1)
             UNION ALL
             SELECT {kobj_h} FROM {} h, unnest($2::text[]) AS s(snap)
             WHERE CASE WHEN s.snap LIKE '@%' THEN h._w_at > substr(s.snap, 2)::timestamptz
                        ELSE h._w_xid >= pg_snapshot_xmin(s.snap::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, s.snap::pg_snapshot) END
         ) x",
        l.delta_name, l.history_name
    );
    Spi::connect(|c| {
        c.select(&sql, None, &[worlds.to_vec().into(), snapshots.to_vec().into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .filter_map(|r| r.get::<JsonB>(1).ok().flatten().map(|j| j.0))
            .collect()
    })
}

fn compare_keys(a: &Value, b: &Value, cols: &[String]) -> std::cmp::Ordering {
    cols.iter().map(|c| compare_value(&a[c], &b[c])).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
}

/// JSON values in key order: numbers by value, anything else by its text.
fn compare_value(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().partial_cmp(&y.as_f64()).unwrap_or(std::cmp::Ordering::Equal),
        (x, y) => x.to_string().cmp(&y.to_string()),
    }
}

/// Keys as the spec prints them, `7` or `(1,"a b")` for several columns: as Postgres writes them (the
/// same text DIFF WORLD and MERGE give), one query for all.
fn key_texts(layout: &Layout, keys: &[Value]) -> Vec<String> {
    if keys.is_empty() {
        return Vec::new();
    }
    let sql = format!(
        "SELECT {} FROM jsonb_populate_recordset(NULL::{}, $1) WITH ORDINALITY AS r ORDER BY r.ordinality",
        key_text_expr(layout, "r"),
        layout.table_name
    );
    Spi::connect(|c| {
        c.select(&sql, None, &[pgrx::JsonB(Value::Array(keys.to_vec())).into()])
            .map(|rows| rows.map(|r| r.get::<String>(1).ok().flatten().unwrap_or_default()).collect())
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
    })
}

fn sql_literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quote_literal(s),
        other => format!("{}::jsonb", quote_literal(&other.to_string())),
    }
}

/// A statement that makes the same change on the other side. Values go through Postgres's input
/// functions as literals, so every type round-trips.
/// Column names in the table's order (names it no longer has last, by name).
fn in_table_order(mut cols: Vec<String>, order: &[String]) -> Vec<String> {
    cols.sort_by_key(|c| (order.iter().position(|o| o == c).unwrap_or(usize::MAX), c.clone()));
    cols
}

/// Each column of a table: its type, and whether it is an identity column GENERATED ALWAYS.
type ColumnTypes = HashMap<String, (String, bool)>;

fn column_types(relid: pg_sys::Oid) -> ColumnTypes {
    Spi::connect(|c| {
        c.select(
            "SELECT attname::text, format_type(atttypid, atttypmod), attidentity = 'a' FROM pg_attribute
             WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped",
            None,
            &[relid.into()],
        )
        .map(|r| {
            r.filter_map(|r| Some((r.get::<String>(1).ok()??, (r.get::<String>(2).ok()??, r.get::<bool>(3).ok()??))))
                .collect()
        })
        .unwrap_or_default()
    })
}

fn as_sql(table: &str, layout: &Layout, order: &[String], columns: &ColumnTypes, before: &Option<Value>, after: &Option<Value>) -> String {
    let value = |row: &Value, c: &str| sql_value(table, columns.get(c).map(|t| t.0.as_str()), c, &row[c]);
    // the row by its key; a table without a key: one physical row with these values (duplicates are
    // removed one statement each)
    let row_where = |row: &Value| {
        if layout.key_columns.is_empty() {
            let cols = in_table_order(row.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default(), order);
            format!(
                "ctid = (SELECT ctid FROM {table} WHERE {} LIMIT 1)",
                cols.iter().map(|c| format!("{} IS NOT DISTINCT FROM {}", quote_ident(c), value(row, c))).collect::<Vec<_>>().join(" AND ")
            )
        } else {
            layout.key_columns.iter().map(|k| format!("{} = {}", quote_ident(k), value(row, k))).collect::<Vec<_>>().join(" AND ")
        }
    };
    // generated columns are computed by the other side; identity columns GENERATED ALWAYS take the value
    // only with OVERRIDING SYSTEM VALUE, and can't be updated at all
    let always: Vec<String> = columns.iter().filter(|(_, (_, a))| *a).map(|(c, _)| c.clone()).collect();
    let writable = |cols: Vec<String>| cols.into_iter().filter(|c| !layout.generated.contains(c)).collect::<Vec<_>>();
    match (before, after) {
        (None, Some(a)) => {
            let cols = writable(in_table_order(a.as_object().unwrap().keys().cloned().collect(), order));
            format!(
                "INSERT INTO {table} ({}){} VALUES ({});",
                cols.iter().map(|k| quote_ident(k)).collect::<Vec<_>>().join(", "),
                if cols.iter().any(|c| always.contains(c)) { " OVERRIDING SYSTEM VALUE" } else { "" },
                cols.iter().map(|k| value(a, k)).collect::<Vec<_>>().join(", ")
            )
        }
        (Some(b), None) => format!("DELETE FROM {table} WHERE {};", row_where(b)),
        (Some(b), Some(a)) => {
            let cols: Vec<String> =
                writable(in_table_order(changed_columns(Some(b), Some(a)), order)).into_iter().filter(|c| !always.contains(c)).collect();
            if cols.is_empty() {
                return String::new();
            }
            format!(
                "UPDATE {table} SET {} WHERE {};",
                cols.iter().map(|c| format!("{} = {}", quote_ident(c), value(a, c))).collect::<Vec<_>>().join(", "),
                row_where(b)
            )
        }
        (None, None) => String::new(),
    }
}

/// A column's value as a literal of the column's type. Scalars as JSON has them (Postgres's input
/// functions take them); arrays and composite values in Postgres's own text form, cast to the column's
/// type (their JSON form is another type's input).
fn sql_value(table: &str, typ: Option<&str>, column: &str, v: &Value) -> String {
    match (typ, v) {
        (_, Value::Null) => "NULL".into(),
        // a json value of any kind is its JSON text (a string keeps its quotes: '"u"'::jsonb)
        (Some(t @ ("jsonb" | "json")), v) => format!("{}::{t}", quote_literal(&v.to_string())),
        (_, Value::Array(_) | Value::Object(_)) => match typ {
            None => sql_literal(v),
            Some(typ) => {
                let text = Spi::get_one_with_args::<String>(
                    &format!("SELECT (jsonb_populate_record(NULL::{table}, $1)).{}::text", quote_ident(column)),
                    &[pgrx::JsonB(serde_json::json!({ column: v })).into()],
                )
                .ok()
                .flatten()
                .unwrap_or_default();
                format!("{}::{typ}", quote_literal(&text))
            }
        },
        _ => sql_literal(v),
    }
}

// ---------------------------------------------------------------- MERGE

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
    Spi::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[name.into()])
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
        let world = resolve_world(&name);
        if world.num == 0 {
            raise("0A000", "main has no parent to merge into");
        }
        let into = req.into.as_ref().map(|n| resolve_world(n));
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
        let world = resolve_again(&world);
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
            let before = Spi::get_one_with_args::<bool>(
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
            pgrx::notice!(
                "{}: version {}; to merge exactly what this dry run saw, add AT VERSION {} TARGET {}",
                world.name, world.version, world.version, fingerprint
            );
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
    Spi::get_one_with_args::<bool>(&sql, &[world.num.into()]).ok().flatten().unwrap_or(false)
}

fn merge_by_columns(l: &Layout) -> bool {
    Spi::get_one_with_args::<bool>("SELECT merge_by_columns FROM worlds.tables WHERE tabno = $1", &[l.tabno.into()])
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

/// Runs f in a subtransaction: kept when it succeeds, rolled back (and the error returned, not raised)
/// when it fails, so the caller may still query before it decides what to raise.
fn in_subtransaction<R>(f: impl FnOnce() -> R) -> Result<R, Box<pgrx::pg_sys::panic::CaughtError>> {
    use pgrx::pg_sys::panic::CaughtError;
    unsafe {
        let cxt = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = pgrx::PgTryBuilder::new(move || Ok(f())).catch_others(|e| Err(Box::new(e))).execute();
        match outcome {
            Ok(r) => {
                pg_sys::ReleaseCurrentSubTransaction();
                pg_sys::MemoryContextSwitchTo(cxt);
                pg_sys::CurrentResourceOwner = owner;
                Ok(r)
            }
            Err(e) => {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                pg_sys::MemoryContextSwitchTo(cxt);
                pg_sys::CurrentResourceOwner = owner;
                Err(Box::new(match *e {
                    CaughtError::ErrorReport(r) => CaughtError::PostgresError(r),
                    other => other,
                }))
            }
        }
    }
}

/// Runs f in a subtransaction, kept (its locks with it) when `keep` says so of what it returned, else
/// rolled back; an error rolls it back and is raised again.
pub(crate) fn in_subtransaction_keep<R>(f: impl FnOnce() -> R, keep: impl FnOnce(&R) -> bool) -> R {
    unsafe {
        let cxt = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = pgrx::PgTryBuilder::new(move || Ok(f())).catch_others(|e| Err(Box::new(e))).execute();
        match outcome {
            Ok(r) => {
                if keep(&r) {
                    pg_sys::ReleaseCurrentSubTransaction();
                } else {
                    pg_sys::RollbackAndReleaseCurrentSubTransaction();
                }
                pg_sys::MemoryContextSwitchTo(cxt);
                pg_sys::CurrentResourceOwner = owner;
                r
            }
            Err(e) => {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                pg_sys::MemoryContextSwitchTo(cxt);
                pg_sys::CurrentResourceOwner = owner;
                e.rethrow()
            }
        }
    }
}

/// Runs f in a subtransaction that is always rolled back: None when it succeeds, the reason when the
/// data refuses it (a constraint, class 23, or the app's trigger raising). Errors that are not about the
/// merge's rows (cancel, resources, serialization, internal) are raised as they are.
fn trial(f: impl FnOnce()) -> Option<String> {
    unsafe {
        let cxt = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = pgrx::PgTryBuilder::new(move || {
            f();
            Ok(())
        })
        .catch_others(|e| Err(Box::new(e)))
        .execute();
        pg_sys::RollbackAndReleaseCurrentSubTransaction();
        pg_sys::MemoryContextSwitchTo(cxt);
        pg_sys::CurrentResourceOwner = owner;
        use pgrx::pg_sys::panic::CaughtError;
        // (an error pg_worlds raised itself, such as a merge into a world breaking a foreign key, comes back
        // as an ErrorReport; Postgres's own as a PostgresError)
        let outcome = outcome.map_err(|e| match *e {
            CaughtError::ErrorReport(r) => CaughtError::PostgresError(r),
            other => other,
        });
        match outcome {
            Ok(()) => None,
            Err(pgrx::pg_sys::panic::CaughtError::PostgresError(r)) if is_constraint(&r) => {
                Some(match r.detail() {
                    Some(d) => format!("{} ({d})", r.message()),
                    None => r.message().to_string(),
                })
            }
            Err(pgrx::pg_sys::panic::CaughtError::PostgresError(r)) if refuses_rows(&r) => {
                Some(format!("the merge would fail: {} (SQLSTATE {})", r.message(), sqlstate_text(r.sql_error_code() as i32)))
            }
            Err(e) => e.rethrow(),
        }
    }
}

/// An error of class 23 (integrity constraint violation).
fn is_constraint(r: &pgrx::pg_sys::panic::ErrorReportWithLevel) -> bool {
    use PgSqlErrorCode::*;
    matches!(
        r.sql_error_code(),
        ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION
            | ERRCODE_RESTRICT_VIOLATION
            | ERRCODE_NOT_NULL_VIOLATION
            | ERRCODE_FOREIGN_KEY_VIOLATION
            | ERRCODE_UNIQUE_VIOLATION
            | ERRCODE_CHECK_VIOLATION
            | ERRCODE_EXCLUSION_VIOLATION
    )
}

/// An error a merge's rows can meet besides a constraint (an app trigger's RAISE, a bad value): not one of
/// cancel or shutdown (57), resources (53, 54), transaction rollback (40), internal (XX) or system (58).
fn refuses_rows(r: &pgrx::pg_sys::panic::ErrorReportWithLevel) -> bool {
    let class = &sqlstate_text(r.sql_error_code() as i32)[..2];
    !matches!(class, "57" | "53" | "54" | "40" | "XX" | "58")
}

/// A SQLSTATE as its five characters (Postgres packs them six bits each).
fn sqlstate_text(code: i32) -> String {
    (0..5).map(|i| (((code >> (6 * i)) & 0x3f) as u8 + b'0') as char).collect()
}

/// Foreign-key depth of each table among the tracked ones: referenced tables first.
fn fk_depth() -> HashMap<pg_sys::Oid, i32> {
    Spi::connect(|c| {
        c.select(
            "WITH RECURSIVE d(rel, depth) AS (
                 SELECT relid::oid, 0 FROM worlds.tables
                 UNION ALL
                 SELECT c.conrelid, d.depth + 1 FROM pg_constraint c JOIN d ON c.confrelid = d.rel
                 WHERE c.contype = 'f' AND c.conrelid <> c.confrelid AND d.depth < 50)
             SELECT rel, max(depth) FROM d GROUP BY rel",
            None,
            &[],
        )
        .map(|r| {
            r.into_iter()
                .filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok()??, r.get::<i32>(2).ok()??)))
                .collect()
        })
        .unwrap_or_default()
    })
}

/// Applies the settled rows to main: deletes children-first, then inserts and updates parents-first,
/// one set-based statement per table and kind. Returns the rows applied.
fn apply(plan: &[Planned], world: &WorldRow) -> usize {
    apply_plan(plan, Some(world.id.clone()))
}

/// Writes each planned row's result where the row is now `theirs` (the reader's table: main, or a world
/// under `with_world`). History records `source` as where the changes came from.
pub fn apply_plan(plan: &[Planned], source: Option<String>) -> usize {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            MERGE_SOURCE.with(|s| *s.borrow_mut() = None);
        }
    }
    MERGE_SOURCE.with(|s| *s.borrow_mut() = source);
    let _g = Guard;
    let depth = fk_depth();
    let mut by_table: Vec<(pg_sys::Oid, &std::rc::Rc<Layout>, String)> = Vec::new();
    for p in plan {
        if !by_table.iter().any(|(r, _, _)| *r == p.layout.relid) {
            by_table.push((p.layout.relid, &p.layout, p.table.clone()));
        }
    }
    by_table.sort_by_key(|(r, _, _)| (depth.get(r).copied().unwrap_or(0), r.to_u32()));
    let mut applied = 0usize;
    let rows_of = |relid: pg_sys::Oid, pred: &dyn Fn(&Planned) -> bool| -> Vec<Value> {
        plan.iter()
            .filter(|p| p.layout.relid == relid && p.decision.result != p.row.theirs && pred(p))
            .map(|p| p.decision.result.clone().or_else(|| p.row.theirs.clone()).unwrap_or(Value::Null))
            .collect()
    };
    // deletes, children first
    for (relid, layout, table) in by_table.iter().rev() {
        let rows = rows_of(*relid, &|p| p.decision.result.is_none());
        if rows.is_empty() {
            continue;
        }
        let sql = if layout.key_kind == b'r' {
            // by physical row (its current tid), and only while it still holds what the plan saw there
            if crate::storage::overlay::override_active() && crate::storage::overlay::routing_world().is_some() {
                raise("0A000", format!("merging rows of {table} (a table without a primary key) that a world removed into another world is not supported yet"));
            }
            let rows: Vec<Value> = plan
                .iter()
                .filter(|p| p.layout.relid == *relid && p.decision.result.is_none() && p.row.theirs.is_some() && p.row.key_obj.get("_w_ctid").is_some())
                .map(|p| serde_json::json!({ "ctid": p.row.key_obj["_w_ctid"], "row": p.row.theirs }))
                .collect();
            let sql = format!(
                "DELETE FROM ONLY {table} t USING jsonb_array_elements($1) _w_e WHERE t.ctid = (_w_e->>'ctid')::tid AND {} = _w_e->'row'",
                json_object_expr("t", &live_columns(*relid))
            );
            applied += run_dml(&sql, rows);
            continue;
        } else {
            format!(
                "DELETE FROM {table} t USING jsonb_populate_recordset(NULL::{table}, $1) r WHERE {}",
                key_match(layout, "t", "r")
            )
        };
        applied += run_dml(&sql, rows);
    }
    for (relid, layout, table) in by_table.iter() {
        let cols = table_columns(*relid, true);
        let col_list = cols.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
        let inserts = rows_of(*relid, &|p| p.decision.result.is_some() && p.row.theirs.is_none());
        let insert = |param: usize| {
            format!(
                "INSERT INTO {table} ({col_list}) OVERRIDING SYSTEM VALUE SELECT {col_list} FROM jsonb_populate_recordset(NULL::{table}, ${param})"
            )
        };
        let updates = rows_of(*relid, &|p| p.decision.result.is_some() && p.row.theirs.is_some());
        let set_cols: Vec<&String> = cols.iter().filter(|c| !layout.key_columns.contains(c)).collect();
        let update = |param: usize| {
            format!(
                "UPDATE {table} t SET ({}) = ROW({}) FROM jsonb_populate_recordset(NULL::{table}, ${param}) r WHERE {}",
                set_cols.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", "),
                set_cols.iter().map(|c| format!("r.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
                key_match(layout, "t", "r")
            )
        };
        let updates = if set_cols.is_empty() { Vec::new() } else { updates };
        let into_world = crate::storage::overlay::override_active() && crate::storage::overlay::routing_world().is_some();
        if !inserts.is_empty() && !updates.is_empty() && !into_world {
            // one statement, its updates first: a unique value moved from an updated row to a new one merges
            // (the updates free it first), and so does an updated row referencing a new one (a foreign key is
            // checked at the statement's end). The insert waits on the updates' count, so they run first.
            let sql = format!(
                "WITH _w_u AS ({} RETURNING 1), _w_i AS ({} WHERE (SELECT count(*) FROM _w_u) >= 0 RETURNING 1)
                 SELECT (SELECT count(*) FROM _w_u) + (SELECT count(*) FROM _w_i)",
                update(1),
                insert(2)
            );
            applied += run_dml_counted(&sql, updates, inserts);
            continue;
        }
        if !inserts.is_empty() {
            applied += run_dml(&insert(1), inserts);
        }
        if !updates.is_empty() {
            applied += run_dml(&update(1), updates);
        }
    }
    applied
}

/// Runs a statement over two row sets ($1, $2) that returns the number of rows it changed.
fn run_dml_counted(sql: &str, first: Vec<Value>, second: Vec<Value>) -> usize {
    let args: [DatumWithOid; 2] = [JsonB(Value::Array(first)).into(), JsonB(Value::Array(second)).into()];
    crate::storage::as_session_user(|| {
        Spi::connect_mut(|c| {
            c.update(sql, None, &args)
                .and_then(|t| t.first().get::<i64>(1))
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
                .unwrap_or(0) as usize
        })
    })
}

/// A merge into another world: the plan applied through that world's overlays, then the foreign keys the
/// merged rows take part in checked there, as Postgres checks them for a merge into main (a world's writes
/// are not checked at write time). O(rows merged): only the merged rows and the rows that reference them.
fn apply_into_world(plan: &[Planned], world: &WorldRow, target: &World) -> usize {
    with_world(Some(target.clone()), || {
        let applied = crate::storage::writes::as_merge_writes(|| apply(plan, world));
        check_foreign_keys(plan);
        applied
    })
}

/// 23503, worded as Postgres words it, when a merged row references a row the world merged into lacks,
/// or a row the merge deleted (or re-keyed) is still referenced there. Runs routed into that world.
fn check_foreign_keys(plan: &[Planned]) {
    let relids: Vec<pg_sys::Oid> = {
        let mut r: Vec<pg_sys::Oid> = Vec::new();
        for p in plan {
            if !r.contains(&p.layout.relid) {
                r.push(p.layout.relid);
            }
        }
        r
    };
    if relids.is_empty() {
        return;
    }
    // (conname, child, parent, child columns, parent columns) of every foreign key the tables take part in
    type ForeignKey = (String, pg_sys::Oid, pg_sys::Oid, Vec<String>, Vec<String>);
    let keys: Vec<ForeignKey> = Spi::connect(|c| {
        c.select(
            "SELECT c.conname::text, c.conrelid, c.confrelid,
                    (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY k(n, ord)
                       JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n),
                    (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.confkey) WITH ORDINALITY k(n, ord)
                       JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n)
             FROM pg_constraint c WHERE c.contype = 'f' AND (c.conrelid = ANY($1) OR c.confrelid = ANY($1))
               AND c.conrelid IN (SELECT relid FROM worlds.tables) AND c.confrelid IN (SELECT relid FROM worlds.tables)
             ORDER BY c.conname",
            None,
            &[relids.into()],
        )
        .map(|rows| {
            rows.filter_map(|r| {
                Some((r.get::<String>(1).ok()??, r.get::<pg_sys::Oid>(2).ok()??, r.get::<pg_sys::Oid>(3).ok()??, r.get::<Vec<String>>(4).ok()??, r.get::<Vec<String>>(5).ok()??))
            })
            .collect()
        })
        .unwrap_or_default()
    });
    let name_of = |relid: pg_sys::Oid| relation_layout_of(relid).map(|l| l.table_name.clone()).unwrap_or_default();
    let short = |relid: pg_sys::Oid| short_name(&name_of(relid));
    for (conname, child, parent, ccols, pcols) in keys {
        let (child_t, parent_t) = (name_of(child), name_of(parent));
        let eq = |a: &str, ac: &[String], b: &str, bc: &[String]| {
            ac.iter().zip(bc).map(|(x, y)| format!("{a}.{} = {b}.{}", quote_ident(x), quote_ident(y))).collect::<Vec<_>>().join(" AND ")
        };
        let text_of = |alias: &str, cols: &[String]| {
            format!("concat_ws(', ', {})", cols.iter().map(|c| format!("{alias}.{}::text", quote_ident(c))).collect::<Vec<_>>().join(", "))
        };
        // merged rows of the child: each reference (all its columns non-null, MATCH SIMPLE) finds its row
        let written: Vec<Value> = plan.iter().filter(|p| p.layout.relid == child).filter_map(|p| p.decision.result.clone()).collect();
        if !written.is_empty() {
            let sql = format!(
                "SELECT {} FROM jsonb_populate_recordset(NULL::{child_t}, $1) r WHERE {} AND NOT EXISTS (SELECT 1 FROM {parent_t} p WHERE {}) LIMIT 1",
                text_of("r", &ccols),
                ccols.iter().map(|c| format!("r.{} IS NOT NULL", quote_ident(c))).collect::<Vec<_>>().join(" AND "),
                eq("p", &pcols, "r", &ccols),
            );
            if let Some(missing) = Spi::get_one_with_args::<String>(&sql, &[JsonB(Value::Array(written)).into()]).ok().flatten() {
                crate::api::raise_with(
                    "23503",
                    format!("insert or update on table \"{}\" violates foreign key constraint \"{conname}\"", short(child)),
                    Some(format!("Key ({})=({missing}) is not present in table \"{}\".", ccols.join(", "), short(parent))),
                    None,
                );
            }
        }
        // rows of the parent the merge removed or changed: nothing still references what they were
        let replaced: Vec<Value> = plan
            .iter()
            .filter(|p| p.layout.relid == parent && p.row.theirs.is_some() && p.decision.result != p.row.theirs)
            .filter_map(|p| p.row.theirs.clone())
            .collect();
        if !replaced.is_empty() {
            let sql = format!(
                "SELECT {} FROM jsonb_populate_recordset(NULL::{parent_t}, $1) r
                 WHERE NOT EXISTS (SELECT 1 FROM {parent_t} p WHERE {})
                   AND EXISTS (SELECT 1 FROM {child_t} c WHERE {}) LIMIT 1",
                text_of("r", &pcols),
                eq("p", &pcols, "r", &pcols),
                eq("c", &ccols, "r", &pcols),
            );
            if let Some(held) = Spi::get_one_with_args::<String>(&sql, &[JsonB(Value::Array(replaced)).into()]).ok().flatten() {
                crate::api::raise_with(
                    "23503",
                    format!("update or delete on table \"{}\" violates foreign key constraint \"{conname}\" on table \"{}\"", short(parent), short(child)),
                    Some(format!("Key ({})=({held}) is still referenced from table \"{}\".", pcols.join(", "), short(child))),
                    None,
                );
            }
        }
    }
}

/// The layout of a tracked table by its relid.
fn relation_layout_of(relid: pg_sys::Oid) -> Option<std::rc::Rc<Layout>> {
    let tabno = Spi::get_one_with_args::<i32>("SELECT tabno FROM worlds.tables WHERE relid = $1", &[relid.into()]).ok().flatten()?;
    Some(relation_layout(tabno))
}

/// Runs DML over a JSON array of rows as the session's user (so the role's privileges and RLS on main
/// apply to its merge), outside pg_worlds' internal rights.
fn run_dml(sql: &str, rows: Vec<Value>) -> usize {
    let arg: DatumWithOid = JsonB(Value::Array(rows)).into();
    crate::storage::as_session_user(|| {
        Spi::connect_mut(|c| c.update(sql, None, &[arg]).map(|t| t.len()).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}"))))
    })
}

// ---------------------------------------------------------------- REBASE

pub struct RebaseRequest {
    pub world: Option<String>,
    pub using_ours: Option<bool>,
    pub by_columns: bool,
    pub resolve: Vec<(String, Pick)>,
    pub at_version: Option<i64>,
}

/// REBASE: the fork point moves up to main as it is now; the world's own rows stay on top, settled as a
/// merge would settle them (a row settled to main's value is dropped from the world's delta).
/// After a rebase, in the same transaction: a row the world added (or changed) whose unique value another
/// row now has in the rebased world — both sides added it — refuses the rebase (23505; the error undoes it).
fn refuse_duplicates_after_rebase(world: &WorldRow, layouts: &[std::rc::Rc<Layout>]) {
    let rebased = world_by_num(world.num);
    for l in layouts.iter().filter(|l| l.key_kind != b'r' && !l.uniques.is_empty() && world_touched(l, world)) {
        let kcols = l.key_columns.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", ");
        for (name, cols) in &l.uniques {
            let on = |a: &str, b: &str| cols.iter().map(|c| format!("{a}.{c} = {b}.{c}", c = quote_ident(c))).collect::<Vec<_>>().join(" AND ");
            let sql = format!(
                "SELECT {ktext} FROM (SELECT DISTINCT ON ({kcols}) * FROM {delta} d WHERE d._w_world = $1 ORDER BY {kcols}, d._w_dseq DESC) d
                 WHERE NOT d._w_del AND {not_null}
                   AND EXISTS (SELECT 1 FROM {table} t WHERE {same} AND NOT ({same_key}))
                 LIMIT 1",
                ktext = key_text_expr(l, "d"),
                delta = l.delta_name,
                table = l.table_name,
                not_null = cols.iter().map(|c| format!("d.{} IS NOT NULL", quote_ident(c))).collect::<Vec<_>>().join(" AND "),
                same = on("t", "d"),
                same_key = key_match(l, "t", "d"),
            );
            let hit = with_world(rebased.clone(), || Spi::get_one_with_args::<String>(&sql, &[world.num.into()]).ok().flatten());
            if let Some(key) = hit {
                raise(
                    "23505",
                    format!(
                        "rebasing {}: both sides added rows under one unique value of {} ({}, unique index {name}): row {key} of the world and another; nothing was changed",
                        world.name,
                        short_name(&l.table_name),
                        cols.join(", ")
                    ),
                );
            }
        }
    }
}

pub fn rebase(req: RebaseRequest) -> Vec<Value> {
    crate::api::refuse_in_transaction("REBASE WORLD");
    let session_world = crate::guc::current_world_setting().to_string_lossy().into_owned();
    as_internal(|| {
        let name = req.world.clone().unwrap_or(session_world);
        let world = resolve_world(&name);
        if world.num == 0 {
            raise("0A000", "main has no parent to rebase on");
        }
        // its write lock and its parent's (a world parent doesn't move while this reads it), then its row
        // (no fork of it made meanwhile), then main's rows it changed (lock.rs: the order of all locks)
        lock::worlds(&[world.num, world.parent.unwrap_or(0)]);
        Spi::connect_mut(|c| {
            c.update("SELECT num FROM worlds.world WHERE num = $1 FOR UPDATE", None, &[world.num.into()]).ok();
        });
        let has_forks = Spi::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM worlds.world WHERE parent = $1 AND dropped IS NULL)",
            &[world.num.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false);
        if has_forks {
            raise("0A000", format!("world {} has live forks; rebasing it would move the ground under them", world.name));
        }
        let world = resolve_again(&world);
        if let Some(v) = req.at_version {
            if v != world.version {
                raise("55000", format!("world {} is at version {}, not {v}; nothing was rebased", world.name, world.version));
            }
        }
        let resolve: HashMap<(pg_sys::Oid, String), Pick> =
            req.resolve.iter().map(|(r, p)| (parse_row_ref(r), p.clone())).collect();
        for ((relid, key), pick) in &resolve {
            if let Pick::Row(row) = pick {
                check_resolve_row(*relid, key, row);
            }
        }
        let layouts = tracked_layouts();
        if world.parent == Some(0) {
            // main can't change the rows the world changed until the new fork point is set (FOR SHARE):
            // what the rebase takes in of them is what main has at that point
            let touched: Vec<std::rc::Rc<Layout>> = layouts.iter().filter(|l| world_touched(l, &world)).cloned().collect();
            lock::main_rows(&touched, world.num, lock::Hold::Read);
        }
        // keys of the world's rows that main didn't have when read: main may add one before the new fork
        // point is taken (no row to lock), which is checked after it
        let mut absent: Vec<(std::rc::Rc<Layout>, String)> = Vec::new();
        let mut writes: Vec<(std::rc::Rc<Layout>, Value, bool)> = Vec::new();
        let mut conflicts = Vec::new();
        // a world of a world: its base is the parent as of the fork, theirs the parent now
        let parent_world = world.parent.filter(|&p| p != 0).and_then(world_by_num);
        let base_world = parent_world.as_ref().and_then(|_| world_by_num(world.num)).and_then(|w| base_of(&w));
        for l in layouts.iter().filter(|l| world_touched(l, &world)) {
            let mut t = gather(l, &world);
            if parent_world.is_some() {
                other_sides(l, &mut t.rows, base_world.as_ref(), parent_world.as_ref());
            }
            let mbc = merge_by_columns(l);
            for row in t.rows {
                if parent_world.is_none() && l.key_kind != b'r' && row.theirs.is_none() {
                    absent.push((l.clone(), row.key.clone()));
                }
                if l.key_kind == b'r' {
                    // a table without a key: the world's rows stay as they are; a row of main it removed
                    // that main changed since is a conflict, however it would be settled
                    if row.base.is_some() && row.theirs != row.base {
                        conflicts.push(format!("{}/{}", short_name(&t.name), row.key));
                    }
                    continue;
                }
                let settle = Settle {
                    resolve: resolve.get(&(l.relid, row.key.clone())).cloned(),
                    by_columns: req.by_columns || mbc,
                    using_ours: req.using_ours,
                };
                let d = decide(row.base.as_ref(), row.ours.as_ref(), row.theirs.as_ref(), &settle);
                match d.outcome {
                    Outcome::Conflict(_) => conflicts.push(format!("{}/{}", short_name(&t.name), row.key)),
                    _ if d.result != row.ours => {
                        // the world now holds the settled row (or main's, as a version of its own)
                        let (v, del) = match d.result.clone() {
                            Some(v) => (v, false),
                            None => (row.ours.clone().or(row.theirs.clone()).unwrap_or(Value::Null), true),
                        };
                        writes.push((l.clone(), v, del));
                    }
                    _ => {}
                }
            }
        }
        if !conflicts.is_empty() {
            let shown = conflicts.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            raise_with(
                "40001",
                format!("rebasing {} conflicts: rows changed on both sides: {shown}; nothing was changed", world.name),
                None,
                Some("Settle them with RESOLVE, BY COLUMNS or USING OURS | THEIRS.".into()),
            );
        }
        // rows it takes in: the parent world's own changes since the old fork, or main's
        let mut taken: i64 = 0;
        for l in &layouts {
            let (sql, args): (String, Vec<DatumWithOid>) = if parent_world.is_some() {
                (
                    format!(
                        "SELECT count(DISTINCT {}) FROM {} d WHERE d._w_world = $1 AND CASE WHEN $2 LIKE '@%' THEN d._w_at > substr($2, 2)::timestamptz
                         ELSE NOT pg_visible_in_snapshot(d._w_xid, $2::pg_snapshot) END",
                        key_text_expr(l, "d"),
                        l.delta_name
                    ),
                    vec![world.parent.unwrap_or(0).into(), world.fork_snapshot.clone().into()],
                )
            } else {
                (
                    format!(
                        "SELECT count(DISTINCT coalesce(_w_new_tid, _w_old_tid)) FROM {} h WHERE CASE WHEN $1 LIKE '@%' THEN h._w_at > substr($1, 2)::timestamptz
                         ELSE h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot) END",
                        l.history_name
                    ),
                    vec![world.fork_snapshot.clone().into()],
                )
            };
            taken += Spi::get_one_with_args::<i64>(&sql, &args).ok().flatten().unwrap_or(0);
        }
        for (l, v, del) in &writes {
            let cols = table_columns(l.relid, true);
            let delta = &l.delta_name;
            let table = &l.table_name;
            let col_list = cols.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
            let sql = format!(
                "INSERT INTO {delta} (_w_world, _w_dseq, _w_del, {col_list}) SELECT $1, $2::int8, $3, {col_list} FROM jsonb_populate_record(NULL::{table}, $4)"
            );
            let write = || {
                Spi::connect_mut(|c| {
                    c.update(&sql, None, &[world.num.into(), crate::storage::capture::next_hseq().into(), (*del).into(), JsonB(v.clone()).into()])
                        .map(|_| ())
                })
            };
            // the table's CHECK constraints hold on the world's rows (copied onto the delta): say them as the table's
            let as_table = |e: pgrx::pg_sys::panic::CaughtError| match &e {
                pgrx::pg_sys::panic::CaughtError::PostgresError(r) => {
                    let delta_rel = l.delta_name.rsplit('.').next().unwrap_or_default().trim_matches('"').to_string();
                    let table_rel = l.table_name.rsplit('.').next().unwrap_or_default().trim_matches('"').to_string();
                    raise("23514", format!("rebasing {}: {}", world.name, r.message().replace(&format!("\"{delta_rel}\""), &format!("\"{table_rel}\""))))
                }
                _ => e.rethrow(),
            };
            pgrx::PgTryBuilder::new(write)
                .catch_when(PgSqlErrorCode::ERRCODE_CHECK_VIOLATION, as_table)
                .execute()
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        }
        Spi::connect_mut(|c| {
            c.update(
                "UPDATE worlds.world SET fork_snapshot = pg_current_snapshot(), fork_at = NULL, version = version + 1, rebased = clock_timestamp() WHERE num = $1",
                None,
                &[world.num.into()],
            )
            .ok();
        });
        for (l, key) in &absent {
            // (a fresh snapshot, after the new fork point's: it sees every row that point sees)
            let added = Spi::get_one_with_args::<bool>(
                &format!("SELECT EXISTS (SELECT 1 FROM {} t WHERE {} = $1)", l.table_name, key_text_expr(l, "t")),
                &[key.as_str().into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false);
            if added {
                raise_with(
                    "40001",
                    format!("rebasing {}: main added {}/{key} while the rebase ran; nothing was changed", world.name, short_name(&l.table_name)),
                    None,
                    Some("Run REBASE WORLD again.".into()),
                );
            }
        }
        crate::storage::overlay::forget_all();
        refuse_duplicates_after_rebase(&world, &layouts);
        vec![serde_json::json!({ "tag": format!("REBASE {taken}") })]
    })
}
