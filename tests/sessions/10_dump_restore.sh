#!/usr/bin/env bash
# pg_dump / restore of a database with pg_worlds, as a DBA backs it up: the tables are created before and
# after CREATE EXTENSION (keyed, keyless, a generated column, a key added after loading), a world and a
# world of it hold changes, history_retention was changed. Restored with psql (ON_ERROR_STOP) from a
# plain dump and with pg_restore --exit-on-error from a custom-format one: no error, main's rows
# byte-identical, every table tracked again (the catalog and generated storage are derived state, not
# dumped), the setting kept, the worlds back with their own changes (made by the first worlds statement),
# and the restored database works: a new world reads and writes, history captures main's writes.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
SRC=s10_dump_src
OUT=$RUN_DIR/s10_dump_restore; rm -rf "$OUT"; mkdir -p "$OUT"
[ "$(id -u)" -eq 0 ] && chown postgres "$OUT"
fresh() { psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $1" -c "create database $1"; }

fresh $SRC
psql_in $CL -d $SRC -q <<'SQL'
create table early (id int primary key, v text);
insert into early select g, 'e' || g from generate_series(1, 50) g;
create extension pg_worlds;
create table late (id int, v text, doubled int generated always as (id * 2) stored);
insert into late (id, v) select g, 'l' || g from generate_series(1, 20) g;
alter table late add primary key (id);
create table logs (line text);
insert into logs values ('a'), ('a'), ('b');
create table pairs (a int, b text, v int, primary key (a, b));
insert into pairs values (1, 'x', 1), (2, 'y', 2);
create table events (msg text, n int);
insert into events values ('e', 1), ('e', 1), ('f', 2);
select * from worlds.sql('alter system set history_retention = ''2 days''');
select count(*) from worlds.sql('create merge policy dumped with (max_rows = 7, review_tables = ''logs'')');
select count(*) from worlds.sql('create merge check dumped_check on tables (logs) as select 1 where false');
select count(*) from worlds.sql('register reader dumped_export on logs');
select count(*) from worlds.sql('mark reader dumped_export critical');
select * from worlds.sql('create world w1');
set worlds.world = w1;
update early set v = 'in w1' where id = 1;
insert into late (id, v) values (100, 'w1');
delete from logs where line = 'b';
insert into logs values ('w1'), ('w1');
update pairs set v = 10 where a = 1;
delete from pairs where a = 2;
delete from events where msg = 'f';
insert into events values ('w1', 3);
reset worlds.world;
select * from worlds.sql('fork world w1 as w2');
set worlds.world = w2;
update late set v = 'in w2' where id = 100;
delete from early where id = 50;
reset worlds.world;
update early set v = 'main' where id = 2;
SQL
checksum() { psql_in $CL -d "$1" -Atc "select md5(string_agg(t, '|' order by t)) from (
  select 'early' || e::text as t from early e union all select 'late' || l::text from late l union all select 'logs' || g::text from logs g
  union all select 'pairs' || p::text from pairs p union all select 'events' || v::text from events v) x"; }
want=$(checksum $SRC)

as_pg pg_dump -h "$dir/sock" -p "$port" -U postgres -f "$OUT/plain.sql" $SRC || fail "pg_dump (plain) failed"
as_pg pg_dump -h "$dir/sock" -p "$port" -U postgres -Fc -f "$OUT/custom.dump" $SRC || fail "pg_dump (custom) failed"
echo "check: the dump holds no generated storage, and of the catalog the settings and the worlds in portable form"
expect "worlds_data objects in the dump" "$(grep -c 'worlds_data\.' "$OUT/plain.sql")" 0
expect "COPY of other worlds catalog tables" "$(grep -E '^COPY worlds\.' "$OUT/plain.sql" | grep -Evc 'worlds.(settings|dumped_world|dumped_row|merge_policy|merge_check|reader) ')" 0
expect "worlds in the dump" "$(sed -n '/^COPY worlds.dumped_world /,/^\\\./p' "$OUT/plain.sql" | grep -Ec '^w[12]\s')" 2

restored_checks() { # restored_checks DB
  local db=$1
  expect "$db: main's rows" "$(checksum $db)" "$want"
  expect "$db: a session in a world not made yet" "$(PGOPTIONS='-c worlds.world=w1' psql_in $CL -d $db -Atc "select count(*) from early" 2>&1 | grep -o 'came with a restored dump' | head -1)" "came with a restored dump"
  expect "$db: tables tracked" "$(psql_in $CL -d $db -Atc "select string_agg(relid::text || ':' || key_kind::text, ',' order by relid::text) from worlds.tables")" "early:i,events:r,late:i,logs:r,pairs:t"
  expect "$db: history_retention kept" "$(psql_in $CL -d $db -Atc "select j->>'history_retention' from worlds.sql('show history_retention') j")" "2 days"
  expect "$db: merge policies kept" "$(psql_in $CL -d $db -Atc "select name || ' ' || max_rows || ' ' || review_tables from worlds.merge_policy")" "dumped 7 logs"
  expect "$db: merge checks kept" "$(psql_in $CL -d $db -Atc "select name || ' ' || tables::text from worlds.merge_check")" "dumped_check {logs}"
  expect "$db: registered readers and marks kept" "$(psql_in $CL -d $db -Atc "select string_agg(reader || ' ' || kind || ' ' || coalesce(\"table\", '-') || ' ' || critical, ', ') from worlds.show_readers() where kind <> 'client'")" "dumped_export registered logs true"
  expect "$db: capture triggers once per table" "$(psql_in $CL -d $db -Atc "select count(*) from pg_trigger where tgname like 'worlds_capture%'")" 10
  expect "$db: the worlds came back" "$(psql_in $CL -d $db -Atc "select string_agg(name || '<' || coalesce(parent, '-'), ',' order by depth) from worlds.show_worlds()")" "main<-,w1<main,w2<w1"
  expect "$db: w1's changes" "$(psql_in $CL -d $db -qAt -c "set worlds.world = w1" -c "select (select v from early where id = 1) || ',' || (select v from late where id = 100) || ',' || (select string_agg(line, '' order by line) from logs)")" "in w1,w1,aaw1w1"
  expect "$db: w1's changes to a composite key and a keyless table of several columns" "$(psql_in $CL -d $db -qAt -c "set worlds.world = w1" -c "select (select string_agg(a || b || v, ' ' order by a) from pairs) || ',' || (select string_agg(msg || n, ' ' order by msg) from events)")" "1x10,e1 e1 w13"
  expect "$db: w2's changes on w1's" "$(psql_in $CL -d $db -qAt -c "set worlds.world = w2" -c "select (select v from early where id = 1) || ',' || (select v from late where id = 100) || ',' || (select count(*) from early)")" "in w1,in w2,49"
  expect "$db: DIFF of w2 against w1" "$(psql_in $CL -d $db -Atc "select string_agg(j->>'table' || ':' || (j->>'id') || ':' || (j->>'change'), ',' order by j->>'table') from worlds.sql('diff world w2') j" 2>/dev/null)" "early:50:delete,late:100:update"
  expect "$db: main's rows untouched by that" "$(checksum $db)" "$want"
  psql_in $CL -d $db -q -c "select * from worlds.sql('create world again')" >/dev/null
  expect "$db: a new world writes" "$(psql_in $CL -d $db -qAt -c "set worlds.world = again" -c "update early set v = 'x' where id = 3 returning v")" "x"
  expect "$db: main unchanged by it" "$(psql_in $CL -d $db -Atc "select v from early where id = 3")" "e3"
  local before changes
  before=$(psql_in $CL -d $db -Atc "select clock_timestamp()")
  sleep 0.05
  psql_in $CL -d $db -q -c "update late set v = 'captured' where id = 5"
  changes=$(psql_in $CL -d $db -Atc "select changes from worlds.tables where relid = 'late'::regclass")
  expect "$db: history captures main's writes" "$(psql_in $CL -d $db -Atc "select count(*) from $changes where _w_op = 'U' and id = 5")" 1
  expect "$db: AS OF reads the past" "$(psql_in $CL -d $db -Atc "select j->>'v' from worlds.sql(format('select v from late as of %L where id = 5', '$before'::text)) j" 2>&1)" "l5"
}

echo "check: psql restores the plain dump with no error"
fresh s10_dump_plain
if psql_in $CL -d s10_dump_plain -q -v ON_ERROR_STOP=1 -f "$OUT/plain.sql" >"$OUT/plain.log" 2>&1; then
  echo "  ok   plain restore"
else
  tail -5 "$OUT/plain.log"; bad "psql stopped on an error restoring the plain dump"
fi
grep -E 'ERROR' "$OUT/plain.log" | head -5 && bad "errors in the plain restore"
sleep 0.3
restored_checks s10_dump_plain

echo "check: pg_restore --exit-on-error restores the custom dump"
fresh s10_dump_custom
if as_pg pg_restore -h "$dir/sock" -p "$port" -U postgres --exit-on-error -d s10_dump_custom "$OUT/custom.dump" >"$OUT/custom.log" 2>&1; then
  echo "  ok   custom restore"
else
  tail -5 "$OUT/custom.log"; bad "pg_restore stopped on an error"
fi
sleep 0.3
restored_checks s10_dump_custom

for db in $SRC s10_dump_plain s10_dump_custom; do psql_in $CL -q -c "drop database $db"; done
[ $failures -eq 0 ] || { echo "10_dump_restore: $failures check(s) failed" >&2; exit 1; }
echo "ok: 10_dump_restore"
