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
