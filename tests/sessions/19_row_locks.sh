#!/usr/bin/env bash
# SELECT ... FOR UPDATE / FOR SHARE / SKIP LOCKED / NOWAIT in a world lock the world's rows (route/row_locks.rs):
#   - a world session's FOR UPDATE never blocks main's writer of the same row;
#   - it blocks the world's writers of that row and other FOR UPDATEs (55P03 under lock_timeout), NOWAIT is
#     55P03 "could not obtain lock on row in relation ...", SKIP LOCKED passes the row by;
#   - FOR SHARE and FOR SHARE go together, FOR SHARE and UPDATE wait;
#   - lock then read (READ COMMITTED): a FOR UPDATE by key that waited returns the row as its writer left it;
#     under REPEATABLE READ the same wait ends in 40001;
#   - a job queue shared by 4 sessions of one world (FOR UPDATE SKIP LOCKED, as a SELECT and as a sub-select
#     of an UPDATE): every job is taken exactly once;
#   - the locks are gone at commit and at kill -9.
# Waits are proved with lock_timeout, never with timings.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
DB=s19_row_locks
OUT=$RUN_DIR/s19_row_locks; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table acct (id int primary key, bal int not null);
insert into acct select g, 1000 from generate_series(1, 10) g;
create table jobs (id int primary key, state text not null default 'new', n int not null default 0, worker int);
insert into jobs (id) select g from generate_series(1, 400) g;
create view acct_view as select bal, id from acct where bal >= 0;
create view acct_totals as select count(*) as n, sum(bal) as total from acct;
create table notes (k text, part int, body text, primary key (k, part));
insert into notes values ('a', 1, 'x'), ('a', 2, 'y');
create extension pg_worlds;
select * from worlds.sql('create world w');
SQL
W() { psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = w" "$@" 2>&1; }
M() { psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 "$@" 2>&1; }

# hold SECONDS SQL...: runs SQL in world w inside a transaction held open for SECONDS, in the background
hold() {
  local s=$1; shift
  psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "set worlds.world = w" -c "begin" "$@" -c "select pg_sleep($s)" -c "commit" >"$OUT/hold.log" 2>&1 &
  HOLD=$!
  for _ in $(seq 1 100); do
    [ "$(M -c "select count(*) from pg_stat_activity where datname = '$DB' and pid <> pg_backend_pid() and query like '%pg_sleep%' and state = 'active'")" -ge 1 ] && return 0
    sleep 0.1
  done
  fail "the held transaction did not start"
}
TIMEOUT='ERROR:  canceling statement due to lock timeout'

echo "check: FOR UPDATE in w holds id 1; main's writer of id 1 doesn't wait, w's writers and lockers do"
hold 5 -c "select id from acct where id = 1 for update"
expect "main's update of id 1 under lock_timeout 1s" "$(M -c "set lock_timeout = '1s'" -c "update acct set bal = bal + 1 where id = 1 returning bal")" "1001"
expect "w's update of id 1 under lock_timeout 0.3s" "$(W -c "set lock_timeout = '300ms'" -c "update acct set bal = bal + 1 where id = 1" | grep -o "^$TIMEOUT")" "$TIMEOUT"
expect "w's FOR UPDATE of id 1 under lock_timeout 0.3s" "$(W -c "set lock_timeout = '300ms'" -c "select id from acct where id = 1 for update" | grep -o "^$TIMEOUT")" "$TIMEOUT"
expect "w's FOR SHARE of id 1 under lock_timeout 0.3s" "$(W -c "set lock_timeout = '300ms'" -c "select id from acct where id = 1 for share" | grep -o "^$TIMEOUT")" "$TIMEOUT"
expect "w's FOR UPDATE NOWAIT of id 1" "$(W -c "\\set VERBOSITY sqlstate" -c "select id from acct where id = 1 for update nowait")" "ERROR:  55P03"
expect "its message" "$(W -c "select id from acct where id = 1 for update nowait")" 'ERROR:  could not obtain lock on row in relation "acct"'
expect "w's FOR UPDATE SKIP LOCKED of ids 1..3" "$(W -c "select id from acct where id <= 3 order by id for update skip locked" | tr '\n' ' ')" "2 3 "
expect "w's update of id 2 (another row) under lock_timeout 1s" "$(W -c "set lock_timeout = '1s'" -c "update acct set bal = bal + 2 where id = 2 returning bal")" "1002"
wait $HOLD
expect "w's update of id 1 after the commit" "$(W -c "set lock_timeout = '1s'" -c "update acct set bal = bal + 1 where id = 1 returning bal")" "1001"

echo "check: FOR SHARE and FOR SHARE go together; FOR SHARE and an UPDATE wait"
hold 3 -c "select id from acct where id = 3 for share"
expect "a second FOR SHARE of id 3 under lock_timeout 1s" "$(W -c "set lock_timeout = '1s'" -c "select bal from acct where id = 3 for share")" "1000"
expect "FOR KEY SHARE of id 3 under lock_timeout 1s" "$(W -c "set lock_timeout = '1s'" -c "select bal from acct where id = 3 for key share")" "1000"
expect "update of id 3 under lock_timeout 0.3s" "$(W -c "set lock_timeout = '300ms'" -c "update acct set bal = 0 where id = 3" | grep -o "^$TIMEOUT")" "$TIMEOUT"
expect "FOR UPDATE of id 3 under lock_timeout 0.3s" "$(W -c "set lock_timeout = '300ms'" -c "select 1 from acct where id = 3 for update" | grep -o "^$TIMEOUT")" "$TIMEOUT"
wait $HOLD

echo "check: a key of two columns is locked as one row"
hold 3 -c "select body from notes where k = 'a' and part = 1 for update"
expect "FOR UPDATE NOWAIT of ('a', 1)" "$(W -c "\\set VERBOSITY sqlstate" -c "select body from notes where k = 'a' and part = 1 for update nowait")" "ERROR:  55P03"
expect "FOR UPDATE NOWAIT of ('a', 2)" "$(W -c "select body from notes where k = 'a' and part = 2 for update nowait")" "y"
expect "FOR UPDATE SKIP LOCKED of k 'a'" "$(W -c "select part from notes where k = 'a' order by part for update skip locked")" "2"
wait $HOLD

echo "check: lock, then read: a FOR UPDATE that waited returns the row as its writer left it (READ COMMITTED)"
hold 2 -c "select bal from acct where id = 4 for update" -c "update acct set bal = bal + 10 where id = 4"
expect "FOR UPDATE of id 4 after the wait" "$(W -c "select bal from acct where id = 4 for update")" "1010"
wait $HOLD
hold 2 -c "update acct set bal = bal + 10 where id = 4"
expect "FOR UPDATE of id 4 with a parameter, after the wait" "$(W -c "prepare p(int) as select bal from acct where id = \$1 for update" -c "execute p(4)")" "1020"
wait $HOLD
echo "check: REPEATABLE READ: a FOR UPDATE that waited for a writer of the row gets 40001"
hold 2 -c "update acct set bal = bal + 10 where id = 5"
expect "REPEATABLE READ FOR UPDATE of id 5" "$(W -c "\\set VERBOSITY sqlstate" -c "begin isolation level repeatable read" -c "select count(*) from acct" -c "select bal from acct where id = 5 for update" -c "rollback" | grep ERROR)" "ERROR:  40001"
wait $HOLD
expect "REPEATABLE READ FOR UPDATE of id 5 once its writer is done" "$(W -c "begin isolation level repeatable read" -c "select bal from acct where id = 5 for update" -c "commit")" "1010"

echo "check: FOR UPDATE inside a function and a CTE in w"
M -q -c "create function take_one() returns int language sql as \$\$ select id from jobs where state = 'new' order by id limit 1 for update skip locked \$\$" >/dev/null
hold 3 -c "select take_one()"
expect "take_one() beside a holder of job 1" "$(W -c "select take_one()")" "2"
expect "a CTE beside it" "$(W -c "with j as (select id from jobs where state = 'new' order by id limit 2 for update skip locked) select string_agg(id::text, ',') from j")" "2,3"
wait $HOLD

echo "check: FOR UPDATE through a view of acct locks w's rows by key, where Postgres's LockRows would be"
hold 5 -c "select id from acct_view order by id limit 1 for update"
expect "main's update of id 1 under lock_timeout 1s" "$(M -c "set lock_timeout = '1s'" -c "update acct set bal = bal + 1 where id = 1 returning bal")" "1002"
expect "w's update of id 1 under lock_timeout 0.3s" "$(W -c "set lock_timeout = '300ms'" -c "update acct set bal = bal + 1 where id = 1" | grep -o "^$TIMEOUT")" "$TIMEOUT"
expect "w's update of id 2 (ORDER BY ... LIMIT 1 locked one row)" "$(W -c "set lock_timeout = '300ms'" -c "update acct set bal = bal where id = 2 returning id")" "2"
expect "SKIP LOCKED through the view takes the next row" "$(W -c "select id from acct_view order by id limit 1 for update skip locked")" "2"
expect "NOWAIT through the view" "$(W -c "select id from acct_view where id = 1 for update nowait" | grep -o 'could not obtain lock on row in relation "acct"')" 'could not obtain lock on row in relation "acct"'
wait $HOLD
expect "a view with an aggregate can't be locked (as stock)" "$(W -c "select * from acct_totals for update" | grep -o 'FOR UPDATE is not allowed with aggregate functions')" "FOR UPDATE is not allowed with aggregate functions"
expect "after that error the session still reads w (1001; main has 1002)" "$(W -c "select * from acct_totals for update" -c "select bal from acct where id = 1")" "ERROR:  FOR UPDATE is not allowed with aggregate functions
1001"

echo "check: a job queue shared by 4 sessions of w: every job is taken exactly once"
cat >"$OUT/take.sql" <<'SQL'
BEGIN;
SELECT coalesce((SELECT id FROM jobs WHERE state = 'new' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED), 0) AS jid \gset
UPDATE jobs SET state = 'done', n = n + 1, worker = :client_id WHERE id = :jid;
COMMIT;
SQL
cat >"$OUT/take2.sql" <<'SQL'
UPDATE jobs SET state = 'done2', n = n + 1, worker = :client_id
  WHERE id = (SELECT id FROM jobs WHERE state = 'done' AND n = 1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);
SQL
QUEUE="host=$dir/sock port=$port user=postgres dbname=$DB options='-c worlds.world=w'"
$PGBIN/pgbench -n -c 4 -j 4 -t 120 -f "$OUT/take.sql" "$QUEUE" >"$OUT/take.log" 2>&1 || { tail "$OUT/take.log"; bad "the queue's SELECT workers exited non-zero"; }
grep -E "processed|failed" "$OUT/take.log" | sed 's/^/    | /'
expect "jobs not done" "$(W -c "select count(*) from jobs where state <> 'done'")" "0"
expect "jobs taken more than once" "$(W -c "select count(*) from jobs where n <> 1")" "0"
expect "workers that took jobs" "$(W -c "select count(distinct worker) > 1 from jobs")" "t"
$PGBIN/pgbench -n -c 4 -j 4 -t 120 -f "$OUT/take2.sql" "$QUEUE" >"$OUT/take2.log" 2>&1 || { tail "$OUT/take2.log"; bad "the queue's UPDATE workers exited non-zero"; }
grep -E "processed|failed" "$OUT/take2.log" | sed 's/^/    | /'
expect "jobs not done twice" "$(W -c "select count(*) from jobs where state <> 'done2'")" "0"
expect "jobs taken more than once by the UPDATE workers" "$(W -c "select count(*) from jobs where n <> 2")" "0"
expect "main's jobs (untouched)" "$(M -c "select count(*) from jobs where state = 'new' and n = 0")" "400"

echo "check: kill -9 of a session holding FOR UPDATE: after recovery the row is free"
hold 30 -c "select id from acct where id = 6 for update"
victim=$(M -c "select pid from pg_stat_activity where datname = '$DB' and query like '%pg_sleep%' and state = 'active' and pid <> pg_backend_pid() limit 1")
kill -9 "$victim"; wait $HOLD 2>/dev/null || true
for _ in $(seq 1 60); do M -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
expect "FOR UPDATE NOWAIT of id 6 after recovery" "$(W -c "select bal from acct where id = 6 for update nowait")" "1000"

if [ $failures -ne 0 ]; then echo "19_row_locks: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 19_row_locks"
