#!/usr/bin/env bash
# Privileges hold inside a world exactly as in main: a role with SELECT/INSERT/UPDATE reads and writes the
# world (and still can't DELETE); a role without rights gets 42501 on the table and can't reach the
# generated storage in worlds_data; column grants and row-level security apply in the world too.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s06_roles
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" \
  -c "drop role if exists app" -c "drop role if exists nobody" \
  -c "create role app login" -c "create role nobody login" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, secret text not null, v int not null default 0);
insert into t values (1, 's1', 10), (2, 's2', 20), (3, 's3', 30);
grant select, insert, update on t to app;
-- row-level security: each role sees only its own rows
create table docs (id int primary key, owner text not null, body text);
insert into docs values (1, 'app', 'mine'), (2, 'nobody', 'theirs'), (3, 'app', 'mine too');
alter table docs enable row level security;
create policy own on docs using (owner = current_user);
grant select, insert on docs to app, nobody;
grant update, delete on docs to app;
select worlds.create_world('w1');
SQL
CONN=$(conninfo $CL $DB)
OVERLAY=$(psql_in $CL -d $DB -qAt -c "select overlay::text from worlds.tables where relid = 't'::regclass")
DELTA=$(psql_in $CL -d $DB -qAt -c "select delta::text from worlds.tables where relid = 't'::regclass")
HISTORY=$(psql_in $CL -d $DB -qAt -c "select history::text from worlds.tables where relid = 't'::regclass")
echo "  generated storage of t: $OVERLAY $DELTA $HISTORY"
[ -n "$OVERLAY" ] && [ -n "$DELTA" ] || fail "worlds.tables has no storage for t"

# as ROLE WORLD SQL...: psql logged in as ROLE, starting in WORLD; prints output (stderr too), returns psql's rc
as() {
  local role=$1 world=$2; shift 2
  local a=(); for s in "$@"; do a+=(-c "$s"); done
  $PGBIN/psql "$CONN user=$role options='-c worlds.world=$world'" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "${a[@]}" 2>&1
}
ok() { # ok WHAT EXPECTED ROLE WORLD SQL...: must succeed with that output
  local what=$1 want=$2 out; shift 2
  if out=$(as "$@"); then expect "$what" "$out" "$want"; else bad "$what: expected success, got: $out"; fi
}
denied() { # denied WHAT ROLE WORLD SQL...: must fail with 42501, "permission denied"
  local what=$1 out; shift
  if out=$(as "$@"); then bad "$what: expected 42501, but it succeeded: $out"; return; fi
  if grep -q "ERROR:  42501: permission denied" <<<"$out"; then
    echo "  ok   $what -> $(echo "$out" | grep -m1 ERROR)"
  else bad "$what: expected 'ERROR:  42501: permission denied...', got: $out"; fi
}
ROWS="select string_agg(id || ':' || secret || ':' || v, ',' order by id) from t"

echo "check: app reads and writes t in world w1 (SELECT, INSERT, UPDATE granted)"
ok "app: current_user, SHOW worlds.world" "app|w1" app w1 "select current_user, current_setting('worlds.world')"
ok "app: rows in w1" "1:s1:10,2:s2:20,3:s3:30" app w1 "$ROWS"
ok "app: insert and update in w1" "" app w1 "insert into t values (4, 's4', 40)" "update t set v = v + 1 where id in (1, 4)"
ok "app: rows in w1 after its writes" "1:s1:11,2:s2:20,3:s3:30,4:s4:41" app w1 "$ROWS"
ok "app: insert ... returning in w1" "5:0" app w1 "insert into t (id, secret) values (5, 's5') returning id || ':' || v"
ok "main unchanged" "1:s1:10,2:s2:20,3:s3:30" app main "$ROWS"
denied "app: DELETE in w1 (not granted)" app w1 "delete from t where id = 2"
denied "app: DELETE in main (not granted)" app main "delete from t where id = 2"
ok "app: row 2 still there in w1" "1" app w1 "select count(*) from t where id = 2"

echo "check: app can't read or write the generated storage directly"
denied "app: select from the overlay view" app w1 "select count(*) from $OVERLAY"
denied "app: select from the delta table" app w1 "select count(*) from $DELTA"
denied "app: select from the history table" app main "select count(*) from $HISTORY"
denied "app: insert into the delta table" app main "insert into $DELTA default values"

echo "check: nobody (no grants on t) is refused in w1 exactly as in main"
denied "nobody: select * from t in main" nobody main "select * from t"
denied "nobody: select * from t in w1" nobody w1 "select * from t"
denied "nobody: select count(*) from t in w1" nobody w1 "select count(*) from t"
denied "nobody: t in a sub-query in w1" nobody w1 "select 1 where exists (select 1 from t)"
denied "nobody: t in a CTE in w1" nobody w1 "with x as (select id from t) select count(*) from x"
denied "nobody: insert into t in w1" nobody w1 "insert into t values (9, 's9', 0)"
denied "nobody: update t in w1" nobody w1 "update t set v = 0"
denied "nobody: select from the overlay view" nobody w1 "select * from $OVERLAY"
denied "nobody: select from the delta table" nobody w1 "select * from $DELTA"
out=$(as nobody w1 "select * from t" || true)
grep -q 'permission denied for table t' <<<"$out" \
  || bad "nobody's error in w1 should name table t (as main does), got: $out"

echo "check: column privileges: nobody gets SELECT (id) only"
psql_in $CL -d $DB -q -c "grant select (id) on t to nobody"
ok "nobody: select id in main" "1,2,3" nobody main "select string_agg(id::text, ',' order by id) from t"
ok "nobody: select id in w1 (sees the world's rows)" "1,2,3,4,5" nobody w1 "select string_agg(id::text, ',' order by id) from t"
ok "nobody: count(*) in w1" "5" nobody w1 "select count(*) from t"
denied "nobody: select * in w1" nobody w1 "select * from t"
denied "nobody: select secret in w1" nobody w1 "select secret from t where id = 1"
denied "nobody: where on secret in w1" nobody w1 "select id from t where secret = 's1'"
denied "nobody: select * in main" nobody main "select * from t"

echo "check: row-level security: a world never shows a role rows main would hide"
# Either the world applies the policies exactly as main does, or it refuses the table with 0A000; it must
# never return rows the policy hides, nor accept a row the policy's check refuses.
rls() { # rls WHAT EXPECTED ROLE WORLD SQL...: that output, or a 0A000 refusal
  local what=$1 want=$2 out; shift 2
  if out=$(as "$@"); then expect "$what" "$out" "$want"
  elif grep -q "ERROR:  0A000:" <<<"$out"; then echo "  ok   $what -> refused: $(echo "$out" | grep -m1 ERROR)"; RLS_REFUSED=1
  else bad "$what: expected '$want' or a 0A000 refusal, got: $out"; fi
}
policy_refuses() { # policy_refuses WHAT ROLE WORLD SQL: fails with Postgres's row-level security error (42501)
  local what=$1 out; shift
  if out=$(as "$@"); then bad "$what: should fail the policy (42501), but succeeded"
  elif grep -q "ERROR:  42501: new row violates row-level security policy" <<<"$out"; then
    echo "  ok   $what -> $(echo "$out" | grep -m1 ERROR)"
  else bad "$what: expected 42501 row-level security, got: $out"; fi
}
RLS_REFUSED=0
ok "app: docs in main" "1,3" app main "select string_agg(id::text, ',' order by id) from docs"
ok "nobody: docs in main" "2" nobody main "select string_agg(id::text, ',' order by id) from docs"
rls "app: docs in w1" "1,3" app w1 "select string_agg(id::text, ',' order by id) from docs"
rls "nobody: docs in w1" "2" nobody w1 "select string_agg(id::text, ',' order by id) from docs"
rls "nobody: docs count(*) in w1" "1" nobody w1 "select count(*) from docs"
rls "nobody: docs by id in w1" "0" nobody w1 "select count(*) from docs where id = 1"
rls "app: insert into docs in w1" "" app w1 "insert into docs values (4, 'app', 'world doc')"
if [ $RLS_REFUSED -eq 0 ]; then
  rls "app: docs in w1 after insert" "1,3,4" app w1 "select string_agg(id::text, ',' order by id) from docs"
  rls "nobody: docs in w1 after app's insert" "2" nobody w1 "select string_agg(id::text, ',' order by id) from docs"
  ok "superuser: docs in w1" "1,2,3,4" postgres w1 "select string_agg(id::text, ',' order by id) from docs"
  policy_refuses "app: insert another role's row into docs in w1" app w1 "insert into docs values (5, 'nobody', 'x')"
  # UPDATE and DELETE reach only the rows the policy shows; a new row must pass it too
  ok "app: update every doc in w1 (only its own)" "1,3,4" app w1 "with u as (update docs set body = 'edited' returning id) select string_agg(id::text, ',' order by id) from u"
  ok "app: delete another role's doc in w1 (invisible)" "" app w1 "with d as (delete from docs where id = 2 returning id) select string_agg(id::text, ',') from d"
  policy_refuses "app: update its row to another owner in w1" app w1 "update docs set owner = 'nobody' where id = 1"
  ok "superuser: docs in w1 after app's update and delete" "1:edited,2:theirs,3:edited,4:edited" postgres w1 \
    "select string_agg(id || ':' || body, ',' order by id) from docs"
else
  echo "  note: worlds refuse tables with row-level security (0A000); checking nothing leaked"
  rls "app: another role's row in w1" "0" app w1 "select count(*) from docs where owner <> current_user"
  if out=$(as app w1 "insert into docs values (5, 'nobody', 'x')"); then
    bad "app: inserting another role's row into docs in w1 succeeded (the policy would refuse it in main)"
  elif grep -qE "ERROR:  (0A000|42501):" <<<"$out"; then
    echo "  ok   app: insert another role's row into docs in w1 -> $(echo "$out" | grep -m1 ERROR)"
  else bad "app: insert another role's row into docs in w1: expected 0A000 or 42501, got: $out"; fi
fi
ok "superuser: docs in main" "1,2,3" postgres main "select string_agg(id::text, ',' order by id) from docs"

if [ $failures -ne 0 ]; then echo "06_roles: $failures check(s) failed" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB" -c "drop role app" -c "drop role nobody"
echo "ok: 06_roles"
