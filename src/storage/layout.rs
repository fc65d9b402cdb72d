//! A tracked table's layout (`Layout`: its storage's relations, names, key and column maps, unique
//! indexes), read from the catalog when `relation_layout` first needs it and kept until a relcache
//! invalidation (storage/mod.rs).
use super::*;

pub(super) fn load_layout(tabno: i32) -> Layout {
    // On the latest snapshot, as Postgres reads its own catalogs: a layout describes storage, and a
    // REPEATABLE READ transaction must see the storage another transaction made for a table after this
    // one's snapshot was taken (its first writer's: ensure_history) to capture its own write into it.
    // (The command counter first moves on, so the storage this transaction just made is seen too.)
    // (in a parallel worker, which can do neither, on the active snapshot: the leader made no storage)
    let parallel = unsafe { pg_sys::IsInParallelMode() };
    if !parallel {
        unsafe { pg_sys::CommandCounterIncrement() };
    }
    const LAYOUT_SQL: &str = "SELECT relid::oid, history::oid, delta::oid, overlay::oid, NULL::oid AS unused, key_kind::text, key_columns, unsupported,
                            (SELECT array_agg(coalesce(ta.attnum, dl.attnum, 0)::int4 ORDER BY ha.attnum)
                               FROM pg_attribute ha
                               LEFT JOIN pg_attribute ta ON ta.attrelid = t.relid AND ta.attname = ha.attname AND NOT ta.attisdropped AND ta.attnum > 0
                               -- a column dropped since: rows written before the drop still hold its value
                               LEFT JOIN LATERAL (
                                   SELECT l.attnum FROM worlds.column_log l
                                   WHERE l.tabno = t.tabno AND l.attname = ha.attname AND NOT l.renamed AND l.dropped IS NOT NULL
                                     AND l.typ = format_type(ha.atttypid, ha.atttypmod)
                                     -- (and stored as the history's column is: a dropped column keeps its length)
                                     AND EXISTS (SELECT 1 FROM pg_attribute d WHERE d.attrelid = t.relid AND d.attnum = l.attnum AND d.attisdropped
                                                   AND d.attlen = ha.attlen AND d.attbyval = ha.attbyval)
                                   ORDER BY l.dropped DESC LIMIT 1) dl ON ta.attnum IS NULL
                              WHERE ha.attrelid = t.history AND ha.attnum > 7 AND NOT ha.attisdropped) AS hmap,
                            (SELECT array_agg(a.attnum::int4 ORDER BY k.ord) FROM unnest(t.key_columns) WITH ORDINALITY k(name, ord)
                               JOIN pg_attribute a ON a.attrelid = t.relid AND a.attname = k.name) AS keys,
                            overlay_nothing::oid,
                            ARRAY[coalesce(worlds._qualified(relid), relid::oid::text), coalesce(worlds._qualified(changes), ''), coalesce(worlds._qualified(delta), ''), coalesce(worlds._qualified(overlay), ''), '',
                                  coalesce(worlds._qualified(history), ''), coalesce(worlds._qualified(inserts), '')],
                            inserts::oid,
                            (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.relname,
                                        'cols', (SELECT jsonb_agg(a.attname ORDER BY k.ord) FROM unnest(i.indkey) WITH ORDINALITY k(n, ord)
                                                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
                                                 WHERE k.ord <= i.indnkeyatts))), '[]')
                               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                              WHERE i.indrelid = t.relid AND i.indisunique AND NOT i.indisprimary
                                AND i.indpred IS NULL AND i.indexprs IS NULL AND NOT i.indnullsnotdistinct) AS uniques,
                            (SELECT coalesce(array_agg(attname::text ORDER BY attnum), '{}') FROM pg_attribute
                              WHERE attrelid = t.relid AND attnum > 0 AND NOT attisdropped AND attgenerated <> '') AS generated,
                            CASE WHEN t.overlay IS NOT NULL THEN to_regclass(format('worlds_data.%I', 'k' || substr((SELECT relname FROM pg_class WHERE oid = t.overlay), 2)))::oid END AS overlay_rows,
                            (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.relname,
                                        'keys', (SELECT jsonb_agg(pg_get_indexdef(i.indexrelid, k, true) ORDER BY k) FROM generate_series(1, i.indnkeyatts) k),
                                        'pred', pg_get_expr(i.indpred, i.indrelid, true), 'nnd', i.indnullsnotdistinct)), '[]')
                               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                              WHERE i.indrelid = t.relid AND i.indisunique AND NOT i.indisprimary
                                AND (i.indpred IS NOT NULL OR i.indexprs IS NOT NULL OR i.indnullsnotdistinct)
                                -- only built-in functions and operators: the check runs with pg_worlds' own
                                -- rights, and a function of the table owner's would run with them (such an
                                -- index is checked at merge, by Postgres, as the merging role)
                                AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid
                                                  AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass) AND d.refobjid >= 16384)) AS other_uniques
                     FROM worlds.tables t WHERE tabno = $1";
    let parse = |row: &snapshot_spi::Row| -> Layout {
        let hmap: Vec<Option<i32>> = row.get::<Vec<i32>>(9).unwrap_or_default().into_iter().map(|a| (a > 0).then_some(a)).collect();
        // history tables only ever gain columns, so position i after the fixed ones is column 8 + i
        let names: Vec<String> = row.get::<Vec<String>>(12).unwrap_or_default();
        // (printed quoted by worlds._qualified)
        let name = |i: usize| crate::sql_text::QuotedName::printed(names.get(i).cloned().unwrap_or_default());
        Layout {
            tabno,
            table_name: name(0),
            history_name: name(1),
            delta_name: name(2),
            overlay_name: name(3),
            before_images_name: name(5),
            inserts_name: name(6),
            relid: row.get::<pg_sys::Oid>(1).unwrap_or_else(|| raise("55000", format!("pg_worlds: table number {tabno} is no longer tracked"))),
            // (none before the table's first captured write: worlds._make_history, ensure_history)
            history: row.get::<pg_sys::Oid>(2).unwrap_or(pg_sys::Oid::INVALID),
            // (none before the database's first world: storage/world_storage.rs)
            delta: row.get::<pg_sys::Oid>(3).unwrap_or(pg_sys::Oid::INVALID),
            overlay: row.get::<pg_sys::Oid>(4).unwrap_or(pg_sys::Oid::INVALID),
            key_kind: row.get::<String>(6).unwrap_or_default().bytes().next().unwrap_or(b'r'),
            key_columns: row.get::<Vec<String>>(7).unwrap_or_default(),
            unsupported: row.get::<String>(8),
            history_map: hmap,
            key_attnos: row.get::<Vec<i32>>(10).unwrap_or_default(),
            overlay_nothing: row.get::<pg_sys::Oid>(11).unwrap_or(pg_sys::Oid::INVALID),
            inserts: row.get::<pg_sys::Oid>(13).unwrap_or(pg_sys::Oid::INVALID),
            uniques: json_array(row, 14)
                .into_iter()
                .map(|u| {
                    let cols = u["cols"].as_array().cloned().unwrap_or_default();
                    (
                        u["name"].as_str().unwrap_or_default().to_string(),
                        cols.iter().filter_map(|c| c.as_str().map(str::to_string)).collect(),
                    )
                })
                .collect(),
            generated: row.get::<Vec<String>>(15).unwrap_or_default(),
            overlay_rows: row.get::<pg_sys::Oid>(16).unwrap_or(pg_sys::Oid::INVALID),
            other_uniques: json_array(row, 17)
                .into_iter()
                .map(|u| OtherUnique {
                    name: u["name"].as_str().unwrap_or_default().to_string(),
                    keys: u["keys"].as_array().into_iter().flatten().filter_map(|k| k.as_str().map(str::to_string)).collect(),
                    predicate: u["pred"].as_str().map(str::to_string),
                    nulls_not_distinct: u["nnd"].as_bool().unwrap_or(false),
                })
                .collect(),
        }
    };
    // In a SERIALIZABLE transaction the table's row is read without a predicate lock (catalog_scan.rs) and
    // given to the query as its parameter, in place of the read of worlds.tables.
    if catalog_scan::serializable() && !parallel {
        let relid = catalog_scan::catalog_table(c"tables");
        let row = (relid != pg_sys::Oid::INVALID)
            .then(|| unsafe {
                let rowtype = pg_sys::get_rel_type_id(relid);
                let mut keys = [catalog_scan::key_eq(pg_sys::get_attnum(relid, c"tabno".as_ptr()), pg_sys::F_INT4EQ, pg_sys::Datum::from(tabno))];
                catalog_scan::row_datum(relid, pg_sys::Oid::INVALID, &mut keys, pg_sys::GetLatestSnapshot()).map(|d| (rowtype, d))
            })
            .flatten();
        let Some((rowtype, datum)) = row else { raise("55000", format!("pg_worlds: table number {tabno} is no longer tracked")) };
        let sql = LAYOUT_SQL.replace("FROM worlds.tables t WHERE tabno = $1", "FROM (SELECT ($1::worlds.tables).*) t");
        let layouts = as_internal(|| snapshot_spi::query_latest_generic(&sql, &[rowtype], &[Some(datum)], parse));
        return layouts.into_iter().next().unwrap_or_else(|| raise("55000", format!("pg_worlds: table number {tabno} is no longer tracked")));
    }
    let (types, args) = ([pg_sys::INT4OID], [snapshot_spi::arg(tabno)]);
    let layouts = as_internal(|| {
        if parallel {
            snapshot_spi::query_generic(LAYOUT_SQL, &types, &args, parse)
        } else {
            snapshot_spi::query_latest_generic(LAYOUT_SQL, &types, &args, parse)
        }
    });
    layouts.into_iter().next().unwrap_or_else(|| raise("55000", format!("pg_worlds: table number {tabno} is no longer tracked")))
}

/// Column `ord` of a layout row, a JSON array, as its elements (none when NULL).
fn json_array(row: &snapshot_spi::Row, ord: usize) -> Vec<serde_json::Value> {
    match row.get::<pgrx::JsonB>(ord) {
        Some(pgrx::JsonB(serde_json::Value::Array(a))) => a,
        _ => Vec::new(),
    }
}
