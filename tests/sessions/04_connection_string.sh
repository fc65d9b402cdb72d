#!/usr/bin/env bash
# A session can start in a world from its connection string (libpq options='-c worlds.world=w1', and the
# PGOPTIONS environment variable), reads and writes that world, and leaves main alone. A prepared
# statement re-routes when the session switches world (SWITCH WORLD via worlds.switch_world, or SET).
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s04_connstr
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v text not null);
insert into t values (1, 'one'), (2, 'two'), (3, 'three');
select worlds.create_world('w1');
SQL

CONN=$(conninfo $CL $DB)
W1="$CONN options='-c worlds.world=w1'"
# inworld SQL...: psql on the conninfo with options='-c worlds.world=w1', one -c per argument
inworld() { local a=(); for s in "$@"; do a+=(-c "$s"); done; $PGBIN/psql "$W1" -X -qAt -v ON_ERROR_STOP=1 "${a[@]}"; }
main_q() { psql_in $CL -d $DB -qAt -c "$1"; }
ROWS="select string_agg(id || ':' || v, ',' order by id) from t"

echo "check: options='-c worlds.world=w1' inside the conninfo string starts the session in w1"
echo "  conninfo: $W1"
expect "SHOW worlds.world" "$(inworld "show worlds.world")" w1
expect "current_setting" "$(inworld "select current_setting('worlds.world')")" w1

echo "check: that session writes w1 and reads its own writes; main does not see them"
inworld "update t set v = 'uno' where id = 1" "insert into t values (4, 'four')" "delete from t where id = 3"
expect "w1 rows (from the connection-string session)" "$(inworld "$ROWS")" "1:uno,2:two,4:four"
expect "main rows" "$(main_q "$ROWS")" "1:one,2:two,3:three"
expect "w1 rows (via SET worlds.world)" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w1" -c "$ROWS")" "1:uno,2:two,4:four"

echo "check: a URI connection string with options=-c%20worlds.world%3Dw1 works too"
dir=$(cluster_dir $CL)
URI="postgresql:///$DB?host=$dir/sock&port=$(cat "$dir/port")&user=postgres&options=-c%20worlds.world%3Dw1"
expect "URI: SHOW worlds.world" "$($PGBIN/psql "$URI" -X -qAt -c "show worlds.world")" w1
expect "URI: rows" "$($PGBIN/psql "$URI" -X -qAt -c "$ROWS")" "1:uno,2:two,4:four"

echo "check: PGOPTIONS='-c worlds.world=w1' works the same way"
expect "PGOPTIONS: SHOW worlds.world" "$(PGOPTIONS='-c worlds.world=w1' psql_in $CL -d $DB -qAt -c "show worlds.world")" w1
expect "PGOPTIONS: rows" "$(PGOPTIONS='-c worlds.world=w1' psql_in $CL -d $DB -qAt -c "$ROWS")" "1:uno,2:two,4:four"

echo "check: a connection string naming a world that does not exist fails with 3D000"
set +e
out=$($PGBIN/psql "$CONN options='-c worlds.world=nosuchworld'" -X -qAt -v VERBOSITY=verbose -c "select count(*) from t" 2>&1)
rc=$?
set -e
echo "$out" | sed 's/^/    | /'
[ $rc -ne 0 ] || bad "reading t in a world that does not exist succeeded: $out"
grep -q "3D000" <<<"$out" || bad "expected SQLSTATE 3D000 for an unknown world, got: $out"

echo "check: a prepared statement re-routes when the session switches world"
out=$($PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 <<'SQL'
prepare q as select string_agg(id || ':' || v, ',' order by id) from t;
prepare one(int) as select v from t where id = $1;
prepare has(int) as select count(*) from t where id = $1;
execute q;
execute one(1);
execute q;
select worlds.switch_world('w1');
execute q;
execute one(1);
execute has(3);
set worlds.world = main;
execute q;
execute one(1);
set worlds.world = w1;
execute q;
prepare ins(int, text) as insert into t values ($1, $2);
execute ins(5, 'five');
execute q;
select worlds.switch_world('main');
execute q;
execute ins(6, 'six');
execute q;
SQL
)
got=$(echo "$out" | paste -sd'|')
expect "EXECUTE across switches" "$got" \
  "1:one,2:two,3:three|one|1:one,2:two,3:three|SWITCH WORLD|1:uno,2:two,4:four|uno|0|1:one,2:two,3:three|one|1:uno,2:two,4:four|1:uno,2:two,4:four,5:five|SWITCH WORLD|1:one,2:two,3:three|1:one,2:two,3:three,6:six"
expect "w1 after the prepared insert" "$(inworld "$ROWS")" "1:uno,2:two,4:four,5:five"
expect "main after the prepared insert" "$(main_q "$ROWS")" "1:one,2:two,3:three,6:six"

echo "check: a plpgsql function's cached plan re-routes too"
psql_in $CL -d $DB -q -c "create function rows_of_t() returns text language plpgsql as \$\$ begin return (select string_agg(id || ':' || v, ',' order by id) from t); end \$\$"
out=$($PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -c "select rows_of_t()" -c "set worlds.world = w1" -c "select rows_of_t()" -c "set worlds.world = main" -c "select rows_of_t()")
expect "plpgsql main|w1|main" "$(echo "$out" | paste -sd'|')" \
  "1:one,2:two,3:three,6:six|1:uno,2:two,4:four,5:five|1:one,2:two,3:three,6:six"

echo "check: a session can start in main as it was (options='-c worlds.world=main@<when>'): it reads, it can't write"
psql_in $CL -d $DB -q -c "create table moments as select clock_timestamp() at time zone 'UTC' as at" -c "select pg_sleep(0.05)" -c "update t set v = 'later' where id = 2"
AT=$(psql_in $CL -d $DB -Atc "select to_char(at, 'YYYY-MM-DD\\\\ HH24:MI:SS.US') from moments")
# a space inside an option value is escaped for the server (\ in a conninfo string)
PAST="$CONN options='-c worlds.world=main@${AT}+00'"
expect "main now" "$(main_q "select v from t where id = 2")" "later"
expect "main as it was" "$($PGBIN/psql "$PAST" -X -qAt -c "select v from t where id = 2")" "two"
err=$($PGBIN/psql "$PAST" -X -qAt -v VERBOSITY=verbose -c "update t set v = 'x' where id = 2" 2>&1 || true)
case "$err" in *25006*) echo "  ok   write in the past = 25006" ;; *) bad "write in the past: expected 25006, got: $err" ;; esac

echo "check: that session reads the tables with the columns they had then, from its first statement on"
psql_in $CL -d $DB -q -c "alter table t add column extra int default 1" -c "alter table t rename column v to val"
expect "main's columns now" "$(main_q "select * from t where id = 2")" "2|later|1"
expect "first statement: *, as it was" "$($PGBIN/psql "$PAST" -X -qAt -c "select * from t where id = 2" -c "select v from t where id = 2" | paste -sd'|')" "2|two|two"

if [ $failures -ne 0 ]; then echo "04_connection_string: $failures check(s) failed" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 04_connection_string"
