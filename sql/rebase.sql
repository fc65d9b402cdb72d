-- REBASE WORLD: the fork point moves up to main as it is now, the world's own changes kept on top.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE t (id int PRIMARY KEY, a text, b text);
INSERT INTO t SELECT g, 'a', 'b' FROM generate_series(1, 6) g;
SELECT * FROM worlds.sql('create world agent_7');
SET worlds.world = agent_7;
UPDATE t SET a = 'world' WHERE id IN (1, 2);
RESET worlds.world;
UPDATE t SET b = 'main' WHERE id IN (2, 3);
INSERT INTO t VALUES (7, 'main', 'main');
-- before the rebase, the world doesn't see main's later changes
SET worlds.world = agent_7;
SELECT * FROM t ORDER BY id;
RESET worlds.world;
-- a conflict nothing settles: 40001, nothing changed
UPDATE t SET a = 'main' WHERE id = 1;
SELECT try($$select * from worlds.sql('rebase world agent_7')$$);
SELECT * FROM worlds.sql('rebase world agent_7 by columns using theirs');
SET worlds.world = agent_7;
SELECT * FROM t ORDER BY id;
RESET worlds.world;
-- its diff and merge are now against main as it was at the rebase
SELECT id, change, columns FROM worlds.diff('agent_7');
SELECT * FROM worlds.sql('merge world agent_7');
SELECT * FROM t ORDER BY id;
-- refused: INTO/ONLY/CONFIRM/DRY RUN (42601), main (0A000), inside a transaction (25001), AT VERSION (55000)
SELECT * FROM worlds.sql('create world r');
SELECT try($$select * from worlds.sql('rebase world r into main')$$);
SELECT try($$select * from worlds.sql('rebase world r only tables (t)')$$);
SELECT try($$select * from worlds.sql('rebase world r dry run')$$);
SELECT try($$select * from worlds.sql('rebase world main')$$);
SELECT try($$select * from worlds.sql('rebase world r at version 7')$$);
BEGIN;
SELECT try($$select * from worlds.sql('rebase world r')$$);
ROLLBACK;
SELECT worlds.rebase('r');
-- a world of a world rebases onto its parent as the parent is now; a world with live forks can't
CREATE TABLE n (id int PRIMARY KEY, v text);
INSERT INTO n SELECT g, 'main' FROM generate_series(1, 4) g;
SELECT * FROM worlds.sql('create world p');
SET worlds.world = p;
UPDATE n SET v = 'p1' WHERE id = 1;
RESET worlds.world;
SELECT * FROM worlds.sql('create world c from p');
SELECT left(try($$select * from worlds.sql('rebase world p')$$), 5) AS sqlstate;
SET worlds.world = p;
UPDATE n SET v = 'p2' WHERE id IN (1, 2);
SET worlds.world = c;
UPDATE n SET v = 'c' WHERE id IN (2, 3);
SELECT * FROM n ORDER BY id;
RESET worlds.world;
SELECT left(try($$select * from worlds.sql('rebase world c')$$), 5) AS sqlstate;
SELECT * FROM worlds.sql('rebase world c using ours');
SET worlds.world = c;
SELECT * FROM n ORDER BY id;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world c');
SET worlds.world = p;
SELECT * FROM n ORDER BY id;
RESET worlds.world;
-- rows both sides added under one unique value: refused (23505), nothing changed
CREATE TABLE customers (id int PRIMARY KEY, email text UNIQUE);
INSERT INTO customers VALUES (1, 'a@x');
SELECT * FROM worlds.sql('create world dup');
SET worlds.world = dup; INSERT INTO customers VALUES (10, 'z@x'); RESET worlds.world;
INSERT INTO customers VALUES (11, 'z@x');
SELECT try($$select * from worlds.sql('rebase world dup')$$);
SET worlds.world = dup;
SELECT * FROM customers ORDER BY id;
RESET worlds.world;
SELECT version FROM worlds.world WHERE name = 'dup';
-- a settled row that breaks a CHECK of the table (each side kept it): 23514 in the table's words
CREATE TABLE rng (id int PRIMARY KEY, lo int, hi int, CHECK (lo <= hi));
INSERT INTO rng VALUES (1, 1, 10);
SELECT * FROM worlds.sql('create world rng_w');
SET worlds.world = rng_w; UPDATE rng SET lo = 5 WHERE id = 1; RESET worlds.world;
UPDATE rng SET hi = 3 WHERE id = 1;
SELECT try($$select * from worlds.sql('rebase world rng_w by columns')$$);
