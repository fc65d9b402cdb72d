-- SWITCH WORLD / SWITCH BRANCH / USE WORLD / USE BRANCH / USE name, by name or ID.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text);
INSERT INTO orders VALUES (7, 'new'), (8, 'new');
SELECT * FROM worlds.sql('create world agent_7');
SELECT * FROM worlds.sql('switch world agent_7');
SHOW worlds.world;
UPDATE orders SET status = 'paid' WHERE id = 7;
SELECT * FROM orders ORDER BY id;
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM orders ORDER BY id;
SELECT * FROM worlds.sql('use world agent_7');
SELECT status FROM orders WHERE id = 7;
SELECT * FROM worlds.sql('USE BRANCH main');
SELECT * FROM worlds.sql('use agent_7;');
SELECT * FROM worlds.sql('SWITCH BRANCH main');
-- by ID, from SHOW WORLDS
SELECT try(format('select * from worlds.sql(%L)', format('use world %L', (SELECT id FROM worlds.show_worlds() WHERE name = 'agent_7'))));
SELECT status FROM orders WHERE id = 7;
SELECT worlds.switch_world(name => 'main');
SELECT status FROM orders WHERE id = 7;
-- SET works too, as does a connection string's options=-c worlds.world=...
SET worlds.world = agent_7;
SELECT status FROM orders WHERE id = 7;
RESET worlds.world;
-- errors: 3D000 no such world; 25001 inside a transaction block
SELECT try($$select * from worlds.sql('switch world nope')$$);
BEGIN;
SELECT try($$select * from worlds.sql('switch world agent_7')$$);
ROLLBACK;
-- a session set to a world that doesn't exist fails its queries with 3D000
SET worlds.world = ghost;
SELECT try('select * from orders');
-- ... and can still leave it by any statement of the spec (they read only pg_worlds' catalog)
SELECT * FROM worlds.sql('use main');
SHOW worlds.world;
SELECT count(*) FROM orders;
SET worlds.world = ghost;
SELECT * FROM worlds.sql('switch world agent_7');
SELECT status FROM orders WHERE id = 7;
SET worlds.world = ghost;
SELECT name FROM worlds.sql('show worlds') r, jsonb_to_record(r) AS x(name text) ORDER BY 1;
RESET worlds.world;
-- the same for a role with no rights on pg_worlds' catalog
CREATE ROLE sw_role;
GRANT SELECT ON orders TO sw_role;
SET ROLE sw_role;
SET worlds.world = ghost;
SELECT try('select * from orders');
RESET worlds.world;
RESET ROLE;
DROP OWNED BY sw_role;
DROP ROLE sw_role;
SELECT count(*) FROM orders;
