-- DROP WORLD / DELETE WORLD / DROP BRANCH [IF EXISTS] name [CASCADE]
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders VALUES (1, 'new');
SELECT * FROM worlds.sql('create world agent_7');
SELECT * FROM worlds.sql('fork world agent_7 as agent_7b');
SELECT * FROM worlds.sql('fork world agent_7b as agent_7c');
SELECT * FROM worlds.sql('create world lonely');
SET worlds.world = lonely;
INSERT INTO orders VALUES (2, 'lonely');
RESET worlds.world;
-- without CASCADE: refused while it has live forks (2BP01)
SELECT try($$select * from worlds.sql('drop world agent_7')$$);
-- errors: 3D000 no such world, 0A000 main
SELECT try($$select * from worlds.sql('drop world nope')$$);
SELECT * FROM worlds.sql('drop world if exists nope');
SELECT try($$select * from worlds.sql('drop world main')$$);
-- the session's world: if it's dropped, the session carries on from its parent
SELECT * FROM worlds.sql('switch world agent_7c');
SELECT * FROM worlds.sql('drop world agent_7 cascade');
SHOW worlds.world;
SELECT name FROM worlds.show_worlds() ORDER BY name;
-- a dropped world's rows are gone; main never saw them
SELECT * FROM worlds.sql('delete world lonely');
SELECT * FROM orders ORDER BY id;
SELECT * FROM worlds.sql('create world b');
SELECT * FROM worlds.sql('drop branch b');
SELECT name FROM worlds.show_worlds() ORDER BY name;
-- a session that is in a world someone else drops moves to its parent at its next statement
SELECT * FROM worlds.sql('create world gone');
SET worlds.world = gone;
SELECT worlds.drop_world('gone');
SELECT count(*) FROM orders;
SHOW worlds.world;
