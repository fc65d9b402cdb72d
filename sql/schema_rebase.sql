-- REBASE of a world that changed schema: it takes in main's rows (and main's new tables) since its fork;
-- its own objects stay its own; an object main made under one of their names is a conflict (40001).
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE accounts (id int PRIMARY KEY, owner text);
INSERT INTO accounts VALUES (1, 'ann'), (2, 'bob');
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
CREATE TABLE notes (id int PRIMARY KEY, account int, body text);
INSERT INTO notes VALUES (1, 1, 'hi');
UPDATE accounts SET owner = 'ann w' WHERE id = 1;
RESET worlds.world;
-- main moves on: a row, and a table of its own
UPDATE accounts SET owner = 'bob m' WHERE id = 2;
CREATE TABLE audit (id int PRIMARY KEY, what text);
INSERT INTO audit VALUES (1, 'main');
SELECT * FROM worlds.sql('rebase world w');
SET worlds.world = w;
SELECT * FROM accounts ORDER BY id;
SELECT * FROM notes;
SELECT * FROM audit;
RESET worlds.world;
SELECT r->>'table' AS "table", r->>'id' AS id, r->>'change' AS change FROM worlds.sql('diff world w') AS d(r);
-- main makes a table under the name the world used: rebase and merge both refuse (40001), nothing changed
CREATE TABLE notes (id int PRIMARY KEY);
SELECT try($$SELECT * FROM worlds.sql('rebase world w')$$);
SELECT try($$SELECT * FROM worlds.sql('merge world w')$$);
SET worlds.world = w;
SELECT * FROM notes;
RESET worlds.world;
DROP TABLE notes;
SELECT * FROM worlds.sql('merge world w');
SELECT * FROM notes;
SELECT * FROM accounts ORDER BY id;
