-- A new key in a world: refused with 23505, as Postgres refuses it, when the world sees a row with that key
-- (main's row as of the fork, a before-image of a row main changed since, the world's own or its parent's
-- version), and taken when it doesn't (main created it after the fork, the world deleted it). Integer keys
-- of every width are checked by index probes, other keys by queries: both must say the same.
CREATE EXTENSION pg_worlds;
CREATE TABLE k2 (id int2 PRIMARY KEY, v text);
CREATE TABLE k4 (id int4 PRIMARY KEY, v text);
CREATE TABLE k8 (id int8 PRIMARY KEY, v text);
CREATE TABLE kt (id text PRIMARY KEY, v text);
INSERT INTO k2 SELECT g, 'm' FROM generate_series(1, 10) g;
INSERT INTO k4 SELECT g, 'm' FROM generate_series(1, 10) g;
INSERT INTO k8 SELECT g, 'm' FROM generate_series(1, 10) g;
INSERT INTO kt SELECT g::text, 'm' FROM generate_series(1, 10) g;
SELECT * FROM worlds.sql('create world w');
-- main moves on after the fork
DELETE FROM k4 WHERE id = 3;
UPDATE k4 SET v = 'm2' WHERE id = 4;
INSERT INTO k4 VALUES (11, 'main');
DELETE FROM kt WHERE id = '3';
UPDATE kt SET v = 'm2' WHERE id = '4';
INSERT INTO kt VALUES ('11', 'main');
SET worlds.world = w;
-- main's rows as of the fork, every key width
INSERT INTO k2 VALUES (1, 'x');
INSERT INTO k4 VALUES (1, 'x');
INSERT INTO k8 VALUES (1, 'x');
INSERT INTO kt VALUES ('1', 'x');
-- rows main deleted or updated since the fork: the world still sees them as they were
INSERT INTO k4 VALUES (3, 'x');
INSERT INTO k4 VALUES (4, 'x');
INSERT INTO kt VALUES ('3', 'x');
INSERT INTO kt VALUES ('4', 'x');
-- a row main created after the fork: not the world's, its key is free here; then it is taken
INSERT INTO k4 VALUES (11, 'w');
INSERT INTO k4 VALUES (11, 'w2');
INSERT INTO kt VALUES ('11', 'w');
INSERT INTO kt VALUES ('11', 'w2');
-- a key the world deleted is free again, once
DELETE FROM k4 WHERE id = 5;
INSERT INTO k4 VALUES (5, 'again');
INSERT INTO k4 VALUES (5, 'again2');
DELETE FROM kt WHERE id = '5';
INSERT INTO kt VALUES ('5', 'again');
INSERT INTO kt VALUES ('5', 'again2');
-- one statement, one key twice
INSERT INTO k4 VALUES (20, 'a'), (20, 'b');
INSERT INTO kt VALUES ('20', 'a'), ('20', 'b');
INSERT INTO k4 VALUES (21, 'a'), (22, 'b');
-- one transaction: the key its earlier statement wrote, deleted then written again
BEGIN;
INSERT INTO k4 VALUES (30, 'a');
INSERT INTO k4 VALUES (30, 'b');
ROLLBACK;
BEGIN;
DELETE FROM k4 WHERE id = 6;
INSERT INTO k4 VALUES (6, 'b');
COMMIT;
WITH d AS (DELETE FROM k4 WHERE id = 7 RETURNING id) INSERT INTO k4 SELECT id, 'cte' FROM d;
BEGIN ISOLATION LEVEL REPEATABLE READ;
INSERT INTO k4 VALUES (40, 'rr');
INSERT INTO k4 VALUES (40, 'rr');
ROLLBACK;
-- the failed statements left nothing
SELECT * FROM k4 ORDER BY id;
SELECT * FROM kt ORDER BY id::int;
-- a world forked from w sees w's versions
SELECT * FROM worlds.sql('create world c from w');
SET worlds.world = c;
INSERT INTO k4 VALUES (21, 'child');
INSERT INTO k4 VALUES (5, 'child');
INSERT INTO k4 VALUES (3, 'child');
DELETE FROM k4 WHERE id = 21;
INSERT INTO k4 VALUES (21, 'child');
SELECT * FROM k4 WHERE id IN (3, 5, 21) ORDER BY id;
-- and main is as it was: the worlds' keys are theirs
RESET worlds.world;
SELECT * FROM k4 WHERE id IN (3, 4, 5, 11, 20, 21) ORDER BY id;
