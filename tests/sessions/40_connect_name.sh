#!/usr/bin/env bash
# The database name chooses the world, for clients that connect straight to Postgres (issue 47,
# src/route/connect_name.rs): dbname=app/w1 is database app in world w1, as options='-c worlds.world=w1'
# is; dbname='app/main@<when>' reads main as it was (writes 25006); a world that doesn't exist fails the
# connection with 3D000 as an unknown database does; pg_hba.conf's line for app is never bypassed (28000);
# a real database named with a '/' is itself. On a cluster of its own, with a pg_hba.conf of its own.
source "$(dirname "$0")/common.sh"

HB=${CL}_connname
stop_cluster $HB
# (errors in the server log with their SQLSTATE: a connection's FATAL reaches psql without it)
EXTRA_CONF="-c log_error_verbosity=verbose -c log_connections=on -c password_encryption=scram-sha-256" start_cluster $HB yes
dir=$(cluster_dir $HB); port=$(cat "$dir/port"); LOG=$dir/server.log
LOG0=$(stat -c %s "$LOG")
this_run_log() { tail -c +$((LOG0 + 1)) "$LOG"; }
q() { psql_in $HB "$@"; }
q -q -c "set client_min_messages = warning" -c "drop database if exists app" -c "drop database if exists \"app/real\"" \
  -c "drop database if exists plain" -c "create database app" -c "create database \"app/real\"" -c "create database plain"
q -d app -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v text not null);
insert into t values (1, 'one'), (2, 'two');
select worlds.create_world('w1');
select worlds.create_world('w2');
select worlds.create_world('real');
select worlds.create_world('gone');
select worlds.drop_world('gone');
SQL
q -q >/dev/null <<'SQL'
set client_min_messages = warning;
do $$ declare r text; begin
  foreach r in array array['alice', 'bob', 'carol', 'dave', 'erin'] loop
    if not exists (select 1 from pg_roles where rolname = r) then execute format('create role %I login', r); end if;
  end loop;
end $$;
alter role bob password 'bobpw';
SQL
q -d app -q -c "grant all on t to public"

SOCK="host=$dir/sock port=$port user=postgres"
ROWS="select string_agg(id || ':' || v, ',' order by id) from t"
# conn CONNINFO SQL...: psql on the conninfo, one -c per argument
conn() { local c=$1 a=(); shift; for s in "$@"; do a+=(-c "$s"); done; $PGBIN/psql "$c" -X -qAt -v ON_ERROR_STOP=1 "${a[@]}"; }
main_q() { q -d app -qAt -c "$1"; }
# refused WHAT CONNINFO SQLSTATE MESSAGE: the connection fails, with that SQLSTATE (in the server log) and
# that message (what psql prints)
refused() {
  local what=$1 c=$2 state=$3 msg=$4 size out rc line
  size=$(stat -c %s "$LOG")
  set +e
  out=$($PGBIN/psql "$c" -X -qAt -c "select 'connected to ' || current_database() || ' in ' || current_setting('worlds.world', true)" 2>&1)
  rc=$?
  set -e
  sleep 0.2
  line=$(tail -c +$((size + 1)) "$LOG" | grep -m1 "FATAL:" || true)
  echo "    | $out" | head -3
  if [ $rc -eq 0 ]; then bad "$what: connected: $out"; return; fi
  case "$line" in *"FATAL:  $state:"*) echo "  ok   $what: $state" ;; *) bad "$what: expected SQLSTATE $state, server log: $line" ;; esac
  case "$out" in *"$msg"*) echo "  ok   $what: \"$msg\"" ;; *) bad "$what: expected \"$msg\", got: $out" ;; esac
}

echo "check: dbname=app/w1 opens database app in world w1, as options=-c worlds.world=w1 does"
W1="$SOCK dbname=app/w1"
expect "database, world" "$(conn "$W1" "select current_database() || ' ' || current_setting('worlds.world')")" "app w1"
expect "pg_stat_activity.datname" "$(conn "$W1" "select datname from pg_stat_activity where pid = pg_backend_pid()")" "app"
conn "$W1" "update t set v = 'uno' where id = 1" "insert into t values (3, 'three')"
expect "w1 read by name" "$(conn "$W1" "$ROWS")" "1:uno,2:two,3:three"
expect "w1 read with options" "$(conn "$SOCK dbname=app options='-c worlds.world=w1'" "$ROWS")" "1:uno,2:two,3:three"
expect "main untouched" "$(main_q "$ROWS")" "1:one,2:two"
expect "w2 untouched" "$(conn "$SOCK dbname=app/w2" "$ROWS")" "1:one,2:two"
expect "app/main is main" "$(conn "$SOCK dbname=app/main" "select current_setting('worlds.world')" "$ROWS")" "$(printf 'main\n1:one,2:two')"
w1id=$(main_q "select id from worlds.world where name = 'w1' and dropped is null")
expect "a world's ID chooses it too" "$(conn "$SOCK dbname=app/$w1id" "$ROWS")" "1:uno,2:two,3:three"
expect "URI with %2F" "$($PGBIN/psql "postgresql:///app%2Fw1?host=$dir/sock&port=$port&user=postgres" -X -qAt -c "$ROWS")" "1:uno,2:two,3:three"
expect "the log names both" "$(this_run_log | grep -c 'connection by the name "app/w1": database "app", world "w1"' | awk '$1 > 0 {print "yes"}')" "yes"
expect "the name wins over options" "$(conn "$SOCK dbname=app/w1 options='-c worlds.world=w2'" "show worlds.world")" "w1"
expect "SWITCH WORLD moves the session as ever" "$(conn "$W1" "select worlds.switch_world('w2')" "show worlds.world" "$ROWS" | paste -sd'|')" "SWITCH WORLD|w2|1:one,2:two"

echo "check: dbname='app/main@<when>' reads main as it was, read only"
main_q "create table moments as select clock_timestamp() at time zone 'UTC' as at" >/dev/null
sleep 0.05
main_q "update t set v = 'later' where id = 2" >/dev/null
AT=$(main_q "select to_char(at, 'YYYY-MM-DD HH24:MI:SS.US') from moments")
PAST="$SOCK dbname='app/main@${AT}+00'"
expect "main now" "$(main_q "select v from t where id = 2")" "later"
expect "main as it was" "$(conn "$PAST" "select v from t where id = 2")" "two"
err=$($PGBIN/psql "$PAST" -X -qAt -v VERBOSITY=verbose -c "update t set v = 'x' where id = 2" 2>&1 || true)
case "$err" in *25006*) echo "  ok   write in the past = 25006" ;; *) bad "write in the past: expected 25006, got: $err" ;; esac
expect "'app/main@-1 hour' (a time ago)" "$(conn "$SOCK dbname='app/main@-1 hour'" "show worlds.world")" "main@-1 hour"
expect "a moment of a world" "$(conn "$SOCK dbname='app/w1@now'" "select v from t where id = 1")" "uno"

echo "check: a world that doesn't exist fails the connection with 3D000, as an unknown database does"
refused "no such world" "$SOCK dbname=app/w9" 3D000 'database "app/w9" does not exist'
refused "a dropped world" "$SOCK dbname=app/gone" 3D000 'database "app/gone" does not exist'
refused "a moment of no such world" "$SOCK dbname='app/w9@-1 hour'" 3D000 'database "app/w9@-1 hour" does not exist'
refused "no such database (Postgres's own)" "$SOCK dbname=app2/w1" 3D000 'database "app2/w1" does not exist'
refused "a database without pg_worlds" "$SOCK dbname=plain/w1" 3D000 'database "plain/w1" does not exist'
refused "a moment that isn't a time" "$SOCK dbname='app/main@whenever'" 22P02 '"whenever" is not a time'
refused "a moment before the world existed" "$SOCK dbname='app/w1@-1 day'" 22023 'world "w1" did not exist yet'
long="app/$(printf 'w%.0s' $(seq 1 70))"
refused "a name Postgres cut at 63 bytes" "$SOCK dbname=$long" 42622 'is too long to choose a world'

echo "check: a real database named with a '/' is itself (app has a world 'real' too)"
expect "app/real" "$(conn "$SOCK dbname=app/real" "select current_database() || ' ' || current_setting('worlds.world', true)")" "app/real main"

echo "check: pg_hba.conf's line for app is not bypassed"
cp "$dir/data/pg_hba.conf" "$dir/pg_hba.conf.orig"
cat >"$dir/data/pg_hba.conf" <<'HBA'
local   all          all                    trust
host    app          alice   127.0.0.1/32   reject
host    app          bob     127.0.0.1/32   scram-sha-256
host    app/w1       dave    127.0.0.1/32   trust
host    app,app/w1   erin    127.0.0.1/32   trust
host    all          all     127.0.0.1/32   trust
HBA
q -qAt -c "select pg_reload_conf()" >/dev/null
sleep 0.3
TCP="host=127.0.0.1 port=$port"
refused "alice: app itself (Postgres's reject)" "$TCP user=alice dbname=app" 28000 'pg_hba.conf rejects connection'
refused "alice: app/w1 (app's reject line)" "$TCP user=alice dbname=app/w1" 28000 'pg_hba.conf does not let user "alice" open database "app"'
expect "bob: app with his password (scram)" "$(PGPASSWORD=bobpw conn "$TCP user=bob dbname=app" "select current_user")" "bob"
refused "bob: app/w1 without a password (the trust line for all)" "$TCP user=bob dbname=app/w1" 28000 'pg_hba.conf does not let user "bob" open database "app"'
refused "bob: app/w1 even with his password" "$TCP user=bob password=bobpw dbname=app/w1" 28000 'pg_hba.conf does not let user "bob" open database "app"'
this_run_log | grep -q 'DETAIL:  "app/w1" matched pg_hba.conf line 6, "app" matches line 3' && echo "  ok   the server log names both lines" || bad "the server log doesn't name the lines"
refused "dave: a line naming app/w1 alone is not app's line" "$TCP user=dave dbname=app/w1" 28000 'pg_hba.conf does not let user "dave" open database "app"'
expect "erin: one line for app and app/w1" "$(conn "$TCP user=erin dbname=app/w1" "select current_user || ' ' || current_setting('worlds.world')" "$ROWS" | paste -sd'|')" "erin w1|1:uno,2:two,3:three"
expect "carol: the line for all matches both" "$(conn "$TCP user=carol dbname=app/w1" "select current_database() || ' ' || current_setting('worlds.world')")" "app w1"
echo "check: the checks Postgres makes of a database are made of app"
q -q -c "revoke connect on database app from public"
refused "carol without CONNECT on app" "$TCP user=carol dbname=app/w1" 42501 'permission denied for database "app"'
q -q -c "grant connect on database app to public"
cp "$dir/pg_hba.conf.orig" "$dir/data/pg_hba.conf"
q -qAt -c "select pg_reload_conf()" >/dev/null

echo "check: a world dropped while a session is in it: the session carries on as with options"
for w in d_name d_opts; do main_q "select worlds.create_world('$w')" >/dev/null; done
DROP() { echo "\\! $PGBIN/psql -h $dir/sock -p $port -U postgres -d app -X -qAt -c \"select worlds.drop_world('$1')\""; }
by_name=$(conn "$SOCK dbname=app/d_name" "update t set v = 'd' where id = 1" "$ROWS" "$(DROP d_name)" "$ROWS" "show worlds.world" 2>&1 | paste -sd'|')
by_opts=$(conn "$SOCK dbname=app options='-c worlds.world=d_opts'" "update t set v = 'd' where id = 1" "$ROWS" "$(DROP d_opts)" "$ROWS" "show worlds.world" 2>&1 | paste -sd'|')
echo "    | by name: $by_name"
echo "    | options: $by_opts"
expect "by name = with options" "$by_name" "$by_opts"
expect "the world's write seen, then main's rows" "$by_name" "1:d,2:later|DROP WORLD|1:one,2:later|main"

if [ $failures -ne 0 ]; then echo "40_connect_name: $failures check(s) failed" >&2; exit 1; fi
q -q -c "drop database app" -c "drop database \"app/real\"" -c "drop database plain"
stop_cluster $HB
echo "ok: 40_connect_name"
