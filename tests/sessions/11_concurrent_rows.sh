#!/usr/bin/env bash
# Sessions of one world updating different rows at once: every committed update stays (none lost, none
# refused), also for a table main wrote before the fork, and when another world wrote it before.
# (A backend's cache of the world, rebuilt within a statement after another session's write, missed the
# statement's own write: later statements read a version behind and wrote over the newest one.)
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s11_rows
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table counters (id int primary key, n int not null default 0);
insert into counters select g from generate_series(1, 4) g;
create extension pg_worlds;
update counters set n = 0 where id in (1, 3);   -- main wrote them: they have history
SQL
echo 'UPDATE counters SET n = n + 1 WHERE id = :client_id + 1;' > "$RUN_DIR/s11.sql"
dir=$(cluster_dir $CL)
for round in 1 2; do
  psql_in $CL -d $DB -q -c "select worlds.drop_world('w', if_exists => true)" -c "select * from worlds.sql('create world w')" >/dev/null
  echo "check: round $round: 4 clients, 4 rows, 250 updates each, all in world w"
  out=$(PGOPTIONS='-c worlds.world=w' $PGBIN/pgbench -h "$dir/sock" -p "$(cat "$dir/port")" -U postgres -n -c4 -j4 -t250 -f "$RUN_DIR/s11.sql" $DB 2>&1)
  committed=$(echo "$out" | sed -n 's/.*actually processed: \([0-9]*\)\/.*/\1/p')
  expect "committed" "$committed" 1000
  expect "rows in w" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "select string_agg(n::text, ',' order by id) from counters")" "250,250,250,250"
  expect "rows in main" "$(psql_in $CL -d $DB -qAt -c "select string_agg(n::text, ',' order by id) from counters")" "0,0,0,0"
done

if [ $failures -ne 0 ]; then echo "11_concurrent_rows: $failures check(s) failed" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 11_concurrent_rows"
