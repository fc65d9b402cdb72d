#!/usr/bin/env bash
# Expiry and purge by themselves (time/expiry.rs): with no statement run, the expiry worker discards a
# world whose 2-second TTL passed, a world idle past worlds.world_idle_ttl (2 s here) and an agent's world
# past its world_ttl, while a pinned idle world stays; the server log and worlds.event say so. It purges
# history older than a short history_retention in two databases, no list of databases set. It leaves a
# DROP DATABASE alone (a database dropped while the worker purges it goes at once, and no "does not exist"
# in the log). A world written in a transaction while its TTL passes survives to its commit, which
# succeeds, and goes at the next round; a session writing statement after statement while its world
# expires gets no error but the documented ones.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s39_expiry
DB2=s39_expiry_b
OUT=$RUN_DIR/s39_expiry; rm -rf "$OUT"; mkdir -p "$OUT"
LOG=$(cluster_dir $CL)/server.log
settings() { psql_in $CL -qAt -c "$1" -c "$2" -c "select pg_reload_conf()" >/dev/null; }
cleanup() { settings "alter system reset worlds.expiry_interval" "alter system reset worlds.world_idle_ttl"; }
trap cleanup EXIT
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "drop database if exists $DB2" \
  -c "drop role if exists s39_bot" -c "create database $DB" -c "create database $DB2"
q() { psql_in $CL -d $DB -qAt "$@"; }
q2() { psql_in $CL -d $DB2 -qAt "$@"; }
for d in $DB $DB2; do
  psql_in $CL -d $d -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v int not null);
insert into t select g, 0 from generate_series(1, 100) g;
SQL
done
# a live world: is its catalog row still undropped? (a plain read of worlds.world: no world statement, so
# no sweep of worlds._expire)
alive() { q -c "select count(*) from worlds.world where name = '$1' and dropped is null"; }
# wait_gone NAME SECONDS: 0 once the world is gone within that time
wait_gone() { for _ in $(seq 1 $(($2 * 5))); do [ "$(alive "$1")" = 0 ] && return 0; sleep 0.2; done; return 1; }
LOG_START=$(stat -c %s "$LOG")
log_lines() { tail -c +$((LOG_START + 1)) "$LOG" | grep -c "$1" || true; }

settings "alter system set worlds.expiry_interval = '1s'" "alter system set worlds.world_idle_ttl = '2s'"
expect "expiry_interval after reload" "$(q -c "show worlds.expiry_interval")" "1s"
expect "world_idle_ttl after reload" "$(q -c "show worlds.world_idle_ttl")" "2s"
expect "one launcher in the cluster" "$(q -c "select count(*) from pg_stat_activity where backend_type = 'pg_worlds expiry launcher'")" "1"

echo "check: a TTL of 2 seconds, an idle world, a pinned idle world, an agent's world_ttl: no statement run"
q -c "select worlds.create_world('ttl_w')" -c "select worlds.create_world('idle_w')" -c "select worlds.create_world('pinned_w')" \
  -c "select count(*) from worlds.alter_world('ttl_w', ttl => '2 seconds')" -c "select count(*) from worlds.alter_world('pinned_w', pinned => true)" >/dev/null
q -c "select j ->> 'name' from worlds.sql(\$s\$create agent s39_bot with (can = 'read,fork,write_own', world_ttl = '2s')\$s\$) j" >/dev/null
psql "$(conninfo $CL $DB) user=s39_bot" -XqAt -v ON_ERROR_STOP=1 -c "select worlds.create_world('bot_w')" >/dev/null || fail "the agent's fork"
expect "the agent's world expires at its fork + world_ttl" \
  "$(q -c "select expires between created + interval '1.9 s' and created + interval '2.1 s' from worlds.world where name = 'bot_w' and dropped is null")" "t"
started=$(date +%s)
# (a round visits every database of the cluster in turn, each purging history for up to its budget: in
# the full suite's cluster, dozens of databases with history, and a loaded machine, a round took over
# 10 s; 40 s here)
wait_gone ttl_w 40 && echo "  ok   the world whose TTL passed is gone ($(($(date +%s) - started)) s)" || bad "ttl_w still there"
wait_gone idle_w 20 && echo "  ok   the idle world is gone" || bad "idle_w still there"
wait_gone bot_w 20 && echo "  ok   the agent's world past its world_ttl is gone" || bad "bot_w still there"
sleep 3  # idle for five seconds, over several rounds
expect "the pinned idle world stays" "$(alive pinned_w)" "1"
expect "worlds.event says discarded, once each" \
  "$(q -c "select string_agg(w.name, ',' order by w.name) from worlds.event e join worlds.world w on w.num = e.world where e.event = 'discarded'")" "bot_w,idle_w,ttl_w"
expect "SHOW HISTORY says discarded" \
  "$(q -c "select count(*) from unnest(array['ttl_w', 'idle_w', 'bot_w']) n, worlds.show_history(n) h where h.event = 'discarded'")" "3"
expect "logged: the TTL" "$(log_lines "pg_worlds: discarded world \"ttl_w\" in database \"$DB\" (its TTL ended at")" "1"
expect "logged: idle since" "$(log_lines "pg_worlds: discarded world \"idle_w\" in database \"$DB\" (idle since")" "1"
expect "logged: the agent's world" "$(log_lines "pg_worlds: discarded world \"bot_w\" in database \"$DB\" (its TTL ended at")" "1"
# a pinned world loses its pin: the idle rule applies again
q -c "select count(*) from worlds.alter_world('pinned_w', pinned => false)" >/dev/null
wait_gone pinned_w 10 && echo "  ok   unpinned, it goes once idle" || bad "pinned_w still there after RESET PINNED"
# a world with a live fork waits for its fork (the spec: "unless it has forks then")
q -c "select worlds.create_world('parent_w')" -c "select worlds.fork_world('parent_w', 'child_w')" -c "select count(*) from worlds.alter_world('child_w', pinned => true)" \
  -c "select count(*) from worlds.alter_world('parent_w', ttl => '1 second')" >/dev/null
sleep 4
expect "a world whose TTL passed stays while it has a live (pinned) fork" "$(alive parent_w)" "1"
q -c "select worlds.drop_world('child_w')" >/dev/null
wait_gone parent_w 10 && echo "  ok   its fork dropped, it goes" || bad "parent_w still there"

echo "check: a world written in a transaction while its TTL passes"
q -c "select worlds.create_world('busy_w')" -c "select count(*) from worlds.alter_world('busy_w', pinned => true)" >/dev/null
# the writer's transaction: a write, then 4 s (the TTL of 1 s passes, rounds come), another write, commit
PGOPTIONS="-c worlds.world=busy_w" psql "$(conninfo $CL $DB)" -XqAt -v ON_ERROR_STOP=1 >"$OUT/busy.log" 2>&1 <<'SQL' &
begin;
update t set v = 7 where id = 1;
select pg_sleep(4);
update t set v = 8 where id = 2;
commit;
SQL
WRITER=$!
sleep 0.5
q -c "select count(*) from worlds.alter_world('busy_w', ttl => '1 second')" >/dev/null
sleep 2
expect "while the writer's transaction is open, its world stays" "$(alive busy_w)" "1"
wait $WRITER && echo "  ok   the writer's transaction commits" || bad "writer: $(cat "$OUT/busy.log")"
wait_gone busy_w 10 && echo "  ok   then the world goes, at a later round" || bad "busy_w still there after its writer committed"
expect "main kept its rows" "$(q -c "select count(*) from t where v <> 0")" "0"
# a session writing statement after statement, each its own transaction, while its world's TTL passes:
# every statement succeeds in the world, or fails with a documented error (0A000: planned for the world
# just dropped; 3D000), and none is left half done
q -c "select worlds.create_world('stream_w')" -c "select count(*) from worlds.alter_world('stream_w', ttl => '2 seconds')" >/dev/null
# (until the world is seen gone, then two more statements: the first may still fail with 0A000, the
# session learning there of the discard; the second lands in main. A loaded machine's rounds come late,
# so not a fixed number of statements; at most 200, 20 s)
for i in $(seq 1 200); do
  echo "update t set v = v + 1 where id = 3; select pg_sleep(0.1);"
  echo "select not exists (select from worlds.world where name = 'stream_w' and dropped is null) as gone \\gset"
  echo "\\if :gone"
  echo "update t set v = v + 1 where id = 3;"
  echo "update t set v = v + 1 where id = 3;"
  echo "\\q"
  echo "\\endif"
done > "$OUT/stream.sql"
PGOPTIONS="-c worlds.world=stream_w" psql "$(conninfo $CL $DB)" -XqAt -v VERBOSITY=verbose -f "$OUT/stream.sql" >"$OUT/stream.log" 2>&1
other=$(grep "ERROR:" "$OUT/stream.log" | grep -v -E "ERROR:  (0A000|3D000)" || true)
[ -z "$other" ] && echo "  ok   the writer saw no error but 0A000 / 3D000 ($(grep -c "ERROR:" "$OUT/stream.log") of them)" || bad "writer errors: $other"
wait_gone stream_w 10 && echo "  ok   the written world is gone" || bad "stream_w still there"
# (as after a DROP WORLD by another session, docs/sql.md worlds.world: the session carried on from the
# world's parent, main here, and its statements after the discard wrote main)
expect "after the discard the session wrote its parent, main" "$(q -c "select v > 0 from t where id = 3")" "t"

echo "check: history purged in two databases, no list of databases"
expect "worlds.purge_databases is not needed (empty)" "$(q -c "show worlds.purge_databases")" ""
for d in $DB $DB2; do psql_in $CL -d $d -qAt -c "update t set v = v + 100 where id <= 50" >/dev/null; done
H1=$(q -c "select history from worlds.tables where relid = 't'::regclass")
H2=$(q2 -c "select history from worlds.tables where relid = 't'::regclass")
[ "$(q -c "select count(*) > 0 from $H1")" = t ] && [ "$(q2 -c "select count(*) > 0 from $H2")" = t ] \
  && echo "  ok   both databases have history" || fail "no history to purge ($H1, $H2)"
for d in $DB $DB2; do psql_in $CL -d $d -qAt -c "select * from worlds.sql('alter system set history_retention = ''1 second''')" >/dev/null; done
purged() { [ "$(q -c "select count(*) from $H1")" = 0 ] && [ "$(q2 -c "select count(*) from $H2")" = 0 ]; }
for _ in $(seq 1 50); do purged && break; sleep 0.2; done
purged && echo "  ok   history older than history_retention is gone in both" || bad "history left: $(q -c "select count(*) from $H1") / $(q2 -c "select count(*) from $H2")"
expect "logged: purged in $DB" "$([ "$(log_lines "history rows\? older than history_retention in database \"$DB\"")" -ge 1 ] && echo yes)" "yes"
expect "logged: purged in $DB2" "$([ "$(log_lines "history rows\? older than history_retention in database \"$DB2\"")" -ge 1 ] && echo yes)" "yes"

echo "check: the purge of a database with 2,000 tracked tables, a migration running beside it"
# A round once purged every table in one transaction: four locks a table (its history, its inserts and
# their indexes) held at once, 8,000 here against a shared lock table of about 5,300 (the default
# max_locks_per_transaction): the worker failed with "out of shared memory", and so did a migration beside
# it. Now each table's batch is a transaction of its own.
DB4=s39_many
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB4" -c "create database $DB4"
q4() { psql_in $CL -d $DB4 -qAt "$@"; }
q4 -c "create extension pg_worlds" >/dev/null
# (autocommit: each table's first write in a transaction of its own, as an app's writes would be)
seq 1 2000 | sed 's/.*/create table many_& (id int primary key, v int); insert into many_& values (1, 0); update many_& set v = 1;/' >"$OUT/many.sql"
q4 -v ON_ERROR_STOP=1 -f "$OUT/many.sql" >"$OUT/many.log" 2>&1 || fail "making 2,000 tables: $(tail -3 "$OUT/many.log")"
expect "tables with history" "$(q4 -c "select count(*) from worlds.tables where history is not null")" "2000"
oom_before=$(log_lines "out of shared memory")
q4 -c "select * from worlds.sql('alter system set history_retention = ''1 second''')" >/dev/null
# a world whose TTL passes in another database while this one's purge has 2,000 tables to go through: the
# round's one purge budget (2 s for all databases) bounds its wait (a budget per database made it wait for
# every earlier database's purge)
q -c "select worlds.create_world('soon_w')" -c "select count(*) from worlds.alter_world('soon_w', ttl => '1 second')" >/dev/null
soon_started=$(date +%s)
# a migration of 300 tables in one transaction while the worker purges (1,200 locks of its own)
sleep 1
{ echo "begin;"; seq 1 300 | sed 's/.*/create table mig_& (id int primary key, name text);/'; echo "commit;"; } >"$OUT/mig.sql"
q4 -v ON_ERROR_STOP=1 -f "$OUT/mig.sql" >"$OUT/mig.log" 2>&1
expect "the migration beside the purge: errors" "$(grep -c ERROR "$OUT/mig.log")" "0"
wait_gone soon_w 15 && echo "  ok   a TTL'd world in another database went while this one purged ($(($(date +%s) - soon_started)) s)" \
  || bad "soon_w still there 15 s after its TTL, beside the purge of 2,000 tables"
left() { q4 -c "select coalesce(sum((xpath('/row/c/text()', query_to_xml(format('select count(*) as c from %s', history), false, true, '')))[1]::text::bigint), 0) from worlds.tables where history is not null"; }
for _ in $(seq 1 120); do [ "$(left)" = 0 ] && break; sleep 0.5; done
expect "history rows left in the 2,000 tables' histories" "$(left)" "0"
expect "no 'out of shared memory' in the log" "$(log_lines "out of shared memory")" "$oom_before"
psql_in $CL -q -c "drop database $DB4"

echo "check: DROP DATABASE while the worker is in it"
fatal_before=$(log_lines "FATAL:  database .* does not exist")
DB3=s39_dropped
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB3" -c "create database $DB3"
# much history to purge (the worker stays in the database for its whole purge budget)
psql_in $CL -d $DB3 -q >/dev/null <<'SQL'
create extension pg_worlds;
create table big (id int primary key, v int not null);
insert into big select g, 0 from generate_series(1, 200000) g;
update big set v = 1;
select * from worlds.sql('alter system set history_retention to ''0''');
SQL
inside=0
for _ in $(seq 1 300); do
  [ "$(psql_in $CL -qAt -c "select count(*) from pg_stat_activity where backend_type = 'pg_worlds expiry' and datname = '$DB3'")" = 1 ] && { inside=1; break; }
  sleep 0.05
done
expect "the worker is purging $DB3" "$inside" "1"
t0=$(date +%s%N)
psql_in $CL -q -c "drop database $DB3" 2>"$OUT/drop.err" && dropped=ok || dropped="$(cat "$OUT/drop.err")"
ms=$((($(date +%s%N) - t0) / 1000000))
expect "DROP DATABASE succeeds" "$dropped" "ok"
[ "$ms" -lt 1500 ] && echo "  ok   in $ms ms (the worker left at its next step)" || bad "DROP DATABASE took $ms ms"
# databases made and dropped over and over while rounds run: each drop succeeds at once
slow=0
for i in 1 2 3 4 5; do
  psql_in $CL -q -c "create database s39_churn" && psql_in $CL -d s39_churn -q -c "create extension pg_worlds" >/dev/null
  sleep 0.$((i * 2))
  t0=$(date +%s%N)
  psql_in $CL -q -c "drop database s39_churn" 2>>"$OUT/drop.err" || slow=$((slow + 100))
  [ $((($(date +%s%N) - t0) / 1000000)) -lt 1500 ] || slow=$((slow + 1))
done
expect "five databases created and dropped during rounds: no slow or failed DROP" "$slow" "0"
sleep 2
expect "no FATAL 'database does not exist' from the worker" "$(log_lines "FATAL:  database .* does not exist")" "$fatal_before"
expect "no expiry worker ended on an error" "$(log_lines "background worker \"pg_worlds expiry.*exit code [^0]")" "0"

echo "check: template databases and databases without pg_worlds are skipped"
expect "the launcher holds no database" "$(psql_in $CL -qAt -c "select count(*) from pg_stat_activity where backend_type = 'pg_worlds expiry launcher' and datid is not null")" "0"

psql_in $CL -q -c "set client_min_messages = warning" -c "drop database $DB" -c "drop database $DB2" -c "drop role if exists s39_bot"
[ "$failures" -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
