-- The database name chooses the world (worlds-proxy): the upstream's name or main is main; a world's
-- name is that world; options=-c worlds.world still works; an unknown world fails as an unknown database.
\pset format unaligned
create extension pg_worlds;
create table t (id int primary key, v text);
insert into t values (1, 'one');
create world agent_7;
\c agent_7
show worlds.world;
update t set v = 'uno' where id = 1;
select * from t;
diff;
\c main
show worlds.world;
select * from t;
\c -reuse-previous=on 'dbname=main options=-cworlds.world=agent_7'
show worlds.world;
select * from t;
switch world main;
show worlds.world;
\c nosuch
