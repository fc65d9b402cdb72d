-- Rights: pg_worlds never lets a role do or see more than Postgres would. Its internal functions are its
-- own; DIFF, DRY RUN and AS OF show whole rows only to a role that may read every row and column.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE secret (id int PRIMARY KEY, v text);
CREATE TABLE open_t (id int PRIMARY KEY, v text, hidden text);
CREATE TABLE pub (id int PRIMARY KEY, owner text, v text);
INSERT INTO secret VALUES (1, 's');
INSERT INTO open_t VALUES (1, 'o', 'h');
INSERT INTO pub VALUES (1, 'rights_bob', 'b'), (2, 'rights_alice', 'a');
ALTER TABLE pub ENABLE ROW LEVEL SECURITY;
CREATE POLICY mine ON pub USING (owner = current_user);
CREATE ROLE rights_alice;
CREATE ROLE rights_carol;
GRANT SELECT, UPDATE ON open_t TO rights_alice;
GRANT SELECT ON pub TO rights_alice;
GRANT SELECT (id, v) ON open_t TO rights_carol;
SELECT * FROM worlds.sql('create world w1');
SET worlds.world = w1;
UPDATE secret SET v = 's2';
UPDATE open_t SET v = 'o2';
UPDATE pub SET v = 'changed';
RESET worlds.world;
SELECT now() AS before_main \gset
SELECT pg_sleep(0.01);
UPDATE pub SET v = 'main changed' WHERE id = 1;
SELECT changes AS pub_changes FROM worlds.tables WHERE relid = 'pub'::regclass \gset
SET ROLE rights_alice;
-- internal functions: 42501 (they act with pg_worlds' own rights)
SELECT try($$select worlds._drop_relation('secret'::regclass)$$);
SELECT try($$select worlds._discard(w) from worlds.world w where name = 'w1'$$);
SELECT try($$select worlds._uninstall()$$);
SELECT try($$select * from worlds._portable_rows()$$);
SELECT try($$select worlds.untrack('open_t')$$);
SELECT try($$select worlds.track('worlds.world')$$);
-- ... while what a role's own statements reach still runs as it did (moments, AS OF's checks)
SELECT try($$select worlds.moment(5)$$);
SELECT worlds.moment('now') IS NOT NULL AS moment_ok;
-- DIFF and DRY RUN of a world that changed a table the role may not read: 42501, nothing shown
SELECT try($$select * from worlds.sql('diff world w1')$$);
SELECT try($$select * from worlds.sql('diff world w1 as sql')$$);
SELECT try($$select * from worlds.sql('merge world w1 dry run')$$);
SELECT try(format('select * from worlds.sql(%L)', format('diff world %L to main', 'main@' || :'before_main')));
-- AS OF of a table whose rows row-level security keeps from the role: 42501
SELECT try(format('select * from worlds.as_of(null::pub, %L)', :'before_main'));
SELECT try(format('select * from worlds.sql(%L)', format('select * from pub as of %L', :'before_main')));
-- nor its history read directly (its before-images would show rows row-level security hides)
SELECT count(*) AS history_rows_seen FROM :pub_changes;
RESET ROLE;
-- column grants: a role that may read some columns only is refused too
SELECT * FROM worlds.sql('create world w2');
SET worlds.world = w2; UPDATE open_t SET v = 'o3'; RESET worlds.world;
SET ROLE rights_carol;
SELECT try($$select * from worlds.sql('diff world w2')$$);
RESET ROLE;
-- a role that may read every row and column sees the diff
SET ROLE rights_alice;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id FROM worlds.sql('diff world w2') j;
RESET ROLE;
-- a cached moment's copy is read through a view that checks the reader's rights on the table
SELECT count(*) FROM worlds.sql(format('select * from secret as of %L', :'before_main'));
SELECT c.relation::text LIKE 'worlds_data.c_%' AS cached FROM worlds.as_of_cache c JOIN worlds.tables t ON t.tabno = c.tabno WHERE t.relid = 'secret'::regclass;
SELECT 'v' || (SELECT relname FROM pg_class WHERE oid = c.relation) AS copy_view FROM worlds.as_of_cache c JOIN worlds.tables t ON t.tabno = c.tabno WHERE t.relid = 'secret'::regclass \gset
SET ROLE rights_alice;
SELECT try(format('select * from worlds_data.%I', :'copy_view'));
SELECT count(*) AS copy_rows_seen FROM worlds_data.:"copy_view";
SELECT left(try(format('select * from worlds_data.%I', substr(:'copy_view', 2))), 5) AS copy_itself;
RESET ROLE;
-- A table's own code (CHECK constraints, generated columns, domain checks, its types' equality) runs on a
-- world's rows as the table's owner, never with pg_worlds' superuser rights
CREATE ROLE rights_owner;
CREATE SCHEMA owned AUTHORIZATION rights_owner;
SET ROLE rights_owner;
CREATE FUNCTION owned.who(label text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE '% runs as %, superuser: %', label, current_user, current_setting('is_superuser'); RETURN true; END $$;
CREATE FUNCTION owned.who_int(v int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN RAISE NOTICE 'generated column runs as %', current_user; RETURN v * 2; END $$;
CREATE DOMAIN owned.checked_text AS text CHECK (owned.who('domain check'));
CREATE TABLE owned.gadgets (id int PRIMARY KEY, name owned.checked_text, n int CHECK (owned.who('check constraint')),
                            twice int GENERATED ALWAYS AS (owned.who_int(n)) STORED);
GRANT USAGE ON SCHEMA owned TO rights_alice;
GRANT SELECT, INSERT, UPDATE ON owned.gadgets TO rights_alice;
RESET ROLE;
SELECT * FROM worlds.sql('create world w_owner');
SET ROLE rights_alice;
SET worlds.world = w_owner;
INSERT INTO owned.gadgets (id, name, n) VALUES (1, 'one', 21);
SELECT id, name, n, twice FROM owned.gadgets;
RESET worlds.world;
SELECT count(*) AS main_rows FROM owned.gadgets;
RESET ROLE;
-- the owner changes: the new owner's rights are the ones used
CREATE ROLE rights_owner2;
ALTER TABLE owned.gadgets OWNER TO rights_owner2;
GRANT USAGE ON SCHEMA owned TO rights_owner2;
SET ROLE rights_alice;
SET worlds.world = w_owner;
UPDATE owned.gadgets SET n = 5 WHERE id = 1;
RESET worlds.world;
RESET ROLE;
SELECT array_agg(DISTINCT a.grantee::regrole::text ORDER BY a.grantee::regrole::text) AS storage_grantees
FROM worlds.tables t, pg_class c, aclexplode(c.relacl) a
WHERE t.relid = 'owned.gadgets'::regclass AND c.oid IN (t.delta, t.overlay) AND a.grantee <> c.relowner;
SELECT * FROM worlds.sql('drop world w_owner');
-- drops of what a tracked table uses behave as in stock Postgres: pg_worlds' storage depends on none of
-- the user's types, functions or collations, so notices and errors name only the user's objects
CREATE TYPE owned.mood AS ENUM ('ok', 'sad');
CREATE TABLE mooded (id int PRIMARY KEY, m owned.mood, note text);
INSERT INTO mooded VALUES (1, 'ok', 'first');
SELECT * FROM worlds.sql('create world w_mood');
UPDATE mooded SET m = 'sad', note = 'second';
DROP TYPE owned.mood;
DROP TYPE owned.mood CASCADE;
SELECT * FROM mooded;
SET worlds.world = w_mood;
SELECT * FROM mooded;
RESET worlds.world;
UPDATE mooded SET note = 'third';
SELECT * FROM worlds.sql('drop world w_mood');
-- a function only a column default uses drops with it, as in main
CREATE FUNCTION owned.default_n() RETURNS int LANGUAGE sql AS 'SELECT 7';
CREATE TABLE defaulted (id int PRIMARY KEY, n int DEFAULT owned.default_n());
DROP FUNCTION owned.default_n() CASCADE;
INSERT INTO defaulted (id) VALUES (1);
SELECT * FROM defaulted;
-- a generated column's function: the column goes with it
DROP FUNCTION owned.who_int(int);
DROP FUNCTION owned.who_int(int) CASCADE;
SELECT id, name, n FROM owned.gadgets;
-- the schema, with a type a table elsewhere uses and a tracked table of its own
CREATE TYPE owned.size AS ENUM ('s', 'm');
CREATE TABLE sized (id int PRIMARY KEY, s owned.size);
INSERT INTO sized VALUES (1, 's');
UPDATE sized SET s = 'm';
DROP SCHEMA owned;
DROP SCHEMA owned CASCADE;
SELECT count(*) AS extension_kept FROM pg_extension WHERE extname = 'pg_worlds';
UPDATE sized SET id = 2;
SELECT * FROM sized;
SELECT count(*) AS storage_deps_on_user_objects FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
WHERE d.classid = 'pg_class'::regclass AND c.relnamespace = 'worlds_data'::regnamespace AND d.refobjid >= 16384
  AND d.refclassid IN ('pg_type'::regclass, 'pg_proc'::regclass, 'pg_collation'::regclass) AND d.deptype = 'n'
  AND d.refobjid NOT IN (SELECT oid FROM pg_type WHERE typnamespace IN ('worlds'::regnamespace, 'worlds_data'::regnamespace));
DROP TABLE mooded, defaulted, sized;
DROP OWNED BY rights_owner, rights_owner2;
DROP ROLE rights_owner, rights_owner2;
DROP OWNED BY rights_alice, rights_carol;
DROP ROLE rights_alice, rights_carol;
