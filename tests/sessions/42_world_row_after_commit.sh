#!/usr/bin/env bash
# A world writer's next transaction reads the world's row as its own commit wrote it, without the heap, when
# nothing else completed in between (storage/overlay/worlds.rs `committed_row`). Whatever another session
# does to the world between two of the writer's transactions must still be seen: its writes (the version
# and the rows), a change of its row (ALTER WORLD), a drop. One long-lived session (psql's `\!` runs the other session's statements
# between two of its own), checked against the truth read by fresh sessions.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s42_row
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v int);
insert into t select g, 0 from generate_series(1, 10) g;
select worlds.create_world('rw');
SQL
other() { printf '\\! %s\n' "PGOPTIONS='-c worlds.world=rw' $PGBIN/psql -X -q -h $(cluster_dir $CL)/sock -p $(cat $(cluster_dir $CL)/port) -U postgres -d $DB -c \"$1\" >/dev/null"; }
version() { psql_in $CL -d $DB -qAt -c "select version from worlds.world where name = '$1' and dropped is null"; }

v0=$(version rw)
out=$( {
  echo "set worlds.world = rw;"
  # two commits of its own in a row: the second starts from the row the first wrote
  echo "update t set v = v + 1 where id = 1;"
  echo "update t set v = v + 1 where id = 1;"
  echo "select 'a', v from t where id = 1;"
  # another session writes the world between two of this one's transactions
  other "update t set v = v + 10 where id = 1"
  echo "select 'b', v from t where id = 1;"
  echo "update t set v = v + 1 where id = 1;"
  echo "select 'c', v from t where id = 1;"
  # a write of its own, then another session's of another key, then a read: both seen
  echo "update t set v = v + 1 where id = 2;"
  other "update t set v = v + 5 where id = 3"
  echo "select 'd', sum(v) from t;"
  # another session alters the world's row (its metadata): the session's next statement reads it again
  echo "update t set v = v + 1 where id = 4;"
  printf '\\! %s\n' "$PGBIN/psql -X -q -h $(cluster_dir $CL)/sock -p $(cat $(cluster_dir $CL)/port) -U postgres -d $DB -c \"select * from worlds.sql('alter world rw set (note = ''altered'')')\" >/dev/null"
  echo "select 'e', sum(v) from t;"
} | psql_in $CL -d $DB -v ON_ERROR_STOP=0 -qAt -F ' ' 2>&1 || true)
echo "$out" | sed 's/^/  | /'
expect "own two commits, read after" "$(echo "$out" | grep '^a ')" "a 2"
expect "another session's write seen" "$(echo "$out" | grep '^b ')" "b 12"
expect "own write on top of it" "$(echo "$out" | grep '^c ')" "c 13"
expect "own write and another session's, both seen" "$(echo "$out" | grep '^d ')" "d 19"
expect "after another session altered the world" "$(echo "$out" | grep '^e ')" "e 20"
expect "the version: every write statement counted" "$(version rw)" "$((v0 + 7))"
expect "main untouched" "$(psql_in $CL -d $DB -qAt -c "select sum(v) from t")" "0"

# a drop by another session between two of the writer's transactions: the next write never reaches the
# dropped world (the session carries on from its parent, main, as DROP WORLD promises)
psql_in $CL -d $DB -qAt -c "select worlds.create_world('dw')" >/dev/null
out=$( {
  echo "set worlds.world = dw;"
  echo "update t set v = v + 1 where id = 5;"
  printf '\\! %s\n' "$PGBIN/psql -X -q -h $(cluster_dir $CL)/sock -p $(cat $(cluster_dir $CL)/port) -U postgres -d $DB -c \"select worlds.drop_world('dw')\" >/dev/null"
  echo "update t set v = v + 1 where id = 5;"
  echo "select 'g', v from t where id = 5;"
} | psql_in $CL -d $DB -v ON_ERROR_STOP=0 -qAt -F ' ' 2>&1 || true)
echo "$out" | sed 's/^/  | /'
# (the write after the drop fails, 0A000, or goes to main: either way the session then reads main's row)
expect "the read after the drop sees main's row" "$(echo "$out" | grep '^g ')" "g $(psql_in $CL -d $DB -qAt -c "select v from t where id = 5")"
delta=$(psql_in $CL -d $DB -qAt -c "select relname from pg_class where oid = (select delta from worlds.tables where relid = 't'::regclass)")
expect "no row written into the dropped world" \
  "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds_data.$delta d join worlds.world w on w.num = d._w_world where w.name = 'dw'")" "0"

if [ $failures -ne 0 ]; then echo "42_world_row_after_commit: $failures check(s) failed" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 42_world_row_after_commit"
