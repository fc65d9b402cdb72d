-- Agents, merge policies, merge checks, readers, check reads and SIMULATE through worlds-proxy.
\pset format unaligned
create extension pg_worlds;
create table orders (id int primary key, status text not null);
create table payments (id int primary key, amount int);
insert into orders select g, 'new' from generate_series(1, 5) g;
-- Merge policies and agents (the spec's examples)
CREATE MERGE POLICY small WITH (max_rows = 500, max_deletes = 0, review_tables = 'payments') \gdesc
CREATE MERGE POLICY small WITH (max_rows = 500, max_deletes = 0, review_tables = 'payments');
create agent bot with (can = 'read,fork,write_own,merge_own') \gdesc
create agent bot with (can = 'read,fork,write_own,merge_own');
ALTER AGENT bot SET (can = 'read,fork,write_own,write_main,merge_own', policy = 'small');
SHOW REVIEWS;
SHOW MERGE POLICIES \gdesc
SHOW REVIEWS \gdesc
show agents \gdesc
show audit \gdesc
drop agent nobody;
-- Merge checks
create table lists (id int primary key);
create table leads (id int primary key, list int);
insert into lists values (1), (2), (3);
insert into leads values (1, 1), (2, 2), (3, 3);
CREATE MERGE CHECK lists_keep_leads ON TABLES (leads, lists) AS
  SELECT id FROM lists WHERE id NOT IN (SELECT list FROM leads);
SHOW MERGE CHECKS \gdesc
create world cleanup;
switch world cleanup;
delete from leads where id = 3;
use world main;
MERGE WORLD cleanup;
drop merge check lists_keep_leads;
-- Readers
register reader export on orders (status);
mark reader export critical;
show readers \gdesc
diff world cleanup readers \gdesc
unmark reader export;
unregister reader export;
-- Stale reads
create world payout with (check_reads = true);
check reads of world payout \gdesc
check reads of world payout;
-- SIMULATE (the spec's example at a smaller size), REPLAY
create table prices (sku int primary key, p float8, sold int);
insert into prices select g, 10, 1 from generate_series(1, 100) g;
simulate 4 worlds from main as trial
  run $$update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $1 % 100$$
  score $$select sum(p * sold) from prices$$
  keep 2 seed 42 \gdesc
simulate 4 worlds from main as trial
  run $$update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $1 % 100$$
  score $$select sum(p * sold) from prices$$
  keep 2 seed 42;
replay world trial_0;
