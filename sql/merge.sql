-- MERGE WORLD: three-way, row and column level, with every clause; atomic, constrained.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text, qty int CHECK (qty >= 0));
CREATE TABLE lines (id int PRIMARY KEY, order_id int REFERENCES orders, note text);
INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, 10) g;
-- the spec's first example: into main; the session moves back to main
SELECT * FROM worlds.sql('create world agent_7 with (task = 42)');
SELECT * FROM worlds.sql('switch world agent_7');
UPDATE orders SET status = 'paid' WHERE id = 7;
INSERT INTO orders VALUES (11, 'new', 1);
INSERT INTO lines VALUES (1, 11, 'line of a new order');
DELETE FROM orders WHERE id = 10;
SELECT * FROM worlds.sql('merge world agent_7');
SHOW worlds.world;
SELECT * FROM orders WHERE id IN (7, 10, 11) ORDER BY id;
SELECT * FROM lines;
SELECT name FROM worlds.show_worlds();
-- a row both sides changed: 40001 naming the rows, nothing merged, the world intact
SELECT * FROM worlds.sql('create world b');
SET worlds.world = b;
UPDATE orders SET status = 'shipped' WHERE id IN (1, 2);
UPDATE orders SET qty = 100 WHERE id = 3;
INSERT INTO orders VALUES (12, 'b', 1);
RESET worlds.world;
UPDATE orders SET qty = 50 WHERE id IN (1, 3);
UPDATE orders SET status = 'cancelled' WHERE id = 2;
SELECT try($$select * from worlds.sql('merge world b')$$);
SELECT count(*) FROM orders WHERE id = 12;
SELECT name, version FROM worlds.show_worlds() ORDER BY name;
-- BY COLUMNS combines rows whose changed columns don't overlap; RESOLVE and USING settle the rest
SELECT try($$select * from worlds.sql('merge world b by columns')$$);
SELECT try($$select * from worlds.sql('merge world b by columns resolve (''orders/2'' = theirs)')$$);
SELECT * FROM worlds.sql('merge world b by columns resolve (''orders/2'' = theirs, ''orders/3'' = ours)');
SELECT * FROM orders WHERE id IN (1, 2, 3, 12) ORDER BY id;
-- USING OURS / THEIRS
SELECT * FROM worlds.sql('create world c');
SELECT * FROM worlds.sql('create world d');
SET worlds.world = c; UPDATE orders SET status = 'c' WHERE id = 4; RESET worlds.world;
SET worlds.world = d; UPDATE orders SET status = 'd' WHERE id = 4; RESET worlds.world;
UPDATE orders SET status = 'main' WHERE id = 4;
SELECT * FROM worlds.sql('merge world c using theirs');
SELECT status FROM orders WHERE id = 4;
SELECT * FROM worlds.sql('merge world d ours');
SELECT status FROM orders WHERE id = 4;
-- RESOLVE with a row, and DELETE
SELECT * FROM worlds.sql('create world e');
SET worlds.world = e; UPDATE orders SET status = 'e' WHERE id IN (5, 6); RESET worlds.world;
UPDATE orders SET status = 'main' WHERE id IN (5, 6);
SELECT * FROM worlds.sql('merge world e resolve (''orders/5'' = ''{"id": 5, "status": "paid", "qty": 5}'', ''orders/6'' = delete)');
SELECT * FROM orders WHERE id IN (5, 6) ORDER BY id;
-- ONLY TABLES / ONLY KEYS keep the world open with the rest and move its version on
SELECT * FROM worlds.sql('create world f');
SET worlds.world = f;
UPDATE orders SET qty = 0 WHERE id IN (8, 9);
INSERT INTO lines VALUES (2, 8, 'f');
RESET worlds.world;
SELECT version FROM worlds.show_worlds() WHERE name = 'f';
SELECT * FROM worlds.sql('merge world f only keys (''orders/8'')');
SELECT id, qty FROM orders WHERE id IN (8, 9) ORDER BY id;
SELECT version FROM worlds.show_worlds() WHERE name = 'f';
SELECT * FROM worlds.sql('merge world f only tables (orders)');
SELECT id, qty FROM orders WHERE id IN (8, 9) ORDER BY id;
SELECT count(*) FROM lines WHERE id = 2;
-- AT VERSION: merge only what was reviewed (55000 otherwise)
SELECT try(format('select * from worlds.sql(%L)', 'merge world f at version 1'));
SELECT * FROM worlds.sql(format('merge world f at version %s', (SELECT version FROM worlds.show_worlds() WHERE name = 'f')));
SELECT count(*) FROM lines WHERE id = 2;
-- constraints refuse the merge, with nothing merged: 23514 CHECK, 23503 foreign key, 23505 unique
SELECT * FROM worlds.sql('create world g');
SET worlds.world = g;
INSERT INTO lines VALUES (3, 999, 'dangling');
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world g')$$);
SELECT count(*) FROM lines WHERE id = 3;
SELECT * FROM worlds.sql('create world h');
SET worlds.world = h; INSERT INTO orders VALUES (20, 'h', 1); RESET worlds.world;
INSERT INTO orders VALUES (20, 'main', 1);
SELECT try($$select * from worlds.sql('merge world h')$$);
-- errors: 0A000 main has no parent / no world named on main; 3D000; 22023 INTO itself, bad ONLY KEYS; 25001
SELECT try($$select * from worlds.sql('merge world main')$$);
SELECT try($$select * from worlds.sql('merge world')$$);
SELECT try($$select * from worlds.sql('merge world nope')$$);
SELECT try($$select * from worlds.sql('merge world h into h')$$);
SELECT try($$select * from worlds.sql('merge world h only keys (''orders'')')$$);
-- a key of the wrong shape, a RESOLVE row that isn't the row it resolves or names a column the table lacks
SELECT try($$select * from worlds.sql('merge world h only keys (''orders/abc'')')$$);
SELECT try($$select * from worlds.sql('merge world h only keys (''orders/(1,2)'')')$$);
SELECT try($$select * from worlds.sql('merge world h resolve (''orders/20'' = ''{"id": 21, "status": "x"}'')')$$);
SELECT try($$select * from worlds.sql('merge world h resolve (''orders/20'' = ''{"id": 20, "colour": "x"}'')')$$);
SELECT try($$select * from worlds.sql('merge world h confirm at version 1')$$);
SELECT try($$select * from worlds.sql('merge world h confirm deletes -1')$$);
BEGIN;
SELECT try($$select * from worlds.sql('merge world h')$$);
ROLLBACK;
-- the named-argument function
SELECT worlds.merge('h', "using" => 'ours');
SELECT status FROM orders WHERE id = 20;
-- history records where merged changes came from
SELECT count(*) > 0 AS has_src FROM worlds_data.h_orders_1 WHERE _w_src IS NOT NULL;
-- a table set to merge by columns merges that way in every merge (ALTER TABLE t SET (merge_by_columns = true))
ALTER TABLE orders SET (merge_by_columns = true);
SELECT merge_by_columns FROM worlds.tables WHERE relid = 'orders'::regclass;
SELECT * FROM worlds.sql('create world k');
SET worlds.world = k; UPDATE orders SET status = 'k' WHERE id = 7; RESET worlds.world;
UPDATE orders SET qty = 77 WHERE id = 7;
SELECT "table", id, outcome FROM worlds.merge_dry_run('k') WHERE id IS NOT NULL;
SELECT * FROM worlds.sql('merge world k');
SELECT * FROM orders WHERE id = 7;
-- mixed with Postgres's own storage parameters, and RESET
ALTER TABLE orders SET (fillfactor = 90, merge_by_columns = false);
SELECT merge_by_columns, reloptions FROM worlds.tables JOIN pg_class ON oid = relid WHERE relid = 'orders'::regclass;
ALTER TABLE orders RESET (merge_by_columns);
-- BY COLUMNS with USING: USING settles only the columns both sides changed; each side's other changes merge
SELECT * FROM worlds.sql('create world bc');
SET worlds.world = bc; UPDATE orders SET status = 'bc' WHERE id = 7; RESET worlds.world;
UPDATE orders SET status = 'main', qty = 71 WHERE id = 7;
SET client_min_messages = warning;
SELECT r ->> 'id' AS id, r ->> 'outcome' AS outcome, r -> 'result' AS result
FROM worlds.sql('merge world bc by columns using ours dry run') r WHERE r ->> 'id' IS NOT NULL;
RESET client_min_messages;
SELECT * FROM worlds.sql('merge world bc by columns using ours');
SELECT * FROM orders WHERE id = 7;
-- a table without a key: rows the world removed that main changed since conflict; USING OURS removes
-- main's current version of each (the row followed through main's updates), THEIRS keeps it
CREATE TABLE notes_log (body text, k int);
INSERT INTO notes_log VALUES ('a', 1), ('c', 3), ('d', 4);
SELECT * FROM worlds.sql('create world kl_ours');
SELECT * FROM worlds.sql('create world kl_theirs');
SET worlds.world = kl_ours; DELETE FROM notes_log WHERE k = 1; UPDATE notes_log SET body = 'cx' WHERE k = 3; RESET worlds.world;
SET worlds.world = kl_theirs; DELETE FROM notes_log WHERE k = 1; RESET worlds.world;
UPDATE notes_log SET body = 'b' WHERE k = 1;
UPDATE notes_log SET body = 'cm' WHERE k = 3;
SET client_min_messages = warning;
SELECT r ->> 'outcome' AS outcome, r ->> 'detail' AS detail, r -> 'base' AS base, r -> 'theirs' AS theirs
FROM worlds.sql('merge world kl_ours dry run') r WHERE r ->> 'outcome' <> 'summary';
RESET client_min_messages;
SELECT * FROM worlds.sql('merge world kl_theirs using theirs');
SELECT * FROM notes_log ORDER BY k, body;
SELECT * FROM worlds.sql('merge world kl_ours using ours');
SELECT * FROM notes_log ORDER BY k, body;
-- MERGE ... INTO the world's own parent is a whole merge into the parent: it ends the world
SELECT * FROM worlds.sql('create world into_parent');
SET worlds.world = into_parent; UPDATE orders SET qty = 5 WHERE id = 8; RESET worlds.world;
SELECT * FROM worlds.sql('merge world into_parent into main');
SELECT count(*) AS still_there FROM worlds.world WHERE name = 'into_parent' AND dropped IS NULL;
-- ONLY that leaves out a row another one merged is tied to (by a reference, or one unique value): 22023
CREATE TABLE tie_parent (id int PRIMARY KEY);
CREATE TABLE tie_child (id int PRIMARY KEY, parent int REFERENCES tie_parent);
SELECT * FROM worlds.sql('create world tie');
SET worlds.world = tie; INSERT INTO tie_parent VALUES (50); INSERT INTO tie_child VALUES (1, 50); RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world tie only tables (tie_child)')$$);
SELECT try($$select * from worlds.sql('merge world tie only keys (''tie_child/1'')')$$);
SELECT * FROM worlds.sql('merge world tie');
SELECT * FROM tie_child;
-- ... but a clash the whole merge would meet too (main added the same unique value) is the clash itself: 23505
CREATE TABLE tie_people (id int PRIMARY KEY, name text UNIQUE);
SELECT * FROM worlds.sql('create world tie_u');
SET worlds.world = tie_u; INSERT INTO tie_people VALUES (1, 'dan'), (2, 'eve'); RESET worlds.world;
INSERT INTO tie_people VALUES (3, 'dan');
SELECT try($$select * from worlds.sql('merge world tie_u only keys (''tie_people/1'')')$$);
SELECT * FROM tie_people ORDER BY id;
-- ... while a clash elsewhere in the world doesn't hide that a row is tied to one left out (22023)
SELECT * FROM worlds.sql('create world tie_both');
SET worlds.world = tie_both;
INSERT INTO tie_parent VALUES (70); INSERT INTO tie_child VALUES (3, 70); INSERT INTO tie_people VALUES (5, 'zed');
RESET worlds.world;
INSERT INTO tie_people VALUES (6, 'zed');
SELECT left(try($$select * from worlds.sql('merge world tie_both only keys (''tie_child/3'')')$$), 5) AS sqlstate;
-- values keep every digit through DIFF and MERGE (numeric beyond a double's precision, scale kept)
CREATE TABLE acct (id int PRIMARY KEY, bal numeric(30,2), big bigint);
INSERT INTO acct VALUES (1, 1.50, 1);
SELECT * FROM worlds.sql('create world digits');
SET worlds.world = digits; UPDATE acct SET bal = 123456789012345678.91, big = 9007199254740993 WHERE id = 1; RESET worlds.world;
SELECT j -> 'before' AS before, j -> 'after' AS after FROM worlds.sql('diff world digits') j;
SELECT j ->> 'sql' AS sql FROM worlds.sql('diff world digits as sql') j;
SELECT * FROM worlds.sql('merge world digits');
SELECT * FROM acct;
-- columns named as pg_worlds' own aliases (t, k, row, del, e) diff, merge and restore like any other
CREATE TABLE named_t (id int PRIMARY KEY, t text, k int, "row" text, del bool, e text);
CREATE TABLE named_k (k text PRIMARY KEY, v int, t int);
INSERT INTO named_t VALUES (1, 'a', 1), (2, 'a', 2);
INSERT INTO named_k VALUES ('x', 1, 1);
SELECT now() AS before_named \gset
SELECT * FROM worlds.sql('create world named');
SET worlds.world = named;
UPDATE named_t SET t = 'b' WHERE id = 1;
DELETE FROM named_t WHERE id = 2;
UPDATE named_k SET v = 10 WHERE k = 'x';
INSERT INTO named_k VALUES ('z', 3, 3);
RESET worlds.world;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'change' AS change, j -> 'before' AS before, j -> 'columns' AS columns
FROM worlds.sql('diff world named') j;
SELECT * FROM worlds.sql('diff world named as sql');
SELECT * FROM worlds.sql('merge world named');
SELECT * FROM named_t ORDER BY id;
SELECT * FROM named_k ORDER BY k;
-- (a table without a key, too: its rows are removed by tid and value)
CREATE TABLE named_r (e int, zz int);
INSERT INTO named_r VALUES (1, 1), (2, 2);
SELECT * FROM worlds.sql('create world named_rw');
SET worlds.world = named_rw; DELETE FROM named_r WHERE zz = 1; UPDATE named_r SET zz = 20 WHERE e = 2; RESET worlds.world;
SELECT * FROM worlds.sql('merge world named_rw');
SELECT * FROM named_r ORDER BY e;
SELECT * FROM worlds.sql(format('restore world main to %L', :'before_named'));
SELECT * FROM named_t ORDER BY id;
SELECT * FROM named_k ORDER BY k;
-- ONLY TABLES naming a table no world changes (untracked, a catalog) or none: 22023, nothing merged
SELECT * FROM worlds.sql('create world only_bad');
SELECT try($$select * from worlds.sql('merge world only_bad only tables (pg_class)')$$);
SELECT try($$select * from worlds.merge('only_bad', only_tables => '{}')$$);
-- a null in a list is bad input (22004); a null flag is the flag not given
SELECT try($$select * from worlds.merge('only_bad', only_tables => '{NULL}')$$);
SELECT try($$select * from worlds.merge('only_bad', only_keys => array[NULL::text])$$);
SET client_min_messages = warning;
SELECT count(*) AS dry_run_rows FROM worlds.merge_dry_run('only_bad', by_columns => NULL);
RESET client_min_messages;
SELECT version FROM worlds.show_worlds() WHERE name = 'only_bad';
-- a table without a key merged once from a world that stays open: merging it again is refused (0A000),
-- since its rows can't be told merged from not
CREATE TABLE kl (a int, b text);
INSERT INTO kl VALUES (1, 'a');
CREATE TABLE kl_keyed (id int PRIMARY KEY);
SELECT * FROM worlds.sql('create world klw');
SET worlds.world = klw; INSERT INTO kl VALUES (2, 'b'); INSERT INTO kl_keyed VALUES (77); RESET worlds.world;
SELECT * FROM worlds.sql('merge world klw only tables (kl)');
SELECT try($$select * from worlds.sql('merge world klw only tables (kl)')$$);
SELECT try($$select * from worlds.sql('merge world klw')$$);
SELECT * FROM worlds.sql('merge world klw only tables (kl_keyed)');
SELECT * FROM kl ORDER BY a;
-- a unique value moved from an updated row to a new one merges (the updates go first), and so does an
-- updated row that references a new row of its own table
CREATE TABLE accounts_u (id int PRIMARY KEY, email text UNIQUE, manager int REFERENCES accounts_u);
INSERT INTO accounts_u VALUES (1, 'a@x', NULL);
SELECT * FROM worlds.sql('create world moves');
SET worlds.world = moves;
UPDATE accounts_u SET email = 'old-a@x' WHERE id = 1;
INSERT INTO accounts_u VALUES (2, 'a@x', NULL);
INSERT INTO accounts_u VALUES (3, 'boss@x', NULL);
UPDATE accounts_u SET manager = 3 WHERE id = 1;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world moves');
SELECT * FROM accounts_u ORDER BY id;
-- plain columns (integers, boolean, text, varchar) travel typed, the others as JSON (merge/typed.rs): the
-- same values either way. A RESOLVE row whose value isn't a plain value of its column (a string for an
-- integer, a number past smallint, 5.0) is applied the JSON way: Postgres's own error
CREATE TABLE typed_t (id int PRIMARY KEY, s smallint, b bool, t text, v varchar, n numeric, j jsonb);
INSERT INTO typed_t VALUES (1, 1, true, 'a', 'x', 1.50, '{"k": 1}'), (2, 2, false, NULL, NULL, NULL, NULL);
SELECT * FROM worlds.sql('create world ty');
SET worlds.world = ty;
UPDATE typed_t SET s = s + 10, t = 'w''s', n = 2.500 WHERE id IN (1, 2);
INSERT INTO typed_t VALUES (3, -32768, NULL, '', 'y', 0, '[1, "a"]');
RESET worlds.world;
UPDATE typed_t SET b = NOT b, v = 'main', j = '{"k": 2}' WHERE id IN (1, 2);
SET client_min_messages = warning;
SELECT j->>'table' AS "table", j->>'id' AS id, j->>'outcome' AS outcome, j->'result' AS result
  FROM worlds.sql('merge world ty by columns dry run') j ORDER BY j->>'id';
RESET client_min_messages;
SELECT * FROM worlds.sql('merge world ty by columns');
SELECT * FROM typed_t ORDER BY id;
SELECT * FROM worlds.sql('create world ty2');
SET worlds.world = ty2; UPDATE typed_t SET s = 5 WHERE id = 2; RESET worlds.world;
UPDATE typed_t SET s = 6 WHERE id = 2;
SELECT try($$select * from worlds.sql('merge world ty2 resolve (''typed_t/2'' = ''{"id": 2, "s": "x"}'')')$$);
SELECT try($$select * from worlds.sql('merge world ty2 resolve (''typed_t/2'' = ''{"id": 2, "s": 70000}'')')$$);
SELECT try($$select * from worlds.sql('merge world ty2 resolve (''typed_t/2'' = ''{"id": 2, "s": 5.0}'')')$$);
SELECT * FROM worlds.sql('merge world ty2 resolve (''typed_t/2'' = ''{"id": 2, "s": 7, "b": true, "n": 1e2}'')');
SELECT * FROM typed_t WHERE id = 2;
