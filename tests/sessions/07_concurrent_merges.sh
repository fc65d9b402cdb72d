#!/usr/bin/env bash
# Concurrent merges into main, with main's writers running the whole time.
# A pgbench writer commits single-row updates `update acct set v = v + 1 where id = k` (k in 1..50) in main
# during the whole test, logging each committed update in mlog in the same transaction, so at any snapshot
# acct.v = what the test expects from the merges + that key's number of mlog rows: no lost update.
# (a) two worlds changing different keys merge at the same moment, 3 rounds: both succeed every time.
# (b) two worlds changing the same key merge at once (plainly, and queued behind a main transaction so the
#     second merge waits for the first): exactly one succeeds, the other fails with 40001, its world is
#     still there with its change (DIFF), main holds the winner's value; USING OURS then settles it.
# (c) no deadlock: two worlds each changing tables a and b (in opposite orders), merged at once, 10 rounds,
#     with a second writer updating a and b in main: every merge finishes (timeout 60) and main adds up.
# (d) a merge refused by a foreign key (the world adds a child of a parent main deleted after the fork)
#     fails with 23503, main unchanged, the world kept with its rows; once main has the parent it merges.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s07_concurrent_merges
OUT=$RUN_DIR/s07_concurrent_merges; rm -rf "$OUT"; mkdir -p "$OUT"
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
CONN=$(conninfo $CL $DB)
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, v int not null);
insert into acct select g, g * 100000 from generate_series(1, 100) g;
-- one row per committed main update of acct (written in the same transaction as the update)
create table mlog (id int not null);
-- what acct.v must be, main's increments left out: the test keeps it as merges succeed
create table expect_v (id int primary key, v0 int not null);
insert into expect_v select id, v from acct;
-- (c): two tables changed by both worlds of a round, and their main writer's log
create table b (id int primary key, v int not null);
create table a (id int primary key, v int not null);
insert into a select g, g * 1000 from generate_series(1, 20) g;
insert into b select g, g * 1000 from generate_series(1, 20) g;
create table mlog2 (tbl text not null, id int not null);
-- (d): a foreign key
create table parent (id int primary key, name text not null);
create table child (id int primary key, pid int not null references parent);
insert into parent select g, 'p' || g from generate_series(1, 5) g;
insert into child values (1, 1), (2, 2);
SQL

# q WORLD SQL: one value, read in that world
q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }
exists() { q main "select count(*) from worlds.show_worlds() where name = '$1'"; }
# consistency: acct rows whose value isn't expect_v + their committed main updates, or missing on one side.
# One statement, so one snapshot: the writer's update and its mlog row commit together.
BADKEYS="select coalesce(string_agg(coalesce(a.id, e.id) || ':' || coalesce(a.v::text, '-') || '<>' ||
                  coalesce((e.v0 + coalesce(m.n, 0))::text, '-'), ',' order by coalesce(a.id, e.id)), '')
         from acct a full join expect_v e on e.id = a.id
         left join (select id, count(*) n from mlog group by id) m on m.id = coalesce(a.id, e.id)
         where a.id is null or e.id is null or a.v <> e.v0 + coalesce(m.n, 0)"
# at_once: a time a second from now; sessions started with it begin their merge at the same moment
at_once() { psql_in $CL -d $DB -qAt -c "select (clock_timestamp() + interval '1 s')::text"; }
# merge_bg NAME WHEN SQL: in the background, waits until WHEN, then runs SQL (a merge) in main under
# timeout 60; output in $OUT/NAME.out, .err, exit status in .rc (124: it hung)
merge_bg() {
  local name=$1 when=$2 sql=$3 rc
  if timeout 60 $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
       -c "select pg_sleep_until('$when')" -c "$sql" >"$OUT/$name.out" 2>"$OUT/$name.err"; then rc=0; else rc=$?; fi
  echo $rc >"$OUT/$name.rc"
}
rc_of() { cat "$OUT/$1.rc" 2>/dev/null || echo none; }
state_of() { grep -o 'ERROR:  [0-9A-Z]\{5\}' "$OUT/$1.err" | head -1 | cut -c9- || true; }
tag_of() { grep -v '^$' "$OUT/$1.out" | tail -1; }

echo "check: a pgbench writer updates acct (keys 1..50) in main for the whole test"
cat >"$OUT/writer.sql" <<'SQL'
\set k random(1, 50)
begin;
update acct set v = v + 1 where id = :k;
insert into mlog values (:k);
commit;
SQL
writer_loop() { # runs until $OUT/stop.NAME exists; a failed pgbench run is logged in $OUT/NAME.failed
  local name=$1 script=$2
  while [ ! -f "$OUT/stop.$name" ]; do
    $PGBIN/pgbench -n -c 2 -j 1 -t 25 -f "$script" -h "$dir/sock" -p "$port" -U postgres $DB \
      >>"$OUT/$name.log" 2>&1 || echo "pgbench exited $?" >>"$OUT/$name.failed"
  done
}
writer_loop writer "$OUT/writer.sql" &
pid_writer=$!
stop_writer() { # stop_writer NAME PID
  touch "$OUT/stop.$1"
  if wait "$2"; then :; fi
  if [ -f "$OUT/$1.failed" ]; then bad "writer $1 failed: $(cat "$OUT/$1.failed"; grep -i -m5 'error\|abort' "$OUT/$1.log")"
  else echo "  ok   writer $1 ran without errors"; fi
}
trap 'touch "$OUT/stop.writer" "$OUT/stop.writer2"' EXIT
sleep 1
n=$(q main "select count(*) from mlog")
if [ "$n" -gt 0 ]; then echo "  ok   writer is committing ($n updates so far)"; else bad "writer committed nothing in 1 s"; fi
expect "acct consistent while the writer runs" "$(q main "$BADKEYS")" ""

echo "check (a): two worlds changing different keys merge at the same moment, 3 rounds, writer running"
for r in 1 2 3; do
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('a$r')" -c "select worlds.create_world('b$r')" >/dev/null
  # a_r: +1000 on 51..60, inserts 3 rows; b_r: +2000 on 61..70, deletes 70+r, inserts 3 rows
  q a$r "update acct set v = v + 1000 where id between 51 and 60;
         insert into acct select 1000 + $r * 10 + g, $r from generate_series(1, 3) g;" >/dev/null
  q b$r "update acct set v = v + 2000 where id between 61 and 70;
         delete from acct where id = 70 + $r;
         insert into acct select 2000 + $r * 10 + g, $r from generate_series(1, 3) g;" >/dev/null
  expect "round $r: a$r diff rows" "$(q main "select count(*) from worlds.diff('a$r')")" 13
  expect "round $r: b$r diff rows" "$(q main "select count(*) from worlds.diff('b$r')")" 14
  before=$(q main "select count(*) from mlog")
  when=$(at_once)
  merge_bg ma$r "$when" "select worlds.merge('a$r')" &
  p1=$!
  merge_bg mb$r "$when" "select tag from worlds.sql('merge world b$r') s, jsonb_to_record(s) as x(tag text)" &
  p2=$!
  wait $p1 $p2 || true
  after=$(q main "select count(*) from mlog")
  for m in ma$r mb$r; do
    if [ "$(rc_of $m)" = 0 ]; then echo "  ok   round $r: merge $m succeeded: $(tag_of $m)"
    else bad "round $r: merge $m: expected success, exit $(rc_of $m): $(cat "$OUT/$m.err")"; fi
  done
  expect "round $r: a$r's merge tag" "$(tag_of ma$r)" "MERGE 13"
  expect "round $r: b$r's merge tag" "$(tag_of mb$r)" "MERGE 14"
  expect "round $r: a$r and b$r dropped after their merge" "$(exists a$r)$(exists b$r)" "00"
  echo "    (main writer committed $((after - before)) updates during round $r's merges)"
  psql_in $CL -d $DB -q -c "
    update expect_v set v0 = v0 + 1000 where id between 51 and 60;
    update expect_v set v0 = v0 + 2000 where id between 61 and 70;
    delete from expect_v where id = 70 + $r;
    insert into expect_v select 1000 + $r * 10 + g, $r from generate_series(1, 3) g;
    insert into expect_v select 2000 + $r * 10 + g, $r from generate_series(1, 3) g;"
  expect "round $r: every acct key = initial + main's increments + the worlds' changes" "$(q main "$BADKEYS")" ""
done

echo "check (b1): two worlds changing the same key (acct 90), merged at the same moment"
# same_key TAG BLOCK V1 V2: worlds TAG1 (v = V1) and TAG2 (v = V2) update acct 90 and merge at once (V1, V2
# differ from each other and from acct 90 at the fork, so each world really changes the row).
# BLOCK=yes: a main transaction holds acct for 2 s first, so both merges queue and the second runs after
# the first has committed. Exactly one must win; the loser fails with 40001 and keeps its world.
same_key() {
  local t=$1 block=$2 v1=$3 v2=$4 when pb="" winner="" loser="" wv lv n
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('${t}1')" -c "select worlds.create_world('${t}2')" >/dev/null
  q ${t}1 "update acct set v = $v1 where id = 90" >/dev/null
  q ${t}2 "update acct set v = $v2 where id = 90" >/dev/null
  when=$(at_once)
  if [ "$block" = yes ]; then
    # holds acct 90 (FOR UPDATE, unchanged) until 2 s after WHEN: merges lock the rows they change, so both
    # wait for it (a main transaction on other rows holds up no merge: check (b3))
    $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -c "begin" -c "select 1 from acct where id = 90 for update" \
      -c "select pg_sleep_until('$when'::timestamptz + interval '2 s')" -c "commit" \
      >"$OUT/${t}block.out" 2>&1 &
    pb=$!
    sleep 0.3
  fi
  merge_bg ${t}m1 "$when" "select worlds.merge('${t}1')" &
  local p1=$!
  merge_bg ${t}m2 "$when" "select worlds.merge('${t}2')" &
  local p2=$!
  if [ "$block" = yes ]; then
    sleep 1.8   # both merges are now waiting behind the open transaction
    n=$(q main "select count(*) from pg_stat_activity where datname = current_database()
                  and wait_event_type = 'Lock' and query like '%worlds.merge(''${t}_'')%'")
    expect "$t: both merges wait for the open main transaction" "$n" 2
    if wait $pb; then echo "  ok   $t: the blocking main transaction committed"; else bad "$t: blocking transaction failed: $(cat "$OUT/${t}block.out")"; fi
  fi
  wait $p1 $p2 || true
  for i in 1 2; do
    if [ "$(rc_of ${t}m$i)" = 0 ]; then winner="$winner$i"; else loser="$loser$i"; fi
  done
  if [ ${#winner} -ne 1 ] || [ ${#loser} -ne 1 ]; then
    bad "$t: expected exactly one merge to succeed; succeeded: '${winner}', failed: '${loser}' (${t}m1: exit $(rc_of ${t}m1) $(tag_of ${t}m1) $(cat "$OUT/${t}m1.err") | ${t}m2: exit $(rc_of ${t}m2) $(tag_of ${t}m2) $(cat "$OUT/${t}m2.err"); main acct 90 now $(q main "select v from acct where id = 90"); worlds left: $(q main "select string_agg(name, ',') from worlds.show_worlds() where name like '${t}_'"))"
    # keep the later consistency checks about the writer, not this failure
    psql_in $CL -d $DB -q -c "update expect_v set v0 = (select v from acct where id = 90) where id = 90"
    return
  fi
  echo "  ok   $t: exactly one merge succeeded (${t}$winner: $(tag_of ${t}m$winner))"
  expect "$t: the loser ${t}$loser's SQLSTATE" "$(state_of ${t}m$loser)" 40001
  [ $winner = 1 ] && { wv=$v1; lv=$v2; } || { wv=$v2; lv=$v1; }
  expect "$t: main acct 90 = the winner's value" "$(q main "select v from acct where id = 90")" $wv
  expect "$t: the winner ${t}$winner is dropped" "$(exists ${t}$winner)" 0
  expect "$t: the loser ${t}$loser still exists" "$(exists ${t}$loser)" 1
  expect "$t: the loser's diff still holds its change" \
    "$(q main "select string_agg(\"table\" || '/' || id || ' ' || change || ' ' || (after->>'v'), ',') from worlds.diff('${t}$loser')")" \
    "acct/90 update $lv"
  expect "$t: the loser's world still reads its value" "$(q ${t}$loser "select v from acct where id = 90")" $lv
  psql_in $CL -d $DB -q -c "update expect_v set v0 = $wv where id = 90"
  expect "$t: acct consistent" "$(q main "$BADKEYS")" ""
  # settle it: the loser merges with USING OURS (the writer still running)
  if out=$(timeout 60 $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
             -c "select worlds.merge('${t}$loser', \"using\" => 'ours')" 2>&1); then
    echo "  ok   $t: ${t}$loser merged with USING OURS: $(echo "$out" | grep MERGE)"
    expect "$t: main acct 90 = the loser's value after USING OURS" "$(q main "select v from acct where id = 90")" $lv
    psql_in $CL -d $DB -q -c "update expect_v set v0 = $lv where id = 90"
  else bad "$t: merge ${t}$loser using ours failed: $out"; fi
  expect "$t: acct consistent after settling" "$(q main "$BADKEYS")" ""
}
same_key s no 111111 222222
echo "check (b2): the same, with both merges queued behind an open main transaction (the second runs after the first commits)"
same_key t yes 333333 444444

echo "check (b3): an open main transaction on other rows of the table holds up no merge (merges lock rows, not tables)"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('nb3')" >/dev/null
q nb3 "update acct set v = v + 5 where id = 91" >/dev/null
$PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -c "begin" -c "update acct set v = v + 1 where id = 99" \
  -c "insert into mlog values (99)" -c "select pg_sleep(8)" -c "commit" >"$OUT/nb3block.out" 2>&1 &
pb=$!
sleep 0.5
expect "nb3: merged while main's transaction on acct 99 is open" "$(timeout 60 $PGBIN/psql "$CONN" -X -qAt -c "select worlds.merge('nb3')" 2>&1)" "MERGE 1"
if kill -0 $pb 2>/dev/null; then echo "  ok   nb3: main's transaction was still open when the merge returned"; else bad "nb3: main's transaction ended before the merge returned (the merge waited for it?)"; fi
wait $pb
q main "update expect_v set v0 = v0 + 5 where id = 91" >/dev/null
expect "nb3: acct consistent" "$(q main "$BADKEYS")" ""

echo "check (c): two worlds each changing tables a and b (opposite orders), merged at once, 10 rounds, no deadlock"
cat >"$OUT/writer2.sql" <<'SQL'
\set k random(11, 20)
begin;
update a set v = v + 1 where id = :k;
insert into mlog2 values ('a', :k);
commit;
begin;
update b set v = v + 1 where id = :k;
insert into mlog2 values ('b', :k);
commit;
SQL
writer_loop writer2 "$OUT/writer2.sql" &
pid_writer2=$!
for r in $(seq 1 10); do
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('c${r}x')" -c "select worlds.create_world('c${r}y')" >/dev/null
  q c${r}x "update a set v = v + 1 where id between 1 and 5; update b set v = v + 1 where id between 1 and 5;
            insert into a values (100 + $r, $r); insert into b values (100 + $r, $r);" >/dev/null
  q c${r}y "update b set v = v + 10 where id between 6 and 10; update a set v = v + 10 where id between 6 and 10;
            insert into b values (200 + $r, $r); insert into a values (200 + $r, $r);" >/dev/null
  when=$(at_once)
  merge_bg c${r}mx "$when" "select worlds.merge('c${r}x')" &
  p1=$!
  merge_bg c${r}my "$when" "select worlds.merge('c${r}y')" &
  p2=$!
  wait $p1 $p2 || true
  line="round $r:"
  for m in c${r}mx c${r}my; do
    rc=$(rc_of $m)
    if [ "$rc" = 0 ]; then line="$line $m $(tag_of $m);"
    elif [ "$rc" = 124 ]; then bad "round $r: merge $m did not finish in 60 s (hang/deadlock)"
    else bad "round $r: merge $m failed (exit $rc, SQLSTATE $(state_of $m)): $(cat "$OUT/$m.err")"; fi
  done
  echo "  ..   $line"
done
expect "(c) every merge tag" "$(for r in $(seq 1 10); do tag_of c${r}mx; tag_of c${r}my; done | sort | uniq -c | sed 's/^ *//' | paste -sd,)" "20 MERGE 12"
expect "(c) worlds left" "$(q main "select count(*) from worlds.show_worlds() where name ~ '^c[0-9]+[xy]$'")" 0
stop_writer writer2 $pid_writer2
for t in a b; do
  expect "(c) main $t: 1..5 +10 rounds, 6..10 +10x10, 11..20 + main's writes, the inserted rows" \
    "$(q main "select count(*) || ' ' || coalesce(string_agg(x.id || ':' || x.v || '<>' || x.want, ','), '') from (
       select coalesce(t.id, e.id) id, t.v, e.want from $t t full join (
         select g id, g * 1000 + case when g <= 5 then 10 when g <= 10 then 100 else 0 end
                 + (select count(*) from mlog2 m where m.tbl = '$t' and m.id = g) want from generate_series(1, 20) g
         union all select 100 + r, r from generate_series(1, 10) r
         union all select 200 + r, r from generate_series(1, 10) r) e on e.id = t.id) x
       where x.v is distinct from x.want")" "0 "
  expect "(c) main $t rows" "$(q main "select count(*) from $t")" 40
done
echo "    (writer2 committed $(q main "select count(*) from mlog2") updates of a and b)"

echo "check (d): a merge refused by a foreign key (child of a parent main deleted after the fork) fails with 23503"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('fk')" >/dev/null
q fk "insert into child values (10, 5); update parent set name = 'renamed' where id = 1; update acct set v = v + 7 where id = 80" >/dev/null
psql_in $CL -d $DB -q -c "delete from parent where id = 5"
SUMS="select (select md5(string_agg(t::text, ',' order by id)) from parent t) || ' ' ||
             (select md5(string_agg(t::text, ',' order by id)) from child t) || ' ' ||
             (select v from acct where id = 80)"
main_before=$(q main "$SUMS")
diff_before=$(q main "select string_agg(\"table\" || '/' || id || ':' || change, ',' order by \"table\", id) from worlds.diff('fk')")
fk_world_before=$(q fk "$SUMS")
out=$(timeout 60 $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "select worlds.merge('fk')" 2>&1) && rc=0 || rc=$?
if [ $rc -eq 0 ]; then bad "(d) merge fk: expected 23503, it succeeded: $out"
else expect "(d) merge fk SQLSTATE" "$(echo "$out" | grep -o 'ERROR:  [0-9A-Z]\{5\}' | head -1 | cut -c9-)" 23503; fi
expect "(d) main unchanged (parent, child, acct 80)" "$(q main "$SUMS")" "$main_before"
expect "(d) main has no child 10" "$(q main "select count(*) from child where id = 10")" 0
expect "(d) world fk still exists" "$(exists fk)" 1
expect "(d) world fk's diff unchanged" "$(q main "select string_agg(\"table\" || '/' || id || ':' || change, ',' order by \"table\", id) from worlds.diff('fk')")" "$diff_before"
expect "(d) world fk's diff" "$diff_before" "acct/80:update,child/10:insert,parent/1:update"
expect "(d) world fk still reads its rows" "$(q fk "$SUMS")" "$fk_world_before"
expect "(d) world fk's child 10" "$(q fk "select pid from child where id = 10")" 5
echo "check (d): once main has parent 5 again, the world merges"
psql_in $CL -d $DB -q -c "insert into parent values (5, 'back')"
if out=$(timeout 60 $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "select worlds.merge('fk')" 2>&1); then
  expect "(d) merge fk after the fix" "$(echo "$out" | grep MERGE)" "MERGE 3"
  expect "(d) main child 10" "$(q main "select pid from child where id = 10")" 5
  expect "(d) main parent 1" "$(q main "select name from parent where id = 1")" renamed
  psql_in $CL -d $DB -q -c "update expect_v set v0 = v0 + 7 where id = 80"
else bad "(d) merge fk after re-adding parent 5 failed: $out"; fi

echo "check: main's writer stopped; every acct key = initial + main's increments + the worlds' changes"
stop_writer writer $pid_writer
expect "acct consistent at the end" "$(q main "$BADKEYS")" ""
echo "    (writer committed $(q main "select count(*) from mlog") updates in all)"
expect "acct keys 1..50 changed only by main: sum = initial + updates" \
  "$(q main "select sum(v) - (select sum(id * 100000) from generate_series(1, 50) id) from acct where id <= 50")" \
  "$(q main "select count(*) from mlog where id <= 50")"

if [ $failures -ne 0 ]; then echo "07_concurrent_merges: $failures check(s) failed (outputs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 07_concurrent_merges"
