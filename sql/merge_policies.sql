-- Merge policies: CREATE / ALTER / DROP / SHOW MERGE POLICIES; an agent keeping to one merges on its own
-- within the rules, and past them is refused (42501) and queued in SHOW REVIEWS for a person, who approves
-- with MERGE (AT VERSION, CONFIRM DELETES) or drops the world. (LISTEN worlds_reviews: tests/sessions/22.)
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_pbot;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
-- the queue is written by a background worker: wait for it
CREATE FUNCTION queued(w text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..200 LOOP
        IF EXISTS (SELECT 1 FROM worlds.review r JOIN worlds.world x ON x.num = r.world WHERE x.name = w AND x.dropped IS NULL) THEN RETURN true; END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN false;
END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text, qty int);
CREATE TABLE payments (id int PRIMARY KEY, amount int);
INSERT INTO orders SELECT g, 'new', 1 FROM generate_series(1, 20) g;
INSERT INTO payments VALUES (1, 10), (2, 20);
GRANT SELECT, INSERT, UPDATE, DELETE ON orders, payments TO PUBLIC;
-- the spec's example: small changes to orders merge on their own; a bulk update or any change to
-- payments waits
SELECT j ->> 'name' AS name, j ->> 'max_rows' AS max_rows, j ->> 'max_deletes' AS max_deletes, j ->> 'review_tables' AS review_tables,
       j ->> 'overwrite' AS overwrite, j ->> 'max_age' AS max_age
FROM worlds.sql('CREATE MERGE POLICY small WITH (max_rows = 5, max_deletes = 0, review_tables = ''payments'')') j;
-- (SHOW MERGE POLICIES's columns, in the spec's order)
SELECT * FROM worlds.show_merge_policies() WHERE false;
SELECT j ->> 'max_age' AS max_age FROM worlds.sql('alter merge policy small set (max_age = ''1h'')') j;
SELECT j ->> 'max_age' AS max_age FROM worlds.sql('alter merge policy small set (max_age = ''30 minutes'')') j;
SELECT j ->> 'max_age' AS max_age, j ->> 'max_rows' AS max_rows_kept FROM worlds.sql('alter merge policy small set (max_age = 5000)') j;
SELECT j ->> 'max_age' AS max_age FROM worlds.sql('alter merge policy small set (max_age = null)') j;
-- errors
SELECT try($$select * from worlds.sql('create merge policy small')$$);
SELECT try($$select * from worlds.sql('create merge policy p with (colour = 1)')$$);
SELECT try($$select * from worlds.sql('create merge policy p with (max_rows = ''many'')')$$);
SELECT try($$select * from worlds.sql('create merge policy p with (tables = ''orders items'')')$$);
SELECT try($$select * from worlds.sql('create merge policy p with (review_columns = ''email'')')$$);
SELECT try($$select * from worlds.sql('create merge policy p with (overwrite = ''maybe'')')$$);
SELECT try($$select * from worlds.sql('alter merge policy nope set (max_rows = 1)')$$);
SELECT try($$select * from worlds.sql('drop merge policy nope')$$);
SELECT try($$select * from worlds.sql('alter agent nobody set (policy = ''small'')')$$);
SELECT count(*) AS policies FROM worlds.merge_policy;
-- an agent keeping to it
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_pbot with (can = ''read,fork,write_own,merge_own,write_main,restore,merge'', policy = ''small'')') j;
SELECT j ->> 'policy' AS policy FROM worlds.sql('show agents') j;
SET SESSION AUTHORIZATION regress_pbot;
-- it changes main only by merging: a direct write, RESTORE, UNDO MERGE, UNDO AGENT are refused
SELECT try('update orders set qty = 2 where id = 1');
SELECT try($$select * from worlds.sql('restore world main to ''-1 second''')$$);
SELECT try($$select * from worlds.sql('undo agent regress_pbot since ''-1 minute''')$$);
-- within the rules: it merges on its own
SELECT * FROM worlds.sql('create world small_w');
SELECT * FROM worlds.sql('switch world small_w');
UPDATE orders SET status = 'paid' WHERE id IN (1, 2);
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM worlds.sql('merge world small_w');
-- past them: its dry run shows the blocked row; its merge is refused, naming every broken rule
SELECT * FROM worlds.sql('create world bulk_w');
SELECT * FROM worlds.sql('switch world bulk_w');
UPDATE orders SET qty = 5 WHERE id <= 10;
DELETE FROM orders WHERE id = 20;
UPDATE payments SET amount = 0 WHERE id = 1;
SELECT * FROM worlds.sql('switch world main');
SELECT j ->> 'detail' AS blocked FROM worlds.sql('merge world bulk_w dry run') j WHERE j ->> 'outcome' = 'blocked';
SELECT try($$select * from worlds.sql('merge world bulk_w')$$);
RESET SESSION AUTHORIZATION;
SELECT queued('bulk_w');
SELECT world, owner, policy, reasons, version, changed_since, scope, changes, effects FROM worlds.show_reviews();
SELECT * FROM worlds.check_merge_policy('bulk_w', 'small');
-- nothing of it reached main
SELECT count(*) FILTER (WHERE qty = 5) AS bulk_rows, count(*) AS orders FROM orders;
-- the agent writes again: changed_since
SET SESSION AUTHORIZATION regress_pbot;
SELECT * FROM worlds.sql('switch world bulk_w');
UPDATE orders SET qty = 6 WHERE id = 10;
SELECT * FROM worlds.sql('switch world main');
RESET SESSION AUTHORIZATION;
SELECT world, version, changed_since FROM worlds.show_reviews();
-- a person approves exactly what they read: AT VERSION (55000 for an older one), applied once
SELECT try($$select * from worlds.sql('merge world bulk_w at version 1')$$);
SELECT version AS v FROM worlds.world WHERE name = 'bulk_w' AND dropped IS NULL \gset
SELECT * FROM worlds.sql(format('merge world bulk_w at version %s', :v));
SELECT * FROM worlds.sql(format('merge world bulk_w at version %s', :v));
SELECT count(*) FILTER (WHERE qty >= 5) AS bulk_rows, count(*) AS orders FROM orders;
SELECT count(*) AS queued FROM worlds.review;
-- confirm_deletes_over: the person approving gives the count, from the merge's own plan
SELECT j ->> 'confirm_deletes_over' AS confirm_deletes_over FROM worlds.sql('alter merge policy small set (max_deletes = null, confirm_deletes_over = 0)') j;
SET SESSION AUTHORIZATION regress_pbot;
SELECT * FROM worlds.sql('create world del_w');
SELECT * FROM worlds.sql('switch world del_w');
DELETE FROM orders WHERE id IN (18, 19);
SELECT * FROM worlds.sql('switch world main');
SELECT try($$select * from worlds.sql('merge world del_w')$$);
RESET SESSION AUTHORIZATION;
SELECT queued('del_w');
SELECT try($$select * from worlds.sql('merge world del_w')$$);
SELECT try($$select * from worlds.sql('merge world del_w confirm deletes 1')$$);
SELECT count(*) AS orders FROM orders;
SELECT * FROM worlds.sql('merge world del_w confirm deletes 2');
SELECT count(*) AS orders FROM orders;
-- tables, review_columns, rows_per_hour, overwrite
SELECT count(*) FROM worlds.sql('alter merge policy small set (confirm_deletes_over = null, review_tables = null, tables = ''orders'', review_columns = ''orders.status'', rows_per_hour = 100)');
SET SESSION AUTHORIZATION regress_pbot;
SELECT * FROM worlds.sql('create world mixed_w');
SELECT * FROM worlds.sql('switch world mixed_w');
UPDATE payments SET amount = 1 WHERE id = 2;
UPDATE orders SET status = 'x', qty = 9 WHERE id = 3;
UPDATE orders SET qty = 7 WHERE id = 4;
SELECT * FROM worlds.sql('switch world main');
SELECT j ->> 'detail' AS blocked FROM worlds.sql('merge world mixed_w dry run') j WHERE j ->> 'outcome' = 'blocked';
RESET SESSION AUTHORIZATION;
-- the person drops it instead
SELECT * FROM worlds.sql('drop world mixed_w');
SELECT count(*) FROM worlds.sql('alter merge policy small set (tables = null, review_columns = null, rows_per_hour = 4)');
SET SESSION AUTHORIZATION regress_pbot;
SELECT * FROM worlds.sql('create world hour_w');
SELECT * FROM worlds.sql('switch world hour_w');
UPDATE orders SET qty = 8 WHERE id = 5;
SELECT * FROM worlds.sql('switch world main');
-- (its merges into main this hour: small_w, 2 rows; the person's approvals are no agent's: 2 + 1 <= 4, then 3 + 2 > 4)
SELECT * FROM worlds.sql('merge world hour_w');
SELECT * FROM worlds.sql('create world hour_w2');
SELECT * FROM worlds.sql('switch world hour_w2');
UPDATE orders SET qty = 8 WHERE id IN (6, 7);
SELECT * FROM worlds.sql('switch world main');
SELECT try($$select * from worlds.sql('merge world hour_w2')$$);
RESET SESSION AUTHORIZATION;
SELECT * FROM worlds.sql('drop world hour_w2');
-- overwrite: its own rows over rows its parent changed since the fork (USING OURS)
SELECT count(*) FROM worlds.sql('alter merge policy small set (rows_per_hour = null)');
SET SESSION AUTHORIZATION regress_pbot;
SELECT * FROM worlds.sql('create world over_w');
SELECT * FROM worlds.sql('switch world over_w');
UPDATE orders SET qty = 11 WHERE id = 8;
SELECT * FROM worlds.sql('switch world main');
RESET SESSION AUTHORIZATION;
UPDATE orders SET qty = 12 WHERE id = 8;
SET SESSION AUTHORIZATION regress_pbot;
SELECT try($$select * from worlds.sql('merge world over_w using ours')$$);
RESET SESSION AUTHORIZATION;
SELECT queued('over_w');
SELECT qty FROM orders WHERE id = 8;
-- a person isn't held by the rules: only by their rights
SELECT * FROM worlds.sql('merge world over_w using ours');
SELECT qty FROM orders WHERE id = 8;
-- only admins manage policies; any agent may show them and the reviews
SET SESSION AUTHORIZATION regress_pbot;
SELECT try($$select * from worlds.sql('create merge policy mine')$$);
SELECT try($$select * from worlds.sql('alter agent regress_pbot set (policy = null)')$$);
SELECT count(*) AS shown FROM worlds.sql('show merge policies');
SELECT count(*) AS reviews FROM worlds.sql('show reviews');
RESET SESSION AUTHORIZATION;
-- DROP MERGE POLICY: refused while an agent keeps to it; CASCADE frees its agents (a NOTICE each)
SELECT try($$select * from worlds.sql('drop merge policy small')$$);
SELECT * FROM worlds.sql('drop merge policy small cascade');
SELECT j ->> 'policy' AS policy FROM worlds.sql('show agents') j;
SELECT * FROM worlds.sql('drop agent regress_pbot');
