#!/usr/bin/env bash
# A merge into main is one transaction of ordinary DML on the real tables.
# (a) a merge touching several tables whose last table fails (23505: main added the same value of a UNIQUE
#     column that isn't the key after the fork), and one whose first table fails, leave every table of main
#     exactly as before (checksums) and the world intact (its diff and its reads); once main's clashing row
#     is gone, the same world merges in full. The same for a foreign key (23503).
# (b) the app's own triggers fire during a merge into main: an AFTER UPDATE trigger writing audit rows gets
#     exactly one row per updated row (and AFTER INSERT / DELETE ones too), running under the session's
#     search_path, so a trigger function naming its audit table unqualified (as apps do) works.
# (c) a session inside the world being merged ends in main (SHOW worlds.world = main) and reads the merged
#     rows: through worlds.merge('w'), MERGE WORLD with no name, and a world set in the connection string.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s08_merge_atomic
OUT=$RUN_DIR/s08_merge_atomic; rm -rf "$OUT"; mkdir -p "$OUT"
CONN=$(conninfo $CL $DB)
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
-- created in this order, so relid order (the merge's lock order) is t0, t1, t2, t3
create table t0 (id int primary key, code text unique, v int not null);
create table t1 (id int primary key, v int not null);
create table t2 (id int primary key, txt text);
create table t3 (id int primary key, code text not null unique, v int not null);
insert into t0 select g, 'c' || g, g from generate_series(1, 5) g;
insert into t1 select g, g * 10 from generate_series(1, 10) g;
insert into t2 select g, 'r' || g from generate_series(1, 10) g;
insert into t3 select g, 'k' || g, g from generate_series(1, 5) g;
create table parent (id int primary key, name text not null);
create table child (id int primary key, pid int not null references parent, v int not null);
insert into parent select g, 'p' || g from generate_series(1, 5) g;
insert into child values (1, 1, 1), (2, 2, 2);
SQL

q() { psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "$2"; }
exists() { q main "select count(*) from worlds.show_worlds() where name = '$1'"; }
sqlstate() { echo "$1" | grep -o 'ERROR:  [0-9A-Z]\{5\}' | head -1 | cut -c9-; }
# merge_out SQL: runs SQL in main (timeout 60); prints its output and stderr; returns psql's status
merge_out() { timeout 60 $PGBIN/psql "$CONN" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$1" 2>&1; }
# sums WORLD: a checksum of every table, read in WORLD
SUMS="select concat_ws(' ',
  (select count(*) || ':' || md5(coalesce(string_agg(t::text, ',' order by id), '')) from t0 t),
  (select count(*) || ':' || md5(coalesce(string_agg(t::text, ',' order by id), '')) from t1 t),
  (select count(*) || ':' || md5(coalesce(string_agg(t::text, ',' order by id), '')) from t2 t),
  (select count(*) || ':' || md5(coalesce(string_agg(t::text, ',' order by id), '')) from t3 t),
  (select count(*) || ':' || md5(coalesce(string_agg(t::text, ',' order by id), '')) from parent t),
  (select count(*) || ':' || md5(coalesce(string_agg(t::text, ',' order by id), '')) from child t))"
sums() { q "$1" "$SUMS"; }
DIFF="select string_agg(\"table\" || '/' || id || ':' || change || ':' || coalesce(after::text, '-'), ',' order by \"table\", id)"

# refused NAME WANT_STATE FIX_SQL WANT_TAG: main's tables and NAME's diff and reads are recorded; merging NAME
# must fail with WANT_STATE and change nothing anywhere; after FIX_SQL in main it must merge with WANT_TAG.
refused() {
  local w=$1 want=$2 fix=$3 tag=$4 main0 world0 diff0 out
  main0=$(sums main); world0=$(sums $w); diff0=$(q main "$DIFF from worlds.diff('$w')" 2>/dev/null)
  echo "    $w's diff: $diff0"
  if out=$(merge_out "select worlds.merge('$w')"); then bad "$w: merge expected to fail with $want, it succeeded: $out"
  else
    expect "$w: merge SQLSTATE" "$(sqlstate "$out")" "$want"
    echo "    $(echo "$out" | grep -m1 ERROR)"
  fi
  expect "$w: every table of main as before (checksums)" "$(sums main)" "$main0"
  expect "$w: world still exists" "$(exists $w)" 1
  expect "$w: world's diff as before" "$(q main "$DIFF from worlds.diff('$w')" 2>/dev/null)" "$diff0"
  expect "$w: world reads as before (checksums)" "$(sums $w)" "$world0"
  expect "$w: no lock left behind: main's tables lock at once" \
    "$(q main "begin; set local lock_timeout = '2s'; lock table t0, t1, t2, t3, parent, child in access exclusive mode; commit; select 'free'")" free
  psql_in $CL -d $DB -q -c "$fix"
  if out=$(merge_out "select worlds.merge('$w')"); then
    expect "$w: merge after the fix" "$(echo "$out" | grep MERGE)" "$tag"
    expect "$w: main now reads as the world did (checksums)" "$(sums main)" "$world0"
    expect "$w: world dropped" "$(exists $w)" 0
  else bad "$w: merge after '$fix' failed: $out"; fi
}

echo "check (a1): a merge of t0..t3 whose last table (t3) breaks a UNIQUE column (not the key) fails with 23505, all or nothing"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('u_last')" >/dev/null
q u_last "update t0 set v = v + 100 where id in (1, 2); insert into t0 values (6, 'c6', 6);
          update t1 set v = v + 1 where id <= 5; delete from t1 where id = 10; insert into t1 values (11, 110);
          update t2 set txt = 'changed' where id in (3, 4); delete from t2 where id = 9;
          update t3 set v = v + 1 where id = 1; insert into t3 values (100, 'dup', 100);" >/dev/null
# main, after the fork: the same code in t3 under another key
psql_in $CL -d $DB -q -c "insert into t3 values (200, 'dup', 200)"
# the fix: main's row goes; the world's t3 then merges; main's checksums afterwards must be the world's
refused u_last 23505 "delete from t3 where id = 200" "MERGE 15"

echo "check (a2): the same with the first table (t0) breaking its UNIQUE column"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('u_first')" >/dev/null
q u_first "insert into t0 values (50, 'same', 50);
           update t1 set v = v * 2 where id between 6 and 9;
           insert into t2 values (50, 'fifty');
           update t3 set code = 'k1b' where id = 1; delete from t3 where id = 5;" >/dev/null
psql_in $CL -d $DB -q -c "insert into t0 values (60, 'same', 60)"
refused u_first 23505 "delete from t0 where id = 60" "MERGE 8"

echo "check (a3): a merge of t1, t2 and child whose child row's parent main deleted after the fork fails with 23503"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('fk')" >/dev/null
q fk "update t1 set v = -1 where id = 1; update t2 set txt = null where id = 1;
      update parent set name = 'P1' where id = 1; insert into child values (10, 5, 10);" >/dev/null
psql_in $CL -d $DB -q -c "delete from parent where id = 5"
refused fk 23503 "insert into parent values (5, 'p5')" "MERGE 4"

echo "check (b): the app's triggers fire during a merge into main"
# items: the app's trigger function names its audit table unqualified, as app code does (it relies on the
# session's search_path). items_q: the same with the audit table schema-qualified, and it records the
# search_path the trigger ran under.
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create table items (id int primary key, qty int not null);
insert into items select g, g from generate_series(1, 10) g;
create table audit (n serial primary key, op text not null, id int not null, old_qty int, new_qty int);
create function audit_items() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then insert into audit (op, id, old_qty) values (tg_op, old.id, old.qty); return old; end if;
  if tg_op = 'INSERT' then insert into audit (op, id, new_qty) values (tg_op, new.id, new.qty); return new; end if;
  insert into audit (op, id, old_qty, new_qty) values (tg_op, new.id, old.qty, new.qty);
  return new;
end $$;
create trigger items_audit_upd after update on items for each row execute function audit_items();
create table items_q (id int primary key, qty int not null);
insert into items_q select g, g from generate_series(1, 10) g;
create table audit_q (n serial primary key, op text not null, id int not null, old_qty int, new_qty int,
                      path text, who text);
create function audit_items_q() returns trigger language plpgsql as $$
begin
  if tg_op = 'DELETE' then
    insert into public.audit_q (op, id, old_qty, path, who) values (tg_op, old.id, old.qty, current_setting('search_path'), current_user::text);
    return old;
  end if;
  if tg_op = 'INSERT' then
    insert into public.audit_q (op, id, new_qty, path, who) values (tg_op, new.id, new.qty, current_setting('search_path'), current_user::text);
    return new;
  end if;
  insert into public.audit_q (op, id, old_qty, new_qty, path, who) values (tg_op, new.id, old.qty, new.qty, current_setting('search_path'), current_user::text);
  return new;
end $$;
create trigger items_q_audit after insert or update or delete on items_q for each row execute function audit_items_q();
-- a row written in main itself fires them once
update items set qty = qty where id = 10;
update items_q set qty = qty where id = 10;
SQL
expect "(b) main's own update fires the triggers" "$(q main "select (select count(*) from audit) || ' ' || (select count(*) from audit_q)")" "1 1"
MAINPATH=$(q main "select path from audit_q")
echo "    (search_path in main's own trigger: $MAINPATH)"

echo "check (b1): an AFTER UPDATE trigger (schema-qualified audit table) gets one row per merged update"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('trigq')" >/dev/null
q trigq "update items_q set qty = qty + 100 where id in (2, 4, 6)" >/dev/null
echo "    (audit_q rows seen in world trigq after its update: $(q trigq "select count(*) from audit_q"))"
nmax=$(q main "select max(n) from audit_q")
if out=$(merge_out "select worlds.merge('trigq')"); then
  expect "(b1) merge trigq" "$(echo "$out" | grep MERGE)" "MERGE 3"
  expect "(b1) audit_q rows added by the merge" \
    "$(q main "select string_agg(op || ' ' || id || ' ' || old_qty || '->' || new_qty || ' ' || who, ',' order by id) from audit_q where n > $nmax")" \
    "UPDATE 2 2->102 postgres,UPDATE 4 4->104 postgres,UPDATE 6 6->106 postgres"
  expect "(b1) main items_q" "$(q main "select string_agg(qty::text, ',' order by id) from items_q")" "1,102,3,104,5,106,7,8,9,10"
  expect "(b1) the trigger ran under the session's search_path" "$(q main "select string_agg(distinct path, ' | ') from audit_q where n > $nmax")" "$MAINPATH"
else bad "(b1) merge trigq failed: $out"; fi

echo "check (b2): AFTER INSERT and AFTER DELETE fire too, once per merged row"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('trigq2')" >/dev/null
q trigq2 "insert into items_q values (11, 11), (12, 12); delete from items_q where id = 1; update items_q set qty = 0 where id = 3" >/dev/null
nmax=$(q main "select max(n) from audit_q")
if out=$(merge_out "select worlds.merge('trigq2')"); then
  expect "(b2) merge trigq2" "$(echo "$out" | grep MERGE)" "MERGE 4"
  expect "(b2) audit_q rows added by trigq2's merge" \
    "$(q main "select string_agg(op || ' ' || id || ' ' || coalesce(old_qty::text, '') || '->' || coalesce(new_qty::text, ''), ',' order by op, id) from audit_q where n > $nmax")" \
    "DELETE 1 1->,INSERT 11 ->11,INSERT 12 ->12,UPDATE 3 3->0"
else bad "(b2) merge trigq2 failed: $out"; fi

echo "check (b3): the app's trigger as apps write it (audit table unqualified) works during a merge: 3 updates, 3 audit rows"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('trig')" >/dev/null
q trig "update items set qty = qty + 100 where id in (2, 4, 6)" >/dev/null
items0=$(q main "select string_agg(qty::text, ',' order by id) from items")
audit0=$(q main "select count(*) from audit")
if out=$(merge_out "select worlds.merge('trig')"); then
  expect "(b3) merge trig" "$(echo "$out" | grep MERGE)" "MERGE 3"
  expect "(b3) audit rows added by the merge" "$(q main "select count(*) - $audit0 from audit")" 3
  expect "(b3) the audit rows are the merged updates" \
    "$(q main "select string_agg(op || ' ' || id || ' ' || old_qty || '->' || new_qty, ',' order by id) from audit where n > (select min(n) from audit)")" \
    "UPDATE 2 2->102,UPDATE 4 4->104,UPDATE 6 6->106"
  expect "(b3) main items" "$(q main "select string_agg(qty::text, ',' order by id) from items")" "1,102,3,104,5,106,7,8,9,10"
else
  bad "(b3) merge trig failed: $(echo "$out" | grep -m1 ERROR)"
  expect "(b3) the failed merge changed nothing in main" "$(q main "select string_agg(qty::text, ',' order by id) from items")" "$items0"
  expect "(b3) the failed merge kept world trig" "$(exists trig)" 1
fi

echo "check (c): a session inside the world being merged ends in main and reads the merged rows"
# c1: worlds.merge('w') from inside w
psql_in $CL -d $DB -qAt -c "select worlds.create_world('inside')" >/dev/null
got=$(psql_in $CL -d $DB -qAt -v VERBOSITY=verbose 2>&1 <<'SQL'
set worlds.world = inside;
insert into t1 values (500, 5000);
update t2 set txt = 'from inside' where id = 2;
select worlds.merge('inside');
show worlds.world;
select 'rows', (select v from t1 where id = 500), (select txt from t2 where id = 2);
insert into t1 values (501, 5010);
SQL
) || bad "(c1) session failed: $got"
echo "$got" | sed 's/^/    | /'
expect "(c1) merge tag" "$(echo "$got" | grep '^MERGE')" "MERGE 2"
expect "(c1) worlds.world after merging its own world" "$(echo "$got" | grep -x -E 'main|inside')" main
expect "(c1) the session reads the merged rows" "$(echo "$got" | grep '^rows|')" "rows|5000|from inside"
expect "(c1) its next write went to main" "$(q main "select v from t1 where id = 501")" 5010
expect "(c1) world inside dropped" "$(exists inside)" 0
# c2: MERGE WORLD with no name (the session's world), through worlds.sql
psql_in $CL -d $DB -qAt -c "select worlds.create_world('inside2')" >/dev/null
got=$(psql_in $CL -d $DB -qAt -v VERBOSITY=verbose 2>&1 <<'SQL'
select worlds.switch_world('inside2');
delete from t1 where id = 500;
select * from worlds.sql('merge world');
select current_setting('worlds.world');
select 'rows', (select count(*) from t1 where id = 500);
SQL
) || bad "(c2) session failed: $got"
echo "$got" | sed 's/^/    | /'
expect "(c2) merge result" "$(echo "$got" | grep 'MERGE')" '{"tag": "MERGE 1"}'
expect "(c2) worlds.world after MERGE WORLD" "$(echo "$got" | grep -x -E 'main|inside2')" main
expect "(c2) the session reads main with the row deleted" "$(echo "$got" | grep '^rows|')" "rows|0"
expect "(c2) world inside2 dropped" "$(exists inside2)" 0
# c3: a session started in the world by its connection string
psql_in $CL -d $DB -qAt -c "select worlds.create_world('inside3')" >/dev/null
got=$($PGBIN/psql "$CONN options='-c worlds.world=inside3'" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose 2>&1 <<'SQL'
update t1 set v = 777 where id = 7;
select worlds.merge('inside3');
show worlds.world;
select 'rows', v from t1 where id = 7;
SQL
) || bad "(c3) session failed: $got"
echo "$got" | sed 's/^/    | /'
expect "(c3) worlds.world after merging" "$(echo "$got" | grep -x -E 'main|inside3')" main
expect "(c3) the session reads the merged row" "$(echo "$got" | grep '^rows|')" "rows|777"
expect "(c3) main reads it" "$(q main "select v from t1 where id = 7")" 777
# c4: a merge from inside the world that fails leaves the session in the world, its rows intact
psql_in $CL -d $DB -qAt -c "select worlds.create_world('inside4')" >/dev/null
psql_in $CL -d $DB -q -c "update t1 set v = 1 where id = 8"
got=$(psql_in $CL -d $DB -qAt -v VERBOSITY=verbose 2>&1 <<'SQL'
set worlds.world = inside4;
update t1 set v = 2 where id = 8;
\set ON_ERROR_STOP 0
select worlds.merge('inside4');
\set ON_ERROR_STOP 1
show worlds.world;
select 'rows', v from t1 where id = 8;
SQL
) || bad "(c4) session failed: $got"
echo "$got" | sed 's/^/    | /'
expect "(c4) the conflicting merge's SQLSTATE" "$(sqlstate "$got")" 40001
expect "(c4) worlds.world after a failed merge" "$(echo "$got" | grep -x -E 'main|inside4')" inside4
expect "(c4) the session still reads its world's row" "$(echo "$got" | grep '^rows|')" "rows|2"
expect "(c4) main keeps its row" "$(q main "select v from t1 where id = 8")" 1

if [ $failures -ne 0 ]; then echo "08_merge_atomic: $failures check(s) failed (outputs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 08_merge_atomic"
