-- A world's session is shown its namespaces by the schemas they stand for: psql's \d and \dt, catalog
-- views' schema columns (name, information_schema's sql_identifier), EXPLAIN VERBOSE, messages. Only
-- what is sent changes: the catalog keeps the real names (main's pg_class and pg_tables list the world's
-- objects under them; main's \dt, \dn and pg_dump don't).
CREATE EXTENSION pg_worlds;
CREATE TABLE accounts (id int PRIMARY KEY, owner text);
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL);
CREATE INDEX notes_body ON notes (body);
CREATE SCHEMA app;
CREATE TABLE app.jobs (id int PRIMARY KEY);
\d notes
\dt
SELECT schemaname, tablename FROM pg_tables WHERE tablename IN ('notes', 'jobs', 'accounts') ORDER BY tablename;
SELECT table_schema, table_name FROM information_schema.tables WHERE table_name IN ('notes', 'jobs') ORDER BY table_name;
SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid WHERE c.relname = 'notes';
-- (a query still compares the catalog's names: the world's namespace isn't called public there)
SELECT count(*) FROM pg_namespace WHERE nspname = 'public';
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM notes WHERE id = 1;
SET search_path = app, public;
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM jobs;
RESET search_path;
DROP TABLE app.jobs;
-- definitions printed by Postgres's functions, and names built from nspname
SELECT pg_get_indexdef('notes_body'::regclass);
CREATE TABLE counters (id serial PRIMARY KEY);
SELECT pg_get_serial_sequence('counters', 'id');
\d counters_id_seq
-- main: none of it
RESET worlds.world;
SELECT schemaname FROM pg_tables WHERE tablename = 'notes';
\dt
