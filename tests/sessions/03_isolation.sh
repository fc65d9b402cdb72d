#!/usr/bin/env bash
# Isolation between concurrent sessions: A and A2 in world wa, B in world wb (both forked from main after
# loading), C in main, all writing the same tables at once. Afterwards every world holds exactly main as of
# its fork plus its own writes, and main holds exactly C's writes. A world's open transaction must not
# block main, and its uncommitted writes are invisible to another session in the same world. Also: a fork
# taken while a main transaction is open, two main sessions updating the same rows at once after forks,
# and a table whose column names pg_worlds' own storage also uses.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s03_isolation
OUT=$RUN_DIR/s03_isolation; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, v int not null);
create table notes (id int primary key, txt text);
insert into acct select g, g * 10 from generate_series(1, 10) g;
insert into notes values (1, 'n1'), (2, 'n2'), (3, 'n3');
select worlds.create_world('wa');
select worlds.create_world('wb');
SQL

# q WORLD SQL: one value, read in that world (SET worlds.world, as SWITCH WORLD does)
q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }
expect() { # expect WHAT ACTUAL EXPECTED
  if [ "$2" = "$3" ]; then echo "  ok   $1 = $3"; else bad "$1: expected '$3', got '$2'"; fi
}
ACCT="select coalesce(string_agg(id || ':' || v, ',' order by id), '') from acct"
NOTES="select coalesce(string_agg(id || ':' || txt, ',' order by id), '') from notes"
MAIN0_ACCT="1:10,2:20,3:30,4:40,5:50,6:60,7:70,8:80,9:90,10:100"
MAIN0_NOTES="1:n1,2:n2,3:n3"

echo "check: right after the fork, wa and wb read exactly main"
for w in main wa wb; do
  expect "$w acct at fork" "$(q $w "$ACCT")" "$MAIN0_ACCT"
  expect "$w notes at fork" "$(q $w "$NOTES")" "$MAIN0_NOTES"
done

echo "check: four sessions write at once (A, A2 in wa; B in wb; C in main)"
CONN=$(conninfo $CL $DB)
session() { # session NAME WORLD: runs stdin as one psql session in WORLD, in the background
  local name=$1 world=$2
  cat >"$OUT/$name.sql"
  $PGBIN/psql "$CONN options='-c worlds.world=$world'" -X -q -At -v ON_ERROR_STOP=1 -f "$OUT/$name.sql" \
    >"$OUT/$name.out" 2>"$OUT/$name.err" &
  eval "pid_$name=$!"
}

# A: holds a transaction open in wa (rows 1, 2 updated; 11, 20 inserted) for 3 s, then more writes
session A wa <<'SQL'
begin;
update acct set v = v + 1 where id in (1, 2);
insert into acct values (11, 111), (20, 200);
select 'A in txn', current_setting('worlds.world');
select pg_sleep(3);
commit;
delete from acct where id = 3;
update notes set txt = 'a' where id = 1;
select 'A done';
SQL
# A2: same world, reads while A's transaction is open, then writes its own row
session A2 wa <<'SQL'
select pg_sleep(1);
select 'A2 sees uncommitted', count(*) from acct where id in (11, 20);
select 'A2 sees row 1', v from acct where id = 1;
insert into acct values (13, 130);
select pg_sleep(3);
select 'A2 after A commit', string_agg(id::text, ',' order by id) from acct where id in (11, 13, 20);
SQL
# B: wb, the same keys as A and C
session B wb <<'SQL'
select pg_sleep(0.5);
update acct set v = v + 2 where id in (2, 3);
insert into acct values (11, 222);
delete from acct where id = 1;
insert into notes values (4, 'b');
select 'B done';
SQL
# C: main, while A holds its transaction in wa on row 1. A world's transaction must not block main.
session C main <<'SQL'
select pg_sleep(1);
set lock_timeout = '1500ms';
update acct set v = v + 100 where id in (1, 4);
insert into acct values (12, 120);
delete from acct where id = 5;
delete from notes where id = 2;
select 'C done';
SQL

for s in A A2 B C; do
  pid=$(eval echo "\$pid_$s")
  if wait "$pid"; then echo "  ok   session $s exited 0"
  else bad "session $s failed: $(cat "$OUT/$s.err")"; fi
done
for s in A A2 B C; do sed "s/^/    $s| /" "$OUT/$s.out"; done

echo "check: A2 (same world) did not see A's uncommitted writes, and did after A committed"
expect "A2 count of 11,20 during A's txn" "$(grep '^A2 sees uncommitted|' "$OUT/A2.out" | cut -d'|' -f2)" 0
expect "A2 row 1 during A's txn" "$(grep '^A2 sees row 1|' "$OUT/A2.out" | cut -d'|' -f2)" 10
expect "A2 after A's commit" "$(grep '^A2 after A commit|' "$OUT/A2.out" | cut -d'|' -f2)" "11,13,20"

echo "check: main has exactly C's changes"
expect "main acct" "$(q main "$ACCT")" "1:110,2:20,3:30,4:140,6:60,7:70,8:80,9:90,10:100,12:120"
expect "main notes" "$(q main "$NOTES")" "1:n1,3:n3"

echo "check: wa has main as of its fork plus A's and A2's changes (none of B's or C's)"
expect "wa acct" "$(q wa "$ACCT")" "1:11,2:21,4:40,5:50,6:60,7:70,8:80,9:90,10:100,11:111,13:130,20:200"
expect "wa notes" "$(q wa "$NOTES")" "1:a,2:n2,3:n3"

echo "check: wb has main as of its fork plus B's changes (none of A's or C's)"
expect "wb acct" "$(q wb "$ACCT")" "2:22,3:32,4:40,5:50,6:60,7:70,8:80,9:90,10:100,11:222"
expect "wb notes" "$(q wb "$NOTES")" "1:n1,2:n2,3:n3,4:b"

echo "check: point lookups (index paths) agree with the scans"
expect "wa id=1" "$(q wa "select v from acct where id = 1")" 11
expect "wb id=1 (deleted in wb)" "$(q wb "select count(*) from acct where id = 1")" 0
expect "main id=1" "$(q main "select v from acct where id = 1")" 110
expect "wa id=5 (deleted in main after the fork)" "$(q wa "select v from acct where id = 5")" 50
expect "wa id=12 (inserted in main after the fork)" "$(q wa "select count(*) from acct where id = 12")" 0
expect "wb id=3" "$(q wb "select v from acct where id = 3")" 32
expect "wa id=3 (deleted in wa)" "$(q wa "select count(*) from acct where id = 3")" 0
expect "wa aggregate" "$(q wa "select count(*) || '/' || sum(v) from acct")" "12/963"
expect "wa join" "$(q wa "select string_agg(a.id || ':' || n.txt, ',' order by a.id) from acct a join notes n on n.id = a.id")" "1:a,2:n2"
expect "wb join" "$(q wb "select string_agg(a.id || ':' || n.txt, ',' order by a.id) from acct a join notes n on n.id = a.id")" "2:n2,3:n3,4:b"

echo "check: a world forked now (wc) sees main with C's changes and nothing of wa or wb"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('wc')" >/dev/null
expect "wc acct" "$(q wc "$ACCT")" "1:110,2:20,3:30,4:140,6:60,7:70,8:80,9:90,10:100,12:120"
expect "wc notes" "$(q wc "$NOTES")" "1:n1,3:n3"

echo "check: switching one session through the worlds reads each in turn"
got=$(psql_in $CL -d $DB -qAt <<SQL
select worlds.switch_world('wa');
$ACCT;
select worlds.switch_world('main');
$ACCT;
set worlds.world = wb;
$ACCT;
SQL
)
expect "one session: wa, main, wb" "$(echo "$got" | grep -v '^SWITCH WORLD$' | paste -sd'|')" \
  "1:11,2:21,4:40,5:50,6:60,7:70,8:80,9:90,10:100,11:111,13:130,20:200|1:110,2:20,3:30,4:140,6:60,7:70,8:80,9:90,10:100,12:120|2:22,3:32,4:40,5:50,6:60,7:70,8:80,9:90,10:100,11:222"

echo "check: a fork taken while a main transaction is open does not see that transaction's writes"
session D main <<'SQL'
begin;
update acct set v = 666 where id = 6;
insert into acct values (30, 300);
select pg_sleep(2);
commit;
SQL
sleep 1
psql_in $CL -d $DB -qAt -c "select worlds.create_world('wd')" >/dev/null
if wait "$pid_D"; then echo "  ok   session D exited 0"; else bad "session D failed: $(cat "$OUT/D.err")"; fi
expect "main after D" "$(q main "$ACCT")" "1:110,2:20,3:30,4:140,6:666,7:70,8:80,9:90,10:100,12:120,30:300"
expect "wd (forked during D)" "$(q wd "$ACCT")" "1:110,2:20,3:30,4:140,6:60,7:70,8:80,9:90,10:100,12:120"
expect "wd id=6" "$(q wd "select v from acct where id = 6")" 60
expect "wd id=30" "$(q wd "select count(*) from acct where id = 30")" 0

echo "check: two main sessions updating the same rows at once (30 updates each) leave every world as it was"
# acct has a primary key; log has none (tracked by whole row). wc and wd were forked before these updates.
psql_in $CL -d $DB -q -c "create table log (who text, n int)" -c "insert into log values ('x', 0), ('y', 0)"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('we')" >/dev/null
for i in $(seq 1 30); do echo "update acct set v = v + 1 where id = 7;"; echo "update log set n = n + 1 where who = 'x';"; done \
  >"$OUT/E.sql"
for s in E1 E2; do session $s main <"$OUT/E.sql"; done
for s in E1 E2; do
  pid=$(eval echo "\$pid_$s")
  if wait "$pid"; then echo "  ok   session $s exited 0"; else bad "session $s failed: $(cat "$OUT/$s.err")"; fi
done
expect "main id=7 after 60 updates" "$(q main "select v from acct where id = 7")" 130
expect "main log" "$(q main "select string_agg(who || n, ',' order by who) from log")" "x60,y0"
expect "wa acct (forked before)" "$(q wa "$ACCT")" "1:11,2:21,4:40,5:50,6:60,7:70,8:80,9:90,10:100,11:111,13:130,20:200"
expect "wb acct (forked before)" "$(q wb "$ACCT")" "2:22,3:32,4:40,5:50,6:60,7:70,8:80,9:90,10:100,11:222"
expect "wd acct (forked before)" "$(q wd "$ACCT")" "1:110,2:20,3:30,4:140,6:60,7:70,8:80,9:90,10:100,12:120"
expect "we id=7 rows" "$(q we "select string_agg(v::text, ',') from acct where id = 7")" 70
expect "we log" "$(q we "select string_agg(who || n, ',' order by who) from log")" "x0,y0"

echo "check: a table whose column names pg_worlds' storage also uses (k, src, seq, op, tid, at, world, ...) is isolated too"
if out=$(psql_in $CL -d $DB -q -v VERBOSITY=verbose 2>&1 <<'SQL'
create table kv (k text primary key, src text, seq int, op text, tid int, at int, world text, w int, del bool,
                 xid int, hseq int, dseq int, base_tid int, old_tid int, new_tid int, u int, b int, d int, h int);
insert into kv (k, src, seq, op, tid, at, world) values ('a', 's', 1, 'o', 1, 1, 'main'), ('b', 's', 2, 'o', 2, 2, 'main');
select worlds.create_world('wk');
SQL
); then
  echo "$out" | grep -E 'WARNING|ERROR' | sed 's/^/    | /' || true
  expect "kv tracked" "$(q main "select count(*) from worlds.tables where relid = 'kv'::regclass")" 1
  if psql_in $CL -d $DB -qAt -c "set worlds.world = wk" -c "update kv set world = 'wk', seq = seq + 10 where k = 'a'" \
       -c "insert into kv (k, world) values ('c', 'wk')" -c "delete from kv where k = 'b'" >/dev/null 2>"$OUT/kv.err"; then
    expect "kv in wk" "$(q wk "select string_agg(k || ':' || world || ':' || coalesce(seq, 0), ',' order by k) from kv")" "a:wk:11,c:wk:0"
  else bad "writes to kv in world wk failed: $(cat "$OUT/kv.err")"; fi
  expect "kv in main (untouched by wk)" "$(q main "select string_agg(k || ':' || world || ':' || coalesce(seq, 0), ',' order by k) from kv")" "a:main:1,b:main:2"
else bad "creating table kv in main failed: $out"; fi

echo "check: a session whose world another session drops carries on from its parent, not in a new world of that name"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('rx')" >/dev/null
mkfifo "$OUT/rx.in"
psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 <"$OUT/rx.in" >"$OUT/rx.out" 2>&1 &
rx_pid=$!
exec 7>"$OUT/rx.in"
echo "set worlds.world = rx; update acct set v = -1 where id = 1;" >&7
sleep 1
psql_in $CL -d $DB -qAt -c "select worlds.drop_world('rx')" -c "select worlds.create_world('rx')" >/dev/null
# the next statement may find it planned for the dropped world (refused, nothing written); the one after runs in main
echo "select 1 from acct limit 1; select 'now in ' || current_setting('worlds.world');" >&7
exec 7>&-
wait $rx_pid
expect "session after its world was dropped" "$(grep '^now in' "$OUT/rx.out")" "now in main"
expect "the new rx has no write from that session" "$(q main "select version from worlds.world where name = 'rx' and dropped is null")" 0

if [ $failures -ne 0 ]; then echo "03_isolation: $failures check(s) failed (session outputs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 03_isolation"
