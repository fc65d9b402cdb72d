-- UPDATE and DELETE in a world read their target rows in place, through the world scan (main's plan for
-- the table, as a SELECT in a world reads it), and the overlay view's trigger writes them. The same
-- writes are made in two worlds forked at the same moment, one planned that way and one through the
-- overlay view (worlds.world_scan = off), and the worlds must end with the same rows.
CREATE EXTENSION pg_worlds;
CREATE TABLE acc (id int PRIMARY KEY, grp int NOT NULL, bal int NOT NULL, note text);
CREATE INDEX ON acc (grp);
INSERT INTO acc SELECT g, g % 20, 100, 'n' || g FROM generate_series(1, 2000) g;
-- a table with a dropped column is read through the view either way
CREATE TABLE old_t (id int PRIMARY KEY, gone text, v int);
INSERT INTO old_t SELECT g, 'x', g FROM generate_series(1, 10) g;
ALTER TABLE old_t DROP COLUMN gone;
CREATE TABLE small (id bigint PRIMARY KEY, total int NOT NULL);
INSERT INTO small SELECT g, 0 FROM generate_series(1, 10) g;
CREATE TABLE tagged (code text PRIMARY KEY, n int);
INSERT INTO tagged VALUES ('a', 1), ('b', 2);
ANALYZE acc;
ANALYZE small;
SELECT * FROM worlds.sql('create world ws');
SELECT * FROM worlds.sql('create world wv');
-- main moves on after the fork: neither world sees it
UPDATE acc SET bal = 999 WHERE id IN (5, 6, 1500);
DELETE FROM acc WHERE id IN (7, 1600);
INSERT INTO acc VALUES (3000, 1, 999, 'main');
UPDATE small SET total = 999 WHERE id = 3;
CREATE FUNCTION run_writes() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    i int;
BEGIN
    -- by key, by list, by range, by another index, by a column with no index (main's sequential scan)
    UPDATE acc SET bal = bal + 1 WHERE id = 5;
    UPDATE acc SET bal = bal + 2 WHERE id IN (6, 7, 8, 1500, 1600);
    UPDATE acc SET bal = bal - 3 WHERE id BETWEEN 10 AND 30;
    UPDATE acc SET note = 'grp 3' WHERE grp = 3 AND id < 200;
    UPDATE acc SET note = note || '!' WHERE note LIKE 'n19%';
    -- a row the world changed before, and changes again; one it inserted; one main inserted after the fork
    UPDATE acc SET bal = bal * 2 WHERE id = 5;
    INSERT INTO acc VALUES (2001, 1, 50, 'world');
    UPDATE acc SET bal = bal + 5 WHERE id = 2001;
    UPDATE acc SET bal = 0 WHERE id = 3000;
    -- the key changed; a row deleted then re-inserted; deletes by key and by range
    UPDATE acc SET id = 2500 WHERE id = 40;
    DELETE FROM acc WHERE id = 41;
    INSERT INTO acc VALUES (41, 2, 41, 'back');
    DELETE FROM acc WHERE id BETWEEN 50 AND 55;
    DELETE FROM acc WHERE id IN (2001, 6);
    -- a join, a sub-select of the same table, a CTE, a small table main scans sequentially
    UPDATE acc a SET bal = a.bal + s.id FROM small s WHERE s.id = a.grp AND a.id < 100;
    UPDATE acc SET note = 'max' WHERE id = (SELECT max(id) FROM acc WHERE grp = 4);
    WITH d AS (DELETE FROM acc WHERE id IN (60, 61) RETURNING *) UPDATE small SET total = total + (SELECT count(*) FROM d) WHERE id = 1;
    FOR i IN 1..30 LOOP
        UPDATE small SET total = total + i WHERE id = (i % 10) + 1;
    END LOOP;
    UPDATE small SET total = total + 1;
    -- a table with a text key (read through the view either way), one with a dropped column
    UPDATE tagged SET n = n + 10 WHERE code = 'a';
    UPDATE old_t SET v = v * 10 WHERE id IN (2, 3);
    DELETE FROM old_t WHERE id = 4;
END $$;
-- the world scan
SET worlds.world = ws;
EXPLAIN (COSTS OFF) UPDATE acc SET bal = bal + 1 WHERE id = 5;
EXPLAIN (COSTS OFF) DELETE FROM acc WHERE id IN (1, 2);
EXPLAIN (COSTS OFF) UPDATE small SET total = total + 1 WHERE id = 3;
EXPLAIN (COSTS OFF) UPDATE old_t SET v = 0 WHERE id = 3;
SELECT run_writes();
-- RETURNING gives the rows as written
UPDATE acc SET bal = bal + 1 WHERE id IN (5, 8) RETURNING id, bal, note;
DELETE FROM acc WHERE id = 9 RETURNING id, bal;
-- a prepared statement, its generic plan run again and again
SET plan_cache_mode = force_generic_plan;
PREPARE upd(int, int) AS UPDATE acc SET bal = bal + $2 WHERE id = $1;
EXECUTE upd(100, 1);
EXECUTE upd(100, 1);
EXECUTE upd(101, 5);
EXECUTE upd(7, 5);
DEALLOCATE upd;
RESET plan_cache_mode;
-- a failed statement leaves the world as it was
UPDATE acc SET bal = NULL WHERE id = 100;
UPDATE acc SET id = 101 WHERE id = 100;
SELECT id, bal FROM acc WHERE id IN (100, 101) ORDER BY id;
-- the same through the overlay view, in a new session (plpgsql keeps its plans per session)
\c
SET worlds.world_scan = off;
SET worlds.world = wv;
EXPLAIN (COSTS OFF) UPDATE small SET total = total + 1 WHERE id = 3;
SELECT run_writes();
UPDATE acc SET bal = bal + 1 WHERE id IN (5, 8) RETURNING id, bal, note;
DELETE FROM acc WHERE id = 9 RETURNING id, bal;
UPDATE acc SET bal = bal + 1 WHERE id = 100;
UPDATE acc SET bal = bal + 1 WHERE id = 100;
UPDATE acc SET bal = bal + 5 WHERE id = 101;
UPDATE acc SET bal = bal + 5 WHERE id = 7;
RESET worlds.world_scan;
RESET worlds.world;
-- both worlds hold the same rows, and main is as main left it
CREATE FUNCTION world_rows(w text, t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r text;
BEGIN
    PERFORM set_config('worlds.world', w, true);
    EXECUTE format('SELECT string_agg(x::text, '' '' ORDER BY x::text) FROM %I x', t) INTO r;
    PERFORM set_config('worlds.world', 'main', true);
    RETURN md5(r);
END $$;
BEGIN;
SELECT t, world_rows('ws', t) = world_rows('wv', t) AS same FROM unnest(ARRAY['acc', 'small', 'tagged', 'old_t']) t;
COMMIT;
SET worlds.world = ws;
SELECT id, grp, bal, note FROM acc WHERE id IN (5, 6, 7, 8, 9, 40, 41, 100, 101, 1500, 1600, 2500, 3000) ORDER BY id;
SELECT id, total FROM small ORDER BY id;
SELECT count(*), sum(bal) FROM acc;
RESET worlds.world;
SELECT count(*), sum(bal) FROM acc;
SELECT id, total FROM small WHERE id = 3;
-- the write twin (an UPDATE / DELETE read in place) is chosen for the statement itself: a write in WITH
-- goes through the overlay, and both see the world's rows, not main's later ones
UPDATE small SET total = -1 WHERE id = 4;
SET worlds.world = ws;
WITH u AS (UPDATE small SET total = total + 100 WHERE id = 4 RETURNING id, total) SELECT * FROM u;
UPDATE small SET total = total + 100 WHERE id = 4 RETURNING id, total;
-- a prepared UPDATE made again after the setting changed, and after a column was dropped (analysed again:
-- through the overlay), still writes the world's rows
PREPARE bump(int) AS UPDATE small SET total = total + 1 WHERE id = $1 RETURNING id, total;
EXECUTE bump(4);
SET worlds.world_scan = off;
EXECUTE bump(4);
RESET worlds.world_scan;
RESET worlds.world;
ALTER TABLE small ADD COLUMN extra int;
ALTER TABLE small DROP COLUMN extra;
SET worlds.world = ws;
EXECUTE bump(4);
EXPLAIN (COSTS OFF) EXECUTE bump(4);
DEALLOCATE bump;
RESET worlds.world;
SELECT id, total FROM small WHERE id = 4;
-- pg_worlds' own SQL (here the cache's catch-up on main's changes, then the commit's bookkeeping) runs on
-- its own search_path, set only when it runs SQL: a function a role puts ahead of pg_catalog on its path
-- is never called by it
CREATE SCHEMA shadow;
CREATE FUNCTION shadow.pg_current_snapshot() RETURNS pg_snapshot LANGUAGE plpgsql
AS $$ BEGIN RAISE EXCEPTION 'the shadow function was called'; END $$;
SELECT * FROM worlds.sql('create world shadow_w');
SET worlds.world = shadow_w;
SELECT id, total FROM small WHERE id IN (5, 6) ORDER BY id;
RESET worlds.world;
UPDATE small SET total = total + 1000 WHERE id = 6;
SET search_path = shadow, pg_catalog, public;
SET worlds.world = shadow_w;
UPDATE small SET total = total + 1 WHERE id = 5 RETURNING id, total;
SELECT id, total FROM small WHERE id IN (5, 6) ORDER BY id;
RESET worlds.world;
RESET search_path;
SELECT * FROM worlds.sql('drop world shadow_w');
DROP SCHEMA shadow CASCADE;
-- the target of a world's UPDATE / DELETE stays the table through Postgres's rewriter (the planner hook then
-- gives it the write twin): SET col = DEFAULT takes the table's default, a generated column refuses a value
-- in Postgres's words, and a role's rights are its rights on the table, column by column
CREATE TABLE dflt (id int PRIMARY KEY, n int DEFAULT 42, note text DEFAULT 'fresh',
                   twice int GENERATED ALWAYS AS (n * 2) STORED);
INSERT INTO dflt (id, n, note) VALUES (1, 1, 'one'), (2, 2, 'two');
CREATE ROLE regress_ww_col;
GRANT SELECT, UPDATE (note) ON dflt TO regress_ww_col;
SELECT * FROM worlds.sql('create world wd');
SET worlds.world = wd;
EXPLAIN (COSTS OFF) UPDATE dflt SET n = DEFAULT WHERE id = 1;
UPDATE dflt SET n = DEFAULT, note = DEFAULT WHERE id = 1 RETURNING *;
UPDATE dflt SET twice = 5 WHERE id = 1;
UPDATE dflt d SET note = d.note || s.total FROM small s WHERE s.id = d.id AND d.id = 2 RETURNING d.id, d.note, s.id AS small_id;
SET ROLE regress_ww_col;
UPDATE dflt SET note = 'by role' WHERE id = 2 RETURNING id, note;
UPDATE dflt SET n = 0 WHERE id = 2;
DELETE FROM dflt WHERE id = 2;
RESET ROLE;
SELECT * FROM dflt ORDER BY id;
RESET worlds.world;
SELECT * FROM dflt ORDER BY id;
SELECT * FROM worlds.sql('drop world wd');
DROP OWNED BY regress_ww_col;
DROP ROLE regress_ww_col;
