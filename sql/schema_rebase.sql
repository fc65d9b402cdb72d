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

-- a world that changed main's table (its copy: schema_alter) takes in main's rows since the fork,
-- run through its statements (a USING converts them as it converted the world's); a row changed on both
-- sides is 40001
CREATE TABLE acct (id int PRIMARY KEY, owner text, bal numeric(10,2) NOT NULL DEFAULT 0);
INSERT INTO acct SELECT g, 'o' || g, g * 10 FROM generate_series(1, 5) g;
SELECT * FROM worlds.sql('create world cents');
SET worlds.world = cents;
ALTER TABLE acct ALTER COLUMN bal TYPE bigint USING (bal * 100)::bigint;
ALTER TABLE acct ADD COLUMN note text DEFAULT 'n';
UPDATE acct SET bal = bal + 1 WHERE id = 2;
RESET worlds.world;
UPDATE acct SET bal = 33.33 WHERE id = 3;
INSERT INTO acct VALUES (6, 'new', 6.5);
DELETE FROM acct WHERE id = 5;
SELECT * FROM worlds.sql('rebase world cents');
SET worlds.world = cents;
SELECT * FROM acct ORDER BY id;
RESET worlds.world;
UPDATE acct SET owner = 'later' WHERE id = 1;
SELECT * FROM worlds.sql('merge world cents');
SELECT * FROM acct ORDER BY id;
SELECT * FROM worlds.sql('create world two_sides');
SET worlds.world = two_sides;
ALTER TABLE acct ADD COLUMN z int DEFAULT 0;
UPDATE acct SET z = 1 WHERE id = 1;
RESET worlds.world;
UPDATE acct SET owner = 'main' WHERE id = 1;
SELECT try($$SELECT * FROM worlds.sql('rebase world two_sides')$$);
