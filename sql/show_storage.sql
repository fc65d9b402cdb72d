-- SHOW STORAGE [FOR [WORLD] name]: what each world holds on its own (its share of the shared delta tables,
-- its own relations), main's row the user's tables; from real sizes, checked here against the same
-- pg_relation_size / pg_total_relation_size arithmetic (no byte count is written down).
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
-- SHOW STORAGE typed as in psql, read back (the analyze hook makes it a query)
CREATE FUNCTION typed_storage() RETURNS TABLE (world text, rows_changed bigint, pages bigint, bytes bigint)
LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY EXECUTE 'SHOW STORAGE'; END $$;
-- the user's tables, whole (heap, indexes, TOAST)
CREATE FUNCTION user_bytes() RETURNS bigint LANGUAGE sql AS $$
    SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'm') AND n.nspname = 'public' $$;
CREATE FUNCTION delta_of(t regclass) RETURNS regclass LANGUAGE sql AS $$ SELECT delta FROM worlds.tables WHERE relid = t $$;
-- a world's share of one delta, counted page by page: its rows' tuple bytes over the page's, summed, over
-- the delta's heap pages, times the delta's whole size
CREATE FUNCTION share(world_name text, d regclass) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE n int := (SELECT num FROM worlds.world WHERE name = world_name AND dropped IS NULL); s float8;
BEGIN
    EXECUTE format($q$
        WITH mine AS (SELECT (ctid::text::point)[0]::int8 AS blk, sum(pg_column_size(d.*))::float8 AS b FROM %1$s d
                      WHERE _w_world = $1 GROUP BY 1)
        SELECT sum(m.b / (SELECT sum(pg_column_size(x.*)) FROM %1$s x WHERE (x.ctid::text::point)[0]::int8 = m.blk)) FROM mine m$q$, d)
    INTO s USING n;
    RETURN coalesce(s, 0) / (pg_relation_size(d) / current_setting('block_size')::int) * pg_total_relation_size(d);
END $$;
CREATE TABLE orders (id int PRIMARY KEY, note text);
CREATE TABLE items (id int PRIMARY KEY, note text);
INSERT INTO orders SELECT g, repeat('o', 100) FROM generate_series(1, 1000) g;
INSERT INTO items SELECT g, repeat('i', 100) FROM generate_series(1, 1000) g;
-- the spec's columns
SELECT proargnames FROM pg_proc WHERE oid = 'worlds.show_storage'::regproc;
-- no world yet: main alone, the user's tables whole, in whole pages
SELECT world, rows_changed, bytes = user_bytes() AS bytes_are_the_tables,
       pages * current_setting('block_size')::int = bytes AS whole_pages
FROM typed_storage();
SELECT * FROM worlds.sql('create world a');
SELECT * FROM worlds.sql('create world b');
SELECT * FROM worlds.sql('create world idle');
SET worlds.world = a;
UPDATE orders SET note = 'a' || note WHERE id <= 300;
UPDATE items SET note = 'a' || note WHERE id <= 300;
SET worlds.world = b;
UPDATE orders SET note = 'b' || note WHERE id BETWEEN 200 AND 250;
DELETE FROM orders WHERE id > 990;
RESET worlds.world;
-- main first, then the live worlds; rows_changed as SHOW BRANCHES counts them (null for main); a world that
-- changed nothing holds nothing
SELECT s.world, s.rows_changed, s.rows_changed IS NOT DISTINCT FROM b.changes AS as_branches, s.bytes = 0 AS holds_nothing
FROM typed_storage() s JOIN worlds.show_branches() b ON b.name = s.world ORDER BY s.world;
SELECT array_agg(world) AS in_order FROM typed_storage();
-- each world's bytes: its shares of the deltas, as counted here; a alone has rows in items' delta, so it
-- holds all of it; a's and b's shares of orders' delta add up to all of it (within a byte each: rounded)
SELECT s.world,
       abs(s.bytes - round(share(s.world, delta_of('orders')) + share(s.world, delta_of('items')))) <= 1 AS bytes_are_its_shares,
       s.pages = round(s.bytes / current_setting('block_size')::numeric) AS pages_are_bytes
FROM worlds.show_storage() s WHERE s.world <> 'main' ORDER BY s.world;
SELECT round(share('a', delta_of('items'))) = pg_total_relation_size(delta_of('items')) AS a_holds_all_of_items,
       abs(round(share('a', delta_of('orders')) + share('b', delta_of('orders'))) - pg_total_relation_size(delta_of('orders'))) <= 1
           AS orders_shared_whole,
       (SELECT sum(bytes) FROM worlds.show_storage() WHERE world IN ('a', 'b'))
           BETWEEN pg_total_relation_size(delta_of('orders')) + pg_total_relation_size(delta_of('items')) - 2
               AND pg_total_relation_size(delta_of('orders')) + pg_total_relation_size(delta_of('items')) + 2 AS worlds_hold_the_deltas,
       (SELECT bytes FROM worlds.show_storage() WHERE world = 'main') = user_bytes() AS main_is_the_tables;
-- FOR [WORLD] name: that world's row only (main too; by ID too)
SELECT * FROM worlds.sql('show storage for world idle');
SELECT j->>'world' AS world, (j->>'bytes')::bigint = (SELECT bytes FROM worlds.show_storage('b')) AS same
FROM worlds.sql('show storage for b') j;
SELECT j->>'world' AS world, j->'rows_changed' AS rows_changed, (j->>'bytes')::bigint = user_bytes() AS the_tables
FROM worlds.sql('SHOW STORAGE FOR main;') j;
SELECT world FROM worlds.show_storage((SELECT id FROM worlds.world WHERE name = 'a'));
-- no such world: 3D000; a moment of one: 0A000
SELECT try($$select * from worlds.sql('show storage for world nowhere')$$);
SELECT try($$select * from worlds.show_storage('nowhere')$$);
SELECT left(try($$select * from worlds.sql('show storage for ''a@now''')$$), 6) AS moment;
-- a world's own relations count whole: a table it made (in its namespace, with its index and TOAST)
SELECT bytes AS before FROM worlds.show_storage('b') \gset
SET worlds.world = b;
CREATE TABLE scratch (id int PRIMARY KEY, body text);
INSERT INTO scratch SELECT g, repeat('s', 500) FROM generate_series(1, 500) g;
RESET worlds.world;
SELECT bytes - :before = (SELECT pg_total_relation_size(c.oid) FROM pg_class c JOIN worlds.world_schema s ON s.nsp = c.relnamespace::regnamespace::name
                          JOIN worlds.world w ON w.num = s.world AND w.name = 'b' WHERE c.relname = 'scratch') AS grew_by_its_table
FROM worlds.show_storage('b');
-- ... and a twin: main's table it changed the shape of, copied into its namespace
SELECT * FROM worlds.sql('create world shaped');
SET worlds.world = shaped;
ALTER TABLE items ADD COLUMN extra int;
RESET worlds.world;
SELECT s.bytes = (SELECT sum(pg_total_relation_size(t.twin)) FROM worlds.world_twin t JOIN worlds.world w ON w.num = t.world
                  WHERE w.name = 'shaped') AS the_twin, s.bytes > 0 AS some
FROM worlds.show_storage('shaped') s;
-- a dropped world goes; what it held on pages it shared is no one's, so a's share of them grows
SELECT bytes AS a_before FROM worlds.show_storage('a') \gset
SELECT * FROM worlds.sql('drop world b');
SELECT world FROM worlds.show_storage() ORDER BY world;
SELECT bytes >= :a_before AS a_holds_no_less, abs(bytes - round(share('a', delta_of('orders')) + share('a', delta_of('items')))) <= 1 AS still_its_shares
FROM worlds.show_storage('a');
-- main's row follows the user's tables
INSERT INTO items SELECT g, repeat('n', 200) FROM generate_series(1001, 3000) g;
SELECT bytes = user_bytes() AS main_is_the_tables FROM worlds.show_storage('main');
-- grammar: FOR needs a name, nothing follows
SELECT try($$select * from worlds.sql('show storage for')$$);
SELECT try($$select * from worlds.sql('show storage for world a limit 5')$$);
