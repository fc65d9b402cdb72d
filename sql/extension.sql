-- The extension installs into a preloaded server, tracks user tables, and drops cleanly.
CREATE TABLE before_install (id int PRIMARY KEY, v text);
CREATE TABLE no_key (a int, b text);
CREATE EXTENSION pg_worlds;
SELECT extname, extversion FROM pg_extension WHERE extname = 'pg_worlds';
-- every user table is tracked; tables created later too (their storage made at their first write, or at
-- once with worlds.lazy_storage off)
CREATE TABLE after_install (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text);
SELECT relid, key_columns, key_kind, unsupported, history IS NOT NULL AS stored FROM worlds.tables ORDER BY relid::text;
-- the session's world: main by default, settable per session
SHOW worlds.world;
SET worlds.world = 'main';
SHOW worlds.world;
RESET worlds.world;
SHOW worlds.world;
-- the spec's SHOW statements that Postgres's grammar takes as SHOW of a setting, typed as they are
SHOW WORLDS;
SHOW BRANCHES;
show history;
SHOW history_retention;
ALTER SYSTEM SET history_retention = '2 days';
SHOW history_retention;
ALTER SYSTEM SET history_retention TO '1 day';
SHOW history_retention;
BEGIN;
ALTER SYSTEM SET history_retention = '3 days';
ROLLBACK;
-- only superusers (or roles granted worlds.set_history_retention) change it, as Postgres's ALTER SYSTEM
CREATE ROLE ext_plain;
SET ROLE ext_plain;
BEGIN;
ALTER SYSTEM SET history_retention = '0';
ROLLBACK;
ALTER SYSTEM SET history_retention = '0';
SELECT * FROM worlds.sql('alter system set history_retention = ''0''');
SHOW history_retention;
RESET ROLE;
DROP ROLE ext_plain;
-- a setting of the server is still Postgres's
ALTER SYSTEM SET nosuch_setting = 1;
-- the SQL API lives in schema worlds; generated storage in worlds_data
SELECT count(*) > 10 AS has_api FROM pg_proc WHERE pronamespace = 'worlds'::regnamespace;
SELECT relname FROM pg_class WHERE relnamespace = 'worlds_data'::regnamespace AND relkind = 'v' ORDER BY relname;
-- a table's first write makes its storage
INSERT INTO after_install (note) VALUES ('its first write');
SELECT key_columns, key_kind, history IS NOT NULL AS stored FROM worlds.tables WHERE relid = 'after_install'::regclass;
SELECT relname FROM pg_class WHERE relnamespace = 'worlds_data'::regnamespace AND relname LIKE '%after_install%' ORDER BY relname;
-- untrack and track again
SELECT worlds.untrack('no_key');
SELECT relid FROM worlds.tables ORDER BY relid::text;
SELECT (worlds.track('no_key')).key_kind;
-- drop cleanly: nothing of pg_worlds is left
DROP EXTENSION pg_worlds;
SELECT count(*) FROM pg_namespace WHERE nspname IN ('worlds', 'worlds_data');
SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'worlds_%';
SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'worlds_%';
-- SHOW WORLDS is Postgres's SHOW again without pg_worlds, and pg_worlds' once it is back
SHOW WORLDS;
CREATE EXTENSION pg_worlds;
SELECT count(*) FROM worlds.tables;
SHOW WORLDS;
-- the same session, after DROP and CREATE EXTENSION: writes in a world go to the new storage (its schema
-- has a new oid, which the session looks up again when pg_namespace changes)
CREATE TABLE again (id int PRIMARY KEY, v int);
INSERT INTO again VALUES (1, 1);
SELECT * FROM worlds.sql('create world again_w');
SET worlds.world = again_w;
UPDATE again SET v = 2 WHERE id = 1 RETURNING *;
DELETE FROM again WHERE id = 1;
INSERT INTO again VALUES (3, 3);
SELECT * FROM again ORDER BY id;
RESET worlds.world;
SELECT * FROM again ORDER BY id;
SELECT * FROM worlds.sql('drop world again_w');
