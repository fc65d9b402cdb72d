-- A world changes main's tables: ALTER TABLE, CREATE INDEX, COMMENT and GRANT on one of main's tables run
-- on the world's copy of it (its twin), visible only there; DIFF shows the table's change (id null,
-- columns +email text) then its rows; MERGE runs the world's statements on main's table, then brings its
-- rows; both sides changing the table's columns, or one row, is 40001; a constraint main's rows break is
-- 23514, nothing merged.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE users (id serial PRIMARY KEY, name text NOT NULL, age int);
INSERT INTO users (name, age) SELECT 'u' || g, g FROM generate_series(1, 5) g;
CREATE VIEW adults AS SELECT id, name FROM users WHERE age >= 3;
CREATE FUNCTION columns_of(t regclass) RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY attnum)
  FROM pg_attribute WHERE attrelid = t AND attnum > 0 AND NOT attisdropped $$;
SELECT * FROM worlds.sql('create world mig');
SET worlds.world = mig;
-- a migration: a row changed before, a column added and backfilled, made NOT NULL, indexed
UPDATE users SET name = 'ann' WHERE id = 1;
ALTER TABLE users ADD COLUMN email text DEFAULT 'none';
UPDATE users SET email = name || '@example.com' WHERE id <= 2;
INSERT INTO users (name, age, email) VALUES ('new', 9, 'new@example.com');
ALTER TABLE users ALTER COLUMN email SET NOT NULL;
CREATE INDEX users_email ON users (email);
COMMENT ON COLUMN users.email IS 'where we write';
SELECT columns_of('users');
SELECT * FROM users ORDER BY id;
-- main's view and a qualified name read the world's table (main's columns of it)
SELECT * FROM adults ORDER BY id;
SELECT * FROM public.users ORDER BY id;
SELECT col_description('users'::regclass, 4);
-- main is untouched
RESET worlds.world;
SELECT columns_of('users');
SELECT count(*) FROM users;
SELECT indexname FROM pg_indexes WHERE tablename = 'users' AND schemaname = 'public' ORDER BY 1;
-- DIFF: the table's change first (id null), then its rows; AS SQL: the statements, then the rows
SELECT r->>'table' AS "table", r->>'id' AS id, r->>'change' AS change, r->'columns' AS columns FROM worlds.sql('diff world mig') AS d(r);
SELECT r->>'sql' AS sql FROM worlds.sql('diff world mig as sql') AS d(r) LIMIT 4;
-- SHOW BRANCHES counts the rows it wrote in its copy
SELECT r->>'changes' AS changes FROM worlds.sql('show branches') AS d(r) WHERE r->>'name' = 'mig';
-- main writes meanwhile (its new row gets the new column's default at the merge)
INSERT INTO users (name, age) VALUES ('main', 50);
SELECT r->>'table' AS "table", r->>'outcome' AS outcome, r->>'detail' AS detail FROM worlds.sql('merge world mig dry run') AS d(r);
SELECT * FROM worlds.sql('merge world mig');
SELECT columns_of('users');
SELECT * FROM users ORDER BY id;
SELECT * FROM adults ORDER BY id;
SELECT indexname FROM pg_indexes WHERE tablename = 'users' ORDER BY 1;
SELECT col_description('users'::regclass, 4);
SELECT count(*) AS twins_left FROM worlds.world_twin;

-- a rolled-back ALTER leaves nothing
SELECT * FROM worlds.sql('create world undo');
SET worlds.world = undo;
BEGIN;
ALTER TABLE users ADD COLUMN note text;
ROLLBACK;
SELECT columns_of('users');
SELECT count(*) AS twins FROM worlds.world_twin;
-- what a world can't do to main's table yet
SELECT try('ALTER TABLE users RENAME TO people');
RESET worlds.world;
SELECT * FROM worlds.sql('drop world undo');

-- a type change with USING, a check added last: main's row that breaks it refuses the merge
CREATE TABLE acct (id int PRIMARY KEY, owner text, bal numeric(10,2) NOT NULL DEFAULT 0);
INSERT INTO acct SELECT g, 'o' || g, g * 10 FROM generate_series(1, 4) g;
SELECT * FROM worlds.sql('create world cents');
SET worlds.world = cents;
ALTER TABLE acct ALTER COLUMN bal TYPE bigint USING (bal * 100)::bigint;
UPDATE acct SET bal = bal + 1 WHERE id = 2;
ALTER TABLE acct ADD CONSTRAINT bal_small CHECK (bal < 100000);
SELECT * FROM acct ORDER BY id;
-- a column the world changed can't be read through main's name of the table
SELECT try('SELECT bal FROM public.acct');
SELECT owner FROM public.acct WHERE id = 1;
SELECT try('SELECT * FROM worlds.sql(''diff world cents to main'')');
SELECT try('SELECT * FROM worlds.sql(''rebase world cents'')');
RESET worlds.world;
INSERT INTO acct VALUES (5, 'big', 5000);
SELECT r->>'outcome' AS outcome, r->>'detail' AS detail FROM worlds.sql('merge world cents dry run') AS d(r);
SELECT try('SELECT * FROM worlds.sql(''merge world cents'')');
SELECT columns_of('acct');
DELETE FROM acct WHERE id = 5;
-- main changed a row the world changed: 40001; changed back, it merges
UPDATE acct SET owner = 'main' WHERE id = 2;
SELECT try('SELECT * FROM worlds.sql(''merge world cents'')');
UPDATE acct SET owner = 'o2' WHERE id = 2;
SELECT * FROM worlds.sql('merge world cents');
SELECT * FROM acct ORDER BY id;

-- both sides change one table's columns: 40001, nothing merged
SELECT * FROM worlds.sql('create world wide');
SET worlds.world = wide;
ALTER TABLE acct ADD COLUMN x int;
RESET worlds.world;
ALTER TABLE acct ADD COLUMN y int;
SELECT try('SELECT * FROM worlds.sql(''merge world wide'')');
SELECT columns_of('acct');
SELECT * FROM worlds.sql('drop world wide');

-- a new table of the world referencing main's table it changed: the key is made at the merge
SELECT * FROM worlds.sql('create world orders');
SET worlds.world = orders;
ALTER TABLE users ADD COLUMN vip boolean NOT NULL DEFAULT false;
CREATE TABLE orders (id int PRIMARY KEY, user_id int NOT NULL REFERENCES users);
INSERT INTO orders VALUES (1, 6);
UPDATE users SET vip = true WHERE id = 6;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world orders');
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'orders'::regclass AND contype = 'f';
SELECT u.name, u.vip, o.id AS order_id FROM orders o JOIN users u ON u.id = o.user_id;

-- main's table dropped in a world: gone there (42P01) and its name free; the merge drops it in main
-- first, then brings the world's table of that name
CREATE TABLE legacy (id int PRIMARY KEY, v text);
INSERT INTO legacy VALUES (1, 'a');
CREATE TABLE legacy_ref (id int PRIMARY KEY, legacy_id int REFERENCES legacy);
SELECT * FROM worlds.sql('create world cleanup');
SET worlds.world = cleanup;
SELECT try('DROP TABLE legacy');
SELECT try('DROP TABLE legacy CASCADE');
DROP TABLE legacy_ref;
DROP TABLE legacy;
SELECT try('SELECT * FROM legacy');
SELECT try('DROP TABLE legacy');
DROP TABLE IF EXISTS legacy;
CREATE TABLE legacy (id int PRIMARY KEY, note text NOT NULL);
INSERT INTO legacy VALUES (7, 'new');
RESET worlds.world;
SELECT columns_of('legacy'), to_regclass('legacy_ref') IS NOT NULL AS main_has_legacy_ref;
SELECT r->>'table' AS "table", r->>'change' AS change FROM worlds.sql('diff world cleanup') AS d(r);
SELECT r->>'sql' AS sql FROM worlds.sql('diff world cleanup as sql') AS d(r);
SELECT * FROM worlds.sql('merge world cleanup');
SELECT columns_of('legacy'), to_regclass('legacy_ref') IS NOT NULL AS main_has_legacy_ref;
SELECT * FROM legacy;
-- main wrote rows of a table the world drops: 40001, nothing merged
SELECT * FROM worlds.sql('create world drop_it');
SET worlds.world = drop_it;
DROP TABLE legacy;
RESET worlds.world;
INSERT INTO legacy VALUES (8, 'main''s');
SELECT try('SELECT * FROM worlds.sql(''merge world drop_it'')');
SELECT count(*) FROM legacy;

-- main's view and function replaced in a world (CREATE OR REPLACE): the world's versions are its own,
-- found first; DIFF says alter view / replace function; the merge runs the statements on main; main
-- changing one since is 40001
CREATE TABLE shop (id int PRIMARY KEY, status text, total int);
INSERT INTO shop VALUES (1, 'open', 10), (2, 'paid', 20);
CREATE VIEW open_shop AS SELECT id, total FROM shop WHERE status = 'open';
CREATE FUNCTION shop_total(i int) RETURNS int LANGUAGE sql AS $$ SELECT total FROM shop WHERE id = i $$;
SELECT * FROM worlds.sql('create world reshape');
SET worlds.world = reshape;
CREATE OR REPLACE VIEW open_shop AS SELECT id, total, status FROM shop WHERE status IN ('open', 'new');
CREATE OR REPLACE FUNCTION shop_total(i int) RETURNS int LANGUAGE sql AS $$ SELECT total * 2 FROM shop WHERE id = i $$;
SELECT * FROM open_shop ORDER BY id;
SELECT shop_total(1);
RESET worlds.world;
SELECT * FROM open_shop ORDER BY id;
SELECT shop_total(1);
SELECT r->>'table' AS "table", r->>'change' AS change FROM worlds.sql('diff world reshape') AS d(r);
SELECT * FROM worlds.sql('merge world reshape');
SELECT * FROM open_shop ORDER BY id;
SELECT shop_total(1);
SELECT * FROM worlds.sql('create world reshape2');
SET worlds.world = reshape2;
CREATE OR REPLACE VIEW open_shop AS SELECT id, total, status FROM shop;
RESET worlds.world;
CREATE OR REPLACE VIEW open_shop AS SELECT id, total, status FROM shop WHERE total > 0;
SELECT try('SELECT * FROM worlds.sql(''merge world reshape2'')');
