-- pg_worlds' own SQL text doesn't depend on the settings a session may change (issue 41): DIFF, DIFF AS
-- SQL, MERGE ... DRY RUN, MERGE (planned and fast-forward), REBASE and AS OF give under odd settings what
-- they give under the defaults, on columns named a\b, it's, "quoted", ünï and a 63-byte name, and values
-- whose text the settings change (float8, date, interval, bytea). TimeZone is left to the session (every
-- timestamptz pg_worlds prints carries its offset); DateStyle's order is the session's (a moment the user
-- writes, '06/12/2026', is read in its order).
CREATE EXTENSION pg_worlds;
CREATE TABLE s (id int PRIMARY KEY, "a\b" text, "it's" text, """quoted""" text, "ünï" text, "lüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü" float8,
                d date, i interval, b bytea, n numeric, f real);
INSERT INTO s VALUES
    (1, 'a1', 'i1', 'q1', 'u1', 0.1234567890123456, '2026-12-06', '1 day 02:03:04', '\x01ff', 1.5, 0.3),
    (2, 'a2', 'i2', 'q2', 'u2', 2.5, '2026-01-31', '-1 day +02:00:00', '\x00', 2, 1.1),
    (3, 'a3', 'i3', 'q3', 'u3', 3.5, '2026-03-01', '3 mons', '\x', 3, 2.2),
    (4, 'a4', 'i4', 'q4', 'u4', 4.5, '2026-04-01', '00:00:01.5', '\x5c', 4, 3.3);
CREATE TABLE s2 (id int PRIMARY KEY, "a\b" text, "lüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü" float8, i interval);
INSERT INTO s2 VALUES (1, 'x', 1.0, '1 hour');
CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS at;
-- w_plan changes s (main changes s too after the fork: a planned merge); w_ff changes s2 only (main
-- leaves it: fast-forward); w_reb changes row 4, main another column of it (REBASE BY COLUMNS)
SELECT * FROM worlds.sql('create world w_plan');
SELECT * FROM worlds.sql('create world w_ff');
SELECT * FROM worlds.sql('create world w_reb');
SET worlds.world = w_plan;
UPDATE s SET "a\b" = 'it''s a\b', "it's" = 'two', """quoted""" = '"q"', "ünï" = 'ünï', "lüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü" = 0.9876543210987654,
             d = '2026-01-02', i = '-3 days +04:05:06', b = '\x0203', n = 2.25, f = 0.1 WHERE id = 1;
DELETE FROM s WHERE id = 3;
INSERT INTO s VALUES (10, 'a\10', 'new', '"', 'ü', 1e-300, '1999-12-31', '1 year 2 mons', '\xdeadbeef', 10.01, 1e-30);
SET worlds.world = w_ff;
UPDATE s2 SET "a\b" = 'y\z', "lüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü" = 0.30000000000000004, i = '-1 day -00:00:01' WHERE id = 1;
SET worlds.world = w_reb;
UPDATE s SET "it's" = 'reb''s \n' WHERE id = 4;
RESET worlds.world;
UPDATE s SET "ünï" = 'main', "lüüüüüüüüüüüüüüüüüüüüüüüüüüüüüüü" = 0.1 + 0.2 WHERE id = 2;
UPDATE s SET "ünï" = 'main''s' WHERE id = 4;
-- what each statement gives under the defaults
-- (their NOTICEs aside: one names the moment, which differs each run)
CREATE FUNCTION results() RETURNS TABLE (what text, j jsonb) LANGUAGE sql SET client_min_messages = warning AS $$
    SELECT 'diff', j FROM worlds.sql('diff world w_plan') j
    UNION ALL SELECT 'diff as sql', j FROM worlds.sql('diff world w_plan as sql') j
    UNION ALL SELECT 'diff w_ff', j FROM worlds.sql('diff world w_ff') j
    UNION ALL SELECT 'dry run', j FROM worlds.sql('merge world w_plan dry run') j
    UNION ALL SELECT 'dry run by columns', j FROM worlds.sql('merge world w_reb by columns dry run') j
    UNION ALL SELECT 'as of', j FROM worlds.sql(format('select * from s as of %L order by id', (SELECT at FROM t0))) j
    UNION ALL SELECT 'diff of a moment', j FROM worlds.sql(format('diff world %I to w_plan', 'main@' || (SELECT at FROM t0))) j
$$;
CREATE TEMP TABLE r0 AS SELECT * FROM results();
-- the dry run's TARGET (what it saw of main, hashed), which the merge below under odd settings is given
SELECT count(*) FROM worlds.sql('merge world w_plan dry run');
SELECT what, j FROM r0 ORDER BY what, j::text;
-- the same under settings any role may set
SET standard_conforming_strings = off;
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = sql_standard;
SET extra_float_digits = -3;
SET bytea_output = escape;
CREATE TEMP TABLE r1 AS SELECT * FROM results();
RESET ALL;
SELECT 'only under the defaults' AS "differs", * FROM (SELECT * FROM r0 EXCEPT ALL SELECT * FROM r1) x
UNION ALL SELECT 'only under odd settings', * FROM (SELECT * FROM r1 EXCEPT ALL SELECT * FROM r0) y;
-- DIFF AS SQL, written and run under the odd settings, makes main what the world is (rolled back)
CREATE TEMP TABLE in_world AS SELECT to_jsonb(x) AS r FROM s x WHERE false;
SET worlds.world = w_plan;
INSERT INTO in_world SELECT to_jsonb(x) FROM s x;
RESET worlds.world;
BEGIN;
SET LOCAL standard_conforming_strings = off;
SET LOCAL DateStyle = 'SQL, DMY';
SET LOCAL IntervalStyle = sql_standard;
SET LOCAL extra_float_digits = -3;
SET LOCAL bytea_output = escape;
DO $$
DECLARE q text;
BEGIN
    FOR q IN SELECT j ->> 'sql' FROM worlds.sql('diff world w_plan as sql') j LOOP
        EXECUTE q;
    END LOOP;
END $$;
-- (main changed rows 2 and 4 since the fork: they are the rows that differ)
RESET ALL;
SELECT r ->> 'id' AS id FROM (SELECT * FROM in_world EXCEPT SELECT to_jsonb(x) FROM s x) d ORDER BY 1;
ROLLBACK;
-- MERGE (planned), MERGE (fast-forward) and REBASE under the odd settings
SET standard_conforming_strings = off;
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = sql_standard;
SET extra_float_digits = -3;
SET bytea_output = escape;
SELECT * FROM worlds.sql('merge world w_plan at version 3 target 3476566475148428');
SELECT * FROM worlds.sql('merge world w_ff');
SELECT * FROM worlds.sql('rebase world w_reb by columns');
-- AS OF, the moment written in the session's DateStyle (day first)
CREATE TEMP TABLE as_of_odd AS SELECT j FROM worlds.sql(format('select * from s as of %L order by id', (SELECT at FROM t0))) j;
SELECT (SELECT at FROM t0)::text LIKE '__/__/____ %' AS written_day_first;
RESET ALL;
SELECT count(*) AS as_of_differs FROM (SELECT j FROM as_of_odd EXCEPT ALL SELECT j FROM r0 WHERE what = 'as of') x;
-- every value landed exactly as the world wrote it
SELECT * FROM s ORDER BY id;
SELECT * FROM s2;
SET worlds.world = w_reb;
SELECT id, "it's", "ünï" FROM s WHERE id = 4;
RESET worlds.world;
