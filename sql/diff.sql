-- DIFF [WORLD | BRANCH] a [AS SQL] [LIMIT n]: what a world changed since its fork, destructive first.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text, qty int);
CREATE TABLE leads (id int PRIMARY KEY, owner text);
CREATE TABLE notes (list int, line int, body text, PRIMARY KEY (list, line));
INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, 10) g;
INSERT INTO leads SELECT g, 'ana' FROM generate_series(1, 5) g;
INSERT INTO notes VALUES (1, 1, 'hello'), (1, 2, 'abc');
SELECT * FROM worlds.sql('create world agent_7');
SELECT * FROM worlds.sql('switch world agent_7');
UPDATE orders SET status = 'paid' WHERE id = 7;
DELETE FROM leads WHERE id IN (2, 4, 5);
UPDATE leads SET owner = 'bo' WHERE id = 1;
INSERT INTO notes VALUES (1, 3, 'new line');
UPDATE notes SET body = 'abc!' WHERE list = 1 AND line = 2;
-- the session's world since its fork; the NOTICE leads with what each table loses
SELECT * FROM worlds.sql('diff');
SELECT * FROM worlds.diff();
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM worlds.sql('diff world agent_7');
SELECT * FROM worlds.sql('DIFF BRANCH agent_7 LIMIT 2');
-- AS SQL: statements that make the same change on the other side; run them and compare
SELECT * FROM worlds.sql('diff world agent_7 as sql');
CREATE TABLE expected AS SELECT 'orders' AS t, to_jsonb(o) AS r FROM orders o;
DO $$
DECLARE s text;
BEGIN
    FOR s IN SELECT j ->> 'sql' FROM worlds.sql('diff world agent_7 as sql') j LOOP
        EXECUTE s;
    END LOOP;
END $$;
SET worlds.world = agent_7;
CREATE TEMP TABLE in_world AS
    SELECT 'orders' AS t, to_jsonb(o) AS r FROM orders o UNION ALL SELECT 'leads', to_jsonb(l) FROM leads l
    UNION ALL SELECT 'notes', to_jsonb(n) FROM notes n;
RESET worlds.world;
SELECT count(*) AS differing FROM (
    (SELECT * FROM in_world EXCEPT SELECT 'orders', to_jsonb(o) FROM orders o EXCEPT SELECT 'leads', to_jsonb(l) FROM leads l EXCEPT SELECT 'notes', to_jsonb(n) FROM notes n)
    UNION ALL
    (SELECT 'orders', to_jsonb(o) FROM orders o UNION ALL SELECT 'leads', to_jsonb(l) FROM leads l UNION ALL SELECT 'notes', to_jsonb(n) FROM notes n
     EXCEPT SELECT * FROM in_world)) x;
-- errors
SELECT try($$select * from worlds.sql('diff world nope')$$);
SELECT try($$select * from worlds.sql('diff')$$);
-- a session in a moment has no fork point to compare with (0A000, with the form that compares moments)
SET worlds.world = 'main@now';
SELECT try($$select * from worlds.sql('diff')$$);
RESET worlds.world;
-- AS SQL for arrays, JSON and a table without a key (one statement per physical row, duplicates too)
CREATE TABLE shapes (id int PRIMARY KEY, tags text[], pts int[], meta jsonb);
CREATE TABLE log (msg text, n int);
INSERT INTO shapes VALUES (1, '{a,"b c"}', '{1,2}', '{"k": 1}'), (2, '{}', NULL, NULL);
INSERT INTO log VALUES ('dup', 1), ('dup', 1), ('one', NULL);
SELECT * FROM worlds.sql('create world agent_9');
SET worlds.world = agent_9;
UPDATE shapes SET tags = '{x,"y,z"}', pts = '{3}', meta = '{"k": [2]}' WHERE id = 1;
INSERT INTO shapes VALUES (3, '{"q\"uote"}', '{4,5}', '[1, "two"]');
DELETE FROM log WHERE msg = 'dup';
INSERT INTO log VALUES ('dup', 1);
DELETE FROM log WHERE msg = 'one';
INSERT INTO log VALUES ('new', 7);
RESET worlds.world;
SELECT j ->> 'sql' AS sql FROM worlds.sql('diff world agent_9 as sql') j ORDER BY 1;
-- a table without a key: its rows in the order of their values (a page of LIMIT too)
SELECT j ->> 'table' AS "table", j ->> 'change' AS change, j -> 'before' AS before, j -> 'after' AS after
FROM worlds.sql('diff world agent_9 limit 4') j;
DO $$
DECLARE s text;
BEGIN
    FOR s IN SELECT j ->> 'sql' FROM worlds.sql('diff world agent_9 as sql') j LOOP
        EXECUTE s;
    END LOOP;
END $$;
SET worlds.world = agent_9;
CREATE TEMP TABLE shapes_in_world AS SELECT 's' AS t, to_jsonb(s) AS r FROM shapes s UNION ALL SELECT 'l', to_jsonb(l) FROM log l;
RESET worlds.world;
SELECT count(*) AS differing FROM (
    (SELECT * FROM shapes_in_world EXCEPT ALL (SELECT 's', to_jsonb(s) FROM shapes s UNION ALL SELECT 'l', to_jsonb(l) FROM log l))
    UNION ALL
    ((SELECT 's', to_jsonb(s) FROM shapes s UNION ALL SELECT 'l', to_jsonb(l) FROM log l) EXCEPT ALL SELECT * FROM shapes_in_world)) x;
-- DIFF between moments: the tables' schema changes come first (id null; columns says what changed in the
-- table), then the rows; AS SQL gives the DDL too, one statement per row
CREATE TABLE evolving (id int PRIMARY KEY, status text, age int);
INSERT INTO evolving VALUES (1, 'new', 3);
CREATE TABLE retired (id int PRIMARY KEY, v text);
SELECT 'main@' || clock_timestamp() AS before_ddl \gset
ALTER TABLE evolving ADD COLUMN email text;
ALTER TABLE evolving DROP COLUMN age;
ALTER TABLE evolving RENAME COLUMN status TO state;
CREATE TABLE fresh (id bigint PRIMARY KEY, note text);
DROP TABLE retired;
SELECT j ->> 'table' AS "table", j ->> 'change' AS change, j -> 'columns' AS columns
FROM worlds.sql(format('diff world %L to main', :'before_ddl')) j WHERE j ->> 'id' IS NULL;
SELECT j ->> 'sql' AS sql FROM worlds.sql(format('diff world %L to main as sql', :'before_ddl')) j;
-- backwards, the statements undo them: run on main, they give back the schema as it was
SELECT set_config('test.before_ddl', :'before_ddl', false) IS NOT NULL AS set;
DO $$
DECLARE s text;
BEGIN
    FOR s IN SELECT j ->> 'sql' FROM worlds.sql(format('diff world main to %L as sql', current_setting('test.before_ddl'))) j LOOP
        EXECUTE s;
    END LOOP;
END $$;
SELECT c.relname, string_agg(a.attname, ', ' ORDER BY a.attnum) AS columns
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relname IN ('evolving', 'retired', 'fresh') AND c.relnamespace = 'public'::regnamespace GROUP BY c.relname ORDER BY 1;
-- DIFF a TO b of a table without a key: the rows as multisets (pgbench_history-like), both ways
CREATE TABLE ledger (who text, amount int);
INSERT INTO ledger VALUES ('ann', 5), ('ann', 5), ('bo', 7);
SELECT 'main@' || clock_timestamp() AS before_ledger \gset
INSERT INTO ledger VALUES ('cy', 1), ('ann', 5);
DELETE FROM ledger WHERE who = 'bo';
SET client_min_messages = warning;  -- the NOTICE names the moment, a time that differs each run
SELECT j ->> 'table' AS "table", j ->> 'id' AS id, j ->> 'change' AS change
FROM worlds.sql(format('diff world %L to main', :'before_ledger')) j WHERE j ->> 'table' = 'ledger';
SELECT j ->> 'sql' AS sql FROM worlds.sql(format('diff world main to %L as sql', :'before_ledger')) j WHERE j ->> 'sql' LIKE '%ledger%';
RESET client_min_messages;
SELECT * FROM worlds.sql('create world ledger_w');
SET worlds.world = ledger_w;
DELETE FROM ledger WHERE who = 'cy';
INSERT INTO ledger VALUES ('dee', 2);
RESET worlds.world;
SELECT j ->> 'id' AS id, j ->> 'change' AS change FROM worlds.sql('diff world ledger_w to main') j WHERE j ->> 'table' = 'ledger';
-- LIMIT must not be negative (as SQL's LIMIT)
SELECT try($$select * from worlds.sql('diff world agent_7 limit -1')$$);
-- AS SQL runs on the other side as written: generated columns are left to it, identity columns
-- GENERATED ALWAYS are given with OVERRIDING SYSTEM VALUE
CREATE TABLE gen (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED);
INSERT INTO gen (a) VALUES (1);
SELECT * FROM worlds.sql('create world gen_w');
SET worlds.world = gen_w;
UPDATE gen SET a = 10 WHERE id = 1;
INSERT INTO gen (a) VALUES (5);
RESET worlds.world;
SELECT j ->> 'sql' AS sql FROM worlds.sql('diff world gen_w as sql') j WHERE j ->> 'sql' LIKE '%gen %';
CREATE TABLE gen_copy (LIKE gen INCLUDING ALL);
INSERT INTO gen_copy (id, a) OVERRIDING SYSTEM VALUE VALUES (1, 1);
DO $$ DECLARE s text; BEGIN
  FOR s IN SELECT replace(j ->> 'sql', 'public.gen ', 'public.gen_copy ') FROM worlds.sql('diff world gen_w as sql') j WHERE j ->> 'sql' LIKE '%gen %' LOOP
    EXECUTE s;
  END LOOP;
END $$;
SELECT * FROM gen_copy ORDER BY id;
-- a table off the search_path, or one whose name needs quotes, is named as SQL names it, so the name
-- pastes back into ONLY KEYS and RESOLVE
CREATE SCHEMA app;
CREATE TABLE app."Orders" (id int PRIMARY KEY, v text);
INSERT INTO app."Orders" VALUES (1, 'a'), (2, 'b');
SELECT * FROM worlds.sql('create world schemas');
SET worlds.world = schemas;
UPDATE app."Orders" SET v = 'w' WHERE id IN (1, 2);
RESET worlds.world;
SELECT j ->> 'table' AS "table", j ->> 'id' AS id FROM worlds.sql('diff world schemas') j;
SELECT * FROM worlds.sql($$merge world schemas only keys ('app."Orders"/1')$$);
SELECT * FROM app."Orders" ORDER BY id;
-- json values keep their JSON form in AS SQL (a string its quotes), in keyed and keyless tables
CREATE TABLE js (id int PRIMARY KEY, j jsonb);
CREATE TABLE js_r (j jsonb, n int);
INSERT INTO js VALUES (1, '{"a": 1}');
INSERT INTO js_r VALUES ('"s"', 1), ('5', 2);
SELECT * FROM worlds.sql('create world js_w');
SET worlds.world = js_w;
UPDATE js SET j = '"u"' WHERE id = 1;
INSERT INTO js VALUES (2, 'true');
DELETE FROM js_r WHERE n = 1;
INSERT INTO js_r VALUES ('"w"', 3);
RESET worlds.world;
SELECT j ->> 'sql' AS sql FROM worlds.sql('diff world js_w as sql') j WHERE j ->> 'sql' LIKE '%js%';
CREATE TABLE js_copy (LIKE js INCLUDING ALL);
CREATE TABLE js_r_copy (LIKE js_r);
INSERT INTO js_copy SELECT * FROM js;
INSERT INTO js_r_copy SELECT * FROM js_r;
DO $$ DECLARE s text; BEGIN
  FOR s IN SELECT replace(replace(j ->> 'sql', 'public.js ', 'public.js_copy '), 'public.js_r ', 'public.js_r_copy ')
           FROM worlds.sql('diff world js_w as sql') j WHERE j ->> 'sql' LIKE '%js%' LOOP
    EXECUTE s;
  END LOOP;
END $$;
SELECT * FROM js_copy ORDER BY id;
SELECT * FROM js_r_copy ORDER BY n;
-- pg_worlds' own SQL text reads the same whatever the session's standard_conforming_strings says: a
-- column whose name has a backslash, diffed and written as SQL with it off
CREATE TABLE bs (id int PRIMARY KEY, "a\b" text, "q\x" text);
INSERT INTO bs VALUES (1, 'one', 'x');
SELECT * FROM worlds.sql('create world bs_w');
SET worlds.world = bs_w;
UPDATE bs SET "a\b" = 'two\three' WHERE id = 1;
RESET worlds.world;
SET standard_conforming_strings = off;
SELECT * FROM worlds.sql('diff world bs_w');
SELECT * FROM worlds.sql('diff world bs_w as sql');
RESET standard_conforming_strings;
SELECT * FROM worlds.sql('diff world bs_w as sql');
