#!/usr/bin/env bash
# Bad input to every SQL-callable function of pg_worlds: no call may end in an internal error (SQLSTATE
# class XX, e.g. XX000 from a Rust panic or pgrx's "argument N must not be null") or a crash.
#   - the functions are found, not listed: every function of the extension (pg_depend, deptype 'e') in any
#     of its schemas, except trigger / event trigger functions and handlers; a new function is covered
#     without a change here;
#   - each is called with all arguments NULL, NULL in each position (the others good), and, position by
#     position, odd values of the argument's type: empty and blank strings, quotes, 'main@', 'x@-1 hour',
#     100,000-character strings, names of things that don't exist, -1 / 0 / 2^31-1 / -2^63, infinities,
#     NaN, odd jsonb and arrays, rows of pg_worlds' own tables that are empty, stale or out of range;
#   - every call runs in a subtransaction of its own, rolled back whatever it did (so a call that drops
#     the fixtures' world drops it for itself only), once as superuser and once logged in as an ordinary
#     role (logged in: pg_worlds judges its own rights by session_user, which SET ROLE doesn't change);
#     a DO block per function (outside BEGIN, so statements refused in a transaction block run);
#     when a block fails as a whole (a crash, a cancel) its calls run one per session to find which;
#   - a call passes when it returns (its result is turned into text: output functions run on it) or raises
#     an error whose SQLSTATE is not of class XX;
#   - then every worlds.* setting is set to odd values (SET), and a tracked table read after each:
#     errors must have a real SQLSTATE;
#   - the server log must show no backend terminated by a signal.
# Every failing call is listed (function, role, arguments, SQLSTATE, message) and in $RUN_DIR/s28_bad_input.
source "$(dirname "$0")/common.sh"
start_cluster $CL yes
DB=s28_bad_input
OUT=$RUN_DIR/s28_bad_input; rm -rf "$OUT"; mkdir -p "$OUT"
LOG=$(cluster_dir $CL)/server.log
log_from=$(( $(stat -c %s "$LOG" 2>/dev/null || echo 0) + 1 ))
ROLE=s28_sweeper
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" \
  -c "drop role if exists s28_agent" -c "drop role if exists $ROLE" -c "create role $ROLE login" -c "create database $DB"
M() { psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 "$@" 2>&1; }
# alive: waits (up to 60 s) for the cluster to take connections (after a crash it restarts every backend)
alive() { for _ in $(seq 1 120); do psql_in $CL -qAt -c "select 1" >/dev/null 2>&1 && return 0; sleep 0.5; done; return 1; }

echo "setup: tables with rows, worlds with changes, a checkpoint, an agent, a policy, a merge check"
psql_in $CL -d $DB -q -v ON_ERROR_STOP=1 -v role=$ROLE >"$OUT/setup.log" 2>&1 <<'SQL' || { cat "$OUT/setup.log"; fail "setup"; }
set client_min_messages = warning;
create extension pg_worlds;
create table t1 (id int primary key, name text, n int);
create table t2 (id text primary key, v jsonb);
create table t3 (a int, b text);
create table t_gone (id int primary key);
create view v1 as select id, name from t1;
insert into t1 select g, 'r' || g, g from generate_series(1, 20) g;
insert into t2 select 'k' || g, jsonb_build_object('g', g) from generate_series(1, 5) g;
insert into t3 values (1, 'a'), (1, 'a'), (2, 'b');
insert into t_gone values (1);
grant select, insert, update, delete on t1, t2, t3 to :"role";
select * from worlds.sql('create world w1');
select * from worlds.sql('create world wd');
select * from worlds.sql('create merge policy s28_policy with (max_rows = 5)');
select * from worlds.sql('create agent s28_agent with (can = ''read,fork'')');
select * from worlds.sql('create merge check s28_check on tables (t1) as select id from t1 where n < 0');
SQL
psql_in $CL -d $DB -q -v ON_ERROR_STOP=1 >>"$OUT/setup.log" 2>&1 <<'SQL' || { cat "$OUT/setup.log"; fail "setup (world changes)"; }
set worlds.world = w1;
update t1 set name = 'changed' where id <= 3;
delete from t1 where id = 20;
insert into t1 values (21, 'new', 21);
update t2 set v = '{"g": 0}' where id = 'k1';
delete from t3 where a = 2;
reset worlds.world;
select * from worlds.sql('checkpoint world w1 as ''cp1''');
select * from worlds.sql('create world w2 from w1');
set worlds.world = w2;
update t1 set n = -n where id = 5;
reset worlds.world;
update t1 set n = 100 where id = 10;
SQL
# things gone: the rows of a dropped world and a dropped table stay in the catalog's shape (stale rows)
M -c "create table s28_stale as select (select w::text from worlds.world w where name = 'wd') as world_row, (select t::text from worlds.tables t where relid = 't_gone'::regclass) as table_row" >/dev/null
M -c "select * from worlds.sql('drop world wd')" -c "drop table t_gone" >/dev/null
fixtures_ok() { M -c "select count(*) from worlds.show_branches() where name = 'w1' and changes > 0"; }
expect "w1 has changes" "$(fixtures_ok)" 1

echo "setup: the values, and the calls they make"
psql_in $CL -d $DB -q -v ON_ERROR_STOP=1 -v role=$ROLE >>"$OUT/setup.log" 2>&1 <<'SQL' || { cat "$OUT/setup.log"; fail "generator"; }
set client_min_messages = warning;
select set_config('sweep.role', :'role', false);
create schema sweep;
-- values by type: good ones (one per type, used beside a bad or NULL argument) and bad ones
create table sweep.vals (typ regtype not null, good boolean not null, expr text not null, ord serial);
insert into sweep.vals (typ, good, expr)
select typ::regtype, g, e from (values
  ('text', true, $$'w1'$$),
  ('text', false, $$''$$), ('text', false, $$' '$$), ('text', false, $$'a"b'$$), ('text', false, $$'a''b'$$),
  ('text', false, $$'"'$$), ('text', false, $$'@'$$), ('text', false, $$'main@'$$), ('text', false, $$'w1@'$$),
  ('text', false, $$'x@-1 hour'$$), ('text', false, $$'w1@-1 hour'$$), ('text', false, $$'main@-100 years'$$),
  ('text', false, $$'w1@infinity'$$), ('text', false, $$'main@-infinity'$$), ('text', false, $$'w1@9999-12-31'$$),
  ('text', false, $$'main@294277-01-01'$$), ('text', false, $$'select'$$), ('text', false, $$'main'$$),
  ('text', false, $$'nosuch'$$), ('text', false, $$'w000000-0000000000'$$), ('text', false, $$'-1'$$),
  ('text', false, $$'9223372036854775808'$$), ('text', false, $$'t1/1'$$), ('text', false, $$'t1/'$$),
  ('text', false, $$E'a\nb\tc'$$), ('text', false, $$'é€😀'$$), ('text', false, $$repeat('x', 100000)$$),
  ('text', false, $$repeat('é', 50000)$$), ('text', false, $$'_tx_1'$$),
  ('text[]', true, $$'{t1}'$$),
  ('text[]', false, $$'{}'$$), ('text[]', false, $$'{NULL}'$$), ('text[]', false, $$'{""}'$$), ('text[]', false, $$'{" "}'$$),
  ('text[]', false, $$'{nosuch}'$$), ('text[]', false, $$'{t1/abc}'$$), ('text[]', false, $$'{t1/}'$$), ('text[]', false, $$'{/1}'$$),
  ('text[]', false, $$'{"a\"b"}'$$), ('text[]', false, $$'{main@,x@-1 hour}'$$), ('text[]', false, $$'{{t1,t2},{t3,t1}}'$$),
  ('text[]', false, $$array[repeat('x', 100000)]$$), ('text[]', false, $$array_fill('t1'::text, array[10000])$$),
  ('text[]', false, $$'[0:0]={t1}'$$),
  ('jsonb', true, $$'{}'$$),
  ('jsonb', false, $$'null'$$), ('jsonb', false, $$'[]'$$), ('jsonb', false, $$'"x"'$$), ('jsonb', false, $$'0'$$),
  ('jsonb', false, $$'true'$$), ('jsonb', false, $$'{"": ""}'$$), ('jsonb', false, $$'{"a": null}'$$),
  ('jsonb', false, $$'{"a\"b": "''"}'$$), ('jsonb', false, $$'{"_worlds": 1}'$$),
  ('jsonb', false, $$'{"k": {"n": [1, {"x": null}]}}'$$), ('jsonb', false, $$'{"max_rows": -1}'$$),
  ('jsonb', false, $$'{"max_rows": 1e300}'$$), ('jsonb', false, $$'{"max_rows": "x"}'$$), ('jsonb', false, $$'{"max_rows": null}'$$),
  ('jsonb', false, $$'{"max_worlds": 9223372036854775808}'$$), ('jsonb', false, $$'{"can": 123}'$$),
  ('jsonb', false, $$'{"can": ["nosuch"]}'$$), ('jsonb', false, $$'{"t1/1": "ours"}'$$), ('jsonb', false, $$'{"t1/1": {"id": "x"}}'$$),
  ('jsonb', false, $$'{"nosuch/1": "theirs"}'$$), ('jsonb', false, $$'{"ttl": "-1 hour"}'$$), ('jsonb', false, $$'{"timeout": -1}'$$),
  ('jsonb', false, $$'{"tables": ["nosuch"]}'$$), ('jsonb', false, $$'{"policy": "nosuch"}'$$), ('jsonb', false, $$'{"tenant": {"": null}}'$$),
  ('jsonb', false, $$jsonb_build_object('k', repeat('x', 100000))$$),
  ('jsonb', false, $$(repeat('[', 2000) || repeat(']', 2000))::jsonb$$),
  ('jsonb', false, $$('{"t1/1": ' || repeat('[', 200) || repeat(']', 200) || '}')::jsonb$$),
  ('integer', true, $$1$$),
  ('integer', false, $$-1$$), ('integer', false, $$0$$), ('integer', false, $$2147483647$$), ('integer', false, $$-2147483648$$),
  ('bigint', true, $$1$$),
  ('bigint', false, $$-1$$), ('bigint', false, $$0$$), ('bigint', false, $$2147483647$$),
  ('bigint', false, $$9223372036854775807$$), ('bigint', false, $$-9223372036854775808$$),
  ('smallint', true, $$1$$),
  ('smallint', false, $$-1$$), ('smallint', false, $$0$$), ('smallint', false, $$32767$$), ('smallint', false, $$-32768$$),
  ('numeric', true, $$1$$),
  ('numeric', false, $$'NaN'$$), ('numeric', false, $$'Infinity'$$), ('numeric', false, $$'-Infinity'$$), ('numeric', false, $$-1$$),
  ('numeric', false, $$0$$), ('numeric', false, $$'1e1000'$$), ('numeric', false, $$'-9223372036854775809'$$),
  ('double precision', true, $$1$$),
  ('double precision', false, $$'NaN'$$), ('double precision', false, $$'Infinity'$$), ('double precision', false, $$'-Infinity'$$),
  ('double precision', false, $$-1$$), ('double precision', false, $$0$$), ('double precision', false, $$1e308$$),
  ('double precision', false, $$-1e308$$),
  ('boolean', true, $$false$$), ('boolean', false, $$true$$),
  ('timestamp with time zone', true, $$now()$$),
  ('timestamp with time zone', false, $$'infinity'$$), ('timestamp with time zone', false, $$'-infinity'$$),
  ('timestamp with time zone', false, $$'4713-01-01 00:00+00 BC'$$), ('timestamp with time zone', false, $$'294276-12-31 23:59+00'$$),
  ('timestamp with time zone', false, $$'epoch'$$), ('timestamp with time zone', false, $$now() + interval '100 years'$$),
  ('timestamp with time zone', false, $$now() - interval '1 second'$$),
  ('timestamp without time zone', true, $$localtimestamp$$),
  ('timestamp without time zone', false, $$'infinity'$$), ('timestamp without time zone', false, $$'-infinity'$$),
  ('timestamp without time zone', false, $$'4713-01-01 BC'$$), ('timestamp without time zone', false, $$'294276-12-31 23:59'$$),
  ('timestamp without time zone', false, $$'epoch'$$),
  ('date', true, $$current_date$$),
  ('date', false, $$'infinity'$$), ('date', false, $$'-infinity'$$), ('date', false, $$'4713-01-01 BC'$$),
  ('date', false, $$'5874897-12-31'$$), ('date', false, $$'epoch'$$),
  ('interval', true, $$'1 hour'$$),
  ('interval', false, $$'-1 hour'$$), ('interval', false, $$'0'$$), ('interval', false, $$'1 microsecond'$$),
  ('interval', false, $$'178000000 years'$$), ('interval', false, $$'-178000000 years'$$),
  ('regclass', true, $$'t1'$$),
  ('regclass', false, $$0$$), ('regclass', false, $$'pg_class'$$), ('regclass', false, $$'worlds.world'$$),
  ('regclass', false, $$'t1_pkey'$$), ('regclass', false, $$'v1'$$), ('regclass', false, $$'t3'$$),
  ('regclass', false, $$'sweep.vals'$$), ('regclass', false, $$4294967295$$), ('regclass', false, $$999999$$),
  ('oid', true, $$'t1'::regclass$$),
  ('oid', false, $$0$$), ('oid', false, $$1$$), ('oid', false, $$4294967295$$), ('oid', false, $$'pg_class'::regclass$$),
  ('oid', false, $$'int4'::regtype$$), ('oid', false, $$'worlds.world'::regclass$$),
  ('oid[]', true, $$array['t1'::regclass::oid]$$),
  ('oid[]', false, $$'{}'$$), ('oid[]', false, $$'{NULL}'$$), ('oid[]', false, $$'{0}'$$), ('oid[]', false, $$'{4294967295}'$$),
  ('oid[]', false, $$array['pg_class'::regclass::oid, 'pg_class'::regclass::oid]$$), ('oid[]', false, $$'{{1,2},{3,4}}'$$),
  ('regclass[]', true, $$'{t1}'$$),
  ('regclass[]', false, $$'{}'$$), ('regclass[]', false, $$'{NULL}'$$), ('regclass[]', false, $$'{0}'$$),
  ('regclass[]', false, $$'{pg_class}'$$), ('regclass[]', false, $$'{t1,t1}'$$), ('regclass[]', false, $$'{v1,t1_pkey}'$$),
  ('integer[]', true, $$'{1}'$$),
  ('integer[]', false, $$'{}'$$), ('integer[]', false, $$'{NULL}'$$), ('integer[]', false, $$'{-1}'$$),
  ('integer[]', false, $$'{0,2147483647,-2147483648}'$$), ('integer[]', false, $$'{{1,2},{3,4}}'$$),
  ('tid', true, $$'(0,1)'$$),
  ('tid', false, $$'(0,0)'$$), ('tid', false, $$'(4294967295,65535)'$$), ('tid', false, $$'(1000,1)'$$),
  ('"char"', true, $$'D'$$),
  ('"char"', false, $$''$$), ('"char"', false, $$'x'$$), ('"char"', false, $$'I'$$), ('"char"', false, $$'U'$$),
  ('"char"', false, $$'T'$$),
  ('pg_snapshot', true, $$pg_current_snapshot()$$),
  ('pg_snapshot', false, $$'1:1:'$$), ('pg_snapshot', false, $$'100:200:150'$$),
  ('pg_snapshot', false, $$'9223372036854775807:9223372036854775807:'$$)
) v(typ, g, e);
-- rows of pg_worlds' catalog as arguments: a real one (good), one of nothing but NULLs, one with every
-- number at its type's end, and a stale one (a dropped world, a dropped table)
create function sweep.row_values(t regclass, good text) returns void language plpgsql as $f$
declare
  ints jsonb;
  nulls text;
begin
  select '(' || string_agg('', ',') || ')' into nulls from pg_attribute where attrelid = t and attnum > 0 and not attisdropped;
  select coalesce(jsonb_object_agg(attname, case atttypid when 'int2'::regtype then 32767 when 'int4'::regtype then 2147483647
           when 'int8'::regtype then 9223372036854775807 else 4294967295 end), '{}')
    into ints from pg_attribute where attrelid = t and attnum > 0 and not attisdropped
     and atttypid in ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'oid'::regtype, 'regclass'::regtype);
  insert into sweep.vals (typ, good, expr) values (t::text::regtype, true, quote_literal(good));
  insert into sweep.vals (typ, good, expr) values (t::text::regtype, false, quote_literal(nulls));
  execute format('insert into sweep.vals (typ, good, expr) select %L, false, quote_literal(jsonb_populate_record(%L::%s, %L)::text)',
                 t::text::regtype, good, t::text::regtype, ints);
end $f$;
select sweep.row_values('worlds.tables', (select t::text from worlds.tables t where relid = 't1'::regclass));
select sweep.row_values('worlds.world', (select w::text from worlds.world w where name = 'w1' and dropped is null));
select sweep.row_values('worlds.agent', (select a::text from worlds.agent a where name = 's28_agent'));
select sweep.row_values('worlds.merge_policy', (select p::text from worlds.merge_policy p where name = 's28_policy'));
insert into sweep.vals (typ, good, expr)
select 'worlds.world'::regtype, false, quote_literal(world_row) from public.s28_stale
union all select 'worlds.tables'::regtype, false, quote_literal(table_row) from public.s28_stale;
-- a good value by the argument's name and type (and the function's name: fn, a LIKE pattern of its
-- signature), beside which a bad or NULL argument is tried; else the type's good value above
create table sweep.good (fn text not null default '%', argname text not null, typ regtype not null, expr text not null);
insert into sweep.good (fn, argname, typ, expr) values
  ('%', 'statement', 'text', $$'show worlds'$$), ('%', 'spec', 'text', $$'now'$$), ('%', 'moment', 'text', $$'now'$$),
  ('%', 'v', 'text', $$'now'$$), ('%', 'agent_name', 'text', $$'s28_agent'$$), ('%agent%', 'name', 'text', $$'s28_agent'$$),
  ('%', 'policy_name', 'text', $$'s28_policy'$$), ('%', 'policy', 'text', $$'s28_policy'$$),
  ('%', 'check_name', 'text', $$'s28_check'$$), ('%', 'label', 'text', $$'cp1'$$), ('%', 'to_checkpoint', 'text', $$'cp1'$$),
  ('%', 'query', 'text', $$'select id from t1 where n < 0'$$), ('%', 'q', 'text', $$'select id from t1 where n < 0'$$),
  ('%', 'using', 'text', $$'ours'$$), ('%', 'into', 'text', $$'main'$$), ('%', 'action', 'text', $$'admin'$$),
  ('%', 'key', 'text', $$'tables'$$), ('%', 'value', 'text', $$'1 day'$$), ('%', 'channel', 'text', $$'ch'$$),
  ('%', 'payload', 'text', $$'p'$$), ('%', 'alias', 'text', $$'a'$$), ('%', 'parent_name', 'text', $$'main'$$),
  ('%', 'later_name', 'text', $$'name'$$), ('%', 'what', 'text', $$'x'$$), ('%', 'setting', 'text', $$'worlds.world'$$),
  ('%', 'source', 'text', $$'w1'$$), ('%as_of%', 'source', 'text', $$'t1'$$), ('%', 'target', 'text', $$'main'$$),
  ('%', 'trigger_args', 'text', $$''$$),
  ('%', 'only_tables', 'text[]', $$'{t1}'$$), ('%', 'only_keys', 'text[]', $$'{t1/1}'$$), ('%', 'tables', 'text[]', $$'{t1}'$$),
  ('%', 'pk', 'text[]', $$'{id}'$$),
  ('%', 'at_version', 'bigint', 'null'), ('%', 'target', 'bigint', 'null'), ('%', 'confirm_deletes', 'bigint', 'null'),
  ('%', 'lim', 'bigint', 'null'), ('%', 'limit', 'bigint', '10'), ('%', 'batch_size', 'integer', '10'),
  ('%', 'capture', 'oid', $$'worlds._capture()'::regprocedure$$),
  ('%', 'capture_truncate', 'oid', $$'worlds._capture_truncate()'::regprocedure$$),
  ('%', 'typ', 'oid', $$'int4'::regtype$$), ('%', 'coll', 'oid', $$100$$), ('%', 'view', 'oid', $$'v1'::regclass$$),
  ('%', 'role', 'oid', quote_literal(current_setting('sweep.role')) || '::regrole'),
  ('%', 'k', 'bigint', '1'), ('%', 'k', 'integer', '1'), ('%', 'k', 'smallint', '1'), ('%', 'k', 'text', $$'k1'$$),
  ('%', 'attnum', 'smallint', '2'), ('%', 'hint', 'anyelement', 'null::text'), ('%as_of%', 'tbl', 'anyelement', 'null::public.t1'),
  ('%', 'key', '"any"', '1'), ('%', 'xid', 'bigint', 'txid_current_if_assigned()');
insert into sweep.good (fn, argname, typ, expr)
select '%', n, 'integer'::regtype, (select tabno from worlds.tables where relid = 't1'::regclass)::text from unnest(array['tabno']) n
union all
select '%', n, 'integer'::regtype, (select num from worlds.world where name = 'w1' and dropped is null)::text from unnest(array['world', 'world_num']) n
union all
select '%', 'world_id', 'text'::regtype, quote_literal((select id from worlds.world where name = 'w1' and dropped is null))
union all
select '%overlay_finish%', 'view', 'regclass'::regtype, quote_literal((select overlay::text from worlds.tables where relid = 't1'::regclass));
-- more bad values for one function's argument (worlds.sql's statements)
create table sweep.extra (fn regprocedure, pos int, expr text);
insert into sweep.extra
select 'worlds.sql(text)'::regprocedure, 1, quote_literal(s) from unnest(array[
  'create world ""', 'create world " "', 'create world "a""b"', 'create world x with (ttl = ''-1 hour'')',
  'create world x meta ''[]''', 'create world x from "main@-1 hour"', 'create world x from ''w1@infinity''',
  'switch world ''main@-infinity''', 'switch world ''x@-1 hour''', 'diff world w1 limit -1',
  'diff world w1 limit 9223372036854775807', 'diff world ''main@-1 hour'' to w1 as sql',
  'merge world w1 resolve (''t1/1'' = ''{'')', 'merge world w1 only keys (''t1/'', ''/1'')',
  'merge world w1 at version -1', 'merge world w1 target 9223372036854775807 dry run',
  'merge world w1 confirm deletes -1', 'rebase world w1 at version -9223372036854775808',
  'show history limit -1', 'show history for t1 limit 0', 'alter world w1 set ttl ''178000000 years''',
  'alter world w1 set (_worlds = 1)', 'drop world if exists ""', 'restore world w1 to ''-infinity''',
  'undo merge ''''', 'create agent "" with (can = '''')', 'create merge policy p with (max_rows = -1)',
  'create merge check c on nosuch as select 1', 'check reads of world ''''', 'alter system set history_retention = ''-1''',
  'select * from t1 as of ''-infinity''', 'select * from t1 as of ''main@x''', ';', '', ' ', repeat('(', 10000),
  'create world ' || repeat('x', 100000), 'show worlds; show worlds',
  'create world x meta ''{"a": ' || repeat('[', 200) || repeat(']', 200) || '}''',
  'alter world w1 set (a = ''' || repeat('[', 200) || repeat(']', 200) || ''')',
  'create world x with (tenant = ''{"id": ' || repeat('[', 200) || repeat(']', 200) || '}'')',
  'merge world w1 resolve (''t1/1'' = ''{"id": 1, "name": ' || repeat('[', 200) || repeat(']', 200) || '}'') dry run']) s
union all
-- a dropped column's value read as the hint's type: t1's column 1 is an integer, column 2 text
select 'worlds._dropped_value(oid,tid,smallint,anyelement)'::regprocedure, 3, '1'
union all
select 'worlds._dropped_value(oid,tid,smallint,anyelement)'::regprocedure, 4, e from unnest(array['null::bigint', 'null::jsonb', 'null::point', 'null::numeric']) e;

create table sweep.calls (id serial primary key, fn oid not null, sig text not null, variant text not null,
                          args text not null, role text not null, sql text not null);
create table sweep.results (id int primary key, state text not null, message text, ms numeric, via text not null);
create table sweep.skipped (sig text, why text);
-- the sweep's own tables aren't tracked (a call that left the session in a world must not hide them)
select worlds.untrack(c.oid::regclass) from pg_class c where c.relnamespace = 'sweep'::regnamespace and c.relkind = 'r';
grant usage on schema sweep to :"role";
grant select on sweep.calls to :"role";
grant select, insert on sweep.results to :"role";

do $gen$
declare
  f record;
  a record;
  typs regtype[];
  good text[];
  nul text[];
  args text[];
  v record;
  n int;
  i int;
  poly constant regtype[] := array['anyelement', '"any"']::regtype[];
  role text;
  want_roles text[] := array['postgres', current_setting('sweep.role')];
begin
  for f in
    select p.oid, p.oid::regprocedure::text as sig, format('%I.%I', ns.nspname, p.proname) as qname,
           p.prorettype::regtype::text as rettype, l.lanname
      from pg_depend d
      join pg_proc p on d.classid = 'pg_proc'::regclass and d.objid = p.oid
      join pg_namespace ns on ns.oid = p.pronamespace
      join pg_language l on l.oid = p.prolang
     where d.refclassid = 'pg_extension'::regclass and d.deptype = 'e'
       and d.refobjid = (select oid from pg_extension where extname = 'pg_worlds')
     order by p.oid::regprocedure::text
  loop
    if f.rettype in ('trigger', 'event_trigger', 'language_handler', 'fdw_handler', 'index_am_handler',
                     'table_am_handler', 'tsm_handler', 'internal') or f.lanname = 'internal' then
      insert into sweep.skipped values (f.sig, 'returns ' || f.rettype || ' (' || f.lanname || ')');
      continue;
    end if;
    typs := '{}'; good := '{}'; nul := '{}';
    for a in
      select u.t::regtype as typ, coalesce(u.nm, '') as name
        from pg_proc p,
             unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]),
                    coalesce(p.proargmodes, array_fill('i'::"char", array[cardinality(coalesce(p.proallargtypes, p.proargtypes::oid[]))])),
                    coalesce(p.proargnames, array_fill(''::text, array[cardinality(coalesce(p.proallargtypes, p.proargtypes::oid[]))])))
               with ordinality u(t, m, nm, o)
       where p.oid = f.oid and u.m in ('i', 'b', 'v')
       order by u.o
    loop
      if a.typ = 'internal'::regtype then
        insert into sweep.skipped values (f.sig, 'an internal argument'); continue;
      end if;
      typs := typs || a.typ;
      good := good || coalesce(
          (select case when a.typ = any (poly) then g.expr else format('(%s)::%s', g.expr, a.typ) end from sweep.good g
            where g.argname = a.name and g.typ = a.typ and f.sig like g.fn order by length(g.fn) desc limit 1),
          (select format('(%s)::%s', expr, a.typ) from sweep.vals where typ = a.typ and vals.good order by ord limit 1),
          case a.typ when 'anyelement'::regtype then 'null::text' when '"any"'::regtype then '1' end,
          format('null::%s', a.typ));
      -- a polymorphic argument's NULL keeps the good value's type (the table's row type for worlds.as_of)
      nul := nul || case when a.typ = '"any"'::regtype then 'null::int' when a.typ = any (poly) then coalesce(
          (select g.expr from sweep.good g where g.argname = a.name and g.typ = a.typ and f.sig like g.fn
            order by length(g.fn) desc limit 1), 'null::int') else format('null::%s', a.typ) end;
    end loop;
    n := cardinality(typs);
    foreach role in array want_roles loop
      if n = 0 then
        insert into sweep.calls (fn, sig, variant, args, role, sql)
        values (f.oid, f.sig, 'no arguments', '', role, format('select count(f::text) from %s() f', f.qname));
        continue;
      end if;
      insert into sweep.calls (fn, sig, variant, args, role, sql)
      values (f.oid, f.sig, 'good', array_to_string(good, ', '), role,
              format('select count(f::text) from %s(%s) f', f.qname, array_to_string(good, ', ')));
      insert into sweep.calls (fn, sig, variant, args, role, sql)
      values (f.oid, f.sig, 'all null', array_to_string(nul, ', '), role,
              format('select count(f::text) from %s(%s) f', f.qname, array_to_string(nul, ', ')));
      for i in 1 .. n loop
        if n > 1 and good[i] is distinct from nul[i] then
          args := good; args[i] := nul[i];
          insert into sweep.calls (fn, sig, variant, args, role, sql)
          values (f.oid, f.sig, format('null @%s', i), array_to_string(args, ', '), role,
                  format('select count(f::text) from %s(%s) f', f.qname, array_to_string(args, ', ')));
        end if;
        for v in
          select format('(%s)::%s', vals.expr, vals.typ) as e from sweep.vals
           where vals.typ = typs[i] and not vals.good and typs[i] <> all (poly)
          union all
          select case when typs[i] = any (poly) then x.expr else format('(%s)::%s', x.expr, typs[i]) end
            from sweep.extra x where x.fn = f.oid and x.pos = i
          union all
          select e from unnest(case when typs[i] = 'anyelement'::regtype then
                   array['1', 'null::int', '''x''::text', 'null::worlds.tables', '(1, ''x'', 1)::public.t1', 'array[1]']
                 when typs[i] = '"any"'::regtype then
                   array['null::text', '''x''::text', 'repeat(''x'', 100000)', '-1', '9223372036854775807', 'array[1, 2]', '''{}''::jsonb', '(1, ''x'', 1)::public.t1']
                 end) e
        loop
          args := good; args[i] := v.e;
          insert into sweep.calls (fn, sig, variant, args, role, sql)
          values (f.oid, f.sig, format('bad @%s', i), array_to_string(args, ', '), role,
                  format('select count(f::text) from %s(%s) f', f.qname, array_to_string(args, ', ')));
        end loop;
      end loop;
    end loop;
  end loop;
end $gen$;
SQL
[ "$(M -c "select count(*) from sweep.calls")" -gt 0 ] || fail "no calls generated: $(tail -5 "$OUT/setup.log")"

# run_calls WHERE VIA:TIMEOUT ROLE: logged in as ROLE, a DO block runs ROLE's calls that WHERE picks, each
# in a subtransaction of its own that is rolled back (a sentinel error after a call that returned), and
# records each outcome; calls already recorded are skipped
run_calls() {
  psql_in $CL -d $DB -U "$3" -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "set statement_timeout = '${2#*:}'" -c "
do \$do\$
declare
  c record;
  st text;
  msg text;
  t0 timestamptz;
begin
  for c in select * from sweep.calls where ($1) and role = current_user and id not in (select id from sweep.results) order by id loop
    t0 := clock_timestamp();
    begin
      execute c.sql;
      raise sqlstate 'ZZ999';
    exception when others then
      get stacked diagnostics st = returned_sqlstate, msg = message_text;
    end;
    insert into sweep.results values (c.id, case st when 'ZZ999' then 'ok' else st end,
      case when st = 'ZZ999' then null else left(msg, 2000) end,
      round(extract(epoch from clock_timestamp() - t0)::numeric * 1000, 1), '${2%%:*}');
  end loop;
end \$do\$"
}

echo "check: every call of every function (a DO block per function)"
CALLS=$(M -c "select count(*) from sweep.calls")
FNS=$(M -c "select count(distinct fn) from sweep.calls")
echo "  $CALLS calls of $FNS functions ($(M -c "select count(*) from sweep.skipped") skipped: $(M -c "select string_agg(sig || ' ' || why, '; ') from sweep.skipped" | cut -c1-300))"
crashes=0; timeouts=0; recreated=0
for fn in $(M -c "select distinct fn from sweep.calls order by fn"); do
  for who in postgres $ROLE; do
  if ! run_calls "fn = $fn" "block:300s" $who >"$OUT/block_${fn}_$who.log" 2>&1; then
    # the block failed as a whole: each call in a session of its own, to find the one
    alive || fail "the cluster doesn't come back"
    for id in $(M -c "select id from sweep.calls where fn = $fn and role = '$who' and id not in (select id from sweep.results) order by id"); do
      if ! run_calls "id = $id" "single:30s" $who >"$OUT/single_$id.log" 2>&1; then
        if grep -q "server closed the connection\|terminated abnormally\|connection to server was lost\|no connection to the server" "$OUT/single_$id.log"; then
          state=CRASH; crashes=$((crashes + 1))
        elif grep -q "57014" "$OUT/single_$id.log"; then
          state=TIMEOUT; timeouts=$((timeouts + 1))
        else
          state=$(grep -o "ERROR:  [0-9A-Z]\{5\}" "$OUT/single_$id.log" | head -1 | cut -c9- || true); state=${state:-FAILED}
        fi
        alive || fail "the cluster doesn't come back after call $id"
        msg=$(grep -m1 "ERROR\|FATAL\|server closed" "$OUT/single_$id.log" | cut -c1-500 || true)
        psql_in $CL -d $DB -q -v id="$id" -v st="$state" -v msg="$msg" >/dev/null 2>&1 <<'SQL' || bad "call $id: its outcome ($state) not recorded"
insert into sweep.results values (:id, :'st', :'msg', null, 'single');
SQL
      fi
    done
  fi
  done
  if [ "$(fixtures_ok)" != 1 ]; then
    # (calls are rolled back: a world lost here was lost by something that isn't)
    bad "w1 or its changes gone after the calls of $(M -c "select $fn::regprocedure")"
    recreated=$((recreated + 1))
    M -c "select * from worlds.sql('drop world if exists w2')" -c "select * from worlds.sql('drop world if exists w1')" \
      -c "select * from worlds.sql('create world w1')" -c "set worlds.world = w1" -c "update t1 set name = 'changed' where id <= 3" >/dev/null
  fi
done
expect "calls without an outcome" "$(M -c "select count(*) from sweep.calls where id not in (select id from sweep.results)")" 0

echo "check: failing calls, each again alone in a session of its own"
for id in $(M -c "select id from sweep.results where state ~ '^XX' and via = 'block' order by id"); do
  # alone: a copy of the call under a new id
  new=$(M -c "insert into sweep.calls (fn, sig, variant, args, role, sql) select fn, sig, variant || ' (alone)', args, role, sql from sweep.calls where id = $id returning id")
  run_calls "id = $new" "alone:30s" "$(M -c "select role from sweep.calls where id = $new")" >"$OUT/alone_$id.log" 2>&1 || alive
  M -c "update sweep.results set via = 'block, alone: ' || coalesce((select state from sweep.results where id = $new), 'no outcome') where id = $id" \
    -c "delete from sweep.results where id = $new" -c "delete from sweep.calls where id = $new" >/dev/null
done

echo "check: the worlds.* settings set to odd values, a tracked table read after each"
gucs=$(M -c "select string_agg(name, ' ' order by name) from (select name from pg_settings where name like 'worlds.%' union select 'worlds.internal_ddl') s")
echo "  settings: $gucs"
values=("''" "' '" "''''" "'\"'" "'a\"b'" "'@'" "'main@'" "'w1@'" "'x@-1 hour'" "'main@-1 hour'" "'w1@-1 hour'"
  "'main@infinity'" "'main@-infinity'" "'w1@294277-01-01'" "'w2'" "'wd'" "'nosuch'" "'select'" "'0'" "'-1'" "'2147483647'"
  "'-2147483648'" "'99999999999999999999'" "'1e100'" "'NaN'" "'on'" "'off'" "'w000000-0000000000'"
  "repeat('x', 100000)" "E'a\\nb'" "'é😀'")
gucs_run=0; guc_fail=0
: >"$OUT/gucs.txt"
for g in $gucs; do
  for v in "${values[@]}"; do
    for who in postgres $ROLE; do
      gucs_run=$((gucs_run + 1))
      rc=0
      out=$(psql_in $CL -d $DB -U $who -qAt -v ON_ERROR_STOP=0 -v VERBOSITY=verbose 2>&1 <<SQL
set statement_timeout = '30s';
select format('set %s = %L', '$g', $v) \gexec
select count(*) from t1;
select name from t1 where id = 1;
select count(*) from t3;
SQL
) || rc=$?
      if [ $rc -eq 2 ] || echo "$out" | grep -q "ERROR:  XX\|server closed the connection\|terminated abnormally\|connection to server was lost"; then
        guc_fail=$((guc_fail + 1))
        line="SET $g = $(echo "$v" | cut -c1-40) as $who: $(echo "$out" | grep -m1 "ERROR:  XX\|server closed\|terminated abnormally\|connection to server" | cut -c1-300)"
        echo "$line" >>"$OUT/gucs.txt"; bad "$line"
        alive || fail "the cluster doesn't come back"
      fi
      echo "$out" | grep -o "ERROR:  [0-9A-Z]\{5\}" | sed "s/^/$g as $who: /" >>"$OUT/gucs_states.txt" || true
    done
  done
done
echo "  $gucs_run settings tried, $guc_fail with an internal error or a crash; SQLSTATEs seen: $(cut -d: -f3 "$OUT/gucs_states.txt" 2>/dev/null | sort | uniq -c | awk '{printf "%s %s, ", $2, $1}')"

echo "check: the server log shows no backend terminated by a signal"
tail -c +"$log_from" "$LOG" >"$OUT/server.log"
signals=$(grep -c "terminated by signal\|PANIC:" "$OUT/server.log" || true)
expect "crashes in the server log" "$signals" 0
[ "$signals" = 0 ] || grep "terminated by signal\|PANIC:" "$OUT/server.log" | head -10 | sed 's/^/    | /'

echo "results"
M -c "select count(*) filter (where role = 'postgres') || ' as superuser, ' || count(*) filter (where role <> 'postgres') || ' as $ROLE'
      from sweep.calls" | sed 's/^/  calls: /'
M -c "select '  ' || case when state = 'ok' then 'returned' else state end || ': ' || count(*) from sweep.results group by state order by count(*) desc" \
  | paste -sd' ' | sed 's/^/  outcomes:/'
M -c "select '  slowest: ' || string_agg(format('%s %s ms', sig, ms), ', ') from (select c.sig, r.ms from sweep.results r join sweep.calls c using (id) where r.ms is not null order by r.ms desc limit 3) s"
# every failing call (class XX or a crash), grouped by function
M -F $'\t' -c "select c.sig, c.role, c.variant, left(c.args, 200), r.state, replace(r.message, E'\n', ' '), r.via
               from sweep.results r join sweep.calls c using (id)
              where r.state ~ '^XX' or r.state in ('CRASH', 'FAILED') order by c.sig, c.id" >"$OUT/failures.tsv"
M -c "select state, count(*) from sweep.results r where state ~ '^XX' or state in ('CRASH', 'FAILED', 'TIMEOUT') group by 1" >"$OUT/failure_counts.txt"
nfail=$(grep -c . "$OUT/failures.tsv" || true)
if [ "$nfail" -gt 0 ]; then
  echo "  failing calls by function (all of them: $OUT/failures.tsv):"
  M -c "select format('    %s: %s call(s) [%s]  e.g. %s(%s) as %s -> %s %s',
                c.sig, count(*), string_agg(distinct r.state, ','),
                (array_agg(c.variant order by c.id))[1], left((array_agg(c.args order by c.id))[1], 80),
                (array_agg(c.role order by c.id))[1], (array_agg(r.state order by c.id))[1],
                left((array_agg(replace(r.message, E'\n', ' ') order by c.id))[1], 160))
          from sweep.results r join sweep.calls c using (id)
         where r.state ~ '^XX' or r.state in ('CRASH', 'FAILED')
         group by c.sig order by c.sig"
  echo "  every failing call:"
  M -c "select format('    %s as %s: %s (%s) -> %s %s [%s]', c.sig, c.role, c.variant, left(c.args, 120), r.state,
                left(replace(r.message, E'\n', ' '), 140), r.via)
          from sweep.results r join sweep.calls c using (id)
         where r.state ~ '^XX' or r.state in ('CRASH', 'FAILED') order by c.sig, c.role, c.id"
  bad "$nfail call(s) ended in an internal error (class XX) or a crash"
fi
[ "$(M -c "select count(*) from sweep.results where state = 'TIMEOUT'")" = 0 ] || echo "  note: $(M -c "select count(*) from sweep.results where state = 'TIMEOUT'") call(s) ran past 30 s (57014), listed in sweep.results"
expect "crashes" "$crashes" 0
if [ $failures -ne 0 ]; then echo "28_bad_input: $failures check(s) failed" >&2; exit 1; fi
echo "ok: 28_bad_input"
