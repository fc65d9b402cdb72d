#!/usr/bin/env bash
# Inside a world, as apps write it over libpq: INSERT ... ON CONFLICT DO UPDATE with parameters in its
# SET (pgbench -M prepared, as drivers send them) from two sessions at once — a counter: no lost update,
# and no 40001 either, since conflicting rows are read under the world's lock as Postgres does under READ
# COMMITTED, so the counter equals the committed bumps — COPY FROM through psql's \copy, two sessions
# removing one row of a table without a key, and SQL MERGE counters from four clients at once (every merge
# commits, none loses another's update). Main is never written.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s09_upsert
OUT=$RUN_DIR/s09_upsert; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table counter (id int primary key, n int not null);
create table log (id int primary key, msg text not null);
insert into counter values (1, 0);
select worlds.create_world('w');
SQL
q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }

echo "check: pgbench -M prepared, 2 clients, upserting one counter inside world w"
# -M prepared: the values travel as parameters ($n), also in DO UPDATE's SET, as drivers send them
cat >"$OUT/bump.sql" <<'SQL'
\set r random(1, 99999)
\set one 1
insert into counter values (1, :one) on conflict (id) do update set n = counter.n + :one;
insert into log values (:client_id * 100000 + :r, 'bump') on conflict (id) do nothing;
SQL
dir=$(cluster_dir $CL)
PGOPTIONS="-c worlds.world=w" $PGBIN/pgbench -n -h "$dir/sock" -p "$(cat "$dir/port")" -U postgres -M prepared -c 2 -j 2 -t 150 \
  -f "$OUT/bump.sql" $DB >"$OUT/pgbench.log" 2>&1
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/pgbench.log")
committed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/pgbench.log")
echo "  pgbench: $committed transactions committed, $failed failed with 40001"
[ -n "$committed" ] || bad "pgbench did not run: $(tail -3 "$OUT/pgbench.log")"
expect "world counter = committed bumps" "$(q w "select n from counter where id = 1")" "$committed"
expect "main counter untouched" "$(q main "select n from counter where id = 1")" "0"
expect "main log untouched" "$(q main "select count(*) from log")" "0"

echo "check: \\copy into the world over libpq"
printf '1\tone\n2\ttwo\n3\tthree\n' >"$OUT/rows.tsv"
$PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=w'" -X -q -v ON_ERROR_STOP=1 \
  -c "\\copy log (id, msg) from '$OUT/rows.tsv'" >"$OUT/copy.out" 2>&1 || bad "\\copy failed: $(cat "$OUT/copy.out")"
expect "world log has the copied rows" "$(q w "select string_agg(msg, ',' order by id) from log where id <= 3")" "one,two,three"
expect "main log still empty" "$(q main "select count(*) from log")" "0"
echo "check: a failing \\copy (duplicate key) changes nothing"
$PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=w'" -X -q -v ON_ERROR_STOP=1 \
  -c "\\copy log (id, msg) from '$OUT/rows.tsv'" >"$OUT/copy2.out" 2>&1 && bad "duplicate \\copy succeeded"
grep -q "duplicate key value violates unique constraint" "$OUT/copy2.out" || bad "no 23505 message: $(cat "$OUT/copy2.out")"
expect "world log unchanged" "$(q w "select count(*) from log where id <= 3")" "3"

echo "check: two sessions remove one row of a table without a key in one world: the second waits, then finds it gone (as Postgres under READ COMMITTED)"
psql_in $CL -d $DB -q -c "create table notes (msg text)" -c "insert into notes values ('x'), ('y')" -c "select worlds.create_world('k')" >/dev/null
CONN=$(conninfo $CL $DB)
$PGBIN/psql "$CONN options='-c worlds.world=k'" -X -q -At -v ON_ERROR_STOP=1 \
  -c "begin" -c "delete from notes where msg = 'x'" -c "select pg_sleep(1.5)" -c "commit" >"$OUT/ka.out" 2>&1 &
ka=$!
sleep 0.5
if $PGBIN/psql "$CONN options='-c worlds.world=k'" -X -q -At -v ON_ERROR_STOP=1 -c "delete from notes where msg = 'x' returning msg" >"$OUT/kb.out" 2>&1; then
  expect "rows the second delete removed" "$(cat "$OUT/kb.out")" ""
else bad "second delete: expected it to wait and remove nothing, got: $(cat "$OUT/kb.out")"; fi
wait $ka || bad "first delete failed: $(cat "$OUT/ka.out")"
expect "world k has one row left" "$(q k "select string_agg(msg, ',') from notes")" "y"
expect "main keeps both" "$(q main "select string_agg(msg, ',' order by msg) from notes")" "x,y"

echo "check: SQL MERGE from 4 clients at once in one world: counters by key, no lost update, no error"
psql_in $CL -d $DB -q -c "create table tallies (k int primary key, n int not null)" -c "select worlds.create_world('m')" >/dev/null
printf '\\set k random(1, 5)\nmerge into tallies t using (select :k as k) s on t.k = s.k when matched then update set n = t.n + 1 when not matched then insert values (s.k, 1);\n' >"$OUT/merge.sql"
PGOPTIONS="-c worlds.world=m" $PGBIN/pgbench -n -h "$dir/sock" -p "$(cat "$dir/port")" -U postgres -c 4 -j 2 -t 100 \
  -f "$OUT/merge.sql" $DB >"$OUT/pgbench_merge.log" 2>&1
expect "merges committed" "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/pgbench_merge.log")" "400"
expect "merges failed" "$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/pgbench_merge.log")" "0"
expect "sum of the world's tallies" "$(q m "select sum(n) from tallies")" "400"
expect "main's tallies" "$(q main "select count(*) from tallies")" "0"

[ $failures -eq 0 ] || fail "$failures check(s) failed"
psql_in $CL -q -c "drop database $DB"
echo "ok: 09_upsert_copy_in_world"
