-- The effects outbox: NOTIFY and pg_notify() inside a world are kept, not sent; DIFF shows them; the
-- merge that lands the world in main sends them (at its commit: tests/sessions/22 listens); a merge INTO
-- another world moves them there; DROP WORLD discards them; merge policies count them.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_obot;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders VALUES (1, 'new'), (2, 'new');
GRANT SELECT, INSERT, UPDATE, DELETE ON orders TO PUBLIC;
CREATE FUNCTION pay(i int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE orders SET status = 'paid' WHERE id = i;
    PERFORM pg_notify('webhook', 'paid ' || i);
END $$;
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
UPDATE orders SET status = 'paid' WHERE id = 1;
NOTIFY email, 'order 1 paid';
SELECT pg_notify('email', 'receipt 1');
SELECT pay(2);
RESET worlds.world;
-- kept in w's outbox, in order; main's own NOTIFY is main's (sent as always)
NOTIFY email, 'from main';
SELECT o.channel, o.payload FROM worlds.outbox o JOIN worlds.world x ON x.num = o.world WHERE x.name = 'w' ORDER BY o.seq;
-- DIFF shows them after the rows
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'change' AS change, j -> 'after' AS after FROM worlds.sql('diff world w') j;
-- errors as Postgres's NOTIFY gives them
SET worlds.world = w;
SELECT try($$select pg_notify('', 'x')$$);
SELECT try($$select pg_notify(repeat('c', 64), 'x')$$);
SELECT try($$select pg_notify('c', repeat('x', 8000))$$);
RESET worlds.world;
-- a merge INTO another world moves them; DROP WORLD discards them
SELECT * FROM worlds.sql('create world w2');
SELECT * FROM worlds.sql('merge world w into w2');
SELECT x.name, count(*) FROM worlds.outbox o JOIN worlds.world x ON x.num = o.world GROUP BY 1 ORDER BY 1;
SELECT * FROM worlds.sql('create world w3');
SET worlds.world = w3;
NOTIFY email, 'never';
RESET worlds.world;
SELECT * FROM worlds.sql('drop world w3');
SELECT x.name, count(*) FROM worlds.outbox o JOIN worlds.world x ON x.num = o.world GROUP BY 1 ORDER BY 1;
-- landing in main sends them (the merge's transaction) and empties w2's outbox
SELECT * FROM worlds.sql('merge world w2');
SELECT count(*) AS kept FROM worlds.outbox;
-- merge policies count them: max_effects, review_channels; SHOW REVIEWS shows them per channel
SELECT count(*) FROM worlds.sql('create merge policy fx with (max_effects = 2, review_channels = ''webhook'')');
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_obot with (can = ''read,fork,write_own,merge_own'', policy = ''fx'')') j;
SET SESSION AUTHORIZATION regress_obot;
SELECT * FROM worlds.sql('create world bot_fx');
SELECT * FROM worlds.sql('switch world bot_fx');
SELECT pay(1);
NOTIFY email, 'a';
NOTIFY email, 'b';
SELECT * FROM worlds.sql('switch world main');
SELECT try($$select * from worlds.sql('merge world bot_fx')$$);
RESET SESSION AUTHORIZATION;
DO $$ BEGIN FOR i IN 1..200 LOOP EXIT WHEN EXISTS (SELECT 1 FROM worlds.review); PERFORM pg_sleep(0.05); END LOOP; END $$;
SELECT world, reasons, effects FROM worlds.show_reviews();
-- a person approves: its effects are sent
SELECT * FROM worlds.sql('merge world bot_fx');
SELECT count(*) AS kept FROM worlds.outbox;
SELECT * FROM orders ORDER BY id;
SELECT * FROM worlds.sql('drop merge policy fx cascade');
SELECT * FROM worlds.sql('drop agent regress_obot');
