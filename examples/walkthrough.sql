-- pg_worlds in five minutes. Run by scripts/run.sh against a throwaway cluster; it grows with every feature.
\set ON_ERROR_STOP 1
\echo '== an existing app: two tables, some rows'
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price int CHECK (price >= 0));
CREATE TABLE orders (id serial PRIMARY KEY, item_id int REFERENCES items, status text DEFAULT 'new', qty int);
INSERT INTO items SELECT g, 'item ' || g, g * 10 FROM generate_series(1, 5) g;
INSERT INTO orders (item_id, qty) SELECT g, g FROM generate_series(1, 5) g;

\echo '== the DBA installs pg_worlds: every table is tracked, nothing else changes'
CREATE EXTENSION pg_worlds;
SELECT relid, key_columns FROM worlds.tables ORDER BY relid::text;

\echo '== fork a world (O(1)) and work in it, exactly as on a copy of the database'
SELECT * FROM worlds.sql('create world agent_7 with (task = 42)');
SELECT * FROM worlds.sql('switch world agent_7');
UPDATE orders SET status = 'paid' WHERE id = 2;
DELETE FROM orders WHERE id = 5;
INSERT INTO orders (item_id, qty) VALUES (3, 30);
SELECT o.id, i.name, o.status FROM orders o JOIN items i ON i.id = o.item_id ORDER BY o.id;

\echo '== main saw none of it'
SELECT * FROM worlds.sql('switch world main');
SELECT id, status FROM orders ORDER BY id;

\echo '== meanwhile someone changes main'
UPDATE items SET price = 99 WHERE id = 1;

\echo '== what did agent_7 change? (destructive first)'
SELECT "table", id, change, columns FROM worlds.diff('agent_7');

\echo '== what would a merge do? (dry run: changes nothing)'
SELECT "table", id, outcome, detail FROM worlds.merge_dry_run('agent_7');

\echo '== merge it: ordinary DML on the real tables, in one transaction'
SELECT * FROM worlds.sql('merge world agent_7');
SELECT id, status FROM orders ORDER BY id;

\echo '== conflicts are caught, and settled on request'
SELECT * FROM worlds.sql('create world b');
SET worlds.world = b;
UPDATE items SET price = 1 WHERE id = 2;
RESET worlds.world;
UPDATE items SET name = 'renamed' WHERE id = 2;
SELECT * FROM worlds.sql('merge world b by columns');
SELECT * FROM items WHERE id = 2;

SELECT * FROM worlds.sql('show worlds');
SHOW BRANCHES;  -- the spec's SHOW statements run as typed, too

\echo '== apps keep their habits inside a world: upserts, COPY, SQL MERGE'
SELECT * FROM worlds.sql('create world agent_8');
SET worlds.world = agent_8;
INSERT INTO items VALUES (2, 'item 2', 5) ON CONFLICT (id) DO UPDATE SET price = items.price + excluded.price RETURNING *;
COPY items (id, name, price) FROM STDIN;
6	item 6	60
\.
MERGE INTO items i USING (VALUES (6, 66), (7, 70)) AS s(id, price) ON i.id = s.id
  WHEN MATCHED THEN UPDATE SET price = s.price
  WHEN NOT MATCHED THEN INSERT (id, name, price) VALUES (s.id, 'item ' || s.id, s.price);
SELECT id, name, price FROM items ORDER BY id;
RESET worlds.world;

\echo '== time travel: the table as it was a moment ago, even across schema changes'
SELECT clock_timestamp() AS before_change \gset
ALTER TABLE orders ADD COLUMN note text;
UPDATE orders SET status = 'shipped', note = 'fast' WHERE id = 1;
SELECT j FROM worlds.sql(format('select now.id, now.status, old.status as was from orders now join orders as of %L old on old.id = now.id where old.status <> now.status', :'before_change')) j;
SELECT j FROM worlds.sql(format('select * from orders as of %L where id = 1', :'before_change')) j;

\echo '== a migration in a world: its DDL is its own until MERGE lands schema and rows together'
SELECT * FROM worlds.sql('create world migrate');
SET worlds.world = migrate;
CREATE TABLE shipments (id serial PRIMARY KEY, order_id int NOT NULL REFERENCES orders, carrier text NOT NULL);
INSERT INTO shipments (order_id, carrier) VALUES (1, 'post');
RESET worlds.world;
SELECT to_regclass('shipments') AS main_sees;                    -- null: main has no such table yet
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'change' AS change FROM worlds.sql('diff world migrate') j;
SELECT * FROM worlds.sql('merge world migrate');                  -- the table, its row, its foreign key
SELECT * FROM shipments;

\echo '== the next migration changes a table main has: the world works on its own copy of it'
SELECT * FROM worlds.sql('create world tracking');
SET worlds.world = tracking;
ALTER TABLE shipments ADD COLUMN tracking text DEFAULT 'none';
UPDATE shipments SET tracking = 'T-1' WHERE id = 1;
ALTER TABLE shipments ALTER COLUMN tracking SET NOT NULL;
RESET worlds.world;
SELECT j ->> 'table' AS "table", j ->> 'change' AS change, j -> 'columns' AS columns FROM worlds.sql('diff world tracking') j;
SELECT * FROM worlds.sql('merge world tracking');                 -- the column, the row, then NOT NULL
SELECT * FROM shipments;

\echo '== agents: a login of its own, rights, and a merge policy people approved'
SET client_min_messages = warning;
DROP ROLE IF EXISTS walk_bot;
RESET client_min_messages;
SELECT name FROM worlds.sql('create merge policy small with (max_rows = 3, review_tables = ''items'')') j, jsonb_to_record(j) AS r(name text);
SELECT j ->> 'name' AS agent, length(j ->> 'token') AS token_length
FROM worlds.sql('create agent walk_bot with (can = ''read,fork,write_own,merge_own'', policy = ''small'')') j;
GRANT SELECT, UPDATE ON items, orders TO walk_bot;
SET SESSION AUTHORIZATION walk_bot;   -- as the agent's own login would (user=walk_bot password=<token>)
SELECT * FROM worlds.sql('create world bot_small');
SET worlds.world = bot_small;
UPDATE orders SET qty = qty + 1 WHERE id = 2;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world bot_small');                -- within the rules: merged on its own
SELECT * FROM worlds.sql('create world bot_prices');
SET worlds.world = bot_prices;
UPDATE items SET price = price * 2;
RESET worlds.world;
\set ON_ERROR_STOP 0
SELECT * FROM worlds.sql('merge world bot_prices');               -- refused (42501): it waits for a person
\set ON_ERROR_STOP 1
RESET SESSION AUTHORIZATION;
SELECT pg_sleep(0.5);                                             -- (the queue is written by a background worker)
SELECT world, owner, policy, reasons FROM worlds.show_reviews();
SELECT * FROM worlds.sql('merge world bot_prices');               -- a person approves
SELECT * FROM worlds.sql('drop agent walk_bot');

\echo '== SIMULATE: fork 20 worlds from one moment, run a pricing experiment in each, keep the best 3'
SELECT j ->> 'world' AS world, round((j ->> 'score')::numeric, 2) AS revenue, j ->> 'kept' AS kept
FROM worlds.sql($q$simulate 20 worlds as pricing
  run $$update items set price = price * (0.8 + random() * 0.4) where id % 4 = $1 % 4$$
  score $$select sum(i.price * o.qty) from orders o join items i on i.id = o.item_id$$
  keep 3 seed 7$q$) j LIMIT 5;
SELECT j ->> 'identical' AS identical FROM worlds.sql('replay world pricing_' ||
  (SELECT min((meta -> 'sim' ->> 'index')::int) FROM worlds.show_worlds() WHERE name LIKE 'pricing\_%')) j;  -- same seed, same result
SELECT count(*) FROM (SELECT worlds.drop_world(name) FROM worlds.show_worlds() WHERE name LIKE 'pricing\_%') d;
