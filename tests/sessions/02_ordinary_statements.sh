#!/usr/bin/env bash
# Ordinary statements in main behave exactly as in stock Postgres: tests/sessions/ordinary.sql is run
# (a) on a cluster without pg_worlds and (b) in a database with CREATE EXTENSION pg_worlds on the preloaded
# cluster; the two outputs (results, notices, errors) must be byte-identical.
source "$(dirname "$0")/common.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
SQL=$HERE/ordinary.sql

start_cluster $CL yes
start_cluster $NP no
trap 'stop_cluster $NP' EXIT

DB=s02_ordinary   # the same name on both clusters, so nothing in the output differs by name
OUT=$RUN_DIR/s02_ordinary; mkdir -p "$OUT"

fresh_db() { # fresh_db CLUSTER [with-extension]
  psql_in "$1" -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
  if [ "${2:-}" = ext ]; then psql_in "$1" -d $DB -q -c "create extension pg_worlds"; fi
}
run_file() { # run_file CLUSTER OUTFILE: echo every statement, results and errors into one file
  psql_in "$1" -d $DB -q -a -f "$SQL" >"$2" 2>&1
}

echo "check: ordinary.sql runs to the end on the cluster without pg_worlds"
fresh_db $NP
run_file $NP "$OUT/stock.out" || { tail -20 "$OUT/stock.out"; fail "ordinary.sql itself stops on stock Postgres"; }
lines=$(wc -l <"$OUT/stock.out")
[ "$lines" -gt 300 ] || fail "stock output has only $lines lines"
grep -q "duplicate key value violates unique constraint" "$OUT/stock.out" || fail "expected errors missing from stock output"

echo "check: ordinary.sql runs to the end in a database with pg_worlds"
fresh_db $CL ext
[ "$(psql_in $CL -d $DB -Atc "select extversion is not null from pg_extension where extname = 'pg_worlds'")" = t ] \
  || fail "pg_worlds is not created in $DB"
worlds_rc=0
run_file $CL "$OUT/worlds.out" || worlds_rc=$?

echo "check: outputs are byte-identical ($lines lines)"
if ! diff -u "$OUT/stock.out" "$OUT/worlds.out" >"$OUT/diff"; then
  echo "first lines that differ:"; grep '^[-+][^-+]' "$OUT/diff" | head -8 || true
  echo "errors and warnings only with pg_worlds:"
  grep -E 'ERROR:|WARNING:' "$OUT/worlds.out" | sed 's/^psql:[^:]*:[0-9]*: //' | sort >"$OUT/e_worlds" || true
  grep -E 'ERROR:|WARNING:' "$OUT/stock.out" | sed 's/^psql:[^:]*:[0-9]*: //' | sort >"$OUT/e_stock" || true
  comm -23 "$OUT/e_worlds" "$OUT/e_stock" | sed 's/^/    /'
  fail "ordinary.sql output differs with pg_worlds (psql exit $worlds_rc; full diff: $OUT/diff)"
fi
[ $worlds_rc -eq 0 ] || fail "psql exited $worlds_rc with pg_worlds though the output matched"

echo "check: the extension tracked the tables created by the file (so the hooks really were in play)"
n=$(psql_in $CL -d $DB -Atc "select count(*) from worlds.tables")
[ "$n" -ge 5 ] || fail "expected worlds.tables to list the file's tables, got $n rows"

psql_in $CL -q -c "drop database $DB"
psql_in $NP -q -c "drop database $DB"
echo "ok: 02_ordinary_statements"
