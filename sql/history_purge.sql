-- History older than history_retention is purged in batches (the expiry worker calls it in every database),
-- keeping what live worlds still need: everything after their fork points.
CREATE EXTENSION pg_worlds;
CREATE TABLE t (id int PRIMARY KEY, v int);
INSERT INTO t SELECT g, 0 FROM generate_series(1, 100) g;
UPDATE t SET v = 1 WHERE id <= 10;
SELECT worlds.create_world('w');
UPDATE t SET v = 2 WHERE id <= 5;
SELECT (SELECT count(*) FROM worlds_data.h_t_1) AS history, (SELECT count(*) FROM worlds_data.i_t_1) AS inserts;
-- within the window nothing goes
SELECT worlds.purge_history();
SELECT * FROM worlds.sql('alter system set history_retention to ''0''');
SELECT worlds.purge_history();
SELECT (SELECT count(*) FROM worlds_data.h_t_1) AS history, (SELECT count(*) FROM worlds_data.i_t_1) AS inserts;
-- the world still reads main as of its fork
SET worlds.world = w;
SELECT count(*), sum(v) FROM t;
RESET worlds.world;
-- once it is gone, so is what it needed; batches of at most batch_size rows per table
SELECT worlds.drop_world('w');
SELECT worlds.purge_history(batch_size => 3);
SELECT worlds.purge_history();
SELECT (SELECT count(*) FROM worlds_data.h_t_1) AS history, (SELECT count(*) FROM worlds_data.i_t_1) AS inserts;
-- a table dropped longer ago than the window goes with its history (AS OF can't reach it any more)
SELECT * FROM worlds.sql('alter system set history_retention = ''1 day''');
CREATE TABLE gone (id int PRIMARY KEY);
INSERT INTO gone VALUES (1), (2);
DROP TABLE gone;
SELECT table_name, columns, (SELECT count(*) FROM worlds_data.h_gone_2) AS history_rows FROM worlds.dropped_table;
SELECT worlds.purge_history();
SELECT count(*) AS dropped_tables_kept FROM worlds.dropped_table;
SELECT * FROM worlds.sql('alter system set history_retention to ''0''');
SELECT worlds.purge_history() >= 0 AS purged;
SELECT count(*) AS dropped_tables_kept, to_regclass('worlds_data.h_gone_2') AS history FROM worlds.dropped_table;
-- the worker that runs it
SELECT count(*) AS launchers FROM pg_stat_activity WHERE backend_type = 'pg_worlds expiry launcher';
