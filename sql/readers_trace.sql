-- DIFF ... READERS, traced inside the database (governance/readers/trace.rs): what reads a table's changed
-- columns, column by column. worlds._readers(table, updated columns, rows added, rows deleted, columns added).
CREATE EXTENSION pg_worlds;
-- the spec's example
CREATE TABLE leads (id int PRIMARY KEY, status text CHECK (status IN ('new', 'won')), score int, note text);
CREATE VIEW open_leads AS SELECT id, score FROM leads WHERE status = 'new';
-- a view on a view: reads open_leads.score only (score, plus what open_leads' WHERE reads: status)
CREATE VIEW top_open AS SELECT score FROM open_leads ORDER BY score DESC;
-- reads only id of open_leads: id and status, never score
CREATE VIEW open_ids AS SELECT o.id FROM open_leads o;
-- a materialized view, with GROUP BY and HAVING
CREATE MATERIALIZED VIEW by_status AS SELECT status, count(*) AS n FROM leads GROUP BY status HAVING max(score) > 0;
-- whole-row references
CREATE VIEW lead_json AS SELECT row_to_json(l.*) AS j FROM leads l;
CREATE VIEW lead_rows AS SELECT l FROM leads l;
-- select *: every column it had when made, named one by one (not a whole row)
CREATE VIEW all_leads AS SELECT * FROM leads;
-- counts rows, reads no column
CREATE VIEW lead_count AS SELECT count(*) AS n FROM leads;
-- sub-query, CTE, UNION ALL, join USING, set operation that compares rows
CREATE TABLE notes (id int PRIMARY KEY, lead_id int, body text);
CREATE VIEW noted AS SELECT n.body FROM notes n WHERE n.lead_id IN (SELECT id FROM leads WHERE note IS NOT NULL);
CREATE VIEW cte_scores AS WITH s AS (SELECT id, score, note FROM leads) SELECT score FROM s;
CREATE VIEW both_ids AS SELECT id FROM leads UNION ALL SELECT id FROM notes;
CREATE VIEW distinct_ids AS SELECT id, score FROM leads UNION SELECT id, 0 FROM notes;
CREATE VIEW joined AS SELECT id, n.body FROM leads JOIN (SELECT lead_id AS id, body FROM notes) n USING (id);
-- a window's PARTITION BY and ORDER BY; a LATERAL sub-query reading the outer row; a recursive CTE (only
-- d is read, and d is computed from constants: what decides its rows is note)
CREATE VIEW ranked AS SELECT id, rank() OVER (PARTITION BY status ORDER BY score) AS r FROM leads;
CREATE VIEW lateral_notes AS SELECT l.id, x.n FROM leads l, LATERAL (SELECT count(*) AS n FROM notes WHERE notes.lead_id = l.score) x;
CREATE VIEW depths AS WITH RECURSIVE c(id, d) AS (SELECT id, 0 FROM leads WHERE note = 'root' UNION ALL SELECT c.id, d + 1 FROM c WHERE d < 3) SELECT d FROM c;
-- indexes: a unique one with WHERE, an expression one
CREATE UNIQUE INDEX one_open_per_note ON leads (note) WHERE status = 'new';
CREATE INDEX score_rank ON leads ((score * 2));
-- a foreign key from another table
CREATE TABLE orders (id int PRIMARY KEY, lead int REFERENCES leads (id), amount int);
-- triggers: UPDATE OF, and a row trigger without it
CREATE FUNCTION bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.score := NEW.score + 1; RETURN NEW; END $$;
CREATE TRIGGER bump_score BEFORE UPDATE OF status ON leads FOR EACH ROW EXECUTE FUNCTION bump();
-- (audit_leads names leads and status: listed as the trigger, not again as a function)
CREATE FUNCTION audit_leads() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF TG_OP = 'UPDATE' AND NEW.status IS DISTINCT FROM OLD.status THEN RAISE NOTICE 'leads: status'; END IF; RETURN NEW; END $$;
CREATE TRIGGER audit AFTER INSERT OR UPDATE ON leads FOR EACH ROW EXECUTE FUNCTION audit_leads();
CREATE FUNCTION on_purge() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER purge_log AFTER DELETE ON leads FOR EACH STATEMENT EXECUTE FUNCTION on_purge();
-- functions naming the table and its columns
CREATE FUNCTION won_count() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN RETURN (SELECT count(*) FROM LEADS WHERE Status = 'won'); END $$;
CREATE FUNCTION lead_total() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM leads $$;
-- (names neither leads nor status as a whole word)
CREATE FUNCTION leadsx_only() RETURNS int LANGUAGE sql AS $$ SELECT 1 AS leadsx WHERE 'statuses' <> '' $$;
CREATE FUNCTION atomic_scores() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT sum(score) FROM leads; END;
-- a view in a schema not on the search path: named with its schema
CREATE SCHEMA rep;
CREATE VIEW rep.lead_ids AS SELECT id FROM leads;
-- merge checks
SELECT * FROM worlds.sql('create merge check scored_won as select id from leads where status = ''won'' and score is null');
SELECT * FROM worlds.sql('create merge check bodies as select id from notes where body = ''''');
SELECT * FROM worlds.sql('create merge check notes_of_leads as select n.id from notes n where not exists (select 1 from leads l where l.id = n.lead_id)');

-- updated columns: status
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{status}', false, false, '{}');
-- updated columns: score
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{score}', false, false, '{}');
-- updated: note, id
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{note,id}', false, false, '{}');
-- rows added
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{}', true, false, '{}');
-- rows deleted
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{}', false, true, '{}');
-- a column added: only what reads every column
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{}', false, false, '{tier}');

-- odd input: nothing, never an error
SELECT count(*) FROM worlds._readers('leads', '{}', false, false, '{}');
SELECT count(*) FROM worlds._readers('leads', NULL, NULL, NULL, NULL);
SELECT count(*) FROM worlds._readers('open_leads', '{id}', true, true, '{}');
-- (a catalog is a table: its indexes read it)
SELECT kind, reader, columns FROM worlds._readers('pg_class', '{relname}', false, false, '{}');
SELECT count(*) FROM worlds._readers(0::oid::regclass, '{id}', true, true, '{}');
-- a column the table doesn't have (only the diff's side has it): what reads every column, and an UPDATE
-- trigger without OF
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{no_such_column}', false, false, '{}');
-- a dropped column: not read, not listed
ALTER TABLE notes ADD COLUMN gone int;
ALTER TABLE notes DROP COLUMN gone;
SELECT kind, reader, columns, detail FROM worlds._readers('notes', '{gone,body}', false, false, '{}');
-- a merge check that no longer analyses (bodies) is skipped
DROP VIEW noted;
ALTER TABLE notes DROP COLUMN body CASCADE;
SELECT kind, reader, columns, detail FROM worlds._readers('notes', '{}', true, false, '{}');

-- a world's own objects: seen by a session of that world only, named without its namespace
SELECT * FROM worlds.sql('create world w');
SET worlds.world = w;
CREATE VIEW w_scores AS SELECT id, score FROM leads WHERE score > 10;
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{score}', false, false, '{}') WHERE kind = 'view';
RESET worlds.world;
SELECT kind, reader, columns, detail FROM worlds._readers('leads', '{score}', false, false, '{}') WHERE kind = 'view';
-- not for PUBLIC
CREATE ROLE regress_readers_nobody;
SET ROLE regress_readers_nobody;
SELECT count(*) FROM worlds._readers('leads', '{score}', false, false, '{}');
RESET ROLE;
DROP ROLE regress_readers_nobody;
