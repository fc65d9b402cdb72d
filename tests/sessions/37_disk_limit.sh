#!/usr/bin/env bash
# worlds.max_disk_bytes across sessions (storage/disk_limit.rs): set for the whole server (ALTER SYSTEM,
# reload), it reaches a session already working in a world at its next statement; a session acts on the
# size it measured for up to 5 seconds (the guarantee docs/sql.md states: a statement that starts under
# the limit runs, the next ones within 5 s too, then the size is measured again); past it the world's
# UPDATE and COPY fail with 53100 while main's writes in the same session go on; reset, the world writes
# again. SHOW STORAGE / SHOW DISK typed in psql. (SHOW DISK measures anew, and the session's writes then use
# that figure: the second session below asks it.)
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s37_disk
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -q -c "alter system reset worlds.max_disk_bytes" -c "select pg_reload_conf()" >/dev/null
trap 'psql_in $CL -q -c "alter system reset worlds.max_disk_bytes" -c "select pg_reload_conf()" >/dev/null' EXIT
q() { psql_in $CL -d $DB -qAt "$@"; }
q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v text);
insert into t select g, 'x' from generate_series(1, 100) g;
select * from worlds.sql('create world w');
SQL
CONN=$(conninfo $CL $DB)
PSQL=$(command -v psql)

echo "check: SHOW STORAGE and SHOW DISK typed in psql"
expect "SHOW STORAGE's worlds" "$(q -c "show storage" | cut -d'|' -f1 | paste -sd,)" "main,w"
expect "SHOW DISK's rows" "$(q -c "show disk" | cut -d'|' -f1 | paste -sd,)" "live,history,reclaimable,log,total,limit"

echo "check: a limit set for the server reaches a session already in a world; main's writes go on"
out=$(psql "$CONN" -X -v ON_ERROR_STOP=0 2>&1 <<SQL
set worlds.world = w;
update t set v = 'before' where id = 1;
\! $PSQL "$CONN" -XqAt -c "alter system set worlds.max_disk_bytes = 1" -c "select pg_reload_conf()" >/dev/null
select pg_sleep(0.5);
select 'reloaded', current_setting('worlds.max_disk_bytes');
update t set v = 'after' where id = 1;
copy t from stdin;
500	copied
\.
select 'world reads', v from t where id = 1;
set worlds.world = main;
update t set v = 'main' where id = 2;
select 'main wrote', v from t where id = 2;
SQL
)
echo "$out" | grep -Eq "reloaded +\| 1B" || bad "the session saw the reloaded limit: $out"
expect "53100 for the world's UPDATE and COPY" "$(echo "$out" | grep -c 'cannot write in world "w": the database uses [0-9]* bytes on disk, over worlds.max_disk_bytes (1 bytes): drop worlds (SHOW STORAGE shows what each holds) or purge history (worlds.purge_history)')" "2"
echo "$out" | grep -Eq "world reads +\| before" || bad "the world kept its row: $out"
echo "$out" | grep -Eq "main wrote +\| main" || bad "main's write went on: $out"
expect "the copied row isn't there" "$(q -c "set worlds.world = w" -c "select count(*) from t where id = 500")" "0"
expect "CREATE WORLD past the limit" "$(q -c "select * from worlds.sql('create world w2')" 2>&1 | grep -o 'cannot create world "w2"')" 'cannot create world "w2"'

echo "check: a session acts on the size it measured for up to 5 s, then measures again"
total=$(q -c "select bytes from worlds.show_disk() where what = 'total'")
limit=$((total + 2 * 1024 * 1024))
q -c "alter system set worlds.max_disk_bytes = $limit" -c "select pg_reload_conf()" >/dev/null
sleep 0.5
out=$(psql "$CONN" -X -v ON_ERROR_STOP=0 2>&1 <<SQL
set worlds.world = w;
insert into t select g, repeat('g', 1000) from generate_series(1000, 9000) g;
update t set v = 'within 5 s' where id = 3;
\\! $PSQL "$CONN" -XqAt -c "select 'grown', (select bytes from worlds.show_disk() where what = 'total') > $limit"
select pg_sleep(5.5);
update t set v = 'measured again' where id = 3;
select 'row 3', v from t where id = 3;
SQL
)
echo "$out" | grep -q "grown|t" || bad "the database grew past the limit: $out"
expect "refusals: only the write after 5 s" "$(echo "$out" | grep -c 'ERROR:  cannot write in world "w"')" "1"
echo "$out" | grep -Eq "row 3 +\| within 5 s" || bad "the write within 5 s ran: $out"

echo "check: reset, the world writes again and CREATE WORLD runs"
q -c "alter system reset worlds.max_disk_bytes" -c "select pg_reload_conf()" >/dev/null
sleep 0.5
expect "the world's write" "$(q -c "set worlds.world = w" -c "update t set v = 'free' where id = 1" -c "select v from t where id = 1")" "free"
expect "CREATE WORLD" "$(q -c "select * from worlds.sql('create world w2')")" '{"tag": "CREATE WORLD"}'

psql_in $CL -q -c "drop database $DB"
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: disk limit"
