#!/usr/bin/env bash
# Merge checks under concurrency: two merges racing, each fine alone, break a check together; the second
# to commit must be refused (23514) and the invariant hold. Merges running the same check take turns on
# its lock and read on the latest snapshot. A check that sleeps widens the window; five rounds.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s23_checks
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table lists (id int primary key);
create table leads (id int primary key, list int not null);
select * from worlds.sql('create merge check lists_keep_leads on tables (leads, lists) as
  select l.id from lists l, (select pg_sleep(0.4)) s where l.id not in (select list from leads)');
SQL
admin() { psql_in $CL -d $DB -qAt "$@"; }
refused=0; merged=0; other=0
for round in 1 2 3 4 5; do
  admin -c "delete from leads" -c "delete from lists" -c "insert into lists values (1), (2), (3)" \
        -c "insert into leads values (1, 1), (2, 2), (3, 3), (4, 3)" >/dev/null
  admin -c "select worlds.create_world('move_$round')" -c "select worlds.create_world('clean_$round')" >/dev/null
  PGOPTIONS="-c worlds.world=move_$round" admin -c "update leads set list = 1 where id = 3" >/dev/null
  PGOPTIONS="-c worlds.world=clean_$round" admin -c "delete from leads where id = 4" >/dev/null
  admin -v VERBOSITY=verbose -c "select j ->> 'tag' from worlds.sql('merge world move_$round') j" >/tmp/s23_a.out 2>&1 &
  a=$!
  admin -v VERBOSITY=verbose -c "select j ->> 'tag' from worlds.sql('merge world clean_$round') j" >/tmp/s23_b.out 2>&1 &
  b=$!
  wait $a || true; wait $b || true
  for f in /tmp/s23_a.out /tmp/s23_b.out; do
    if grep -q "^MERGE 1$" $f; then merged=$((merged + 1))
    elif grep -q "23514.*breaks merge check lists_keep_leads, which finds (id = 3)" $f; then refused=$((refused + 1))
    else other=$((other + 1)); echo "  round $round: $(cat $f)"; fi
  done
  expect "round $round: every list keeps a lead" "$(admin -c "select count(*) from lists where id not in (select list from leads)")" "0"
  admin -c "select worlds.drop_world(name) from worlds.world where dropped is null and num <> 0" >/dev/null
done
expect "merges that went in" "$merged" "5"
expect "merges refused by the check" "$refused" "5"
expect "other outcomes" "$other" "0"
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: merge checks under concurrency"
