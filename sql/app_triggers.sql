-- The app's BEFORE ROW triggers on a tracked table fire on the rows a session writes in a world, as they
-- fire on main's rows: the same statements on an identical table in main must leave the same rows.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION items_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF tg_op = 'DELETE' THEN
    IF old.name = 'keep' THEN RETURN NULL; END IF;   -- a row it protects stays
    RETURN old;
  END IF;
  new.slug := lower(replace(new.name, ' ', '-'));
  new.updated_at := '2000-01-01';
  IF new.price < 0 THEN RETURN NULL; END IF;         -- a row it refuses isn't written
  RETURN new;
END $$;
CREATE FUNCTION items_reprice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN new.name := new.name || ' (repriced)'; RETURN new; END $$;
CREATE TABLE items (id int PRIMARY KEY, name text, slug text, price int, updated_at timestamptz, gone int);
ALTER TABLE items DROP COLUMN gone;
CREATE TABLE items_main (LIKE items);
ALTER TABLE items_main ADD PRIMARY KEY (id);
CREATE TRIGGER touch BEFORE INSERT OR UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION items_touch();
CREATE TRIGGER reprice BEFORE UPDATE OF price ON items FOR EACH ROW WHEN (old.price IS DISTINCT FROM new.price)
  EXECUTE FUNCTION items_reprice();
CREATE TRIGGER touch BEFORE INSERT OR UPDATE OR DELETE ON items_main FOR EACH ROW EXECUTE FUNCTION items_touch();
CREATE TRIGGER reprice BEFORE UPDATE OF price ON items_main FOR EACH ROW WHEN (old.price IS DISTINCT FROM new.price)
  EXECUTE FUNCTION items_reprice();
-- a trigger disabled in main is disabled in the world
CREATE FUNCTION items_never() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disabled trigger fired'; END $$;
CREATE TRIGGER never BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION items_never();
ALTER TABLE items DISABLE TRIGGER never;
INSERT INTO items (id, name, price) VALUES (1, 'Big Box', 10), (2, 'keep', 5);
INSERT INTO items_main (id, name, price) VALUES (1, 'Big Box', 10), (2, 'keep', 5);
SELECT * FROM worlds.sql('create world t1');
SET worlds.world = t1;
INSERT INTO items (id, name, price) VALUES (3, 'New Thing', 7) RETURNING *;
INSERT INTO items (id, name, price) VALUES (4, 'skipped', -1) RETURNING *;
UPDATE items SET name = 'Bigger Box' WHERE id = 1 RETURNING id, name, slug;
UPDATE items SET price = 12 WHERE id = 1 RETURNING id, name, price;
UPDATE items SET price = 12 WHERE id = 1 RETURNING id, name, price;
DELETE FROM items WHERE id = 2;
INSERT INTO items (id, name, price) VALUES (5, 'Upserted', 1) ON CONFLICT DO NOTHING RETURNING slug;
-- ON CONFLICT DO UPDATE: BEFORE INSERT on the proposed row, BEFORE UPDATE on the row it updates
INSERT INTO items (id, name, price) VALUES (3, 'Conflict Name', 20), (6, 'Fresh One', 2)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name || ' again', price = excluded.price RETURNING id, name, slug, price;
SELECT * FROM items ORDER BY id;
RESET worlds.world;
-- the same statements in main
INSERT INTO items_main (id, name, price) VALUES (3, 'New Thing', 7) RETURNING *;
INSERT INTO items_main (id, name, price) VALUES (4, 'skipped', -1) RETURNING *;
UPDATE items_main SET name = 'Bigger Box' WHERE id = 1 RETURNING id, name, slug;
UPDATE items_main SET price = 12 WHERE id = 1 RETURNING id, name, price;
UPDATE items_main SET price = 12 WHERE id = 1 RETURNING id, name, price;
DELETE FROM items_main WHERE id = 2;
INSERT INTO items_main (id, name, price) VALUES (5, 'Upserted', 1) ON CONFLICT DO NOTHING RETURNING slug;
INSERT INTO items_main (id, name, price) VALUES (3, 'Conflict Name', 20), (6, 'Fresh One', 2)
  ON CONFLICT (id) DO UPDATE SET name = excluded.name || ' again', price = excluded.price RETURNING id, name, slug, price;
SET worlds.world = t1;
CREATE TEMP TABLE in_world AS SELECT * FROM items;
RESET worlds.world;
SELECT 'world' AS side, * FROM (SELECT * FROM in_world EXCEPT SELECT * FROM items_main) a
UNION ALL SELECT 'main', * FROM (SELECT * FROM items_main EXCEPT SELECT * FROM in_world) b;
-- main's own table is untouched by the world
SELECT * FROM items ORDER BY id;
