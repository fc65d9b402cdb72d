#!/usr/bin/env bash
# With worlds.lazy_storage on (the default), a table is tracked at CREATE TABLE without storage: its worlds.tables row and its two internal capture
# triggers. Its history, inserts and views come with its first captured write (worlds._make_history), or
# with the database's first world. Checked here:
#   - a migration of 1,000 CREATE TABLEs in one transaction, with the default max_locks_per_transaction
#     (storage made at once with worlds.lazy_storage off: its locks are let go as it is made; and lazily, the default):
#     it commits, every table is tracked, none has storage, pg_class gained what stock gains;
#   - the first write makes the storage, keeps the change, and a moment of main before it reads the table
#     as it was; AS OF of a table never written reads it as it is;
#   - two sessions write a new table for the first time at once: both
#     writes land, both are kept in history, no error; under REPEATABLE READ too (no 40001);
#   - DROP TABLE of a never-written table leaves nothing in worlds_data; TRUNCATE and DROP of one written
#     keep its rows (history);
#   - CREATE TABLE AS has storage at once (its rows are kept as inserted);
#   - the first world gives every tracked table its storage: a world reads and writes a table that had
#     none, and merges it;
#   - two transactions first-writing two new tables in opposite orders: no deadlock (the storage is made
#     by a worker in a transaction of its own); a rolled-back first write keeps the storage, not the write;
#   - kill -9 of a table's first writer: its storage whole, nothing of the write; kill -9 in the middle of
#     making storage in the writer's own transaction (table created there): nothing half made.
source "$(dirname "$0")/common.sh"
start_cluster $CL yes
DB=s26_lazy
OUT=$RUN_DIR/s26_lazy; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
M() { psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 "$@" 2>&1; }
# sleeping_pid N: waits (up to 20 s: a loaded machine) for another session of $DB to be in pg_sleep(N); prints its pid
sleeping_pid() {
  local pid=
  for _ in $(seq 1 200); do
    pid=$(M -c "select pid from pg_stat_activity where datname = '$DB' and query like '%pg_sleep($1)%' and state = 'active' and pid <> pg_backend_pid() limit 1")
    [ -n "$pid" ] && break
    sleep 0.1
  done
  echo "$pid"
}
M -c "alter database $DB set worlds.lazy_storage = on" -c "create extension pg_worlds" >/dev/null
expect "max_locks_per_transaction" "$(M -c "show max_locks_per_transaction")" "64"
expect "worlds.lazy_storage" "$(M -c "show worlds.lazy_storage")" "on"

echo "check: 1,000 CREATE TABLEs in one transaction, storage made at once (worlds.lazy_storage off)"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists s26_eager" -c "create database s26_eager"
psql_in $CL -d s26_eager -q -c "alter database s26_eager set worlds.lazy_storage = off" -c "create extension pg_worlds"
{ echo "begin;"; seq 1 1000 | sed 's/.*/create table eager_& (id int primary key, name text, n int);/'; echo "commit;"; } >"$OUT/eager.sql"
psql_in $CL -d s26_eager -q -v ON_ERROR_STOP=1 -f "$OUT/eager.sql" >"$OUT/eager.log" 2>&1
expect "the migration's errors" "$(grep -c ERROR "$OUT/eager.log")" "0"
expect "tables tracked with storage" "$(psql_in $CL -d s26_eager -qAt -c "select count(*) from worlds.tables where relid::text like 'eager\_%' and history is not null")" "1000"

echo "check: with worlds.lazy_storage, 1,000 CREATE TABLEs in one transaction"
classes_before=$(M -c "select count(*) from pg_class")
{ echo "begin;"; seq 1 1000 | sed 's/.*/create table mig_& (id int primary key, name text, n int);/'; echo "commit;"; } >"$OUT/migration.sql"
psql_in $CL -d $DB -q -v ON_ERROR_STOP=1 -f "$OUT/migration.sql" >"$OUT/migration.log" 2>&1
expect "the migration's errors" "$(grep -c ERROR "$OUT/migration.log")" "0"
expect "tables tracked" "$(M -c "select count(*) from worlds.tables where relid::text like 'mig\_%'")" "1000"
expect "of them with storage" "$(M -c "select count(*) from worlds.tables where relid::text like 'mig\_%' and history is not null")" "0"
# stock: per table its heap, toast, toast index and primary key index
expect "relations the migration added" "$(M -c "select count(*) - $classes_before from pg_class")" "4000"
expect "relations in worlds_data" "$(M -c "select count(*) from pg_class where relnamespace = 'worlds_data'::regnamespace")" "0"

echo "check: the first write makes the storage"
before=$(M -c "select clock_timestamp()")
sleep 0.2
expect "insert" "$(M -c "insert into mig_1 values (1, 'one', 1), (2, 'two', 2)")" ""
expect "mig_1 has storage" "$(M -c "select history is not null and changes is not null and key_columns = '{id}' from worlds.tables where relid = 'mig_1'::regclass")" "t"
expect "its inserts are kept" "$(M -c "select count(*) from worlds_data.a_mig_1_$(M -c "select tabno from worlds.tables where relid = 'mig_1'::regclass")")" "2"
expect "main@(before the first write) reads it empty" "$(M -c "set worlds.world = 'main@$before'" -c "select count(*) from mig_1")" "0"
expect "main@(now) reads a table never written" "$(M -c "set worlds.world = 'main@$(M -c "select clock_timestamp()")'" -c "select count(*) from mig_2")" "0"
expect "AS OF a table never written" "$(M -c "select count(*) from worlds.as_of(null::mig_3, clock_timestamp())")" "0"
expect "mig_2, mig_3 still without storage" "$(M -c "select count(*) from worlds.tables where relid in ('mig_2'::regclass, 'mig_3'::regclass) and history is null")" "2"

echo "check: two first writers of a new table at once"
M -c "create table pair (id int primary key, who text)" >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin" -c "insert into pair values (1, 'a')" -c "select pg_sleep(2)" -c "commit" >"$OUT/pair_a.log" 2>&1 &
A=$!
sleeping_pid 2 >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "insert into pair values (2, 'b')" >"$OUT/pair_b.log" 2>&1 &
B=$!
wait $A; wait $B
expect "errors of the two writers" "$(cat "$OUT/pair_a.log" "$OUT/pair_b.log" | grep -c ERROR)" "0"
expect "both rows" "$(M -c "select string_agg(who, ',' order by id) from pair")" "a,b"
expect "both kept as inserted" "$(M -c "select count(*) from worlds_data.a_pair_$(M -c "select tabno from worlds.tables where relid = 'pair'::regclass") where _w_op = 'I'")" "2"

echo "check: the same under REPEATABLE READ, the second writer's snapshot taken before the first made the storage"
M -c "create table pair_rr (id int primary key, who text)" >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin isolation level repeatable read" -c "select 1" -c "insert into pair_rr values (1, 'a')" -c "select pg_sleep(2)" -c "commit" >"$OUT/rr_a.log" 2>&1 &
A=$!
sleeping_pid 2 >/dev/null
# (its snapshot first: then it waits for the first writer's storage, which commits after that snapshot)
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin isolation level repeatable read" -c "select count(*) from pair" -c "insert into pair_rr values (2, 'b')" -c "update pair_rr set who = 'b2' where id = 2" -c "commit" >"$OUT/rr_b.log" 2>&1 &
B=$!
wait $A; wait $B
expect "errors of the two writers (stock raises none: no 40001)" "$(cat "$OUT/rr_a.log" "$OUT/rr_b.log" | grep -c ERROR)" "0"
expect "both rows" "$(M -c "select string_agg(who, ',' order by id) from pair_rr")" "a,b2"
RT=$(M -c "select tabno from worlds.tables where relid = 'pair_rr'::regclass")
expect "both kept as inserted, and the update's before-image" "$(M -c "select string_agg(_w_op::text || id, ',' order by _w_op, id) from worlds_data.a_pair_rr_$RT")" "I1,I2,U2"

echo "check: two transactions first-write two new tables in opposite orders (no deadlock, as stock)"
# each table's storage is made by a worker in a transaction of its own (storage/maker.rs): neither writer
# holds a lock of the making for the other to wait on
M -c "create table cross_a (id int primary key, who text)" -c "create table cross_b (id int primary key, who text)" >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin" -c "insert into cross_a values (1, 'first')" -c "select pg_sleep(1.5)" -c "insert into cross_b values (1, 'first')" -c "commit" >"$OUT/cross_1.log" 2>&1 &
A=$!
sleeping_pid 1.5 >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin" -c "insert into cross_b values (2, 'second')" -c "select pg_sleep(0.5)" -c "insert into cross_a values (2, 'second')" -c "commit" >"$OUT/cross_2.log" 2>&1 &
B=$!
wait $A; wait $B
expect "errors of the two writers (no 40P01)" "$(cat "$OUT/cross_1.log" "$OUT/cross_2.log" | grep -c ERROR)" "0"
expect "cross_a's rows" "$(M -c "select string_agg(who, ',' order by id) from cross_a")" "first,second"
expect "cross_b's rows" "$(M -c "select string_agg(who, ',' order by id) from cross_b")" "first,second"
expect "all four kept as inserted" "$(M -c "select (select count(*) from worlds_data.a_cross_a_$(M -c "select tabno from worlds.tables where relid = 'cross_a'::regclass") where _w_op = 'I') + (select count(*) from worlds_data.a_cross_b_$(M -c "select tabno from worlds.tables where relid = 'cross_b'::regclass") where _w_op = 'I')")" "4"

echo "check: a first writer whose worker would queue behind DDL that waits for the writer"
# the writer reads q_a (its lock), an ALTER TABLE queues behind it, then the writer first-writes q_a: the
# worker's read of q_a would queue behind the ALTER, a wait the deadlock detector can't see; the worker
# gives up after deadlock_timeout and the writer makes the storage itself
M -c "create table q_a (id int primary key)" >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin" -c "select count(*) from q_a" -c "select pg_sleep(1)" -c "insert into q_a values (1)" -c "commit" >"$OUT/q_1.log" 2>&1 &
A=$!
sleeping_pid 1 >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "set lock_timeout = '30s'" -c "alter table q_a add column note text" >"$OUT/q_2.log" 2>&1 &
B=$!
wait $A; wait $B
expect "errors of the writer and the ALTER" "$(cat "$OUT/q_1.log" "$OUT/q_2.log" | grep -c ERROR)" "0"
expect "q_a's row, kept as inserted" "$(M -c "select count(*) from worlds_data.a_q_a_$(M -c "select tabno from worlds.tables where relid = 'q_a'::regclass") where _w_op = 'I'")" "1"
expect "q_a's new column" "$(M -c "select count(*) from information_schema.columns where table_name = 'q_a' and column_name = 'note'")" "1"

echo "check: a first writer whose worker can't connect (VACUUM FULL pg_class waits for the writer)"
# the worker's connection reads pg_class, queued behind the VACUUM FULL; its lock_timeout is set before it
# connects, so it gives up and the writer makes the storage itself (the core suite's vacuum test hung here)
M -c "create table vf (id int primary key)" >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin" -c "select count(*) > 0 from pg_class" -c "select pg_sleep(1)" -c "insert into vf values (1)" -c "commit" >"$OUT/vf_1.log" 2>&1 &
A=$!
sleeping_pid 1 >/dev/null
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "vacuum full pg_class" >"$OUT/vf_2.log" 2>&1 &
B=$!
wait $A; wait $B
expect "errors of the writer and the VACUUM FULL" "$(cat "$OUT/vf_1.log" "$OUT/vf_2.log" | grep -c ERROR)" "0"
expect "vf's row, kept as inserted" "$(M -c "select count(*) from worlds_data.a_vf_$(M -c "select tabno from worlds.tables where relid = 'vf'::regclass") where _w_op = 'I'")" "1"

echo "check: a first write rolled back keeps the storage (made and committed apart), not the write"
M -c "create table undone (id int primary key)" >/dev/null
M -c "begin" -c "insert into undone values (1)" -c "rollback" >/dev/null
expect "undone has storage" "$(M -c "select history is not null from worlds.tables where relid = 'undone'::regclass")" "t"
expect "nothing kept of the rolled-back write" "$(M -c "select count(*) from worlds_data.a_undone_$(M -c "select tabno from worlds.tables where relid = 'undone'::regclass")")" "0"
M -c "insert into undone values (2)" >/dev/null
expect "the next write is kept" "$(M -c "select string_agg(_w_op::text || id, ',') from worlds_data.a_undone_$(M -c "select tabno from worlds.tables where relid = 'undone'::regclass")")" "I2"

echo "check: a table created and written in one transaction gets its storage in that transaction"
M -c "begin" -c "create table born (id int primary key)" -c "insert into born values (1)" -c "rollback" >/dev/null
expect "rolled back: no born, nothing in worlds_data" "$(M -c "select count(*) from pg_class where relname like '%born%'")" "0"
M -c "begin" -c "create table born (id int primary key)" -c "insert into born values (1)" -c "commit" >/dev/null
expect "committed: born with storage, its row kept" "$(M -c "select count(*) from worlds_data.a_born_$(M -c "select tabno from worlds.tables where relid = 'born'::regclass")")" "1"

echo "check: DROP and TRUNCATE"
M -c "drop table mig_4" >/dev/null
expect "mig_4 left nothing" "$(M -c "select count(*) from worlds.tables where relid::text = 'mig_4'")$(M -c "select count(*) from worlds.dropped_table where table_name = 'mig_4'")" "00"
M -c "insert into mig_5 values (1, 'x', 1)" -c "truncate mig_5" >/dev/null
expect "mig_5's truncated row kept as deleted" "$(M -c "select count(*) from worlds_data.a_mig_5_$(M -c "select tabno from worlds.tables where relid = 'mig_5'::regclass") where _w_op = 'D'")" "1"
M -c "insert into mig_6 values (1, 'x', 1)" -c "drop table mig_6" >/dev/null
expect "mig_6's history kept after the drop" "$(M -c "select count(*) from worlds.dropped_table where table_name = 'mig_6'")" "1"

echo "check: CREATE TABLE AS has storage at once"
M -c "create table copied as select g as id from generate_series(1, 3) g" >/dev/null
expect "copied's storage" "$(M -c "select history is not null from worlds.tables where relid = 'copied'::regclass")" "t"

echo "check: kill -9 of a table's first writer"
M -c "create table crashy (id int primary key)" >/dev/null
# the first write's transaction holds; kill it before it commits
psql_in $CL -d $DB -qAt -c "begin" -c "insert into crashy values (1)" -c "select pg_sleep(30)" -c "commit" >"$OUT/crashy.log" 2>&1 &
C=$!
victim=$(sleeping_pid 30)
kill -9 "$victim"; wait $C 2>/dev/null || true
for _ in $(seq 1 60); do psql_in $CL -qAt -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
# (its storage was committed by the worker before the write: whole, with none of the killed write's rows)
CT=$(M -c "select tabno from worlds.tables where relid = 'crashy'::regclass")
expect "crashy after the crash: its storage whole" "$(M -c "select history is not null and changes is not null from worlds.tables where relid = 'crashy'::regclass")" "t"
expect "nothing kept of the killed write" "$(M -c "select count(*) from worlds_data.a_crashy_$CT")" "0"
expect "the next write is kept" "$(M -c "insert into crashy values (2)" -c "select string_agg(_w_op::text || id, ',') from worlds_data.a_crashy_$CT")" "I2"

echo "check: kill -9 while a table's storage is being made in the writer's transaction"
# created and first written in one transaction: the storage is that transaction's own
psql_in $CL -d $DB -qAt -c "begin" -c "create table crashy2 (id int primary key)" -c "insert into crashy2 values (1)" -c "select pg_sleep(30)" -c "commit" >"$OUT/crashy2.log" 2>&1 &
C=$!
victim=$(sleeping_pid 30)
kill -9 "$victim"; wait $C 2>/dev/null || true
for _ in $(seq 1 60); do psql_in $CL -qAt -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
expect "nothing half made" "$(M -c "select count(*) from pg_class where relname like '%crashy2%'")" "0"

echo "check: the first world gives every table its storage"
expect "CREATE WORLD w" "$(M -c "select * from worlds.sql('create world w')")" '{"tag": "CREATE WORLD"}'
expect "tables without storage" "$(M -c "select count(*) from worlds.tables where history is null or delta is null")" "0"
expect "w writes a table never written before" "$(M -c "set worlds.world = w" -c "insert into mig_7 values (7, 'seven', 7)" -c "select name from mig_7")" "seven"
expect "main doesn't see it" "$(M -c "select count(*) from mig_7")" "0"
expect "MERGE WORLD w" "$(M -c "select * from worlds.sql('merge world w')")" '{"tag": "MERGE 1"}'
expect "main after the merge" "$(M -c "select name from mig_7")" "seven"
M -c "create table after_world (id int primary key)" >/dev/null
expect "a table created after the first world: storage at once" "$(M -c "select history is not null and delta is not null from worlds.tables where relid = 'after_world'::regclass")" "t"

[ $failures -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "session 26: lazy storage ok"
