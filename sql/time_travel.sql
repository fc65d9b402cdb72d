-- Time travel and undo: AS OF, moments, CHECKPOINT / RESTORE, UNDO MERGE, SHOW HISTORY, history_retention.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
-- for errors whose message carries a time: the SQLSTATE and the message's shape
CREATE FUNCTION state(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok';
EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || regexp_replace(sqlerrm, 'moment .*? is ', 'moment … is '); END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 5) g;
CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS at;
SELECT pg_sleep(0.05);
UPDATE orders SET status = 'paid' WHERE id = 2;
DELETE FROM orders WHERE id = 3;
INSERT INTO orders VALUES (6, 'new');
UPDATE orders SET status = 'shipped' WHERE id = 2;
-- AS OF: the table as it was; now and then join in one statement (the spec's example)
SELECT * FROM worlds.as_of(NULL::orders, (SELECT at FROM t0)) ORDER BY id;
SELECT now.id, now.status, old.status
FROM orders now JOIN worlds.as_of(NULL::orders, (SELECT at FROM t0)) old ON old.id = now.id
WHERE old.status <> now.status;
SELECT count(*) FROM worlds.as_of(NULL::orders, 'now');
-- moments: a time (UTC unless it gives an offset), now, a time ago; anything else 22P02; outside 22023
SELECT worlds.moment(to_char(now() AT TIME ZONE 'UTC' - interval '1 hour', 'YYYY-MM-DD HH24:MI')) = date_trunc('minute', now() - interval '1 hour') AS utc_unless_offset,
       worlds.moment(to_char(now() AT TIME ZONE 'UTC' - interval '1 hour', 'YYYY-MM-DD HH24:MI') || '+02') = date_trunc('minute', now() - interval '3 hours') AS with_offset;
SELECT abs(extract(epoch FROM worlds.moment('-1 second') - (now() - interval '1 second'))) < 0.01 AS ago;
SELECT try($$select worlds.moment('soon')$$);
SELECT try($$select * from worlds.as_of(null::orders, 'garbage')$$);
SELECT state($$select worlds.moment('-3 days')$$);
SELECT state($$select worlds.moment('2999-01-01 00:00+02')$$);
SELECT state($$select worlds.moment('+1 hour')$$);
-- CHECKPOINT WORLD name AS 'label'; the same label again moves it; RESTORE ... TO CHECKPOINT
SELECT * FROM worlds.sql('checkpoint world main as ''before''');
UPDATE orders SET status = 'oops';
SELECT * FROM worlds.sql('checkpoint world main as ''oops''');
SELECT * FROM worlds.sql('restore world main to checkpoint ''before''');
SELECT * FROM orders ORDER BY id;
SELECT try($$select * from worlds.sql('restore world main to checkpoint ''nope''')$$);
-- RESTORE main TO a moment: an ordinary write (history keeps what it replaced)
SELECT * FROM worlds.sql(format('restore world main to %L', (SELECT at FROM t0)));
SELECT * FROM orders ORDER BY id;
SELECT state($$select * from worlds.sql('restore world main to ''-3 days''')$$);
SELECT try($$select * from worlds.sql('restore world main to ''whenever''')$$);
-- RESTORE a world to its checkpoint
SELECT * FROM worlds.sql('create world bot_task');
SET worlds.world = bot_task;
UPDATE orders SET status = 'bot' WHERE id IN (1, 2);
SELECT * FROM worlds.sql('checkpoint world bot_task as ''before''');
UPDATE orders SET status = 'bot broke it' WHERE id = 1;
DELETE FROM orders WHERE id = 4;
RESET worlds.world;
SELECT * FROM worlds.sql('restore world bot_task to checkpoint ''before''');
SET worlds.world = bot_task; SELECT * FROM orders ORDER BY id; RESET worlds.world;
-- a time before the world's last rebase: 55000
SELECT * FROM worlds.sql('checkpoint world bot_task as ''pre_rebase''');
SELECT pg_sleep(0.01);
SELECT * FROM worlds.sql('rebase world bot_task');
SELECT left(try($$select * from worlds.sql('restore world bot_task to checkpoint ''pre_rebase''')$$), 5);
-- a time before the world existed: 22023 (as 'bot_task@when' there)
SELECT left(try($$select * from worlds.sql('restore world bot_task to ''-1 hour''')$$), 5);
-- UNDO MERGE: puts back every row the merge changed; rows changed again since: 40001 unless SKIP CHANGED
SELECT * FROM worlds.sql('create world agent_7');
SET worlds.world = agent_7;
UPDATE orders SET status = 'agent' WHERE id IN (1, 2);
INSERT INTO orders VALUES (7, 'agent');
RESET worlds.world;
SELECT * FROM worlds.sql('merge world agent_7');
UPDATE orders SET status = 'changed again' WHERE id = 1;
SELECT try($$select * from worlds.sql('undo merge of world agent_7')$$);
SELECT * FROM worlds.sql('undo merge of world agent_7 skip changed');
SELECT * FROM orders ORDER BY id;
SELECT try($$select * from worlds.sql('undo merge of world never_merged')$$);
-- SHOW HISTORY: newest first; a dropped world's name still works
SELECT world, event, rows FROM worlds.show_history('agent_7');
SELECT world, event, rows FROM worlds.show_history('bot_task', "limit" => 3);
SELECT count(*) FROM worlds.sql('show history for world agent_7 limit 2');
-- history_retention: default 1 day
SELECT * FROM worlds.sql('show history_retention');
SELECT * FROM worlds.sql('alter system set history_retention = ''2 days''');
SELECT * FROM worlds.sql('show history_retention');
SELECT * FROM worlds.sql('alter system set history_retention to ''0''');
SELECT state($$select worlds.moment('-1 minute')$$);
SELECT try($$select * from worlds.sql('alter system set history_retention = ''forever''')$$);
-- 'name@when': a world forked from main as it was, a session reading the past (writes: 25006), DIFF
SELECT * FROM worlds.sql('alter system set history_retention = ''1 day''');
SELECT * FROM worlds.sql(format('create world check_it from %L', 'main@' || (SELECT at FROM t0)));
SET worlds.world = check_it;
SELECT * FROM orders ORDER BY id;
UPDATE orders SET status = 'fixed' WHERE id = 1;
RESET worlds.world;
SELECT id, change, columns FROM worlds.diff('check_it');
SELECT * FROM worlds.sql(format('fork world %L as before_the_deploy', 'main@' || (SELECT at FROM t0)));
SELECT worlds.switch_world('main@' || (SELECT at FROM t0));
SELECT count(*) FROM orders;
SELECT left(try('update orders set status = ''x'''), 5) AS sqlstate;
RESET worlds.world;
SET client_min_messages = warning;
SELECT j ->> 'id' AS id, j ->> 'change' AS change FROM worlds.sql(format('diff world %L to main', 'main@' || (SELECT at FROM t0))) j;
RESET client_min_messages;
-- AS OF inside a SELECT run by worlds.sql, in the spec's three forms
SELECT j FROM worlds.sql(format($q$select now.id, now.status, old.status from orders now join orders as of %L old on old.id = now.id where old.status <> now.status order by 1$q$, (SELECT at FROM t0))) j;
SELECT count(*) FROM worlds.sql(format('select * from orders as of %L', (SELECT at FROM t0)));
SELECT count(*) FROM worlds.sql(format('select o.id from orders o as of %L', (SELECT at FROM t0)));
SELECT count(*) FROM worlds.sql(format('select o.id from orders o for system_time as of %L;', (SELECT at FROM t0)));
SELECT try($$select * from worlds.sql('select * from orders as of ''garbage''')$$);
-- anything that isn't a time is 22P02, whatever its type; a bare now is the moment now; a timestamp or
-- date value is UTC
SELECT try($$select * from worlds.sql('select * from orders as of 42')$$);
SELECT try($$select * from worlds.sql('select * from orders as of true')$$);
SELECT try($$select * from worlds.sql('select * from orders as of interval ''1 hour''')$$);
SELECT try($$select * from worlds.sql('restore world main to 1.5')$$);
SELECT count(*) FROM worlds.sql('select * from orders as of now');
SELECT worlds.moment((now() AT TIME ZONE 'UTC')::timestamp - interval '1 minute') = now() - interval '1 minute' AS timestamp_is_utc;
-- 'name@when' for any world: its own writes up to then, on what it stood on at its fork
SELECT * FROM worlds.sql('create world agent');
SET worlds.world = agent;
UPDATE orders SET status = 'agent 1' WHERE id = 1;
SELECT pg_sleep(0.02);
CREATE TEMP TABLE t1 AS SELECT clock_timestamp() AS at;
SELECT pg_sleep(0.02);
UPDATE orders SET status = 'agent 2' WHERE id = 2;
DELETE FROM orders WHERE id = 4;
SELECT id, status FROM orders ORDER BY id;
RESET worlds.world;
SELECT worlds.switch_world('agent@' || (SELECT at FROM t1));
SELECT id, status FROM orders ORDER BY id;
SELECT left(try('update orders set status = ''x'''), 5) AS sqlstate;
RESET worlds.world;
SET client_min_messages = warning;
SELECT j ->> 'id' AS id, j ->> 'change' AS change FROM worlds.sql(format('diff world %L to agent', 'agent@' || (SELECT at FROM t1))) j;
RESET client_min_messages;
SELECT * FROM worlds.sql(format('fork world %L as agent_then', 'agent@' || (SELECT at FROM t1)));
SET worlds.world = agent_then;
SELECT id, status FROM orders ORDER BY id;
UPDATE orders SET status = 'then' WHERE id = 5;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world agent_then');
SET worlds.world = agent;
SELECT id, status FROM orders ORDER BY id;
RESET worlds.world;
-- before the world existed: 22023; not a time: 22P02; before its last rebase: 55000; only readable: 0A000
SELECT left(try($$select * from worlds.sql('create world w2 from ''agent@-1 day''')$$), 5) AS sqlstate;
SELECT left(try($$select * from worlds.sql('create world w2 from ''agent@soon''')$$), 5) AS sqlstate;
SELECT * FROM worlds.sql('rebase world agent using ours');
SELECT left(try(format('select * from worlds.sql(%L)', format('create world w2 from %L', 'agent@' || (SELECT at FROM t1)))), 5) AS sqlstate;
SELECT try($$select * from worlds.sql('drop world ''agent@-1 minute''')$$);
SELECT left(try($$select * from worlds.sql('merge world ''agent@-1 minute''')$$), 5) AS merge,
       left(try($$select * from worlds.sql('rebase world ''agent@-1 minute''')$$), 5) AS rebase,
       left(try($$select * from worlds.sql('restore world ''agent@-1 minute'' to ''-1 minute''')$$), 5) AS restore,
       left(try($$select * from worlds.sql('undo merge ''agent@-1 minute''')$$), 5) AS undo;
-- AS OF reads a table with its columns as they were: added since, absent; dropped since, present (from
-- history, or from the row itself when unchanged since). A table dropped since is read from its history.
CREATE TABLE shapes (id int PRIMARY KEY, kind text, legacy text);
INSERT INTO shapes VALUES (1, 'circle', 'L1'), (2, 'square', 'L2'), (3, 'line', 'L3');
CREATE TABLE scratch (id int PRIMARY KEY, note text);
INSERT INTO scratch VALUES (1, 'keep me'), (2, 'and me');
SELECT pg_sleep(0.02);
SELECT clock_timestamp() AS t2 \gset
SELECT pg_sleep(0.02);
UPDATE shapes SET kind = 'oval' WHERE id = 1;
DELETE FROM shapes WHERE id = 3;
ALTER TABLE shapes ADD COLUMN color text DEFAULT 'red';
ALTER TABLE shapes DROP COLUMN legacy;
INSERT INTO shapes VALUES (4, 'dot');
UPDATE scratch SET note = 'changed' WHERE id = 1;
DROP TABLE scratch;
SELECT * FROM shapes ORDER BY id;
SELECT j FROM worlds.sql(format('select * from shapes as of %L order by id', :'t2')) j;
SELECT j FROM worlds.sql(format('select now.id, now.kind, old.kind as was, old.legacy from shapes now join shapes as of %L old on old.id = now.id order by 1', :'t2')) j;
SELECT * FROM worlds.as_of(NULL::shapes, :'t2') ORDER BY id;
SELECT j FROM worlds.sql(format('select * from scratch as of %L order by id', :'t2')) j;
SELECT try($$select * from worlds.sql('select * from scratch as of ''now''')$$);
SELECT try($$select * from worlds.sql('select * from no_such_table as of ''-1 second''')$$);
-- a time written out is rebuilt from history once, then cached: later statements read the cached copy,
-- with the same rows (and schema) as the rebuild; a role still needs SELECT on the table (42501)
CREATE TABLE stock (id int PRIMARY KEY, qty int);
INSERT INTO stock SELECT g, g FROM generate_series(1, 50) g;
SELECT pg_sleep(0.02);
SELECT clock_timestamp() AS ts \gset
SELECT pg_sleep(0.02);
UPDATE stock SET qty = qty * 10 WHERE id % 10 = 0;
DELETE FROM stock WHERE id = 1;
INSERT INTO stock VALUES (51, 51);
ALTER TABLE stock ADD COLUMN note text;
-- (parallel plans made cheap: building the copy must not run in parallel, reading it may)
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SELECT j FROM worlds.sql(format('select count(*), sum(qty) from stock as of %L', :'ts')) j;
SELECT count(*) AS cached_moments FROM worlds.as_of_cache c JOIN worlds.tables t USING (tabno) WHERE t.relid = 'stock'::regclass;
UPDATE stock SET qty = 0;
SELECT j FROM worlds.sql(format('select count(*), sum(qty) from stock as of %L', :'ts')) j;
SELECT j FROM worlds.sql(format('select * from stock as of %L where id = 10', :'ts')) j;
SELECT count(*), sum(qty) FROM worlds.as_of(NULL::stock, :'ts');
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
CREATE ROLE tt_cache;
SET ROLE tt_cache;
SELECT left(try(format('select * from worlds.sql(%L)', format('select count(*) from stock as of %L', :'ts'))), 5) AS sqlstate;
RESET ROLE;
GRANT SELECT ON stock TO tt_cache;
SET ROLE tt_cache;
SELECT j FROM worlds.sql(format('select count(*), sum(qty) from stock as of %L', :'ts')) j;
RESET ROLE;
DROP OWNED BY tt_cache;
DROP ROLE tt_cache;
-- the purge drops moments the history window no longer reaches
SELECT worlds._purge_as_of_cache(now());
SELECT count(*) AS cached_moments FROM worlds.as_of_cache;
SELECT count(*) AS copies_left FROM pg_class WHERE relnamespace = 'worlds_data'::regnamespace AND relname LIKE 'c\_%';
-- a renamed column reads under the name it had then (renamed twice: each moment its own name); dropped
-- after a rename, it reads under its name of then too
CREATE TABLE labels (id int PRIMARY KEY, txt text);
INSERT INTO labels VALUES (1, 'one'), (2, 'two');
SELECT pg_sleep(0.02);
SELECT clock_timestamp() AS r1 \gset
SELECT pg_sleep(0.02);
ALTER TABLE labels RENAME COLUMN txt TO caption;
UPDATE labels SET caption = 'uno' WHERE id = 1;
SELECT pg_sleep(0.02);
SELECT clock_timestamp() AS r2 \gset
SELECT pg_sleep(0.02);
ALTER TABLE labels RENAME COLUMN caption TO title;
SELECT * FROM labels ORDER BY id;
SELECT j FROM worlds.sql(format('select * from labels as of %L order by id', :'r1')) j;
SELECT j FROM worlds.sql(format('select id, caption from labels as of %L order by id', :'r2')) j;
SELECT j FROM worlds.sql(format('select now.id, now.title, old.txt from labels now join labels as of %L old on old.id = now.id order by 1', :'r1')) j;
SELECT * FROM worlds.as_of(NULL::labels, :'r1') ORDER BY id;
ALTER TABLE labels DROP COLUMN title;
SELECT j FROM worlds.sql(format('select * from labels as of %L order by id', :'r1')) j;
SELECT j FROM worlds.sql(format('select * from labels as of %L order by id', :'r2')) j;
-- inside a world, AS OF reads the world as it was ('tt@when': its own writes up to then, on main as of
-- its fork); before the world existed: 22023
SELECT * FROM worlds.sql('create world tt');
SET worlds.world = tt;
UPDATE shapes SET kind = 'world' WHERE id = 2;
SELECT pg_sleep(0.02);
SELECT clock_timestamp() AS tw \gset
SELECT pg_sleep(0.02);
UPDATE shapes SET kind = 'world again' WHERE id = 2;
DELETE FROM shapes WHERE id = 1;
SELECT j FROM worlds.sql(format('select id, kind from shapes as of %L order by id', :'tw')) j;
SELECT j FROM worlds.sql(format('select now.id, now.kind, old.kind from shapes now right join shapes as of %L old on old.id = now.id order by old.id', :'tw')) j;
SELECT left(try(format('select * from worlds.sql(%L)', format('select * from shapes as of %L', :'t2'))), 5) AS sqlstate;
-- a session in the world's past ('tt@now') reads AS OF through that world too, not main
SELECT * FROM worlds.sql('switch world ''tt@now''');
SELECT j FROM worlds.sql(format('select id, kind from shapes as of %L order by id', :'tw')) j;
RESET worlds.world;
-- a role reads the past only of what it may read now (a dropped table: superusers only)
CREATE ROLE tt_reader;
GRANT USAGE ON SCHEMA public TO tt_reader;
SELECT changes AS shapes_history FROM worlds.tables WHERE relid = 'shapes'::regclass \gset
SET ROLE tt_reader;
SELECT left(try(format('select * from worlds.as_of(NULL::shapes, %L)', :'t2')), 5) AS sqlstate;
SELECT count(*) AS history_rows_seen FROM :shapes_history;
SELECT left(try(format('select * from worlds.sql(%L)', format('select * from scratch as of %L', :'t2'))), 5) AS sqlstate;
RESET ROLE;
GRANT SELECT ON shapes TO tt_reader;
SET ROLE tt_reader;
SELECT * FROM worlds.as_of(NULL::shapes, :'t2') ORDER BY id;
RESET ROLE;
DROP OWNED BY tt_reader;
DROP ROLE tt_reader;
-- UNDO MERGE of a merge into another world: that world gets back what it had before the merge
CREATE TABLE u (id int PRIMARY KEY, v text);
INSERT INTO u SELECT g, 'main' FROM generate_series(1, 4) g;
SELECT * FROM worlds.sql('create world up');
SET worlds.world = up;
UPDATE u SET v = 'up' WHERE id = 3;
RESET worlds.world;
SELECT * FROM worlds.sql('create world uc from up');
SET worlds.world = uc;
UPDATE u SET v = 'uc' WHERE id IN (1, 3);
DELETE FROM u WHERE id = 2;
INSERT INTO u VALUES (5, 'uc');
RESET worlds.world;
SELECT * FROM worlds.sql('merge world uc');
SELECT * FROM worlds.sql('undo merge of world uc');
SET worlds.world = up;
SELECT * FROM u ORDER BY id;
RESET worlds.world;
SELECT * FROM worlds.sql('create world uc2 from up');
SET worlds.world = uc2;
UPDATE u SET v = 'uc2' WHERE id IN (1, 4);
RESET worlds.world;
SELECT * FROM worlds.sql('merge world uc2');
SET worlds.world = up;
UPDATE u SET v = 'up again' WHERE id = 4;
RESET worlds.world;
SELECT left(try($$select * from worlds.sql('undo merge of world uc2')$$), 5) AS sqlstate;
SELECT * FROM worlds.sql('undo merge of world uc2 skip changed');
SET worlds.world = up;
SELECT * FROM u ORDER BY id;
RESET worlds.world;
SELECT * FROM u ORDER BY id;
-- SHOW HISTORY: a statement on its own is a write; a transaction block's statements are one commit
SELECT * FROM worlds.sql('create world hx');
SET worlds.world = hx;
INSERT INTO u VALUES (10, 'a'), (11, 'b');
BEGIN;
INSERT INTO u VALUES (12, 'c');
UPDATE u SET v = 'd' WHERE id IN (10, 11);
COMMIT;
BEGIN;
INSERT INTO u VALUES (13, 'gone');
ROLLBACK;
RESET worlds.world;
SELECT world, event, rows FROM worlds.show_history('hx');
-- a block's rows counted after SHOW HISTORY wrote its event are added to it; a block that goes on in
-- another world counts them to its one event, its first world's
SELECT * FROM worlds.sql('create world hy1');
SELECT * FROM worlds.sql('create world hy2');
SET worlds.world = hy1;
BEGIN;
INSERT INTO u VALUES (20, 'a'), (21, 'b');
SELECT world, event, rows FROM worlds.show_history('hy1') LIMIT 1;
INSERT INTO u VALUES (22, 'c'), (23, 'd'), (24, 'e');
COMMIT;
BEGIN;
INSERT INTO u VALUES (25, 'f');
SET worlds.world = hy2;
INSERT INTO u VALUES (26, 'g'), (27, 'h'), (28, 'i');
COMMIT;
RESET worlds.world;
SELECT world, event, rows FROM worlds.show_history('hy1');
SELECT world, event, rows FROM worlds.show_history('hy2');
-- main's own writes are events too, read from its history: a statement is a write, a transaction block
-- a commit; what a merge brought in is its `merged ...` event only
CREATE TABLE hm (id int PRIMARY KEY, v text);
INSERT INTO hm VALUES (1, 'a'), (2, 'b');
BEGIN;
UPDATE hm SET v = 'c' WHERE id = 1;
DELETE FROM hm WHERE id = 2;
COMMIT;
SELECT world, event, rows FROM worlds.show_history('main', "limit" => 2);
SELECT * FROM worlds.sql('create world hm_w');
SET worlds.world = hm_w;
UPDATE hm SET v = 'from hm_w' WHERE id = 1;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world hm_w');
SELECT j ->> 'world' AS world, j ->> 'event' AS event, j ->> 'rows' AS rows FROM worlds.sql('show history for world main limit 3') j;
-- rows a CREATE TABLE AS / SELECT INTO wrote are main's changes like any insert: the past doesn't hold them
SELECT now() AS before_ctas \gset
SELECT pg_sleep(0.01);
CREATE TABLE mark AS SELECT 1 AS id, 'marked'::text AS note;
SELECT * INTO mark_keyless FROM mark;
SELECT count(*) FROM worlds.as_of(null::mark, :'before_ctas');
SELECT count(*) FROM worlds.as_of(null::mark_keyless, :'before_ctas');
SELECT count(*) FROM worlds.as_of(null::mark, 'now');
SET client_min_messages = warning;  -- (the NOTICE names the moment)
SELECT j ->> 'table' AS "table", j ->> 'change' AS change FROM worlds.sql(format('diff world %L to main', 'main@' || :'before_ctas')) j
WHERE j ->> 'table' LIKE 'mark%' ORDER BY 1, 2;
RESET client_min_messages;
-- AS OF in statements that read tables: INSERT ... SELECT, CREATE TABLE ... AS, UPDATE ... FROM, DELETE ... USING
CREATE TABLE asof_src (id int PRIMARY KEY, v text);
INSERT INTO asof_src VALUES (1, 'then'), (2, 'then');
SELECT now() AS asof_then \gset
SELECT pg_sleep(0.01);
UPDATE asof_src SET v = 'now';
DELETE FROM asof_src WHERE id = 2;
CREATE TABLE asof_snap (id int, v text);
SELECT * FROM worlds.sql(format('insert into asof_snap select * from asof_src as of %L', :'asof_then'));
SELECT * FROM asof_snap ORDER BY id;
SELECT * FROM worlds.sql(format('create table asof_copy as select * from asof_src as of %L old', :'asof_then'));
SELECT * FROM asof_copy ORDER BY id;
SELECT * FROM worlds.sql(format('update asof_src set v = old.v from asof_src as of %L old where old.id = asof_src.id', :'asof_then'));
SELECT * FROM asof_src ORDER BY id;
SELECT * FROM worlds.sql(format('delete from asof_snap using asof_src as of %L old where old.id = asof_snap.id and old.id = 2', :'asof_then'));
SELECT * FROM asof_snap ORDER BY id;
