#!/usr/bin/env bash
# A world's view of main stays as it was at the fork while main's writers commit and the world's own
# writers commit at once (its cache's catch-up, and the history marks that let it skip that catch-up
# while main is quiet: storage/history_marks.rs).
#
# t: 500 rows of v = 1. World w forks. Then, for T seconds:
#   - a pgbench client changes main: updates, inserts and deletes of t in one transaction, and now and
#     then a transaction that stays open across others (an old xmin) before committing its update;
#   - two pgbench clients write the world's own table u (so the world's version and every session's
#     snapshot keep moving) and read t in the world;
#   - two readers in w check t: count(*) = 500 and sum(v) = 500, every reading, through the world scan
#     and through the overlay views (worlds.world_scan = off).
# At the end every reading is right, and main changed (the test is not vacuous). Then kill -9 of a main
# writer (shared memory starts anew) and main's writes after the restart: the world still reads its fork.
source "$(dirname "$0")/common.sh"
T=${CACHE_SECONDS:-12}
start_cluster $CL yes
DB=s25_cache
OUT=$RUN_DIR/s25_cache; rm -rf "$OUT"; mkdir -p "$OUT"
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v int not null);
insert into t select g, 1 from generate_series(1, 500) g;
create table u (id int primary key, n int not null);
insert into u select g, 0 from generate_series(1, 50) g;
select worlds.create_world('w');
SQL

cat >"$OUT/main.sql" <<'SQL'
\set a random(1, 500)
\set b random(501, 100000)
begin;
update t set v = v + 1 where id = :a;
insert into t values (:b, 7) on conflict (id) do update set v = t.v + 7;
delete from t where id = :b - 1;
commit;
SQL
cat >"$OUT/slow.sql" <<'SQL'
\set a random(1, 500)
begin;
update t set v = v + 100 where id = :a;
select pg_sleep(0.3);
commit;
SQL
cat >"$OUT/world.sql" <<'SQL'
\set k random(1, 50)
begin;
update u set n = n + 1 where id = :k;
select count(*) from t where id <= 10;
commit;
SQL
B="$PGBIN/pgbench -h $dir/sock -p $port -U postgres -n"
$B -c 1 -T "$T" -f "$OUT/main.sql" $DB >"$OUT/main.log" 2>&1 &
$B -c 1 -T "$T" -f "$OUT/slow.sql" $DB >"$OUT/slow.log" 2>&1 &
PGOPTIONS="-c worlds.world=w" $B -c 2 -T "$T" -f "$OUT/world.sql" $DB >"$OUT/world.log" 2>&1 &
reader() { # reader N SCAN
  local end=$(( $(date +%s) + T ))
  while [ "$(date +%s)" -lt $end ]; do
    psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "set worlds.world_scan = $2" \
      -c "select count(*) || ' ' || sum(v) from t" -c "select count(*) || ' ' || sum(v) from t where id between 1 and 500" 2>&1
  done >"$OUT/reader_$1.log"
}
reader 1 on & reader 2 off &
wait

readings=$(cat "$OUT"/reader_*.log | wc -l)
wrong=$(cat "$OUT"/reader_*.log | grep -cv '^500 500$' || true)
expect "readings in the world that are not the fork's 500 rows of sum 500 (of $readings)" "$wrong" 0
[ "$readings" -gt 20 ] || bad "too few readings: $readings"
{ cat "$OUT"/reader_*.log | grep -v "^500 500$" | sort | uniq -c | head -5; } || true
expect "main's writers failed" "$(grep -h 'number of failed transactions' "$OUT/main.log" "$OUT/slow.log" | grep -vc ': 0 ' || true)" 0
expect "the world's writers failed" "$(grep -h 'number of failed transactions' "$OUT/world.log" | grep -vc ': 0 ' || true)" 0
moved=$(psql_in $CL -d $DB -qAt -c "select count(*) <> 500 or sum(v) <> 500 from t")
expect "main changed meanwhile" "$moved" t
expect "the world's own writes kept" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "select sum(n) > 0 from u")" t
echo "check: kill -9 of a main writer mid-transaction: shared memory (the history marks) starts anew; the world still reads its fork"
$B -c 2 -T 6 -f "$OUT/main.sql" $DB >"$OUT/crash_main.log" 2>&1 &
crash_pgbench $DB $!
expect "after the crash, in w" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "select count(*) || ' ' || sum(v) from t")" "500 500"
# main writes again after the restart, then a fresh session of w and one that read before those writes
psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "select count(*) from t" -c "select pg_sleep(1.5)" -c "select count(*) || ' ' || sum(v) from t" >"$OUT/long_reader.log" 2>&1 &
LONG=$!
sleep 0.5
$B -c 1 -t 30 -f "$OUT/main.sql" $DB >"$OUT/after_main.log" 2>&1 || bad "main's writers after the crash failed"
wait $LONG
expect "after the crash and main's writes, a session of w that read before them" "$(tail -1 "$OUT/long_reader.log")" "500 500"
expect "after the crash and main's writes, a fresh session of w" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "select count(*) || ' ' || sum(v) from t")" "500 500"
expect "after the crash and main's writes, through the overlay views" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "set worlds.world_scan = off" -c "select count(*) || ' ' || sum(v) from t")" "500 500"

[ $failures -eq 0 ] || { echo "25_world_cache_vs_main: $failures failed" >&2; exit 1; }
echo "ok: a world's view of main held while main and the world's writers committed"
