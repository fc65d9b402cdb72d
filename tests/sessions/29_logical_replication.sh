#!/usr/bin/env bash
# Logical replication and logical decoding of a database with worlds. A publisher (wal_level = logical,
# pg_worlds preloaded) and a subscriber of its own, three publications in turn: FOR ALL TABLES, FOR TABLE
# t1, FOR TABLES IN SCHEMA public. Run 1: a stock subscriber (no pg_worlds); run 2: the subscriber has
# pg_worlds preloaded and created in its databases too. In each, after the subscription's initial copy,
# the publisher creates the extension and a world, writes in the world and in main, merges, forks and
# drops worlds, alters and VACUUM FULLs a tracked table while a world lives, creates a table (then the
# subscriber refreshes its subscription), and a second subscriber database subscribes afresh. Checked:
#   - no statement on the publisher fails because of the publication (merge, fork, drop, world writes,
#     DDL and VACUUM FULL of a tracked table);
#   - the subscriber's published tables read as the publisher's main after each step (main's writes and
#     the merge arrived; a world's writes did not), its unpublished ones stay empty, the subscription
#     lists none of pg_worlds' tables, and no logical replication worker (subscriber) or walsender
#     (publisher) logged an ERROR;
#   - a test_decoding slot (any CDC consumer) read after each step: a world's writes show no change to the
#     user's tables, a merge shows as one transaction of changes to the user's tables, and nothing shows
#     a change to worlds.* or worlds_data.* (pg_worlds' own tables);
#   - run 2: the publisher's worlds don't reach the subscriber's worlds.world, and a world forked on the
#     subscriber keeps reading the rows as at its fork while main's changes are applied under it
#     (S29_SUBSCRIBER_WORLDS=0 leaves this last check out).
# S29_WAIT (30): seconds to wait for the subscriber to catch up; S29_RUNS ("stock preloaded"),
# S29_SCENARIOS ("all table schema") pick a part.
source "$(dirname "$0")/common.sh"
PUB=${CL}_lr_pub; SUB=${CL}_lr_sub
OUT=$RUN_DIR/s29_logical_replication; rm -rf "$OUT"; mkdir -p "$OUT"; chmod 777 "$OUT"
WAIT=${S29_WAIT:-30}
RUNS=${S29_RUNS:-stock preloaded}
SCENARIOS=${S29_SCENARIOS:-all table schema}
SUB_WORLDS=${S29_SUBSCRIBER_WORLDS:-1}
# the backend type in every log line: errors of walsenders and of logical replication workers told apart
LOGCONF="-c log_line_prefix=%b:%p:%m: -c wal_retrieve_retry_interval=1s"
stop_cluster $SUB; stop_cluster $PUB
rm -rf "$(cluster_dir $PUB)" "$(cluster_dir $SUB)"
PORT=56500 EXTRA_CONF="-c wal_level=logical -c max_wal_senders=20 -c max_replication_slots=20 $LOGCONF" start_cluster $PUB yes
PLOG=$(cluster_dir $PUB)/server.log; SLOG=$(cluster_dir $SUB)/server.log
PUBCONN="host=$(cluster_dir $PUB)/sock port=$(cat "$(cluster_dir $PUB)/port") user=postgres"

# P / S SQL...: on the publisher's / subscriber's database $DB, output and errors
P() { psql_in $PUB -d "$DB" -qAt -v ON_ERROR_STOP=1 "$@" 2>&1 || true; }
S() { psql_in $SUB -d "${SDB:-$DB}" -qAt -v ON_ERROR_STOP=1 "$@" 2>&1 || true; }
# step WHERE WHAT SQL...: statements (-c ... or a here-document) that must run without an error
step() {
  local where=$1 what=$2 out err; shift 2
  if [ "$where" = publisher ]; then out=$(P "$@"); else out=$(S "$@"); fi
  printf '== %s: %s\n%s\n' "$where" "$what" "$out" >>"$OUT/$TAG.statements.log"
  err=$(echo "$out" | grep -m1 -E "ERROR:|FATAL:|server closed" || true)
  if [ -z "$err" ]; then echo "  ok   $where: $what"; else bad "$where: $what: $err"; fi
}
# dig CLUSTER DB TABLE: the table's rows as count:md5 (in main)
dig() { { psql_in $1 -d $2 -qAt -c "select count(*) || ':' || coalesce(md5(string_agg(x::text, '|' order by x::text)), '-') from $3 x" 2>&1 || true; } | head -1; }
# same WHEN [SUBSCRIBER_DB]: every published table reads on the subscriber as the publisher's main, every
# other one is empty there
same() {
  local t sdb=${2:-$DB}
  for t in $ALL_TABLES; do
    [ "$t" = t3 ] && [ "$HAVE_T3" != yes ] && continue
    if [[ " $PUBLISHED " == *" $t "* ]]; then
      expect "$1: $t on the subscriber ($sdb) = the publisher's" "$(dig $SUB $sdb $t)" "$(dig $PUB $DB $t)"
    else
      expect "$1: $t (not published) on the subscriber ($sdb)" "$(dig $SUB $sdb $t)" "0:-"
    fi
  done
  return 0
}
# worker_errors: ERROR lines of logical replication workers in the subscriber's log since the scenario began
worker_errors() { tail -c +"$SLOG_FROM" "$SLOG" | grep -E "^logical replication (worker|launcher).*ERROR:" || true; }
walsender_errors() { tail -c +"$PLOG_FROM" "$PLOG" | grep -E "^walsender.*ERROR:" || true; }
# caught_up SUBSCRIPTION: true once the subscription applied what the publisher wrote until now; false at
# once when a worker logs an error (it retries the same transaction, in vain), or after $WAIT seconds
caught_up() {
  local lsn t0=$SECONDS
  lsn=$(psql_in $PUB -qAt -c "select pg_current_wal_lsn()")
  while [ $((SECONDS - t0)) -lt "$WAIT" ]; do
    [ "$(psql_in $PUB -qAt -c "select coalesce(bool_and(replay_lsn >= '$lsn'), false) from pg_stat_replication where application_name = '$1'")" = t ] && return 0
    [ -n "$(worker_errors)" ] && return 1
    sleep 0.3
  done
  return 1
}
# synced SUBSCRIPTION [SUBSCRIBER_DB]: its tables copied (all ready) and caught up
synced() {
  local t0=$SECONDS sdb=${2:-$DB}
  while [ $((SECONDS - t0)) -lt "$WAIT" ]; do
    [ "$(psql_in $SUB -d $sdb -qAt -c "select count(*) from pg_subscription_rel r join pg_subscription s on s.oid = r.srsubid where s.subname = '$1' and r.srsubstate <> 'r'" 2>&1)" = 0 ] && break
    [ -n "$(worker_errors)" ] && return 1
    sleep 0.3
  done
  caught_up "$1"
}
yes_no() { if "$@"; then echo yes; else echo no; fi; }
# decode SEGMENT: the test_decoding slot's changes since its last read, in $OUT/$TAG.SEGMENT.decoded
decode() {
  local f="$OUT/$TAG.$1.decoded"
  psql_in $PUB -d $DB -qAt -v ON_ERROR_STOP=1 -c "select data from pg_logical_slot_get_changes('s29_decode', null, null, 'include-xids', '0', 'skip-empty-xacts', '1')" >"$f" 2>&1
  if grep -q "ERROR:" "$f"; then bad "reading the test_decoding slot ($1): $(grep -m1 ERROR: "$f")"; fi
  echo "$f"
}
count() { grep -cE "$1" "$2" || true; }
internal_changes() { count '^table (worlds|worlds_data)\.' "$1"; }
user_changes() { count '^table (public|other)\.' "$1"; }
# user_xacts FILE: the transactions that changed the user's tables
user_xacts() { awk '/^BEGIN/ {u = 0} /^table (public|other)\./ {u = 1} /^COMMIT/ {if (u) n++} END {print n + 0}' "$1"; }
# no_internal SEGMENT FILE: a CDC consumer sees nothing of pg_worlds' own tables
no_internal() {
  local n; n=$(internal_changes "$2")
  expect "test_decoding, $1: changes to worlds.* / worlds_data.* tables" "$n" 0
  if [ "$n" != 0 ]; then
    grep -E '^table (worlds|worlds_data)\.' "$2" | sed -E 's/^(table [^:]*: [A-Z]+).*/\1/' | sort | uniq -c | sort -rn | head -6 | sed 's/^/    | /'
  fi
  return 0
}
# show_errors LINES: the distinct error messages, most frequent first
show_errors() { echo "$1" | grep -o 'ERROR:.*' | sort | uniq -c | sort -rn | head -5 | sed 's/^/    | /'; }

USER_TABLES_SQL="
create schema other;
create table t1 (id int primary key, v text not null, note text);
create table t2 (a int, b text);
alter table t2 replica identity full;   -- keyless: replica identity full, so main's deletes run with a publication
create table other.o1 (id int primary key, x text);"
ALL_TABLES="t1 t2 other.o1 t3"

scenario() { # scenario RUN KIND
  local run=$1 kind=$2 pubdef
  DB=s29_$kind; TAG=${run}_$kind; SUBNAME=s29_${kind}_$run; HAVE_T3=no
  case $kind in
    all) pubdef="for all tables"; PUBLISHED="t1 t2 other.o1 t3";;
    table) pubdef="for table t1"; PUBLISHED="t1";;
    schema) pubdef="for tables in schema public"; PUBLISHED="t1 t2 t3";;
  esac
  echo "== run $run, publication $pubdef"
  SLOG_FROM=$(($(stat -c %s "$SLOG") + 1)); PLOG_FROM=$(($(stat -c %s "$PLOG") + 1))
  psql_in $PUB -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
  psql_in $SUB -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB" \
    -c "drop database if exists ${DB}_late" -c "create database ${DB}_late"
  P -q <<SQL >/dev/null
$USER_TABLES_SQL
insert into t1 select g, 'v' || g, 'n' from generate_series(1, 10) g;
insert into t2 select g, 'b' || g from generate_series(1, 5) g;
insert into other.o1 select g, 'x' || g from generate_series(1, 3) g;
create publication s29_pub $pubdef;
SQL
  S -q -c "$USER_TABLES_SQL" >/dev/null
  if [ "$run" = preloaded ]; then step subscriber "CREATE EXTENSION pg_worlds" -c "create extension pg_worlds"; fi
  step subscriber "CREATE SUBSCRIPTION $SUBNAME" -c "create subscription $SUBNAME connection '$PUBCONN dbname=$DB' publication s29_pub"
  expect "initial copy done" "$(yes_no synced $SUBNAME)" yes
  same "initial copy"
  P -c "select 'slot ' || slot_name from pg_create_logical_replication_slot('s29_decode', 'test_decoding')" >/dev/null
  local f
  if [ "$run" = preloaded ] && [ "$SUB_WORLDS" = 1 ]; then
    step subscriber "CREATE WORLD sw on the subscriber" -c "select * from worlds.sql('create world sw')"
  fi

  echo "-- the extension and a world"
  step publisher "CREATE EXTENSION pg_worlds" -c "create extension pg_worlds"
  step publisher "CREATE WORLD w" -c "select * from worlds.sql('create world w')"
  f=$(decode install)
  no_internal "CREATE EXTENSION, CREATE WORLD" "$f"

  echo "-- writes in world w"
  step publisher "writes in world w" -c "set worlds.world = w" -c "update t1 set v = 'w' where id in (1, 2)" \
    -c "delete from t1 where id = 3" -c "insert into t1 values (11, 'w11', 'n')" -c "update t2 set b = 'wb' where a = 1" \
    -c "insert into t2 values (6, 'w6')" -c "insert into other.o1 values (10, 'w10')" \
    -c "insert into t1 values (13, (select string_agg(md5(g::text), '') from generate_series(1, 400) g), 'wide')"
  f=$(decode world_writes)
  expect "test_decoding, world w's writes: changes to the user's tables" "$(user_changes "$f")" 0
  no_internal "world w's writes" "$f"
  expect "caught up after world w's writes" "$(yes_no caught_up $SUBNAME)" yes
  same "after world w's writes (none of them on the subscriber)"

  echo "-- writes in main"
  step publisher "writes in main" -c "update t1 set v = 'm' where id = 5" -c "insert into t1 values (12, 'm12', 'n')" \
    -c "delete from t2 where a = 5" -c "insert into other.o1 values (4, 'x4')"
  f=$(decode main_writes)
  expect "test_decoding, main's writes: changes to the user's tables" "$(user_changes "$f")" 4
  no_internal "main's writes" "$f"
  expect "caught up after main's writes" "$(yes_no caught_up $SUBNAME)" yes
  same "after main's writes"
  if [ "$run" = preloaded ] && [ "$SUB_WORLDS" = 1 ]; then
    expect "subscriber: world sw reads t1 as at its fork (main's replicated update under it)" \
      "$(S -c "set worlds.world = sw" -c "select string_agg(id || ':' || v, ',' order by id) from t1 where id in (5, 12)")" "5:v5"
  fi

  echo "-- merge"
  step publisher "MERGE WORLD w" -c "select * from worlds.sql('merge world w')"
  expect "the merge landed in main (publisher)" "$(P -c "select string_agg(id || ':' || left(v, 5), ',' order by id) from t1 where id in (1, 2, 3, 11, 13)")" "1:w,2:w,11:w11,13:c4ca4"
  f=$(decode merge)
  expect "test_decoding, the merge: transactions changing the user's tables" "$(user_xacts "$f")" 1
  expect "test_decoding, the merge: changes to t1" "$(count '^table public\.t1: ' "$f")" 5
  expect "test_decoding, the merge: changes to other.o1" "$(count '^table other\.o1: ' "$f")" 1
  no_internal "the merge" "$f"
  expect "caught up after the merge" "$(yes_no caught_up $SUBNAME)" yes
  same "after the merge"

  echo "-- fork and drop"
  step publisher "CREATE WORLD w2, FORK WORLD w2 AS w3, a write in w3" -c "select * from worlds.sql('create world w2')" \
    -c "select * from worlds.sql('fork world w2 as w3')" -c "set worlds.world = w3" -c "update t1 set v = 'w3' where id = 4"
  step publisher "DROP WORLD w3" -c "select * from worlds.sql('drop world w3')"
  step publisher "DROP WORLD w2" -c "select * from worlds.sql('drop world w2')"
  f=$(decode fork_drop)
  expect "test_decoding, fork and drop: changes to the user's tables" "$(user_changes "$f")" 0
  no_internal "fork and drop" "$f"

  echo "-- DDL and VACUUM FULL of a tracked table while a world lives, then its merge"
  step publisher "CREATE WORLD w4 and a write in it" -c "select * from worlds.sql('create world w4')" \
    -c "set worlds.world = w4" -c "update t1 set v = 'w4' where id = 6" -c "insert into t2 values (7, 'w7')"
  # (a rewrite of pg_worlds' own table gives it a new TOAST table; a wide row of a world's goes there)
  step publisher "VACUUM FULL of t1's delta, a wide row in w4" -c "select format('vacuum full %s', delta) from worlds.tables where relid = 't1'::regclass" -c '\gexec' \
    -c "set worlds.world = w4" -c "update t1 set v = (select string_agg(md5((g + 1)::text), '') from generate_series(1, 400) g) where id = 8"
  step publisher "ALTER TABLE t1 DROP COLUMN note" -c "alter table t1 drop column note"
  step subscriber "ALTER TABLE t1 DROP COLUMN note" -c "alter table t1 drop column note"
  step publisher "main's write to t1, VACUUM FULL t1" -c "update t1 set v = 'm7' where id = 7" -c "vacuum full t1"
  f=$(decode ddl)
  expect "test_decoding, DROP COLUMN, main's write, VACUUM FULL: changes to the user's tables" "$(user_changes "$f")" 1
  no_internal "DROP COLUMN, main's write, VACUUM FULL" "$f"
  step publisher "MERGE WORLD w4" -c "select * from worlds.sql('merge world w4')"
  f=$(decode merge_w4)
  expect "test_decoding, the merge of w4: transactions changing the user's tables" "$(user_xacts "$f")" 1
  no_internal "the merge of w4" "$f"
  expect "caught up after the merge of w4" "$(yes_no caught_up $SUBNAME)" yes
  same "after the merge of w4"

  echo "-- a new table, the subscription refreshed"
  S -c "create table t3 (id int primary key, y text)" >/dev/null
  step publisher "CREATE TABLE t3, rows in main" -c "create table t3 (id int primary key, y text)" \
    -c "insert into t3 select g, 'y' || g from generate_series(1, 3) g"
  HAVE_T3=yes
  step subscriber "ALTER SUBSCRIPTION $SUBNAME REFRESH PUBLICATION" -c "alter subscription $SUBNAME refresh publication"
  expect "synced after REFRESH PUBLICATION" "$(yes_no synced $SUBNAME)" yes
  same "after the new table"
  f=$(decode new_table)
  expect "test_decoding, CREATE TABLE t3 and its rows: changes to the user's tables" "$(user_changes "$f")" 3
  no_internal "CREATE TABLE t3 and its rows" "$f"
  expect "pg_worlds' tables in the subscription" \
    "$(S -c "select count(*) from pg_subscription_rel r join pg_class c on c.oid = r.srrelid where c.relnamespace::regnamespace::text in ('worlds', 'worlds_data')")" 0

  echo "-- a subscription made after pg_worlds is in the publisher's database"
  SDB=${DB}_late S -q -c "$USER_TABLES_SQL" -c "alter table t1 drop column note" -c "create table t3 (id int primary key, y text)" >/dev/null
  if [ "$run" = preloaded ]; then SDB=${DB}_late step subscriber "CREATE EXTENSION pg_worlds (${DB}_late)" -c "create extension pg_worlds"; fi
  SDB=${DB}_late step subscriber "CREATE SUBSCRIPTION ${SUBNAME}_late" \
    -c "create subscription ${SUBNAME}_late connection '$PUBCONN dbname=$DB' publication s29_pub"
  expect "the late subscription's initial copy done" "$(yes_no synced ${SUBNAME}_late ${DB}_late)" yes
  same "late subscription" ${DB}_late
  expect "pg_worlds' tables in the late subscription" \
    "$(SDB=${DB}_late S -c "select count(*) from pg_subscription_rel r join pg_class c on c.oid = r.srrelid where c.relnamespace::regnamespace::text in ('worlds', 'worlds_data')")" 0

  if [ "$run" = preloaded ]; then
    expect "subscriber: the publisher's worlds in its worlds.world" \
      "$(S -c "select count(*) from worlds.world where name in ('w', 'w2', 'w3', 'w4')")" 0
  fi

  echo "-- logs"
  local errs
  errs=$(worker_errors); expect "ERRORs of logical replication workers in the subscriber's log" "$(echo -n "$errs" | grep -c . || true)" 0
  [ -z "$errs" ] || show_errors "$errs"
  errs=$(walsender_errors); expect "ERRORs of walsenders in the publisher's log" "$(echo -n "$errs" | grep -c . || true)" 0
  [ -z "$errs" ] || show_errors "$errs"

  # cleanup: the subscriptions (and their slots on the publisher), the decoding slot
  SDB=${DB}_late S -q -c "drop subscription if exists ${SUBNAME}_late" >/dev/null || true
  S -q -c "drop subscription if exists $SUBNAME" >/dev/null || true
  P -q -c "select pg_drop_replication_slot('s29_decode')" >/dev/null || true
  unset SDB
  return 0
}

for run in $RUNS; do
  stop_cluster $SUB
  if [ "$run" = stock ]; then preload=no; else preload=yes; fi
  PORT=56510 EXTRA_CONF="-c max_logical_replication_workers=8 -c max_worker_processes=16 $LOGCONF" start_cluster $SUB $preload
  for kind in $SCENARIOS; do scenario "$run" "$kind"; done
done

stop_cluster $SUB; stop_cluster $PUB
if [ $failures -ne 0 ]; then echo "29_logical_replication: $failures check(s) failed (statements, decoded changes and logs in $OUT)" >&2; exit 1; fi
rm -rf "$(cluster_dir $PUB)" "$(cluster_dir $SUB)"
echo "ok: 29_logical_replication"
