-- Schema changes inside a world: DDL lands in the world's own namespace; DIFF lists it before the rows
-- (id null, the spec's change kinds and columns), AS SQL writes the DDL that makes it.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE accounts (id int PRIMARY KEY, owner text);
INSERT INTO accounts VALUES (1, 'ann'), (2, 'bob');
SELECT * FROM worlds.sql('create world migrate');
SET worlds.world = migrate;
-- a migration: a table, a view over it and main's table, a sequence, a function, a type
CREATE TYPE mood AS ENUM ('calm', 'busy');
CREATE TABLE notes (id serial PRIMARY KEY, account int NOT NULL, body text NOT NULL, mood mood DEFAULT 'calm',
                    CHECK (length(body) > 0));
CREATE INDEX notes_account ON notes (account);
CREATE SEQUENCE tickets START 100;
CREATE VIEW account_notes AS SELECT a.owner, n.body FROM accounts a JOIN notes n ON n.account = a.id;
CREATE FUNCTION note_count(a int) RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT count(*) FROM notes WHERE account = a $$;
INSERT INTO notes (account, body) VALUES (1, 'first'), (2, 'second');
UPDATE accounts SET owner = 'ann b' WHERE id = 1;
-- the world reads its own objects and main's, unqualified, through one search_path it didn't change
SHOW search_path;
SELECT * FROM account_notes ORDER BY body;
SELECT note_count(1), nextval('tickets');
-- DIFF: the schema first (id null), then the new table's rows, then the rows of main's tables
SELECT "table", id, change, after, columns FROM worlds.sql('diff') AS d(r)
  CROSS JOIN LATERAL jsonb_to_record(r) AS x("table" text, id text, change text, after jsonb, columns jsonb);
SELECT r->>'sql' AS sql FROM worlds.sql('diff as sql') AS d(r);
SELECT count(*) FROM worlds.sql('diff limit 3');
-- a query that names the world's table with a schema reads main's schema (Postgres resolves the name
-- before any hook): 42P01, with a hint
SELECT * FROM public.notes;
-- main sees none of it: not in its search_path, not in \dt
RESET worlds.world;
SELECT try('SELECT * FROM notes');
SELECT try('SELECT note_count(1)');
SELECT relname FROM pg_class c WHERE pg_table_is_visible(c.oid) AND relkind IN ('r', 'v', 'S') AND relnamespace = 'public'::regnamespace ORDER BY 1;
SELECT * FROM accounts ORDER BY id;
-- nor does another world
SELECT * FROM worlds.sql('create world other');
SET worlds.world = other;
SELECT try('SELECT * FROM notes');
RESET worlds.world;
SELECT schema, nsp FROM worlds.world_schema ORDER BY world, schema;
-- DIFF a TO b between worlds (and main): what one made and the other didn't is made or dropped
SELECT r->>'table' AS "table", r->>'id' AS id, r->>'change' AS change FROM worlds.sql('diff world main to migrate') AS d(r);
SELECT r->>'table' AS "table", r->>'change' AS change FROM worlds.sql('diff world migrate to other') AS d(r);
SELECT r->>'sql' AS sql FROM worlds.sql('diff world migrate to main as sql') AS d(r);
-- awkward names in what a world made: DIFF AS SQL writes them as names (not inside literals), whatever
-- standard_conforming_strings says; the statements run on the other side
SELECT * FROM worlds.sql('create world odd');
SET worlds.world = odd;
CREATE TABLE "odd table" (id int PRIMARY KEY, "it's" text, "50%" int, "a\b" text);
INSERT INTO "odd table" VALUES (1, 'x''y', 50, 'back\slash');
CREATE FUNCTION "My Fn"(n int) RETURNS int LANGUAGE sql AS 'SELECT n';
RESET worlds.world;
SET standard_conforming_strings = off;
SET escape_string_warning = off;
CREATE TEMP TABLE odd_sql AS SELECT r->>'sql' AS sql FROM worlds.sql('diff world odd as sql') AS d(r);
SELECT r->>'sql' AS sql FROM worlds.sql('diff world odd to main as sql') AS d(r);
RESET escape_string_warning;
RESET standard_conforming_strings;
SELECT sql FROM odd_sql;
DO $$ DECLARE s text; BEGIN FOR s IN SELECT sql FROM odd_sql WHERE sql NOT LIKE 'CREATE OR REPLACE FUNCTION%' LOOP EXECUTE s; END LOOP; END $$;
SELECT * FROM "odd table";
DROP TABLE "odd table";
SELECT * FROM worlds.sql('drop world odd');
-- dropping the world drops what it made
SELECT * FROM worlds.sql('drop world migrate');
SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pg\_w%';
SELECT count(*) FROM worlds.world_schema;
