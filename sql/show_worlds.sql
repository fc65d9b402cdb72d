-- SHOW WORLDS (every column) and SHOW BRANCHES (changes = rows changed since the fork).
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
CREATE TABLE orders (id int PRIMARY KEY, status text);
CREATE TABLE log (at int, msg text);
INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 5) g;
SELECT * FROM worlds.sql('create world agent_7 with (task = 42)');
SELECT * FROM worlds.sql('fork world agent_7 as agent_7b');
-- the spec's columns, in order
SELECT string_agg(attname, ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'worlds.world_row'::regclass;
SELECT name, id = 'main' AS id_is_main, parent, depth, created IS NULL AS created_null, version, meta, owner, expires, active IS NULL AS active_null, pinned
FROM worlds.show_worlds() ORDER BY depth, name;
SELECT j ? 'name' AND j ? 'id' AND j ? 'parent' AND j ? 'depth' AND j ? 'created' AND j ? 'version' AND j ? 'meta'
       AND j ? 'owner' AND j ? 'expires' AND j ? 'active' AND j ? 'pinned' AS all_columns
FROM worlds.sql('show worlds') j LIMIT 1;
-- version moves on with each write statement in the world
SET worlds.world = agent_7;
UPDATE orders SET status = 'paid' WHERE id <= 2;
INSERT INTO orders VALUES (6, 'x');
DELETE FROM orders WHERE id = 3;
INSERT INTO log VALUES (1, 'hello'), (2, 'again');
RESET worlds.world;
SELECT name, version FROM worlds.show_worlds() ORDER BY depth, name;
SELECT * FROM worlds.sql('show branches');
SELECT * FROM worlds.show_branches() ORDER BY name;
-- changes counts rows as DIFF lists them: a row inserted and deleted again, or set back, is no change
SET worlds.world = agent_7;
INSERT INTO orders VALUES (7, 'gone soon');
DELETE FROM orders WHERE id = 7;
UPDATE orders SET status = 'x' WHERE id = 4;
UPDATE orders SET status = 'new' WHERE id = 4;
UPDATE orders SET status = 'paid' WHERE id = 1;
RESET worlds.world;
SELECT name, changes FROM worlds.show_branches() ORDER BY name;
SELECT count(*) AS diff_rows FROM worlds.sql('diff world agent_7');
-- a write whose first row was rolled back by a caught exception still moves the version (and takes the
-- lock again): AT VERSION of the version before it is refused
SELECT * FROM worlds.sql('create world ex3');
SET worlds.world = ex3;
INSERT INTO orders VALUES (820, 'first');
DO $$ BEGIN
  BEGIN INSERT INTO orders VALUES (821, 'sub'); RAISE EXCEPTION 'boom'; EXCEPTION WHEN others THEN NULL; END;
  UPDATE orders SET status = 'changed after review' WHERE id = 820;
END $$;
DO $$ BEGIN
  BEGIN INSERT INTO orders VALUES (820, 'dup'); EXCEPTION WHEN unique_violation THEN NULL; END;
  INSERT INTO orders VALUES (822, 'after the duplicate');
END $$;
RESET worlds.world;
SELECT version FROM worlds.show_worlds() WHERE name = 'ex3';
SELECT event, rows FROM worlds.show_history('ex3') ORDER BY at;
SELECT try($$select * from worlds.sql('merge world ex3 at version 1')$$);
SELECT * FROM worlds.sql('merge world ex3 at version 3');
SELECT * FROM orders WHERE id >= 820 ORDER BY id;
-- any role may run the statements (the catalog reads are pg_worlds' own)
CREATE ROLE sw_plain;
SET ROLE sw_plain;
SELECT count(*) > 0 AS listed FROM worlds.sql('show worlds');
RESET ROLE;
DROP ROLE sw_plain;
