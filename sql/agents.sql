-- Agents: CREATE/ALTER/DROP/SHOW AGENTS; rights and quotas met from the agent's own session (SET SESSION
-- AUTHORIZATION: the session's user is who acts, as a login with the token is); SHOW AUDIT; worlds that
-- belong to someone. (tests/sessions/21_agents.sh logs in with the tokens over TCP.)
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_bot, regress_peer, regress_person, regress_other;
RESET client_min_messages;
CREATE EXTENSION pg_worlds;
CREATE FUNCTION try(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN sqlstate || ': ' || sqlerrm; END $$;
GRANT EXECUTE ON FUNCTION try(text) TO PUBLIC;
CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL);
INSERT INTO acct VALUES (1, 100), (2, 100), (3, 100);
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON acct TO PUBLIC;
CREATE FUNCTION zero_all() RETURNS void LANGUAGE sql SECURITY DEFINER AS $$ UPDATE acct SET bal = 0 $$;
-- CREATE AGENT: name, id, token (shown only now); the token is the role's password, as SCRAM
CREATE TEMP TABLE made AS SELECT j ->> 'name' AS name, j ->> 'id' AS id, j ->> 'token' AS token FROM worlds.sql('create agent regress_bot') j;
SELECT name, id ~ '^a[0-9a-f]{6}-' AS id_shaped, token ~ '^wt_[0-9a-f]{64}$' AS token_256_bits FROM made;
SELECT rolcanlogin, rolsuper, rolcreaterole, left(rolpassword, 14) AS stored FROM pg_authid WHERE rolname = 'regress_bot';
SELECT (SELECT rolpassword FROM pg_authid WHERE rolname = 'regress_bot') LIKE '%' || token || '%' AS token_kept_in_clear FROM made;
SELECT j ->> 'name' AS name, j ->> 'can' AS can, j ->> 'max_worlds' AS max_worlds, j ->> 'world_ttl' AS world_ttl, j ->> 'disabled' AS disabled,
       j ->> 'policy' AS policy, j ? 'token' AS shows_token
FROM worlds.sql('show agents') j;
-- (SHOW AGENTS's columns, in the spec's order; typed in psql too)
SELECT * FROM worlds.show_agents() WHERE false;
SHOW AUDIT;
-- settings: the keys named change, the rest stay; limits map onto the role's own settings
SELECT j ->> 'can' AS can, j ->> 'max_query_ms' AS max_query_ms, j ->> 'world_ttl' AS world_ttl, j ->> 'max_idle_ms' AS max_idle_ms,
       j ->> 'max_memory_mb' AS max_memory_mb, j ->> 'max_concurrent' AS max_concurrent
FROM worlds.sql('alter agent regress_bot set (max_query_ms = ''2 seconds'', world_ttl = ''1 day'', max_idle_ms = 5000, max_memory_mb = 8, max_concurrent = 3)') j;
SELECT rolconnlimit FROM pg_roles WHERE rolname = 'regress_bot';
SELECT s FROM pg_db_role_setting, unnest(setconfig) s WHERE setrole = 'regress_bot'::regrole ORDER BY s;
SELECT j ->> 'max_query_ms' AS max_query_ms, j ->> 'max_concurrent' AS max_concurrent
FROM worlds.sql('alter agent regress_bot set (max_query_ms = 0, max_idle_ms = 0, max_memory_mb = 0, max_concurrent = 0)') j;
SELECT rolconnlimit, (SELECT count(*) FROM pg_db_role_setting WHERE setrole = 'regress_bot'::regrole) AS settings FROM pg_roles WHERE rolname = 'regress_bot';
-- errors
SELECT try($$select * from worlds.sql('create agent regress_bot')$$);
SELECT try($$select * from worlds.sql('create agent guest')$$);
SELECT try($$select * from worlds.sql('create agent "System"')$$);
SELECT try($$select * from worlds.sql('create agent ''a b''')$$);
SELECT try($$select * from worlds.sql('create agent bot-1')$$);
SELECT try($$select * from worlds.sql('create agent regress_x with (colour = 1)')$$);
SELECT try($$select * from worlds.sql('alter agent regress_bot set (can = ''read,fly'')')$$);
SELECT try($$select * from worlds.sql('alter agent regress_bot set (max_worlds = ''many'')')$$);
SELECT try($$select * from worlds.sql('alter agent regress_bot set (max_query_ms = ''soon'')')$$);
SELECT try($$select * from worlds.sql('alter agent regress_bot set (policy = ''small'')')$$);
SELECT try($$select * from worlds.sql('alter agent nobody set (max_worlds = 1)')$$);
SELECT try($$select * from worlds.sql('drop agent nobody')$$);
SELECT try($$select * from worlds.sql('create agent postgres')$$);
SELECT count(*) AS agents FROM worlds.agent;
-- the agent at work: read, fork, write_own; two worlds at most
SELECT j ->> 'max_worlds' AS max_worlds FROM worlds.sql('alter agent regress_bot set (max_worlds = 2, world_ttl = 0)') j;
SELECT * FROM worlds.sql('create world people_w');
SET SESSION AUTHORIZATION regress_bot;
-- main is read only to it, whatever its GRANTs: plain SQL, a CTE, SQL MERGE, TRUNCATE, a function, a
-- SECURITY DEFINER function it doesn't own
SELECT try('insert into acct values (9, 1)');
SELECT try('update acct set bal = 0');
SELECT try('delete from acct');
SELECT try('with d as (delete from acct returning 1) select count(*) from d');
SELECT try('merge into acct a using (select 1 id) s on a.id = s.id when matched then update set bal = 0');
SELECT try('truncate acct');
SELECT try('select zero_all()');
SELECT sum(bal) AS total FROM acct;
SELECT * FROM worlds.sql('create world bot_w');
SELECT * FROM worlds.sql('create world bot_w2');
SELECT try($$select * from worlds.sql('create world bot_w3')$$);
SELECT try($$select * from worlds.sql('create world bot_past from ''main@-1 second''')$$);
SELECT j ->> 'name' AS name, j ->> 'owner' AS owner FROM worlds.sql('show worlds') j WHERE j ->> 'name' LIKE '%\_w%' ORDER BY 1;
SELECT * FROM worlds.sql('switch world bot_w');
UPDATE acct SET bal = bal - 10 WHERE id = 1;
UPDATE acct SET bal = bal + 10 WHERE id = 2;
SELECT * FROM acct ORDER BY id;
-- someone else's world: it may read it, not write, alter, drop, merge or checkpoint it
SELECT * FROM worlds.sql('switch world people_w');
SELECT sum(bal) AS total FROM acct;
SELECT try('update acct set bal = 0');
SELECT * FROM worlds.sql('switch world main');
SELECT try($$select * from worlds.sql('alter world people_w set (x = 1)')$$);
SELECT try($$select * from worlds.sql('drop world people_w')$$);
SELECT try($$select * from worlds.sql('merge world people_w')$$);
SELECT try($$select * from worlds.sql('checkpoint world people_w as ''c''')$$);
SELECT try($$select * from worlds.sql('rebase world people_w')$$);
-- its own world: not mergeable without merge_own; TTL and pins are for admins
SELECT try($$select * from worlds.sql('merge world bot_w')$$);
SELECT try($$select * from worlds.sql('alter world bot_w set ttl ''1 hour''')$$);
SELECT j ->> 'meta' AS meta FROM worlds.sql('alter world bot_w set (run_id = ''r1'')') j;
-- it may not manage agents or raise its own rights
SELECT try($$select * from worlds.sql('alter agent regress_bot set (can = ''admin'')')$$);
SELECT try($$select * from worlds.sql('create agent regress_peer')$$);
SELECT try($$select * from worlds.sql('alter system set history_retention = ''0''')$$);
SELECT try('update worlds.agent set can = ''{admin}''');
SELECT try('insert into worlds.audit (agent, action) values (''x'', ''y'')');
RESET SESSION AUTHORIZATION;
-- merge_own: it merges its own world; the totals hold
SELECT j ->> 'can' AS can FROM worlds.sql('alter agent regress_bot set (can = ''read,fork,write_own,merge_own'')') j;
SET SESSION AUTHORIZATION regress_bot;
SELECT * FROM worlds.sql('merge world bot_w');
SELECT * FROM acct ORDER BY id;
SELECT try($$select * from worlds.sql('merge world people_w')$$);
-- max_changes: rows each of its worlds may change; past it the statement writes nothing
RESET SESSION AUTHORIZATION;
SELECT j ->> 'max_changes' AS max_changes FROM worlds.sql('alter agent regress_bot set (max_changes = 2)') j;
SET SESSION AUTHORIZATION regress_bot;
SELECT * FROM worlds.sql('switch world bot_w2');
UPDATE acct SET bal = bal + 1 WHERE id = 1;
UPDATE acct SET bal = bal + 1 WHERE id IN (1, 2);
SELECT try('update acct set bal = bal + 1 where id in (2, 3)');
SELECT * FROM acct ORDER BY id;
-- writes_per_minute: write statements a minute
SELECT * FROM worlds.sql('switch world main');
RESET SESSION AUTHORIZATION;
SELECT j ->> 'writes_per_minute' AS writes_per_minute FROM worlds.sql('alter agent regress_bot set (max_changes = 0, writes_per_minute = 5)') j;
SET SESSION AUTHORIZATION regress_bot;
SELECT * FROM worlds.sql('switch world bot_w2');
-- (4 so far this minute: 2 in bot_w, 2 in bot_w2; the refused one left no row)
UPDATE acct SET bal = bal + 1 WHERE id = 1;
SELECT try('update acct set bal = bal + 1 where id = 1');
SELECT * FROM worlds.sql('switch world main');
-- SHOW AUDIT: at, agent, world, action, rows, run; the latest first
SELECT j ->> 'agent' AS agent, j ->> 'world' AS world, j ->> 'action' AS action, j ->> 'rows' AS rows, j -> 'run' AS run
FROM worlds.sql('show audit for agent regress_bot limit 20') j;
SELECT * FROM worlds.show_audit() WHERE false;
RESET SESSION AUTHORIZATION;
-- write_main: now it may write main directly
SELECT j ->> 'can' AS can FROM worlds.sql('alter agent regress_bot set (can = ''read,write_main'', writes_per_minute = 0)') j;
SET SESSION AUTHORIZATION regress_bot;
UPDATE acct SET bal = bal WHERE id = 3;
SELECT try($$select * from worlds.sql('create world bot_w4')$$);
RESET SESSION AUTHORIZATION;
-- disabled: it can't log in, and it can do nothing
SELECT j ->> 'disabled' AS disabled FROM worlds.sql('alter agent regress_bot set (disabled = true)') j;
SELECT rolcanlogin FROM pg_roles WHERE rolname = 'regress_bot';
SET SESSION AUTHORIZATION regress_bot;
SELECT try('update acct set bal = bal where id = 3');
SELECT try($$select * from worlds.sql('show worlds')$$);
RESET SESSION AUTHORIZATION;
SELECT j ->> 'disabled' AS disabled FROM worlds.sql('alter agent regress_bot set (disabled = false)') j;
SELECT rolcanlogin FROM pg_roles WHERE rolname = 'regress_bot';
-- worlds belong to someone, for people too: only their role (or its members), admins and reviewers
-- alter, drop, merge, rebase or checkpoint them
CREATE ROLE regress_person;
CREATE ROLE regress_other;
SET SESSION AUTHORIZATION regress_person;
SELECT * FROM worlds.sql('create world person_w');
SELECT try($$select * from worlds.sql('create agent regress_peer')$$);
SET SESSION AUTHORIZATION regress_other;
SELECT try($$select * from worlds.sql('drop world person_w')$$);
SELECT try($$select * from worlds.sql('alter world person_w set (x = 1)')$$);
SELECT try($$select * from worlds.sql('merge world person_w')$$);
SELECT j ->> 'name' AS name, j ->> 'owner' AS owner FROM worlds.sql('show worlds') j WHERE j ->> 'name' = 'person_w';
RESET SESSION AUTHORIZATION;
GRANT worlds_reviewer TO regress_other;
SET SESSION AUTHORIZATION regress_other;
SELECT j ->> 'meta' AS meta FROM worlds.sql('alter world person_w set (reviewed = true)') j;
SELECT * FROM worlds.sql('drop world person_w');
RESET SESSION AUTHORIZATION;
-- worlds_admin members manage agents
GRANT worlds_admin TO regress_person;
SET SESSION AUTHORIZATION regress_person;
SELECT j ->> 'name' AS name FROM worlds.sql('create agent regress_peer') j;
SELECT * FROM worlds.sql('drop agent regress_peer');
RESET SESSION AUTHORIZATION;
-- UNDO AGENT: puts back, in the session's world, what the agent changed since a moment: its direct
-- writes and its merges
CREATE TABLE notes (id int PRIMARY KEY, body text);
INSERT INTO notes VALUES (1, 'a'), (2, 'b'), (3, 'c');
GRANT SELECT, INSERT, UPDATE, DELETE ON notes TO PUBLIC;
SELECT j ->> 'can' AS can FROM worlds.sql('alter agent regress_bot set (can = ''read,fork,write_own,merge_own,write_main'', max_worlds = 0)') j;
SELECT clock_timestamp() AS before_bot \gset
SET SESSION AUTHORIZATION regress_bot;
UPDATE notes SET body = 'bot' WHERE id = 1;
DELETE FROM notes WHERE id = 2;
INSERT INTO notes VALUES (4, 'bot');
SELECT * FROM worlds.sql('create world bot_run with (run_id = ''r42'')');
SELECT * FROM worlds.sql('switch world bot_run');
UPDATE notes SET body = 'run' WHERE id = 3;
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM worlds.sql('merge world bot_run');
-- it may not undo (restore and merge, or admin)
SELECT try(format($$select * from worlds.sql(%L)$$, format($$undo agent regress_bot since %L$$, :'before_bot')));
RESET SESSION AUTHORIZATION;
SELECT * FROM notes ORDER BY id;
-- someone else changed row 4 since: 40001 names it, nothing is undone
UPDATE notes SET body = 'person' WHERE id = 4;
SELECT try(format($$select * from worlds.sql(%L)$$, format($$undo agent regress_bot since %L$$, :'before_bot')));
SELECT * FROM notes ORDER BY id;
-- one run: what came from worlds with run_id r42
SELECT * FROM worlds.sql(format($$undo agent regress_bot since %L where run_id = 'r42'$$, :'before_bot'));
SELECT * FROM notes ORDER BY id;
-- SKIP CHANGED leaves row 4 and undoes the rest
SELECT * FROM worlds.sql(format($$undo agent regress_bot since %L skip changed$$, :'before_bot'));
SELECT * FROM notes ORDER BY id;
-- in a world: the session's world
SELECT clock_timestamp() AS before_world \gset
SET SESSION AUTHORIZATION regress_bot;
SELECT * FROM worlds.sql('create world bot_u');
SELECT * FROM worlds.sql('switch world bot_u');
UPDATE notes SET body = 'in world' WHERE id IN (1, 2);
SELECT * FROM worlds.sql('switch world main');
RESET SESSION AUTHORIZATION;
SELECT * FROM worlds.sql('switch world bot_u');
UPDATE notes SET body = 'admin in world' WHERE id = 2;
SELECT try(format($$select * from worlds.sql(%L)$$, format($$undo agent regress_bot since %L$$, :'before_world')));
SELECT * FROM worlds.sql(format($$undo agent regress_bot since %L skip changed$$, :'before_world'));
SELECT * FROM notes ORDER BY id;
SELECT * FROM worlds.sql('switch world main');
SELECT * FROM notes ORDER BY id;
SELECT * FROM worlds.sql('drop world bot_u');
SELECT try($$select * from worlds.sql('undo agent nobody since ''-1 hour''')$$);
SELECT left(try($$select * from worlds.sql('undo agent regress_bot since ''-10 days''')$$), 5) AS outside_the_window;
BEGIN;
SELECT * FROM worlds.sql('undo agent regress_bot since ''-1 hour''');
ROLLBACK;
-- DROP AGENT: the role goes; its worlds and audit stay
SELECT * FROM worlds.sql('drop agent regress_bot');
SELECT count(*) AS roles FROM pg_roles WHERE rolname IN ('regress_bot', 'regress_peer');
SELECT name, owner FROM worlds.show_worlds() WHERE owner = 'regress_bot' ORDER BY name;
SELECT count(*) > 0 AS audit_kept FROM worlds.audit WHERE agent = 'regress_bot';
SELECT * FROM worlds.sql('drop world bot_w2');
SELECT * FROM worlds.sql('drop world people_w');
DROP ROLE regress_person, regress_other;
