-- SIMULATE n WORLDS and REPLAY WORLD, from the spec's pricing example and its table of errors.
CREATE EXTENSION IF NOT EXISTS pg_worlds;
CREATE TABLE prices (sku int PRIMARY KEY, p numeric NOT NULL, sold int NOT NULL);
INSERT INTO prices SELECT g, 10, g % 7 + 1 FROM generate_series(1, 300) g;
CREATE TABLE sim_log (i bigint, s bigint);
\set VERBOSITY terse
-- the spec's example, at 20 worlds: forks trial_0 .. trial_19 from one moment of main, runs the script in
-- each with $1 = its index and $2 = its seed, scores each, keeps the best 3 and drops the rest
SELECT j ->> 'world' AS world, (j ->> 'index')::int AS index, (j ->> 'seed')::int AS seed,
       round((j ->> 'score')::numeric, 6) AS score, j ->> 'error' AS error, (j ->> 'kept')::bool AS kept
FROM worlds.sql($q$simulate 20 worlds from main as trial
  run $$update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $1 % 100$$
  score $$select sum(p * sold) from prices$$
  keep 3 seed 42;$q$) j;
-- the others are gone when it returns (the catalog itself, not SHOW WORLDS, which sweeps a stray run's)
SELECT count(*) AS live_trial_worlds FROM worlds.world WHERE dropped IS NULL AND name LIKE 'trial%';
-- the kept worlds, best first, hold their inputs in metadata sim; main is untouched
SELECT name, meta -> 'sim' ->> 'index' AS index, meta -> 'sim' ->> 'seed' AS seed, meta -> 'sim' ->> 'base' AS base,
       meta -> 'sim' ->> 'score_query' AS score_query, (meta -> 'sim' ->> 'at') IS NOT NULL AS has_at
FROM worlds.show_worlds() WHERE name LIKE 'trial%' ORDER BY name;
SELECT sum(p * sold) AS main_unchanged FROM prices;
-- deterministic: the same SIMULATE under another prefix gives the same scores
CREATE TEMP TABLE again AS
SELECT (j ->> 'index')::int AS index, (j ->> 'score')::float8 AS score
FROM worlds.sql($q$simulate 20 worlds from main as again
  run $$update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $1 % 100$$
  score $$select sum(p * sold) from prices$$ keep all seed 42$q$) j;
SELECT count(*) AS worlds, count(DISTINCT score) AS distinct_scores FROM again;
SELECT w.name, (w.meta -> 'sim' ->> 'score')::float8 = a.score AS same_score
FROM worlds.show_worlds() w JOIN again a ON a.index = (w.meta -> 'sim' ->> 'index')::int
WHERE w.name LIKE 'trial%' ORDER BY w.name;
-- REPLAY WORLD: the same index and seed from the same moment: identical, and nothing kept
SELECT j ->> 'world' AS world, j ->> 'replay' AS replay, j ->> 'identical' AS identical,
       j ->> 'rows_differing' AS rows_differing, j ->> 'score' = j ->> 'recorded_score' AS same_score, j ->> 'error' AS error
FROM (SELECT name FROM worlds.show_worlds() WHERE name LIKE 'trial%' ORDER BY name LIMIT 1) w,
     LATERAL worlds.sql('replay world ' || w.name) j;
-- main writes after the simulation: a replay still starts from the simulation's moment
UPDATE prices SET p = p + 1 WHERE sku <= 10;
SELECT j ->> 'identical' AS identical_after_main_moved
FROM (SELECT name FROM worlds.show_worlds() WHERE name LIKE 'trial%' ORDER BY name LIMIT 1) w,
     LATERAL worlds.sql('replay world ' || w.name || ' as kept_replay') j;
SELECT name, parent FROM worlds.show_worlds() WHERE name = 'kept_replay';
-- gen_random_uuid() in a script is seeded as random() is: the same UUIDs in each run
CREATE TABLE ids (i bigint, u uuid);
CREATE TEMP TABLE u1 AS SELECT (j ->> 'index')::int AS i, j ->> 'score' AS s FROM worlds.sql($q$simulate 3 worlds as u1
  run $$insert into ids select $1, gen_random_uuid()$$ score $$select ('x' || substr(u::text, 1, 7))::bit(28)::int from ids$$$q$) j;
CREATE TEMP TABLE u2 AS SELECT (j ->> 'index')::int AS i, j ->> 'score' AS s FROM worlds.sql($q$simulate 3 worlds as u2
  run $$insert into ids select $1, gen_random_uuid()$$ score $$select ('x' || substr(u::text, 1, 7))::bit(28)::int from ids$$$q$) j;
SELECT count(*) AS same_uuids, count(DISTINCT u1.s) AS distinct_uuids FROM u1 JOIN u2 USING (i) WHERE u1.s = u2.s;
-- DESC by default, ASC on request; $1 and $2 reach the script; ties go to the lower index
SELECT j ->> 'world' AS world, j ->> 'score' AS score, j ->> 'kept' AS kept
FROM worlds.sql($q$simulate 4 worlds as lo run $$insert into sim_log values ($1, $2)$$
  score $$select i * 10 + s from sim_log$$ asc keep 2 seed 100$q$) j;
SELECT count(*) AS main_sim_log_rows FROM sim_log;
-- a world whose script fails (its SQLSTATE in error, score null, last), and one that tries to leave its
-- world (0A000): the others go on
SELECT j ->> 'world' AS world, j ->> 'score' AS score, j ->> 'error' AS error, j ->> 'kept' AS kept
FROM worlds.sql($q$simulate 4 worlds as f
  run $$select case $1 when 1 then 1 / 0 when 2 then (select count(*) from worlds.sql('drop world trial_0'))::int else 0 end$$
  score $$select $1 * 1.5$$$q$) j;
SELECT j ->> 'world' AS world, j ->> 'error' AS error
FROM worlds.sql($q$simulate 3 worlds as g run $$select case $1 when 0 then set_config('work_mem', '1MB', false)
  when 1 then (select worlds.create_world('sneak'))::text else 'x' end$$ score 'select 1'$q$) j;
SELECT j ->> 'world' AS world, j ->> 'error' AS error
FROM worlds.sql($q$simulate 1 worlds as h run 'set work_mem = ''2MB''' score 'select 1'$q$) j;
SELECT count(*) AS sneak FROM worlds.show_worlds() WHERE name = 'sneak';
-- a score that gives no number fails the world (22004 / 22023)
SELECT j ->> 'error' AS error FROM worlds.sql($q$simulate 1 worlds as s1 run 'select 1' score 'select null::int'$q$) j;
SELECT j ->> 'error' AS error FROM worlds.sql($q$simulate 1 worlds as s2 run 'select 1' score $$select 'abc'$$$q$) j;
-- the spec's errors; nothing is forked
SELECT * FROM worlds.sql($q$simulate 0 worlds as z run 'select 1' score 'select 1'$q$);
SELECT * FROM worlds.sql($q$simulate 1048577 worlds as z run 'select 1' score 'select 1'$q$);
SELECT * FROM worlds.sql($q$simulate 10 worlds as trial run 'select 1' score 'select 1'$q$);
SELECT * FROM worlds.sql($q$simulate 2 worlds as z run 'select 1' score 'update prices set p = 1'$q$);
SELECT * FROM worlds.sql($q$simulate 2 worlds as z run 'select 1' score 'select 1; select 2'$q$);
SELECT * FROM worlds.sql('simulate 2 worlds as z run ''' || repeat('x', 33000) || ''' score ''select 1''');
SET worlds.max_worlds = 10;
SELECT * FROM worlds.sql($q$simulate 50 worlds as z run 'select 1' score 'select 1'$q$);
SELECT count(*) AS z_worlds FROM worlds.show_worlds() WHERE name LIKE 'z%';
RESET worlds.max_worlds;
BEGIN;
SELECT * FROM worlds.sql($q$simulate 2 worlds as z run 'select 1' score 'select 1'$q$);
ROLLBACK;
SELECT worlds.create_world('plain');
SELECT * FROM worlds.sql('replay world plain');
SELECT * FROM worlds.sql('replay world no_such_world');
SELECT * FROM worlds.sql('simulate 2 worlds as z run ''select 1'' score ''select 1'' keep 1 keep 2');
-- an agent: not enough room under its own max_worlds (42501); a script it may not run fails its world
SELECT j ->> 'name' AS agent FROM worlds.sql('create agent sim_bot with (can = ''read,fork,write_own'', max_worlds = 3)') j;
GRANT SELECT, UPDATE ON prices TO sim_bot;
SET SESSION AUTHORIZATION sim_bot;
SELECT * FROM worlds.sql($q$simulate 5 worlds as ag run 'select 1' score 'select 1'$q$);
SELECT j ->> 'world' AS world, j ->> 'score' AS score, j ->> 'kept' AS kept
FROM worlds.sql($q$simulate 5 worlds as ag run $$update prices set p = p + $1 where sku = 1$$
  score $$select p from prices where sku = 1$$ keep 1 threads 1$q$) j;
SELECT worlds.drop_world('ag_4');
-- (and in background workers, which log in as the agent: KEEP 1 with 2 threads needs room for 3)
SELECT j ->> 'world' AS world, j ->> 'score' AS score, j ->> 'kept' AS kept
FROM worlds.sql($q$simulate 4 worlds as ah run $$update prices set p = p + $1 where sku = 1$$
  score $$select p from prices where sku = 1$$ keep 1 threads 2$q$) j;
SELECT name, owner FROM worlds.show_worlds() WHERE name LIKE 'ah\_%' ORDER BY name;
RESET SESSION AUTHORIZATION;
SELECT worlds.drop_world('ah_3');
SELECT * FROM worlds.sql('drop agent sim_bot');
-- clean up
SELECT count(*) FROM (SELECT worlds.drop_world(name) FROM worlds.show_worlds() WHERE name <> 'main') d;
