-- SHOW DISK: six rows (what, bytes) — live, history, reclaimable, log, total, limit — each checked against
-- the same pg_relation_size / pg_total_relation_size / pg_database_size arithmetic; worlds.max_disk_bytes:
-- past it CREATE WORLD and writes in worlds fail with 53100, main's writes don't.
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || regexp_replace(sqlerrm, '\d+ bytes', 'N bytes'); END $$;
-- SHOW DISK typed as in psql, read back (the analyze hook makes it a query)
CREATE FUNCTION typed_disk() RETURNS TABLE (what text, bytes bigint)
LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY EXECUTE 'SHOW DISK'; END $$;
CREATE FUNCTION disk(w text) RETURNS bigint LANGUAGE sql AS $$ SELECT bytes FROM worlds.show_disk() WHERE what = w $$;
-- the arithmetic SHOW DISK is checked against
CREATE FUNCTION user_bytes() RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'm') AND n.nspname = 'public' $$;
CREATE FUNCTION history_tables_bytes() RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(pg_total_relation_size(history) + pg_total_relation_size(inserts)), 0)::bigint
    FROM worlds.tables WHERE history IS NOT NULL $$;
CREATE FUNCTION history_bytes() RETURNS bigint LANGUAGE sql AS $$
    SELECT history_tables_bytes() + pg_total_relation_size('worlds.event') + pg_total_relation_size('worlds.column_log') $$;
CREATE FUNCTION dead_bytes() RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(pg_relation_size(relid)::float8 * n_dead_tup / (n_live_tup + n_dead_tup)), 0)::bigint
    FROM pg_stat_all_tables WHERE n_dead_tup > 0 $$;
CREATE FUNCTION wal_bytes() RETURNS bigint LANGUAGE sql AS $$ SELECT sum(size)::bigint FROM pg_ls_waldir() $$;
-- the six rows, in the spec's order, typed and through worlds.sql
SELECT what FROM typed_disk();
SELECT string_agg(j->>'what', ', ') AS what FROM worlds.sql('show disk') j;
SELECT proargnames FROM pg_proc WHERE oid = 'worlds.show_disk'::regproc;
-- an empty database: no user table, no history table yet
SELECT d.what, CASE d.what WHEN 'live' THEN d.bytes = user_bytes()
                           WHEN 'history' THEN d.bytes = history_bytes()
                           WHEN 'log' THEN d.bytes = wal_bytes()
                           WHEN 'total' THEN d.bytes = pg_database_size(current_database()) + wal_bytes()
                           WHEN 'limit' THEN d.bytes = 0
                           ELSE d.bytes BETWEEN 0 AND pg_database_size(current_database()) END AS as_counted
FROM typed_disk() d;
SELECT disk('live') AS live;
CREATE TABLE orders (id int PRIMARY KEY, note text);
ALTER TABLE orders SET (autovacuum_enabled = off);  -- (its dead tuples stay counted while this runs)
INSERT INTO orders SELECT g, repeat('o', 200) FROM generate_series(1, 2000) g;
UPDATE orders SET note = 'x' || note WHERE id <= 1000;
SELECT * FROM worlds.sql('create world a');
SET worlds.world = a;
UPDATE orders SET note = 'a' WHERE id <= 100;
RESET worlds.world;
-- each row as counted here; total holds the others: the database's files hold live and history (and the
-- worlds' deltas, SHOW STORAGE), and log is added
SELECT d.what, CASE d.what WHEN 'live' THEN d.bytes = user_bytes()
                           WHEN 'history' THEN d.bytes = history_bytes()
                           WHEN 'log' THEN d.bytes = wal_bytes()
                           WHEN 'total' THEN d.bytes = pg_database_size(current_database()) + wal_bytes()
                           WHEN 'limit' THEN d.bytes = 0
                           ELSE d.bytes BETWEEN 0 AND pg_database_size(current_database()) END AS as_counted
FROM worlds.show_disk() d;
SELECT disk('live') = pg_total_relation_size('orders') AS live_is_orders,
       disk('history') > pg_total_relation_size('worlds.event') AS history_has_tables,
       disk('total') >= disk('live') + disk('history') + disk('log') AS total_holds_them,
       disk('total') - disk('log') >= disk('live') + disk('history')
           + (SELECT sum(pg_total_relation_size(delta)) FROM worlds.tables) AS and_the_deltas,
       disk('log') > 0 AS some_wal;
-- reclaimable: dead tuples' share of each table's pages, from pg_stat_all_tables (as Postgres counts them:
-- this session's counts are sent at the next flush); then the history past retention the purge would free
DELETE FROM orders WHERE id > 1000;
SELECT pg_stat_force_next_flush();
SELECT n_dead_tup >= 1000 AS counted FROM pg_stat_all_tables WHERE relid = 'orders'::regclass;
SELECT disk('reclaimable') = dead_bytes() AS dead_share, dead_bytes() >= pg_relation_size('orders') / 3 AS orders_half_dead;
-- history older than history_retention (and than the oldest world's fork: the purge keeps what a world
-- still needs) counts once ANALYZE (here, or autovacuum's) has its statistics: main's writes above are before a's fork, so with a
-- retention of 0 every row of orders' history and inserts is past it; the DELETE came after the fork
SELECT * FROM worlds.sql('alter system set history_retention to ''0''');
DO $$ DECLARE t worlds.tables; BEGIN
    FOR t IN SELECT * FROM worlds.tables WHERE history IS NOT NULL LOOP
        EXECUTE format('ANALYZE %s, %s', t.history, t.inserts);
    END LOOP; END $$;
SELECT pg_stat_force_next_flush();
-- (the history's share past the cutoff, from pg_stats of _w_at: its most common values below it, and its
-- histogram's buckets below it)
CREATE FUNCTION past_share(rel regclass, cut timestamptz) RETURNS float8 LANGUAGE sql AS $$
    SELECT coalesce((SELECT sum(f) FROM unnest(s.most_common_vals::text::timestamptz[], s.most_common_freqs) m(v, f) WHERE v < cut), 0)
         + greatest(1 - coalesce((SELECT sum(f) FROM unnest(s.most_common_freqs) f), 0), 0)
           * coalesce((SELECT greatest(count(*) FILTER (WHERE b < cut) - 1, 0)::float8 / nullif(count(*) - 1, 0)
                         FROM unnest(s.histogram_bounds::text::timestamptz[]) b), 0)
    FROM pg_stats s WHERE s.schemaname = 'worlds_data' AND s.tablename = (SELECT relname FROM pg_class WHERE oid = rel)
      AND s.attname = '_w_at' $$;
SELECT round(past_share(history, w.created)::numeric, 2) AS history_past, round(past_share(inserts, w.created)::numeric, 2) AS inserts_past
FROM worlds.tables, worlds.world w WHERE w.name = 'a' AND relid = 'orders'::regclass;
SELECT disk('reclaimable') - dead_bytes()
       = (SELECT round(sum(least(past_share(h, w.created), 1) * pg_total_relation_size(h)))
          FROM worlds.tables t, unnest(ARRAY[t.history, t.inserts]) h, worlds.world w WHERE w.name = 'a') AS history_past_retention,
       disk('reclaimable') - dead_bytes() > 0 AS some;
-- without world a, the cutoff is now: all of history is past it
SELECT * FROM worlds.sql('drop world a');
SELECT disk('reclaimable') - dead_bytes()
       = (SELECT round(sum(least(past_share(h, now()), 1) * pg_total_relation_size(h)))
          FROM worlds.tables t, unnest(ARRAY[t.history, t.inserts]) h) AS history_past_retention;
SELECT * FROM worlds.sql('alter system set history_retention = ''1 day''');
-- worlds.max_disk_bytes: bytes, with units as memory settings take them; superuser only
SHOW worlds.max_disk_bytes;
SET worlds.max_disk_bytes = '10GB';
SHOW worlds.max_disk_bytes;
SELECT disk('limit') AS "limit";
SET worlds.max_disk_bytes = 1536;
SHOW worlds.max_disk_bytes;
SELECT disk('limit') AS "limit";
SELECT try($$set worlds.max_disk_bytes = -1$$);
SELECT try($$set worlds.max_disk_bytes = '3 parsecs'$$);
CREATE ROLE disk_tenant;
SET ROLE disk_tenant;
SELECT try($$set worlds.max_disk_bytes = 0$$);
RESET ROLE;
DROP ROLE disk_tenant;
-- under the limit all goes on
SET worlds.max_disk_bytes = '1TB';
SELECT * FROM worlds.sql('create world b');
SELECT * FROM worlds.sql('create world c');
SET worlds.world = b;
UPDATE orders SET note = 'b' WHERE id = 1;
RESET worlds.world;
-- past it: CREATE / FORK WORLD and every write in a world fail with 53100 (the size measured a moment ago
-- is used: the limit is what changed)
SET worlds.max_disk_bytes = 1;
SELECT try($$select * from worlds.sql('create world d')$$);
SELECT try($$select * from worlds.sql('fork world b as d')$$);
SELECT try($$select * from worlds.sql('simulate 2 worlds as sim run ''select 1'' score ''select 1''')$$);
SELECT try($$select worlds.create_world('d')$$);
SET worlds.world = b;
SELECT try($$update orders set note = 'b2' where id = 1$$);
SELECT try($$insert into orders values (5000, 'new')$$);
SELECT try($$delete from orders where id = 2$$);
SELECT try($$create table scratch (x int)$$) AS ddl_is_not_a_write;
SELECT try($$insert into scratch values (1)$$) AS its_own_table;
-- reads go on
SELECT note FROM orders WHERE id = 1;
RESET worlds.world;
-- main's own writes are never refused
UPDATE orders SET note = 'main' WHERE id = 1;
INSERT INTO orders VALUES (5000, 'main');
DELETE FROM orders WHERE id = 5000;
-- dropping a world is how to get under it, and isn't refused
SELECT * FROM worlds.sql('drop world c');
SELECT world FROM worlds.show_storage() ORDER BY world;
RESET worlds.max_disk_bytes;
SET worlds.world = b;
UPDATE orders SET note = 'b2' WHERE id = 1;
RESET worlds.world;
SELECT * FROM worlds.sql('create world d');
-- grammar: SHOW DISK takes nothing more
SELECT try($$select * from worlds.sql('show disk for world b')$$);
SELECT try($$select * from worlds.sql('show disks')$$);
