//! DIFF WORLD and DIFF ... TO ...: the rows two sides differ in, shown (or AS SQL), from the same gathering
//! step the merge reads.
use crate::sql_text::SqlLiteral;
use crate::spi_calls::Fresh;
use super::*;
use crate::backend_local::BackendLocal;

pub(super) fn counts(rows: &[(String, Option<Value>, Option<Value>)]) -> (usize, usize, usize) {
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

pub(super) fn fmt_count(n: usize) -> String {
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
    let _timer = crate::metrics::time(crate::metrics::Timed::Diff);
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
        crate::governance::agents::require("read", Some(world.num));
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
        // the schema it made first (merge/schema.rs), then the rows
        let objects = schema::objects(world.num);
        // main's tables it dropped first (as the merge drops them: one of its objects may take the name),
        // then the objects it made, then main's tables it changed (merge/twins.rs), each change then its rows
        let (dropped, changed): (Vec<twins::Twin>, Vec<twins::Twin>) = twins::of_world(world.num).into_iter().partition(|t| t.dropped);
        let mut rows = twins::diff_rows(&world, &dropped, req.as_sql);
        rows.extend(schema::diff_rows(&objects, req.as_sql));
        rows.extend(twins::diff_rows(&world, &changed, req.as_sql));
        rows.extend(twins::replaced_diff_rows(&twins::replaced_of(world.num), req.as_sql));
        // the readers it registered, the marks it set or took away (governance/readers)
        if !req.as_sql {
            rows.extend(crate::governance::readers::registry::changes_of(&world).iter().map(|c| c.diff_row()));
        }
        rows.extend(render_diff(&world.name, tables, req.as_sql, req.limit));
        if req.as_sql {
            rows.extend(schema::keys_sql(&objects));
        }
        if let Some(n) = req.limit {
            rows.truncate(n.max(0) as usize);
        }
        // its queued effects (governance/outbox.rs), after its rows
        if !req.as_sql && req.limit.is_none_or(|n| (rows.len() as i64) < n) {
            rows.extend(crate::governance::outbox::diff_rows(world.num));
            if let Some(n) = req.limit {
                rows.truncate(n.max(0) as usize);
            }
        }
        rows
    })
}

/// 42501 unless the role running the statement may read every row and column of the table, as a SELECT
/// of it in main would show them: DIFF and DRY RUN show whole rows, so a role kept from the table, from
/// some of its columns (column grants) or from some of its rows (row-level security) is refused, not shown
/// them.
pub(super) fn require_read(layout: &Layout) {
    let (select, rls) = crate::storage::as_session_user(|| {
        Spi::connect(|c| {
            c.fresh("SELECT has_table_privilege($1, 'SELECT'), row_security_active($1)", None, &[layout.relid.into()])
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

/// DIFF ... READERS reads a diff's rows without its NOTICE (`quietly`)
static QUIET: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// Runs f (a DIFF) without the NOTICE of what each table loses.
pub fn quietly<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(self.0));
        }
    }
    let _r = Reset(QUIET.with(|q| q.replace(true)));
    f()
}

/// One row of a diff: its key, the row before and the row after (None: absent).
pub(super) type DiffRow = (String, Option<Value>, Option<Value>);
pub(super) type DiffTable = (String, std::rc::Rc<Layout>, Vec<DiffRow>);

/// DIFF's output: a NOTICE with what each table loses (tables that delete most first), then deleted rows,
/// then the rest, each part in key order; or the statements that make the change (AS SQL).
pub(super) fn render_diff(label: &str, mut tables: Vec<DiffTable>, as_sql_out: bool, limit: Option<i64>) -> Vec<Value> {
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
    if !tables.is_empty() && !QUIET.with(|q| q.get()) {
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
    let _timer = crate::metrics::time(crate::metrics::Timed::Diff);
    as_internal(|| {
        crate::governance::agents::require("read", None);
        let side = |name: &str| -> Option<World> {
            if let Some((n, when)) = name.split_once('@') {
                return Some(crate::storage::overlay::past_of(n, when));
            }
            let w = resolve_world(name);
            world_by_num(w.num)
        };
        let (a, b) = (side(from), side(to));
        // (a world that changed main's tables holds copies of them, merge/twins.rs: not compared yet)
        for w in a.iter().chain(b.iter()).filter(|w| w.num > 0) {
            if let Some(t) = twins::of_world(w.num).first() {
                raise_with(
                    "0A000",
                    format!("DIFF WORLD ... TO ... is not supported yet for world {}: it changed the shape of main's table {}", w.name, t.shown),
                    None,
                    Some(format!("DIFF WORLD {} shows what it changed since its fork.", w.name)),
                );
            }
        }
        let worlds: Vec<i32> = a.iter().chain(b.iter()).flat_map(|w| w.chain.clone()).collect();
        let snapshots: Vec<String> = a.iter().chain(b.iter()).map(|w| w.main_snapshot.clone()).collect();
        let mut tables: Vec<DiffTable> = Vec::new();
        // (each table's locks kept only when it has rows to show: gather.rs; a table none of the worlds
        // wrote and main didn't change since the oldest fork, as its indexes say, passed over at once:
        // storage/index_probe.rs)
        use crate::storage::index_probe::world_has_rows;
        let in_worlds = |t: &TableOids| t.delta.is_none_or(|d| worlds.iter().any(|&w| world_has_rows(d, w).unwrap_or(true)));
        let main_since = |t: &TableOids, x: u64| t.main_wrote_since(x);
        let oldest: Option<Option<u64>> =
            snapshots.iter().map(|s| worlds_core::snapshot::Snapshot::parse(s).map(|s| s.xmin)).collect::<Option<Vec<u64>>>().map(|v| v.into_iter().min());
        layouts_where(|t| t.key_kind != b'r' && (in_worlds(t) || oldest.is_none_or(|x| x.is_some_and(|x| main_since(t, x)))), |l| {
            if l.key_kind == b'r' {
                return false;
            }
            let keys = candidate_keys(l, &worlds, &snapshots);
            if keys.is_empty() {
                return false;
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
                tables.push((l.table_name.to_string(), l.clone(), rows));
            }
            // (a read: the table's locks released once its rows are read, not kept to the end)
            false
        });
        layouts_where(|t| t.key_kind == b'r' && (in_worlds(t) || main_since(t, 0)), |l| {
            if l.key_kind != b'r' {
                return false;
            }
            let rows = keyless_difference(l, &a, &b, &worlds);
            if !rows.is_empty() {
                tables.push((l.table_name.to_string(), l.clone(), rows));
            }
            // (a read: the table's locks released once its rows are read, not kept to the end)
            false
        });
        for t in &tables {
            require_read(&t.1);
        }
        // AS SQL runs in order on the other side: tables and columns are made before the rows that need
        // them, and dropped after the rows that go with them
        let (drops, mut out): (Vec<Value>, Vec<Value>) = schema_changes(from, to, as_sql_out).into_iter().partition(|c| {
            let sql = c["sql"].as_str().unwrap_or_default().to_ascii_uppercase();
            as_sql_out && (sql.starts_with("DROP ") || (sql.starts_with("ALTER TABLE") && sql.contains(" DROP COLUMN ")))
        });
        // the objects either world made of its own (merge/schema.rs): those only `to` has are made (with
        // their rows), those only `from` has are dropped
        let own = |w: &Option<World>| w.as_ref().filter(|w| w.num > 0 && !w.read_only).map(|w| schema::objects(w.num)).unwrap_or_default();
        let (ours, theirs) = (own(&a), own(&b));
        let same = |x: &schema::WorldObject, y: &schema::WorldObject| x.kind == y.kind && x.schema == y.schema && x.name == y.name;
        let made: Vec<schema::WorldObject> = theirs.iter().filter(|o| !ours.iter().any(|x| same(x, o))).cloned().collect();
        let gone: Vec<&schema::WorldObject> = ours.iter().filter(|o| !theirs.iter().any(|x| same(x, o))).collect();
        out.extend(schema::diff_rows(&made, as_sql_out));
        // the readers and marks (governance/readers): kept as they stand, not as they were, so moments
        // have none to compare
        if !as_sql_out && !a.iter().chain(b.iter()).any(|w| w.read_only) {
            out.extend(crate::governance::readers::registry::changes_between_worlds(a.as_ref(), b.as_ref()).iter().map(|c| c.diff_row()));
        }
        out.extend(render_diff(&format!("{from} to {to}"), tables, as_sql_out, limit));
        out.extend(drops);
        out.extend(gone.into_iter().rev().map(|o| schema::drop_row(o, as_sql_out)));
        if as_sql_out {
            out.extend(schema::keys_sql(&made));
        }
        if let Some(n) = limit {
            out.truncate(n.max(0) as usize);
        }
        out
    })
}

/// DIFF a TO b of a table without a key: the rows as multisets, each side read whole and counted by value
/// (O(table): such a table has no key to find the changed rows by). One row of output per copy more or
/// less. Skipped when neither side's chain wrote the table and main never changed it.
pub(super) fn keyless_difference(l: &Layout, a: &Option<World>, b: &Option<World>, worlds: &[i32]) -> Vec<DiffRow> {
    let touched = crate::spi_calls::get_one_with_args::<bool>(
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
                c.fresh(&sql, None, &[])
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
pub(super) fn schema_changes(from: &str, to: &str, as_sql_out: bool) -> Vec<Value> {
    let time_of = |side: &str| -> Option<String> {
        side.contains('@').then(|| {
            crate::spi_calls::get_one_with_args::<String>("SELECT m.at::text FROM worlds._moment_of($1) m", &[side.into()]).ok().flatten().unwrap_or_default()
        })
    };
    let (a, b) = (time_of(from), time_of(to));
    if a.is_none() && b.is_none() {
        return Vec::new();
    }
    Spi::connect(|c| {
        c.fresh(
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
pub(super) fn candidate_keys(l: &Layout, worlds: &[i32], snapshots: &[String]) -> Vec<Value> {
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
        c.fresh(&sql, None, &[worlds.to_vec().into(), snapshots.to_vec().into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .filter_map(|r| r.get::<JsonB>(1).ok().flatten().map(|j| j.0))
            .collect()
    })
}

pub(super) fn compare_keys(a: &Value, b: &Value, cols: &[String]) -> std::cmp::Ordering {
    cols.iter().map(|c| compare_value(&a[c], &b[c])).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
}

/// JSON values in key order: numbers by value, anything else by its text.
pub(super) fn compare_value(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().partial_cmp(&y.as_f64()).unwrap_or(std::cmp::Ordering::Equal),
        (x, y) => x.to_string().cmp(&y.to_string()),
    }
}

/// Keys as the spec prints them, `7` or `(1,"a b")` for several columns: as Postgres writes them (the
/// same text DIFF WORLD and MERGE give), one query for all.
pub(super) fn key_texts(layout: &Layout, keys: &[Value]) -> Vec<String> {
    if keys.is_empty() {
        return Vec::new();
    }
    let sql = format!(
        "SELECT {} FROM jsonb_populate_recordset(NULL::{}, $1) WITH ORDINALITY AS r ORDER BY r.ordinality",
        key_text_expr(&layout.key_columns, "r"),
        layout.table_name
    );
    Spi::connect(|c| {
        c.fresh(&sql, None, &[pgrx::JsonB(Value::Array(keys.to_vec())).into()])
            .map(|rows| rows.map(|r| r.get::<String>(1).ok().flatten().unwrap_or_default()).collect())
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
    })
}

pub(super) fn sql_literal(v: &Value) -> SqlLiteral {
    match v {
        Value::Null => SqlLiteral::null(),
        Value::Bool(b) => SqlLiteral::boolean(*b),
        Value::Number(n) => SqlLiteral::number(n),
        Value::String(s) => SqlLiteral::text(s),
        other => SqlLiteral::cast(&other.to_string(), "jsonb"),
    }
}

/// A statement that makes the same change on the other side. Values go through Postgres's input
/// functions as literals, so every type round-trips.
/// Column names in the table's order (names it no longer has last, by name).
pub(super) fn in_table_order(mut cols: Vec<String>, order: &[String]) -> Vec<String> {
    cols.sort_by_key(|c| (order.iter().position(|o| o == c).unwrap_or(usize::MAX), c.clone()));
    cols
}

/// Each column of a table: its type, and whether it is an identity column GENERATED ALWAYS.
pub(super) type ColumnTypes = HashMap<String, (String, bool)>;

pub(super) fn column_types(relid: pg_sys::Oid) -> ColumnTypes {
    Spi::connect(|c| {
        c.fresh(
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

pub(super) fn as_sql(table: &str, layout: &Layout, order: &[String], columns: &ColumnTypes, before: &Option<Value>, after: &Option<Value>) -> String {
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
                crate::sql_text::column_list(&cols),
                if cols.iter().any(|c| always.contains(c)) { " OVERRIDING SYSTEM VALUE" } else { "" },
                crate::sql_text::join(cols.iter().map(|k| value(a, k)), ", ")
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
pub(super) fn sql_value(table: &str, typ: Option<&str>, column: &str, v: &Value) -> SqlLiteral {
    match (typ, v) {
        (_, Value::Null) => SqlLiteral::null(),
        // a json value of any kind is its JSON text (a string keeps its quotes: '"u"'::jsonb)
        (Some(t @ ("jsonb" | "json")), v) => SqlLiteral::cast(&v.to_string(), t),
        (_, Value::Array(_) | Value::Object(_)) => match typ {
            None => sql_literal(v),
            Some(typ) => {
                let text = crate::spi_calls::get_one_with_args::<String>(
                    &format!("SELECT (jsonb_populate_record(NULL::{table}, $1)).{}::text", quote_ident(column)),
                    &[pgrx::JsonB(serde_json::json!({ column: v })).into()],
                )
                .ok()
                .flatten()
                .unwrap_or_default();
                SqlLiteral::cast(&text, typ)
            }
        },
        _ => sql_literal(v),
    }
}

// ---------------------------------------------------------------- MERGE

/// Rows of one table that the world's parent changed since the world's fork, the world's own rows left
/// out: (key text, the row at the fork, the row now; None where there is none). O(rows the parent's
/// chain wrote and main changed since the world's cut). What a world's stale reads are judged on.
pub fn parent_changes(l: &Layout, world: &World) -> Vec<(String, Option<Value>, Option<Value>)> {
    let at_fork = world.at_fork(-world.num);
    let parent = world.chain.get(1).copied().and_then(world_by_num);
    let keys = candidate_keys(l, &world.chain[1..], std::slice::from_ref(&world.main_snapshot));
    if keys.is_empty() {
        return Vec::new();
    }
    let own: std::collections::HashSet<String> = Spi::connect(|c| {
        c.fresh(
            &format!("SELECT DISTINCT {} FROM {} d WHERE d._w_world = $1", json_object_expr("d", &l.key_columns), l.delta_name),
            None,
            &[world.num.into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
        .filter_map(|r| r.get::<JsonB>(1).ok().flatten().map(|j| j.0.to_string()))
        .collect()
    });
    let mut keys: Vec<Value> = keys.into_iter().filter(|k| !own.contains(&k.to_string())).collect();
    if keys.is_empty() {
        return Vec::new();
    }
    keys.sort_by(|x, y| compare_keys(x, y, &l.key_columns));
    let before = with_world(Some(at_fork), || read_rows(l, &keys));
    let after = with_world(parent, || read_rows(l, &keys));
    let texts = key_texts(l, &keys);
    keys.into_iter()
        .zip(texts)
        .filter_map(|(k, t)| {
            let (x, y) = (before.get(&k.to_string()).cloned(), after.get(&k.to_string()).cloned());
            (x != y).then_some((t, x, y))
        })
        .collect()
}
