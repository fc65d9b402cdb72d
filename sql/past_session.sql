-- A session in 'main@when' reads every table as it was then, with the columns it had then (a column added
-- since is absent, one dropped since is present, a renamed one has its old name), and the tables dropped
-- since; its writes fail with 25006. The tables whose columns changed are read through temporary views,
-- made when the session enters the moment (SET, SWITCH WORLD, or its first statement) and dropped when it
-- leaves.
CREATE EXTENSION pg_worlds;
CREATE TABLE orders (id int PRIMARY KEY, status text, old_col text);
INSERT INTO orders VALUES (1, 'new', 'o1'), (2, 'paid', 'o2');
CREATE TABLE gone (id int PRIMARY KEY, v text);
INSERT INTO gone VALUES (1, 'g');
CREATE TABLE same (id int PRIMARY KEY, v text);
INSERT INTO same VALUES (1, 'before'), (2, 'before');
SELECT 'main@' || clock_timestamp() AS then \gset
ALTER TABLE orders ADD COLUMN note text DEFAULT 'n';
ALTER TABLE orders DROP COLUMN old_col;
ALTER TABLE orders RENAME COLUMN status TO state;
UPDATE orders SET state = 'shipped' WHERE id = 2;
INSERT INTO orders VALUES (3, 'later');
UPDATE same SET v = 'after';
DROP TABLE gone;
SELECT * FROM orders ORDER BY id;
SET worlds.world = :'then';
SELECT * FROM orders ORDER BY id;
SELECT id, status FROM orders WHERE old_col = 'o1';
SELECT * FROM gone;
-- a table whose columns didn't change is read as it was, directly
SELECT * FROM same ORDER BY id;
SELECT o.id, o.status, s.v FROM orders o JOIN same s USING (id) ORDER BY o.id;
\set VERBOSITY sqlstate
INSERT INTO orders VALUES (9, 'x', 'y');
UPDATE orders SET status = 'x';
UPDATE same SET v = 'x';
-- also when the statement would touch no row
UPDATE same SET v = 'x' WHERE id = -1;
DELETE FROM same WHERE false;
INSERT INTO same SELECT 5, 'five' WHERE false;
COPY same FROM stdin;
\.
-- row locks and schema changes too, as in a read-only transaction
SELECT * FROM same FOR UPDATE;
SELECT * FROM (SELECT * FROM same FOR SHARE) s;
CREATE TABLE newt (id int);
BEGIN;
LOCK TABLE same;
ROLLBACK;
BEGIN;
DECLARE c CURSOR FOR SELECT * FROM same FOR UPDATE;
ROLLBACK;
\set VERBOSITY default
-- leaving the moment drops the views
RESET worlds.world;
SELECT * FROM orders ORDER BY id;
SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema();
-- SWITCH WORLD and set_config: the views are made at the next statement, which is analysed again
SELECT * FROM worlds.sql(format('switch world %L', :'then'));
SELECT * FROM orders ORDER BY id;
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM orders ORDER BY id;
SELECT set_config('worlds.world', :'then', false) IS NOT NULL AS set;
SELECT * FROM orders ORDER BY id;
-- a transaction that leaves the moment and rolls back is back in it
BEGIN;
RESET worlds.world;
SELECT * FROM orders ORDER BY id;
ROLLBACK;
SELECT * FROM orders ORDER BY id;
RESET worlds.world;
-- a role reads what it may: dropped tables are read by superusers only
CREATE ROLE past_reader;
GRANT SELECT ON orders, same TO past_reader;
SET ROLE past_reader;
SET worlds.world = :'then';
SELECT * FROM orders ORDER BY id;
SELECT * FROM gone;
RESET worlds.world;
SELECT * FROM orders ORDER BY id;
RESET ROLE;
DROP OWNED BY past_reader;
DROP ROLE past_reader;
