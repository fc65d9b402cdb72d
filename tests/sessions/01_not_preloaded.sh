#!/usr/bin/env bash
# CREATE EXTENSION pg_worlds on a cluster that does not preload the library must fail cleanly:
# SQLSTATE 55000, a message naming shared_preload_libraries, and a HINT naming it too.
source "$(dirname "$0")/common.sh"

start_cluster $NP no
trap 'stop_cluster $NP' EXIT

DB=s01_nopreload
psql_in $NP -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"

echo "check: shared_preload_libraries is empty on the nopreload cluster"
spl=$(psql_in $NP -d $DB -Atc "show shared_preload_libraries")
[ -z "$spl" ] || fail "nopreload cluster preloads '$spl'"

echo "check: CREATE EXTENSION pg_worlds fails with 55000 and a HINT naming shared_preload_libraries"
set +e
out=$(psql_in $NP -d $DB -v VERBOSITY=verbose -c "create extension pg_worlds" 2>&1)
rc=$?
set -e
echo "$out" | sed 's/^/    | /'
[ $rc -ne 0 ] || fail "CREATE EXTENSION pg_worlds succeeded without shared_preload_libraries"
grep -q "^ERROR:  55000: .*shared_preload_libraries" <<<"$out" \
  || bad "expected 'ERROR:  55000: ...shared_preload_libraries...', got: $out"
grep -q "^ERROR:  55000: pg_worlds must be loaded via shared_preload_libraries" <<<"$out" \
  || bad "expected message 'pg_worlds must be loaded via shared_preload_libraries', got: $out"
grep -q "^HINT:  .*shared_preload_libraries" <<<"$out" \
  || bad "expected a HINT line naming shared_preload_libraries, got: $out"

echo "check: the failed CREATE EXTENSION left nothing behind (no extension, no schemas worlds/worlds_data)"
n=$(psql_in $NP -d $DB -Atc "select count(*) from pg_extension where extname = 'pg_worlds'")
[ "$n" = 0 ] || bad "pg_extension has pg_worlds after a failed CREATE EXTENSION"
n=$(psql_in $NP -d $DB -Atc "select count(*) from pg_namespace where nspname in ('worlds', 'worlds_data')")
[ "$n" = 0 ] || bad "schemas worlds/worlds_data exist after a failed CREATE EXTENSION ($n)"

echo "check: the database keeps working after the failure"
v=$(psql_in $NP -d $DB -qAt -c "create table t(id int primary key)" -c "insert into t values (1), (2)" -c "select sum(id) from t")
[ "$v" = 3 ] || fail "ordinary statements after the failed CREATE EXTENSION: expected 3, got '$v'"

psql_in $NP -q -c "drop database $DB"
[ $failures -eq 0 ] || { echo "01_not_preloaded: $failures check(s) failed" >&2; exit 1; }
echo "ok: 01_not_preloaded"
