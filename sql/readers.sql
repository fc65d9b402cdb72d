-- Readers (spec, "DIFF ... READERS"): REGISTER / UNREGISTER READER, MARK / UNMARK READER ... CRITICAL,
-- SHOW READERS, DIFF ... READERS from the spec's example, and the merge policy's critical rule.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_rbot;
DROP ROLE IF EXISTS regress_reader_owner;
DROP ROLE IF EXISTS regress_stranger;
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
-- the spec's example
CREATE TABLE leads (id int PRIMARY KEY, status text CHECK (status IN ('new', 'won')), score int, note text);
INSERT INTO leads SELECT g, CASE WHEN g % 2 = 0 THEN 'won' ELSE 'new' END, g, 'n' || g FROM generate_series(1, 10) g;
CREATE VIEW open_leads AS SELECT id, score FROM leads WHERE status = 'new';
GRANT SELECT, INSERT, UPDATE, DELETE ON leads TO PUBLIC;
\set VERBOSITY terse
-- REGISTER READER: no columns, every column; again on the same table replaces its columns
SELECT * FROM worlds.sql('register reader nightly_export on leads (status, score)');
SELECT * FROM worlds.sql('register reader crm_sync on leads');
SELECT * FROM worlds.sql('register reader nightly_export on leads (status)');
SELECT reader, kind, "table", columns, last_read, critical, marked_by FROM worlds.show_readers();
-- errors: no such table (42P01), no such column (42703), not registered (42704), a column twice (42701)
SELECT try($$select * from worlds.sql('register reader x on nope')$$);
SELECT try($$select * from worlds.sql('register reader x on leads (nope)')$$);
SELECT try($$select * from worlds.sql('unregister reader nope')$$);
SELECT try($$select * from worlds.sql('unregister reader crm_sync on open_leads')$$);
SELECT try($$select * from worlds.sql('register reader x on leads (status, status)')$$);
-- MARK / UNMARK READER (42704 if it isn't marked); a mark names a reader of any kind
SELECT * FROM worlds.sql('mark reader nightly_export critical');
SELECT * FROM worlds.sql('mark reader open_leads critical');
SELECT try($$select * from worlds.sql('unmark reader crm_sync')$$);
SELECT reader, kind, "table", columns, critical, marked_by = current_user AS marked_by_me, marked_at IS NOT NULL AS has_marked_at
FROM worlds.show_readers();
-- in main they need pg_worlds' admin (a mark), or the table's ownership (a registered reader)
CREATE ROLE regress_stranger;
SET SESSION AUTHORIZATION regress_stranger;
SELECT try($$select * from worlds.sql('mark reader billing critical')$$);
SELECT try($$select * from worlds.sql('register reader mine on leads')$$);
RESET SESSION AUTHORIZATION;
-- they live in a world like a view: a fork carries main's; the world's own changes are its own
SELECT * FROM worlds.sql('create world cleanup');
SET worlds.world = cleanup;
SELECT * FROM worlds.sql('unregister reader crm_sync');
SELECT * FROM worlds.sql('register reader warehouse on leads (note)');
SELECT * FROM worlds.sql('unmark reader open_leads');
SELECT * FROM worlds.sql('mark reader billing critical');
SELECT reader, kind, "table", columns, critical FROM worlds.show_readers();
UPDATE leads SET status = 'won' WHERE id = 1;
DELETE FROM leads WHERE id = 10;
RESET worlds.world;
-- main still has its own
SELECT reader, kind, "table", columns, critical FROM worlds.show_readers();
-- DIFF shows them: register reader, unregister reader, mark critical, unmark critical (then the rows)
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'change' AS change, j -> 'columns' AS columns
FROM worlds.sql('diff world cleanup') j;
-- a client seen reading: this session (its role, and its program: pg_regress names itself)
SELECT count(*) AS open_rows FROM leads WHERE status = 'new';
SELECT client, "table", "column" FROM worlds.client_reads() WHERE "table" = 'leads'::regclass ORDER BY 1, 3;
-- DIFF ... READERS: what reads the changed columns; critical first; three rows of coverage last
SELECT j ->> 'table' AS "table", j ->> 'columns' AS columns, j ->> 'kind' AS kind, j ->> 'reader' AS reader,
       (j ->> 'critical')::bool AS critical
FROM worlds.sql('diff world cleanup readers') j WHERE j ->> 'kind' <> 'coverage';
SELECT count(*) AS coverage_rows FROM worlds.sql('diff world cleanup readers') j WHERE j ->> 'kind' = 'coverage';
-- with TO, from b's definitions: main to the world
SELECT j ->> 'table' AS "table", j ->> 'columns' AS columns, j ->> 'kind' AS kind, j ->> 'reader' AS reader
FROM worlds.sql('diff world main to cleanup readers') j WHERE j ->> 'kind' <> 'coverage';
-- the coverage rows say what was looked at (cut before the date clients' reads are recorded since: the
-- cluster's first start, in the test's time zone)
SELECT left(j ->> 'detail', 27) AS coverage FROM worlds.sql('diff world cleanup readers') j WHERE j ->> 'kind' = 'coverage';
-- errors: READERS goes alone
SELECT try($$select * from worlds.sql('diff world cleanup readers as sql')$$);
-- MERGE brings them into main
SELECT * FROM worlds.sql('merge world cleanup');
SELECT reader, kind, "table", columns, critical FROM worlds.show_readers();
-- the merge policy's critical rule: an agent's merge changing what a critical reader reads waits for a person
SELECT j ->> 'name' AS name FROM worlds.sql('create merge policy careful with (max_rows = 100, schema = true)') j;
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_rbot with (can = ''read,fork,write_own,merge_own'', policy = ''careful'')') j;
SET SESSION AUTHORIZATION regress_rbot;
SELECT * FROM worlds.sql('create world rbot_w');
SET worlds.world = rbot_w;
UPDATE leads SET status = 'won' WHERE id = 3;
RESET worlds.world;
SELECT j ->> 'detail' AS blocked FROM worlds.sql('merge world rbot_w dry run') j WHERE j ->> 'outcome' = 'blocked';
SELECT try($$select * from worlds.sql('merge world rbot_w')$$);
-- a change no critical reader reads merges on its own
SELECT * FROM worlds.sql('create world rbot_ok');
SET worlds.world = rbot_ok;
UPDATE leads SET score = 99 WHERE id = 5;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world rbot_ok');
RESET SESSION AUTHORIZATION;
SELECT queued('rbot_w');
SELECT world, reasons FROM worlds.show_reviews();
-- critical = true lets it through
SELECT j ->> 'critical' AS critical FROM worlds.sql('alter merge policy careful set (critical = true)') j;
SELECT * FROM worlds.check_merge_policy('rbot_w', 'careful');
-- an agent's world adding a mark is a schema change a person reviews (schema false)
SELECT j ->> 'schema' AS schema FROM worlds.sql('alter merge policy careful set (schema = false)') j;
SET SESSION AUTHORIZATION regress_rbot;
SELECT * FROM worlds.sql('create world rbot_mark');
SET worlds.world = rbot_mark;
SELECT * FROM worlds.sql('unmark reader billing');
RESET worlds.world;
SELECT j ->> 'outcome' AS outcome, j ->> 'detail' AS detail FROM worlds.sql('merge world rbot_mark dry run') j;
RESET SESSION AUTHORIZATION;
SELECT * FROM worlds.sql('drop world rbot_mark');
SELECT * FROM worlds.sql('drop world rbot_w');
SELECT * FROM worlds.sql('drop merge policy careful cascade');
-- UNREGISTER with ON takes it off that table only
SELECT * FROM worlds.sql('unregister reader nightly_export on leads');
SELECT * FROM worlds.sql('unmark reader nightly_export');
SELECT reader, kind, "table", columns, critical FROM worlds.show_readers();
DROP OWNED BY regress_rbot;
DROP ROLE regress_rbot;
DROP ROLE regress_stranger;
