-- The spec's loose ends around reviews and history (issue 46): SHOW REVIEWS' run column, a DRY RUN
-- saying the CONFIRM DELETES n its merge needs, REBASE ... USING OURS under overwrite = false (42501),
-- SHOW CHECKPOINTS, and the typed functions for DIFF ... TO, DIFF ... READERS and UNDO AGENT.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_dbot;
RESET client_min_messages;
CREATE EXTENSION IF NOT EXISTS pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
CREATE FUNCTION queued(w text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..200 LOOP
        IF EXISTS (SELECT 1 FROM worlds.review r JOIN worlds.world x ON x.num = r.world WHERE x.name = w AND x.dropped IS NULL) THEN RETURN true; END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN false;
END $$;
CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0));
INSERT INTO items SELECT g, 1 FROM generate_series(1, 10) g;
GRANT SELECT, INSERT, UPDATE, DELETE ON items TO PUBLIC;
\set VERBOSITY terse
SELECT count(*) FROM worlds.sql('create merge policy strict with (max_rows = 1, confirm_deletes_over = 0)');
SELECT count(*) FROM worlds.sql('create agent regress_dbot with (can = ''read,fork,write_own,merge_own,restore'', policy = ''strict'')');
-- SHOW REVIEWS' run: which run of the agent made the world (from its fork's meta)
SET SESSION AUTHORIZATION regress_dbot;
SELECT * FROM worlds.sql('create world run_w with (run_id = ''r7'', model = ''m-1'')');
SET worlds.world = run_w;
DELETE FROM items WHERE id IN (9, 10);
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world run_w')$$);
RESET SESSION AUTHORIZATION;
SELECT queued('run_w');
SELECT world, reasons, run FROM worlds.show_reviews();
-- a person's DRY RUN of it says the count the merge needs (CONFIRM DELETES 2), before a merge refuses it
SELECT count(*) AS plan_rows FROM worlds.sql('merge world run_w dry run');
SELECT try($$select * from worlds.sql('merge world run_w')$$);
SELECT * FROM worlds.sql('merge world run_w confirm deletes 2');
SELECT count(*) AS items FROM items;
-- REBASE ... USING OURS by an agent under overwrite = false: keeping its rows over its parent's changes is
-- refused (42501), nothing changed; USING THEIRS goes through
SELECT count(*) FROM worlds.sql('alter merge policy strict set (max_rows = null, confirm_deletes_over = null)');
SET SESSION AUTHORIZATION regress_dbot;
SELECT * FROM worlds.sql('create world reb_w');
SET worlds.world = reb_w;
UPDATE items SET qty = 5 WHERE id = 1;
RESET worlds.world;
RESET SESSION AUTHORIZATION;
UPDATE items SET qty = 7 WHERE id = 1;
SET SESSION AUTHORIZATION regress_dbot;
SELECT try($$select * from worlds.sql('rebase world reb_w using ours')$$);
SELECT version FROM worlds.world WHERE name = 'reb_w' AND dropped IS NULL;
SELECT * FROM worlds.sql('rebase world reb_w using theirs');
SET worlds.world = reb_w;
SELECT qty FROM items WHERE id = 1;
RESET worlds.world;
RESET SESSION AUTHORIZATION;
-- a person may keep the world's rows: its rights alone decide
SELECT * FROM worlds.sql('create world reb_p');
SET worlds.world = reb_p;
UPDATE items SET qty = 8 WHERE id = 2;
RESET worlds.world;
UPDATE items SET qty = 9 WHERE id = 2;
SELECT * FROM worlds.sql('rebase world reb_p using ours');
-- SHOW CHECKPOINTS [FOR [WORLD] name]
SELECT * FROM worlds.sql('checkpoint world reb_p as ''before''');
SELECT * FROM worlds.sql('checkpoint world reb_p as ''after''');
SELECT * FROM worlds.sql('checkpoint world reb_w as ''start''');
SELECT world, label FROM worlds.show_checkpoints();
SELECT j ->> 'world' AS world, j ->> 'label' AS label FROM worlds.sql('show checkpoints for world reb_w') j;
SELECT try($$select * from worlds.sql('show checkpoints for world nope')$$);
-- typed: DIFF ... TO, its AS SQL, DIFF ... READERS
SELECT "table", id, change, columns FROM worlds.diff_to('main', 'reb_p');
SELECT sql FROM worlds.diff_to_as_sql('main', 'reb_p');
SELECT "table", columns, kind, reader FROM worlds.diff_readers('reb_p') WHERE kind <> 'coverage' AND kind <> 'client';
-- typed: UNDO AGENT (what the agent merged on its own, put back)
SET SESSION AUTHORIZATION regress_dbot;
SELECT * FROM worlds.sql('create world undo_w');
SET worlds.world = undo_w;
UPDATE items SET qty = 0 WHERE id = 3;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world undo_w');
RESET SESSION AUTHORIZATION;
SELECT qty FROM items WHERE id = 3;
SELECT worlds.undo_agent('regress_dbot', now() - interval '1 hour');
SELECT qty FROM items WHERE id = 3;
SELECT * FROM worlds.sql('drop world reb_w');
SELECT * FROM worlds.sql('drop world reb_p');
SELECT * FROM worlds.sql('drop agent regress_dbot');
