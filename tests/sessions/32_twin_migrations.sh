#!/usr/bin/env bash
# Worlds changing main's tables, under load (docs/architecture.md, "Main's tables a world changes").
# (a) Four sessions each migrate a table of main's in worlds of their own, over and over: ADD COLUMN with a
#     default, a backfill of some rows, SET NOT NULL, an index; then MERGE. At the same time a main writer
#     increments `v` of random rows of those tables and inserts new rows (each increment counted in the
#     same transaction), and pgbench moves money between `accounts`. At the end: no deadlock (40P01), no
#     error but 40001 (a row or the table changed on both sides), every merged column in main, NOT NULL,
#     holding the world's backfill or its default, no increment of main's lost (sum of v = start + the
#     counted increments), the total of `accounts` kept, no copy or world left.
# (b) kill -9 of the backend merging a world that changed a 20,000-row table (a column added, every row
#     backfilled, then NOT NULL): after the restart main has the column with every value and the world is
#     gone, or has no column and the world is whole (its copy, its statements), and merges then.
# (c) a merge racing the world's own writers of its copy of a table: every row they committed is in main.
# (d) REBASE of such a world, five times while main writes the table: the merge after loses nothing.
# (e) two sessions of one world changing one of main's tables at once: one copy, both changes.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s32_twin_migrations
OUT=$RUN_DIR/s32_twin_migrations; rm -rf "$OUT"; mkdir -p "$OUT"
CONN=$(conninfo $CL $DB)
SECONDS_RUN=${SCHEMA_SECONDS:-20}
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table accounts (id int primary key, balance int not null);
insert into accounts select g, 1000 from generate_series(1, 100) g;
create table increments (n bigint not null);
create table merged_log (world text primary key, tab text not null, col text not null, fill int not null);
do $$ begin
  for i in 1..4 loop
    execute format('create table items_%s (id serial primary key, v int not null default 0)', i);
    execute format('insert into items_%s (v) select 0 from generate_series(1, 200)', i);
  end loop;
end $$;
SQL
cat > "$OUT/transfer.sql" <<'SQL'
\set a random(1, 100)
\set b random(1, 100)
begin;
update accounts set balance = balance - 1 where id = :a;
update accounts set balance = balance + 1 where id = :b;
commit;
SQL
# main's writer: an increment of a random row of a random table (ids 50 and up: the worlds backfill ids
# up to 70, so some of their merges meet main's increments: 40001), counted in its transaction; now
# and then a new row
cat > "$OUT/main_writes.sql" <<'SQL'
\set t random(1, 4)
\set r random(50, 200)
\set ins random(1, 10)
begin;
update items_:t set v = v + 1 where id = :r;
insert into increments values (1);
commit;
select case when :ins = 1 then 1 else 0 end as ins \gset
\if :ins
insert into items_:t (v) values (0);
\endif
SQL

# one migrating session: worlds m<i>_<n>, each adds a column to items_<i> and merges
migrator() {
  local i=$1 n=0 end=$((SECONDS + SECONDS_RUN))
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1))
    local w="m${i}_$n" col="c_$n"
    local rc=0
    $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 >"$OUT/run$i.log" 2>&1 <<SQL || rc=$?
select worlds.sql('create world $w');
set worlds.world = $w;
begin;
alter table items_$i add column $col int default $n;
update items_$i set $col = id where id % 7 = 0 and id <= 70;
alter table items_$i alter column $col set not null;
create index on items_$i ($col);
commit;
reset worlds.world;
select worlds.sql('merge world $w');
insert into merged_log values ('$w', 'items_$i', '$col', $n);
SQL
    cat "$OUT/run$i.log" >>"$OUT/migrator$i.log"
    if [ $rc -ne 0 ]; then
      $PGBIN/psql "$CONN" -X -q -c "select worlds.sql('drop world if exists $w')" >/dev/null 2>&1
      if grep -q "could not serialize\|conflicts" "$OUT/run$i.log"; then echo "RETRIED $w" >>"$OUT/migrator$i.log"; else echo "FAILED $w" >>"$OUT/migrator$i.log"; fi
    fi
  done
}

$PGBIN/pgbench "$CONN" -n -c 2 -T "$SECONDS_RUN" -f "$OUT/transfer.sql" >"$OUT/pgbench.log" 2>&1 &
PGB=$!
$PGBIN/pgbench "$CONN" -n -c 2 -T "$SECONDS_RUN" -f "$OUT/main_writes.sql" >"$OUT/main_writes.log" 2>&1 &
PGW=$!
pids=()
for i in 1 2 3 4; do migrator $i & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
wait $PGB || true
wait $PGW || true

all_logs=$(cat "$OUT"/migrator*.log "$OUT/pgbench.log" "$OUT/main_writes.log")
expect "deadlocks (40P01)" "$(grep -c 'deadlock' <<<"$all_logs" || true)" "0"
# the only failures allowed: 40001 (a row or the table changed on both sides; retried)
expect "failed migrations" "$(grep -c '^FAILED' <<<"$all_logs" || true)" "0"
expect "main's writers' errors" "$(grep -c 'ERROR' "$OUT/main_writes.log" || true)" "0"
echo "  migrations retried after 40001: $(grep -c '^RETRIED' <<<"$all_logs" || true)"
echo "  main's increments: $(psql_in $CL -d $DB -qAt -c "select count(*) from increments")"
merged=$(psql_in $CL -d $DB -qAt -c "select count(*) from merged_log")
echo "  merged worlds: $merged"
[ "$merged" -ge 4 ] || bad "fewer than 4 worlds merged ($merged)"
expect "every merged column in main, NOT NULL" "$(psql_in $CL -d $DB -qAt -c "
  select count(*) from merged_log l where not exists (select 1 from pg_attribute a where a.attrelid = l.tab::regclass and a.attname = l.col and a.attnotnull)")" "0"
expect "every merged column holds the backfill or its default" "$(psql_in $CL -d $DB -qAt -c "
  select coalesce(sum((xpath('/row/c/text()', query_to_xml(format('select count(*) as c from %I where %I is null or %I not in (id, %s)', l.tab, l.col, l.col, l.fill), false, true, '')))[1]::text::int), 0)
  from merged_log l")" "0"
expect "no increment of main's lost" "$(psql_in $CL -d $DB -qAt -c "
  select (select sum(v) from items_1) + (select sum(v) from items_2) + (select sum(v) from items_3) + (select sum(v) from items_4) - (select count(*) from increments)")" "0"
expect "total of accounts kept" "$(psql_in $CL -d $DB -qAt -c "select sum(balance) from accounts")" "100000"
expect "no copies left" "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world_twin")" "0"
expect "no world namespace left" "$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_namespace where nspname like 'pg\_w%'")" "0"
expect "live worlds left" "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world where dropped is null and num <> 0")" "0"

# (b) kill -9 in the middle of a merge that changes a 20,000-row table
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table big (id int primary key, v int not null);
insert into big select g, g from generate_series(1, 20000) g;
select worlds.sql('create world wide');
set worlds.world = wide;
alter table big add column doubled bigint;
update big set doubled = v * 2;
alter table big alter column doubled set not null;
SQL
( $PGBIN/psql "$CONN" -X -q -c "select worlds.sql('merge world wide')" >"$OUT/big_merge.log" 2>&1 ) &
MP=$!
for _ in $(seq 1 200); do
  victim=$(psql_in $CL -d $DB -qAt -c "select pid from pg_stat_activity where datname = '$DB' and query like '%merge world wide%' and pid <> pg_backend_pid() limit 1")
  [ -n "$victim" ] && break
  sleep 0.02
done
sleep 0.3
[ -n "$victim" ] && kill -9 "$victim"
wait $MP 2>/dev/null || true
for _ in $(seq 1 60); do psql_in $CL -d $DB -qAt -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
has_col=$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_attribute where attrelid = 'big'::regclass and attname = 'doubled' and not attisdropped")
live=$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world where name = 'wide' and dropped is null")
echo "  after kill -9: main has the column: $has_col, world wide live: $live (merge log: $(tr '\n' ' ' < "$OUT/big_merge.log" | cut -c1-120))"
if [ "$has_col" = 1 ]; then
  expect "merged whole: the world is gone" "$live" "0"
  expect "merged whole: every row's value" "$(psql_in $CL -d $DB -qAt -c "select count(*) from big where doubled = v * 2")" "20000"
elif [ "$has_col" = 0 ]; then
  expect "untouched: the world is whole" "$live" "1"
  expect "untouched: its copy" "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world_twin t join worlds.world w on w.num = t.world where w.name = 'wide'")" "1"
  expect "untouched: the merge goes through now" "$(psql_in $CL -d $DB -qAt -c "select worlds.sql('merge world wide')")" '{"tag": "MERGE 20000"}'
  expect "then: every row's value" "$(psql_in $CL -d $DB -qAt -c "select count(*) from big where doubled = v * 2")" "20000"
else
  bad "main's table has the column $has_col times after kill -9"
fi
expect "NOT NULL on main's column" "$(psql_in $CL -d $DB -qAt -c "select attnotnull from pg_attribute where attrelid = 'big'::regclass and attname = 'doubled'")" "t"

# (c) a merge racing the world's own writers of its copy: every row a writer committed is in main after
#     the merge (the writers hold the world's lock shared, as every writer of a world does; a deadlock
#     between a writer and the merge aborts one of them, never loses a committed row)
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table racy (id int primary key, v int not null default 0);
insert into racy select g, 0 from generate_series(1, 100) g;
select worlds.sql('create world racing');
set worlds.world = racing;
alter table racy add column w text default 'world';
SQL
writer() { # writer N: inserts ids N*100000 + 1.., one transaction each, until the world is gone
  local n=$1 i=0
  while [ $i -lt 2000 ]; do
    i=$((i + 1))
    local id=$((n * 100000 + i))
    if PGOPTIONS='-c worlds.world=racing' $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 -c "insert into racy (id, w) values ($id, 'w$n')" >>"$OUT/racer$n.log" 2>&1; then
      echo "$id" >>"$OUT/racer$n.ids"
    elif grep -q 'does not exist' "$OUT/racer$n.log"; then
      break
    fi
  done
}
: >"$OUT/racer1.ids"; : >"$OUT/racer2.ids"
writer 1 & W1=$!
writer 2 & W2=$!
sleep 2
merged_racing=0
for _ in 1 2 3 4 5 6 7 8 9 10; do
  if $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -c "select worlds.sql('merge world racing')" >>"$OUT/racing_merge.log" 2>&1; then merged_racing=1; break; fi
  sleep 0.5
done
wait $W1 $W2 2>/dev/null || true
expect "the racing world merged" "$merged_racing" "1"
committed=$(cat "$OUT/racer1.ids" "$OUT/racer2.ids" | wc -l)
echo "  writers' committed rows: $committed (merge log: $(grep -c ERROR "$OUT/racing_merge.log" || true) refused attempts)"
cat "$OUT/racer1.ids" "$OUT/racer2.ids" | sed 's/^/(/; s/$/)/' | paste -sd, > "$OUT/racer_ids.csv"
if [ -s "$OUT/racer_ids.csv" ]; then
  expect "every row a writer committed is in main" "$(psql_in $CL -d $DB -qAt -c "select count(*) from (values $(cat "$OUT/racer_ids.csv")) v(id) where not exists (select 1 from racy r where r.id = v.id)")" "0"
fi
expect "main's racy has the world's column" "$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_attribute where attrelid = 'racy'::regclass and attname = 'w'")" "1"

# (d) REBASE of a world with a copy of main's table while main writes that table: the copy takes in
#     main's rows each time; the merge after loses no increment of main's
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table ledger (id int primary key, v int not null default 0);
insert into ledger select g, 0 from generate_series(1, 100) g;
create table ledger_incs (n int);
select worlds.sql('create world rebaser');
set worlds.world = rebaser;
alter table ledger add column c int not null default 0;
update ledger set c = id where id <= 10;
SQL
cat > "$OUT/ledger.sql" <<'SQL'
\set r random(11, 100)
begin;
update ledger set v = v + 1 where id = :r;
insert into ledger_incs values (1);
commit;
SQL
$PGBIN/pgbench "$CONN" -n -c 2 -T 6 -f "$OUT/ledger.sql" >"$OUT/ledger_pgbench.log" 2>&1 &
LP=$!
rebased=0
for _ in 1 2 3 4 5; do
  sleep 1
  if $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -c "select worlds.sql('rebase world rebaser')" >>"$OUT/rebaser.log" 2>&1; then rebased=$((rebased + 1)); fi
done
wait $LP || true
echo "  rebases that went through while main wrote: $rebased of 5"
[ "$rebased" -ge 1 ] || bad "no rebase went through"
expect "rebase errors" "$(grep -c 'ERROR' "$OUT/rebaser.log" || true)" "0"
expect "the world's copy has main's increments (as of its last rebase) and its own column" "$(PGOPTIONS='-c worlds.world=rebaser' $PGBIN/psql "$CONN" -X -qAt -c "select count(*) from ledger where c <> case when id <= 10 then id else 0 end")" "0"
expect "merge of the rebased world" "$(psql_in $CL -d $DB -qAt -c "select worlds.sql('merge world rebaser')")" '{"tag": "MERGE 10"}'
expect "no increment of main's lost" "$(psql_in $CL -d $DB -qAt -c "select (select sum(v) from ledger) - (select count(*) from ledger_incs)")" "0"
expect "main's ledger: the world's column, its backfill" "$(psql_in $CL -d $DB -qAt -c "select count(*) from ledger where c <> case when id <= 10 then id else 0 end")" "0"
expect "deadlocks" "$(grep -c deadlock "$OUT/ledger_pgbench.log" "$OUT/rebaser.log" | awk -F: '{s += $2} END {print s}')" "0"

# (e) two sessions of one world change one of main's tables at once: one copy, both changes
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table pair (id int primary key, v int);
insert into pair select g, g from generate_series(1, 1000) g;
select worlds.sql('create world pairs');
SQL
( PGOPTIONS='-c worlds.world=pairs' $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 -c "begin" -c "alter table pair add column a int default 1" -c "select pg_sleep(1)" -c "commit" >"$OUT/pair1.log" 2>&1 ) &
P1=$!
sleep 0.3
PGOPTIONS='-c worlds.world=pairs' $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 -c "alter table pair add column b int default 2" >"$OUT/pair2.log" 2>&1 || bad "the second session's ALTER failed: $(cat "$OUT/pair2.log")"
wait $P1 || bad "the first session's ALTER failed: $(cat "$OUT/pair1.log")"
expect "one copy, both columns, in the world" "$(PGOPTIONS='-c worlds.world=pairs' $PGBIN/psql "$CONN" -X -qAt -c "select count(*), sum(a), sum(b) from pair")" "1000|1000|2000"
expect "merged: both columns in main" "$(psql_in $CL -d $DB -qAt -c "select worlds.sql('merge world pairs')" >/dev/null; psql_in $CL -d $DB -qAt -c "select sum(a), sum(b) from pair")" "1000|2000"

if [ $failures -ne 0 ]; then echo "32_twin_migrations: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 32_twin_migrations"
