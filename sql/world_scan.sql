-- The world scan: a SELECT in a world reads each table with an integer key through main's own plan (one
-- relation planned, as in main), dropping rows the world doesn't see and adding the world's rows.
-- Every query below is run both ways, through the world scan and through the overlay views
-- (worlds.world_scan = off), and must give the same rows.
CREATE EXTENSION pg_worlds;
CREATE TABLE big (id int PRIMARY KEY, grp int NOT NULL, v text, gone text);
CREATE INDEX ON big (grp);
INSERT INTO big SELECT g, g % 50, 'v' || g, 'x' FROM generate_series(1, 20000) g;
CREATE TABLE ref (id bigint PRIMARY KEY, big_id int NOT NULL, note text);
INSERT INTO ref SELECT g, (g * 37) % 20000 + 1, 'n' || g FROM generate_series(1, 2000) g;
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
UPDATE big SET v = 'w changed' WHERE id IN (10, 11, 500, 19999);
UPDATE big SET grp = 3 WHERE id IN (12, 13);
DELETE FROM big WHERE id IN (14, 600, 20000);
INSERT INTO big VALUES (25000, 3, 'w new', 'x');
DELETE FROM big WHERE id = 15;
INSERT INTO big VALUES (15, 4, 'w reinserted', 'x');
UPDATE ref SET big_id = 25000 WHERE id = 7;
INSERT INTO ref VALUES (5000, 10, 'w ref');
RESET worlds.world;
-- main moves on after the fork: the world keeps seeing main as it was
UPDATE big SET v = 'main later' WHERE id IN (20, 21, 10);
DELETE FROM big WHERE id IN (22, 11);
INSERT INTO big VALUES (30000, 3, 'main new', 'x');
UPDATE ref SET note = 'main later' WHERE id = 8;
-- a world of the world
SELECT * FROM worlds.sql('fork world w as w2');
SET worlds.world = w2;
UPDATE big SET v = 'w2 changed' WHERE id IN (500, 501);
DELETE FROM big WHERE id = 25000;
RESET worlds.world;
-- a column dropped since the fork, and another added (the world's rows get its value, as main's rows do)
ALTER TABLE big DROP COLUMN gone;
ALTER TABLE big ADD COLUMN added int DEFAULT 7;
ANALYZE big;
ANALYZE ref;
CREATE VIEW big_v AS SELECT id, v FROM big WHERE grp = 3;
CREATE FUNCTION big_v_of(i int) RETURNS text LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN (SELECT v FROM big WHERE id = i); END $$;
CREATE FUNCTION both_ways(q text, ordered bool DEFAULT false) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    agg text := CASE WHEN ordered THEN 'string_agg(r::text, '' '')' ELSE 'string_agg(r::text, '' '' ORDER BY r::text)' END;
    a text;
    b text;
    n bigint;
BEGIN
    PERFORM set_config('worlds.world_scan', 'on', true);
    EXECUTE format('SELECT %s, count(*) FROM (%s) r', agg, q) INTO a, n;
    PERFORM set_config('worlds.world_scan', 'off', true);
    EXECUTE format('SELECT %s FROM (%s) r', agg, q) INTO b;
    PERFORM set_config('worlds.world_scan', 'on', true);
    RETURN CASE WHEN a IS NOT DISTINCT FROM b THEN format('same, %s rows', n) ELSE format('DIFFERENT: %s | %s', a, b) END;
END $$;
SET worlds.world = w;
-- point reads: changed, deleted, deleted and re-inserted, new, changed in main since, untouched
SELECT id, grp, v, added FROM big WHERE id IN (10, 11, 14, 15, 20, 22, 25000, 30000, 1) ORDER BY id;
EXPLAIN (COSTS OFF) SELECT * FROM big WHERE id = 10;
SELECT both_ways('SELECT * FROM big WHERE id = 10');
SELECT both_ways('SELECT * FROM big WHERE id = 14');
SELECT both_ways('SELECT * FROM big WHERE id = 22');
SELECT both_ways('SELECT * FROM big WHERE id = 25000');
SELECT both_ways('SELECT * FROM big WHERE id = ANY (''{10,11,14,15,20,21,22,30000,5}'')');
-- ranges in key order, both directions, merged with the world's rows
SELECT id, v FROM big WHERE id BETWEEN 8 AND 24 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id, v FROM big WHERE id BETWEEN 8 AND 24 ORDER BY id;
SELECT both_ways('SELECT id, v FROM big WHERE id BETWEEN 8 AND 24 ORDER BY id', true);
SELECT both_ways('SELECT id, v FROM big WHERE id BETWEEN 8 AND 24 ORDER BY id DESC', true);
SELECT both_ways('SELECT id, v FROM big ORDER BY id DESC LIMIT 5', true);
SELECT both_ways('SELECT id, v FROM big WHERE id > 19990 ORDER BY id LIMIT 20', true);
-- another index; an index-only scan in main becomes an index scan; bitmap and sequential scans
SELECT both_ways('SELECT id, grp, v FROM big WHERE grp = 3');
SELECT both_ways('SELECT id FROM big WHERE id BETWEEN 1 AND 30');
SET enable_indexscan = off;
SELECT both_ways('SELECT id, v FROM big WHERE id BETWEEN 1 AND 30 OR grp = 4');
RESET enable_indexscan;
SELECT both_ways('SELECT count(*), sum(id), count(added), count(DISTINCT v) FROM big');
SELECT both_ways('SELECT * FROM big WHERE v LIKE ''w%'' OR v LIKE ''main%''');
-- joins: the inner side on index keys from each outer row (a nested loop, as in main)
SET enable_hashjoin = off;
SET enable_mergejoin = off;
EXPLAIN (COSTS OFF) SELECT r.id, b.v FROM ref r JOIN big b ON b.id = r.big_id WHERE r.id BETWEEN 1 AND 10;
SELECT both_ways('SELECT r.id, b.id, b.v FROM ref r JOIN big b ON b.id = r.big_id WHERE r.id BETWEEN 1 AND 10');
SELECT both_ways('SELECT r.id, b.v FROM ref r LEFT JOIN big b ON b.id = r.big_id');
RESET enable_hashjoin;
RESET enable_mergejoin;
SELECT both_ways('SELECT r.note, b.v FROM ref r JOIN big b ON b.id = r.big_id WHERE r.id IN (7, 8, 5000)');
-- sub-queries, CTEs, whole rows, a view
SELECT both_ways('SELECT b FROM big b WHERE id IN (10, 15, 25000)');
SELECT both_ways('WITH c AS (SELECT grp, count(*) n FROM big GROUP BY grp) SELECT * FROM c WHERE n <> 400');
SELECT both_ways('SELECT id FROM big b WHERE EXISTS (SELECT 1 FROM ref r WHERE r.big_id = b.id AND r.id < 20)');
SELECT both_ways('SELECT * FROM big_v');
-- a parallel scan: the world's rows come once
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 2;
EXPLAIN (COSTS OFF) SELECT count(*) FROM big WHERE v <> 'none';
SELECT both_ways('SELECT count(*), sum(id) FROM big WHERE v <> ''none''');
-- main's rows returned as stored (every column, in order) or as no columns: main's scan doesn't project
SELECT both_ways('SELECT count(*) FROM big');
SELECT both_ways('SELECT r.* FROM ref r');
RESET parallel_setup_cost;
RESET parallel_tuple_cost;
RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
-- lateral joins, sub-plans in the quals, functions that read the world per row (each a statement of its
-- own), window functions, a CTE read twice, UNION
SELECT both_ways('SELECT r.id, b.v FROM ref r, LATERAL (SELECT v FROM big WHERE id = r.big_id + 1) b WHERE r.id < 30');
SELECT both_ways('SELECT id FROM big b WHERE v = (SELECT max(v) FROM big x WHERE x.grp = b.grp AND x.id < 40) AND id < 40');
SELECT both_ways('SELECT id, big_v_of(id + 1) FROM big WHERE id BETWEEN 5 AND 25');
SELECT both_ways('SELECT id, v FROM big WHERE id % 1000 = 10 AND big_v_of(id) IS NOT DISTINCT FROM v');
SELECT both_ways('SELECT count(*) FROM (VALUES (1), (2)) x(n), ref');
-- a column added with a default before the rows' fork holds its value only in the table's descriptor:
-- rows copied by a parent (sort, materialized CTE, CREATE TABLE AS) keep it
RESET worlds.world;
CREATE TABLE fd (id int PRIMARY KEY, v text);
INSERT INTO fd SELECT g, 'v' || g FROM generate_series(1, 1000) g;
ALTER TABLE fd ADD COLUMN c int DEFAULT 7;
SELECT * FROM worlds.sql('create world fdw');
SET worlds.world = fdw;
UPDATE fd SET v = 'fdw' WHERE id = 2;
SELECT * FROM fd ORDER BY v LIMIT 2;
SELECT both_ways('WITH m AS MATERIALIZED (SELECT * FROM fd) SELECT * FROM m');
CREATE TEMP TABLE fx AS SELECT * FROM fd;
SELECT count(c), sum(c) FROM fx;
SET worlds.world = w;
SELECT both_ways('SELECT r.* FROM ref r');
SELECT both_ways('SELECT id, v, lag(v) OVER (ORDER BY id) FROM big WHERE id BETWEEN 5 AND 25', true);
SELECT both_ways('WITH c AS MATERIALIZED (SELECT * FROM big WHERE id < 30) SELECT a.id, b.v FROM c a JOIN c b ON b.id = a.id + 1');
SELECT both_ways('SELECT id, v FROM big WHERE id < 20 UNION SELECT id, v FROM big WHERE id > 19990');
-- the nested world: its parent as of the fork, and its own rows
SET worlds.world = w2;
SELECT id, v FROM big WHERE id IN (10, 500, 501, 25000) ORDER BY id;
SELECT both_ways('SELECT id, v FROM big WHERE id BETWEEN 495 AND 505 ORDER BY id DESC', true);
SELECT both_ways('SELECT count(*), sum(id) FROM big');
-- a prepared statement keeps its plan and still sees the world's later writes
SET worlds.world = w;
SET plan_cache_mode = force_generic_plan;
PREPARE one(int) AS SELECT id, v FROM big WHERE id = $1;
EXECUTE one(16);
UPDATE big SET v = 'w later' WHERE id = 16;
EXECUTE one(16);
DELETE FROM big WHERE id = 16;
EXECUTE one(16);
RESET plan_cache_mode;
-- a scrollable cursor reads backwards too
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT id, v FROM big WHERE id BETWEEN 9 AND 13 ORDER BY id;
FETCH ALL FROM c;
FETCH BACKWARD 2 FROM c;
COMMIT;
-- row locks and system columns: locking reads go through the overlay; ctid has no meaning in a world
SELECT id, v FROM big WHERE id = 10 FOR UPDATE;
SELECT ctid FROM big WHERE id = 1;
-- main reads its own tables, untouched
RESET worlds.world;
SELECT id, v FROM big WHERE id IN (10, 11, 14, 15, 25000, 30000) ORDER BY id;
EXPLAIN (COSTS OFF) SELECT * FROM big WHERE id = 10;
-- a cursor reads the world as of its start while later statements write it (as a cursor over a table does)
RESET worlds.world;
CREATE TABLE cur (id int PRIMARY KEY, v int);
INSERT INTO cur SELECT g, 0 FROM generate_series(1, 100) g;
SELECT * FROM worlds.sql('create world cur_w');
SET worlds.world = cur_w;
UPDATE cur SET v = 1 WHERE id = 3;
BEGIN;
DECLARE c CURSOR FOR SELECT * FROM cur WHERE id <= 5 ORDER BY id;
UPDATE cur SET v = v + 10 WHERE id IN (1, 3);
DELETE FROM cur WHERE id = 2;
INSERT INTO cur VALUES (0, 99);
FETCH ALL FROM c;
CLOSE c;
SELECT * FROM cur WHERE id <= 5 ORDER BY id;
COMMIT;
-- the same over tables read through the overlay views (a text key, no key)
RESET worlds.world;
CREATE TABLE cur_t (id text PRIMARY KEY, v int);
CREATE TABLE cur_r (id int, v int);
INSERT INTO cur_t SELECT 'k' || g, 0 FROM generate_series(1, 5) g;
INSERT INTO cur_r SELECT g, 0 FROM generate_series(1, 5) g;
SELECT * FROM worlds.sql('create world cur_tw');
SET worlds.world = cur_tw;
UPDATE cur_t SET v = 1 WHERE id = 'k3';
UPDATE cur_r SET v = 1 WHERE id = 3;
BEGIN;
DECLARE ct CURSOR FOR SELECT * FROM cur_t ORDER BY id;
DECLARE cr CURSOR FOR SELECT * FROM cur_r ORDER BY id;
FETCH 1 FROM ct;
FETCH 1 FROM cr;
UPDATE cur_t SET v = v + 10 WHERE id IN ('k1', 'k3', 'k4');
DELETE FROM cur_t WHERE id = 'k2';
UPDATE cur_r SET v = v + 10 WHERE id IN (1, 3, 4);
DELETE FROM cur_r WHERE id = 2;
FETCH ALL FROM ct;
FETCH ALL FROM cr;
COMMIT;
SELECT * FROM cur_t ORDER BY id;
SELECT * FROM cur_r ORDER BY id;
-- ... also when its first row is fetched only after the writes (the world as of DECLARE), and through a
-- key's lookup
SET worlds.world = cur_tw;
BEGIN;
DECLARE ct2 CURSOR FOR SELECT * FROM cur_t ORDER BY id;
DECLARE ck2 CURSOR FOR SELECT * FROM cur_t WHERE id = 'k3';
DECLARE ck4 CURSOR FOR SELECT * FROM cur_t WHERE id = 'k4';
UPDATE cur_t SET v = v + 100 WHERE id IN ('k3', 'k4');
DELETE FROM cur_t WHERE id = 'k5';
FETCH ALL FROM ct2;
FETCH ALL FROM ck2;
FETCH ALL FROM ck4;
COMMIT;
SET worlds.world = cur_w;
SET worlds.world_scan = off;
BEGIN;
DECLARE ci CURSOR FOR SELECT * FROM cur WHERE id = 3;
DECLARE cj CURSOR FOR SELECT * FROM cur WHERE id <= 4 ORDER BY id;
UPDATE cur SET v = v + 100 WHERE id IN (3, 4);
FETCH ALL FROM ci;
FETCH ALL FROM cj;
COMMIT;
RESET worlds.world_scan;
-- a plpgsql FOR loop over a query that the loop's body writes (it fetches in batches)
RESET worlds.world;
CREATE TABLE seen (id int);
SET worlds.world = cur_w;
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT id FROM cur WHERE id BETWEEN 1 AND 100 ORDER BY id LOOP
    INSERT INTO seen VALUES (r.id);
    UPDATE cur SET v = v + 1 WHERE id = r.id + 1;
  END LOOP;
END $$;
SELECT count(*) AS iterations FROM seen;
SELECT sum(v) AS total FROM cur WHERE id BETWEEN 1 AND 100;
RESET worlds.world;
