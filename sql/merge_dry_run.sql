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
-- a DRY RUN with a TARGET main no longer matches shows the merge blocked
SELECT r ->> 'outcome' AS outcome, left(r ->> 'detail', 45) AS detail
FROM worlds.sql('merge world agent_7 by columns resolve (''orders/2'' = theirs) target 1 dry run') r WHERE r ->> 'outcome' = 'blocked';
-- a last row, blocked (null table), when a constraint would refuse the merge; the dry run still changes
-- nothing (the merge is tried and rolled back)
CREATE TABLE people (id int PRIMARY KEY, email text UNIQUE);
CREATE TABLE pets (id int PRIMARY KEY, owner int REFERENCES people);
INSERT INTO people VALUES (1, 'a@x'), (2, 'b@x');
SELECT * FROM worlds.sql('create world adds');
SET worlds.world = adds;
INSERT INTO people VALUES (3, 'c@x');
INSERT INTO pets VALUES (1, 2);
RESET worlds.world;
INSERT INTO people VALUES (4, 'c@x');
SET client_min_messages = warning;
SELECT r ->> 'table' AS "table", r ->> 'outcome' AS outcome, r ->> 'detail' AS detail, r -> 'postgres' AS postgres
FROM worlds.sql('merge world adds dry run') r;
SELECT "table", outcome, detail FROM worlds.merge_dry_run('adds') WHERE outcome = 'blocked';
RESET client_min_messages;
SELECT count(*) AS people, (SELECT count(*) FROM pets) AS pets FROM people;
DELETE FROM people WHERE id = 4;
DELETE FROM people WHERE id = 2;
SET client_min_messages = warning;
SELECT outcome, detail FROM worlds.merge_dry_run('adds') WHERE outcome = 'blocked';
RESET client_min_messages;
INSERT INTO people VALUES (2, 'b@x');
SET client_min_messages = warning;
SELECT count(*) AS blocked FROM worlds.merge_dry_run('adds') WHERE outcome = 'blocked';
RESET client_min_messages;
SELECT * FROM worlds.sql('merge world adds');
SELECT * FROM pets;
-- a dry run changes nothing, so it runs in a read-only transaction too (without trying the merge: no
-- blocked row there)
CREATE TABLE ro (id int PRIMARY KEY, v text);
INSERT INTO ro VALUES (1, 'x');
SELECT * FROM worlds.sql('create world ro_w');
SET worlds.world = ro_w;
UPDATE ro SET v = 'w' WHERE id = 1;
RESET worlds.world;
BEGIN READ ONLY;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'outcome' AS outcome, j ->> 'detail' AS detail
FROM worlds.sql('merge world ro_w dry run') j;
COMMIT;
-- every table the plan has rows of gets its summary row, also when they all conflict
UPDATE ro SET v = 'm' WHERE id = 1;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'outcome' AS outcome, j ->> 'detail' AS detail
FROM worlds.sql('merge world ro_w dry run') j;
-- a row both sides changed alike still conflicts: each side decided on the value at the fork, and taking
-- one change for both would lose the other (two "v = v - 25" are not one)
UPDATE ro SET v = 'w' WHERE id = 1;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'outcome' AS outcome, j ->> 'detail' AS detail
FROM worlds.sql('merge world ro_w dry run') j;
-- the app's trigger refusing the merge is a blocked row, as a constraint is (AFTER triggers fire at merge)
CREATE FUNCTION ro_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.v = 'forbidden' THEN RAISE EXCEPTION 'v may not be forbidden'; END IF; RETURN NEW; END $$;
CREATE TRIGGER ro_guard AFTER UPDATE ON ro FOR EACH ROW EXECUTE FUNCTION ro_guard();
SET worlds.world = ro_w;
UPDATE ro SET v = 'forbidden' WHERE id = 1;
RESET worlds.world;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'outcome' AS outcome, j ->> 'detail' AS detail
FROM worlds.sql('merge world ro_w using ours dry run') j;
SELECT try($$select * from worlds.sql('merge world ro_w using ours')$$);
SELECT * FROM ro;
-- a RESOLVE row's columns left out are NULL in the result, as the merge writes them
CREATE TABLE rr (id int PRIMARY KEY, v text, w text);
INSERT INTO rr VALUES (1, 'x', 'keep?');
SELECT * FROM worlds.sql('create world rr_w');
SET worlds.world = rr_w; UPDATE rr SET v = 'ours' WHERE id = 1; RESET worlds.world;
UPDATE rr SET v = 'theirs' WHERE id = 1;
SELECT j ->> 'outcome' AS outcome, j -> 'result' AS result
FROM worlds.sql($$merge world rr_w resolve ('rr/1' = '{"id": 1, "v": "given"}') dry run$$) j WHERE j ->> 'id' = '1';
SELECT * FROM worlds.sql($$merge world rr_w resolve ('rr/1' = '{"id": 1, "v": "given"}')$$);
SELECT * FROM rr;
