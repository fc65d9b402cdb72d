-- MERGE ... DRY RUN: what the merge would do, row by row, destructive first; changes nothing.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text, qty int);
CREATE TABLE leads (id int PRIMARY KEY, owner text);
INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, 6) g;
INSERT INTO leads SELECT g, 'ana' FROM generate_series(1, 4) g;
SELECT * FROM worlds.sql('create world agent_7');
SET worlds.world = agent_7;
UPDATE orders SET status = 'paid' WHERE id IN (1, 2, 3);
DELETE FROM orders WHERE id = 6;
DELETE FROM leads WHERE id IN (1, 2);
INSERT INTO leads VALUES (9, 'new');
RESET worlds.world;
UPDATE orders SET qty = 30 WHERE id = 3;
UPDATE orders SET status = 'void' WHERE id = 2;
-- the spec's columns; a summary row per table first (most deletes first), deleted rows, then the rest
SELECT "table", id, outcome, detail, base, ours, theirs, result FROM worlds.merge_dry_run('agent_7');
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'outcome' AS outcome, j ->> 'detail' AS detail, j -> 'result' AS result
FROM worlds.sql('merge world agent_7 by columns dry run') j;
SELECT j ->> 'id' AS id, j ->> 'outcome' AS outcome FROM worlds.sql('merge world agent_7 using theirs resolve (''orders/3'' = ours) dry run') j;
-- nothing changed
SELECT * FROM orders ORDER BY id;
SELECT name, version FROM worlds.show_worlds() ORDER BY name;
-- a dry run may run inside a transaction block
BEGIN;
SELECT count(*) FROM worlds.merge_dry_run('agent_7');
ROLLBACK;
-- TARGET n pins what the dry run saw (55000 when main changed since)
CREATE TEMP TABLE seen AS SELECT 1;
SELECT try($$select * from worlds.sql('merge world agent_7 by columns resolve (''orders/2'' = theirs) target 1')$$);
