//! Step 3: the three sides of every row a world changed. For each table the world wrote (its own delta
//! layer, O(rows changed)): `ours` (the world's row), `theirs` (the target's row now) and `base` (the row
//! at the fork, from main's history, or the parent world as of the fork).
use crate::spi_calls::Fresh;
use super::*;

/// SHOW BRANCHES' `changes`: the rows a world changed since its fork, counted as DIFF lists them (a row
/// inserted and deleted again, or changed back, is no change). O(rows the world wrote).
#[pg_extern(name = "_changes")]
pub(crate) fn changes_since_fork(world_num: i32) -> Option<i64> {
    as_internal(|| {
        let world = world_row("num = $1", world_num.into()).filter(|w| w.num != 0)?;
        let rows: i64 = own_changes(&world).iter().map(|t| t.rows.iter().filter(|r| r.base != r.ours).count() as i64).sum();
        // (and the rows it wrote in its copies of main's tables, merge/twins.rs: as their keys were logged)
        let copies = crate::spi_calls::get_one_with_args::<i64>(
            "SELECT count(*) FROM worlds.world_twin_keys WHERE world = $1 AND key <> '*'",
            &[world_num.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(0);
        Some(rows + copies)
    })
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
pub(crate) fn table_columns(relid: pg_sys::Oid, insertable_only: bool) -> Vec<String> {
    Spi::connect(|c| {
        c.fresh(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped \
             AND (NOT $2 OR attgenerated = '') ORDER BY attnum",
            None,
            &[relid.into(), insertable_only.into()],
        )
        .map(|r| r.into_iter().filter_map(|r| r.get::<String>(1).ok().flatten()).collect())
        .unwrap_or_default()
    })
}

/// The tracked tables a world wrote (its delta has rows of it), each locked until the transaction ends.
/// Each delta is first looked at through its index, without a query (storage/index_probe.rs): a table
/// the world didn't write costs a few index pages, not a subtransaction and two queries.
pub fn touched_layouts(world: &World) -> Vec<std::rc::Rc<Layout>> {
    touched_layouts_where(world, |_| true)
}

/// `touched_layouts`, of the tables `keep` keeps.
pub fn touched_layouts_where(world: &World, mut keep: impl FnMut(&std::rc::Rc<Layout>) -> bool) -> Vec<std::rc::Rc<Layout>> {
    layouts_where(
        |t| t.delta.is_none_or(|d| crate::storage::index_probe::world_has_rows(d, world.num).unwrap_or(true)),
        |l| keep(l) && world_touched(l, world),
    )
}

/// The tracked tables `keep` keeps, with their layouts, in relid order. Each table is locked (ACCESS
/// SHARE) before its storage is read: a DROP TABLE in main then waits for this transaction, or committed
/// first and the table is gone from the list (its storage went with it). `keep` runs in a subtransaction
/// of the table's own: a table it keeps keeps its locks (the table's and those of the storage it read)
/// until the transaction ends; one it doesn't has them released at once. So a statement about the tables
/// one world wrote holds the locks of those, not of every tracked table: with 2,000 tracked tables, a
/// MERGE that locked each table, delta and index overflowed the shared lock table ("out of shared memory",
/// for every session of the cluster).
pub fn tracked_layouts_where(keep: impl FnMut(&std::rc::Rc<Layout>) -> bool) -> Vec<std::rc::Rc<Layout>> {
    layouts_where(|_| true, keep)
}

/// A tracked table and its storage, by oid, as `layouts_where`'s first look gets them.
pub(crate) struct TableOids {
    pub relid: pg_sys::Oid,
    /// worlds.tables.key_kind (b'r': no key)
    pub key_kind: u8,
    pub delta: Option<pg_sys::Oid>,
    pub history: Option<pg_sys::Oid>,
    pub inserts: Option<pg_sys::Oid>,
}

impl TableOids {
    /// Has main (its history or its inserts) rows written by transactions numbered `xmin` or later, as
    /// their indexes say? true when it can't be told so.
    pub fn main_wrote_since(&self, xmin: u64) -> bool {
        let since = |rel: Option<pg_sys::Oid>| rel.is_none_or(|r| crate::storage::index_probe::rows_since(r, xmin).unwrap_or(true));
        since(self.history) || since(self.inserts)
    }
}

/// `tracked_layouts_where`, with a first look at each table (`look`, before any lock of the table is
/// taken): a table it says no to is passed over at once.
pub(crate) fn layouts_where(mut look: impl FnMut(&TableOids) -> bool, mut keep: impl FnMut(&std::rc::Rc<Layout>) -> bool) -> Vec<std::rc::Rc<Layout>> {
    let tables: Vec<(i32, TableOids)> = Spi::connect(|c| {
        c.fresh("SELECT tabno, relid::oid, delta::oid, history::oid, inserts::oid, key_kind::text FROM worlds.tables WHERE history IS NOT NULL ORDER BY relid::oid", None, &[])
            .map(|r| {
                r.into_iter()
                    .filter_map(|r| {
                        let oid = |i: usize| r.get::<pg_sys::Oid>(i).ok().flatten();
                        let key_kind = r.get::<String>(6).ok().flatten().and_then(|k| k.bytes().next()).unwrap_or(b'r');
                        Some((r.get::<i32>(1).ok().flatten()?, TableOids { relid: oid(2)?, key_kind, delta: oid(3), history: oid(4), inserts: oid(5) }))
                    })
                    .collect()
            })
            .unwrap_or_default()
    });
    let still_tracked = |tabno: i32| {
        crate::spi_calls::get_one_with_args::<bool>("SELECT history IS NOT NULL FROM worlds.tables WHERE tabno = $1", &[tabno.into()])
            .ok()
            .flatten()
            .unwrap_or(false)
    };
    let mut kept = Vec::new();
    for (tabno, oids) in tables {
        if !look(&oids) {
            continue;
        }
        let relid = oids.relid;
        let layout = crate::subxact::in_subtransaction_keep(
            || unsafe {
                pg_sys::LockRelationOid(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
                // (dropped, or untracked, before the lock: its storage went with it)
                let exists = pg_sys::SearchSysCacheExists(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid), 0.into(), 0.into(), 0.into());
                if !exists || !still_tracked(tabno) {
                    return None;
                }
                let layout = relation_layout(tabno);
                keep(&layout).then_some(layout)
            },
            |l| l.is_some(),
        );
        kept.extend(layout);
    }
    kept
}

/// The rows `world` changed in one table, with base, ours and theirs, in key order.
pub fn gather(layout: &std::rc::Rc<Layout>, world: &World) -> TableChanges {
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
            c.fresh(&sql, None, &[world.num.into(), snapshot.clone().into()])
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
        gather_keyed(layout, world, &cols, false).rows
    };
    TableChanges { layout: layout.clone(), name: table.to_string(), rows }
}

/// What `gather_keyed` read of a keyed table.
pub(crate) struct Keyed {
    pub rows: Vec<Changed>,
    /// locking: the key of a row main has that couldn't be locked (the rows are then not all read)
    pub held: Option<String>,
    /// locking: the keys (as key text) main lacks
    pub absent: Vec<String>,
    /// locking: the snapshot the statement read on
    pub snapshot: Option<String>,
}

/// The three sides of the rows `world` changed in a keyed table, in key order. `lock` (a merge into main,
/// lock.rs): main's rows are locked by the same statement that reads them (see `Keyed`).
pub(crate) fn gather_keyed(layout: &Layout, world: &World, cols: &[String], lock: bool) -> Keyed {
    let table = &layout.table_name;
    let delta = &layout.delta_name;
    let history = &layout.history_name;
    let snapshot = world.fork_snapshot.clone().unwrap_or_default();
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
    // (locking, history is always looked into: main may write the table until the statement starts)
    let main_changed = lock || main_changed(layout, world);
    // main's first change of each key since the fork, after the world's own last partial merge of it
    // (only worlds partly merged before have one): one pass over history since the fork, joined to the
    // world's rows by key (history has no index on the key: capture would pay for one on every write)
    let (first_change, join_first) = if main_changed {
        // (`merged_part`: set with a partial merge's events, record.rs)
        let (own_join, own_filter) = if world.merged_part {
            (
                format!(
                    "LEFT JOIN (SELECT {h2}, max(h2._w_hseq) AS m FROM {history} h2 WHERE {} AND h2._w_src = $3 GROUP BY {h2}) own ON {}",
                    after_fork("h2"),
                    key_match(&layout.key_columns, "own", "h"),
                    h2 = cols_of("h2"),
                ),
                "h._w_hseq > coalesce(own.m, 0)".to_string(),
            )
        } else {
            (String::new(), "$3::text IS NOT NULL".to_string())
        };
        (
            format!(
                ", f AS (SELECT DISTINCT ON ({hk}) h._w_op::text AS _w_op, {hcols}
                         FROM {history} h {own_join} WHERE {} AND {own_filter} ORDER BY {hk}, h._w_hseq)",
                after_fork("h"),
                hk = cols_of("h"),
                hcols = cols.iter().map(|c| format!("h.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
            ),
            format!("LEFT JOIN f ON {}", key_match(&layout.key_columns, "f", "o")),
        )
    } else {
        (String::new(), String::new())
    };
    // each side's columns typed where a column's value is a plain number, boolean or text (read as
    // such, no JSON built or parsed for it), the others in one jsonb object per side (as to_jsonb
    // writes them): the Values are those to_jsonb(row) gives (typed.rs)
    let typed = super::typed::TypedColumns::of(layout.relid);
    let op_and_base = if main_changed { format!("f._w_op, {}", typed.select("f")) } else { "NULL::text".to_string() };
    let tmatch = key_match(&layout.key_columns, "t", "o");
    // main's row now, read on the statement's snapshot. Locking, it is locked without waiting (FOR NO KEY
    // UPDATE; FOR UPDATE where the world deleted the row; SKIP LOCKED) and read as locked (its latest
    // version). A row it couldn't lock, or that changed or went since the snapshot, is "held" (main has
    // it on the snapshot); a key main lacks is "absent". And the statement's snapshot, once.
    let (their_row, held) = if lock {
        (
            format!(
                "SELECT * FROM (SELECT true AS _w_p, t.* FROM {table} t WHERE {tmatch} AND NOT o._w_del FOR NO KEY UPDATE OF t SKIP LOCKED) a
                 UNION ALL SELECT * FROM (SELECT true AS _w_p, t.* FROM {table} t WHERE {tmatch} AND o._w_del FOR UPDATE OF t SKIP LOCKED) b"
            ),
            format!(
                ", t._w_p IS NULL AND EXISTS (SELECT 1 FROM {table} t2 WHERE {}), (SELECT pg_current_snapshot()::text)",
                key_match(&layout.key_columns, "t2", "o")
            ),
        )
    } else {
        (format!("SELECT true AS _w_p, t.* FROM {table} t WHERE {tmatch} OFFSET 0"), String::new())
    };
    let sql = format!(
        "WITH o AS (
            SELECT DISTINCT ON ({kcols}) {ktext} AS _w_k, d._w_del, {dcols}
            FROM {delta} d WHERE d._w_world = $1 ORDER BY {kcols}, d._w_dseq DESC){first_change}
         SELECT o._w_k, o._w_del, t._w_p, {op_and_base}, {ours}, {theirs}{held}
         FROM o {join_first}
              LEFT JOIN LATERAL ({their_row}) t ON true
         ORDER BY {okeys}",
        ktext = key_text_expr(&layout.key_columns, "d"),
        dcols = cols.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
        ours = typed.select("o"),
        theirs = typed.select("t"),
        okeys = layout.key_columns.iter().map(|c| format!("o.{}", quote_ident(c))).collect::<Vec<_>>().join(", "),
    );
    let width = typed.width();
    let key_at: Vec<usize> = layout.key_columns.iter().filter_map(|k| cols.iter().position(|c| c == k)).collect();
    let base_at = if main_changed { Some(5) } else { None };
    let ours_at = 5 + base_at.map(|_| width).unwrap_or(0);
    let mut keyed = Keyed { rows: Vec::new(), held: None, absent: Vec::new(), snapshot: None };
    let args = [world.num.into(), snapshot.clone().into(), world.id.clone().into()];
    Spi::connect_mut(|c| {
        // (locking is a write: not on the latest snapshot `fresh` reads on, but the statement's own)
        let result = if lock { c.update(&sql, None, &args) } else { c.fresh(&sql, None, &args) };
        let result = result.unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        // each row deformed once, its values made Values directly (typed.rs): not an SPI call per value
        // SAFETY: SPI_tuptable is this statement's result (`result` holds it) until the next SPI call,
        // and nothing below makes one; its rows have the columns the statement gives, typed as above
        use pgrx::datum::FromDatum;
        let n = result.len();
        keyed.rows.reserve(n);
        unsafe {
            let tt = pg_sys::SPI_tuptable;
            if tt.is_null() || n == 0 {
                return;
            }
            let desc = (*tt).tupdesc;
            let natts = (*desc).natts as usize;
            let mut values = vec![pg_sys::Datum::from(0usize); natts];
            let mut nulls = vec![false; natts];
            let text = |values: &[pg_sys::Datum], nulls: &[bool], i: usize| String::from_datum(values[i], nulls[i]);
            let flag = |values: &[pg_sys::Datum], nulls: &[bool], i: usize| bool::from_datum(values[i], nulls[i]).unwrap_or(false);
            for i in 0..n {
                pg_sys::heap_deform_tuple(*(*tt).vals.add(i), desc, values.as_mut_ptr(), nulls.as_mut_ptr());
                let key = text(&values, &nulls, 0).unwrap_or_default();
                let deleted = flag(&values, &nulls, 1);
                let present = flag(&values, &nulls, 2);
                if lock {
                    let at = ours_at - 1 + 2 * width;
                    if keyed.snapshot.is_none() {
                        keyed.snapshot = text(&values, &nulls, at + 1);
                    }
                    if !present {
                        if flag(&values, &nulls, at) {
                            // (held: what was read is of no use; the caller waits for it and starts over)
                            keyed.held = Some(key);
                            return;
                        }
                        keyed.absent.push(key.clone());
                    }
                }
                let ours_row = typed.read_datums(&values, &nulls, ours_at - 1);
                let key_obj = Value::Object(key_at.iter().map(|i| (cols[*i].clone(), ours_row.get(&cols[*i]).cloned().unwrap_or(Value::Null))).collect());
                let theirs = present.then(|| Value::Object(typed.read_datums(&values, &nulls, ours_at - 1 + width)));
                let base = match (text(&values, &nulls, 3), base_at) {
                    (None, _) | (_, None) => theirs.clone(),
                    (Some(op), _) if op == "I" => None,
                    (Some(_), Some(at)) => Some(Value::Object(typed.read_datums(&values, &nulls, at - 1))),
                };
                keyed.rows.push(Changed { key, key_obj, ours: (!deleted).then_some(Value::Object(ours_row)), theirs, base });
            }
        }
    });
    keyed
}

/// Has main changed the table since the world's fork (an entry in its history after the fork point)?
pub(crate) fn main_changed(layout: &Layout, world: &World) -> bool {
    let snapshot = world.fork_snapshot.clone().unwrap_or_default();
    let after_fork = if snapshot.starts_with('@') {
        "h._w_at > substr($1, 2)::timestamptz"
    } else {
        "h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot)"
    };
    let probe = format!("SELECT EXISTS (SELECT 1 FROM {} h WHERE {after_fork})", layout.history_name);
    crate::spi_calls::get_one_with_args::<bool>(&probe, &[snapshot.into()]).ok().flatten().unwrap_or(true)
}

pub(crate) fn change_kind(before: &Option<Value>, after: &Option<Value>) -> &'static str {
    match (before.is_some(), after.is_some()) {
        (false, true) => "insert",
        (true, false) => "delete",
        _ => "update",
    }
}

/// Everything the world changed, table by table (only tables it touched).
pub fn world_changes(world: &World) -> Vec<TableChanges> {
    // (main's tables it changed the shape of: their rows are its twins', merge/twins.rs)
    let twins = crate::storage::world_twins::twins_of(world.num);
    // each table gathered under its locks, released once gathered: a read (DIFF, SHOW WORLDS, the dump)
    // needs none of them kept, and a world that wrote 2,000 tables would hold every one's
    let mut tables = Vec::new();
    touched_layouts_where(world, |l| {
        if !twins.contains_key(&l.relid) {
            let t = gather(l, world);
            if !t.rows.is_empty() {
                tables.push(t);
            }
        }
        false
    });
    tables
}

/// What a world changed since its fork, as DIFF shows it: for a world of main, as gathered (base: main as
/// of the fork); for a world of a world, its rows against that parent as of the fork.
pub fn own_changes(world: &World) -> Vec<TableChanges> {
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

/// For merges that don't go straight into main from a world of main: the parent as of the fork (when the
/// parent is a world) and the target now (when the target is a world), read through their overlays.
pub(crate) fn other_sides(l: &Layout, rows: &mut [Changed], base_world: Option<&World>, target_world: Option<&World>) {
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
        key_match(&l.key_columns, "t", "k")
    );
    Spi::connect(|c| {
        c.fresh(&sql, None, &[JsonB(Value::Array(keys.to_vec())).into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .filter_map(|r| {
                let k = r.get::<JsonB>(1).ok().flatten()?.0;
                let row = r.get::<JsonB>(2).ok().flatten()?.0;
                Some((k.to_string(), row))
            })
            .collect()
    })
}

pub(crate) fn world_touched(l: &Layout, world: &World) -> bool {
    let sql = format!("SELECT EXISTS (SELECT 1 FROM {} WHERE _w_world = $1)", l.delta_name);
    crate::spi_calls::get_one_with_args::<bool>(&sql, &[world.num.into()]).ok().flatten().unwrap_or(false)
}

pub(crate) fn merge_by_columns(l: &Layout) -> bool {
    crate::spi_calls::get_one_with_args::<bool>("SELECT merge_by_columns FROM worlds.tables WHERE tabno = $1", &[l.tabno.into()])
        .ok()
        .flatten()
        .unwrap_or(false)
}
