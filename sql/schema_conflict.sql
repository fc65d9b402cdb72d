-- Conflicts of a world's schema at MERGE: both sides making one name (40001, with DRY RUN's blocked
-- row); different names merge cleanly; the world's constraints checked by Postgres against the rows as
-- they are at the merge (23503, 23505, 23514), nothing merged.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE customers (id int PRIMARY KEY, email text);
INSERT INTO customers VALUES (1, 'a@x'), (2, 'b@x');
-- two worlds, different names: both merge
SELECT * FROM worlds.sql('create world a');
SELECT * FROM worlds.sql('create world b');
SET worlds.world = a;
CREATE TABLE a_things (id int PRIMARY KEY);
RESET worlds.world;
SET worlds.world = b;
CREATE TABLE b_things (id int PRIMARY KEY);
CREATE FUNCTION b_fn() RETURNS int LANGUAGE sql AS 'SELECT 2';
RESET worlds.world;
SELECT * FROM worlds.sql('merge world a');
SELECT * FROM worlds.sql('merge world b');
SELECT to_regclass('a_things') IS NOT NULL AS a, to_regclass('b_things') IS NOT NULL AS b, b_fn();
-- both sides made one function: 40001
SELECT * FROM worlds.sql('create world c');
SET worlds.world = c;
CREATE FUNCTION shared_fn() RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE TYPE mood AS ENUM ('calm');
RESET worlds.world;
CREATE FUNCTION shared_fn() RETURNS int LANGUAGE sql AS 'SELECT 0';
SELECT try($$SELECT * FROM worlds.sql('merge world c')$$);
SELECT r->>'outcome' AS outcome, r->>'detail' AS detail FROM worlds.sql('merge world c dry run') AS d(r) WHERE r->>'outcome' = 'blocked';
SELECT shared_fn();
DROP FUNCTION shared_fn();
SELECT * FROM worlds.sql('merge world c');
SELECT shared_fn(), 'calm'::mood;
-- a foreign key to main's table that rows break at the merge: 23503, nothing merged
SELECT * FROM worlds.sql('create world d');
SET worlds.world = d;
CREATE TABLE orders (id int PRIMARY KEY, customer int REFERENCES customers, total int CHECK (total >= 0));
INSERT INTO orders VALUES (1, 1, 10), (2, 99, 5);
RESET worlds.world;
SELECT try($$SELECT * FROM worlds.sql('merge world d')$$);
SELECT r->>'outcome' AS outcome FROM worlds.sql('merge world d dry run') AS d(r) WHERE r->>'outcome' = 'blocked';
SELECT to_regclass('orders') IS NULL AS nothing_merged;
-- fixed in the world, it merges
SET worlds.world = d;
DELETE FROM orders WHERE customer = 99;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world d');
SELECT * FROM orders;
SELECT conname FROM pg_constraint WHERE conrelid = 'orders'::regclass ORDER BY conname;
-- a unique constraint the world's table brings holds by construction; one it adds to its own table too
SELECT * FROM worlds.sql('create world e');
SET worlds.world = e;
CREATE TABLE tags (name text);
INSERT INTO tags VALUES ('x'), ('x');
SELECT try('ALTER TABLE tags ADD UNIQUE (name)');
RESET worlds.world;
SELECT * FROM worlds.sql('drop world e');
