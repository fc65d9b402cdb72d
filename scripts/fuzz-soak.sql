-- The in-database fuzz of scripts/fuzz-soak.sh: a database with tracked tables, rows and worlds with changes,
-- a vocabulary table (the spec's words), generators in plpgsql (random(), seeded per input: an input is a
-- function of (seed, job, i) whatever else runs) and fuzz.run(), which runs inputs one per subtransaction
-- and records each one's SQLSTATE. Loaded into a fresh database by the script.
\set ON_ERROR_STOP 1
set client_min_messages = warning;
create extension if not exists pg_worlds;

-- ---------------------------------------------------------------------------------------------------
-- The application: tracked tables with rows

create table orders (id int primary key, status text not null default 'new', amount numeric(12,2), owner text);
create table items (id bigint primary key, order_id int references orders (id), sku text unique, qty int check (qty >= 0));
create table notes (k text primary key, body text, org_id int);
create table nokey (a int, b text);
insert into orders select g, 'new', g * 1.5, 'u' || (g % 5) from generate_series(1, 200) g;
insert into items select g, 1 + g % 200, 'sku' || g, g % 7 from generate_series(1, 400) g;
insert into notes select 'n' || g, 'body ' || g, g % 3 from generate_series(1, 50) g;
insert into nokey select g, 'x' || g from generate_series(1, 30) g;

-- ---------------------------------------------------------------------------------------------------
-- Bookkeeping (not tracked: worlds never see it)

create schema fuzz;
create table fuzz.vocab (class text not null, tok text not null);
create table fuzz.funcs (fn text primary key, name text not null, argtypes text[] not null, nreq int not null, retset boolean not null);
create table fuzz.counts (job int, category text, sqlstate text, n bigint not null, primary key (job, category, sqlstate));
create table fuzz.failures (job int, i bigint, category text, sqlstate text, input text, exec text, message text, detail text, context text, at timestamptz default now());
create table fuzz.slow (job int, i bigint, category text, sqlstate text, ms float8, input text);
create table fuzz.progress (job int primary key, seed bigint, next_i bigint not null, last_i bigint not null, started timestamptz, updated timestamptz);
create table fuzz.maintenance (job int, at timestamptz default now(), what text, sqlstate text, message text);
create table fuzz.stop (at timestamptz default now());  -- a row: the jobs stop after their batch (FUZZ_SECONDS)
select worlds.untrack(c.oid) from pg_class c where c.relnamespace = 'fuzz'::regnamespace and c.relkind = 'r';

-- the typed functions of pg_worlds (the extension's own, in schema worlds, not starting with _), each
-- signature (worlds.moment and worlds.as_of have several): called by name with arguments cast to its types
insert into fuzz.funcs
select p.oid::regprocedure::text, 'worlds.' || quote_ident(p.proname),
       coalesce(array(select format_type(t, null) from unnest(p.proargtypes::oid[]) t), '{}'),
       p.pronargs - p.pronargdefaults, p.proretset
  from pg_proc p
  join pg_depend d on d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.refclassid = 'pg_extension'::regclass and d.deptype = 'e'
  join pg_extension e on e.oid = d.refobjid and e.extname = 'pg_worlds'
 where p.pronamespace = 'worlds'::regnamespace and p.proname !~ '^_' and p.prokind = 'f';

-- ---------------------------------------------------------------------------------------------------
-- Vocabulary (the spec's)

insert into fuzz.vocab select 'kw', unnest(string_to_array(
  'create fork switch use show alter drop delete world worlds branch branches diff merge rebase undo restore checkpoint '
  'as of to from with meta set reset ttl pinned if exists cascade sql limit into only tables keys using ours theirs by '
  'columns resolve confirm deletes target at version dry run skip changed history for system history_retention agent '
  'agents audit since where run_id policy policies reviews check checks reads on timeout or replace select readers now '
  'null true false main simulate replay keep seed threads score storage disk metrics register unregister reader mark '
  'unmark critical system_time join interval timestamp timestamptz date e world_ttl max_worlds can max_rows max_deletes '
  'review_tables review_columns check_reads require_scope may_change tenant intent overwrite schema rows_per_hour '
  'deletes_per_hour confirm_deletes_over max_age max_effects effects_per_hour review_channels disabled max_query_ms '
  'max_concurrent max_memory_mb max_idle_ms writes_per_minute max_changes task owner prompt_version model tool_schema '
  'USING OURS Theirs DRY RUN CrEaTe WORLD insert update values returning order group', ' '));

insert into fuzz.vocab select 'name', unnest(string_to_array(
  'agent_7 a b w w1 w2 w3 w1c main orders items notes nokey payout bot small cleanup x _tx_1 _TX_9 ours using dry into only '
  'target at Wörld 世界 a$b task t1 agent_7b check_it w000001-0123456789 wabcdef-0123456789 guest system public app '
  'fz_0 fz_1 fz_2 fz_3 fz_7 fzbot0 fzp0 fzc0 keep_qty', ' '));

insert into fuzz.vocab (class, tok) values
  ('quoted', '"agent-7"'), ('quoted', '"it""s"'), ('quoted', '""'), ('quoted', '" "'), ('quoted', '"ours"'), ('quoted', '"a@b"'),
  ('quoted', '"Orders"'), ('quoted', '"a,b"'), ('quoted', '"_tx_x"'), ('quoted', '"ü ü"'), ('quoted', '"x""""y"'),
  ('quoted', '"w000001-0123456789"'), ('quoted', '"main"'), ('quoted', '"a"""'), ('quoted', '""""'), ('quoted', '"semi;colon"'),
  ('quoted', '"paren("'), ('quoted', '"w1"'), ('quoted', '"W1"'), ('quoted', '"fz_1"');

insert into fuzz.vocab (class, tok) values
  ('str', $v$'agent-7'$v$), ('str', $v$'it''s'$v$), ('str', $v$''$v$), ('str', $v$' '$v$), ('str', $v$'main@-1 hour'$v$),
  ('str', $v$'a@now'$v$), ('str', $v$'w1@now'$v$), ('str', $v$'w1@-1 minute'$v$), ('str', $v$'main@-10 seconds'$v$),
  ('str', $v$'w@2026-09-20 10:00'$v$), ('str', $v$'main@2026-09-20 10:00:00+02'$v$), ('str', $v$'@'$v$), ('str', $v$'@@'$v$),
  ('str', $v$'a@'$v$), ('str', $v$'@now'$v$), ('str', $v$'main@garbage'$v$), ('str', $v$'-1 day'$v$), ('str', $v$'-2 hours'$v$),
  ('str', $v$'now'$v$), ('str', $v$'2026-09-20 10:00'$v$), ('str', $v$'1 day'$v$), ('str', $v$'0'$v$), ('str', $v$'forever'$v$),
  ('str', $v$'-1 hour'$v$), ('str', $v$'-5 seconds'$v$), ('str', $v$'t/1'$v$), ('str', $v$'orders/7'$v$), ('str', $v$'orders/(1,abc)'$v$),
  ('str', $v$'t/'$v$), ('str', $v$'/'$v$), ('str', $v$'{}'$v$), ('str', $v$'{"a": 1}'$v$), ('str', $v$'{"tags": ["retry"]}'$v$),
  ('str', $v$'[1,2]'$v$), ('str', $v$'null'$v$), ('str', $v$'{'$v$), ('str', $v$'{"_sonos": 1}'$v$), ('str', $v$'{"_worlds": 1}'$v$),
  ('str', $v$'{"id": 9, "status": "paid"}'$v$), ('str', $v$'read,fork,write_own'$v$), ('str', $v$'read,fork,write_own,merge_own'$v$),
  ('str', $v$'org_id = 42'$v$), ('str', $v$'region = ''eu'''$v$), ('str', $v$'leads.status, lists'$v$), ('str', $v$'orders.status, notes'$v$),
  ('str', $v$'payments'$v$), ('str', $v$'users.email,accounts.owner'$v$), ('str', $v$'2s'$v$), ('str', $v$'30 minutes'$v$),
  ('str', $v$'1h'$v$), ('str', $v$E'\x41\u00e9'$v$), ('str', $v$E'\xff'$v$), ('str', $v$E'\0'$v$), ('str', $v$E'\u00'$v$),
  ('str', $v$E'\U0001F600'$v$), ('str', $v$E'a\nb'$v$), ('str', $v$E'\''$v$), ('str', $v$E'\\'$v$), ('str', $v$e'\101'$v$),
  ('str', $v$E'\777'$v$), ('str', $v$E'\uD800'$v$), ('str', $v$E'\U00110000'$v$), ('str', '$$x$$'), ('str', '$$$$'),
  ('str', '$t$a$$b$t$'), ('str', '$ü$x$ü$'), ('str', '$$2 hours$$'), ('str', '$${"a":1}$$'), ('str', '$_1$$_1$'),
  ('str', $v$'ü'$v$), ('str', $v$'世界@now'$v$), ('str', E'''\uFEFF'''), ('str', $v$'\'$v$), ('str', $v$'w1'$v$), ('str', $v$'fz_1'$v$),
  ('str', $v$'c1'$v$), ('str', $v$'before'$v$);

insert into fuzz.vocab select 'num', unnest(array[
  '0', '1', '42', '-1', '+5', '9223372036854775807', '9223372036854775808', '-9223372036854775808', '-9223372036854775809',
  '99999999999999999999999999999', '1e308', '1e999', '-1e-999', '.5', '5.', '2.5E-4', '1e', '1e+', '0x10', '00001', '1.2.3',
  '4812', '1048577', '-0', '1_000', '3.14159265358979323846264338327950288', '2147483648', '-2147483649', '32768']);

insert into fuzz.vocab select 'punct', unnest(array[
  '(', ')', ',', ';', '=', '.', '*', ':', '::', '+', '-', '/', '@', '[', ']', '{', '}', '''', '"', '$', '\', '--', '/*',
  '*/', '$1', '$0', '$99999999999', '<>', '!', '%', '^', '&', '|', '~', '?', '#', '`', '()', '(((', ')))', ';;']);

insert into fuzz.vocab select 'uni', unnest(array[
  'ü', 'é', '世界', '😀', E'e\u0301', E'\u200B', E'\uFEFF', E'\u2028', E'\u202E', 'Ω', 'ß', 'İ', 'ﬁ', '𝔘', E'\U0010FFFF',
  E'\uFFFD', E'\u007F', E'\u0001', E'\t', E'\n', E'\r\n', E'\u00A0', E'\u3000']);

insert into fuzz.vocab select 'when', unnest(array[
  '-1 hour', 'now', '2026-09-20 10:00', '-15 minutes', 'x', '', '@', '-9999999 years', '1e9 days', '-1 minute', 'infinity',
  '-infinity', '-10 seconds', '2000-01-01', '4713-01-01 BC', '294277-01-01']);

insert into fuzz.vocab select 'bool', unnest(array['true', 'false', 'null', 'TRUE', 'Null', 'on', 'yes', '1', 't']);

insert into fuzz.vocab select 'setkey', unnest(array[
  'task', 'owner', 'reviewer', 'may_change', 'tenant', 'max_rows', 'max_deletes', 'intent', 'run', 'check_reads', 'run_id',
  'prompt_version', 'model', 'tool_schema', '_sonos', '_worlds_x', 'can', 'policy', 'max_worlds', 'world_ttl', 'writes_per_minute',
  'max_changes', 'max_query_ms', 'max_concurrent', 'max_memory_mb', 'max_idle_ms', 'disabled', 'tables', 'review_tables',
  'review_columns', 'schema', 'overwrite', 'critical', 'require_scope', 'rows_per_hour', 'deletes_per_hour', 'max_age',
  'max_effects', 'effects_per_hour', 'review_channels', 'confirm_deletes_over', 'timeout', 'sim', 'ttl', 'pinned']);

insert into fuzz.vocab (class, tok) values
  ('setting', 'task = 42'), ('setting', $v$owner = 'claude'$v$), ('setting', 'task = null'), ('setting', $v$may_change = 'orders'$v$),
  ('setting', $v$may_change = 'orders.status, notes'$v$), ('setting', $v$may_change = 'nope'$v$), ('setting', $v$tenant = 'org_id = 1'$v$),
  ('setting', $v$tenant = 'owner = ''u1'''$v$), ('setting', 'max_rows = 5'), ('setting', 'max_deletes = 0'), ('setting', 'max_rows = -1'),
  ('setting', 'check_reads = true'), ('setting', 'check_reads = false'), ('setting', $v$can = 'read,fork,write_own'$v$),
  ('setting', $v$can = 'read,fork,write_own,write_main,merge_own,merge,restore,admin'$v$), ('setting', $v$can = 'fly'$v$),
  ('setting', $v$policy = 'fzp0'$v$), ('setting', 'policy = null'), ('setting', 'max_worlds = 3'), ('setting', $v$world_ttl = '1 day'$v$),
  ('setting', 'world_ttl = 1000'), ('setting', 'disabled = true'), ('setting', $v$timeout = '2s'$v$), ('setting', $v$timeout = '-1s'$v$),
  ('setting', $v$review_tables = 'orders'$v$), ('setting', $v$review_columns = 'orders.status'$v$), ('setting', $v$tables = 'orders,items'$v$),
  ('setting', $v$max_age = '1h'$v$), ('setting', 'confirm_deletes_over = 1'), ('setting', $v$run_id = 'r1'$v$), ('setting', 'run_id = 5'),
  ('setting', $v$intent = 'fuzz'$v$), ('setting', $v$_sonos = 1$v$), ('setting', 'max_rows = 9223372036854775807'),
  ('setting', 'max_rows = 9223372036854775808'), ('setting', 'writes_per_minute = 1e9');

insert into fuzz.vocab (class, tok) values
  ('json', '{}'), ('json', '{"task": 1}'), ('json', '{"_sonos": 1}'), ('json', '{"_worlds": true}'), ('json', '[1]'), ('json', '1'),
  ('json', 'null'), ('json', '"x"'), ('json', '{"tags": ["retry"], "owner": "claude"}'), ('json', '{"may_change": "orders"}'),
  ('json', '{"may_change": "nope.nope.nope.nope"}'), ('json', '{"tenant": {"org_id": 1}}'), ('json', '{"tenant": {"a": 1, "b": 2}}'),
  ('json', '{"tenant": "owner = ''u1''"}'), ('json', '{"max_rows": -5}'), ('json', '{"max_rows": "12"}'), ('json', '{"max_rows": 1e400}'),
  ('json', '{"check_reads": true}'), ('json', '{"check_reads": "yes"}'), ('json', '{"can": "read,fork"}'), ('json', '{"can": ["read"]}'),
  ('json', '{"policy": "fzp0"}'), ('json', '{"world_ttl": "1 day"}'), ('json', '{"world_ttl": -1}'), ('json', '{"max_worlds": 2147483648}'),
  ('json', '{"timeout": "2s"}'), ('json', '{"run_id": 5}'), ('json', '{"model": {"x": 1}}'), ('json', '{"orders/1": "ours"}'),
  ('json', '{"orders/1": "theirs", "orders/2": "delete"}'), ('json', '{"orders/3": {"id": 3, "status": "picked"}}'),
  ('json', '{"orders/x": "ours"}'), ('json', '{"nope/1": "ours"}'), ('json', '{"": null}'), ('json', '{"a": {"b": {"c": [1, [2, [3]]]}}}'),
  ('json', '{"max_rows": 10, "max_deletes": 0, "review_tables": "payments"}'), ('json', '{"ttl": "1 day", "pinned": true}');

insert into fuzz.vocab (class, tok) values
  ('query', 'select count(*) from orders'), ('query', 'select * from orders where id = 7'),
  ('query', 'select sum(amount) from orders where id between 10 and 20'),
  ('query', 'select o.id, i.sku from orders o join items i on i.order_id = o.id where o.id < 5'),
  ('query', $v$select * from notes where k = 'n1'$v$), ('query', 'select count(*) from nokey'),
  ('query', 'select * from items where id in (1, 2, 3) for update'), ('query', 'select * from orders order by id desc limit 3'),
  ('query', $v$with x as (select * from orders where owner = 'u1') select count(*) from x$v$),
  ('query', 'explain select * from orders where id = 1'), ('query', $v$select * from orders where status like 'w%'$v$),
  ('query', 'select count(*) from items where order_id = any(array[1, 2, 3])'), ('query', 'select * from nokey where a is null'),
  ('query', 'select (select count(*) from items i where i.order_id = o.id) from orders o where o.id < 4'),
  ('query', $v$select count(*) from worlds.as_of(null::orders, now())$v$), ('query', 'select * from orders for share skip locked limit 2'),
  ('dml', $v$update orders set status = 'fz' where id = 3$v$), ('dml', 'update orders set amount = amount + 1 where id % 17 = 0'),
  ('dml', $v$insert into notes values ('fz' || floor(random() * 1000000)::text, 'b', 1) on conflict do nothing$v$),
  ('dml', 'delete from items where id = 400'), ('dml', 'delete from notes where org_id = 2 and k > $$n4$$'),
  ('dml', $v$insert into items values (1000 + floor(random() * 100000)::int, 7, 'fz' || random(), 1)$v$),
  ('dml', 'update items set qty = -1 where id = 5'), ('dml', 'insert into orders values (7, $$dup$$)'),
  ('dml', $v$insert into orders values (201 + floor(random() * 1000)::int, 'new', 1, 'u1') on conflict (id) do update set status = 'up'$v$),
  ('dml', 'update nokey set b = $$y$$ where a = 3'), ('dml', 'delete from nokey where a = 4'),
  ('dml', $v$merge into orders o using (values (5, 'm')) v(id, s) on o.id = v.id when matched then update set status = v.s$v$),
  ('dml', 'truncate nokey'), ('dml', $v$notify fzchan, 'x'$v$), ('dml', $v$select pg_notify('fzchan', 'y')$v$);

insert into fuzz.vocab (class, tok) values
  ('text', 'w1'), ('text', 'w2'), ('text', 'w3'), ('text', 'w1c'), ('text', 'main'), ('text', 'fz_1'), ('text', 'fz_2'), ('text', 'nope'),
  ('text', ''), ('text', ' '), ('text', 'w1@now'), ('text', 'w1@-1 minute'), ('text', 'main@-10 seconds'), ('text', 'main@-1 hour'),
  ('text', '@'), ('text', 'a@b@c'), ('text', '_tx_1'), ('text', 'ours'), ('text', 'agent-7'), ('text', 'orders'), ('text', 'items'),
  ('text', 'orders/1'), ('text', 'ours'), ('text', 'theirs'), ('text', 'delete'), ('text', 'OURS'), ('text', 'now'), ('text', '-1 hour'),
  ('text', '1 day'), ('text', '0'), ('text', '-1 day'), ('text', 'c1'), ('text', 'select 1'), ('text', 'select id from items where qty < 0'),
  ('text', 'select pg_sleep(0)'), ('text', 'delete from orders'), ('text', 'select nextval(''x'')'), ('text', 'read,fork'), ('text', 'fzbot0'),
  ('text', 'fzp0'), ('text', 'fzc0'), ('text', 'keep_qty'), ('text', 'w000001-0123456789'), ('text', 'Wörld'), ('text', 'main@'),
  ('text', '2026-09-20 10:00'), ('text', 'infinity'), ('text', 'a"b'), ('text', 'a''b'), ('text', 'x;drop table orders');

insert into fuzz.vocab (class, tok) values
  ('guc', 'worlds.world'), ('guc', 'worlds.world'), ('guc', 'worlds.world'), ('guc', 'worlds.world'), ('guc', 'worlds.world'),
  ('guc', 'worlds.world_scan'), ('guc', 'worlds.max_worlds'), ('guc', 'worlds.lazy_storage'), ('guc', 'worlds.internal_ddl'),
  ('guc', 'worlds.purge_naptime'), ('guc', 'worlds.purge_databases'), ('guc', 'worlds.read_set_keys'), ('guc', 'worlds.read_set_scans'),
  ('guc', 'worlds.nope'), ('guc', 'worlds.'), ('guc', 'worlds.world.x');

insert into fuzz.vocab (class, tok) values
  ('gucval', 'on'), ('gucval', 'off'), ('gucval', 'true'), ('gucval', 'maybe'), ('gucval', '0'), ('gucval', '1'), ('gucval', '-1'),
  ('gucval', '2147483647'), ('gucval', '2147483648'), ('gucval', ''), ('gucval', 'main'), ('gucval', 'postgres,fz');

-- valid statements: the seeds of mutations
insert into fuzz.vocab (class, tok) values
  ('valid', 'create world agent_7 with (task = 42)'), ('valid', $v$create world agent_7 from main with (owner = 'claude', task = 42);$v$),
  ('valid', $v$create world run_r42 with (run_id = 'r42', prompt_version = 'triage-v9', model = 'claude-opus-5-5', tool_schema = 'crm-tools-3');$v$),
  ('valid', $v$create world check_it from 'main@-1 hour';$v$), ('valid', $v$CREATE BRANCH b FROM a META '{}'$v$),
  ('valid', 'create world w meta $${"a": [1, 2]}$$'), ('valid', $v$create world a with (n = -.5e2, b = true, c = null, d = 'x')$v$),
  ('valid', $v$fork world agent_7 as agent_7b meta '{"tags": ["retry"]}';$v$), ('valid', $v$fork world 'main@-10 seconds' as before_the_deploy;$v$),
  ('valid', 'switch world w1'), ('valid', 'use branch w2'), ('valid', 'use main'), ('valid', 'show worlds'), ('valid', 'show branches'),
  ('valid', 'show history'), ('valid', 'show history for world w1 limit 5'), ('valid', 'show history_retention'), ('valid', 'show agents'),
  ('valid', 'show audit for agent fzbot0 limit 10'), ('valid', 'show merge policies'), ('valid', 'show reviews'), ('valid', 'show merge checks'),
  ('valid', $v$alter world w1 set (task = null, reviewer = 'ada');$v$), ('valid', $v$alter world w1 set ttl '1 day';$v$),
  ('valid', 'alter world w1 reset ttl'), ('valid', 'alter world w2 set pinned'), ('valid', 'alter world w2 reset pinned'),
  ('valid', $v$alter world w3 set (may_change = 'orders')$v$), ('valid', 'alter world w3 set (check_reads = false)'),
  ('valid', 'drop world fz_1 cascade;'), ('valid', 'drop world if exists fz_2'), ('valid', 'delete world if exists fz_3 cascade'),
  ('valid', 'diff'), ('valid', 'diff world w1;'), ('valid', $v$diff world 'main@-10 seconds' to main as sql limit 5;$v$),
  ('valid', $v$diff world w1 to 'w2@now' as sql limit 3$v$), ('valid', 'diff branch w2 limit 50'), ('valid', 'diff world w1 to w2'),
  ('valid', 'merge world w1 dry run'), ('valid', $v$merge world w1 by columns resolve ('orders/1' = theirs, 'orders/11' = '{"id": 11, "status": "paid"}') dry run;$v$),
  ('valid', 'merge world w1 only tables (orders, notes, "Orders") dry run;'), ('valid', $v$merge world w2 only keys ('orders/1', 'notes/(1,abc)') dry run$v$),
  ('valid', 'merge world w1c into w1 dry run;'), ('valid', 'MERGE WORLD W2 USING THEIRS BY COLUMNS DRY RUN'),
  ('valid', 'merge world w1 confirm deletes 3 dry run'), ('valid', 'merge world w2 target 3 using ours dry run'),
  ('valid', 'merge world w1 at version 12 dry run'), ('valid', 'merge world fz_1'), ('valid', 'merge world fz_2 using theirs'),
  ('valid', 'rebase world w2;'), ('valid', 'rebase world w1c by columns using theirs;'), ('valid', $v$rebase world w2 resolve ('orders/1' = delete) at version 7$v$),
  ('valid', 'undo merge of world fz_1 skip changed;'), ('valid', 'undo merge fz_2'), ('valid', $v$restore world w1 to '-10 seconds';$v$),
  ('valid', $v$restore world w1 to checkpoint 'c1';$v$), ('valid', $v$restore world w2 to now() - interval '5 seconds'$v$),
  ('valid', $v$restore world w2 to '2026-09-20'::date$v$), ('valid', 'restore world w1 to now'), ('valid', $v$checkpoint world w1 as 'c1'$v$),
  ('valid', $v$alter system set history_retention = '2 days'$v$), ('valid', $v$alter system set history_retention to '1 hour'$v$),
  ('valid', $v$create agent fzbot0 with (can = 'read,fork,write_own,merge_own', policy = 'fzp0')$v$), ('valid', 'create agent fzbot1'),
  ('valid', $v$alter agent fzbot0 set (policy = null, max_worlds = 3, world_ttl = '1 day', disabled = true)$v$), ('valid', 'drop agent fzbot1'),
  ('valid', $v$undo agent fzbot0 since '-2 hours' skip changed$v$), ('valid', $v$undo agent fzbot0 since '-1 minute' where run_id = 'r42'$v$),
  ('valid', $v$create merge policy fzp0 with (max_rows = 500, max_deletes = 0, review_tables = 'notes')$v$),
  ('valid', $v$alter merge policy fzp0 set (max_rows = 10, tables = 'orders,items')$v$), ('valid', 'drop merge policy fzp0 cascade'),
  ('valid', 'check reads'), ('valid', 'check reads of world w3;'),
  ('valid', 'create merge check fzc0 on tables (items, orders) as select id from items where qty < 0'),
  ('valid', $v$create or replace merge check fzc1 with (timeout = '2s') as select 1 where false$v$), ('valid', 'drop merge check fzc0'),
  ('valid', $v$select * from orders as of '-10 seconds' where id < 3$v$),
  ('valid', $v$select now.id, now.status, old.status from orders now join orders as of '-10 seconds' old on old.id = now.id where old.status <> now.status$v$),
  ('valid', $v$select o.id from public.orders AS o FOR SYSTEM_TIME AS OF '-10 seconds' join items t on t.order_id = o.id limit 3$v$),
  ('valid', $v$select count(*) from orders as of now() - interval '5 seconds', items$v$),
  ('valid', $v$select * from "orders" as of '2026-09-20 10:00'::timestamptz x$v$),
  ('valid', 'with x as (select * from orders as of now) select count(*) from x');

-- ---------------------------------------------------------------------------------------------------
-- Generators. v: the vocabulary as one JSON object of arrays (loaded once per run).

create function fuzz.r(n int) returns int language sql volatile as $$ select floor(random() * greatest(n, 1))::int $$;
create function fuzz.chance(p int) returns boolean language sql volatile as $$ select random() * 100 < p $$;
create function fuzz.pick(v jsonb, c text) returns text language sql volatile as
  $$ select (v -> c) ->> floor(random() * jsonb_array_length(v -> c))::int $$;

-- seeds random() for input i of a job: an input is the same whatever ran before it
create function fuzz.seed_for(seed bigint, job int, i bigint) returns void language sql volatile as
  $$ select setseed(hashtextextended(seed::text || ':' || job::text || ':' || i::text, 0)::float8 / 9.223372036854775807e18::float8) $$;

-- random text: mostly ASCII, some of the unicode list, some any code point; never NUL
create function fuzz.rtext(maxlen int) returns text language plpgsql volatile as $$
declare s text := ''; c int;
begin
  for j in 1 .. fuzz.r(maxlen + 1) loop
    c := fuzz.r(10);
    c := case when c < 6 then 32 + fuzz.r(95)
      when c = 6 then ascii(substr($q$'"$();\@-/*.,=:Ee$q$ || E'\n\t', 1 + fuzz.r(19), 1))
      when c = 7 then (array[252, 233, 19990, 30028, 128512, 8203, 65279, 8232, 8238, 937, 223, 304, 64257, 120088, 1114111, 65533, 127, 1, 9, 10, 160, 12288])[1 + fuzz.r(22)]
      else 1 + fuzz.r(1114111) end;
    if c between 55296 and 57343 then c := 65533; end if;
    s := s || chr(c);
  end loop;
  return s;
end $$;

create function fuzz.nm(v jsonb) returns text language plpgsql volatile as $$
begin
  case fuzz.r(12)
    when 0, 1, 2, 3, 4 then return fuzz.pick(v, 'name');
    when 5, 6 then return fuzz.pick(v, 'quoted');
    when 7, 8 then return fuzz.pick(v, 'str');
    when 9 then return case fuzz.r(3) when 0 then repeat('a', 1020 + fuzz.r(8)) when 1 then repeat('ü', 510 + fuzz.r(4))
                            else '"' || repeat('""', 500 + fuzz.r(20)) || '"' end;
    when 10 then return '''' || fuzz.pick(v, 'name') || '@' || fuzz.pick(v, 'when') || '''';
    else return '"' || replace(fuzz.rtext(8), '"', '""') || '"';
  end case;
end $$;

create function fuzz.num(v jsonb) returns text language plpgsql volatile as $$
declare s text;
begin
  case fuzz.r(4)
    when 0 then return fuzz.pick(v, 'num');
    when 1 then return ((random() * 2 - 1) * 9.2e18)::bigint::text;
    when 2 then return fuzz.r(1000)::text;
    else
      select string_agg(fuzz.r(10)::text, '') into s from generate_series(1, 1 + fuzz.r(40));
      if fuzz.chance(30) then s := '-' || s; end if;
      if fuzz.chance(20) then s := s || '.' || fuzz.r(100); end if;
      return s;
  end case;
end $$;

create function fuzz.strlit(v jsonb) returns text language plpgsql volatile as $$
declare tag text;
begin
  case fuzz.r(6)
    when 0, 1, 2 then return fuzz.pick(v, 'str');
    when 3 then return '''' || replace(fuzz.rtext(12), '''', '''''') || '''';
    when 4 then
      tag := (array['', 't', 'tag', 'ü', '_1', 'a1'])[1 + fuzz.r(6)];
      return '$' || tag || '$' || fuzz.rtext(12) || case when fuzz.chance(80) then '$' || tag || '$' else '' end;
    else
      return 'E''' || replace(fuzz.rtext(3), '''', '') || (array['\x', '\u', '\U', '\', '\0', '\7', '\n', '''''', '\'''])[1 + fuzz.r(9)]
             || replace(fuzz.rtext(4), '''', '') || '''';
  end case;
end $$;

create function fuzz.tok(v jsonb) returns text language plpgsql volatile as $$
begin
  case fuzz.r(20)
    when 0, 1, 2, 3, 4, 5, 6, 7 then return fuzz.pick(v, 'kw');
    when 8, 9, 10 then return fuzz.nm(v);
    when 11, 12 then return fuzz.strlit(v);
    when 13, 14 then return fuzz.num(v);
    when 15, 16, 17 then return fuzz.pick(v, 'punct');
    when 18 then return fuzz.pick(v, 'uni');
    else return fuzz.rtext(6);
  end case;
end $$;

create function fuzz.val(v jsonb) returns text language plpgsql volatile as $$
begin
  case fuzz.r(7)
    when 0 then return fuzz.num(v);
    when 1 then return fuzz.strlit(v);
    when 2 then return fuzz.pick(v, 'bool');
    when 3 then return fuzz.nm(v);
    when 4 then return '-' || fuzz.tok(v);
    when 5 then return split_part(fuzz.pick(v, 'setting'), ' = ', 2);
    else return fuzz.tok(v);
  end case;
end $$;

create function fuzz.settings(v jsonb) returns text language plpgsql volatile as $$
declare items text[] := '{}';
begin
  for j in 1 .. fuzz.r(5) loop
    items := items || case fuzz.r(4)
      when 0 then fuzz.pick(v, 'setting')
      when 1 then fuzz.pick(v, 'setting')
      when 2 then fuzz.pick(v, 'setkey') || ' = ' || fuzz.val(v)
      else (case when fuzz.chance(50) then fuzz.pick(v, 'kw') else fuzz.tok(v) end) || ' = ' || fuzz.val(v) end;
  end loop;
  return '(' || array_to_string(items, ', ') || ')';
end $$;

create function fuzz.keyref(v jsonb) returns text language plpgsql volatile as $$
begin
  case fuzz.r(5)
    when 0 then return format('''%s/%s''', (array['orders', 'items', 'notes', 'nokey', 'nope', 'Orders'])[1 + fuzz.r(6)], fuzz.num(v));
    when 1 then return format('''%s/(%s,%s)''', fuzz.pick(v, 'name'), fuzz.num(v), fuzz.pick(v, 'name'));
    when 2 then return '''' || replace(fuzz.rtext(8), '''', '''''') || '''';
    when 3 then return fuzz.strlit(v);
    else return fuzz.tok(v);
  end case;
end $$;

create function fuzz.tablename(v jsonb) returns text language sql volatile as $$
  select case fuzz.r(4) when 0 then fuzz.nm(v) else (array['orders', 'items', 'notes', 'nokey', 'public.orders', '"Orders"', 'nope', 'worlds.tables', 'pg_class'])[1 + fuzz.r(9)] end
$$;

create function fuzz.moment(v jsonb) returns text language plpgsql volatile as $$
declare s text := '';
begin
  case fuzz.r(6)
    when 0, 1 then return fuzz.strlit(v);
    when 2 then return 'now';
    when 3 then return 'now() - interval ' || fuzz.strlit(v);
    when 4 then return '$' || fuzz.num(v);
    else
      for j in 0 .. fuzz.r(5) loop s := s || ' ' || fuzz.tok(v); end loop;
      return s;
  end case;
end $$;

create function fuzz.mclause(v jsonb) returns text language plpgsql volatile as $$
declare items text[] := '{}';
begin
  case fuzz.r(12)
    when 0 then return 'into ' || fuzz.nm(v);
    when 1 then
      for j in 1 .. fuzz.r(5) loop items := items || fuzz.tablename(v); end loop;
      return 'only tables (' || array_to_string(items, ', ') || ')';
    when 2 then
      for j in 1 .. fuzz.r(5) loop items := items || fuzz.keyref(v); end loop;
      return 'only keys (' || array_to_string(items, ', ') || ')';
    when 3 then return case when fuzz.chance(50) then 'using ' else '' end || (array['ours', 'theirs', 'OURS', 'delete'])[1 + fuzz.r(4)];
    when 4 then return 'by columns';
    when 5 then
      for j in 1 .. fuzz.r(4) loop
        items := items || (fuzz.keyref(v) || ' = ' || case fuzz.r(4) when 0 then 'ours' when 1 then 'theirs' when 2 then 'delete' else fuzz.strlit(v) end);
      end loop;
      return 'resolve (' || array_to_string(items, ', ') || ')';
    when 6 then return 'confirm';
    when 7 then return 'confirm deletes ' || fuzz.num(v);
    when 8 then return 'target ' || fuzz.num(v);
    when 9 then return 'at version ' || fuzz.num(v);
    when 10 then return 'dry run';
    else return fuzz.tok(v);
  end case;
end $$;

create function fuzz.meta(v jsonb) returns text language sql volatile as $$
  select case fuzz.r(4) when 0 then '' when 1 then ' with ' || fuzz.settings(v) when 2 then ' meta ' || fuzz.strlit(v)
              else ' meta ' || quote_literal(fuzz.pick(v, 'json')) end
$$;

-- a statement of the grammar's shapes with generated parts: mostly close to valid
create function fuzz.stmt(v jsonb) returns text language plpgsql volatile as $$
declare w text := (array['world', 'world', 'world', 'branch', 'WORLD', 'worlds', ''])[1 + fuzz.r(7)]; s text; items text[] := '{}';
begin
  case fuzz.r(26)
    when 0 then return format('create %s %s%s%s', w, fuzz.nm(v), case when fuzz.chance(40) then ' from ' || fuzz.nm(v) else '' end, fuzz.meta(v));
    when 1 then return format('fork world %s %s%s%s', fuzz.nm(v), case when fuzz.chance(50) then 'as ' else '' end, fuzz.nm(v), fuzz.meta(v));
    when 2 then return format('%s %s %s', (array['switch', 'use'])[1 + fuzz.r(2)], w, fuzz.nm(v));
    when 3 then return 'show ' || (array['worlds', 'branches', 'history', 'history_retention', 'agents', 'reviews', 'merge policies',
                                          'merge checks', 'audit', 'storage', 'disk', 'metrics', 'readers'])[1 + fuzz.r(13)];
    when 4 then return 'show history' || case when fuzz.chance(50) then ' for ' || case when fuzz.chance(50) then 'world ' else '' end || fuzz.nm(v) else '' end
                       || case when fuzz.chance(50) then ' limit ' || fuzz.num(v) else '' end;
    when 5 then return format('alter world %s %s', fuzz.nm(v), case fuzz.r(6) when 0 then 'set ' || fuzz.settings(v) when 1 then 'set ttl ' || fuzz.strlit(v)
                       when 2 then 'reset ttl' when 3 then 'set pinned' when 4 then 'reset pinned' else fuzz.tok(v) end);
    when 6 then return format('%s %s %s%s%s', (array['drop', 'delete'])[1 + fuzz.r(2)], w, case when fuzz.chance(30) then 'if exists ' else '' end,
                       fuzz.nm(v), case when fuzz.chance(30) then ' cascade' else '' end);
    when 7 then
      s := 'diff';
      if fuzz.chance(70) then
        s := s || ' ' || w || ' ' || fuzz.nm(v);
        if fuzz.chance(50) then s := s || ' to ' || fuzz.nm(v); end if;
      end if;
      if fuzz.chance(30) then s := s || ' as sql'; end if;
      if fuzz.chance(30) then s := s || ' limit ' || fuzz.num(v); end if;
      if fuzz.chance(10) then s := s || ' readers'; end if;
      return s;
    when 8, 9 then
      for j in 1 .. fuzz.r(5) loop items := items || fuzz.mclause(v); end loop;
      return format('merge %s %s %s', w, case when fuzz.chance(80) then fuzz.nm(v) else '' end, array_to_string(items, ' '));
    when 10 then
      for j in 1 .. fuzz.r(4) loop items := items || fuzz.mclause(v); end loop;
      return format('rebase world %s %s', case when fuzz.chance(80) then fuzz.nm(v) else '' end, array_to_string(items, ' '));
    when 11 then return format('undo merge %s%s %s%s', case when fuzz.chance(50) then 'of ' else '' end, w, fuzz.nm(v), case when fuzz.chance(40) then ' skip changed' else '' end);
    when 12 then return format('restore world %s to %s', fuzz.nm(v), case when fuzz.chance(30) then 'checkpoint ' || fuzz.strlit(v) else fuzz.moment(v) end);
    when 13 then return format('checkpoint world %s as %s', fuzz.nm(v), fuzz.strlit(v));
    when 14 then return format('alter system set history_retention %s %s', (array['=', 'to', '', '=='])[1 + fuzz.r(4)], fuzz.val(v));
    when 15 then return format('create agent %s%s', fuzz.nm(v), case when fuzz.chance(70) then ' with ' || fuzz.settings(v) else '' end);
    when 16 then return format('alter agent %s set %s', fuzz.nm(v), fuzz.settings(v));
    when 17 then return format('drop agent %s', fuzz.nm(v));
    when 18 then return format('undo agent %s since %s%s%s', fuzz.nm(v), fuzz.moment(v), case when fuzz.chance(40) then ' skip changed' else '' end,
                       case when fuzz.chance(40) then ' where run_id = ' || fuzz.strlit(v) else '' end);
    when 19 then return format('create merge policy %s%s', fuzz.nm(v), case when fuzz.chance(70) then ' with ' || fuzz.settings(v) else '' end);
    when 20 then return format('alter merge policy %s set %s', fuzz.nm(v), fuzz.settings(v));
    when 21 then return format('drop merge %s %s%s', (array['policy', 'check'])[1 + fuzz.r(2)], fuzz.nm(v), case when fuzz.chance(30) then ' cascade' else '' end);
    when 22 then return 'check reads' || case when fuzz.chance(60) then format(' of %s %s', w, fuzz.nm(v)) else '' end;
    when 23 then
      for j in 1 .. fuzz.r(4) loop items := items || fuzz.tablename(v); end loop;
      s := format('create %smerge check %s', case when fuzz.chance(30) then 'or replace ' else '' end, fuzz.nm(v));
      if fuzz.chance(50) then s := s || ' on tables (' || array_to_string(items, ', ') || ')'; end if;
      if fuzz.chance(30) then s := s || ' with ' || fuzz.settings(v); end if;
      s := s || ' as ';
      if fuzz.chance(50) then
        s := s || (array['select id from items where qty < 0', 'select 1 where false', 'select * from orders', 'select nextval(''x'')',
                         'select pg_notify(''a'', ''b'')', 'with x as (select 1) select * from x', 'select id from nope', 'update orders set id = 1',
                         'select count(*) from orders as of now', 'select 1; select 2'])[1 + fuzz.r(10)];
      else
        for j in 0 .. fuzz.r(8) loop s := s || ' ' || fuzz.tok(v); end loop;
      end if;
      return s;
    when 24 then
      s := case fuzz.r(4)
        when 0 then format('%s as of %s', fuzz.tablename(v), fuzz.moment(v))
        when 1 then format('%s %s as of %s', fuzz.tablename(v), fuzz.nm(v), fuzz.moment(v))
        when 2 then format('%s for system_time as of %s', fuzz.tablename(v), fuzz.moment(v))
        else format('%s as %s as of %s %s', fuzz.tablename(v), fuzz.nm(v), fuzz.moment(v), fuzz.tok(v)) end;
      return format('%s * from %s%s', (array['select', 'select', 'select count(*),', 'with x as (select', 'insert into nokey select', 'update nokey set a = 1 from',
                                              'delete from nokey using', 'create table fz_t as select'])[1 + fuzz.r(8)], s,
                    case when fuzz.chance(40) then format(' %s %s', (array['where', 'join', 'on', ',', 'limit', 'as', 'for', 'as of'])[1 + fuzz.r(8)], fuzz.tok(v)) else '' end);
    else return format('simulate %s worlds from %s as %s run %s score %s keep %s', fuzz.num(v), fuzz.nm(v), fuzz.nm(v), fuzz.strlit(v), fuzz.strlit(v), fuzz.num(v));
  end case;
end $$;

-- a statement as a soup of the vocabulary's tokens
create function fuzz.soup(v jsonb) returns text language plpgsql volatile as $$
declare sep text := (array[' ', ' ', ' ', '', E'\n', E'\t', '  /* c */ ', E' -- x\n'])[1 + fuzz.r(8)]; s text := '';
begin
  for j in 0 .. fuzz.r(16) loop
    s := s || case when j > 0 then sep else '' end || fuzz.tok(v);
  end loop;
  return s;
end $$;

-- drop / duplicate / swap / replace / insert tokens, truncate, change characters, splice another statement
create function fuzz.mutate(v jsonb, s text) returns text language plpgsql volatile as $$
declare
  t text[] := array(select m[1] from regexp_matches(s, '([[:alnum:]_$]+|''[^'']*''?|"[^"]*"?|\s+|.)', 'g') m);
  o text[]; n int; i int; j int; x text; a int; b int;
begin
  for round in 0 .. fuzz.r(4) loop
    n := coalesce(array_length(t, 1), 0);
    i := 1 + fuzz.r(n);
    case fuzz.r(11)
      when 0 then if n > 0 then t := t[1:i - 1] || t[i + 1:n]; end if;
      when 1 then if n > 0 then t := t[1:i] || t[i:n]; end if;
      when 2 then if n > 1 then j := 1 + fuzz.r(n); x := t[i]; t[i] := t[j]; t[j] := x; end if;
      when 3 then if n > 0 then t[i] := fuzz.tok(v); end if;
      when 4 then t := t[1:i - 1] || (' ' || fuzz.tok(v) || ' ') || t[i:n];
      when 5 then if n > 0 then t := t[1:fuzz.r(n)]; end if;
      when 6 then
        if n > 0 then
          x := t[i]; a := 1 + fuzz.r(length(x) + 1);
          t[i] := case fuzz.r(3) when 0 then overlay(x placing '' from a for 1) when 1 then overlay(x placing fuzz.rtext(1) from a for 1)
                                 else overlay(x placing fuzz.rtext(1) from a for 0) end;
        end if;
      when 7 then if n > 0 then t[i] := case when fuzz.chance(50) then upper(t[i]) else lower(t[i]) end; end if;
      when 8 then
        o := array(select m[1] from regexp_matches(fuzz.pick(v, 'valid'), '([[:alnum:]_$]+|''[^'']*''?|"[^"]*"?|\s+|.)', 'g') m);
        a := 1 + fuzz.r(array_length(o, 1)); b := a + fuzz.r(array_length(o, 1) - a + 1);
        t := t[1:i - 1] || o[a:b] || t[i:n];
      when 9 then if n > 0 and btrim(t[i], E' \t\n\r') = '' then t[i] := case when fuzz.chance(50) then '' else ';' end; end if;
      else t := t[1:i - 1] || fuzz.pick(v, 'punct') || t[i:n];
    end case;
  end loop;
  return array_to_string(t, '');
end $$;

-- deep nesting, long runs, huge sizes
create function fuzz.extreme(v jsonb) returns text language plpgsql volatile as $$
declare n int := 1 + fuzz.r(case when fuzz.chance(10) then 20000 else 2000 end);
begin
  case fuzz.r(10)
    when 0 then return format('restore world w1 to %snow()%s', repeat('(', n), repeat(')', n));
    when 1 then return format('select * from orders as of %s''-1 hour''%s', repeat('(', n), repeat(')', n));
    when 2 then return format('merge world w1 only tables (%s) dry run', (select string_agg('orders', ', ') from generate_series(1, least(n, 5000))));
    when 3 then return format('create world fz_x with (%s)', (select string_agg(format('k%s = %s', g, g), ', ') from generate_series(1, least(n, 3000)) g));
    when 4 then return 'create world ' || repeat('a', n);
    when 5 then return 'diff world w1 /*' || repeat('/*', least(n, 5000));
    when 6 then return repeat('select * from orders as of ', least(n, 2000));
    when 7 then return 'restore world w1 to ' || repeat('- ', n) || '1';
    when 8 then return 'select * from orders as of $1' || repeat('::int', least(n, 5000));
    else return 'create world "' || repeat('""', least(n, 5000)) || '"';
  end case;
end $$;

-- valid statements against the database's own worlds (w1, w2, w3, w1c and fz_0 .. fz_9): the real paths
create function fuzz.live(v jsonb) returns text language plpgsql volatile as $$
declare
  w text := 'fz_' || fuzz.r(10);
  base text := (array['w1', 'w2', 'w3', 'w1c', 'main', 'fz_' || fuzz.r(10)])[1 + fuzz.r(6)];
  any_w text := (array['w1', 'w2', 'w3', 'w1c', 'fz_' || fuzz.r(10), 'fz_' || fuzz.r(10)])[1 + fuzz.r(6)];
begin
  case fuzz.r(22)
    when 0, 1 then return format('create world %s%s%s', w, case when fuzz.chance(50) then ' from ' || base else '' end,
                             case fuzz.r(4) when 0 then ' with (task = ' || fuzz.r(100) || ')' when 1 then ' with (check_reads = true)'
                                            when 2 then $q$ with (may_change = 'orders.status, notes', tenant = 'org_id = 1', max_rows = 20)$q$ else '' end);
    when 2 then return format('fork world %s as %s', base, w);
    when 3 then return format('drop world %s%s%s', case when fuzz.chance(50) then 'if exists ' else '' end, w, case when fuzz.chance(50) then ' cascade' else '' end);
    when 4, 5 then return format('merge world %s %s', any_w, (array['', 'dry run', 'by columns', 'using ours', 'using theirs', 'only tables (orders)',
                             'into ' || base, 'by columns using theirs dry run', 'only keys (''orders/1'', ''notes/n1'')', 'into ' || base || ' dry run',
                             'at version 1', 'confirm deletes 1', 'resolve (''orders/1'' = theirs)'])[1 + fuzz.r(13)]);
    when 6 then return format('rebase world %s%s', any_w, (array['', ' using theirs', ' by columns', ' using ours', ' at version 2'])[1 + fuzz.r(5)]);
    when 7 then return format('diff world %s%s%s%s', any_w, case when fuzz.chance(40) then ' to ' || base else '' end,
                             case when fuzz.chance(30) then ' as sql' else '' end, case when fuzz.chance(30) then ' limit ' || fuzz.r(10) else '' end);
    when 8 then return format('checkpoint world %s as ''c%s''', any_w, fuzz.r(3));
    when 9 then return format('restore world %s to %s', any_w, (array['checkpoint ''c0''', 'checkpoint ''c1''', '''-5 seconds''', 'now',
                             'now() - interval ''2 seconds''', '''-1 minute'''])[1 + fuzz.r(6)]);
    when 10 then return format('undo merge of world %s%s', any_w, case when fuzz.chance(50) then ' skip changed' else '' end);
    when 11 then return format('show history for world %s limit %s', any_w, fuzz.r(10));
    when 12 then return format('alter world %s %s', any_w, (array['set (task = 7, reviewer = ''ada'')', 'set ttl ''1 day''', 'reset ttl', 'set pinned',
                             'reset pinned', 'set (check_reads = false)', 'set (may_change = ''orders'')', 'set (tenant = null)'])[1 + fuzz.r(8)]);
    when 13 then return format('check reads of world %s', any_w);
    when 14 then return (array['switch world ' || any_w, 'use main', 'use world ' || any_w, 'switch world ''' || any_w || '@now'''])[1 + fuzz.r(4)];
    when 15 then return (array['select count(*) from orders as of now o where id < 10',
                               format('select * from orders as of ''-%s seconds'' where id = %s', 1 + fuzz.r(30), fuzz.r(20)),
                               'select n.id, o.status from orders n join orders as of now() - interval ''3 seconds'' o on o.id = n.id limit 5',
                               format('select count(*) from items as of ''%s@now''', any_w)])[1 + fuzz.r(4)];
    when 16 then return (array[format('create merge policy fzp%s with (max_rows = %s, max_deletes = 0)', fuzz.r(3), fuzz.r(50)),
                               format('drop merge policy fzp%s cascade', fuzz.r(3)), format('alter merge policy fzp%s set (review_tables = ''notes'')', fuzz.r(3))])[1 + fuzz.r(3)];
    when 17 then return (array[format('create agent fzbot%s with (can = ''read,fork,write_own,merge_own'', policy = ''fzp%s'')', fuzz.r(3), fuzz.r(3)),
                               format('alter agent fzbot%s set (max_worlds = %s)', fuzz.r(3), fuzz.r(5)), format('drop agent fzbot%s', fuzz.r(3)),
                               format('undo agent fzbot%s since ''-1 minute''', fuzz.r(3))])[1 + fuzz.r(4)];
    when 18 then return (array[format('create or replace merge check fzc%s on tables (items) as select id from items where qty < 0', fuzz.r(3)),
                               format('drop merge check fzc%s', fuzz.r(3))])[1 + fuzz.r(2)];
    when 19 then return (array['show worlds', 'show branches', 'show reviews', 'show agents', 'show merge checks', 'show audit limit 5',
                               'show history_retention', 'show merge policies', 'check reads', 'diff'])[1 + fuzz.r(10)];
    when 20 then return format('diff world ''main@-%s seconds'' to %s limit 5', 1 + fuzz.r(20), base);
    else return format('diff world %s to ''%s@-%s seconds''', any_w, base, 1 + fuzz.r(5));
  end case;
end $$;

-- an argument of a type, as SQL text
create function fuzz.arg(v jsonb, typ text) returns text language plpgsql volatile as $$
declare x text;
begin
  if fuzz.chance(8) then return 'NULL::' || typ; end if;
  case typ
    when 'text' then
      x := case fuzz.r(6) when 0 then fuzz.pick(v, 'text') when 1 then fuzz.pick(v, 'text') when 2 then fuzz.pick(v, 'text') when 3 then fuzz.rtext(20) when 4 then 'fz_' || fuzz.r(10)
                         else (array['w1', 'w2', 'w3', 'main', 'w1c'])[1 + fuzz.r(5)] end;
      return quote_literal(x) || '::text';
    when 'jsonb' then
      x := case fuzz.r(5)
        when 0 then fuzz.pick(v, 'json')
        when 1 then fuzz.pick(v, 'json')
        when 2 then jsonb_build_object(fuzz.pick(v, 'setkey'), (array[to_jsonb(fuzz.r(100)), to_jsonb(-1), to_jsonb(9.3e18::numeric), to_jsonb(fuzz.rtext(6)),
                    'null'::jsonb, 'true'::jsonb, '[1, 2]'::jsonb, '{"a": {}}'::jsonb, to_jsonb('1 day'::text), to_jsonb('orders'::text)])[1 + fuzz.r(10)])::text
        when 3 then repeat('[', fuzz.r(3000)) || repeat(']', fuzz.r(3000))
        else (select jsonb_object_agg(fuzz.pick(v, 'setkey'), fuzz.r(1000)) from generate_series(0, fuzz.r(50)))::text end;
      return quote_literal(x) || '::jsonb';
    when 'text[]' then
      return case fuzz.r(5) when 0 then '''{}''::text[]' when 1 then 'ARRAY[''orders'']'
        when 2 then 'ARRAY[' || (select string_agg(quote_literal((array['orders', 'items', 'notes', 'nope', 'orders/1', 'notes/n1', 'items/(1,2)', '', 'orders/'])[1 + fuzz.r(9)]), ', ')
                                  from generate_series(0, fuzz.r(5))) || ']::text[]'
        when 3 then 'ARRAY[NULL, ''orders'']::text[]'
        else 'ARRAY[' || quote_literal(fuzz.rtext(10)) || ']::text[]' end;
    when 'boolean' then return (array['true', 'false'])[1 + fuzz.r(2)];
    when 'bigint', 'integer', 'smallint' then
      x := (array['0', '1', '-1', '2', '5', '100', '-100', '2147483647', '-2147483648', '32767', '-32768', '9223372036854775807', '-9223372036854775808',
                  fuzz.r(1000)::text])[1 + fuzz.r(14)];
      return '(' || x || ')::' || typ;
    when 'numeric' then return '''' || (array['0', '1e100', '-1', 'NaN', 'Infinity', '-Infinity', '0.0000001', '123456789012345678901234567890.5', '1712345678'])[1 + fuzz.r(9)] || '''::numeric';
    when 'double precision' then return '''' || (array['0', 'NaN', 'Infinity', '-Infinity', '1e308', '-0', '3.5', '1712345678.25', '-1e308'])[1 + fuzz.r(9)] || '''::float8';
    when 'timestamp with time zone', 'timestamp without time zone', 'date' then
      return '(' || (array['now()', 'now() - interval ''5 seconds''', 'now() - interval ''1 hour''', 'now() + interval ''1 day''', '''infinity''',
                           '''-infinity''', '''4713-01-01 BC''', '''294276-12-31''', '''2000-01-01''', 'current_date', '''5874897-12-31'''])[1 + fuzz.r(11)] || ')::' || typ;
    when 'interval' then return '''' || (array['1 hour', '-1 hour', '0', '178000000 years', '-178000000 years', '1 microsecond', '1 day', '2 seconds'])[1 + fuzz.r(8)] || '''::interval';
    when 'regclass' then return '''' || (array['orders', 'items', 'notes', 'nokey', 'pg_class', 'worlds.tables', '"Orders"'])[1 + fuzz.r(7)] || '''::regclass';
    when 'anyelement' then return (array['NULL::orders', 'NULL::items', 'NULL::notes', 'NULL::nokey', 'NULL::int', '1', 'NULL::worlds.tables'])[1 + fuzz.r(7)];
    else return 'NULL::' || typ;
  end case;
end $$;

-- one input: category (sql, typed, setting), what a person reads (input), what runs (exec), whether a
-- success is kept (committed with the batch) or rolled back
create function fuzz.gen(v jsonb, funcs jsonb, out cat text, out input text, out exec text, out keep boolean, out guc text, out gucval text)
language plpgsql volatile as $$
declare k int := fuzz.r(100); f jsonb; nargs int; args text[] := '{}'; q text;
begin
  keep := false;
  if k < 55 then
    cat := 'sql';
    case fuzz.r(100) / 5
      when 0, 1, 2, 3, 4 then input := fuzz.stmt(v); keep := fuzz.chance(5);
      when 5, 6, 7, 8 then input := fuzz.mutate(v, fuzz.pick(v, 'valid'));
      when 9 then input := fuzz.pick(v, 'valid'); keep := fuzz.chance(20);
      when 10, 11, 12, 13 then input := fuzz.live(v); keep := fuzz.chance(50);
      when 14, 15 then input := fuzz.soup(v);
      when 16 then input := fuzz.rtext(60);
      when 17 then input := fuzz.extreme(v);
      else input := fuzz.mutate(v, fuzz.stmt(v));
    end case;
    exec := 'select count(*) from worlds.sql(' || quote_literal(input) || ')';
  elsif k < 85 then
    cat := 'typed';
    f := funcs -> fuzz.r(jsonb_array_length(funcs));
    nargs := (f ->> 'nreq')::int + fuzz.r(jsonb_array_length(f -> 'argtypes') - (f ->> 'nreq')::int + 1);
    if fuzz.chance(3) then nargs := fuzz.r(nargs + 2); end if;
    for j in 0 .. nargs - 1 loop
      args := args || fuzz.arg(v, coalesce((f -> 'argtypes') ->> j, 'text'));
    end loop;
    input := format('%s(%s)', f ->> 'name', array_to_string(args, ', '));
    exec := 'select count(*) from ' || input || ' f';
  else
    cat := 'setting';
    guc := fuzz.pick(v, 'guc');
    gucval := case
      when guc = 'worlds.world' then case fuzz.r(8) when 0 then fuzz.pick(v, 'text') when 1 then fuzz.pick(v, 'text') when 2 then fuzz.pick(v, 'text') when 3 then fuzz.rtext(12)
                                                 when 4 then 'fz_' || fuzz.r(10) when 5 then (array['w1@now', 'main@-5 seconds', 'w2@-1 minute', 'w1c@now'])[1 + fuzz.r(4)]
                                                 else (array['w1', 'w2', 'w3', 'w1c', 'main'])[1 + fuzz.r(5)] end
      when fuzz.chance(20) then fuzz.rtext(8) else fuzz.pick(v, 'gucval') end;
    if fuzz.chance(25) then
      q := fuzz.pick(v, 'dml');
      keep := guc = 'worlds.world' and gucval ~ '^(w1|w2|w3|w1c|fz_[0-9])$' and fuzz.chance(40);
    else
      q := fuzz.pick(v, 'query');
    end if;
    input := format('set_config(%L, %L, true); %s', guc, gucval, q);
    exec := q;
  end if;
end $$;

-- the inputs of a job from i, regenerated (for a crash's replay)
create function fuzz.inputs(seed bigint, job int, first bigint, n bigint)
returns table (i bigint, cat text, input text, exec text, guc text, gucval text) language plpgsql volatile as $$
declare v jsonb; funcs jsonb; g record;
begin
  select jsonb_object_agg(class, toks) into v from (select class, jsonb_agg(tok) toks from fuzz.vocab group by class) s;
  select jsonb_agg(jsonb_build_object('name', name, 'argtypes', to_jsonb(argtypes), 'nreq', nreq) order by fn) into funcs from fuzz.funcs;
  for k in first .. first + n - 1 loop
    perform fuzz.seed_for(seed, job, k);
    g := fuzz.gen(v, funcs);
    i := k; cat := g.cat; input := g.input; exec := g.exec; guc := g.guc; gucval := g.gucval;
    return next;
  end loop;
end $$;

-- ---------------------------------------------------------------------------------------------------
-- Upkeep between batches: back to main, the base worlds there with their changes, the number of worlds
-- bounded, merge checks other than keep_* dropped (one that finds rows would refuse every merge)

create function fuzz.base_world(w text) returns void language plpgsql as $$
begin
  if exists (select 1 from worlds.show_worlds() s where s.name = w) then return; end if;
  case w
    when 'w1' then
      perform worlds.create_world('w1', 'main', '{"task": 1}');
      perform set_config('worlds.world', 'w1', true);
      update orders set status = 'w1' where id % 10 = 1;
      insert into notes values ('w1-' || floor(random() * 1e9)::text, 'from w1', 1);
      delete from items where id in (390, 391);
      update nokey set b = 'w1' where a = 1;
    when 'w2' then
      perform worlds.create_world('w2', 'main', '{"task": 2}');
      perform set_config('worlds.world', 'w2', true);
      update orders set status = 'w2' where id % 10 in (1, 2);
      update orders set amount = amount + 1 where id % 7 = 0;
      insert into notes values ('w2-' || floor(random() * 1e9)::text, 'from w2', 2);
    when 'w3' then
      perform worlds.create_world('w3', 'main', '{"check_reads": true}');
      perform set_config('worlds.world', 'w3', true);
      perform count(*) from orders where owner = 'u1';
      perform * from orders where id = 9;
      update orders set owner = 'u9' where id = 5;
    when 'w1c' then
      perform worlds.fork_world('w1', 'w1c', null);
      perform set_config('worlds.world', 'w1c', true);
      update orders set status = 'w1c' where id = 11;
      insert into items values (5000 + floor(random() * 1e6)::int, 11, 'w1c-' || random(), 2);
  end case;
  perform set_config('worlds.world', 'main', true);
end $$;

create procedure fuzz.upkeep(job int, max_worlds int) language plpgsql as $$
declare nm text; st text; msg text;
begin
  perform set_config('worlds.world', 'main', false);
  if job <> 1 then return; end if;
  if (select count(*) from worlds.show_worlds()) > max_worlds then
    for nm in select s.name from worlds.show_worlds() s where s.name not in ('main', 'w1', 'w2', 'w3', 'w1c') order by s.depth desc loop
      begin
        perform worlds.drop_world(nm, true, true);
      exception when others then
        get stacked diagnostics st = returned_sqlstate, msg = message_text;
        insert into fuzz.maintenance (job, what, sqlstate, message) values (job, 'drop world ' || nm, st, msg);
      end;
    end loop;
  end if;
  for nm in select c.name from worlds.show_merge_checks() c where c.name not like 'keep%' loop
    begin
      perform worlds.drop_merge_check(nm);
    exception when others then
      get stacked diagnostics st = returned_sqlstate, msg = message_text;
      insert into fuzz.maintenance (job, what, sqlstate, message) values (job, 'drop merge check ' || nm, st, msg);
    end;
  end loop;
  foreach nm in array array['w1', 'w2', 'w3', 'w1c'] loop
    begin
      perform fuzz.base_world(nm);
    exception when others then
      get stacked diagnostics st = returned_sqlstate, msg = message_text;
      insert into fuzz.maintenance (job, what, sqlstate, message) values (job, 'base world ' || nm, st, msg);
    end;
  end loop;
  perform set_config('worlds.world', 'main', false);
end $$;

-- ---------------------------------------------------------------------------------------------------
-- The run: inputs first .. first + n - 1 of a job, one subtransaction each, committed by batches

-- tag: record the counts and failures under this job number instead (a replay's)
create procedure fuzz.run(job int, seed bigint, first bigint, n bigint, batch int default 100, max_worlds int default 40, tag int default null)
language plpgsql as $$
declare
  rec int := coalesce(tag, job);
  v jsonb; funcs jsonb; g record; i bigint := first;
  st text; msg text; det text; ctx text; t0 timestamptz; ms float8; k text;
  cnt jsonb := '{}'; fails jsonb := '[]'; slow jsonb := '[]';
begin
  select jsonb_object_agg(class, toks) into v from (select class, jsonb_agg(tok) toks from fuzz.vocab group by class) s;
  select jsonb_agg(jsonb_build_object('name', name, 'argtypes', to_jsonb(argtypes), 'nreq', nreq) order by fn) into funcs from fuzz.funcs;
  insert into fuzz.progress values (rec, seed, first, first + n - 1, now(), now())
    on conflict on constraint progress_pkey do update set seed = excluded.seed, next_i = excluded.next_i, last_i = excluded.last_i, updated = now();
  commit;
  while i < first + n loop
    perform fuzz.seed_for(seed, job, i);
    g := fuzz.gen(v, funcs);
    perform set_config('application_name', format('fuzz j%s i%s', job, i), false);
    t0 := clock_timestamp();
    begin
      if g.cat = 'setting' then
        perform set_config(g.guc, g.gucval, true);
      end if;
      execute g.exec;
      if not g.keep then
        raise sqlstate 'FZ000';
      end if;
      st := '00000';
    exception when others then
      get stacked diagnostics st = returned_sqlstate, msg = message_text, det = pg_exception_detail, ctx = pg_exception_context;
      if st = 'FZ000' then st := '00000'; end if;
    end;
    ms := extract(epoch from clock_timestamp() - t0) * 1000;
    k := g.cat || ' ' || st;
    cnt := jsonb_set(cnt, array[k], to_jsonb(coalesce((cnt ->> k)::bigint, 0) + 1));
    if st like 'XX%' or st like '58%' or st in ('P0004', '54001') then
      fails := fails || jsonb_build_object('i', i, 'cat', g.cat, 'st', st, 'input', left(g.input, 4000), 'exec', left(g.exec, 4000),
                                           'msg', left(msg, 2000), 'det', left(det, 2000), 'ctx', left(ctx, 2000));
    end if;
    if ms > 2000 then
      slow := slow || jsonb_build_object('i', i, 'cat', g.cat, 'st', st, 'ms', ms, 'input', left(g.input, 2000));
    end if;
    i := i + 1;
    if (i - first) % batch = 0 or i = first + n then
      perform set_config('worlds.world', 'main', false);
      insert into fuzz.counts (job, category, sqlstate, n)
        select rec, split_part(e.key, ' ', 1), split_part(e.key, ' ', 2), e.value::bigint from jsonb_each_text(cnt) e
        on conflict on constraint counts_pkey do update set n = fuzz.counts.n + excluded.n;
      insert into fuzz.failures (job, i, category, sqlstate, input, exec, message, detail, context)
        select rec, (f ->> 'i')::bigint, f ->> 'cat', f ->> 'st', f ->> 'input', f ->> 'exec', f ->> 'msg', f ->> 'det', f ->> 'ctx'
          from jsonb_array_elements(fails) f;
      insert into fuzz.slow select rec, (f ->> 'i')::bigint, f ->> 'cat', f ->> 'st', (f ->> 'ms')::float8, f ->> 'input' from jsonb_array_elements(slow) f;
      update fuzz.progress p set next_i = i, updated = now() where p.job = rec;
      cnt := '{}'; fails := '[]'; slow := '[]';
      begin
        call fuzz.upkeep(job, max_worlds);
      exception when others then
        get stacked diagnostics st = returned_sqlstate, msg = message_text;
        insert into fuzz.maintenance (job, what, sqlstate, message) values (rec, 'upkeep', st, msg);
      end;
      commit;
      exit when exists (select 1 from fuzz.stop);
    end if;
  end loop;
end $$;

-- the base worlds and their changes, at the start
call fuzz.upkeep(1, 1000);
select count(*) from worlds.sql('create merge check keep_qty on tables (items) as select id from items where qty < 0');
