-- What DDL a world may run: its own objects, as in main; never main's objects, nor what belongs to the
-- whole database (0A000, nothing changed); roles, databases and tablespaces are the cluster's, as in
-- every database of it.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders VALUES (1, 'new');
CREATE VIEW open_orders AS SELECT * FROM orders WHERE status = 'new';
CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
-- its own objects: everything Postgres allows, ALTER and DROP included, in a transaction that rolls back too
CREATE TABLE items (id int PRIMARY KEY, name text);
ALTER TABLE items ADD COLUMN price numeric DEFAULT 0;
ALTER TABLE items RENAME COLUMN name TO title;
ALTER TABLE items ALTER COLUMN title SET NOT NULL;
INSERT INTO items VALUES (1, 'pen', 2.5);
CREATE TABLE public.qualified (id int);
INSERT INTO qualified VALUES (7);
COMMENT ON TABLE items IS 'the world''s';
GRANT SELECT ON items TO PUBLIC;
BEGIN;
CREATE TABLE rolled (id int);
ALTER TABLE items DROP COLUMN price;
ROLLBACK;
SELECT try('SELECT * FROM rolled');
SELECT * FROM items;
DROP TABLE qualified;
SELECT obj_description('items'::regclass);
-- a materialized view reads the world's rows when made; a refresh of one over main's tables would read
-- main's (a refresh isn't routed): 0A000; over the world's own tables it refreshes
CREATE MATERIALIZED VIEW order_count AS SELECT count(*) AS n FROM orders;
CREATE MATERIALIZED VIEW item_count AS SELECT count(*) AS n FROM items;
SELECT try('REFRESH MATERIALIZED VIEW order_count');
INSERT INTO items VALUES (2, 'ink', 1);
REFRESH MATERIALIZED VIEW item_count;
SELECT * FROM item_count;
-- a CREATE of a name main has answers as main would (no second object hiding main's)
SELECT try('CREATE TABLE orders (id int)');
CREATE TABLE IF NOT EXISTS orders (id int);
-- main's objects: refused, nothing changed (ALTER TABLE, DROP TABLE, CREATE INDEX, COMMENT and GRANT on main's
-- tables change the world's copy of the table: schema_alter)
SELECT try('DROP TABLE orders');
SELECT try('DROP VIEW open_orders');
SELECT try('ALTER FUNCTION f() RENAME TO g');
-- replacing main's view or function makes the world's own version (merged by running the statement on
-- main: schema_alter)
SELECT try('CREATE OR REPLACE VIEW open_orders AS SELECT 1 AS x');
SELECT try('CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS ''SELECT 2''');
-- a foreign key from the world's table to main's is made at the merge (worlds check foreign keys there)
SELECT try('CREATE TABLE refs (id int REFERENCES orders)');
SELECT relid::regclass, definition FROM worlds.world_fk;
-- the whole database's: refused
SELECT try('CREATE EXTENSION hstore');
SELECT try('CREATE PUBLICATION p FOR ALL TABLES');
SELECT try('ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC');
SELECT try('CREATE CAST (bool AS point) WITH INOUT');
-- pg_worlds' own schemas: never
SELECT try('CREATE TABLE worlds.x (id int)');
-- the cluster's: as in main
CREATE ROLE world_made_role;
DROP ROLE world_made_role;
-- a moment of the past is read only, schema included
RESET worlds.world;
SELECT try($$SET worlds.world = 'w@-1 hour'$$);
SET worlds.world = 'main@-1 hour';
SELECT try('CREATE TABLE t (id int)');
RESET worlds.world;
-- main: untouched
SELECT column_name FROM information_schema.columns WHERE table_name = 'orders' ORDER BY ordinal_position;
SELECT obj_description('orders'::regclass);
SELECT count(*) FROM pg_indexes WHERE tablename = 'orders';
-- a schema named like a world's namespace is pg_worlds' alone
SELECT try('CREATE SCHEMA pg_w99_public');
-- forking a world with schema changes of its own: not yet
SELECT try($$SELECT * FROM worlds.sql('fork world w as w2')$$);
