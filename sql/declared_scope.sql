-- Declared scope: what a world says at its fork it will change (may_change, tenant, max_rows,
-- max_deletes; intent and run only shown), resolved as SQL reads names, and its merge held to it (42501,
-- DRY RUN's blocked row, queued for an agent keeping to a policy). Only people widen it.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_sbot;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
CREATE TABLE leads (id int PRIMARY KEY, org_id int, status text, owner text);
CREATE TABLE lists (id int PRIMARY KEY, org_id int, name text);
CREATE TABLE notes (id int PRIMARY KEY, body text);
CREATE SCHEMA "Sales";
CREATE TABLE "Sales"."Leads" (id int PRIMARY KEY, "Status" text);
INSERT INTO leads SELECT g, CASE WHEN g < 9 THEN 42 ELSE 43 END, 'open', 'ana' FROM generate_series(1, 12) g;
INSERT INTO lists VALUES (1, 42, 'a'), (2, 42, 'b');
INSERT INTO notes VALUES (1, 'n');
GRANT SELECT, INSERT, UPDATE, DELETE ON leads, lists, notes TO PUBLIC;

-- the spec's example
SELECT * FROM worlds.sql($$create world close_stale with (
  may_change  = 'leads.status, lists',
  tenant      = 'org_id = 42',
  max_rows    = 250,
  max_deletes = 0,
  intent      = 'close leads idle 90 days',
  run         = 'planner/3'
)$$);
SELECT j -> 'scope' AS scope FROM worlds.sql('show worlds') j WHERE j ->> 'name' = 'close_stale';
SET worlds.world = close_stale;
UPDATE leads SET owner = 'bob' WHERE id = 7;
UPDATE leads SET status = 'closed' WHERE id IN (3, 9);
INSERT INTO lists VALUES (3, 42, 'c');
RESET worlds.world;
SELECT j ->> 'detail' AS blocked FROM worlds.sql('merge world close_stale dry run') j WHERE j ->> 'outcome' = 'blocked';
SELECT try($$select * from worlds.sql('merge world close_stale')$$);
SELECT count(*) FILTER (WHERE status = 'closed') AS closed, count(*) FILTER (WHERE owner = 'bob') AS bob FROM leads;
-- a person widens it (= null drops a part), and then it merges
SELECT j -> 'scope' -> 'may_change' AS may_change FROM worlds.sql($$alter world close_stale set (may_change = 'leads, lists')$$) j;
SELECT try($$select * from worlds.sql('merge world close_stale')$$);
SELECT j -> 'scope' -> 'tenant' AS tenant FROM worlds.sql($$alter world close_stale set (tenant = null)$$) j;
SELECT * FROM worlds.sql('merge world close_stale');
SELECT count(*) FILTER (WHERE status = 'closed') AS closed, count(*) FILTER (WHERE owner = 'bob') AS bob FROM leads;

-- names as SQL reads them; each must be a table or column of main (42P01); a may_change table needs the
-- tenant's column (42703); values (22023)
SELECT * FROM worlds.sql($$create world q with (may_change = '"Sales"."Leads"."Status", "Sales"."Leads"')$$);
SELECT j -> 'scope' -> 'may_change' AS may_change FROM worlds.sql('show worlds') j WHERE j ->> 'name' = 'q';
SELECT * FROM worlds.sql('drop world q');
SELECT try($$select * from worlds.sql('create world x with (may_change = ''nope'')')$$);
SELECT try($$select * from worlds.sql('create world x with (may_change = ''leads.nope'')')$$);
SELECT try($$select * from worlds.sql('create world x with (may_change = ''sales.leads'')')$$);
SELECT try($$select * from worlds.sql('create world x with (may_change = ''notes'', tenant = ''org_id = 1'')')$$);
SELECT try($$select * from worlds.sql('create world x with (tenant = ''org_id'')')$$);
SELECT try($$select * from worlds.sql('create world x with (tenant = ''region = eu'')')$$);
SELECT try($$select * from worlds.sql('create world x with (max_rows = -1)')$$);
SELECT try($$select * from worlds.sql('create world x with (max_deletes = ''some'')')$$);
SELECT count(*) AS worlds FROM worlds.world WHERE name = 'x';

-- META's form, counts alone, a text tenant, and a table whose columns alone are named
SELECT * FROM worlds.sql($$create world m meta '{"may_change": "leads.status", "tenant": {"org_id": 42}, "max_rows": "2", "max_deletes": 0}'$$);
SELECT j -> 'scope' AS scope FROM worlds.sql('show worlds') j WHERE j ->> 'name' = 'm';
SET worlds.world = m;
UPDATE leads SET status = 'won' WHERE id IN (1, 2, 4);
INSERT INTO leads VALUES (50, 42, 'new', 'ana');
DELETE FROM leads WHERE id = 5;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world m')$$);
SELECT * FROM worlds.sql('drop world m');
SELECT * FROM worlds.sql($$create world t with (tenant = 'owner = ''ana''', max_deletes = 0)$$);
SELECT j -> 'scope' -> 'tenant' AS tenant FROM worlds.sql('show worlds') j WHERE j ->> 'name' = 't';
SET worlds.world = t;
UPDATE leads SET owner = 'cy' WHERE id = 6;
DELETE FROM lists WHERE id = 2;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world t')$$);
SELECT * FROM worlds.sql('drop world t');

-- judged on the world's own rows as the merge applies them: after ONLY TABLES, and a column the parent
-- changed that BY COLUMNS combines in doesn't count
SELECT * FROM worlds.sql($$create world b with (may_change = 'leads.status')$$);
SET worlds.world = b;
UPDATE leads SET status = 'lost' WHERE id = 8;
UPDATE notes SET body = 'outside' WHERE id = 1;
RESET worlds.world;
UPDATE leads SET owner = 'dee' WHERE id = 8;
SELECT try($$select * from worlds.sql('merge world b by columns')$$);
SELECT * FROM worlds.sql('merge world b only tables (leads) by columns');
SELECT status, owner FROM leads WHERE id = 8;
SELECT * FROM worlds.sql('drop world b');

-- an agent: it can't widen its scope; a policy's require_scope and max_rows bound its forks; a breach
-- queues its world for a person, with the scope in SHOW REVIEWS
CREATE FUNCTION queued(w text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..200 LOOP
        IF EXISTS (SELECT 1 FROM worlds.review r JOIN worlds.world x ON x.num = r.world WHERE x.name = w AND x.dropped IS NULL) THEN RETURN true; END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN false;
END $$;
SELECT j ->> 'require_scope' AS require_scope FROM worlds.sql('create merge policy scoped with (require_scope = true, max_rows = 100, max_deletes = 1)') j;
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_sbot with (can = ''read,fork,write_own,merge_own'', policy = ''scoped'')') j;
SET SESSION AUTHORIZATION regress_sbot;
SELECT try($$select * from worlds.sql('create world s0')$$);
SELECT try($$select * from worlds.sql('create world s0 with (max_rows = 5)')$$);
SELECT try($$select * from worlds.sql('create world s0 with (may_change = ''leads'', max_rows = 500)')$$);
SELECT try($$select * from worlds.sql('create world s0 with (may_change = ''leads'', max_deletes = 3)')$$);
SELECT * FROM worlds.sql($$create world s1 with (may_change = 'leads.status', max_rows = 10)$$);
SELECT try($$select * from worlds.sql('alter world s1 set (may_change = ''leads'')')$$);
SELECT try($$select * from worlds.sql('alter world s1 set (max_rows = null)')$$);
SELECT j -> 'meta' ->> 'task' AS task FROM worlds.sql($$alter world s1 set (task = 'fine')$$) j;
SET worlds.world = s1;
UPDATE leads SET owner = 'eve' WHERE id = 10;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world s1')$$);
RESET SESSION AUTHORIZATION;
SELECT queued('s1');
SELECT world, policy, reasons, scope FROM worlds.show_reviews();
SELECT * FROM worlds.sql('drop world s1');
SELECT * FROM worlds.sql('drop agent regress_sbot');
