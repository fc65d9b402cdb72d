#!/usr/bin/env bash
# REPEATABLE READ and SERIALIZABLE inside a world behave as in main: two transactions that write different
# rows both commit; two that write the same row, or a write skew under SERIALIZABLE, fail one with 40001; a
# world rebased or dropped under a REPEATABLE READ writer fails its commit (40001) rather than writing on an
# old fork point. And pg_worlds' reads of its own catalog take no predicate lock (storage/catalog_scan.rs):
# every other session's commit in the world updates the world's row, and such a lock made it a read/write
# conflict of every serializable transaction of the world. PREPARE TRANSACTION in a world: the prepared
# writes are unseen until COMMIT PREPARED, as in main.
# One long-lived session (psql's `\!` runs another session's statements between two of its own).
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s43_iso
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
-- keys far apart: their index entries on different pages, as two rows of a big table (Postgres's
-- predicate locks on an index are by page; two rows of one page conflict in main too)
create table acc (id int primary key, v int not null, pad text);
insert into acc select g, 100, repeat('x', 200) from generate_series(1, 3000) g;
select worlds.create_world('iso');
SQL
sock="-h $(cluster_dir $CL)/sock -p $(cat $(cluster_dir $CL)/port) -U postgres -d $DB"
# other WORLD SQL: a statement of another session, run between two of the long-lived session's
other() { printf '\\! %s\n' "PGOPTIONS='-c worlds.world=$1' $PGBIN/psql -X -q $sock -v ON_ERROR_STOP=1 -c \"$2\" >/dev/null 2>&1 || echo OTHER-FAILED"; }
session() { psql_in $CL -d $DB -v ON_ERROR_STOP=0 -qAt -F ' ' 2>&1 || true; }
q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }
catalog_locks="select count(*) from pg_locks l join pg_class c on c.oid = l.relation join pg_namespace n on n.oid = c.relnamespace
               where l.pid = pg_backend_pid() and l.mode = 'SIReadLock' and n.nspname = 'worlds'"

n=0
for iso in "repeatable read" serializable; do
  n=$((n + 1))
  echo "== $iso"
  # two writers of different rows, each reading first, interleaved (the session's first transaction: the
  # world is found then): both commit
  out=$( {
    echo "set worlds.world = iso;"
    echo "begin isolation level $iso;"
    echo "select 'r1', v from acc where id = 1$n;"
    echo "select 'locks', ($catalog_locks);"
    other iso "begin isolation level $iso; select v from acc where id = 290$n; update acc set v = v + 1 where id = 290$n; commit;"
    echo "update acc set v = v + 1 where id = 1$n;"
    echo "commit;"
    echo "select 'after', v from acc where id = 1$n;"
  } | session)
  echo "$out" | sed 's/^/  | /'
  expect "$iso: predicate locks on pg_worlds' catalog" "$(echo "$out" | grep '^locks ')" "locks 0"
  expect "$iso: the other writer's row" "$(q iso "select v from acc where id = 290$n")" "101"
  if [ "$iso" = "repeatable read" ]; then
    expect "$iso: first writer's commit" "$(echo "$out" | grep -c 'ERROR')" "0"
    expect "$iso: its row" "$(echo "$out" | grep '^after ')" "after 101"
  else
    # (under SERIALIZABLE both versions went into the world's small delta, whose index pages both
    # transactions read: Postgres's predicate locks on an index are by page, so this may be a conflict,
    # as two rows of one index page are in main; never anything but 40001)
    expect "$iso: errors other than 40001" "$(echo "$out" | grep 'ERROR' | grep -vc 'could not serialize access\|current transaction is aborted')" "0"
  fi

  # two writers of the same row: the second fails, as in main
  out=$( {
    echo "set worlds.world = iso;"
    echo "begin isolation level $iso;"
    echo "select 'r1', v from acc where id = 2$n;"
    other iso "update acc set v = v + 5 where id = 2$n"
    echo "update acc set v = v + 1 where id = 2$n;"
    echo "commit;"
  } | session)
  echo "$out" | sed 's/^/  | /'
  expect "$iso: the same row changed since the snapshot" "$(echo "$out" | grep -c 'could not serialize access')" "1"
  expect "$iso: the other session's update kept" "$(q iso "select v from acc where id = 2$n")" "105"

  # a row another session deleted since the snapshot: Postgres's words for it
  out=$( {
    echo "set worlds.world = iso;"
    echo "begin isolation level $iso;"
    echo "select 'r1', v from acc where id = 5$n;"
    other iso "delete from acc where id = 5$n"
    echo "update acc set v = v + 1 where id = 5$n;"
    echo "commit;"
  } | session)
  echo "$out" | sed 's/^/  | /'
  expect "$iso: a row deleted since the snapshot" "$(echo "$out" | grep -c 'could not serialize access due to concurrent delete')" "1"
  expect "$iso: the delete kept" "$(q iso "select count(*) from acc where id = 5$n")" "0"

  # a rebase of the world after the snapshot: the writer's commit fails rather than write on the old base
  psql_in $CL -d $DB -q -c "update acc set v = v + 1000 where id = 1500"
  out=$( {
    echo "set worlds.world = iso;"
    echo "begin isolation level $iso;"
    echo "select 'r1', v from acc where id = 1500;"
    printf '\\! %s\n' "$PGBIN/psql -X -q $sock -c \"select * from worlds.sql('rebase world iso')\" >/dev/null 2>&1 || echo REBASE-FAILED"
    echo "update acc set v = v + 1 where id = 3$n;"
    echo "commit;"
  } | session)
  echo "$out" | sed 's/^/  | /'
  expect "$iso: rebase after the snapshot fails the writer" "$(echo "$out" | grep -c 'could not serialize access due to concurrent update')" "1"
  expect "$iso: nothing of it written" "$(q iso "select v from acc where id = 3$n")" "100"
  expect "$iso: the rebase brought main's row" "$(q iso "select v from acc where id = 1500")" "$(psql_in $CL -d $DB -qAt -c "select v from acc where id = 1500")"

  # a drop of the world after the snapshot: the writer's commit fails, nothing reaches the dropped world
  psql_in $CL -d $DB -qAt -c "select worlds.create_world('gone$n')" >/dev/null
  out=$( {
    echo "set worlds.world = gone$n;"
    echo "begin isolation level $iso;"
    echo "select 'r1', v from acc where id = 4$n;"
    printf '\\! %s\n' "$PGBIN/psql -X -q $sock -c \"select worlds.drop_world('gone$n')\" >/dev/null 2>&1 || echo DROP-FAILED"
    echo "update acc set v = v + 1 where id = 4$n;"
    echo "commit;"
  } | session)
  echo "$out" | sed 's/^/  | /'
  expect "$iso: a drop after the snapshot fails the writer" "$(echo "$out" | grep -c 'ERROR')" "1"
  delta=$(psql_in $CL -d $DB -qAt -c "select relname from pg_class where oid = (select delta from worlds.tables where relid = 'acc'::regclass)")
  expect "$iso: no row written into the dropped world" \
    "$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds_data.$delta d join worlds.world w on w.num = d._w_world where w.name = 'gone$n'")" "0"
done

# one REPEATABLE READ transaction writing two worlds (its version moved in each at commit), while other
# sessions commit in both: it commits too
psql_in $CL -d $DB -qAt -c "select worlds.create_world('iso2')" >/dev/null
out=$( {
  echo "begin isolation level repeatable read;"
  echo "set local worlds.world = iso;"
  echo "select 'r', v from acc where id = 60;"
  echo "update acc set v = v + 1 where id = 60;"
  echo "set local worlds.world = iso2;"
  echo "update acc set v = v + 1 where id = 60;"
  other iso "update acc set v = v + 1 where id = 61"
  other iso2 "update acc set v = v + 1 where id = 61"
  echo "commit;"
} | session)
echo "$out" | sed 's/^/  | /'
expect "two worlds in one repeatable read transaction: errors" "$(echo "$out" | grep -c 'ERROR')" "0"
expect "two worlds: iso's rows" "$(q iso "select string_agg(v::text, ',' order by id) from acc where id in (60, 61)")" "101,101"
expect "two worlds: iso2's rows" "$(q iso2 "select string_agg(v::text, ',' order by id) from acc where id in (60, 61)")" "101,101"

# SERIALIZABLE still sees a write skew of the world's rows: each reads both rows and writes one
out=$( {
  echo "set worlds.world = iso;"
  echo "begin isolation level serializable;"
  echo "select 'sum', sum(v) from acc where id in (100, 2800);"
  other iso "begin isolation level serializable; select sum(v) from acc where id in (100, 2800); update acc set v = v - 150 where id = 2800; commit;"
  echo "update acc set v = v - 150 where id = 100;"
  echo "commit;"
} | session)
echo "$out" | sed 's/^/  | /'
expect "write skew: one of the two fails" "$(echo "$out" | grep -c 'could not serialize access')" "1"
expect "write skew: the rows' sum stays positive" "$(q iso "select sum(v) > 0 from acc where id in (100, 2800)")" "t"

# and over a range (the world's part read from the session's cache, loaded by an earlier statement)
out=$( {
  echo "set worlds.world = iso;"
  echo "select 'warm', count(*) from acc where id between 200 and 300;"
  echo "begin isolation level serializable;"
  echo "select 'sum', sum(v) from acc where id between 200 and 300;"
  other iso "begin isolation level serializable; select sum(v) from acc where id between 200 and 300; update acc set v = v + 1 where id = 250; commit;"
  echo "update acc set v = v + 1 where id = 210;"
  echo "commit;"
} | session)
echo "$out" | sed 's/^/  | /'
expect "write skew over a range: one of the two fails" "$(echo "$out" | grep -c 'could not serialize access')" "1"

# a serializable transaction after other sessions' commits moved the world's row: still no predicate lock
# on the catalog (the world's row is read again on the new snapshot)
out=$( {
  echo "set worlds.world = iso;"
  echo "select 'warm', count(*) from acc where id = 1;"
  other iso "update acc set v = v + 1 where id = 2"
  echo "begin isolation level serializable;"
  echo "select 'r', v from acc where id = 2;"
  echo "update acc set v = v + 1 where id = 3;"
  echo "select 'locks', ($catalog_locks);"
  echo "commit;"
} | session)
echo "$out" | sed 's/^/  | /'
expect "after another session's commit: predicate locks on the catalog" "$(echo "$out" | grep '^locks ')" "locks 0"
expect "main untouched" "$(psql_in $CL -d $DB -qAt -c "select sum(v) from acc where id <> 1500")" "$((2999 * 100))"

# PREPARE TRANSACTION in a world: until COMMIT PREPARED the session sees the world without the prepared
# writes (as main's are unseen until then), after it with them; ROLLBACK PREPARED leaves nothing. (A
# cluster of its own: prepared transactions need max_prepared_transactions, set at start.)
P2=${CL}_2pc
EXTRA_CONF="-c max_prepared_transactions=4" start_cluster $P2 yes
psql_in $P2 -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $P2 -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acc (id int primary key, v int not null);
insert into acc select g, 100 from generate_series(1, 10) g;
select worlds.create_world('tp');
SQL
for iso in "read committed" "repeatable read"; do
  out=$( {
    echo "set worlds.world = tp;"
    echo "begin isolation level $iso;"
    echo "update acc set v = v + 1 where id = 1;"
    echo "insert into acc values (11, 5);"
    echo "prepare transaction 'p';"
    echo "select 'prepared', (select v from acc where id = 1), count(*) from acc;"
    echo "commit prepared 'p';"
    echo "select 'committed', (select v from acc where id = 1), count(*) from acc;"
    echo "begin; update acc set v = v + 1 where id = 2; prepare transaction 'q';"
    echo "select 'prepared2', v from acc where id = 2;"
    echo "rollback prepared 'q';"
    echo "select 'rolled back', v from acc where id = 2;"
    echo "delete from acc where id = 11; update acc set v = 100 where id = 1;"
  } | psql_in $P2 -d $DB -v ON_ERROR_STOP=0 -qAt -F ' ' 2>&1 || true)
  echo "$out" | sed 's/^/  | /'
  expect "$iso: after PREPARE, before COMMIT PREPARED" "$(echo "$out" | grep '^prepared ')" "prepared 100 10"
  expect "$iso: after COMMIT PREPARED" "$(echo "$out" | grep '^committed ')" "committed 101 11"
  expect "$iso: a second prepared one unseen" "$(echo "$out" | grep '^prepared2 ')" "prepared2 100"
  expect "$iso: after ROLLBACK PREPARED" "$(echo "$out" | grep '^rolled back ')" "rolled back 100"
done
expect "prepared: main untouched" "$(psql_in $P2 -d $DB -qAt -c "select sum(v), count(*) from acc")" "1000|10"
stop_cluster $P2

if [ $failures -ne 0 ]; then echo "43_isolation_levels: $failures check(s) failed" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 43_isolation_levels"
