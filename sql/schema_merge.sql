-- MERGE brings a world's schema first (dependency order), then its rows, in one transaction; both sides
-- making one name is 40001; DRY RUN shows the schema (id null); the merge policy's schema rule fires.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_sbot;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE accounts (id int PRIMARY KEY, owner text);
INSERT INTO accounts VALUES (1, 'ann'), (2, 'bob');
SELECT * FROM worlds.sql('create world migrate');
SET worlds.world = migrate;
CREATE TYPE mood AS ENUM ('calm', 'busy');
CREATE TABLE notes (id serial PRIMARY KEY, account int NOT NULL, body text NOT NULL, mood mood DEFAULT 'calm');
CREATE VIEW account_notes AS SELECT a.owner, n.body FROM accounts a JOIN notes n ON n.account = a.id;
CREATE FUNCTION note_count(a int) RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT count(*) FROM notes WHERE account = a $$;
CREATE SCHEMA reporting;
CREATE TABLE reporting.daily (day date PRIMARY KEY, notes int);
INSERT INTO notes (account, body) VALUES (1, 'first'), (2, 'second');
-- (a name qualified with a schema only the world has isn't found by a query: Postgres resolves it
-- before any hook; the world's search_path finds it)
SELECT try($q$INSERT INTO reporting.daily VALUES ('2026-12-06', 1)$q$);
SET search_path = reporting, public;
INSERT INTO daily VALUES ('2026-12-06', 2);
RESET search_path;
UPDATE accounts SET owner = 'ann b' WHERE id = 1;
RESET worlds.world;
-- the dry run: the schema first, then the rows
SELECT r->>'table' AS "table", r->>'id' AS id, r->>'outcome' AS outcome FROM worlds.sql('merge world migrate dry run') AS d(r);
-- the merge: one transaction, schema then rows
SELECT * FROM worlds.sql('merge world migrate');
SELECT * FROM account_notes ORDER BY body;
SELECT note_count(1), pg_typeof('busy'::mood);
SELECT * FROM reporting.daily;
INSERT INTO notes (account, body) VALUES (1, 'third');
SELECT id, body, mood FROM notes ORDER BY id;
-- brought tables are tracked: a new world sees and changes them like any of main's
SELECT relid::text FROM worlds.tables WHERE relid::text IN ('notes', 'reporting.daily') ORDER BY 1;
SELECT * FROM worlds.sql('create world later');
SET worlds.world = later;
UPDATE notes SET body = 'changed' WHERE id = 1;
RESET worlds.world;
SELECT r->>'table' AS "table", r->>'change' AS change FROM worlds.sql('diff world later') AS d(r);
SELECT * FROM worlds.sql('drop world later');
SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pg\_w%';
-- both sides made one name: 40001, nothing merged
SELECT * FROM worlds.sql('create world a');
SET worlds.world = a;
CREATE TABLE tags (id int PRIMARY KEY);
INSERT INTO tags VALUES (1);
UPDATE accounts SET owner = 'bob a' WHERE id = 2;
RESET worlds.world;
CREATE TABLE tags (id int PRIMARY KEY, label text);
SELECT try($$SELECT * FROM worlds.sql('merge world a')$$);
SELECT r->>'outcome' AS outcome, r->>'detail' AS detail FROM worlds.sql('merge world a dry run') AS d(r) WHERE r->>'outcome' = 'blocked';
SELECT * FROM accounts ORDER BY id;
SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'tags' ORDER BY ordinal_position;
DROP TABLE tags;
SELECT * FROM worlds.sql('merge world a');
SELECT * FROM tags;
-- a constraint the world's table brings is checked against rows as they are at the merge
SELECT * FROM worlds.sql('create world b');
SET worlds.world = b;
CREATE TABLE ledger (id int PRIMARY KEY, account int REFERENCES notes, amount int CHECK (amount > 0));
INSERT INTO ledger VALUES (1, 1, 5);
RESET worlds.world;
SELECT * FROM worlds.sql('merge world b');
SELECT * FROM ledger;
-- UNDO MERGE of a merge that brought schema: refused (0A000), nothing changed; SHOW HISTORY's schema event
SELECT try($$SELECT * FROM worlds.sql('undo merge b')$$);
SELECT count(*) FROM ledger;
SELECT event, rows FROM worlds.event e JOIN worlds.world w ON w.num = e.world WHERE w.name = 'b' AND event = 'schema';
-- MERGE ... INTO another world brings the objects into that world's namespaces
SELECT * FROM worlds.sql('create world src');
SELECT * FROM worlds.sql('create world dst');
SET worlds.world = src;
CREATE TABLE drafts (id int PRIMARY KEY, body text);
INSERT INTO drafts VALUES (1, 'draft');
CREATE MATERIALIZED VIEW draft_count AS SELECT count(*) AS n FROM drafts;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world src into dst');
SET worlds.world = dst;
SELECT * FROM drafts;
SELECT * FROM draft_count;
RESET worlds.world;
SELECT try('SELECT * FROM drafts');
SELECT * FROM worlds.sql('merge world dst');
SELECT * FROM drafts;
SELECT * FROM draft_count;
-- the merge policy's schema rule: an agent's merge that changes the schema waits for a person
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO PUBLIC;
GRANT CREATE ON SCHEMA public TO PUBLIC;
SELECT j ->> 'name' AS name FROM worlds.sql($$create merge policy careful with (schema = false)$$) j;
SELECT j ->> 'name' AS name FROM worlds.sql($$create agent regress_sbot with (can = 'read,fork,write_own,merge_own', policy = 'careful')$$) j;
SET SESSION AUTHORIZATION regress_sbot;
SELECT * FROM worlds.sql('create world agent_world');
SET worlds.world = agent_world;
CREATE TABLE agent_table (id int);
RESET worlds.world;
SELECT try($$SELECT * FROM worlds.sql('merge world agent_world')$$);
RESET SESSION AUTHORIZATION;
SELECT count(*) FROM pg_class WHERE relname = 'agent_table' AND relnamespace = 'public'::regnamespace;
SELECT * FROM worlds.sql('drop world agent_world');
SELECT * FROM worlds.sql('drop agent regress_sbot');
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
