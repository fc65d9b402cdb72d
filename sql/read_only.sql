-- worlds.read_only: a transaction that can only read, stricter than READ ONLY (MCP safe mode runs every
-- call in one). What a READ ONLY transaction still lets through is refused (25006), at any depth.
CREATE EXTENSION IF NOT EXISTS pg_worlds;
CREATE TABLE ro_acct (id int PRIMARY KEY, bal int NOT NULL);
INSERT INTO ro_acct SELECT g, 100 FROM generate_series(1, 3) g;
CREATE FUNCTION ro_notify() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('ro', 'x'); END $$;
CREATE FUNCTION ro_reset() RETURNS void LANGUAGE plpgsql AS $$ BEGIN RESET ALL; PERFORM pg_notify('ro', 'x'); END $$;
CREATE FUNCTION ro_state(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ran'; EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE; END $$;
CREATE FUNCTION ro_off() RETURNS void LANGUAGE sql SET worlds.read_only = off AS $$ SELECT 1 $$;
SELECT worlds.create_world('ro_w');
\set VERBOSITY terse
SHOW worlds.read_only;
-- reads run: in main, in a world, and pg_worlds' own reads (SHOW WORLDS, DIFF, a DRY RUN)
BEGIN READ ONLY;
SET LOCAL worlds.read_only = on;
SELECT sum(bal) FROM ro_acct;
SELECT set_config('worlds.world', 'ro_w', true);
SELECT count(*) FROM ro_acct;
SELECT name FROM worlds.show_worlds() ORDER BY name;
SELECT count(*) FROM worlds.diff('ro_w');
SELECT count(*) FROM worlds.merge_dry_run('ro_w');
EXPLAIN (COSTS OFF) SELECT * FROM ro_acct WHERE id = 1;
SHOW worlds.read_only;
ROLLBACK;
-- what a READ ONLY transaction allows and this doesn't, each in its own transaction
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT pg_notify('ro', 'x'); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; NOTIFY ro; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; LISTEN ro; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT ro_notify(); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; DO $$ BEGIN PERFORM pg_notify('ro', 'x'); END $$; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT gin_clean_pending_list('ro_acct_pkey'); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT lo_creat(-1); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT lo_import('/etc/hostname'); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; LOCK TABLE ro_acct; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; ANALYZE ro_acct; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; COPY ro_acct TO '/tmp/ro_out'; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; COPY ro_acct TO STDOUT; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT pg_terminate_backend(0); ROLLBACK;
-- dblink opens a connection of its own, which no READ ONLY reaches
CREATE EXTENSION IF NOT EXISTS dblink;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT dblink_exec('dbname=postgres', 'select 1'); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT * FROM dblink('dbname=postgres', 'select 1') AS t(i int); ROLLBACK;
DROP EXTENSION dblink;
-- each is SQLSTATE 25006 (read_only_sql_transaction), as Postgres's own refusals in a READ ONLY transaction
BEGIN READ ONLY; SET LOCAL worlds.read_only = on;
SELECT q, ro_state(q) FROM unnest(ARRAY['select pg_notify(''ro'', ''x'')', 'notify ro', 'lock table ro_acct',
  'select lo_creat(-1)', 'reset all', 'set worlds.read_only = off', 'update ro_acct set bal = 0', 'select count(*) from ro_acct']) q;
ROLLBACK;
-- it can't be turned off inside: SET, RESET, set_config, RESET ALL, a function's SET clause
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SET LOCAL worlds.read_only = off; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; RESET worlds.read_only; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SET worlds.read_only TO DEFAULT; ROLLBACK;
-- (set_config with NULL resets without asking: the transaction stays read-only all the same)
BEGIN READ ONLY; SET LOCAL worlds.read_only = on;
SELECT set_config('worlds.read_only', NULL, true);
SELECT pg_notify('ro', 'x');
ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT set_config('worlds.read_only', 'off', true); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; RESET ALL; ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT ro_reset(); ROLLBACK;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT ro_off(); ROLLBACK;
-- writes fail as READ ONLY has them fail
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; UPDATE ro_acct SET bal = 0; ROLLBACK;
-- it ends with the transaction: the next one is as before
SHOW worlds.read_only;
BEGIN; SELECT pg_notify('ro', 'x'); ROLLBACK;
-- a function of the same name in another schema is the user's own
CREATE SCHEMA ro_app;
CREATE FUNCTION ro_app.pg_notify(text, text) RETURNS text LANGUAGE sql AS $$ SELECT $1 || $2 $$;
BEGIN READ ONLY; SET LOCAL worlds.read_only = on; SELECT ro_app.pg_notify('a', 'b'); ROLLBACK;
SELECT sum(bal) FROM ro_acct;
SELECT worlds.drop_world('ro_w');
