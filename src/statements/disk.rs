//! SHOW STORAGE [FOR [WORLD] name] and SHOW DISK (spec, "SHOW STORAGE", "SHOW DISK"): what each world
//! holds on its own, and where the database's disk goes. Sizes are Postgres's own (pg_relation_size,
//! pg_total_relation_size, pg_database_size, pg_ls_waldir), read as pg_worlds' internal work.
//! How a world's share of a shared delta table is counted: docs/architecture.md, "What a world holds".
use crate::api::raise;
use crate::storage::disk_limit;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use std::collections::BTreeMap;

/// Rows of a query run as pg_worlds' internal work, each read by `f`.
fn internal_rows<R>(sql: &str, args: &[DatumWithOid], f: impl Fn(&pgrx::spi::SpiHeapTupleData) -> R) -> Vec<R> {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(sql, None, args, |t| t.map(|r| f(&r)).collect()).unwrap_or_else(|e| raise("XX000", format!("measuring storage: {e}")))
    })
}

fn block_size() -> i64 {
    pg_sys::BLCKSZ as i64
}

/// Main's row (and SHOW DISK's live): the user's tables and materialized views with their indexes and
/// TOAST, in every schema but Postgres's own (`pg_*`: catalogs, TOAST, temporary schemas, and the
/// worlds' own namespaces `pg_w<num>_*`), information_schema and pg_worlds' (worlds, worlds_data).
const USER_TABLES_BYTES: &str = "
    SELECT coalesce(sum(pg_catalog.pg_total_relation_size(c.oid)), 0)::int8
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind IN ('r', 'm') AND n.nspname NOT LIKE 'pg\\_%'
       AND n.nspname NOT IN ('information_schema', 'worlds', 'worlds_data')";

/// SHOW STORAGE: (world, rows_changed, pages, bytes), main first, then the live worlds by number (one
/// with FOR; 3D000 when there's no such world).
#[pg_extern(name = "show_storage", volatile, parallel_unsafe)]
fn show_storage(
    for_world: default!(Option<&str>, "NULL"),
) -> TableIterator<'static, (name!(world, String), name!(rows_changed, Option<i64>), name!(pages, i64), name!(bytes, i64))> {
    crate::governance::agents::require("read", None);
    let worlds: Vec<(i32, String)> = match for_world {
        Some(name) => {
            let w = crate::world::resolve_live(name);
            vec![(w.num, if w.num == 0 { "main".to_string() } else { w.name.clone() })]
        }
        None => {
            let mut all = vec![(0, "main".to_string())];
            all.extend(internal_rows(
                "SELECT num, name FROM worlds.world WHERE dropped IS NULL AND num <> 0 ORDER BY num",
                &[],
                |r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<String>(2).ok().flatten().unwrap_or_default()),
            ));
            all
        }
    };
    let nums: Vec<i32> = worlds.iter().map(|w| w.0).filter(|&n| n != 0).collect();
    let mut bytes: BTreeMap<i32, f64> = world_delta_bytes(&nums);
    for (num, own) in world_object_bytes(&nums) {
        *bytes.entry(num).or_default() += own;
    }
    let changes: BTreeMap<i32, i64> = if nums.is_empty() {
        BTreeMap::new()
    } else {
        internal_rows("SELECT n, worlds._changes(n) FROM unnest($1::int4[]) n", &[nums.clone().into()], |r| {
            (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<i64>(2).ok().flatten().unwrap_or(0))
        })
        .into_iter()
        .collect()
    };
    let mut out = Vec::new();
    for (num, name) in worlds {
        let (rows_changed, b) = if num == 0 {
            let main = internal_rows(USER_TABLES_BYTES, &[], |r| r.get::<i64>(1).ok().flatten().unwrap_or(0));
            (None, main.first().copied().unwrap_or(0))
        } else {
            (Some(changes.get(&num).copied().unwrap_or(0)), bytes.get(&num).copied().unwrap_or(0.0).round() as i64)
        };
        out.push((name, rows_changed, (b + block_size() / 2) / block_size(), b));
    }
    TableIterator::new(out)
}

/// Each world's share of the shared delta tables, in bytes. Per delta: the heap pages its rows are on
/// (found through the delta's index on `_w_world`), each page counted as the world's rows' part of the
/// page's live tuple bytes (`pg_column_size` of each row; the page's other rows read by a TID range scan
/// of that page only); the world's pages over the delta's heap pages is its share of the delta's whole
/// size (heap, its indexes, TOAST). O(rows the worlds changed, and the rows sharing their pages).
fn world_delta_bytes(nums: &[i32]) -> BTreeMap<i32, f64> {
    let mut bytes = BTreeMap::new();
    if nums.is_empty() {
        return bytes;
    }
    let deltas = internal_rows(
        "SELECT n.nspname::text, c.relname::text, pg_catalog.pg_relation_size(c.oid) / current_setting('block_size')::int8,
                pg_catalog.pg_total_relation_size(c.oid)
           FROM worlds.tables t JOIN pg_catalog.pg_class c ON c.oid = t.delta JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          ORDER BY t.tabno",
        &[],
        |r| {
            (
                r.get::<String>(1).ok().flatten().unwrap_or_default(),
                r.get::<String>(2).ok().flatten().unwrap_or_default(),
                r.get::<i64>(3).ok().flatten().unwrap_or(0),
                r.get::<i64>(4).ok().flatten().unwrap_or(0),
            )
        },
    );
    for (schema, name, heap_pages, total) in deltas {
        if heap_pages == 0 {
            continue;
        }
        let d = crate::sql_text::QuotedName::qualified(&schema, &name);
        let shares = internal_rows(
            &format!(
                "WITH mine AS (
                     SELECT d._w_world AS w, ((d.ctid::text::point)[0])::int8 AS blk, sum(pg_catalog.pg_column_size(d.*))::float8 AS b
                       FROM {d} d WHERE d._w_world = ANY ($1::int4[]) GROUP BY 1, 2),
                 pages AS (
                     SELECT k.blk, (SELECT sum(pg_catalog.pg_column_size(x.*))::float8 FROM {d} x
                                     WHERE x.ctid >= format('(%s,0)', k.blk)::tid AND x.ctid < format('(%s,0)', k.blk + 1)::tid) AS b
                       FROM (SELECT DISTINCT blk FROM mine) k)
                 SELECT m.w, sum(m.b / p.b) FROM mine m JOIN pages p USING (blk) WHERE p.b > 0 GROUP BY m.w"
            ),
            &[nums.to_vec().into()],
            |r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<f64>(2).ok().flatten().unwrap_or(0.0)),
        );
        for (num, pages) in shares {
            *bytes.entry(num).or_default() += pages.min(heap_pages as f64) / heap_pages as f64 * total as f64;
        }
    }
    bytes
}

/// Each world's own relations, whole: those in its namespaces (`pg_w<num>_<schema>`: tables it made,
/// its twins of main's tables, their indexes and TOAST, its sequences and materialized views), and any
/// twin listed elsewhere.
fn world_object_bytes(nums: &[i32]) -> Vec<(i32, f64)> {
    if nums.is_empty() {
        return Vec::new();
    }
    internal_rows(
        "SELECT o.world, sum(pg_catalog.pg_total_relation_size(o.rel))::float8 FROM (
             SELECT s.world, c.oid AS rel
               FROM worlds.world_schema s JOIN pg_catalog.pg_namespace n ON n.nspname = s.nsp
               JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relkind IN ('r', 'm', 'S')
              WHERE s.world = ANY ($1::int4[])
             UNION
             SELECT t.world, t.twin FROM worlds.world_twin t JOIN pg_catalog.pg_class c ON c.oid = t.twin
              WHERE t.world = ANY ($1::int4[])) o
         GROUP BY o.world",
        &[nums.to_vec().into()],
        |r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<f64>(2).ok().flatten().unwrap_or(0.0)),
    )
}

/// SHOW DISK's history: what pg_worlds keeps only for time travel, undo and merges — every tracked
/// table's history and inserts (and those of tables dropped since), AS OF's cached moments, the events
/// SHOW HISTORY and UNDO MERGE read, the column log of AS OF's schema as it was; with their indexes and
/// TOAST.
const HISTORY_BYTES: &str = "
    SELECT coalesce(sum(pg_catalog.pg_total_relation_size(r.rel)), 0)::int8 FROM (
        SELECT unnest(ARRAY[t.history, t.inserts])::oid AS rel FROM worlds.tables t WHERE t.history IS NOT NULL
        UNION SELECT unnest(ARRAY[d.history, d.inserts])::oid FROM worlds.dropped_table d
        UNION SELECT a.relation::oid FROM worlds.as_of_cache a
        UNION SELECT 'worlds.event'::regclass::oid
        UNION SELECT 'worlds.column_log'::regclass::oid) r
     WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = r.rel)";

/// SHOW DISK's reclaimable, part one: what VACUUM would free, from the statistics Postgres keeps of every
/// table of the database (pg_stat_all_tables): each table's heap times its dead tuples' share of its tuples.
const DEAD_BYTES: &str = "
    SELECT coalesce(sum(pg_catalog.pg_relation_size(s.relid)::float8 * s.n_dead_tup / (s.n_live_tup + s.n_dead_tup)), 0)::int8
      FROM pg_catalog.pg_stat_all_tables s WHERE s.n_dead_tup > 0";

/// Part two: what the purge would free (worlds.purge_history). Tables dropped and AS OF copies older than
/// history_retention, whole; and of each history table, the share of its rows older than the purge's
/// cutoff (history_retention, or the fork of the oldest live world of main if older: the purge keeps what
/// a live world still needs), as the planner would estimate it: from the column statistics of `_w_at`
/// (pg_stats: its most common values' frequencies, and its histogram's buckets below the cutoff), times the
/// table's size. A table ANALYZE (autovacuum) hasn't seen yet counts 0.
const PURGEABLE_BYTES: &str = "
    WITH cut AS (
        SELECT now() - worlds.history_retention() AS retained,
               least(now() - worlds.history_retention(),
                     (SELECT min(coalesce(w.fork_at, w.created)) FROM worlds.world w
                       WHERE w.dropped IS NULL AND w.num <> 0 AND w.parent = 0)) AS at),
    hist AS (
        SELECT h.rel, c.relname FROM (SELECT unnest(ARRAY[t.history, t.inserts])::oid AS rel FROM worlds.tables t
                                       WHERE t.history IS NOT NULL) h
          JOIN pg_catalog.pg_class c ON c.oid = h.rel),
    older AS (
        SELECT h.rel, (
            SELECT coalesce((SELECT sum(m.f) FROM unnest(s.most_common_vals::text::timestamptz[], s.most_common_freqs) m(v, f)
                              WHERE m.v < cut.at), 0)
                 + greatest(1 - coalesce((SELECT sum(f) FROM unnest(s.most_common_freqs) f), 0), 0)
                   * coalesce((SELECT greatest(count(*) FILTER (WHERE b < cut.at) - 1, 0)::float8 / nullif(count(*) - 1, 0)
                                 FROM unnest(s.histogram_bounds::text::timestamptz[]) b), 0)
              FROM pg_catalog.pg_stats s, cut
             WHERE s.schemaname = 'worlds_data' AND s.tablename = h.relname AND s.attname = '_w_at') AS share
          FROM hist h)
    SELECT (coalesce((SELECT sum(least(o.share, 1) * pg_catalog.pg_total_relation_size(o.rel)) FROM older o WHERE o.share > 0), 0)
          + coalesce((SELECT sum(pg_catalog.pg_total_relation_size(d.changes) + pg_catalog.pg_total_relation_size(d.history)
                                 + pg_catalog.pg_total_relation_size(d.inserts))
                        FROM worlds.dropped_table d, cut WHERE d.dropped < cut.retained), 0)
          + coalesce((SELECT sum(pg_catalog.pg_total_relation_size(a.relation)) FROM worlds.as_of_cache a, cut
                       WHERE a.at < cut.retained), 0))::int8";

/// SHOW DISK: six rows (what, bytes): live, history, reclaimable, log, total, limit.
#[pg_extern(name = "show_disk", volatile, parallel_unsafe)]
fn show_disk() -> TableIterator<'static, (name!(what, String), name!(bytes, i64))> {
    crate::governance::agents::require("read", None);
    let one = |sql: &str| internal_rows(sql, &[], |r| r.get::<i64>(1).ok().flatten().unwrap_or(0)).first().copied().unwrap_or(0);
    let live = one(USER_TABLES_BYTES);
    let history = one(HISTORY_BYTES);
    let reclaimable = one(DEAD_BYTES).saturating_add(one(PURGEABLE_BYTES));
    let used = disk_limit::measure();
    TableIterator::new(vec![
        ("live".to_string(), live),
        ("history".to_string(), history),
        ("reclaimable".to_string(), reclaimable),
        ("log".to_string(), used.log),
        ("total".to_string(), used.total()),
        ("limit".to_string(), disk_limit::limit()),
    ])
}
