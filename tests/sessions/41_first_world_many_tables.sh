#!/usr/bin/env bash
# The database's first world gives every tracked table its delta. Made in the first CREATE WORLD's own
# transaction, each table's took about twenty locks until it ended (the table, its history's views
# replaced: relations, row types, rules, triggers): with 2,000 tables that had storage, 44,000 locks
# against a shared lock table of about 4,500 here (max_locks_per_transaction 64, the default), and the
# first CREATE WORLD failed with "out of shared memory" (found by hand; this test fails on that code). Now
# a worker makes them ahead, 32 tables a transaction (storage/maker.rs). Checked here, with the defaults:
#   - 2,000 tables with storage: the first CREATE WORLD succeeds, every table has its delta, the world
#     reads, writes, diffs, rebases and merges one of them, another world is dropped, SHOW HISTORY shows
#     main's writes, and the server never ran out of shared memory;
#   - a migration of 300 tables in one transaction beside the first CREATE WORLD: both succeed, and every
#     table, the migration's too, has its delta once both are done;
#   - kill -9 of the first CREATE WORLD in the middle of the worker's making: no world, every delta made
#     whole; the next CREATE WORLD makes the rest and works;
#   - four first CREATE WORLDs at once, with first writes and CREATE TABLEs beside them: all succeed, no
#     deadlock, every table has its delta.
source "$(dirname "$0")/common.sh"
start_cluster $CL yes
OUT=$RUN_DIR/s41_many; rm -rf "$OUT"; mkdir -p "$OUT"
DIR=$(cluster_dir $CL)
log_lines() { grep -c "$1" "$DIR/server.log" || true; }
expect "max_locks_per_transaction" "$(psql_in $CL -qAt -c "show max_locks_per_transaction")" "64"

# many_tables DB N: N tables with their storage (history, inserts, views), made at CREATE TABLE
# (worlds.lazy_storage off), 100 a transaction; one row each
many_tables() {
  local db=$1 n=$2
  psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $db" -c "create database $db"
  psql_in $CL -d $db -qc "create extension pg_worlds" -c "alter database $db set worlds.lazy_storage = off"
  for start in $(seq 1 100 "$n"); do
    echo "begin;"
    seq "$start" $((start + 99)) | sed 's/.*/create table many_\0 (id int primary key, v int); insert into many_\0 values (1, 0);/'
    echo "commit;"
  done >"$OUT/$db.sql"
  psql_in $CL -d $db -q -v ON_ERROR_STOP=1 -f "$OUT/$db.sql" >"$OUT/$db.log" 2>&1 || fail "making $n tables in $db: $(tail -3 "$OUT/$db.log")"
  expect "$db: tables with storage" "$(psql_in $CL -d $db -qAt -c "select count(*) from worlds.tables where history is not null")" "$n"
}
# the tables without a delta, and those whose delta is named but not there (half made)
without_delta() { psql_in $CL -d "$1" -qAt -c "select count(*) from worlds.tables where delta is null"; }
half_made() { psql_in $CL -d "$1" -qAt -c "select count(*) from worlds.tables t where delta is not null and not exists (select from pg_class c where c.oid = t.delta)"; }

echo "check: the first CREATE WORLD of a database with 2,000 tables that have storage"
DB=s41_many
many_tables $DB 2000
oom_before=$(log_lines "out of shared memory")
out=$(psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "select * from worlds.sql('create world w')" 2>&1)
case "$out" in *ERROR*) bad "create world w: $out" ;; *) echo "  ok   create world w" ;; esac
expect "tables without a delta" "$(without_delta $DB)" "0"
expect "deltas named but not there" "$(half_made $DB)" "0"
# (each statement about one world holds the locks of the tables that world wrote, not of every tracked
# table's storage: merge/gather.rs; with all 2,000, MERGE, DIFF, REBASE and DROP WORLD ran out of shared
# memory)
expect "the world writes, reads, diffs, rebases and merges many_1777" \
  "$(psql_in $CL -d $DB -qAt -c "set client_min_messages = warning" -c "set worlds.world = w" -c "update many_1777 set v = 7" -c "insert into many_1777 values (2, 2)" \
       -c "select sum(v) from many_1777" -c "select count(*) from worlds.sql('diff')" -c "reset worlds.world" \
       -c "update many_5 set v = 5" -c "select count(*) from worlds.sql('rebase world w')" \
       -c "select count(*) from worlds.sql('merge world w')" -c "select sum(v) from many_1777" 2>&1 | tr '\n' ' ')" "9 2 1 1 9 "
expect "a world dropped after writing two tables" \
  "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.sql('create world w2')" -c "set worlds.world = w2" -c "update many_3 set v = 3" \
       -c "update many_1999 set v = 3" -c "reset worlds.world" -c "select count(*) from worlds.sql('drop world w2')" \
       -c "select count(*) from worlds.world where name = 'w2' and dropped is null" 2>&1 | tr '\n' ' ')" "1 1 0 "
# (main's writes are read from every table's history, one table at a time: time/main_writes.rs)
expect "SHOW HISTORY of main (its writes among 2,000 tables) and of w" \
  "$(psql_in $CL -d $DB -qAt -c "select count(*) > 0 from worlds.sql('show history') j where j->>'event' = 'write'" \
       -c "select count(*) > 0 from worlds.sql('show history for w')" 2>&1 | tr '\n' ' ')" "t t "
expect "no 'out of shared memory' in the log" "$(log_lines "out of shared memory")" "$oom_before"

echo "check: a migration of 300 tables in one transaction beside the first CREATE WORLD"
DB2=s41_beside
many_tables $DB2 300
{ echo "begin;"; seq 1 300 | sed 's/.*/create table mig_\0 (id int primary key, name text);/'; echo "select pg_sleep(1);"; echo "commit;"; } >"$OUT/mig.sql"
psql_in $CL -d $DB2 -q -v ON_ERROR_STOP=1 -f "$OUT/mig.sql" >"$OUT/mig.log" 2>&1 &
mig=$!
sleep 0.3
out=$(psql_in $CL -d $DB2 -qAt -v ON_ERROR_STOP=0 -c "select * from worlds.sql('create world w')" 2>&1)
mig_rc=0; wait $mig || mig_rc=$?
case "$out" in *ERROR*) bad "create world w beside the migration: $out" ;; *) echo "  ok   create world w beside the migration" ;; esac
expect "the migration" "$mig_rc $(grep -c ERROR "$OUT/mig.log")" "0 0"
expect "tracked tables" "$(psql_in $CL -d $DB2 -qAt -c "select count(*) from worlds.tables")" "600"
expect "tables without a delta" "$(without_delta $DB2)" "0"
expect "the world writes the migration's mig_300" \
  "$(psql_in $CL -d $DB2 -qAt -c "set worlds.world = w" -c "insert into mig_300 values (1, 'x')" -c "select count(*) from mig_300" -c "reset worlds.world" -c "select count(*) from mig_300" 2>&1 | tr '\n' ' ')" "1 0 "

echo "check: kill -9 of the first CREATE WORLD while its worker makes the deltas"
DB3=s41_killed
many_tables $DB3 1000
psql_in $CL -d $DB3 -qAt -v ON_ERROR_STOP=0 -c "select * from worlds.sql('create world k')" >"$OUT/killed.log" 2>&1 &
creator=$!
# once the worker has made some deltas, not all
for _ in $(seq 1 200); do
  n=$(psql_in $CL -d $DB3 -qAt -c "select count(*) from worlds.tables where delta is not null" 2>/dev/null)
  [ "${n:-0}" -ge 100 ] && break
  sleep 0.1
done
pid=$(psql_in $CL -d $DB3 -qAt -c "select pid from pg_stat_activity where datname = '$DB3' and query like '%create world k%' and pid <> pg_backend_pid() limit 1")
made_before=$(psql_in $CL -d $DB3 -qAt -c "select count(*) from worlds.tables where delta is not null")
[ -n "$pid" ] && kill -9 "$pid"
wait $creator 2>/dev/null || true
for _ in $(seq 1 60); do psql_in $CL -qAt -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
echo "  (killed with $made_before of 1,000 deltas made)"
expect "killed mid-way (some deltas made, not all)" "$([ "$made_before" -gt 0 ] && [ "$made_before" -lt 1000 ] && echo yes)" "yes"
expect "worlds after the kill" "$(psql_in $CL -d $DB3 -qAt -c "select count(*) from worlds.world where num <> 0")" "0"
expect "deltas named but not there" "$(half_made $DB3)" "0"
out=$(psql_in $CL -d $DB3 -qAt -v ON_ERROR_STOP=0 -c "select * from worlds.sql('create world k')" 2>&1)
case "$out" in *ERROR*) bad "create world k after the kill: $out" ;; *) echo "  ok   create world k after the kill" ;; esac
expect "tables without a delta" "$(without_delta $DB3)" "0"
expect "the world writes many_1000" \
  "$(psql_in $CL -d $DB3 -qAt -c "set worlds.world = k" -c "update many_1000 set v = 5" -c "select v from many_1000" -c "reset worlds.world" -c "select v from many_1000" 2>&1 | tr '\n' ' ')" "5 0 "
expect "no 'out of shared memory' in the log" "$(log_lines "out of shared memory")" "$oom_before"

echo "check: four first CREATE WORLDs at once, beside writers and a migration"
# (each launches its worker: the workers meet on the tables' row locks, and the four transactions on the
# tracking lock; every one succeeds, and no deadlock)
DB4=s41_four
many_tables $DB4 300
psql_in $CL -d $DB4 -q -c "alter database $DB4 set worlds.lazy_storage = on"
before_dl=$(log_lines "deadlock detected")
pids=()
for i in 1 2 3 4; do
  psql_in $CL -d $DB4 -qAt -v ON_ERROR_STOP=0 -c "select * from worlds.sql('create world f$i')" >"$OUT/four_$i.log" 2>&1 &
  pids+=($!)
done
# first writes of tables without storage, and their creation, beside them
{ seq 1 60 | sed 's/.*/create table late_\0 (id int primary key, v int); insert into late_\0 values (1, 1);/'; } >"$OUT/late.sql"
psql_in $CL -d $DB4 -q -v ON_ERROR_STOP=1 -f "$OUT/late.sql" >"$OUT/late.log" 2>&1 &
pids+=($!)
for i in $(seq 1 40); do psql_in $CL -d $DB4 -qAt -c "update many_$((i * 7)) set v = v + 1" >/dev/null 2>&1; done
rcs=""
for p in "${pids[@]}"; do r=0; wait "$p" || r=$?; rcs="$rcs$r"; done
expect "the four CREATE WORLDs and the migration (exit codes)" "$rcs" "00000"
expect "errors in their output" "$(cat "$OUT"/four_*.log "$OUT/late.log" | grep -c ERROR)" "0"
expect "worlds made" "$(psql_in $CL -d $DB4 -qAt -c "select count(*) from worlds.world where name like 'f_' and dropped is null")" "4"
expect "tables without a delta" "$(without_delta $DB4)" "0"
expect "deltas named but not there" "$(half_made $DB4)" "0"
expect "no deadlock in the log" "$(log_lines "deadlock detected")" "$before_dl"
# (f3 may have forked before the migration's last tables had their rows: a REBASE brings them, so what
# follows doesn't depend on which finished first)
expect "rebase world f3" "$(psql_in $CL -d $DB4 -qAt -c "select * from worlds.sql('rebase world f3')" >/dev/null 2>&1 && echo ok)" "ok"
expect "world f3 writes late_60 and many_300" \
  "$(psql_in $CL -d $DB4 -qAt -c "set worlds.world = f3" -c "update late_60 set v = 9" -c "update many_300 set v = 9" -c "select v from late_60" -c "reset worlds.world" -c "select v from late_60" 2>&1 | tr '\n' ' ')" "9 1 "

psql_in $CL -q -c "drop database $DB" -c "drop database $DB2" -c "drop database $DB3" -c "drop database $DB4"
[ $failures -eq 0 ] || exit 1
echo "41_first_world_many_tables: ok"
