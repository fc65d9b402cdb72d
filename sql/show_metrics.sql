-- SHOW METRICS: every timed operation run once shows count >= 1 with p50 <= p95 <= p99 <= max <= total;
-- the counters after a conflict, a policy's refusal (queued for review), a stale read, a merge check, an
-- expiry and effects sent; worlds.reset_metrics() for admins; the view worlds.metrics for pg_monitor.
-- (The numbers are cluster-wide: counts are checked as at least, not exactly.)
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_mbot;
DROP ROLE IF EXISTS regress_mon;
DROP ROLE IF EXISTS regress_nomon;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
-- one metric's count (from the SQL function, which is the statement's)
CREATE FUNCTION m(name text) RETURNS bigint LANGUAGE sql AS $$ SELECT count FROM worlds.show_metrics() WHERE metric = name $$;
CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO t SELECT g, g FROM generate_series(1, 10) g;
GRANT SELECT, INSERT, UPDATE, DELETE ON t TO PUBLIC;
CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS at;

-- from zero: the spec's columns, timed operations first, then the counters with null latencies (typed
-- in psql, and through worlds.sql)
SELECT worlds.reset_metrics();
SELECT worlds.metrics_since() <= clock_timestamp() AS since_reset;
SHOW METRICS;
SELECT j ->> 'metric' AS metric, j ->> 'count' AS count, j ->> 'p99_ms' AS p99_ms FROM worlds.sql('show metrics') j LIMIT 3;

-- each timed operation once
-- fork (CREATE WORLD / FORK)
SELECT * FROM worlds.sql('create world m1');
SET worlds.world = m1;
UPDATE t SET v = 100 WHERE id = 1;
RESET worlds.world;
-- diff, dry run, merge checks (a check on t runs at every merge of t), merge (fast-forward: main untouched)
SELECT * FROM worlds.sql('create merge check no_negative on tables (t) as select id from t where v < 0');
SELECT j ->> 'id' AS id, j ->> 'change' AS change FROM worlds.sql('diff world m1') j;
SET client_min_messages = warning;
SELECT j ->> 'id' AS id, j ->> 'outcome' AS outcome FROM worlds.sql('merge world m1 dry run') j;
RESET client_min_messages;
SELECT * FROM worlds.sql('merge world m1');
-- merge (main changed since the fork), then undo
SELECT * FROM worlds.sql('create world m2');
SET worlds.world = m2;
UPDATE t SET v = 200 WHERE id = 2;
RESET worlds.world;
UPDATE t SET v = 90 WHERE id = 9;
SELECT * FROM worlds.sql('merge world m2');
SELECT * FROM worlds.sql('undo merge m2');
-- rebase
SELECT * FROM worlds.sql('create world m3');
SET worlds.world = m3;
UPDATE t SET v = 300 WHERE id = 3;
RESET worlds.world;
UPDATE t SET v = 80 WHERE id = 8;
SELECT * FROM worlds.sql('rebase world m3');
-- restore
SELECT * FROM worlds.sql('checkpoint world m3 as ''c''');
SET worlds.world = m3;
UPDATE t SET v = 301 WHERE id = 3;
RESET worlds.world;
SELECT * FROM worlds.sql('restore world m3 to checkpoint ''c''');
-- as of
SELECT count(*) FROM worlds.sql(format('select * from t as of %L', (SELECT at FROM t0)));
-- simulate
SELECT count(*) AS simulated FROM worlds.sql($q$simulate 2 worlds from main as sim
  run $$update t set v = v + $1 where id = 4$$ score $$select sum(v) from t$$ keep 1 seed 1 threads 1$q$);
-- check reads
SELECT * FROM worlds.sql('create world cr with (check_reads = true)');
SET worlds.world = cr;
SELECT v FROM t WHERE id = 6;
UPDATE t SET v = 66 WHERE id = 7;
RESET worlds.world;
SELECT count(*) AS changed FROM worlds.sql('check reads of world cr');

-- the counters
-- conflicts: both sides changed row 5 (40001)
SELECT * FROM worlds.sql('create world cf');
SET worlds.world = cf;
UPDATE t SET v = 50 WHERE id = 5;
RESET worlds.world;
UPDATE t SET v = 51 WHERE id = 5;
SELECT try($$select * from worlds.sql('merge world cf')$$);
SELECT try($$select * from worlds.sql('rebase world cf')$$);
SELECT m('conflicts') >= 2 AS conflicts_counted;
-- a stale read: cr read row 6, which main changed since (40001)
UPDATE t SET v = 60 WHERE id = 6;
SELECT try($$select * from worlds.sql('merge world cr')$$);
SELECT m('refused: stale read') >= 1 AS stale_read_counted;
-- a merge check (23514)
SELECT * FROM worlds.sql('create world neg');
SET worlds.world = neg;
UPDATE t SET v = -1 WHERE id = 10;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world neg')$$);
SELECT m('refused: merge check') >= 1 AS merge_check_counted;
-- a policy's refusal: the agent's merge waits for a person (42501), queued for review
SELECT j ->> 'name' AS policy, j ->> 'review_tables' AS review_tables FROM worlds.sql('create merge policy strict with (review_tables = ''t'')') j;
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_mbot with (can = ''read,fork,write_own,merge_own'', policy = ''strict'')') j;
SET SESSION AUTHORIZATION regress_mbot;
SELECT * FROM worlds.sql('create world bot_w');
SET worlds.world = bot_w;
UPDATE t SET v = 11 WHERE id = 1;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world bot_w')$$);
RESET SESSION AUTHORIZATION;
SELECT m('refused: policy (queued)') >= 1 AS policy_refusal_counted, m('queued reviews') >= 1 AS queued_counted;
-- what the policy refuses outright: the agent keeping its row over main's change by rebasing (42501)
UPDATE t SET v = 12 WHERE id = 1;
SET SESSION AUTHORIZATION regress_mbot;
SELECT try($$select * from worlds.sql('rebase world bot_w using ours')$$);
RESET SESSION AUTHORIZATION;
SELECT m('refused: policy') >= 1 AS policy_counted;
-- a person merging the agent's world that deletes, without the count the policy asks for (55000)
SELECT count(*) FROM worlds.sql('alter merge policy strict set (confirm_deletes_over = 0)');
SET SESSION AUTHORIZATION regress_mbot;
SELECT * FROM worlds.sql('create world del_w');
SET worlds.world = del_w;
DELETE FROM t WHERE id = 9;
RESET worlds.world;
RESET SESSION AUTHORIZATION;
SELECT try($$select * from worlds.sql('merge world del_w')$$);
SELECT m('refused: unconfirmed deletes') >= 1 AS unconfirmed_counted;
-- a change outside the world's declared scope (42501)
CREATE TABLE u (id int PRIMARY KEY);
SELECT * FROM worlds.sql('create world sc with (may_change = ''u'')');
SET worlds.world = sc;
UPDATE t SET v = 33 WHERE id = 3;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world sc')$$);
SELECT m('refused: scope') >= 1 AS scope_counted;
-- effects sent: a NOTIFY kept in a world, sent by its merge
SELECT * FROM worlds.sql('create world fx');
SET worlds.world = fx;
NOTIFY shipped, 'order 1';
NOTIFY shipped, 'order 2';
RESET worlds.world;
SELECT * FROM worlds.sql('merge world fx');
SELECT m('effects sent') >= 2 AS effects_counted;
-- worlds expired: past its TTL, discarded by the next lifecycle statement
SELECT * FROM worlds.sql('create world ex');
-- (the ALTER's own row may already show it gone: 1 ms passes within the statement on a loaded machine)
SELECT count(*) <= 1 AS altered FROM worlds.sql('alter world ex set ttl ''1 millisecond''');
SELECT pg_sleep(0.05);
SELECT count(*) > 0 AS shown FROM worlds.sql('show worlds');
SELECT count(*) AS ex_live FROM worlds.world WHERE name = 'ex' AND dropped IS NULL;
SELECT m('worlds expired') >= 1 AS expiry_counted;

-- every timed operation counted, its latencies in order (p50 <= p95 <= p99 <= max <= total); the
-- counters after them, with null latencies
SELECT metric, count >= 1 AS counted,
       p50_ms >= 0 AND p50_ms <= p95_ms AND p95_ms <= p99_ms AND p99_ms <= max_ms AND max_ms <= total_ms AS ordered,
       total_ms IS NULL AND p50_ms IS NULL AND p95_ms IS NULL AND p99_ms IS NULL AND max_ms IS NULL AS null_latencies
FROM worlds.show_metrics();
-- a failed operation adds no duration: the refused merges above counted nothing under merge
SELECT worlds.reset_metrics();
SELECT try($$select * from worlds.sql('merge world cf')$$);
SELECT m('merge') AS merges, m('conflicts') AS conflicts;

-- the view, for monitoring: a member of pg_monitor reads it (the same rows as SHOW METRICS); a role
-- that isn't is refused, though SHOW METRICS answers it; only admins reset
CREATE ROLE regress_mon IN ROLE pg_monitor;
CREATE ROLE regress_nomon;
SET SESSION AUTHORIZATION regress_mon;
SELECT metric, count FROM worlds.metrics WHERE metric IN ('merge', 'conflicts');
SELECT count(*) AS metrics FROM worlds.metrics;
SELECT try('select worlds.reset_metrics()');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION regress_nomon;
SELECT try('select count(*) from worlds.metrics');
SELECT try('select count(*) from worlds._metrics()');
SELECT try($$select worlds._metric_count('conflicts')$$);
SELECT count(*) AS metrics FROM worlds.show_metrics();
SELECT try('select worlds.reset_metrics()');
RESET SESSION AUTHORIZATION;
-- the view's columns and types
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'worlds.metrics'::regclass AND attnum > 0 ORDER BY attnum;

SELECT * FROM worlds.sql('drop world bot_w');
SELECT * FROM worlds.sql('drop world del_w');
SELECT * FROM worlds.sql('drop agent regress_mbot');
DROP ROLE regress_mon;
DROP ROLE regress_nomon;
