-- Tracking: DDL on main keeps generated storage in step; tables without a key; TRUNCATE is captured;
-- history records every change with the writer's xid.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE t (id int PRIMARY KEY, a text, gone int);
INSERT INTO t VALUES (1, 'one', 1), (2, 'two', 2);
-- history of main: before-images with op, xid and order
UPDATE t SET a = 'uno' WHERE id = 1;
DELETE FROM t WHERE id = 2;
SELECT _w_op AS op, id, a, _w_xid = pg_current_xact_id() AS this_xact FROM worlds_data.a_t_1 ORDER BY _w_hseq;
SELECT * FROM worlds.sql('create world w');
-- columns added, renamed and dropped on main follow into the world
ALTER TABLE t ADD COLUMN added text DEFAULT 'dflt';
ALTER TABLE t RENAME COLUMN a TO label;
ALTER TABLE t DROP COLUMN gone;
INSERT INTO t (id, label) VALUES (3, 'three');
SET worlds.world = w;
SELECT * FROM t ORDER BY id;
INSERT INTO t (id, label) VALUES (4, 'four');
UPDATE t SET added = 'set in w' WHERE id = 1;
SELECT * FROM t ORDER BY id;
RESET worlds.world;
SELECT * FROM t ORDER BY id;
-- a table without a primary key: tracked with the whole row as key; inserts, updates and deletes work in
-- a world, one physical row at a time (duplicate rows count)
CREATE TABLE log (at int, msg text);
INSERT INTO log VALUES (1, 'a'), (1, 'a'), (2, 'b');
SELECT relid, key_columns, key_kind FROM worlds.tables WHERE relid = 'log'::regclass;
SELECT * FROM worlds.sql('create world w2');
SET worlds.world = w2;
INSERT INTO log VALUES (3, 'c'), (1, 'a');
SELECT at, msg, count(*) FROM log GROUP BY 1, 2 ORDER BY 1, 2;
DELETE FROM log WHERE at = 2;
UPDATE log SET msg = 'A' WHERE msg = 'a' RETURNING *;
SELECT at, msg, count(*) FROM log GROUP BY 1, 2 ORDER BY 1, 2;
RESET worlds.world;
SELECT at, msg, count(*) FROM log GROUP BY 1, 2 ORDER BY 1, 2;
-- main's later inserts, updates and deletes stay invisible to a world forked before them
INSERT INTO log VALUES (9, 'later');
UPDATE log SET msg = 'B' WHERE at = 2;
DELETE FROM log WHERE at = 1 AND ctid = (SELECT min(ctid) FROM log WHERE at = 1);
SET worlds.world = w2;
SELECT at, msg, count(*) FROM log GROUP BY 1, 2 ORDER BY 1, 2;
RESET worlds.world;
-- DIFF shows the rows it removed and added; MERGE applies them to main by physical row, and a row main
-- changed since the fork is a conflict (40001; USING THEIRS keeps main's)
SELECT j->>'change' AS change, j->>'id' AS id FROM worlds.sql('diff world w2') j ORDER BY 1, 2;
SELECT left(try($$select * from worlds.sql('merge world w2')$$), 5) AS sqlstate;
SELECT * FROM worlds.sql('merge world w2 using theirs');
SELECT at, msg, count(*) FROM log GROUP BY 1, 2 ORDER BY 1, 2;
-- VACUUM FULL and CLUSTER move main's rows with worlds live: the world follows them and reads what it read
SET worlds.world = w;
SELECT id, label FROM t ORDER BY id;
RESET worlds.world;
VACUUM FULL t;
CLUSTER t USING t_pkey;
VACUUM t;
SET worlds.world = w;
SELECT id, label FROM t ORDER BY id;
RESET worlds.world;
-- TRUNCATE on main is captured: a world forked before it still sees the rows
TRUNCATE t;
SET worlds.world = w;
SELECT id, label FROM t ORDER BY id;
RESET worlds.world;
SELECT count(*) FROM t;
-- a column type without equality can't be compared: the table can't be used in a world (0A000)
CREATE TABLE pts (id int PRIMARY KEY, p point);
SELECT unsupported IS NOT NULL AS unsupported FROM worlds.tables WHERE relid = 'pts'::regclass;
SET worlds.world = w;
SELECT try('select * from pts');
RESET worlds.world;
-- DROP TABLE removes the table's delta and view
DROP TABLE pts;
SELECT count(*) FROM worlds.tables WHERE relid::text = 'pts';
-- types whose equality is another type's (varchar and a domain over it use text's, cidr inet's) are
-- compared as Postgres compares them: such tables work in a world; json has none
CREATE DOMAIN short_name AS varchar(10);
CREATE TABLE people (id int PRIMARY KEY, name varchar(20), note character varying, net cidr, nick short_name, doc json);
CREATE TABLE contacts (id int PRIMARY KEY, name varchar(20), net cidr, nick short_name);
SELECT relid, unsupported IS NOT NULL AS unsupported FROM worlds.tables WHERE relid IN ('people'::regclass, 'contacts'::regclass) ORDER BY 1;
INSERT INTO contacts VALUES (1, 'ana', '10.0.0.0/8', 'an');
SELECT * FROM worlds.sql('create world w_types');
SET worlds.world = w_types;
UPDATE contacts SET name = 'ana b', net = '10.1.0.0/16' WHERE id = 1;
SELECT * FROM contacts;
RESET worlds.world;
SELECT * FROM contacts;
-- a role that owns a tracked table alters, truncates and drops it as always (the storage follows as
-- pg_worlds, whose it is)
CREATE ROLE tracking_app;
GRANT CREATE, USAGE ON SCHEMA public TO tracking_app;
SET ROLE tracking_app;
CREATE TABLE app_items (id int PRIMARY KEY, v varchar(10));
INSERT INTO app_items VALUES (1, 'a'), (2, 'b');
ALTER TABLE app_items ADD COLUMN w int;
ALTER TABLE app_items RENAME COLUMN v TO vv;
ALTER TABLE app_items DROP COLUMN w;
ALTER TABLE app_items ALTER COLUMN vv TYPE varchar(20);
TRUNCATE app_items;
INSERT INTO app_items VALUES (3, 'c');
SELECT columns FROM worlds.tables WHERE relid = 'app_items'::regclass;
DROP TABLE app_items;
RESET ROLE;
SELECT count(*) FROM worlds.tables WHERE relid::text = 'app_items';
DROP OWNED BY tracking_app;
DROP ROLE tracking_app;
-- a column's type changed on main, with a world live: an ALTER that rewrites the table moves main's rows,
-- and the world follows them; its own rows take the new type as a cast converts them (99.6 -> 100). One
-- that needs no rewrite works the same. History follows too (values converted as a cast does; capture
-- goes on in the new type)
CREATE TABLE typed (id int PRIMARY KEY, amount numeric, code text, label varchar(5));
INSERT INTO typed VALUES (1, 10.4, '7', 'a'), (2, 20, 'x', 'b');
SELECT * FROM worlds.sql('create world typed_w');
SET worlds.world = typed_w;
UPDATE typed SET amount = 99.6, label = 'bb' WHERE id = 2;
RESET worlds.world;
UPDATE typed SET code = '8' WHERE id = 1;
ALTER TABLE typed ALTER COLUMN amount TYPE int;
ALTER TABLE typed ALTER COLUMN label TYPE varchar(10);
SET worlds.world = typed_w;
UPDATE typed SET label = 'long label' WHERE id = 1;
SELECT * FROM typed ORDER BY id;
RESET worlds.world;
SELECT count(*) AS dropped FROM (SELECT worlds.drop_world(name => name, if_exists => true, cascade => true) FROM worlds.world WHERE dropped IS NULL AND num <> 0 AND parent = 0) d;
ALTER TABLE typed ALTER COLUMN amount TYPE int;
ALTER TABLE typed ALTER COLUMN code TYPE int USING (CASE WHEN code ~ '^\d+$' THEN code::int END);
UPDATE typed SET amount = 12, code = 9 WHERE id = 1;
SELECT * FROM typed ORDER BY id;
SELECT history AS typed_history FROM worlds.tables WHERE relid = 'typed'::regclass \gset
SELECT _w_op, id, amount, code FROM :typed_history ORDER BY _w_hseq;
-- capture keeps its storage open for the transaction: a savepoint rolled back, DDL on the table (its
-- history gains the column), an insert and a delete, all after writes in one transaction
CREATE TABLE cap (id int PRIMARY KEY, v text);
INSERT INTO cap VALUES (1, 'a'), (2, 'b');
SELECT * FROM worlds.sql('create world cap_w');
BEGIN;
UPDATE cap SET v = 'a1' WHERE id = 1;
SAVEPOINT s;
UPDATE cap SET v = 'b1' WHERE id = 2;
ROLLBACK TO s;
UPDATE cap SET v = 'b2' WHERE id = 2;
ALTER TABLE cap ADD COLUMN n int;
UPDATE cap SET n = 5 WHERE id = 1;
INSERT INTO cap VALUES (3, 'c', 7);
DELETE FROM cap WHERE id = 2;
COMMIT;
SELECT history AS cap_history FROM worlds.tables WHERE relid = 'cap'::regclass \gset
SELECT _w_op, id, v, n FROM :cap_history ORDER BY _w_hseq;
SET worlds.world = cap_w;
SELECT * FROM cap ORDER BY id;
RESET worlds.world;
-- an aborted transaction leaves no history, and the next one captures as before
BEGIN;
UPDATE cap SET v = 'gone' WHERE id = 1;
SELECT 1 / 0;
ROLLBACK;
UPDATE cap SET v = 'a2' WHERE id = 1;
SELECT _w_op, id, v, n FROM :cap_history ORDER BY _w_hseq;
SELECT worlds.untrack('cap');
-- storage made inside a subtransaction that aborts after capture wrote to it (a key added in a
-- savepoint gives history a key index): no relcache entry stays referenced
CREATE TABLE np2 (id int NOT NULL, v text);
INSERT INTO np2 SELECT g, 'v' || g FROM generate_series(1, 20) g;
BEGIN;
UPDATE np2 SET v = 'a' WHERE id = 1;
SAVEPOINT s;
ALTER TABLE np2 ADD PRIMARY KEY (id);
UPDATE np2 SET v = 'b' WHERE id = 2;
SELECT 1 / 0;
ROLLBACK TO s;
UPDATE np2 SET v = 'c' WHERE id = 3;
COMMIT;
SELECT history AS np2_history FROM worlds.tables WHERE relid = 'np2'::regclass \gset
SELECT _w_op, id, v FROM :np2_history ORDER BY _w_hseq;
-- capture fails while opening the storage (an index it can't fill) inside a savepoint: nothing leaks
CREATE TABLE lk (id int PRIMARY KEY, v int);
INSERT INTO lk VALUES (1, 1);
SELECT history AS lk_history FROM worlds.tables WHERE relid = 'lk'::regclass \gset
CREATE INDEX lk_bad ON :lk_history ((_w_xid::text));
BEGIN;
SAVEPOINT s;
UPDATE lk SET v = 2 WHERE id = 1;
ROLLBACK TO s;
COMMIT;
DROP INDEX worlds_data.lk_bad;
UPDATE lk SET v = 3 WHERE id = 1;
SELECT _w_op, id, v FROM :lk_history ORDER BY _w_hseq;
-- writes between utility statements in one transaction: what capture holds is freed each time
BEGIN;
DO $$ BEGIN FOR i IN 1..3000 LOOP UPDATE lk SET v = v + 1 WHERE id = 1; EXECUTE 'LOCK TABLE lk IN ROW EXCLUSIVE MODE'; END LOOP; END $$;
SELECT total_bytes < 1000000 AS small FROM pg_backend_memory_contexts WHERE name = 'TopTransactionContext';
COMMIT;
SELECT count(*) FROM :lk_history;
SELECT worlds.untrack('np2'), worlds.untrack('lk');
-- DROP SCHEMA ... CASCADE and DROP OWNED drop tracked tables as DROP TABLE does (the rows go to history
-- first); the extension and every world stay
CREATE SCHEMA doomed;
CREATE TABLE doomed.a (id int PRIMARY KEY, v text);
CREATE TABLE doomed.b (v text);
INSERT INTO doomed.a VALUES (1, 'x');
SELECT * FROM worlds.sql('create world survives');
SET worlds.world = survives; UPDATE doomed.a SET v = 'world'; RESET worlds.world;
DROP SCHEMA doomed CASCADE;
SELECT count(*) AS doomed_tracked FROM worlds.tables WHERE relid::text LIKE 'doomed.%';
SELECT name FROM worlds.show_worlds() WHERE name = 'survives';
CREATE ROLE tracking_gone;
GRANT CREATE, USAGE ON SCHEMA public TO tracking_gone;
SET ROLE tracking_gone;
CREATE TABLE gone_items (id int PRIMARY KEY);
RESET ROLE;
DROP OWNED BY tracking_gone;
SELECT to_regclass('gone_items') IS NULL AS dropped, count(*) AS gone_tracked FROM worlds.tables WHERE relid::text = 'gone_items';
DROP ROLE tracking_gone;
SELECT * FROM worlds.sql('drop world survives');
SELECT count(*) AS extension_kept FROM pg_extension WHERE extname = 'pg_worlds';
