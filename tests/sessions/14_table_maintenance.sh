#!/usr/bin/env bash
# Physical reorganization of a tracked table never changes what a world sees: pg_repack, VACUUM FULL,
# CLUSTER, a rewriting ALTER TABLE and TRUNCATE, each while worlds live (a world of main, a world of that
# world, a world of main as it was), and while main's writers run. After each: every world reads exactly
# what it read before, its DIFF is the same, and its merge leaves main as expected. A table without a key
# can't have its rows followed: the rewrite is refused (0A000) while a world lives, and nothing changes.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s14_maint
OUT=$RUN_DIR/s14_maint; rm -rf "$OUT"; mkdir -p "$OUT"
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
REPACK=$($PG_CONFIG --bindir)/pg_repack
[ -x "$REPACK" ] || fail "pg_repack is not installed ($REPACK): scripts/setup.sh installs postgresql-15-repack"
q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }
# everything a world sees of t, as one fingerprint; and its diff
seen() { q "$1" "select count(*) || ' ' || coalesce(sum(v), 0) || ' ' || md5(coalesce(string_agg(id || ':' || v || ':' || pad, ',' order by id), '')) from t"; }
diffs() { q main "select coalesce(string_agg(j ->> 'change' || ' ' || (j ->> 'id'), ',' order by j ->> 'id'), '') from worlds.sql('diff world $1') j" 2>/dev/null; }

# one round: the table, three worlds, main's changes after the fork, then MAINTENANCE, then the checks
round() {
  local name=$1 maintenance=$2
  echo "check ($name): worlds forked before it read what they read, diff and merge the same"
  psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
  psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create extension pg_repack;
create table t (id int primary key, v int not null, pad text);
insert into t select g, g, repeat('x', 40) from generate_series(1, 10000) g;
SQL
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('w')" >/dev/null
  q w "update t set v = -1 where id = 5000; delete from t where id = 6000; insert into t values (20001, 7, 'w')" >/dev/null
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('c', 'w')" >/dev/null
  q c "update t set v = -2 where id = 7000" >/dev/null
  local moment; moment=$(psql_in $CL -d $DB -qAt -c "select clock_timestamp()")
  sleep 0.05
  # main after the forks (and after the moment): 1,000 updated, 100 deleted, 10 added
  psql_in $CL -d $DB -qAt -c "update t set v = v + 1000000 where id <= 1000" -c "delete from t where id > 9900" \
    -c "insert into t select g, g, 'm' from generate_series(30001, 30010) g" >/dev/null
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('past', 'main@$moment')" >/dev/null
  local w0 c0 p0 m0 d0
  w0=$(seen w); c0=$(seen c); p0=$(seen past); m0=$(seen main); d0=$(diffs w)
  # a main writer runs through the maintenance (keys 1..50; each update logged, so main's total is known)
  psql_in $CL -d $DB -qAt -c "create table wlog (n int)" >/dev/null
  cat >"$OUT/writer.sql" <<'SQL'
\set k random(1, 50)
begin;
update t set v = v + 1 where id = :k;
insert into wlog values (1);
commit;
SQL
  $PGBIN/pgbench -n -c 2 -T 4 -f "$OUT/writer.sql" -h "$dir/sock" -p "$port" -U postgres $DB >"$OUT/$name.pgbench" 2>&1 &
  local pb=$!
  sleep 1
  eval "$maintenance" >"$OUT/$name.out" 2>&1 || bad "$name failed: $(tail -3 "$OUT/$name.out")"
  wait $pb || bad "$name: main's writer failed: $(tail -3 "$OUT/$name.pgbench")"
  expect "$name: world w reads what it read" "$(seen w)" "$w0"
  expect "$name: world c (of w) reads what it read" "$(seen c)" "$c0"
  expect "$name: world past (main as it was) reads what it read" "$(seen past)" "$p0"
  expect "$name: w's diff" "$(diffs w)" "$d0"
  local writes; writes=$(psql_in $CL -d $DB -qAt -c "select count(*) from wlog")
  expect "$name: main = before + the writer's updates" "$(psql_in $CL -d $DB -qAt -c "select count(*) || ' ' || sum(v) from t")" \
    "$(echo "$m0" | awk -v n="$writes" '{print $1 " " $2 + n}')"
  expect "$name: merge c into w" "$(psql_in $CL -d $DB -qAt -c "select * from worlds.sql('merge world c')")" '{"tag": "MERGE 1"}'
  expect "$name: merge w" "$(psql_in $CL -d $DB -qAt -c "select * from worlds.sql('merge world w')")" '{"tag": "MERGE 4"}'
  expect "$name: main after the merge" "$(psql_in $CL -d $DB -qAt -c "select (select v from t where id = 5000), (select count(*) from t where id = 6000), (select v from t where id = 7000), (select pad from t where id = 20001)")" "-1|0|-2|w"
  expect "$name: the world of the past still reads what it read" "$(seen past)" "$p0"
}

R="$REPACK -h $dir/sock -p $port -U postgres -d $DB"
round pg_repack "$R -t t"
round "vacuum_full" "psql_in $CL -d $DB -qAt -c 'vacuum full t'"
round cluster "psql_in $CL -d $DB -qAt -c 'create index t_v on t (v)' -c 'cluster t using t_v'"
round alter_rewrite "psql_in $CL -d $DB -qAt -c 'alter table t alter column pad type varchar(60)' -c 'alter table t add column z float default random()' -c 'alter table t drop column z'"
round repack_twice "$R -t t && $R -t t"

echo "check: a table without a key is refused a rewrite while a world lives, and nothing changes"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table nk (a int, b text);
insert into nk select g, 'x' from generate_series(1, 100) g;
SQL
psql_in $CL -d $DB -qAt -c "select worlds.create_world('k')" >/dev/null
q k "delete from nk where a = 1" >/dev/null
psql_in $CL -d $DB -qAt -c "delete from nk where a = 2" >/dev/null
err=$(psql_in $CL -d $DB -qAt -v VERBOSITY=verbose -c "vacuum full nk" 2>&1 || true)
expect "vacuum full nk: SQLSTATE" "$(echo "$err" | grep -o 'ERROR:  [0-9A-Z]\{5\}' | head -1 | cut -c9-)" 0A000
case "$err" in *"table "*"nk was rewritten"*"primary key"*) echo "  ok   the error names the table and the fix";; *) bad "the error doesn't name the table and the fix: $err";; esac
expect "k still reads its rows" "$(q k "select count(*) from nk")" 99
expect "main still has its rows" "$(q main "select count(*) from nk")" 99
[ $failures -eq 0 ] || exit 1
echo "14_table_maintenance: ok"
