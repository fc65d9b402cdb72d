-- Main stays stock: what a user sees of main with pg_worlds installed is what PostgreSQL shows without it.
-- Drops of what a tracked table's history keeps (a table's row type, a type, a collation), EXPLAIN ANALYZE
-- of writes to tracked tables.
CREATE EXTENSION pg_worlds;
-- a table whose row type another table's column has: DROP TABLE of both, and CASCADE, as stock
CREATE TABLE attbl (a int);
CREATE TABLE atref (b attbl CHECK ((b).a IS NOT NULL));
INSERT INTO atref VALUES (ROW(1));
UPDATE atref SET b = ROW(2);
DROP TABLE attbl, atref;
CREATE TABLE attbl (a int);
CREATE TABLE other (id int PRIMARY KEY, b attbl, note text);
INSERT INTO other VALUES (1, ROW(1), 'first');
SELECT * FROM worlds.sql('create world before_drop');
UPDATE other SET b = ROW(3), note = 'second';
DROP TABLE attbl;
DROP TABLE attbl CASCADE;
SELECT * FROM other;
UPDATE other SET note = 'third';
SET worlds.world = before_drop;
SELECT * FROM other;
INSERT INTO other VALUES (2, 'in the world');
RESET worlds.world;
SELECT * FROM worlds.sql('merge world before_drop');
SELECT * FROM other;
-- no storage column of a type that is gone (PostgreSQL's oidjoins check)
SELECT count(*) AS dangling FROM pg_attribute a
WHERE NOT a.attisdropped AND NOT EXISTS (SELECT 1 FROM pg_type WHERE oid = a.atttypid);
-- a collation the database made
CREATE COLLATION mine (provider = libc, locale = 'C');
CREATE TABLE named (id int PRIMARY KEY, n text COLLATE mine, m text);
INSERT INTO named VALUES (1, 'a');
UPDATE named SET n = 'b';
DROP COLLATION mine;
DROP COLLATION mine CASCADE;
SELECT * FROM named;
-- EXPLAIN ANALYZE lists the user's triggers only (history capture is pg_worlds' own)
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER users_trigger AFTER UPDATE ON named FOR EACH ROW EXECUTE FUNCTION noop();
SELECT * FROM worlds.sql('create world before_explain');
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY OFF, TIMING OFF) UPDATE named SET m = 'c';
EXPLAIN (ANALYZE, COSTS OFF, SUMMARY OFF, TIMING OFF) DELETE FROM named;
-- the writes EXPLAIN ANALYZE ran were captured all the same: the world forked before them still reads the row
SELECT count(*) AS main_rows FROM named;
SET worlds.world = before_explain;
SELECT * FROM named;
RESET worlds.world;
-- a transaction that writes nothing gets no transaction id, as in stock PostgreSQL (an xid would be
-- consumed, committed asynchronously, and its CLOG group would keep VACUUM from setting hint bits)
BEGIN;
SELECT count(*) FROM named;
SELECT pg_current_xact_id_if_assigned() IS NULL AS main_read_has_no_xid;
COMMIT;
SET worlds.world = before_explain;
BEGIN;
SELECT count(*) FROM named;
SELECT count(*) > 0 AS listed FROM worlds.sql('show worlds');
SELECT count(*) >= 0 AS diffed FROM worlds.sql('diff world before_explain');
SELECT pg_current_xact_id_if_assigned() IS NULL AS world_read_has_no_xid;
COMMIT;
RESET worlds.world;
