-- Time travel through worlds-proxy: AS OF typed, checkpoints, restore, history; the database name as a
-- moment of the past.
\pset format unaligned
create extension pg_worlds;
create table orders (id int primary key, status text not null);
insert into orders select g, 'new' from generate_series(1, 3) g;
select clock_timestamp()::text as before_update \gset
select pg_sleep(0.1);
update orders set status = 'paid' where id = 2;
-- AS OF: the table's own columns and types
select * from orders as of :'before_update' order by id \gdesc
select * from orders as of :'before_update' order by id;
select now.id, now.status, old.status
from orders now join orders as of :'before_update' old on old.id = now.id
where old.status <> now.status;
-- CHECKPOINT WORLD / RESTORE WORLD
create world bot_task;
checkpoint world bot_task as 'before';
switch world bot_task;
delete from orders where id = 1;
use world main;
restore world bot_task to checkpoint 'before';
diff world bot_task;
show checkpoints \gdesc
-- SHOW HISTORY (times vary: its columns)
show history \gdesc
show history for world bot_task limit 2 \gdesc
show history_retention;
-- the spec's own example, restoring main to a time
restore world main to '-10 minutes';
select * from orders order by id;
-- SHOW STORAGE / DISK / METRICS: their columns
show storage \gdesc
show disk \gdesc
show metrics \gdesc
-- a moment as the database name: read only
\c 'main@-1 second'
show worlds.world;
select count(*) from orders;
insert into orders values (9, 'x');
