-- MERGE WORLD when main hasn't touched the world's tables since its fork: the world's rows are applied
-- by typed statements without a plan of rows (src/merge/fast_forward.rs). The same world is merged twice,
-- fast (main untouched) and planned (main changed other rows of the tables since the fork): the same
-- count, the same rows.
SET client_min_messages = warning;
DROP ROLE IF EXISTS ff_writer;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE TABLE parent (id int PRIMARY KEY, v text, n numeric, code text UNIQUE);
CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent, x int);
CREATE TABLE gen (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, a int, twice int GENERATED ALWAYS AS (a * 2) STORED);
CREATE FUNCTION reset_data() RETURNS void LANGUAGE sql AS $$
    DELETE FROM child; DELETE FROM parent; DELETE FROM gen;
    INSERT INTO parent SELECT g, 'v' || g, g, 'c' || g FROM generate_series(1, 10) g;
    INSERT INTO child VALUES (1, 1, 1);
    INSERT INTO gen (id, a) OVERRIDING SYSTEM VALUE SELECT g, g FROM generate_series(1, 3) g;
$$;
CREATE FUNCTION world_writes() RETURNS void LANGUAGE sql AS $$
    UPDATE parent SET v = 'x' WHERE id <= 3;         -- 3 rows changed
    UPDATE parent SET n = 1.00 WHERE id = 1;          -- the same number at another scale: a change
    UPDATE parent SET v = v WHERE id = 5;             -- as it was: not a change
    UPDATE parent SET v = 'v4' WHERE id = 4;          -- as it was: not a change
    UPDATE parent SET code = 'moved' WHERE id = 6;    -- frees c6 ...
    INSERT INTO parent VALUES (11, 'new', 11, 'c6');  -- ... for a new row: the update goes first
    DELETE FROM child WHERE id = 1;                   -- a child deleted before its parent
    DELETE FROM parent WHERE id = 10;
    INSERT INTO child VALUES (2, 11, 2);              -- a child of a new parent, inserted after it
    UPDATE gen SET a = 20 WHERE id = 2;               -- a generated column follows
    INSERT INTO gen (id, a) OVERRIDING SYSTEM VALUE VALUES (4, 4);
    UPDATE parent SET v = 'gone' WHERE id = 9;
    DELETE FROM parent WHERE id = 9;                  -- its last version deletes it
    INSERT INTO parent VALUES (12, 'tmp', 12, 'c12');
    DELETE FROM parent WHERE id = 12;                 -- added and removed: nothing to merge
$$;
CREATE FUNCTION state() RETURNS TABLE (parents text, children text, gens text) LANGUAGE sql AS $$
    SELECT (SELECT string_agg(concat_ws(':', id, v, n, code), ' ' ORDER BY id) FROM parent),
           (SELECT string_agg(concat_ws(':', id, parent_id, x), ' ' ORDER BY id) FROM child),
           (SELECT string_agg(concat_ws(':', id, a, twice), ' ' ORDER BY id) FROM gen);
$$;
-- fast: main untouched since the fork
SELECT reset_data();
SELECT * FROM worlds.sql('create world ff_fast');
SET worlds.world = ff_fast;
SELECT world_writes();
RESET worlds.world;
SELECT * FROM worlds.sql('merge world ff_fast');
SELECT * FROM state();
-- planned: main changed other rows of both tables since the fork
SELECT reset_data();
SELECT * FROM worlds.sql('create world ff_planned');
SET worlds.world = ff_planned;
SELECT world_writes();
RESET worlds.world;
UPDATE parent SET v = 'main' WHERE id = 8;
UPDATE gen SET a = 30 WHERE id = 3;
SELECT * FROM worlds.sql('merge world ff_planned');
SELECT * FROM state();
-- a role that may write the tables but not read the world's storage merges the planned way: the same
CREATE ROLE ff_writer;
GRANT SELECT, INSERT, UPDATE, DELETE ON parent, child, gen TO ff_writer;
SELECT reset_data();
SELECT * FROM worlds.sql('create world ff_role');
SET worlds.world = ff_role;
SELECT world_writes();
RESET worlds.world;
GRANT USAGE ON SCHEMA worlds TO ff_writer;
SET ROLE ff_writer;
SELECT * FROM worlds.sql('merge world ff_role');
RESET ROLE;
SELECT * FROM state();
-- history keeps the merge as the world's: each change's source is the world
SELECT count(*) FILTER (WHERE _w_src = w.id) AS from_world FROM worlds.world w,
       LATERAL (SELECT _w_src FROM worlds_data.h_parent_1 UNION ALL SELECT _w_src FROM worlds_data.i_parent_1) h
 WHERE w.name = 'ff_fast' GROUP BY w.id;
DROP OWNED BY ff_writer;
DROP ROLE ff_writer;
-- merge checks run on a fast-forward merge's result, as on a planned one: a broken check refuses the
-- merge (nothing of it is left in main), a kept one lets it through (the DEBUG line names the path)
CREATE TABLE acct (id int PRIMARY KEY, balance int);
INSERT INTO acct VALUES (1, 10), (2, 10);
SELECT * FROM worlds.sql('create merge check ff_no_negative on tables (acct) as select id from acct where balance < 0');
SELECT * FROM worlds.sql('create world ff_overdraw');
SET worlds.world = ff_overdraw;
UPDATE acct SET balance = -5 WHERE id = 1;
UPDATE acct SET balance = 20 WHERE id = 2;
RESET worlds.world;
SET client_min_messages = debug1;
SELECT * FROM worlds.sql('merge world ff_overdraw');
RESET client_min_messages;
SELECT * FROM acct ORDER BY id;
SET worlds.world = ff_overdraw;
UPDATE acct SET balance = 5 WHERE id = 1;
RESET worlds.world;
SET client_min_messages = debug1;
SELECT * FROM worlds.sql('merge world ff_overdraw');
RESET client_min_messages;
SELECT * FROM acct ORDER BY id;
SELECT * FROM worlds.sql('drop merge check ff_no_negative');
