#!/usr/bin/env bash
# Writers of one world run at once, and none loses another's update (storage/world_locks.rs).
# Waits are proved with lock_timeout (an advisory lock wait honours it: 55P03), never with timings:
#   - two sessions updating different keys: neither waits;
#   - the same key: the second waits, then reads the first's committed row (READ COMMITTED), so both
#     updates stay;
#   - one primary key inserted twice, one unique value added twice: the second waits, then 23505; when the
#     first rolls back, the second goes in;
#   - a MERGE of the world waits for its writers, then takes their rows;
#   - 4 pgbench clients run TPC-B in one world with no retries: no transaction fails, the TPC-B sums
#     agree; 4 clients move money between random accounts (two rows in either order): the total stays;
#   - kill -9 of a backend in the middle of the world's writers: after recovery the sums still agree and
#     the world takes writes again.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
DB=s15_writers
OUT=$RUN_DIR/s15_writers; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table acct (id int primary key, bal int not null, email text unique);
insert into acct select g, 1000, 'a' || g || '@x' from generate_series(1, 100) g;
create extension pg_worlds;
select * from worlds.sql('create world w');
SQL
W() { psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = w" "$@" 2>&1; }

# hold SECONDS SQL...: runs SQL in world w inside a transaction held open for SECONDS, in the background
hold() {
  local s=$1; shift
  psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = ${HW:-w}" -c "begin" "$@" -c "select pg_sleep($s)" -c "commit" >"$OUT/hold.log" 2>&1 &
  HOLD=$!
  # until the held transaction has written (its row is in the world's delta)
  for _ in $(seq 1 100); do
    [ "$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_stat_activity where datname = '$DB' and pid <> pg_backend_pid() and query like '%pg_sleep%' and state = 'active'")" -ge 1 ] && return 0
    sleep 0.1
  done
  fail "the held transaction did not start"
}

echo "check: different keys: a writer of id 2 doesn't wait for an open writer of id 1"
hold 4 -c "update acct set bal = bal + 1 where id = 1"
expect "update of id 2 under lock_timeout 1s" "$(W -c "set lock_timeout = '1s'" -c "update acct set bal = bal + 10 where id = 2 returning bal")" "1010"
expect "an insert of a new key under lock_timeout 1s" "$(W -c "set lock_timeout = '1s'" -c "insert into acct values (101, 5, 'new@x') returning id")" "101"
wait $HOLD

echo "check: the same key: the second writer waits (55P03 under lock_timeout), or, without it, adds to the first's row"
hold 3 -c "update acct set bal = bal + 1 where id = 3"
expect "update of id 3 under lock_timeout 0.5s" "$(W -c "set lock_timeout = '500ms'" -c "update acct set bal = bal + 10 where id = 3" | grep -o '^ERROR:  canceling statement due to lock timeout' | head -1)" \
  "ERROR:  canceling statement due to lock timeout"
expect "update of id 3, waiting" "$(W -c "update acct set bal = bal + 10 where id = 3 returning bal")" "1011"
wait $HOLD
expect "id 3 after both" "$(W -c "select bal from acct where id = 3")" "1011"
echo "check: a range update waits for the key writer too, then reads its row"
hold 2 -c "update acct set bal = bal + 1 where id = 4"
expect "range update of ids 4..5" "$(W -c "update acct set bal = bal + 100 where id between 4 and 5 returning bal" | sort | tr '\n' ' ')" "1100 1101 "
wait $HOLD

echo "check: one key inserted by two sessions: the second waits, then 23505; after a rollback it goes in"
hold 2 -c "insert into acct values (200, 1, 'k200@x')"
expect "second insert of key 200" "$(W -c "\\set VERBOSITY sqlstate" -c "insert into acct values (200, 2, 'other@x')")" "ERROR:  23505"
wait $HOLD
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = w" -c "begin" -c "insert into acct values (201, 1, 'k201@x')" -c "select pg_sleep(2)" -c "rollback" >"$OUT/hold.log" 2>&1 &
HOLD=$!; sleep 0.7
expect "insert of key 201 after the other's rollback" "$(W -c "insert into acct values (201, 2, 'k201b@x') returning bal")" "2"
wait $HOLD
echo "check: one unique value added by two sessions (different keys): the second waits, then 23505"
hold 2 -c "insert into acct values (202, 1, 'same@x')"
expect "second row with email same@x" "$(W -c "\\set VERBOSITY sqlstate" -c "insert into acct values (203, 1, 'same@x')")" "ERROR:  23505"
wait $HOLD
expect "rows with email same@x in w" "$(W -c "select count(*) from acct where email = 'same@x'")" "1"

echo "check: a merge of a world waits for its open writer (55P03 under lock_timeout), then merges its row"
psql_in $CL -d $DB -qAt -c "select * from worlds.sql('create world m')" >/dev/null
HW=m hold 3 -c "update acct set bal = bal + 7 where id = 10"
expect "MERGE WORLD m under lock_timeout 0.5s" "$(psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set lock_timeout = '500ms'" -c "select * from worlds.sql('merge world m')" 2>&1 | grep -o 'canceling statement due to lock timeout' | head -1)" \
  "canceling statement due to lock timeout"
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "select * from worlds.sql('merge world m')" >"$OUT/merge.log" 2>&1 || bad "MERGE WORLD m failed: $(cat "$OUT/merge.log")"
wait $HOLD
expect "id 10 in main after the merge" "$(psql_in $CL -d $DB -qAt -c "select bal from acct where id = 10")" "1007"

echo "check: pgbench TPC-B, 4 clients in one world, no retries: no transaction fails, the sums agree"
DB2=${DB}_tpcb
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB2" -c "create database $DB2"
$PGBIN/pgbench -i -s 1 -q -h "$dir/sock" -p "$port" -U postgres $DB2 >"$OUT/init.log" 2>&1 || { cat "$OUT/init.log"; fail "pgbench -i"; }
psql_in $CL -d $DB2 -q -c "create extension pg_worlds" -c "select * from worlds.sql('create world tpcb')" >/dev/null
BENCH="host=$dir/sock port=$port user=postgres dbname=$DB2 options='-c worlds.world=tpcb'"
$PGBIN/pgbench -n -c 4 -j 4 -t 150 "$BENCH" >"$OUT/tpcb.log" 2>&1 || { tail "$OUT/tpcb.log"; bad "pgbench in world tpcb exited non-zero"; }
grep -E "processed|failed" "$OUT/tpcb.log" | sed 's/^/    | /'
expect "transactions processed" "$(sed -n 's/.*actually processed: \([0-9]*\)\/.*/\1/p' "$OUT/tpcb.log")" 600
sums() {
  psql_in $CL -d $DB2 -qAt -c "set worlds.world = tpcb" -c "select (select count(*) from pgbench_history) || ' ' || (select sum(abalance) from pgbench_accounts) || ' ' ||
    (select coalesce(sum(delta), 0) from pgbench_history) || ' ' || (select sum(bbalance) from pgbench_branches) || ' ' || (select sum(tbalance) from pgbench_tellers)"
}
read -r h a d b t <<<"$(sums)"
expect "tpcb history rows" "$h" 600
expect "tpcb sum(abalance) = sum(delta)" "$a" "$d"
expect "tpcb sum(bbalance) = sum(delta)" "$b" "$d"
expect "tpcb sum(tbalance) = sum(delta)" "$t" "$d"
expect "main's pgbench_history (untouched)" "$(psql_in $CL -d $DB2 -qAt -c "select count(*) from pgbench_history")" 0

echo "check: 4 clients move money between random accounts of one world (two rows, either order): the total stays"
cat >"$OUT/move.sql" <<'SQL'
\set a random(1, 20)
\set b random(1, 20)
\set x random(1, 50)
BEGIN;
UPDATE acct SET bal = bal - :x WHERE id = :a;
UPDATE acct SET bal = bal + :x WHERE id = :b;
END;
SQL
total() { W -c "select sum(bal) from acct"; }
T0=$(total)
MOVE="host=$dir/sock port=$port user=postgres dbname=$DB options='-c worlds.world=w'"
# two rows locked in either order can deadlock, in a world as on main: pgbench retries those (40P01)
$PGBIN/pgbench -n -c 4 -j 4 -t 200 --max-tries=20 -f "$OUT/move.sql" "$MOVE" >"$OUT/move.log" 2>&1 || { tail "$OUT/move.log"; bad "transfers exited non-zero"; }
grep -E "processed|failed|retried" "$OUT/move.log" | sed 's/^/    | /'
expect "transfers processed" "$(sed -n 's/.*actually processed: \([0-9]*\)\/.*/\1/p' "$OUT/move.log")" 800
expect "total in w after transfers" "$(total)" "$T0"

echo "check: kill -9 of a backend while 3 clients write the world: after recovery the sums agree, writes go on"
$PGBIN/pgbench -n -c 3 -j 3 -T 6 "$BENCH" >"$OUT/crash.log" 2>&1 &
crash_pgbench $DB2 $!
read -r h a d b t <<<"$(sums)"
expect "after the crash: sum(abalance) = sum(delta)" "$a" "$d"
expect "after the crash: sum(bbalance) = sum(delta)" "$b" "$d"
expect "after the crash: sum(tbalance) = sum(delta)" "$t" "$d"
$PGBIN/pgbench -n -c 2 -j 2 -t 50 "$BENCH" >"$OUT/after.log" 2>&1 || bad "pgbench after the crash exited non-zero"
read -r h2 a d b t <<<"$(sums)"
expect "after the crash: 100 more history rows" "$((h2 - h))" 100
expect "after more writes: sum(abalance) = sum(delta)" "$a" "$d"
expect "after more writes: sum(bbalance) = sum(tbalance)" "$b" "$t"

echo "check: REPEATABLE READ writer of a key another session changed since its snapshot: 40001 at its write"
psql_in $CL -d $DB -qAt -c "create table rr (id int primary key, v int)" >/dev/null
W -c "insert into rr values (1, 0)" >/dev/null   # (made after w forked: w has only its own rows of it)
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = w" -c "begin isolation level repeatable read" -c "select v from rr where id = 1" \
  -c "select pg_sleep(1.5)" -c "update rr set v = v + 10 where id = 1" -c "select 'after the update'" -c "commit" >"$OUT/rr_a.log" 2>&1 &
RRA=$!
sleep 0.5
W -c "update rr set v = v + 1 where id = 1" >/dev/null
wait $RRA
expect "the RR writer's error" "$(grep -o 'could not serialize access due to concurrent update of public.rr in world "w"' "$OUT/rr_a.log")" 'could not serialize access due to concurrent update of public.rr in world "w"'
expect "the RR writer stopped at its UPDATE" "$(grep -c 'after the update' "$OUT/rr_a.log")" "0"
expect "the other session's update kept" "$(W -c "select v from rr where id = 1")" "1"
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = w" -c "begin isolation level repeatable read" -c "select count(*) from rr" \
  -c "select pg_sleep(1.5)" -c "insert into rr values (7, 70)" -c "commit" >"$OUT/rr_b.log" 2>&1 &
RRB=$!
sleep 0.5
W -c "insert into rr values (7, 7)" >/dev/null
wait $RRB
expect "the RR inserter of a key committed since its snapshot" "$(grep -o 'duplicate key value violates unique constraint "rr_pkey"' "$OUT/rr_b.log")" 'duplicate key value violates unique constraint "rr_pkey"'
expect "the committed row kept" "$(W -c "select v from rr where id = 7")" "7"

echo "check: 4 clients committing one-statement transactions into one world: the world's version moves once per statement, none lost"
# (each commit moves the version from the row's latest version, whichever session wrote it: storage/commit_direct.rs
# follows the row's update chain from where the backend last saw it)
psql_in $CL -d $DB -qAt -c "create table vc (id bigserial primary key, v int)" >/dev/null
W -c "insert into vc (v) values (0)" >/dev/null
v0=$(psql_in $CL -d $DB -qAt -c "select version from worlds.world where name = 'w' and dropped is null")
e0=$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.event e join worlds.world w on w.num = e.world where w.name = 'w' and w.dropped is null and e.event in ('write', 'commit')")
echo "insert into vc (v) values (1);" >"$OUT/vc_insert.sql"
echo "update vc set v = v + 1 where id = 1;" >"$OUT/vc_update.sql"
# (two pgbench runs at once, 2 clients each, a fixed number of transactions each: pgbench's per-script
# count of a -T run with two scripts once reported one update fewer than it had committed)
PGOPTIONS="-c worlds.world=w" $PGBIN/pgbench -h "$dir/sock" -p "$port" -U postgres -n -c 2 -j 2 -t 1000 -f "$OUT/vc_insert.sql" "$DB" >"$OUT/vc_i.log" 2>&1 &
VCI=$!
PGOPTIONS="-c worlds.world=w" $PGBIN/pgbench -h "$dir/sock" -p "$port" -U postgres -n -c 2 -j 2 -t 1000 -f "$OUT/vc_update.sql" "$DB" >"$OUT/vc_u.log" 2>&1 \
  || bad "pgbench of the version check's updates exited non-zero: $(tail -3 "$OUT/vc_u.log")"
wait $VCI || bad "pgbench of the version check's inserts exited non-zero: $(tail -3 "$OUT/vc_i.log")"
ins=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/vc_i.log")
ups=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/vc_u.log")
n=$(( ${ins:-0} + ${ups:-0} ))
v1=$(psql_in $CL -d $DB -qAt -c "select version from worlds.world where name = 'w' and dropped is null")
e1=$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.event e join worlds.world w on w.num = e.world where w.name = 'w' and w.dropped is null and e.event in ('write', 'commit')")
[ "${n:-0}" -gt 100 ] || bad "the version check committed too few transactions: '${n:-}'"
expect "the world's version moved by the transactions committed" "$((v1 - v0))" "$n"
expect "one write event per transaction committed" "$((e1 - e0))" "$n"
expect "the updated row counts every update" "$(W -c "select v from vc where id = 1")" "${ups:-?}"

if [ $failures -ne 0 ]; then echo "15_world_writers: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB" -c "drop database $DB2"
echo "ok: 15_world_writers"
