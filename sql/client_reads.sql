-- Clients seen reading (DIFF ... READERS, kind client): which columns each client's statements read,
-- named by role and application_name, recorded at most once a minute per session. The SQL surface:
-- worlds.client_reads(), worlds.client_reads_since(), worlds.record_reads. (Several sessions, rights,
-- restarts, kill -9 and the 100,000-entry bound: tests/sessions/35.)
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_reader;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE TABLE leads (id int PRIMARY KEY, status text, score int, note text);
INSERT INTO leads VALUES (1, 'new', 0, 'x'), (2, 'won', 0, 'y');
CREATE VIEW won_leads AS SELECT id, note FROM leads WHERE status = 'won';
SET application_name = 'nightly';
-- nothing read yet in this database (the inserts read no column)
SELECT count(*) FROM worlds.client_reads();
-- a SELECT's columns (select list and WHERE)
SELECT status FROM leads WHERE id = 1;
SELECT client, role = current_user AS my_role, application_name, "table", "column", last_read > now() - interval '1 hour' AS recent
FROM worlds.client_reads();
-- an UPDATE's WHERE and SET, a DELETE's WHERE, under another application_name
SET application_name = 'crm';
UPDATE leads SET score = 1 WHERE note = 'x';
DELETE FROM leads WHERE score = 42;
SELECT "table", "column" FROM worlds.client_reads() WHERE application_name = 'crm';
-- a view reads its table's columns; EXPLAIN alone reads nothing
SET application_name = 'report';
SELECT * FROM won_leads;
EXPLAIN (COSTS OFF) SELECT score FROM leads;
SELECT "table", "column" FROM worlds.client_reads() WHERE application_name = 'report';
-- no application_name: the role alone
SET application_name = '';
SELECT leads FROM leads WHERE false;
SELECT regexp_replace(client, '^[^ (]+', 'ROLE') AS client, "table", "column" FROM worlds.client_reads() ORDER BY 1, 3;
-- pg_worlds' own catalog reads and system catalogs are not recorded
SELECT count(*) FROM worlds.show_worlds();
SELECT count(*) FROM pg_class WHERE relname = 'leads';
SELECT count(*) FROM worlds.client_reads() WHERE "table"::text NOT IN ('leads');
-- reads inside a world count, under the user's table
SELECT worlds.create_world('w');
SET application_name = 'in_world';
SET worlds.world = w;
SELECT note FROM leads WHERE id = 2;
RESET worlds.world;
SELECT application_name, "table", "column" FROM worlds.client_reads() WHERE application_name = 'in_world';
-- off records nothing (superuser only)
SET worlds.record_reads = off;
SET application_name = 'off';
SELECT status FROM leads;
SELECT count(*) FROM worlds.client_reads() WHERE application_name = 'off';
RESET worlds.record_reads;
-- a dropped column or table isn't shown
DROP VIEW won_leads;
ALTER TABLE leads DROP COLUMN note;
SELECT count(*) FROM worlds.client_reads() WHERE "column" = 'note';
-- rights as pg_stat_statements: a role without pg_read_all_stats sees its own role's rows only
CREATE ROLE regress_reader;
GRANT SELECT ON leads TO regress_reader;
SET SESSION AUTHORIZATION regress_reader;
SET application_name = 'own';
SELECT score FROM leads WHERE id = 1;
SELECT client, "table", "column" FROM worlds.client_reads();
RESET SESSION AUTHORIZATION;
SELECT count(DISTINCT role) FROM worlds.client_reads();
SELECT worlds.client_reads_since() <= now() AS since_before_now;
SELECT worlds.drop_world('w');
DROP TABLE leads;
SELECT count(*) FROM worlds.client_reads();
DROP ROLE regress_reader;
