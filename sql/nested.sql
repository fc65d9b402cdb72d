-- A world forked from a world sees that parent as of the fork; the parent's later writes stay invisible.
CREATE EXTENSION pg_worlds;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t VALUES (1, 'main'), (2, 'main'), (3, 'main');
SELECT * FROM worlds.sql('create world parent');
SET worlds.world = parent;
UPDATE t SET v = 'parent' WHERE id = 1;
INSERT INTO t VALUES (4, 'parent');
RESET worlds.world;
SELECT * FROM worlds.sql('fork world parent as child');
-- later writes: in the parent, and in main
SET worlds.world = parent;
UPDATE t SET v = 'parent later' WHERE id = 2;
DELETE FROM t WHERE id = 4;
RESET worlds.world;
UPDATE t SET v = 'main later' WHERE id = 3;
SET worlds.world = child;
SELECT * FROM t ORDER BY id;
UPDATE t SET v = 'child' WHERE id = 1;
SELECT * FROM t ORDER BY id;
SET worlds.world = parent;
SELECT * FROM t ORDER BY id;
RESET worlds.world;
SELECT * FROM t ORDER BY id;
SELECT name, parent, depth FROM worlds.show_worlds() ORDER BY depth;
SELECT * FROM worlds.show_branches() ORDER BY name;
-- DIFF WORLD child: what it changed since its fork, against its parent as of then (the parent's own
-- changes are not the child's; the parent's later ones don't show)
SET worlds.world = child;
UPDATE t SET v = 'child again' WHERE id = 2;
RESET worlds.world;
SELECT j ->> 'table' AS t, j ->> 'id' AS id, j ->> 'change' AS change, j -> 'before' ->> 'v' AS before, j -> 'after' ->> 'v' AS after
FROM worlds.sql('diff world child') j ORDER BY 2;
