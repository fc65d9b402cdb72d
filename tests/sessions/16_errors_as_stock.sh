#!/usr/bin/env bash
# Main's errors are byte-identical to stock PostgreSQL's, fields and all (SQLSTATE, DETAIL, HINT,
# CONTEXT, LOCATION, schema/table/constraint names), also when the server runs with RUST_BACKTRACE=1:
# the same statements run on a cluster without pg_worlds and on one with it preloaded, created in the
# database, a world alive, and RUST_BACKTRACE=1 / RUST_LIB_BACKTRACE=1 in the server's environment.
source "$(dirname "$0")/common.sh"
BT=${CL}_backtrace
stop_cluster $BT
RUST_BACKTRACE=1 RUST_LIB_BACKTRACE=1 KEEP_RUST_BACKTRACE=1 start_cluster $BT yes
start_cluster $NP no
# (both stopped however the script ends: a run left the nopreload cluster running after the suite)
trap 'stop_cluster $BT; stop_cluster $NP' EXIT
OUT=$RUN_DIR/s16_errors; rm -rf "$OUT"; mkdir -p "$OUT"
cat >"$OUT/errors.sql" <<'SQL'
\set VERBOSITY verbose
\set SHOW_CONTEXT always
create table t (id int primary key, n int not null check (n >= 0), u text unique);
create table child (id int references t (id));
insert into t values (1, 1, 'a');
select 2147483647::int + 1;
insert into t values (1, 2, 'b');
insert into t values (2, 2, 'a');
insert into t values (3, null, 'c');
insert into t values (4, -1, 'd');
insert into child values (99);
update t set n = 'x';
select * from nosuch;
select nosuch from t;
create table t (i int);
drop table nosuch;
drop type nosuch;
select 1 / 0;
do $$ begin raise exception 'boom' using detail = 'd', hint = 'h'; end $$;
do $$ begin perform 1 / 0; end $$;
create function f() returns int language sql as 'select 1 / 0'; select f();
begin; select 1 / 0; select 1; rollback;
alter table t add column n int;
copy t from stdin;
1	1	z
\.
SQL
run() { # run CLUSTER: the file's output, as psql prints it
  psql_in "$1" -q -v ON_ERROR_STOP=0 -c "set client_min_messages = warning" -c "drop database if exists s16" -c "create database s16" >/dev/null
  if [ "$1" = "$BT" ]; then
    psql_in "$1" -d s16 -q -c "create extension pg_worlds" -c "select * from worlds.sql('create world side')" >/dev/null
  fi
  psql_in "$1" -d s16 -v ON_ERROR_STOP=0 -f "$OUT/errors.sql" 2>&1 | sed 's/^psql:[^:]*:\([0-9]*\):/psql:\1:/'
}
echo "check: the same errors, byte for byte, on stock and with pg_worlds under RUST_BACKTRACE=1"
run $NP >"$OUT/stock.out"
run $BT >"$OUT/worlds.out"
if diff -u "$OUT/stock.out" "$OUT/worlds.out" >"$OUT/diff"; then
  echo "  ok   $(grep -c 'ERROR' "$OUT/stock.out") errors identical"
else
  sed 's/^/    | /' "$OUT/diff" | head -40; bad "errors differ from stock (diff: $OUT/diff)"
fi
expect "errors seen" "$(grep -c "^psql:[0-9]*: ERROR" "$OUT/stock.out")" 20
expect "backtraces in the output" "$(grep -ci 'backtrace\|rust_begin_unwind\|panicked' "$OUT/worlds.out")" 0
stop_cluster $BT
if [ $failures -ne 0 ]; then echo "16_errors_as_stock: $failures check(s) failed" >&2; exit 1; fi
echo "ok: 16_errors_as_stock"
