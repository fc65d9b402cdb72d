-- Merge checks: CREATE [OR REPLACE] / DROP / SHOW MERGE CHECKS; every merge runs the checks of the tables
-- it changes on its result, before it commits; 23514 with the rows found; DRY RUN's blocked row; the two
-- worlds each fine alone but not together; ONLY TABLES, INTO, the timeout. The spec's four examples.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_cbot;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
GRANT USAGE ON SCHEMA public TO PUBLIC;
CREATE TABLE lists (id int PRIMARY KEY, name text);
CREATE TABLE leads (id int PRIMARY KEY, list int NOT NULL, name text);
INSERT INTO lists VALUES (1, 'a'), (2, 'b'), (3, 'c');
INSERT INTO leads VALUES (1, 1, 'x'), (2, 2, 'y'), (3, 3, 'z'), (4, 3, 'w');
CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL);
CREATE TABLE order_lines (id int PRIMARY KEY, order_id int NOT NULL, qty int NOT NULL, price int NOT NULL);
INSERT INTO orders VALUES (1, 10), (2, 6);
INSERT INTO order_lines VALUES (1, 1, 2, 5), (2, 2, 3, 2);
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts VALUES (1, 100), (2, 50);
GRANT SELECT, UPDATE ON accounts TO PUBLIC;
CREATE TABLE subscriptions (id int PRIMARY KEY, customer_id int, status text);
CREATE TABLE payment_methods (id int PRIMARY KEY, customer_id int);
INSERT INTO subscriptions VALUES (1, 10, 'active'); INSERT INTO payment_methods VALUES (1, 10);
CREATE TABLE addresses (id int PRIMARY KEY, customer_id int, is_primary bool);
INSERT INTO addresses VALUES (1, 10, true), (2, 10, false);
-- the spec's examples
SELECT * FROM worlds.sql('create merge check lists_keep_leads on tables (leads, lists) as  select id from lists where id not in (select list from leads)');
SELECT * FROM worlds.sql('create merge check order_totals on tables (orders, order_lines) as  select o.id from orders o join order_lines l on l.order_id = o.id  group by o.id, o.total having sum(l.qty * l.price) <> o.total');
SELECT * FROM worlds.sql('create merge check no_negative_balance on tables (accounts) as  select id from accounts where balance < 0');
SELECT * FROM worlds.sql('create merge check subs_have_payment on tables (subscriptions, payment_methods) as  select s.id from subscriptions s  where s.status = ''active''    and not exists (select 1 from payment_methods p where p.customer_id = s.customer_id)');
SELECT * FROM worlds.sql('create merge check one_primary_address on tables (addresses) with (timeout = ''2s'') as  select customer_id from addresses where is_primary group by customer_id having count(*) > 1');
SELECT name, tables, timeout_ms, left(query, 40) AS query FROM worlds.show_merge_checks();
SELECT * FROM worlds.show_merge_checks() WHERE false;
-- what a check may be: Postgres's parser and analyzer read it
CREATE FUNCTION my_fn(int) RETURNS int LANGUAGE sql AS $$ SELECT $1 $$;
CREATE VIEW fn_view AS SELECT my_fn(id) AS v FROM accounts;
CREATE VIEW fn_view2 AS SELECT v FROM fn_view;
CREATE SEQUENCE s;
SELECT try($$select * from worlds.sql('create merge check c1 as select nextval(''s'')')$$);
SELECT try($$select * from worlds.sql('create merge check c2 as select setval(''s'', 5)')$$);
SELECT try($$select * from worlds.sql('create merge check c3 as select pg_notify(''x'', ''y'')')$$);
SELECT try($$select * from worlds.sql('create merge check c3b as select 1 where pg_advisory_lock(7) is null')$$);
SELECT try($$select * from worlds.sql('create merge check c4 as select my_fn(id) from accounts')$$);
SELECT try($$select * from worlds.sql('create merge check c5 as select * from fn_view2')$$);
SELECT try($$select * from worlds.sql('create merge check c6 as with d as (delete from accounts returning id) select id from d')$$);
SELECT try($$select * from worlds.sql('create merge check c7 as select 1; select 2')$$);
SELECT try($$select * from worlds.sql('create merge check c8 as delete from accounts')$$);
SELECT try($$select * from worlds.sql('create merge check c9 as select id from accounts for update')$$);
SELECT try($$select * from worlds.sql('create merge check c10 on tables (nope) as select 1')$$);
SELECT try($$select * from worlds.sql('create merge check c11 on tables (fn_view) as select 1')$$);
SELECT try($$select * from worlds.sql('create merge check c12 as select id from missing_table')$$);
SELECT try($$select * from worlds.sql('create merge check c13 as select 1/0')$$);
SELECT try($$select * from worlds.sql('create merge check c14 with (colour = 1) as select 1')$$);
SELECT try($$select * from worlds.sql('create merge check lists_keep_leads as select 1')$$);
SELECT try($$select * from worlds.sql('drop merge check nope')$$);
SELECT count(*) AS checks FROM worlds.merge_check;
-- the default search_path (public), whatever the creating session's
CREATE SCHEMA app;
CREATE TABLE app.items (id int PRIMARY KEY);
SET search_path = app, public;
SELECT try($$select * from worlds.sql('create merge check app_items as select id from items where id < 0')$$);
SELECT * FROM worlds.sql('create merge check app_items on tables (items) as select id from app.items where id < 0');
RESET search_path;
SELECT name, tables FROM worlds.show_merge_checks() WHERE name = 'app_items';
-- two worlds, each fine alone, break a check together: the second merge is refused
SELECT * FROM worlds.sql('create world move_lead');
SELECT * FROM worlds.sql('create world cleanup');
SET worlds.world = move_lead;
UPDATE leads SET list = 1 WHERE id = 3;
SET worlds.world = cleanup;
DELETE FROM leads WHERE id = 4;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world move_lead');
SELECT j ->> 'detail' AS blocked FROM worlds.sql('merge world cleanup dry run') j WHERE j ->> 'outcome' = 'blocked';
SELECT try($$select * from worlds.sql('merge world cleanup')$$);
SELECT count(*) AS leads FROM leads;
-- the other examples: an active subscription without a payment method
SELECT * FROM worlds.sql('create world pm');
SET worlds.world = pm;
DELETE FROM payment_methods WHERE id = 1;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world pm')$$);
SELECT * FROM worlds.sql('drop world pm');
-- a merge that breaks no check merges; one on tables no check names runs none
SELECT * FROM worlds.sql('create world pay');
SET worlds.world = pay;
UPDATE accounts SET balance = balance - 30 WHERE id = 1;
UPDATE accounts SET balance = balance + 30 WHERE id = 2;
RESET worlds.world;
SELECT * FROM worlds.sql('merge world pay');
SELECT * FROM worlds.sql('create world overdraw');
SET worlds.world = overdraw;
UPDATE accounts SET balance = balance - 500 WHERE id IN (1, 2);
UPDATE orders SET total = 11 WHERE id = 1;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world overdraw')$$);
-- ONLY TABLES: the checks of the tables merged, on the rows merged
SELECT try($$select * from worlds.sql('merge world overdraw only tables (accounts)')$$);
SELECT try($$select * from worlds.sql('merge world overdraw only tables (orders)')$$);
SELECT * FROM orders ORDER BY id;
-- INTO another world: checked on that world as the merge leaves it
SELECT * FROM worlds.sql('create world team');
SELECT * FROM worlds.sql('fork world team as helper');
SET worlds.world = helper;
INSERT INTO addresses VALUES (3, 10, true);
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world helper into team')$$);
SET worlds.world = team;
SELECT count(*) AS team_addresses FROM addresses;
RESET worlds.world;
-- the timeout: a check that doesn't finish in it refuses the merge
SELECT * FROM worlds.sql('create merge check slow on tables (subscriptions) with (timeout = 50) as select id from subscriptions where case when status = ''paused'' then pg_sleep(0.3) is null else false end');
SELECT * FROM worlds.sql('create world sub');
SET worlds.world = sub;
UPDATE subscriptions SET status = 'paused' WHERE id = 1;
RESET worlds.world;
SELECT try($$select * from worlds.sql('merge world sub')$$);
SELECT * FROM worlds.sql('create or replace merge check slow on tables (subscriptions) with (timeout = ''1s'') as select id from subscriptions where status = ''gone''');
SELECT name, timeout_ms FROM worlds.show_merge_checks() WHERE name = 'slow';
SELECT * FROM worlds.sql('merge world sub');
-- only admins create or drop checks; anyone may show them; no one skips one
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_cbot with (can = ''read,fork,write_own,merge_own'')') j;
SET SESSION AUTHORIZATION regress_cbot;
SELECT try($$select * from worlds.sql('create merge check mine as select 1 where false')$$);
SELECT try($$select * from worlds.sql('drop merge check slow')$$);
SELECT count(*) AS shown FROM worlds.sql('show merge checks');
SELECT * FROM worlds.sql('create world bot_neg');
SELECT * FROM worlds.sql('switch world bot_neg');
UPDATE accounts SET balance = -1 WHERE id = 2;
SELECT * FROM worlds.sql('switch world main');
SELECT try($$select * from worlds.sql('merge world bot_neg')$$);
RESET SESSION AUTHORIZATION;
SELECT try($$select * from worlds.sql('merge world bot_neg')$$);
-- a check reads what the merging role can't: it runs as the database's owner, and refuses all the same
CREATE TABLE ledger (id int PRIMARY KEY, account int, amount int);
INSERT INTO ledger VALUES (1, 2, -7);
SELECT * FROM worlds.sql('create merge check ledger_ok on tables (accounts) as select id from ledger where amount < 0');
SET SESSION AUTHORIZATION regress_cbot;
SELECT try('select * from ledger');
SELECT * FROM worlds.sql('create world bot_ok');
SELECT * FROM worlds.sql('switch world bot_ok');
UPDATE accounts SET balance = balance + 1 WHERE id = 2;
SELECT * FROM worlds.sql('switch world main');
SELECT try($$select * from worlds.sql('merge world bot_ok')$$);
RESET SESSION AUTHORIZATION;
SELECT * FROM worlds.sql('drop merge check ledger_ok');
SELECT * FROM worlds.sql('drop world bot_ok');
-- for an agent keeping to a merge policy a broken check is a broken rule: 42501, queued
SELECT count(*) FROM worlds.sql('create merge policy open_rules');
SELECT count(*) FROM worlds.sql('alter agent regress_cbot set (policy = ''open_rules'')');
SET SESSION AUTHORIZATION regress_cbot;
SELECT try($$select * from worlds.sql('merge world bot_neg')$$);
RESET SESSION AUTHORIZATION;
DO $$ BEGIN FOR i IN 1..200 LOOP EXIT WHEN EXISTS (SELECT 1 FROM worlds.review); PERFORM pg_sleep(0.05); END LOOP; END $$;
SELECT world, policy, reasons FROM worlds.show_reviews();
SELECT * FROM worlds.sql('drop world bot_neg');
SELECT * FROM worlds.sql('drop merge policy open_rules cascade');
-- direct writes and COMMITs on main run no checks (constraints are for rules every write keeps)
UPDATE accounts SET balance = -5 WHERE id = 1;
SELECT * FROM accounts ORDER BY id;
SELECT * FROM worlds.sql('drop merge check slow');
SELECT * FROM worlds.sql('drop agent regress_cbot');
