-- The spec's examples (../shared/spec/worlds-sql.txt), typed verbatim through worlds-proxy, in main.
\pset format unaligned
create extension pg_worlds;
create table orders (id int primary key, status text not null);
insert into orders select g, 'new' from generate_series(1, 10) g;

-- the spec's opening example
create world agent_7 with (task = 42);
switch world agent_7;
update orders set status = 'paid' where id = 7;
diff;                       -- what agent_7 changed
merge world agent_7;        -- into main; the session moves back to main
show worlds.world;
select id, status from orders where id = 7;

-- CREATE WORLD
create world agent_7 from main with (owner = 'claude', task = 42);
create world run_r42 with (run_id = 'r42', prompt_version = 'triage-v9', model = 'claude-opus-5-5', tool_schema = 'crm-tools-3');
-- FORK WORLD
fork world agent_7 as agent_7b meta '{"tags": ["retry"]}';
-- SHOW WORLDS / SHOW BRANCHES: real columns
show worlds \gdesc
show branches;
-- SWITCH WORLD
switch world agent_7;
update orders set status = 'shipped' where id in (1, 2);
delete from orders where id = 10;
use world main;
-- ALTER WORLD: the world's row, tag ALTER WORLD
alter world agent_7 set (task = null, reviewer = 'ada') \gdesc
alter world agent_7 set (task = null, reviewer = 'ada');
alter world agent_7 set ttl '1 day';
-- DIFF
diff world agent_7;
diff world agent_7 as sql;
diff world agent_7 readers \gdesc
-- MERGE ... DRY RUN, then MERGE variants
update orders set status = 'held' where id = 1;
merge world agent_7 dry run \gdesc
merge world agent_7;
merge world agent_7 by columns resolve ('orders/1' = theirs);
select id, status from orders where id in (1, 2, 10) order by id;
switch world agent_7b;
update orders set status = 'b' where id = 3;
use world main;
create world agent_7;
merge world agent_7b into agent_7;
merge world agent_7 only tables (orders);
-- REBASE
create world agent_8;
update orders set status = 'main changed' where id = 4;
rebase world agent_8;
rebase world agent_8 by columns using theirs;
-- UNDO MERGE
undo merge of world agent_7 skip changed;
select id, status from orders where id = 3;
-- DROP WORLD
drop world agent_8 cascade;
drop world if exists agent_8;
drop world agent_8;
-- SQL's own MERGE and CHECKPOINT pass through untouched
merge into orders o using (values (5, 'sql merge')) v(id, s) on o.id = v.id when matched then update set status = v.s;
checkpoint;
-- names: a dash needs quotes (42601), reserved words (42939)
create world task-1;
create world ours;
merge world;
