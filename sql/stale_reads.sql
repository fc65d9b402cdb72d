-- Stale reads: a world forked WITH (check_reads = true) is held when rows it only read changed in its
-- parent since the fork. What counts as read (keys, filtered scans, columns, promotion to the whole
-- table), where it holds (MERGE in every form, REBASE, DRY RUN, CHECK READS) and an agent's policy.
-- (Restarts and kill -9: tests/sessions/24.)
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_rbot;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
CREATE FUNCTION reads(w text) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg((j ->> 'checked_against') || ': ' || (j ->> 'changed'), '; '), 'nothing moved')
    FROM worlds.sql('check reads of world ' || quote_ident(w)) j $$;
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance int, notes text);
CREATE TABLE payouts (id serial PRIMARY KEY, account int, amount int);
INSERT INTO accounts SELECT g, CASE WHEN g % 2 = 0 THEN 'ana' ELSE 'bob' END, 100, '' FROM generate_series(1, 20) g;
GRANT SELECT, INSERT, UPDATE, DELETE ON accounts, payouts TO PUBLIC;
GRANT USAGE ON SEQUENCE payouts_id_seq TO PUBLIC;

-- the spec's example: the payout decided on a balance that changed
SELECT * FROM worlds.sql('create world payout with (check_reads = true)');
SET worlds.world = payout;
SELECT balance FROM accounts WHERE id = 1;
INSERT INTO payouts (account, amount) VALUES (1, 100);
RESET worlds.world;
SELECT reads('payout');
UPDATE accounts SET balance = 50 WHERE id = 1;
SELECT * FROM worlds.sql('check reads of world payout');
SELECT j ->> 'detail' AS blocked FROM worlds.sql('merge world payout dry run') j WHERE j ->> 'outcome' = 'blocked';
SELECT try($$select * from worlds.sql('merge world payout')$$);
SELECT try($$select * from worlds.sql('merge world payout only tables (payouts)')$$);
SELECT try($$select * from worlds.sql('rebase world payout')$$);
SELECT count(*) AS payouts_in_main FROM payouts;
-- only when forking; a person turns it off, and the merge goes through
SELECT try($$select * from worlds.sql('alter world payout set (check_reads = true)')$$);
SELECT j -> 'meta' AS meta FROM worlds.sql('alter world payout set (check_reads = false)') j;
SELECT try($$select * from worlds.sql('check reads of world payout')$$);
SELECT * FROM worlds.sql('merge world payout');
SELECT count(*) AS payouts_in_main FROM payouts;
SELECT try($$select * from worlds.sql('create world nope with (check_reads = ''sometimes'')')$$);
SELECT * FROM worlds.sql('create world plain');
SELECT try($$select * from worlds.sql('check reads of world plain')$$);
-- what it read before isn't known: turning the check on later is refused
SELECT try($$select * from worlds.sql('alter world plain set (check_reads = true)')$$);
SELECT try($$select * from worlds.sql('check reads of world main')$$);
SELECT * FROM worlds.sql('drop world plain');

-- a key looked up holds only on its own row, and only on columns read (a row added or deleted always)
SELECT * FROM worlds.sql('create world k with (check_reads = true)');
SET worlds.world = k;
SELECT balance FROM accounts WHERE id = 3;
SELECT id FROM accounts WHERE id IN (5, 6);
SELECT count(*) FROM accounts WHERE id = 99;
RESET worlds.world;
UPDATE accounts SET balance = 101 WHERE id = 4;
UPDATE accounts SET notes = 'n' WHERE id = 3;
UPDATE accounts SET notes = 'n' WHERE id = 5;
SELECT reads('k');
UPDATE accounts SET balance = 99 WHERE id = 3;
SELECT reads('k');
INSERT INTO accounts VALUES (99, 'cy', 0, '');
DELETE FROM accounts WHERE id = 6;
SELECT reads('k');
SELECT * FROM worlds.sql('drop world k');

-- a filtered scan reads the rows its conditions match, before or after the change
SELECT * FROM worlds.sql('create world f with (check_reads = true)');
SET worlds.world = f;
SELECT sum(balance) FROM accounts WHERE owner = 'ana';
RESET worlds.world;
UPDATE accounts SET balance = balance + 1 WHERE id = 7;      -- bob's
UPDATE accounts SET notes = 'x' WHERE id = 8;                -- ana's, a column not read
INSERT INTO accounts VALUES (100, 'bob', 5, '');             -- another owner's row added
SELECT reads('f');
UPDATE accounts SET owner = 'ana' WHERE id = 9;              -- moved into the scan
SELECT reads('f');
SELECT * FROM worlds.sql('drop world f');

-- ranges, IN, IS NULL, LIKE 'prefix%', and a prepared statement's parameter
SELECT * FROM worlds.sql('create world r with (check_reads = true)');
SET worlds.world = r;
SELECT count(*) FROM accounts WHERE balance > 150 AND id < 50;
SELECT count(*) FROM accounts WHERE owner IN ('zed', 'yan');
SELECT count(*) FROM accounts WHERE notes IS NULL;
SELECT count(*) FROM accounts WHERE owner LIKE 'qu%';
PREPARE by_owner(text) AS SELECT count(*) FROM accounts WHERE owner = $1;
EXECUTE by_owner('vic');
RESET worlds.world;
UPDATE accounts SET balance = 140 WHERE id = 10;             -- stays at most 150
UPDATE accounts SET owner = 'xavier' WHERE id = 11;          -- no condition matches
SELECT reads('r');
UPDATE accounts SET balance = 151 WHERE id = 12;
UPDATE accounts SET owner = 'yan' WHERE id = 13;
UPDATE accounts SET notes = NULL WHERE id = 14;
UPDATE accounts SET owner = 'quinn' WHERE id = 15;
UPDATE accounts SET owner = 'vic' WHERE id = 16;
SELECT reads('r');
SELECT * FROM worlds.sql('drop world r');

-- a condition that isn't column op constant (or an OR of columns) reads the whole table
SELECT * FROM worlds.sql('create world o with (check_reads = true)');
SET worlds.world = o;
SELECT count(*) FROM accounts WHERE lower(owner) = 'nobody';
RESET worlds.world;
UPDATE accounts SET balance = 0 WHERE id = 17;
SELECT reads('o');
SELECT * FROM worlds.sql('drop world o');

-- reads inside a plpgsql function and a sub-query count; rows the world wrote itself aren't checked
CREATE FUNCTION balance_of(a int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE b int;
BEGIN SELECT balance INTO b FROM accounts WHERE id = a; RETURN b; END $$;
SELECT * FROM worlds.sql('create world p with (check_reads = true)');
SET worlds.world = p;
SELECT balance_of(18);
SELECT count(*) FROM payouts WHERE account IN (SELECT id FROM accounts WHERE owner = 'wanda');
UPDATE accounts SET balance = balance - 10 WHERE id = 19;
RESET worlds.world;
UPDATE accounts SET notes = 'mine' WHERE id = 19;             -- the world's own row: a conflict's business
SELECT reads('p');
UPDATE accounts SET owner = 'wanda' WHERE id = 20;
UPDATE accounts SET balance = 7 WHERE id = 18;
SELECT reads('p');
SELECT * FROM worlds.sql('drop world p');

-- a join's inner lookups by the outer rows' values (a nested loop's parameters) read those keys only,
-- as each lookup runs; a sub-query run per row the same
SELECT * FROM worlds.sql('create world j with (check_reads = true)');
SET worlds.world = j;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_seqscan = off;
SELECT p.amount, a.owner FROM payouts p JOIN accounts a ON a.id = p.account WHERE p.id = 1;
SELECT p.id, (SELECT a.balance FROM accounts a WHERE a.id = p.account) FROM payouts p WHERE p.id = 1;
-- (a lookup by an expression of the outer row, a.id = p.account + 1, reads the whole table)
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_seqscan;
RESET worlds.world;
UPDATE accounts SET notes = 'not looked up' WHERE id = 3;
SELECT reads('j');
UPDATE accounts SET owner = 'zed' WHERE id = 1;
UPDATE accounts SET balance = 3 WHERE id = 2;
SELECT reads('j');
SELECT * FROM worlds.sql('drop world j');

-- a scan that stops early (LIMIT over an index scan of the key) read up to where it stopped, its
-- conditions included; scanning backward, from where it stopped up
SELECT * FROM worlds.sql('create world lim with (check_reads = true)');
SET worlds.world = lim;
SELECT id FROM accounts WHERE balance >= 0 ORDER BY id LIMIT 3;
SELECT id FROM accounts ORDER BY id DESC LIMIT 1;
RESET worlds.world;
UPDATE accounts SET balance = balance + 1 WHERE id = 10;      -- past where the first stopped
UPDATE accounts SET balance = balance + 1 WHERE id = 19;      -- below where the second stopped
INSERT INTO accounts VALUES (50, 'new', 1, '');                -- between the two
SELECT reads('lim');
UPDATE accounts SET balance = balance + 1 WHERE id = 3;
INSERT INTO accounts VALUES (101, 'new', 1, '');
SELECT reads('lim');
SELECT * FROM worlds.sql('drop world lim');
DELETE FROM accounts WHERE id IN (50, 101);

-- past 10,000 keys of one table, reads of it count as the whole table
SELECT * FROM worlds.sql('create world many with (check_reads = true)');
SET worlds.world = many;
-- (each lookup its own statement with its own constant: 10,000 keys)
DO $$ BEGIN FOR i IN 1..10000 LOOP EXECUTE format('SELECT balance FROM accounts WHERE id = %s', 100000 + i); END LOOP; END $$;
RESET worlds.world;
SELECT tables, keys AS keys_kept FROM worlds._read_set_stats();
UPDATE accounts SET balance = 1 WHERE id = 2;
SELECT reads('many');
SET worlds.world = many;
SELECT balance FROM accounts WHERE id = 200001;
RESET worlds.world;
SELECT tables, keys <= 10000 AS keys_let_go FROM worlds._read_set_stats();
SELECT reads('many');
SELECT * FROM worlds.sql('drop world many');

-- a prepared statement on its generic plan: the parameter's value is the key read
SELECT * FROM worlds.sql('create world prepared with (check_reads = true)');
SET worlds.world = prepared;
SET plan_cache_mode = force_generic_plan;
PREPARE one_balance(int) AS SELECT balance FROM accounts WHERE id = $1;
EXECUTE one_balance(5);
EXECUTE one_balance(7);
RESET plan_cache_mode;
RESET worlds.world;
UPDATE accounts SET balance = 2 WHERE id = 6;
SELECT reads('prepared');
UPDATE accounts SET balance = 2 WHERE id = 7;
SELECT reads('prepared');
DEALLOCATE one_balance;
SELECT * FROM worlds.sql('drop world prepared');

-- an agent keeping to a policy with check_reads: its worlds check reads, it can't turn that off, and a
-- stale read is a broken rule: its world waits in SHOW REVIEWS
CREATE FUNCTION queued(w text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..200 LOOP
        IF EXISTS (SELECT 1 FROM worlds.review r JOIN worlds.world x ON x.num = r.world WHERE x.name = w AND x.dropped IS NULL) THEN RETURN true; END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN false;
END $$;
SELECT j ->> 'check_reads' AS check_reads FROM worlds.sql('create merge policy careful with (check_reads = true)') j;
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_rbot with (can = ''read,fork,write_own,merge_own'', policy = ''careful'')') j;
SET SESSION AUTHORIZATION regress_rbot;
SELECT * FROM worlds.sql('create world bot_w');
SELECT j -> 'meta' AS meta FROM worlds.sql('show worlds') j WHERE j ->> 'name' = 'bot_w';
SELECT try($$select * from worlds.sql('alter world bot_w set (check_reads = false)')$$);
SET worlds.world = bot_w;
SELECT balance FROM accounts WHERE id = 2;
INSERT INTO payouts (account, amount) VALUES (2, 1);
RESET worlds.world;
RESET SESSION AUTHORIZATION;
UPDATE accounts SET balance = 2 WHERE id = 2;
SET SESSION AUTHORIZATION regress_rbot;
SELECT try($$select * from worlds.sql('merge world bot_w')$$);
RESET SESSION AUTHORIZATION;
SELECT queued('bot_w');
SELECT world, policy, reasons FROM worlds.show_reviews();
SELECT * FROM worlds.sql('drop world bot_w');
SELECT * FROM worlds.sql('drop agent regress_rbot');
