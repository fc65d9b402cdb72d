#!/usr/bin/env bash
# A streaming hot standby of a cluster with worlds (pg_basebackup -R): every read-only statement works
# there (SELECT in a world and in a moment, SHOW WORLDS / BRANCHES / HISTORY, DIFF, AS OF, MERGE ... DRY
# RUN), and writes fail with Postgres's own 25006, in main and in worlds. An expired world is left to the
# primary to discard.
source "$(dirname "$0")/common.sh"
PR=${CL}_primary; SB=${CL}_standby
stop_cluster $SB; stop_cluster $PR
rm -rf "$(cluster_dir $SB)"
start_cluster $PR yes
pdir=$(cluster_dir $PR); pport=$(cat "$pdir/port")
OUT=$RUN_DIR/s17_standby; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $PR -q -c "set client_min_messages = warning" -c "drop database if exists s17" -c "create database s17"
psql_in $PR -d s17 -q >/dev/null <<'SQL'
create table items (id int primary key, name text not null, qty int not null);
insert into items select g, 'item ' || g, g from generate_series(1, 10) g;
create extension pg_worlds;
select * from worlds.sql('create world w');
set worlds.world = w;
update items set qty = qty + 100 where id <= 3;
delete from items where id = 10;
insert into items values (11, 'new', 1);
reset worlds.world;
select * from worlds.sql('create world short with (ttl = ''1 second'')');
SQL
sdir=$(cluster_dir $SB); mkdir -p "$sdir/sock"; [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$sdir"
as_pg $PGBIN/pg_basebackup -h "$pdir/sock" -p "$pport" -U postgres -D "$sdir/data" -R -X stream >"$OUT/basebackup.log" 2>&1 \
  || { cat "$OUT/basebackup.log"; fail "pg_basebackup -R failed"; }
start_cluster $SB yes
for _ in $(seq 1 60); do [ "$(psql_in $SB -d s17 -qAt -c "select pg_is_in_recovery()" 2>/dev/null)" = t ] && break; sleep 0.5; done
expect "the standby is in recovery" "$(psql_in $SB -d s17 -qAt -c "select pg_is_in_recovery()")" t
sleep 1.5   # the world "short" has expired
S() { psql_in $SB -d s17 -qAt -v ON_ERROR_STOP=0 -c 'set client_min_messages = warning' "$@" 2>&1; }
code() { psql_in $SB -d s17 -qAt -v ON_ERROR_STOP=0 -v VERBOSITY=sqlstate "$@" 2>&1 | grep -o 'ERROR: *[0-9A-Z]*' | head -1; }

echo "check: reads on the standby"
expect "SELECT in world w" "$(S -c "set worlds.world = w" -c "select string_agg(id || ':' || qty, ',' order by id) from items")" \
  "1:101,2:102,3:103,4:4,5:5,6:6,7:7,8:8,9:9,11:1"
expect "SELECT in main" "$(S -c "select count(*), sum(qty) from items")" "10|55"
expect "SHOW WORLDS" "$(S -c "select string_agg(sql->>'name', ',' order by sql->>'name') from worlds.sql('show worlds')")" "main,short,w"
expect "SHOW BRANCHES runs" "$(S -c "select count(*) > 0 from worlds.sql('show branches')")" t
expect "DIFF of w" "$(S -c "select count(*) from worlds.sql('diff world w')")" 5
expect "SHOW HISTORY runs" "$(S -c "select count(*) >= 0 from worlds.sql('show history for world w')")" t
expect "MERGE ... DRY RUN" "$(S -c "select count(*) > 0 from worlds.sql('merge world w dry run')")" t
expect "a moment of main (AS OF)" "$(S -c "set worlds.world = 'main@now'" -c "select count(*) from items")" 10

echo "check: writes on the standby fail with 25006"
expect "INSERT in main" "$(code -c "insert into items values (50, 'x', 1)")" "ERROR:  25006"
expect "UPDATE in world w" "$(code -c "set worlds.world = w" -c "update items set qty = 0 where id = 1")" "ERROR:  25006"
expect "CREATE WORLD" "$(code -c "select * from worlds.sql('create world x')")" "ERROR:  25006"
expect "MERGE WORLD" "$(code -c "select * from worlds.sql('merge world w')")" "ERROR:  25006"
expect "the primary still has world w" "$(psql_in $PR -d s17 -qAt -c "select count(*) from worlds.sql('show worlds') where sql->>'name' = 'w'")" 1

stop_cluster $SB; stop_cluster $PR
if [ $failures -ne 0 ]; then echo "17_hot_standby: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
rm -rf "$sdir"
echo "ok: 17_hot_standby"
