#!/usr/bin/env bash
# CREATE WORLD c FROM p racing DROP WORLD p: one wins (the drop refuses with 2BP01 since c was forked, or
# the create finds no p, 3D000); never a live world on a dropped parent, whose writes a merge would lose.
# The same for a whole merge of p (which ends p unless a world was forked from it).
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s12_race
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v int);
insert into t values (1, 1);
SQL
set +e
for i in $(seq 1 12); do
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('p$i')" >/dev/null
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('c$i', 'p$i')" >/dev/null 2>&1 &
  psql_in $CL -d $DB -qAt -c "select worlds.drop_world('p$i')" >/dev/null 2>&1
  wait
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('m$i')" >/dev/null
  psql_in $CL -d $DB -qAt -c "set worlds.world = m$i" -c "update t set v = v + 1" >/dev/null
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('mc$i', 'm$i')" >/dev/null 2>&1 &
  psql_in $CL -d $DB -qAt -c "select * from worlds.sql('merge world m$i')" >/dev/null 2>&1
  wait
done
# a world dropped while a session writes it: the drop waits for the writer's transaction and frees its
# rows too; a write that comes after finds the world gone
psql_in $CL -d $DB -qAt -c "select worlds.create_world('busy')" >/dev/null
PGOPTIONS='-c worlds.world=busy' psql_in $CL -d $DB -qAt -c "begin" -c "update t set v = 50" -c "select pg_sleep(1.5)" -c "commit" >/dev/null 2>&1 &
sleep 0.5
psql_in $CL -d $DB -qAt -c "select worlds.drop_world('busy')" >/dev/null
wait
set -e
echo "check: a dropped world leaves no rows behind"
expect "rows of dropped worlds" "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds_data.$(psql_in $CL -d $DB -qAt -c "select relname from pg_class where oid = (select delta from worlds.tables where relid = 't'::regclass)") d join worlds.world w on w.num = d._w_world where w.dropped is not null")" 0
echo "check: no live world stands on a dropped one"
expect "live worlds on dropped parents" \
  "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world c join worlds.world p on p.num = c.parent where c.dropped is null and p.dropped is not null")" 0
expect "races where one side didn't win (p live without c, or c on a dropped p)" \
  "$(psql_in $CL -d $DB -qAt -c "select count(*) from generate_series(1, 12) i
      where exists (select 1 from worlds.world w where w.dropped is null and w.name = 'p' || i)
         <> exists (select 1 from worlds.world w where w.dropped is null and w.name = 'c' || i)")" 0

if [ $failures -ne 0 ]; then echo "12_fork_drop_race: $failures check(s) failed" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 12_fork_drop_race"
