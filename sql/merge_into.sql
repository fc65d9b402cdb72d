-- MERGE ... INTO another world, and a nested world merged into its parent world (three-way against the
-- merged world's fork point); DIFF WORLD a TO b between any two worlds.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE t (id int PRIMARY KEY, v text, n int);
INSERT INTO t SELECT g, 'main', 0 FROM generate_series(1, 5) g;
-- a nested world merges into its parent world, not main
SELECT worlds.create_world('p');
SET worlds.world = p; UPDATE t SET v = 'p' WHERE id = 1; INSERT INTO t VALUES (6, 'p', 0); RESET worlds.world;
SELECT worlds.fork_world('p', 'c');
SET worlds.world = p; UPDATE t SET v = 'p later' WHERE id = 3; RESET worlds.world;
SET worlds.world = c;
UPDATE t SET n = 1 WHERE id = 1;
UPDATE t SET v = 'c' WHERE id = 2;
DELETE FROM t WHERE id = 6;
INSERT INTO t VALUES (7, 'c', 0);
RESET worlds.world;
SELECT "table", id, outcome, detail FROM worlds.merge_dry_run('c');
SELECT * FROM worlds.sql('merge world c');
SET worlds.world = p; SELECT * FROM t ORDER BY id; RESET worlds.world;
SELECT * FROM t ORDER BY id;
SELECT name, parent FROM worlds.show_worlds() ORDER BY name;
-- a conflict with the parent world's own later change
SELECT worlds.fork_world('p', 'c2');
SET worlds.world = c2; UPDATE t SET v = 'c2' WHERE id = 3; RESET worlds.world;
SET worlds.world = p; UPDATE t SET v = 'p again' WHERE id = 3; RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world c2')$$);
SELECT * FROM worlds.sql('merge world c2 using theirs');
SET worlds.world = p; SELECT v FROM t WHERE id = 3; RESET worlds.world;
-- INTO another live world: three-way against the merged world's fork point; it stays open
SELECT worlds.create_world('x');
SELECT worlds.create_world('y');
SET worlds.world = x; UPDATE t SET v = 'x' WHERE id = 4; RESET worlds.world;
SET worlds.world = y; UPDATE t SET v = 'y' WHERE id IN (4, 5); RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world y into x')$$);
SELECT * FROM worlds.sql('merge world y into x using ours');
SET worlds.world = x; SELECT * FROM t ORDER BY id; RESET worlds.world;
SELECT name FROM worlds.show_worlds() ORDER BY name;
SELECT try($$select * from worlds.sql('merge world y into y')$$);
-- DIFF WORLD a TO b: what turns a into b
SELECT * FROM worlds.sql('diff world x to y');
SELECT * FROM worlds.sql('diff world main to x');
SELECT * FROM worlds.sql('diff world x to main as sql');
SELECT id, change, columns FROM (SELECT j ->> 'id' AS id, j ->> 'change' AS change, j -> 'columns' AS columns FROM worlds.sql('diff world p to main') j) d;
-- SHOW HISTORY of the world merged into: the merge is its `merged ...` event, not a write of its own
SELECT j ->> 'event' AS event, j ->> 'rows' AS rows FROM worlds.sql('show history for world x') j;
-- foreign keys hold in the world merged into, as they do for a merge into main (23503, nothing merged)
CREATE TABLE fk_parent (id int PRIMARY KEY, name text);
CREATE TABLE fk_child (id int PRIMARY KEY, parent int REFERENCES fk_parent (id));
INSERT INTO fk_parent VALUES (1, 'root'), (2, 'other');
SELECT * FROM worlds.sql('create world fk_keep');
SELECT * FROM worlds.sql('create world fk_gone');
SELECT * FROM worlds.sql('create world fk_orphan');
SET worlds.world = fk_keep;
INSERT INTO fk_child VALUES (10, 1);
SET worlds.world = fk_gone;
DELETE FROM fk_parent WHERE id = 1;
SET worlds.world = fk_orphan;
INSERT INTO fk_child VALUES (11, 2);
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world fk_keep into fk_gone')$$);
SELECT j ->> 'outcome' AS outcome, j ->> 'detail' AS detail FROM worlds.sql('merge world fk_keep into fk_gone dry run') j WHERE j ->> 'outcome' = 'blocked';
SET worlds.world = fk_gone; SELECT * FROM fk_child ORDER BY id; RESET worlds.world;
SELECT * FROM worlds.sql('merge world fk_orphan into fk_gone');
-- the parent merged away under a child the other world has: 23503 the other way round
SET worlds.world = fk_keep; DELETE FROM fk_child; RESET worlds.world;
SELECT * FROM worlds.sql('create world fk_del');
SET worlds.world = fk_del; DELETE FROM fk_parent WHERE id = 2; RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world fk_del into fk_gone')$$);
SET worlds.world = fk_gone; SELECT * FROM fk_parent ORDER BY id; RESET worlds.world;
