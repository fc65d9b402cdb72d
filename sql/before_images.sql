-- Main's before-images. History keeps no index on the key (capture would pay for one on every write of
-- main): a world reaches the rows main changed since its fork through the positions its overlay cache
-- holds, and a merge finds main's changes by joining history since the fork by key. Every table kind: an
-- integer key (the world scan), a text key (the overlay views), no key.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE n (id int PRIMARY KEY, v text);
CREATE TABLE s (code text PRIMARY KEY, v text);
CREATE TABLE r (v text, w int);
INSERT INTO n SELECT g, 'n' || g FROM generate_series(1, 3000) g;
INSERT INTO s SELECT 'k' || g, 's' || g FROM generate_series(1, 3000) g;
INSERT INTO r SELECT 'r' || g, g FROM generate_series(1, 100) g;
-- history's and inserts' only index is the one on the writer's transaction
SELECT count(*) AS indexes, count(*) FILTER (WHERE a.attname <> '_w_xid') AS other_indexes
FROM worlds.tables t JOIN pg_index i ON i.indrelid IN (t.history, t.inserts)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0];
SELECT * FROM worlds.sql('create world w');
-- main moves on after the fork: many changes, some to rows the world will change too
UPDATE n SET v = 'main' WHERE id % 3 = 0;
DELETE FROM n WHERE id % 7 = 0;
INSERT INTO n VALUES (5000, 'main new');
UPDATE s SET v = 'main' WHERE right(code, 1) = '3';
DELETE FROM s WHERE code IN ('k7', 'k8');
UPDATE r SET w = -w WHERE w <= 10;
DELETE FROM r WHERE w = 50;
ANALYZE n;
ANALYZE s;
ANALYZE r;
SET worlds.world = w;
-- the world sees main as of its fork: every row, none of main's later values
SELECT count(*), count(*) FILTER (WHERE v = 'main') AS main_values, sum(id) FROM n;
SELECT id, v FROM n WHERE id IN (3, 7, 21, 5000) ORDER BY id;
-- IN lists on main's index scan read main's before-images of the listed keys only (each key once, NULLs
-- match nothing)
SET enable_bitmapscan = off;
SELECT id, v FROM n WHERE id IN (3, 3, 7, NULL, 21) ORDER BY id;
SELECT id, v FROM n WHERE id = ANY ('{}'::int[]);
SELECT id, v FROM n WHERE id IN (3, 7, 21) AND id > 5 ORDER BY id;
PREPARE any_n(int[]) AS SELECT id, v FROM n WHERE id = ANY ($1) ORDER BY id;
EXECUTE any_n('{6, 7, 5000}');
EXPLAIN (COSTS OFF) EXECUTE any_n('{6, 7, 5000}');
DEALLOCATE any_n;
RESET enable_bitmapscan;
-- ... and on main's bitmap scan of the key's index
SELECT id, v FROM n WHERE id IN (3, 3, 7, NULL, 21) ORDER BY id;
SELECT id, v FROM n WHERE id IN (3, 7, 21) AND id > 5 ORDER BY id;
EXPLAIN (COSTS OFF) SELECT id, v FROM n WHERE id IN (3, 7, 21);
SELECT id, v FROM n WHERE id BETWEEN 19 AND 22 ORDER BY id;
SELECT count(*), count(*) FILTER (WHERE v = 'main') AS main_values FROM s;
SELECT code, v FROM s WHERE code IN ('k3', 'k7', 'k13') ORDER BY code;
SELECT count(*), sum(w) FROM r;
-- a join into the changed rows
SELECT count(*) FROM n JOIN s ON s.code = 'k' || n.id WHERE n.id BETWEEN 1 AND 30;
-- the overlay views read history by those positions (the list taken once per scan, an InitPlan): a TID
-- scan once history is larger than a few pages
SET worlds.world_scan = off;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT v FROM s WHERE code >= 'k3' AND code < 'k4';
-- ... but one key of a text key is looked up (its versions and before-images, by the cache)
EXPLAIN (COSTS OFF) SELECT v FROM s WHERE code = 'k3';
RESET enable_seqscan;
SELECT v FROM s WHERE code = 'k3';
SELECT id, v FROM n WHERE id IN (3, 7, 21) ORDER BY id;
SELECT count(*), sum(id) FROM n;
-- ... except for one key of an integer-key table: its before-images come from the cache by key, fetched
-- by tid (O(1) in main's changes since the fork, where the tid list is O(all of them))
EXPLAIN (COSTS OFF) SELECT v FROM n WHERE id = 3;
SELECT id, v FROM n WHERE id = 3;
SELECT id, v FROM n WHERE id = 7;
SELECT id, v FROM n WHERE id = 5000;
PREPARE by_key(int) AS SELECT id, v FROM n WHERE id = $1;
EXECUTE by_key(21);
EXECUTE by_key(22);
EXECUTE by_key(NULL);
SET plan_cache_mode = force_generic_plan;
EXECUTE by_key(42);
EXECUTE by_key(43);
RESET plan_cache_mode;
DEALLOCATE by_key;
RESET worlds.world_scan;
-- a write names its key the same way
UPDATE n SET v = v || ' (seen)' WHERE id = 6 RETURNING id, v;
DELETE FROM n WHERE id = 14 RETURNING id, v;
UPDATE n SET v = 'n6' WHERE id = 6;
SELECT id, v FROM n WHERE id IN (6, 14) ORDER BY id;
-- the world's own versions of a key: the cache names the winning one, read by (key, version)
UPDATE n SET v = 'w1' WHERE id = 2;
UPDATE n SET v = 'w2' WHERE id = 2;
UPDATE n SET v = v || '+w3' WHERE id = 2 RETURNING v;
SET worlds.world_scan = off;
SELECT id, v FROM n WHERE id = 2;
DELETE FROM n WHERE id = 2;
SELECT count(*) AS deleted_seen FROM n WHERE id = 2;
INSERT INTO n VALUES (2, 'back');
SELECT id, v FROM n WHERE id = 2;
PREPARE by_key(int8) AS SELECT id, v FROM n WHERE id = $1;
EXECUTE by_key(2);
EXECUTE by_key(1);
DEALLOCATE by_key;
RESET worlds.world_scan;
-- the world writes rows main changed since the fork
UPDATE n SET v = 'world' WHERE id IN (3, 7);
UPDATE s SET v = 'world' WHERE code IN ('k3', 'k7');
DELETE FROM r WHERE w = 10;
SELECT id, v FROM n WHERE id IN (3, 6, 7) ORDER BY id;
SELECT code, v FROM s WHERE code IN ('k3', 'k7', 'k13') ORDER BY code;
SELECT count(*), sum(w) FROM r;
RESET worlds.world;
-- a merge finds the rows both sides changed (40001), and takes main's side on request
SELECT try($$select * from worlds.sql('merge world w')$$);
SELECT * FROM worlds.sql('merge world w using theirs');
SELECT id, v FROM n WHERE id IN (3, 6, 7) ORDER BY id;
SELECT code, v FROM s WHERE code IN ('k3', 'k7') ORDER BY code;
-- after a partial merge, main's changes before it don't conflict with the world's later ones; a change
-- of main after it does
SELECT * FROM worlds.sql('create world p');
SET worlds.world = p;
UPDATE n SET v = 'p' WHERE id IN (1, 2);
RESET worlds.world;
UPDATE n SET v = 'main before' WHERE id = 4;
SELECT * FROM worlds.sql('merge world p only keys (''n/1'')');
SET worlds.world = p;
UPDATE n SET v = 'p again' WHERE id = 1;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world p dry run');
UPDATE n SET v = 'main after' WHERE id = 1;
SELECT try($$select * from worlds.sql('merge world p')$$);
SELECT * FROM worlds.sql('drop world p');
-- a past moment reads the same before-images; VACUUM FULL of history (allowed once no world is live)
-- moves them, and the cache reads their new positions
SELECT count(*) FROM worlds.show_worlds() WHERE name <> 'main';
SELECT 'main@' || clock_timestamp() AS then \gset
UPDATE n SET v = 'later' WHERE id = 1;
SET worlds.world = :'then';
SELECT v FROM n WHERE id = 1;
RESET worlds.world;
SELECT format('vacuum full %s', history) AS vac FROM worlds.tables WHERE relid = 'n'::regclass \gset
:vac;
SET worlds.world = :'then';
SELECT v FROM n WHERE id = 1;
SELECT count(*) FROM n WHERE v = 'later';
RESET worlds.world;
-- a world forked from a world reads its parent's version of a key through the same lookup
SELECT * FROM worlds.sql('create world parent_w');
SET worlds.world = parent_w;
INSERT INTO n VALUES (900001, 'parent 1');
UPDATE n SET v = 'parent 2' WHERE id = 900001;
RESET worlds.world;
SELECT * FROM worlds.sql('create world child_w from parent_w');
SET worlds.world = child_w;
SET worlds.world_scan = off;
SELECT id, v FROM n WHERE id = 900001;
UPDATE n SET v = 'child' WHERE id = 900001 RETURNING v;
RESET worlds.world;
SET worlds.world = parent_w;
SELECT id, v FROM n WHERE id = 900001;
RESET worlds.world_scan;
RESET worlds.world;
SELECT * FROM worlds.sql('drop world parent_w cascade');
-- varchar and uuid keys are looked up the same way; a nondeterministic collation's equality is not
CREATE TABLE vk (code varchar(10) PRIMARY KEY, v text);
CREATE TABLE uk (id uuid PRIMARY KEY, v text);
INSERT INTO vk SELECT 'c' || g, 'v' || g FROM generate_series(1, 50) g;
INSERT INTO uk SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, 'u' || g FROM generate_series(1, 50) g;
SELECT * FROM worlds.sql('create world keys_w');
UPDATE vk SET v = 'main' WHERE code IN ('c1', 'c2');
UPDATE uk SET v = 'main' WHERE id = '00000000-0000-0000-0000-000000000001';
SET worlds.world = keys_w;
UPDATE vk SET v = 'world' WHERE code = 'c2' RETURNING code, v;
UPDATE vk SET v = v || '+' WHERE code = 'c2' RETURNING code, v;
SELECT code, v FROM vk WHERE code = 'c1';
SELECT code, v FROM vk WHERE code = 'c2';
EXPLAIN (COSTS OFF) SELECT v FROM vk WHERE code = 'c1';
UPDATE uk SET v = v || ' seen' WHERE id = '00000000-0000-0000-0000-000000000001' RETURNING v;
SELECT v FROM uk WHERE id = '00000000-0000-0000-0000-000000000001';
SELECT v FROM uk WHERE id = '00000000-0000-0000-0000-000000000002';
EXPLAIN (COSTS OFF) SELECT v FROM uk WHERE id = '00000000-0000-0000-0000-000000000001';
-- IN lists and = ANY name several keys: each one's before-images and winning version, each key once
SELECT code, v FROM vk WHERE code IN ('c1', 'c2', 'c2', 'c3', NULL) ORDER BY code;
EXPLAIN (COSTS OFF) SELECT v FROM vk WHERE code IN ('c1', 'c2');
WITH u AS (UPDATE vk SET v = v || ' in' WHERE code IN ('c1', 'c2', 'c9') RETURNING code, v) SELECT * FROM u ORDER BY code;
PREPARE in_keys(text[]) AS SELECT code, v FROM vk WHERE code = ANY ($1) ORDER BY code;
EXECUTE in_keys('{c1,c2,c4}');
EXECUTE in_keys('{}');
DEALLOCATE in_keys;
SELECT v FROM uk WHERE id IN ('00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-000000000002') ORDER BY v;
RESET worlds.world;
-- a key under a case-insensitive collation: 'C1' and 'c1' are one key, which the text lookup can't tell
CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE ck (code text COLLATE ci PRIMARY KEY, v text);
INSERT INTO ck VALUES ('c1', 'one');
SELECT * FROM worlds.sql('create world ci_w');
UPDATE ck SET v = 'main' WHERE code = 'c1';
SET worlds.world = ci_w;
SELECT code, v FROM ck WHERE code = 'C1';
EXPLAIN (COSTS OFF) SELECT v FROM ck WHERE code = 'C1';
RESET worlds.world;
SELECT * FROM worlds.sql('drop world ci_w');
SELECT * FROM worlds.sql('drop world keys_w');
-- Capture keeps its description of history's indexes across transactions (btree only); one added later,
-- in this session or in the writing transaction, is filled from the next write on, one dropped is no
-- longer written, and another kind of index is described anew in each transaction.
SELECT history AS n_history FROM worlds.tables WHERE relid = 'n'::regclass \gset
UPDATE n SET v = 'before the index' WHERE id = 1;
CREATE INDEX n_history_op ON :n_history (_w_op);
UPDATE n SET v = 'after the index' WHERE id = 2;
BEGIN;
CREATE INDEX n_history_at ON :n_history (_w_at);
UPDATE n SET v = 'in its transaction' WHERE id = 4;
COMMIT;
CREATE INDEX n_history_hash ON :n_history USING hash (_w_op);
UPDATE n SET v = 'after the hash index' WHERE id = 5;
UPDATE n SET v = 'again' WHERE id = 5;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
-- through each index: every captured update (the counts agree with the heap's below)
SELECT count(*) AS by_op FROM :n_history WHERE _w_op = 'U';
SELECT count(*) AS by_at FROM :n_history WHERE _w_at > '-infinity';
SET enable_indexscan = off;
SET enable_bitmapscan = on;
SELECT count(*) AS by_hash FROM :n_history WHERE _w_op = 'U';
RESET enable_seqscan;
RESET enable_indexscan;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT count(*) FILTER (WHERE _w_op = 'U') AS heap_updates, count(*) AS heap_rows FROM :n_history;
RESET enable_indexscan;
RESET enable_bitmapscan;
DROP INDEX worlds_data.n_history_op, worlds_data.n_history_at, worlds_data.n_history_hash;
UPDATE n SET v = 'after the drop' WHERE id = 8;
SELECT id, v FROM n WHERE id IN (1, 2, 4, 5, 8) ORDER BY id;
-- key IN (...) and = ANY through the overlay views of an integer key (every write in a world)
SELECT * FROM worlds.sql('create world in_w');
UPDATE n SET v = 'main after in_w' WHERE id IN (10, 11) OR id BETWEEN 15 AND 19;
SET worlds.world = in_w;
WITH u AS (UPDATE n SET v = v || ' in' WHERE id IN (10, 11, 11, 12, NULL) RETURNING id, v) SELECT * FROM u ORDER BY id;
WITH d AS (DELETE FROM n WHERE id = ANY ('{12, 13}'::int[]) RETURNING id) SELECT * FROM d ORDER BY id;
SELECT id, v FROM n WHERE id BETWEEN 10 AND 14 ORDER BY id;
-- a range of an integer key (either side, strict or not): the before-images in it, in the cache's key order
WITH u AS (UPDATE n SET v = v || ' r' WHERE id BETWEEN 15 AND 17 RETURNING id, v) SELECT * FROM u ORDER BY id;
WITH u AS (UPDATE n SET v = v || ' s' WHERE id > 17 AND 20 > id RETURNING id, v) SELECT * FROM u ORDER BY id;
WITH u AS (UPDATE n SET v = v || ' t' WHERE id >= 19 AND id <= 18 RETURNING id, v) SELECT * FROM u ORDER BY id;
EXPLAIN (COSTS OFF) UPDATE n SET v = v WHERE id BETWEEN 15 AND 17;
SELECT id, v FROM n WHERE id BETWEEN 10 AND 20 ORDER BY id;
RESET worlds.world;
SELECT id, v FROM n WHERE id BETWEEN 10 AND 20 ORDER BY id;
SELECT * FROM worlds.sql('drop world in_w');
