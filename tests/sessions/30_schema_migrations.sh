#!/usr/bin/env bash
# Schema changes inside worlds, under load (docs/architecture.md, "Schema changes in worlds").
# (a) Four sessions each run migrations in worlds of their own, over and over: CREATE TABLE with a serial,
#     a foreign key to main's table and a CHECK; a view joining it to main's table; a function; rows; an
#     update of main's table; then MERGE. At the same time pgbench writes main's `accounts` and another
#     session migrates main itself (creates, alters and drops tables of its own). At the end: no deadlock
#     (40P01), no error but the expected conflicts, every merged world's table in main with exactly its
#     rows (and tracked), every merged world gone with its namespaces, the total of `accounts` kept.
# (b) kill -9 of the backend running a merge that moves 300 tables: after the restart main has all of
#     them and the world is gone, or none of them and the world is whole (its 300 tables, their rows).
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s30_schema_migrations
OUT=$RUN_DIR/s30_schema_migrations; rm -rf "$OUT"; mkdir -p "$OUT"
CONN=$(conninfo $CL $DB)
SECONDS_RUN=${SCHEMA_SECONDS:-20}
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table accounts (id int primary key, balance int not null);
insert into accounts select g, 1000 from generate_series(1, 100) g;
create table merged_log (world text primary key, rows int not null);
SQL
cat > "$OUT/transfer.sql" <<'SQL'
\set a random(1, 100)
\set b random(1, 100)
begin;
update accounts set balance = balance - 1 where id = :a;
update accounts set balance = balance + 1 where id = :b;
commit;
SQL

# one migrating session: worlds m<i>_<n>, each a migration merged into main
migrator() {
  local i=$1 n=0 end=$((SECONDS + SECONDS_RUN))
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1))
    local w="m${i}_$n" rows=$(( (RANDOM % 20) + 1 ))
    # (a CREATE WORLD racing main's CREATE TABLE may get 40001, as the spec allows: the app retries; the
    # status is taken with `||`, or errexit (scripts/lib.sh) would end this migrator at its first 40001
    # and the whole check with it, silently, at its `wait`)
    local rc=0
    $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 >"$OUT/run$i.log" 2>&1 <<SQL || rc=$?

select worlds.sql('create world $w');
set worlds.world = $w;
begin;
create table t_$w (id serial primary key, account int not null references accounts, v int not null check (v > 0));
create view v_$w as select t.id, t.v, a.balance from t_$w t join accounts a on a.id = t.account;
create function f_$w() returns bigint language sql as \$\$ select count(*) from t_$w \$\$;
insert into t_$w (account, v) select (g % 100) + 1, g from generate_series(1, $rows) g;
commit;
reset worlds.world;
select worlds.sql('merge world $w');
insert into merged_log values ('$w', $rows);
SQL
    cat "$OUT/run$i.log" >>"$OUT/migrator$i.log"
    if [ $rc -ne 0 ]; then
      $PGBIN/psql "$CONN" -X -q -c "select worlds.sql('drop world if exists $w')" >/dev/null 2>&1
      if grep -q "could not serialize" "$OUT/run$i.log"; then echo "RETRIED $w" >>"$OUT/migrator$i.log"; else echo "FAILED $w" >>"$OUT/migrator$i.log"; fi
    fi
  done
}
# main migrating itself meanwhile
main_migrator() {
  local n=0 end=$((SECONDS + SECONDS_RUN))
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1))
    $PGBIN/psql "$CONN" -X -q -v ON_ERROR_STOP=1 >>"$OUT/main_migrator.log" 2>&1 <<SQL || echo "FAILED main $n" >>"$OUT/main_migrator.log"
create table main_$n (id int primary key, v int);
insert into main_$n select g, g from generate_series(1, 10) g;
alter table main_$n add column w text default 'x';
drop table main_$n;
SQL
  done
}

$PGBIN/pgbench "$CONN" -n -c 2 -T "$SECONDS_RUN" -f "$OUT/transfer.sql" >"$OUT/pgbench.log" 2>&1 &
PGB=$!
pids=()
for i in 1 2 3 4; do migrator $i & pids+=($!); done
main_migrator & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || bad "a migrating session ended with status $? (its log: $OUT)"; done
wait $PGB || true

all_logs=$(cat "$OUT"/migrator*.log "$OUT/main_migrator.log" "$OUT/pgbench.log")
expect "deadlocks (40P01)" "$(grep -c 'deadlock' <<<"$all_logs" || true)" "0"
# the only failures allowed: 40001 (retried)
expect "failed migrations" "$(grep -c '^FAILED' <<<"$all_logs" || true)" "0"
echo "  migrations retried after 40001: $(grep -c '^RETRIED' <<<"$all_logs" || true)"
merged=$(psql_in $CL -d $DB -qAt -c "select count(*) from merged_log")
echo "  merged worlds: $merged"
[ "$merged" -ge 4 ] || bad "fewer than 4 worlds merged ($merged)"
expect "every merged table in main with exactly its rows" "$(psql_in $CL -d $DB -qAt -c "
  select count(*) from merged_log l
  where (xpath('/row/c/text()', query_to_xml(format('select count(*) as c from public.%I', 't_' || l.world), false, true, '')))[1]::text::int <> l.rows")" "0"
expect "every merged view and function in main" "$(psql_in $CL -d $DB -qAt -c "
  select count(*) from merged_log l where to_regclass('public.v_' || l.world) is null or to_regproc('public.f_' || l.world) is null")" "0"
expect "every merged table tracked" "$(psql_in $CL -d $DB -qAt -c "
  select count(*) from merged_log l where not exists (select 1 from worlds.tables t where t.relid = to_regclass('public.t_' || l.world))")" "0"
expect "merged worlds gone, with their namespaces" "$(psql_in $CL -d $DB -qAt -c "
  select count(*) from pg_namespace where nspname like 'pg\_w%'")" "0"
expect "live worlds left" "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world where dropped is null and num <> 0")" "0"
expect "total of accounts kept" "$(psql_in $CL -d $DB -qAt -c "select sum(balance) from accounts")" "100000"
expect "foreign keys made by the merges" "$(psql_in $CL -d $DB -qAt -c "
  select count(*) from merged_log l where not exists (select 1 from pg_constraint c where c.conrelid = to_regclass('public.t_' || l.world) and c.contype = 'f')")" "0"
expect "main's own migrations left nothing" "$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_class where relname ~ '^main_[0-9]' and relkind = 'r'")" "0"

# (b) kill -9 in the middle of a merge that moves 300 tables
psql_in $CL -d $DB -q >/dev/null <<'SQL'
select worlds.sql('create world big');
set worlds.world = big;
do $$ begin
  for i in 1..300 loop
    execute format('create table big_%s (id int primary key, v int)', i);
    execute format('insert into big_%s select g, g from generate_series(1, 20) g', i);
  end loop;
end $$;
SQL
( $PGBIN/psql "$CONN" -X -q -c "select worlds.sql('merge world big')" >"$OUT/big_merge.log" 2>&1 ) &
MP=$!
for _ in $(seq 1 200); do
  victim=$(psql_in $CL -d $DB -qAt -c "select pid from pg_stat_activity where datname = '$DB' and query like '%merge world big%' and pid <> pg_backend_pid() limit 1")
  [ -n "$victim" ] && break
  sleep 0.02
done
sleep 0.1
[ -n "$victim" ] && kill -9 "$victim"
wait $MP 2>/dev/null || true
for _ in $(seq 1 60); do psql_in $CL -d $DB -qAt -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
in_main=$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_class where relnamespace = 'public'::regnamespace and relname ~ '^big_[0-9]+$' and relkind = 'r'")
live=$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world where name = 'big' and dropped is null")
echo "  after kill -9: $in_main of 300 tables in main, world big live: $live (merge log: $(tr '\n' ' ' < "$OUT/big_merge.log" | cut -c1-120))"
if [ "$in_main" = 300 ]; then
  expect "merged whole: the world is gone" "$live" "0"
  expect "merged whole: rows" "$(psql_in $CL -d $DB -qAt -c "select sum((xpath('/row/c/text()', query_to_xml(format('select count(*) as c from public.%I', relname), false, true, '')))[1]::text::int) from pg_class where relnamespace = 'public'::regnamespace and relname ~ '^big_[0-9]+$'")" "6000"
elif [ "$in_main" = 0 ]; then
  expect "untouched: the world is whole" "$live" "1"
  expect "untouched: its tables" "$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname like 'pg\_w%\_public' and relname ~ '^big_[0-9]+$' and relkind = 'r'")" "300"
  expect "untouched: the merge goes through now" "$(psql_in $CL -d $DB -qAt -c "select worlds.sql('merge world big')")" '{"tag": "MERGE 6000"}'
else
  bad "main has $in_main of the world's 300 tables after kill -9: half a merge"
fi

if [ $failures -ne 0 ]; then echo "30_schema_migrations: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 30_schema_migrations"
