#!/usr/bin/env bash
# A database that has never had a world carries no storage for worlds' rows (storage/world_storage.rs):
# tracked tables have history and overlay views but no delta, so the catalogs Postgres's users read
# (information_schema, pg_constraint, pg_sequences) show nothing of pg_worlds for them. The first CREATE
# WORLD gives every tracked table its delta. Checked here:
#   - before any world: no delta, no storage in information_schema or pg_constraint, no sequence; a past
#     moment of main reads its rows through the overlay;
#   - the race: a CREATE TABLE in an open transaction while the first CREATE WORLD runs. CREATE WORLD waits
#     for it, then gives it a delta, and the world reads and writes it;
#   - REPEATABLE READ: a table created in a transaction whose snapshot is older than the first world still
#     gets its delta;
#   - kill -9 of the first CREATE WORLD while it waits: nothing half made, and the next CREATE WORLD works.
source "$(dirname "$0")/common.sh"
start_cluster $CL yes
DB=s20_first_world
OUT=$RUN_DIR/s20_first_world; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
M() { psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 "$@" 2>&1; }
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, bal int not null check (bal >= 0), twice int generated always as (bal * 2) stored);
insert into acct select g, 100 from generate_series(1, 10) g;
SQL
sleep 0.2
before=$(M -c "select clock_timestamp()")
sleep 0.2
M -c "update acct set bal = 0 where id = 1" >/dev/null

echo "check: no world yet, no storage for worlds' rows"
expect "tracked tables without a delta" "$(M -c "select count(*) from worlds.tables where delta is null")" "1"
expect "tables of worlds_data in information_schema.column_column_usage" "$(M -c "select count(*) from information_schema.column_column_usage where table_schema = 'worlds_data'")" "0"
expect "CHECK constraints on worlds_data's tables" "$(M -c "select count(*) from pg_constraint where conrelid::regclass::text like 'worlds_data.%'")" "0"
expect "sequences in worlds_data" "$(M -c "select count(*) from pg_sequences where schemaname = 'worlds_data'")" "0"
expect "main@(before the update) reads the old balance" "$(M -c "set worlds.world = 'main@$before'" -c "select bal from acct where id = 1")" "100"

echo "check: CREATE TABLE in an open transaction while the first CREATE WORLD runs"
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=1 -c "begin" -c "create table late (id int primary key, v text)" \
  -c "insert into late values (1, 'one')" -c "select pg_sleep(3)" -c "commit" >"$OUT/late.log" 2>&1 &
LATE=$!
for _ in $(seq 1 50); do
  [ "$(M -c "select count(*) from pg_stat_activity where datname = '$DB' and query like '%pg_sleep(3)%' and state = 'active' and pid <> pg_backend_pid()")" -ge 1 ] && break
  sleep 0.1
done
start=$(date +%s%N)
expect "CREATE WORLD w" "$(M -c "select * from worlds.sql('create world w')")" '{"tag": "CREATE WORLD"}'
waited=$(( ($(date +%s%N) - start) / 1000000 ))
wait $LATE
expect "the transaction creating the table" "$(grep -c ERROR "$OUT/late.log")" "0"
[ "$waited" -ge 1000 ] || bad "CREATE WORLD did not wait for the table being created (${waited} ms)"
expect "tracked tables without a delta" "$(M -c "select count(*) from worlds.tables where delta is null")" "0"
expect "w reads the late table" "$(M -c "set worlds.world = w" -c "select v from late")" "one"
expect "w writes the late table" "$(M -c "set worlds.world = w" -c "update late set v = 'uno' where id = 1" -c "select v from late")" "uno"
expect "main's late table unchanged" "$(M -c "select v from late")" "one"
expect "w's CHECK holds (copied onto the delta now)" "$(M -c "set worlds.world = w" -c "update acct set bal = -1 where id = 2" | grep -o 'violates check constraint "acct_bal_check"')" 'violates check constraint "acct_bal_check"'
expect "w's generated column" "$(M -c "set worlds.world = w" -c "update acct set bal = 7 where id = 3" -c "select twice from acct where id = 3")" "14"

echo "check: a table created after the first world gets its delta at once"
M -c "create table later (id int primary key)" >/dev/null
expect "later's delta" "$(M -c "select delta is not null from worlds.tables where relid = 'later'::regclass")" "t"

if [ $failures -ne 0 ]; then echo "20_first_world: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi

echo "check: REPEATABLE READ, the snapshot older than the first world"
DB2=${DB}_rr
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB2" -c "create database $DB2"
M2() { psql_in $CL -d $DB2 -qAt -v ON_ERROR_STOP=0 "$@" 2>&1; }
M2 -c "create extension pg_worlds" -c "create table t0 (id int primary key)" >/dev/null
psql_in $CL -d $DB2 -qAt -v ON_ERROR_STOP=1 -c "begin isolation level repeatable read" -c "select count(*) from t0" \
  -c "select pg_sleep(2)" -c "create table rr (id int primary key)" -c "commit" >"$OUT/rr.log" 2>&1 &
RR=$!
sleep 0.5
expect "CREATE WORLD w (while the RR transaction sleeps)" "$(M2 -c "select * from worlds.sql('create world w')")" '{"tag": "CREATE WORLD"}'
wait $RR
expect "the RR transaction" "$(grep -c ERROR "$OUT/rr.log")" "0"
expect "rr's delta" "$(M2 -c "select delta is not null from worlds.tables where relid = 'rr'::regclass")" "t"

echo "check: kill -9 of the first CREATE WORLD while it waits for a CREATE TABLE"
DB3=${DB}_kill
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB3" -c "create database $DB3"
M3() { psql_in $CL -d $DB3 -qAt -v ON_ERROR_STOP=0 "$@" 2>&1; }
M3 -c "create extension pg_worlds" -c "create table k0 (id int primary key)" -c "insert into k0 values (1)" >/dev/null
psql_in $CL -d $DB3 -qAt -c "begin" -c "create table k1 (id int primary key)" -c "select pg_sleep(30)" -c "commit" >"$OUT/k1.log" 2>&1 &
K1=$!
sleep 0.5
psql_in $CL -d $DB3 -qAt -c "select * from worlds.sql('create world doomed')" >"$OUT/doomed.log" 2>&1 &
DOOMED=$!
victim=
for _ in $(seq 1 50); do
  victim=$(M3 -c "select pid from pg_stat_activity where datname = '$DB3' and query like '%create world doomed%' and wait_event_type = 'Lock' and pid <> pg_backend_pid() limit 1")
  [ -n "$victim" ] && break; sleep 0.1
done
[ -n "$victim" ] || bad "the first CREATE WORLD did not wait for the open CREATE TABLE"
[ -n "$victim" ] && kill -9 "$victim"
wait $DOOMED 2>/dev/null || true; wait $K1 2>/dev/null || true
for _ in $(seq 1 60); do M3 -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
expect "worlds after the crash" "$(M3 -c "select count(*) from worlds.world where num <> 0")" "0"
expect "deltas after the crash" "$(M3 -c "select count(*) from worlds.tables where delta is not null")" "0"
expect "CREATE WORLD after recovery" "$(M3 -c "select * from worlds.sql('create world w')")" '{"tag": "CREATE WORLD"}'
expect "w reads k0" "$(M3 -c "set worlds.world = w" -c "select id from k0")" "1"

if [ $failures -ne 0 ]; then echo "20_first_world: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB" -c "drop database $DB2" -c "drop database $DB3"
echo "ok: 20_first_world"
