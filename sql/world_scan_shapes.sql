-- Every plan shape that puts a node above or around the world scan (WorldScan) or a key's lookup in the
-- past (WorldKeyLookup), or passes parameters into them. Each query is shown with its plan in the world, and
-- read both ways: through the world scan and through the overlay views (worlds.world_scan = off, the
-- reference). `same` means the two gave the same rows.
CREATE EXTENSION pg_worlds;
CREATE TABLE t (tid int PRIMARY KEY, grp int NOT NULL, v text);
CREATE INDEX ON t (grp);
INSERT INTO t SELECT g, g % 10, 'v' || g FROM generate_series(1, 5000) g;
CREATE TABLE c (id int PRIMARY KEY, t_id int NOT NULL, meta jsonb);
INSERT INTO c SELECT g, (g * 7) % 5000 + 1, jsonb_build_object('g', g) FROM generate_series(1, 1000) g;
ANALYZE t;
CREATE TABLE s (code text PRIMARY KEY, n int);
INSERT INTO s SELECT 'k' || g, g FROM generate_series(1, 200) g;
ANALYZE c;
ANALYZE s;
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
UPDATE c SET meta = '{"w": 1}' WHERE id = 3;
UPDATE t SET v = 'w changed' WHERE tid IN (2, 3, 700);
DELETE FROM t WHERE tid IN (4, 701);
INSERT INTO t VALUES (6000, 3, 'w new'), (6001, 4, 'w new');
DELETE FROM c WHERE id = 5;
INSERT INTO c VALUES (2000, 6000, '{"w": 2}');
UPDATE s SET n = -n WHERE code IN ('k3', 'k4');
DELETE FROM s WHERE code = 'k5';
INSERT INTO s VALUES ('k0', 0);
RESET worlds.world;
-- main moves on after the fork: the world doesn't see it
UPDATE t SET v = 'main later' WHERE tid IN (5, 6);
DELETE FROM t WHERE tid = 7;
CREATE FUNCTION both_ways(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    a text;
    b text;
    n bigint;
BEGIN
    PERFORM set_config('worlds.world_scan', 'on', true);
    EXECUTE format('SELECT string_agg(r::text, '' '' ORDER BY r::text), count(*) FROM (%s) r', q) INTO a, n;
    PERFORM set_config('worlds.world_scan', 'off', true);
    EXECUTE format('SELECT string_agg(r::text, '' '' ORDER BY r::text) FROM (%s) r', q) INTO b;
    PERFORM set_config('worlds.world_scan', 'on', true);
    RETURN CASE WHEN a IS NOT DISTINCT FROM b THEN format('same, %s rows', n) ELSE format('DIFFERENT: %s | %s', a, b) END;
END $$;
SET worlds.world = w;
-- Result: a condition that names no column of the table is a one-time filter, a gating Result above the
-- scan (this crashed the server: main's scan under the world scan was a Result, read as a scan)
SELECT t.tid FROM t WHERE (SELECT 1) IS NOT NULL ORDER BY tid LIMIT 3;
SELECT t.tid FROM t WHERE (SELECT max(id) FROM c) > 0 ORDER BY tid LIMIT 3;
SELECT t.tid FROM t WHERE (SELECT meta FROM c LIMIT 1) IS NOT NULL LIMIT 3;
EXPLAIN (COSTS OFF) SELECT t.tid FROM t WHERE (SELECT max(id) FROM c) > 0;
SELECT both_ways('SELECT t.tid, t.v FROM t WHERE (SELECT 1) IS NOT NULL');
SELECT both_ways('SELECT t.* FROM t WHERE (SELECT max(id) FROM c) > 0');
SELECT both_ways('SELECT t.tid FROM t WHERE (SELECT max(id) FROM c) < 0');
SELECT both_ways('SELECT t.tid FROM t WHERE current_setting(''worlds.world'') = ''w'' AND tid < 10');
SELECT both_ways('SELECT * FROM t WHERE false');
SELECT both_ways('SELECT count(*) FROM t WHERE (SELECT 1) IS NOT NULL');
-- ... with the gate over a key's condition, an index scan
SELECT both_ways('SELECT * FROM t WHERE tid = 3 AND (SELECT 1) = 1');
EXPLAIN (COSTS OFF) SELECT * FROM t WHERE tid BETWEEN 1 AND 9 AND (SELECT 1) = 1 ORDER BY tid;
SELECT * FROM t WHERE tid BETWEEN 1 AND 9 AND (SELECT 1) = 1 ORDER BY tid;
-- Limit
EXPLAIN (COSTS OFF) SELECT * FROM t ORDER BY tid LIMIT 5;
SELECT * FROM t ORDER BY tid LIMIT 5;
SELECT both_ways('SELECT * FROM t ORDER BY tid DESC LIMIT 5');
SELECT both_ways('SELECT * FROM t LIMIT 5 OFFSET 4995');
-- InitPlan and SubPlan (a correlated sub-query: a rescan of the world scan with a parameter per row)
SELECT both_ways('SELECT * FROM t WHERE tid = (SELECT min(id) FROM c)');
SELECT both_ways('SELECT c.id, (SELECT v FROM t WHERE t.tid = c.t_id) FROM c WHERE c.id < 30');
SELECT both_ways('SELECT c.id FROM c WHERE EXISTS (SELECT 1 FROM t WHERE t.tid = c.t_id AND t.v LIKE ''w%'')');
SELECT both_ways('SELECT c.id FROM c WHERE c.t_id NOT IN (SELECT tid FROM t WHERE grp = 3)');
EXPLAIN (COSTS OFF) SELECT c.id, (SELECT v FROM t WHERE t.tid = c.t_id) FROM c WHERE c.id < 30;
-- nested loops: the inner world scan rescanned with the outer row's key as a parameter; Material and
-- Memoize over it
SET enable_hashjoin = off;
SET enable_mergejoin = off;
EXPLAIN (COSTS OFF) SELECT c.id, t.v FROM c JOIN t ON t.tid = c.t_id WHERE c.id < 50;
SELECT both_ways('SELECT c.id, t.v FROM c JOIN t ON t.tid = c.t_id WHERE c.id < 50');
SELECT both_ways('SELECT c.id, t.v FROM c LEFT JOIN LATERAL (SELECT v FROM t WHERE t.tid = c.t_id + 1) t ON true WHERE c.id < 50');
SET enable_indexscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT c.id, t.v FROM c JOIN t ON t.grp = c.id WHERE c.id < 3 AND t.tid < 40;
SELECT both_ways('SELECT c.id, t.v FROM c JOIN t ON t.grp = c.id WHERE c.id < 3 AND t.tid < 40');
RESET enable_indexscan;
RESET enable_bitmapscan;
SET enable_memoize = on;
EXPLAIN (COSTS OFF) SELECT c.id, t.v FROM c JOIN t ON t.tid = c.t_id % 20 + 1;
SELECT both_ways('SELECT c.id, t.v FROM c JOIN t ON t.tid = c.t_id % 20 + 1');
RESET enable_hashjoin;
-- mark and restore: a merge join (the world scan can't mark, so Postgres materializes it)
SET enable_nestloop = off;
SET enable_mergejoin = on;
SET enable_hashjoin = off;
EXPLAIN (COSTS OFF) SELECT c.id, t.v FROM c JOIN t ON t.tid = c.id;
SELECT both_ways('SELECT c.id, t.v FROM c JOIN t ON t.tid = c.id');
SELECT both_ways('SELECT c.id, t.v FROM c JOIN t ON t.tid = c.t_id');
SELECT both_ways('SELECT a.tid, b.tid FROM t a JOIN t b ON a.tid = b.grp');
RESET enable_nestloop;
RESET enable_mergejoin;
RESET enable_hashjoin;
RESET enable_memoize;
-- Append and MergeAppend
EXPLAIN (COSTS OFF) SELECT tid FROM t WHERE tid < 10 UNION ALL SELECT id FROM c WHERE id < 10 ORDER BY 1;
SELECT tid FROM t WHERE tid < 10 UNION ALL SELECT id FROM c WHERE id < 10 ORDER BY 1;
SELECT both_ways('SELECT tid FROM t WHERE tid < 10 UNION ALL SELECT id FROM c WHERE id < 10');
SELECT both_ways('SELECT tid FROM t UNION SELECT t_id FROM c');
-- CTE scans, read twice
SELECT both_ways('WITH x AS MATERIALIZED (SELECT * FROM t WHERE grp = 3) SELECT * FROM x JOIN x y USING (tid)');
SELECT both_ways('WITH RECURSIVE r(n) AS (SELECT min(tid) FROM t UNION ALL SELECT (SELECT min(tid) FROM t WHERE tid > r.n) FROM r WHERE r.n < 12) SELECT * FROM r');
-- Gather and Gather Merge: the world's rows come once, in key order under Gather Merge
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET min_parallel_index_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT count(*), sum(tid) FROM t WHERE v <> 'none';
EXPLAIN (COSTS OFF) SELECT tid, v FROM t WHERE grp = 3 ORDER BY tid;
SET worlds.world_scan = on;
SELECT md5(string_agg(r::text, ' ' ORDER BY r::text)) AS a, count(*) AS n FROM (SELECT tid, v FROM t WHERE v <> 'none') r \gset
SELECT count(*) AS a_count, sum(tid) AS a_sum FROM t WHERE v <> 'none' \gset
SELECT md5(string_agg(tid::text, ' ')) AS a_ordered FROM (SELECT tid FROM t WHERE grp = 3 ORDER BY tid) r \gset
SET worlds.world_scan = off;
SELECT md5(string_agg(r::text, ' ' ORDER BY r::text)) AS b FROM (SELECT tid, v FROM t WHERE v <> 'none') r \gset
SELECT count(*) AS b_count, sum(tid) AS b_sum FROM t WHERE v <> 'none' \gset
SELECT md5(string_agg(tid::text, ' ')) AS b_ordered FROM (SELECT tid FROM t WHERE grp = 3 ORDER BY tid) r \gset
SET worlds.world_scan = on;
SELECT :'a' = :'b' AS same_rows, :n AS n, :a_count = :b_count AND :a_sum = :b_sum AS same_aggregate, :'a_ordered' = :'b_ordered' AS same_order;
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET min_parallel_index_scan_size;
RESET max_parallel_workers_per_gather;
-- backward scans: a SCROLL cursor (the world scan can't scan backwards, so Postgres materializes it)
BEGIN;
DECLARE s SCROLL CURSOR FOR SELECT tid, v FROM t WHERE tid < 10 AND (SELECT 1) = 1 ORDER BY tid;
FETCH LAST FROM s;
FETCH BACKWARD 3 FROM s;
FETCH ABSOLUTE 2 FROM s;
FETCH FORWARD 2 FROM s;
COMMIT;
BEGIN;
SET LOCAL worlds.world_scan = off;
DECLARE s SCROLL CURSOR FOR SELECT tid, v FROM t WHERE tid < 10 AND (SELECT 1) = 1 ORDER BY tid;
FETCH LAST FROM s;
FETCH BACKWARD 3 FROM s;
FETCH ABSOLUTE 2 FROM s;
FETCH FORWARD 2 FROM s;
COMMIT;
-- a key's lookup (WorldKeyLookup: a table whose key isn't one integer, read through the overlay view) under
-- a gate, a limit, and as the inner side of a nested loop with the outer row's key as a parameter
EXPLAIN (COSTS OFF) SELECT * FROM s WHERE code = 'k3' AND (SELECT 1) = 1;
SELECT both_ways('SELECT * FROM s WHERE code = ''k3'' AND (SELECT 1) = 1');
SELECT both_ways('SELECT * FROM s WHERE code IN (''k3'', ''k5'', ''k0'') AND (SELECT max(id) FROM c) > 0 LIMIT 2');
SET enable_hashjoin = off;
SET enable_mergejoin = off;
EXPLAIN (COSTS OFF) SELECT c.id, s.n FROM c JOIN s ON s.code = 'k' || c.id WHERE c.id < 8;
SELECT both_ways('SELECT c.id, s.n FROM c JOIN s ON s.code = ''k'' || c.id WHERE c.id < 8');
SELECT both_ways('SELECT c.id, (SELECT n FROM s WHERE s.code = ''k'' || c.id) FROM c WHERE c.id < 8');
RESET enable_hashjoin;
RESET enable_mergejoin;
-- writes whose source reads the world scan (the source of an UPDATE / DELETE), with a gate and sub-queries
BEGIN;
UPDATE t SET v = 'gated' WHERE tid < 4 AND (SELECT 1) = 1;
DELETE FROM t WHERE tid = (SELECT min(id) FROM c WHERE id > 8);
UPDATE t SET v = 'from c' WHERE tid IN (SELECT t_id FROM c WHERE id < 4);
SELECT tid, v FROM t WHERE tid < 12 OR tid IN (SELECT t_id FROM c WHERE id < 4) ORDER BY tid;
SELECT both_ways('SELECT * FROM t WHERE tid < 12');
ROLLBACK;
-- EvalPlanQual: a row-locking read and a write in a world re-check a row another session changed while
-- they waited (tests/sessions/19_row_locks.sh runs the waits; here the statements' plans)
EXPLAIN (COSTS OFF) SELECT * FROM t WHERE tid = 3 FOR UPDATE;
SELECT tid, v FROM t WHERE tid = 3 AND (SELECT 1) = 1 FOR UPDATE;
-- the past: a key's lookup under a gate and a limit
RESET worlds.world;
SELECT 'main@' || clock_timestamp() AS before_change \gset
UPDATE c SET meta = '{"later": 1}' WHERE id = 1;
SET worlds.world = :'before_change';
SELECT id, meta FROM c WHERE id = 1 AND (SELECT 1) = 1;
SELECT id, meta FROM c WHERE id IN (1, 2) AND (SELECT max(id) FROM c) > 0 ORDER BY id LIMIT 1;
RESET worlds.world;
SELECT id, meta FROM c WHERE id = 1;
-- the overlay's visibility functions called by hand with a NULL position (sqlsmith: a null pointer read)
SET worlds.world = w;
SELECT worlds._base_visible(1, NULL::tid, 1::int8), worlds._base_visible(1, NULL::tid, 'k'::text),
       worlds._history_visible(1, NULL::int8, 1::int8), worlds._base_visible(NULL::int4, '(0,1)'::tid, 1::int4);
RESET worlds.world;
