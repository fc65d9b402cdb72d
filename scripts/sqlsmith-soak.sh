#!/usr/bin/env bash
# Random SQL against pg_worlds: sqlsmith on four sides of one database, every crash and internal error
# (SQLSTATE XX000) found in the server log, each one's statement rerun on a cluster without pg_worlds to
# tell pg_worlds' failures from stock PostgreSQL's.
#
#   scripts/sqlsmith-soak.sh                          # SOAK_QUERIES=3000 per side
#   SOAK_QUERIES=100000 scripts/sqlsmith-soak.sh      # the long run
#
# It uses the pg_worlds already installed in the system Postgres (it builds and installs nothing).
#
# Clusters (throwaway, made anew each run under .run/): `smith` (SOAK_PORT, default 56300) preloads
# pg_worlds; `smith_stock` (SOAK_STOCK_PORT, default 56310) has neither the preload nor the extension and
# holds the same schema and rows in database smith (main's rows) and smith_w (the world's rows, as the
# world reads them): the reference a failing statement of main, or of the world, is rerun on (a world is to
# behave as a database holding its rows). pg_worlds' own relations and functions (schemas worlds and
# worlds_data, which the superuser's statements name too) are made there as well, as plain tables with
# the same columns, rows and grants and as stand-in functions (see mirror_pg_worlds), so such a statement
# can be rerun on stock too.
#
# The database: nine tables of varied types (jsonb, arrays, numeric of several precisions, timestamp,
# timestamptz, date, interval, text, varchar, char, bool, uuid, inet, bytea, tsvector, int4range), keyed by
# int, bigint identity, text, uuid and composite keys, one without a key (duplicate rows included), foreign
# keys (one self reference), CHECKs and UNIQUEs, three views; a few hundred rows each, made without
# random() so both clusters hold the same. Then `create extension pg_worlds` (every table tracked) and a
# world `w` in which rows of seven tables are updated, inserted and deleted, so the world differs from main.
# An ordinary role `smith_user` (LOGIN; USAGE on the schema; SELECT, INSERT, UPDATE, DELETE on the tables
# and views, USAGE on the sequences) exists on both clusters.
#
# Sides (SOAK_SIDES): main_su (main, superuser), world_su (world w, superuser), main_user and world_user
# (the same as smith_user). Each runs `sqlsmith --target="... options='-c worlds.world=w -c
# statement_timeout=1s'" --exclude-catalog --verbose --dump-all-queries --seed=S --max-queries=M`
# (the generated statements kept gzipped in <side>/run<k>.sql.gz). sqlsmith runs each
# statement as BEGIN; statement; ROLLBACK, so the writes it generates (INSERT, UPDATE, DELETE, upserts,
# MERGE, SELECT ... FOR UPDATE) leave main and the world as they were. It sets statement_timeout to 1s
# itself right after connecting (over whatever the connection string says), so the timeout is 1 s.
#
# --exclude-catalog: without it, sqlsmith picks the relations of its FROM clauses among every relation in
# information_schema.tables, and the ~200 of pg_catalog and information_schema would crowd out the
# twelve user relations pg_worlds routes (in a world, statements over catalogs alone run as in main). With
# it, the FROM clauses name the user's tables and views, and pg_worlds' own relations that
# information_schema shows the role (the superuser all 70-odd of schemas worlds and worlds_data, so most of
# its FROM items are those; smith_user the 18 PUBLIC may read); functions and operators still come from all
# of pg_proc / pg_operator, pg_catalog's and pg_worlds' included. The script prints the mix.
#
# How queries are counted: sqlsmith --verbose prints one progress character per statement it generated:
# '.' ran, 'e' error (a timeout too, with Debian's 1.4), 'S' syntax error, 'C' connection lost (1.5 prints
# 't', 's', 'c'; both are read); its report lines never consist of those characters alone, so the progress
# is the lines made only of them. A lost connection is the statement that was running when the backend
# died (the first 'C' of a run of them); the next 'C's are statements sqlsmith could not send while the
# server was still recovering (it reconnects once a second). Queries run = '.' + 'e' + 'S' + runs of 'C'
# (the server log has no line per statement: counting there would need log_statement = all). Timeouts are
# read from sqlsmith's last error report of each chunk. sqlsmith stops when it has generated --max-queries
# and exits if it can't connect at its start or load the schema: the script runs it in chunks of
# SOAK_CHUNK (default 5000), each with a new seed (written to .run/sqlsmith/<side>/seeds), until the side
# has run SOAK_QUERIES, waiting for the server to take connections before each chunk.
#
# Crashes and internal errors are read from the server's JSON log (logging_collector, jsonlog;
# log_connections maps each backend's PID to its side through its application_name soak_<side>;
# log_min_error_statement=error puts the statement in the error's record; log_error_verbosity=verbose the
# C function and file): a crash is the postmaster's "server process (PID n) was terminated by signal ..."
# (or an exit code other than 0 and 1), its statement the "Failed process was running:" detail (which the
# postmaster cuts at 1023 bytes: the whole statement is the generated one that begins with them); a PANIC is
# counted with it; an internal error is a record with SQLSTATE class XX (XX000, XX001, XX002), its
# statement the record's. The stderr log .run/smith/data/log/server.log has them too, with the SQLSTATE
# in each line's prefix. Every such statement is rerun (BEGIN; statement; ROLLBACK, with sqlsmith's 1 s
# timeout, and 10 s when that timed out) as the same role on the stock cluster: it is stock's if stock
# fails the same way (a crash, or a class XX error), else pg_worlds'. It is also rerun on the side itself, to tell whether it reproduces (a crash only the
# first SOAK_MAX_CRASH_REPROS times per side, default 20; SOAK_MAX_RERUNS, default 1000, bounds all reruns:
# past it a failure takes the attribution of the first one with its message). After a crash the
# postmaster reinitialises and replays WAL; sqlsmith reconnects on its own and the script waits for
# connections before each chunk and after each rerun that crashed.
#
# Cores: the smith cluster runs with an unlimited core size and cores without shared memory (SOAK_CORES=0:
# none); a core that appears in its data directory (kernel.core_pattern a plain file name) is read by gdb
# against the very pg_worlds.so the cluster loaded (hard-linked at its start into .run/sqlsmith/sysroot: a
# build installed meanwhile doesn't confuse the backtrace) and removed; after SOAK_MAX_CORES backtraces
# (default 5) cores hold no memory. A statement still running SOAK_HANG seconds (default 30) after it
# started despite the 1 s timeout is recorded as a hang and its backend terminated.
#
# Output under .run/sqlsmith/: <side>/crash_<n>.sql and <side>/xx000_<n>.sql (the failing statement, with
# its message, location, the reruns and the attribution as comments; a crash's file also holds the server
# log's lines before it and the backtrace when there is one), failures.tsv (one line each),
# <side>/run<k>.log (sqlsmith's output), cores/bt.pid<n>.txt, hangs.txt, summary.txt. It prints the
# failures grouped by message (where they were raised: a .rs file is pg_worlds' code, a .c file
# PostgreSQL's; the top pg_worlds frame of their backtraces; three examples each, statements stock could
# run first, shorter first, with both reruns' outcome), a summary line per side: queries
# run, crashes, XX000 total, XX000 of pg_worlds, and a last line starting "sqlsmith:" (scripts/test.sh
# records it). Exits non-zero on any crash, any XX000 attributed to pg_worlds, or a side that could not run
# its queries. SOAK_PARALLEL=1 runs the four sides at once (the default runs them one after another);
# SOAK_SEED (default 1) changes every seed; SOAK_KEEP=1 leaves both clusters running;
# SOAK_ANALYZE_ONLY=1 runs no sqlsmith: it restarts the last run's clusters and redoes its reruns,
# attribution and summary (the side's reruns then use the pg_worlds.so installed now: a fix can be checked
# against the statements that failed).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${SOAK_QUERIES:-3000}
CHUNK=${SOAK_CHUNK:-5000}
SEED=${SOAK_SEED:-1}
SIDES=${SOAK_SIDES:-"main_su world_su main_user world_user"}
HANG=${SOAK_HANG:-30}
CL=smith
ST=smith_stock
DB=smith
WORLD=w
ROLE=smith_user
OUT=$RUN_DIR/sqlsmith

command -v sqlsmith >/dev/null || { echo "sqlsmith is not installed (apt-get install sqlsmith)" >&2; exit 2; }
[ -f "$($PG_CONFIG --pkglibdir)/pg_worlds.so" ] || { echo "pg_worlds is not installed in $($PG_CONFIG --pkglibdir)" >&2; exit 2; }

ANALYZE_ONLY=${SOAK_ANALYZE_ONLY:-0}
t_start=$(date +%s)
if [ "$ANALYZE_ONLY" = 1 ]; then
  [ -f "$OUT/library.txt" ] && [ -d "$(cluster_dir $CL)/data" ] || { echo "no earlier run in $OUT to analyse" >&2; exit 2; }
else
  for c in $CL $ST; do stop_cluster $c; rm -rf "$(cluster_dir $c)"; done
  rm -rf "$OUT"; mkdir -p "$OUT/cores"
fi
rm -f "$OUT/library_reanalysis"

# the smith cluster's processes may write cores (runuser resets the soft limit: raise it inside)
as_pg_cores() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- bash -c 'ulimit -c unlimited 2>/dev/null; exec "$@"' as_pg "$@"
  else (ulimit -c unlimited 2>/dev/null; exec "$@"); fi
}
CORES=${SOAK_CORES:-1}
core_pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo "|")
case "$core_pattern" in "|"*|*/*) CORES=0 ;; esac
command -v gdb >/dev/null || CORES=0

# keep_library: the installed pg_worlds.so the smith cluster is about to load, hard-linked (or copied)
# into a sysroot for gdb: a build installed during the run replaces the file (install_extension removes
# it first), while the cluster keeps running the one it loaded at its start
LIB=$($PG_CONFIG --pkglibdir)/pg_worlds.so
SYSROOT=$OUT/sysroot
keep_library() {
  local d
  rm -rf "$SYSROOT"; mkdir -p "$SYSROOT/usr/lib" "$SYSROOT$(dirname "$LIB")"
  for d in /lib /lib32 /lib64 /libx32; do [ -e "$d" ] && ln -s "$d" "$SYSROOT$d"; done
  for d in /usr/lib/*; do [ "$d" = /usr/lib/postgresql ] || ln -s "$d" "$SYSROOT$d"; done
  for d in "$(dirname "$LIB")"/*; do ln -s "$d" "$SYSROOT$d"; done
  rm -f "$SYSROOT$LIB"
  ln "$LIB" "$SYSROOT$LIB" 2>/dev/null || cp "$LIB" "$SYSROOT$LIB"
  LIB_ID="$(stat -c '%i %s %y' "$LIB")"
  echo "pg_worlds.so loaded by $CL: $(stat -c '%s bytes, modified %y' "$LIB"), sha1 $(sha1sum "$LIB" | cut -c1-12)" >"$OUT/library.txt"
}
# library_check: note once that the installed library was replaced since the cluster started
library_check() {
  [ -f "$OUT/library_replaced" ] && return 0
  if [ "$(stat -c '%i %s %y' "$LIB" 2>/dev/null)" != "$LIB_ID" ]; then
    echo "the installed pg_worlds.so was replaced at about $(date -u +%T) UTC (the cluster keeps running the one it loaded; backtraces read the kept copy)" >"$OUT/library_replaced"
  fi
}

LOGCONF=(
  "alter system set logging_collector = on"
  "alter system set log_destination = 'stderr,jsonlog'"
  "alter system set log_directory = 'log'"
  "alter system set log_filename = 'server.log'"
  "alter system set log_rotation_age = 0"
  "alter system set log_rotation_size = 0"
  "alter system set log_truncate_on_rotation = off"
  "alter system set log_line_prefix = '%m [%p] %e %u@%d/%a '"
  "alter system set log_error_verbosity = verbose"
  "alter system set log_min_error_statement = error"
  "alter system set log_connections = on"
  "alter system set lc_messages = 'C'"
  "alter system set restart_after_crash = on"
  "alter system set track_activity_query_size = '256kB'"   # whole statements in pg_stat_activity (the hang check)
)
# make_cluster NAME PRELOAD PORT: a fresh cluster with the log settings above
make_cluster() {
  PORT=$3 start_cluster "$1" "$2"
  local a=(); for s in "${LOGCONF[@]}"; do a+=(-c "$s"); done
  psql_in "$1" -q "${a[@]}"
  stop_cluster "$1"
  if [ "$1" = $CL ]; then keep_library; fi
  if [ "$1" = $CL ] && [ "$CORES" = 1 ]; then
    local saved; saved=$(declare -f as_pg); eval "as_pg() { as_pg_cores \"\$@\"; }"
    PORT=$3 start_cluster "$1" "$2"
    eval "$saved"
  else
    PORT=$3 start_cluster "$1" "$2"
  fi
}
DATA=$(cluster_dir $CL)/data
JSONLOG=$DATA/log/server.json
if [ "$ANALYZE_ONLY" = 1 ]; then
  echo "== the last run's clusters again, with the pg_worlds.so installed now (the reruns on the side use it)"
  PORT=${SOAK_PORT:-56300} start_cluster $CL yes
  PORT=${SOAK_STOCK_PORT:-56310} start_cluster $ST no
  echo "reanalysed at $(date -u +%T) UTC: the reruns on the side ran the pg_worlds.so installed then ($(stat -c '%s bytes, modified %y' "$LIB"))" >"$OUT/library_reanalysis"
else
echo "== clusters: $CL (pg_worlds preloaded) and $ST (stock)"
make_cluster $CL yes "${SOAK_PORT:-56300}"
make_cluster $ST no "${SOAK_STOCK_PORT:-56310}"
fi

# wait_ready CLUSTER: until it takes connections again (after a crash: recovery), at most 180 s
wait_ready() {
  for _ in $(seq 1 360); do
    $PGBIN/psql "$(conninfo "$1" $DB) application_name=soak_watch" -X -qAtc "select 1" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# mirror_pg_worlds: pg_worlds' own relations and functions (schemas worlds and worlds_data), which the
# superuser's statements name too, and the ordinary role's where PUBLIC may use them, made again on stock so
# that such a statement can be rerun there: each relation a plain table with the same columns, rows and
# grants; each function a stand-in with the same signature, volatility, strictness and grants that returns
# what the real one returned when it takes no argument (called once, as the superuser, in a transaction
# rolled back), else NULL. A failure that needs the real function (it raising an XX000 itself) thus doesn't
# happen on stock, and stays pg_worlds'.
# mirror_pg_worlds STOCK_DB WORLD: into that database of the stock cluster, the rows as that world reads them
mirror_pg_worlds() {
  local sdb=$1 src kinds="('r', 'v', 'm', 'f', 'p')" nsp="('worlds', 'worlds_data')" mirrored=0 stubs=0 rel
  src="$(conninfo $CL $DB) options='-c worlds.world=$2'"
  psql_in $ST -d $sdb -q -c "set client_min_messages = warning" -c "drop schema if exists worlds, worlds_data cascade"
  psql_in $CL -d $DB -qAt >"$OUT/mirror.sql" <<SQL
select format('create schema %I;', nspname) from pg_namespace where nspname in $nsp
union all
select format('grant %s on schema %I to %s;', a.privilege_type, n.nspname,
              case a.grantee when 0 then 'public' else quote_ident(a.grantee::regrole::text) end)
from pg_namespace n, aclexplode(n.nspacl) a
where n.nspname in $nsp and (a.grantee = 0 or a.grantee = '$ROLE'::regrole);
select format('create table %I.%I (%s);', n.nspname, c.relname,
              (select string_agg(format('%I %s', attname, format_type(atttypid, atttypmod)), ', ' order by attnum)
               from pg_attribute where attrelid = c.oid and attnum > 0 and not attisdropped))
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname in $nsp and c.relkind in $kinds;
select format('grant %s on %I.%I to %s;', a.privilege_type, n.nspname, c.relname,
              case a.grantee when 0 then 'public' else quote_ident(a.grantee::regrole::text) end)
from pg_class c join pg_namespace n on n.oid = c.relnamespace, aclexplode(c.relacl) a
where n.nspname in $nsp and c.relkind in $kinds and (a.grantee = 0 or a.grantee = '$ROLE'::regrole);
select format('grant %s (%I) on %I.%I to %s;', a.privilege_type, t.attname, n.nspname, c.relname,
              case a.grantee when 0 then 'public' else quote_ident(a.grantee::regrole::text) end)
from pg_class c join pg_namespace n on n.oid = c.relnamespace join pg_attribute t on t.attrelid = c.oid,
     aclexplode(t.attacl) a
where n.nspname in $nsp and c.relkind in $kinds and (a.grantee = 0 or a.grantee = '$ROLE'::regrole);
SQL
  psql_in $ST -d $sdb -q -f "$OUT/mirror.sql" >/dev/null
  while read -r rel; do
    if $PGBIN/psql "$src" -X -qAt -c "copy (select * from $rel) to stdout" 2>/dev/null | psql_in $ST -d $sdb -q -c "copy $rel from stdin" 2>/dev/null; then
      mirrored=$((mirrored + 1))
    fi
  done < <(psql_in $CL -d $DB -qAt -c "select format('%I.%I', n.nspname, c.relname) from pg_class c join pg_namespace n on n.oid = c.relnamespace
                                        where n.nspname in $nsp and c.relkind in $kinds")
  # the functions sqlsmith may call (not set-returning, not returning trigger, event_trigger or internal)
  $PGBIN/psql "$src" -X -v ON_ERROR_STOP=1 -qAt -v role="$ROLE" >"$OUT/mirror_functions.sql" <<'SQL'
set statement_timeout = '60s';
begin;
create temp table stand_in (def text);
do $$
declare r record; v text;
begin
  for r in select p.oid, p.pronargs = 0 and p.prorettype <> 'void'::regtype as nullary
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname in ('worlds', 'worlds_data') and p.prokind = 'f' and not p.proretset
             and p.prorettype not in ('trigger'::regtype, 'event_trigger'::regtype, 'internal'::regtype)
  loop
    v := 'null';
    if r.nullary then   -- its value, every change it made undone (ZZ999 rolls the block back)
      begin
        execute format('select quote_nullable(%s()::text)', r.oid::regproc) into v;
        raise exception using errcode = 'ZZ999', message = v;
      exception when others then
        v := case when sqlstate = 'ZZ999' then sqlerrm else 'null' end;
      end;
    end if;
    insert into stand_in
    select format('create function %s(%s) returns %s language plpgsql %s %s as %L;',
                  p.oid::regproc, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                  case p.provolatile when 'i' then 'immutable' when 's' then 'stable' else 'volatile' end,
                  case when p.proisstrict then 'strict' else 'called on null input' end,
                  case when p.prorettype = 'void'::regtype or p.proallargtypes is not null then 'begin return; end'
                       else format('begin return %s::%s; end', v, format_type(p.prorettype, null)) end)
    from pg_proc p where p.oid = r.oid;
  end loop;
end $$;
select def from stand_in;
select format('revoke all on function %s from public;', p.oid::regprocedure)
       || coalesce((select string_agg(format(' grant execute on function %s to %s;', p.oid::regprocedure,
                            case a.grantee when 0 then 'public' else quote_ident(a.grantee::regrole::text) end), '')
                    from aclexplode(p.proacl) a where a.grantee = 0 or a.grantee = :'role'::regrole), '')
from pg_proc p join pg_namespace n on n.oid = p.pronamespace
where n.nspname in ('worlds', 'worlds_data') and p.prokind = 'f' and p.proacl is not null;
rollback;
SQL
  psql_in $ST -d $sdb -v ON_ERROR_STOP=0 -q -f "$OUT/mirror_functions.sql" >/dev/null 2>&1 || true
  stubs=$(psql_in $ST -d $sdb -qAt -c "select count(*) from pg_proc where pronamespace in (select oid from pg_namespace where nspname in $nsp)")
  psql_in $ST -d $sdb -q -c "analyze" >/dev/null
  echo "   $ST/$sdb: pg_worlds' relations as plain tables: $mirrored (rows as $2 reads them); its functions as stand-ins: $stubs"
}

# ---- the schema and the rows, the same on both clusters -------------------------------------------------
if [ "$ANALYZE_ONLY" != 1 ]; then
cat >"$OUT/schema.sql" <<'SQL'
create table customers (
  id int primary key,
  name text not null,
  email text unique,
  born date,
  active bool not null default true,
  score numeric(12,4),
  tags text[],
  prefs jsonb,
  created timestamptz not null default '2024-01-01 00:00+00',
  uid uuid unique,
  ip inet,
  tier varchar(10) check (tier in ('basic', 'gold', 'platinum'))
);
create table products (
  sku text primary key,
  title text not null,
  price numeric(10,2) not null check (price >= 0),
  weight real,
  dims int[],
  attrs jsonb,
  added timestamp,
  shelf_life interval,
  barcode bytea
);
create table orders (
  id bigint generated by default as identity primary key,
  customer_id int not null references customers (id),
  ordered_at timestamptz not null,
  status text not null default 'new' check (status in ('new', 'paid', 'shipped', 'cancelled')),
  total numeric,
  note text
);
create table order_items (          -- composite key, two foreign keys
  order_id bigint references orders (id) on delete cascade,
  line smallint,
  sku text not null references products (sku),
  qty int not null check (qty > 0),
  unit_price numeric(10,2),
  primary key (order_id, line)
);
create table events (               -- no primary key
  at timestamptz,
  kind text,
  payload jsonb,
  n double precision,
  flags bool[]
);
create table accounts (             -- uuid key
  id uuid primary key,
  owner int references customers (id),
  balance numeric(20,6) not null default 0,
  currency char(3) not null default 'EUR',
  opened timestamp,
  limits int8[]
);
create table measurements (         -- composite key of int and timestamp
  sensor int,
  at timestamp,
  val float8,
  quality smallint,
  primary key (sensor, at)
);
create table categories (           -- serial key, self reference
  id serial primary key,
  parent int references categories (id),
  name text not null unique,
  path text[]
);
create table notes (
  id bigserial primary key,
  customer_id int references customers (id),
  body text,
  lang varchar(5),
  tsv tsvector,
  span int4range,
  written date
);
insert into customers
select i, 'customer ' || i, 'c' || i || '@example.com',
       date '1950-01-01' + (i * 97) % 20000,
       i % 7 <> 0,
       ((i * 7919) % 100000) / 100.0,
       array['t' || i % 5, 't' || i % 3],
       jsonb_build_object('lang', (array['en', 'de', 'fr'])[1 + i % 3], 'n', i, 'opt', i % 2 = 0,
                          'list', jsonb_build_array(i, i * 2)),
       timestamptz '2024-01-01 00:00+00' + i * interval '37 minutes',
       md5('c' || i)::uuid,
       ('10.0.' || (i / 256) || '.' || (i % 256))::inet,
       (array['basic', 'gold', 'platinum'])[1 + i % 3]
from generate_series(1, 300) i;
update customers set email = null, prefs = null, tags = null where id % 50 = 0;
insert into products
select 'sku-' || lpad(i::text, 4, '0'), 'product ' || i, ((i * 31) % 10000) / 100.0,
       (i % 17) * 0.25, array[i % 10, i % 7, i % 3],
       jsonb_build_object('color', (array['red', 'green', 'blue', null])[1 + i % 4], 'size', i % 5),
       timestamp '2023-06-01' + i * interval '5 hours',
       (i % 30) * interval '1 day',
       decode(md5(i::text), 'hex')
from generate_series(1, 200) i;
insert into orders (customer_id, ordered_at, status, total, note)
select 1 + (i * 13) % 300, timestamptz '2024-02-01 00:00+00' + i * interval '3 hours',
       (array['new', 'paid', 'shipped', 'cancelled'])[1 + i % 4], null,
       case when i % 9 = 0 then 'note ' || i end
from generate_series(1, 400) i;
insert into order_items
select o, l, 'sku-' || lpad((1 + (o * 7 + l * 11) % 200)::text, 4, '0'), 1 + (o + l) % 5, null
from generate_series(1, 400) o, generate_series(1, 1 + o % 3) l;
update order_items oi set unit_price = p.price from products p where p.sku = oi.sku;
update orders o set total = (select sum(qty * unit_price) from order_items where order_id = o.id);
insert into events
select timestamptz '2024-03-01 00:00+00' + i * interval '11 minutes',
       (array['login', 'logout', 'buy', 'view'])[1 + i % 4],
       case when i % 10 = 0 then null else jsonb_build_object('i', i, 'tags', jsonb_build_array('a', i % 3)) end,
       i / 7.0, array[i % 2 = 0, i % 3 = 0]
from generate_series(1, 300) i;
insert into events select * from events where kind = 'buy' order by at limit 20;   -- duplicate rows
insert into accounts
select md5('a' || i)::uuid, 1 + i % 300, ((i * 104729) % 1000000) / 1000.0,
       (array['EUR', 'USD', 'GBP'])[1 + i % 3], timestamp '2020-01-01' + i * interval '1 day',
       array[i, i * 1000]::int8[]
from generate_series(1, 250) i;
insert into measurements
select s, timestamp '2024-01-01' + t * interval '15 minutes', round((sin(s * t) * 100)::numeric, 6), (s + t) % 4
from generate_series(1, 10) s, generate_series(1, 40) t;
insert into categories (parent, name, path) values (null, 'root', '{root}');
insert into categories (parent, name, path)
select 1 + (i - 1) / 4, 'cat ' || i, array['root', 'cat ' || i] from generate_series(1, 60) i;
insert into notes (customer_id, body, lang, tsv, span, written)
select 1 + i % 300, 'note body ' || i || ' about ' || (array['apples', 'pears', 'figs'])[1 + i % 3],
       (array['en', 'de', null])[1 + i % 3], to_tsvector('simple', 'note ' || i || ' fruit'),
       int4range(i, i + i % 10), date '2024-01-01' + i
from generate_series(1, 300) i;
create view order_totals as
  select c.id as customer_id, c.name, count(o.id) as orders, sum(o.total) as spent, max(o.ordered_at) as last_order
  from customers c left join orders o on o.customer_id = c.id group by c.id, c.name;
create view active_customers as            -- updatable
  select id, name, email, tier, score from customers where active;
create view gold_accounts as
  select a.* from accounts a join customers c on c.id = a.owner where c.tier = 'gold';
grant usage on schema public to smith_user;
grant select, insert, update, delete on all tables in schema public to smith_user;
grant usage on all sequences in schema public to smith_user;
analyze;
SQL

# the world's changes: updates, inserts and deletes on seven tables (foreign keys are checked at merge)
cat >"$OUT/world.sql" <<'SQL'
update customers set score = score + 1, prefs = coalesce(prefs, '{}') || '{"world": true}', tags = tags || '{w}'
  where id % 5 = 0;
insert into customers (id, name, email, born, score, tags, prefs, uid, tier)
  select 1000 + i, 'world customer ' || i, 'w' || i || '@example.com', date '1990-01-01' + i, i * 1.5,
         '{w}', jsonb_build_object('world', i), md5('w' || i)::uuid, 'gold'
  from generate_series(1, 30) i;
delete from customers where id in (7, 14, 21);
update products set price = price * 1.1, attrs = attrs || '{"sale": true}' where sku like 'sku-00%';
delete from products where sku in ('sku-0199', 'sku-0200');
insert into orders (id, customer_id, ordered_at, status, total)
  select 5000 + i, 1000 + i, timestamptz '2024-06-01 00:00+00' + i * interval '1 hour', 'new', 10 * i
  from generate_series(1, 20) i;
insert into order_items select 5000 + i, 1, 'sku-0001', i, 1.00 from generate_series(1, 20) i;
update order_items set qty = qty + 1 where order_id between 50 and 80;
delete from order_items where order_id % 10 = 0 and line = 2;
update orders set status = 'shipped', note = 'shipped in w' where id % 11 = 0;
delete from events where kind = 'view' and n < 10;
update events set payload = jsonb_build_object('changed', true), flags = '{t,t}' where kind = 'login' and n < 20;
insert into events select at + interval '1 day', 'world', '{"w": 1}', n, flags from events where kind = 'buy' and n < 15;
update measurements set val = -val, quality = 9 where sensor = 3;
delete from measurements where sensor = 4 and at < '2024-01-01 03:00';
insert into accounts select md5('wa' || i)::uuid, 1000 + i, i * 10, 'USD', timestamp '2024-06-01', '{1}'
  from generate_series(1, 15) i;
delete from accounts where balance < 50;
update categories set name = name || ' (w)' where id % 6 = 0;
update notes set body = body || ' [w]', lang = 'fr' where id % 4 = 0;
SQL

echo "== schema and rows (both clusters), extension, world $WORLD"
for c in $CL $ST; do
  psql_in $c -q -c "create role $ROLE login" -c "create database $DB"
  psql_in $c -d $DB -q -f "$OUT/schema.sql" >/dev/null
done
psql_in $CL -d $DB -q -c "set client_min_messages = warning" -c "create extension pg_worlds" \
  -c "select * from worlds.sql('create world $WORLD')" >/dev/null
$PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=$WORLD'" -X -q -v ON_ERROR_STOP=1 -f "$OUT/world.sql" >/dev/null
# the world's rows as a database of their own on stock (${DB}_w), where the world sides' failures are rerun:
# a world is to behave as a database holding its rows (foreign keys unchecked: a world checks them at merge)
psql_in $ST -q -c "create database ${DB}_w"
psql_in $ST -d ${DB}_w -q -f "$OUT/schema.sql" >/dev/null
user_tables=$(psql_in $ST -d $DB -qAt -c "select string_agg(format('%I', relname), ', ') from pg_class
                                           where relnamespace = 'public'::regnamespace and relkind = 'r'")
psql_in $ST -d ${DB}_w -q -c "truncate $user_tables"
for t in ${user_tables//,/}; do
  $PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=$WORLD'" -X -qAt -c "copy (select * from $t) to stdout" |
    psql_in $ST -d ${DB}_w -q -c "set session_replication_role = replica" -c "copy $t from stdin"
done
psql_in $ST -d ${DB}_w -q -c "analyze"
mirror_pg_worlds $DB main
mirror_pg_worlds ${DB}_w $WORLD

counts="select (select count(*) from customers) || '/' || (select count(*) from events) || '/' || (select count(*) from accounts)"
main_counts=$(psql_in $CL -d $DB -qAt -c "$counts")
world_counts=$($PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=$WORLD'" -X -qAt -c "$counts")
stock_counts=$(psql_in $ST -d $DB -qAt -c "$counts")
stock_w_counts=$(psql_in $ST -d ${DB}_w -qAt -c "$counts")
echo "   rows customers/events/accounts: main $main_counts, world $world_counts; stock $stock_counts and ${DB}_w $stock_w_counts"
[ "$main_counts" = "$stock_counts" ] || { echo "stock and main differ" >&2; exit 1; }
[ "$world_counts" = "$stock_w_counts" ] || { echo "${DB}_w on stock and the world differ" >&2; exit 1; }
[ "$main_counts" != "$world_counts" ] || { echo "the world doesn't differ from main" >&2; exit 1; }
rels="select count(*) filter (where table_schema = 'public') || ' user, ' || count(*) filter (where table_schema like 'worlds%') || ' pg_worlds'
      from information_schema.tables where table_schema not in ('pg_catalog', 'information_schema')"
echo "   relations sqlsmith can pick: superuser $(psql_in $CL -d $DB -qAt -c "$rels"), $ROLE $($PGBIN/psql "$(conninfo $CL $DB) user=$ROLE" -X -qAt -c "$rels")"
else
  mirror_pg_worlds $DB main
  mirror_pg_worlds ${DB}_w $WORLD
fi

# ---- the sides ------------------------------------------------------------------------------------------
side_role() { case $1 in *_su) echo postgres ;; *) echo $ROLE ;; esac; }
side_world() { case $1 in world_*) echo $WORLD ;; *) echo main ;; esac; }

# progress FILE...: "sent ok errors timeouts syntax lost" from sqlsmith's progress characters (errors
# include the timeouts)
progress() {
  local f to=0 t
  for f in "$@"; do   # timeouts: the count in the chunk's last report
    t=$(awk '/^queries: /{t=0} /canceling statement due to statement timeout/{t=$1} END{print t+0}' "$f" 2>/dev/null || echo 0)
    to=$((to + t))
  done
  cat "$@" 2>/dev/null | grep -E '^[.etsScC]+$' | tr -d '\n' | tr 'sc' 'SC' | awk -v to=$to '
    { for (i = 1; i <= length($0); i++) { ch = substr($0, i, 1); n[ch]++; if (ch == "C" && prev != "C") runs++; prev = ch } }
    END { printf "%d %d %d %d %d %d\n", n["."] + n["e"] + n["t"] + n["S"] + runs, n["."], n["e"] + n["t"], to, n["S"], n["C"] }'
}

# run_side SIDE INDEX: sqlsmith in chunks until the side ran N queries
run_side() {
  local side=$1 idx=$2 dir=$OUT/$1 role world opts target
  role=$(side_role "$side"); world=$(side_world "$side")
  mkdir -p "$dir"
  opts="-c statement_timeout=1s"; [ "$world" = main ] || opts="-c worlds.world=$world $opts"
  target="$(conninfo $CL $DB) user=$role application_name=soak_$side options='$opts'"
  echo "$target" >"$dir/target"
  local sent=0 k=0 empty=0 start seed got
  start=$(date +%s)
  while [ "$sent" -lt "$N" ]; do
    wait_ready $CL || { echo "$side: the cluster takes no connections" >"$dir/error"; break; }
    library_check
    local n=$((N - sent)); [ $n -gt "$CHUNK" ] && n=$CHUNK
    seed=$(( (SEED * 1000003 + idx * 10007 + k * 101) % 2147483647 ))
    echo "run$k seed=$seed max-queries=$n" >>"$dir/seeds"
    # (a chunk runs some 20 to 60 s; the time limit only stops a sqlsmith that hangs)
    timeout -s INT -k 30 $((n + 600)) sqlsmith --verbose --exclude-catalog --dump-all-queries --seed=$seed \
      --max-queries=$n --target="$target" 2>"$dir/run$k.log" | gzip -1 >"$dir/run$k.sql.gz" || true
    got=$(progress "$dir/run$k.log" | cut -d' ' -f1)
    sent=$((sent + got)); k=$((k + 1))
    if [ "$got" -eq 0 ]; then empty=$((empty + 1)); else empty=0; fi
    if [ $empty -ge 5 ]; then echo "$side: sqlsmith ran nothing 5 times running (see $dir/run$((k - 1)).log)" >"$dir/error"; break; fi
  done
  echo "$(( $(date +%s) - start ))" >"$dir/seconds"
}

# core_filter MASK: what the cores of the postmaster's children hold (0x31: no shared memory; 0: no memory)
core_filter() { echo "$1" >"/proc/$(head -1 "$DATA/postmaster.pid")/coredump_filter" 2>/dev/null || true; }
[ "$CORES" = 1 ] && [ "$ANALYZE_ONLY" != 1 ] && core_filter 0x31

# watch: statements past HANG seconds (recorded, their backend terminated) and cores (a backtrace each)
ncores=0
watch() {
  local hung
  hung=$($PGBIN/psql "$(conninfo $CL $DB) application_name=soak_watch" -X -qAt -F $'\t' -c "
    select pid, application_name, extract(epoch from now() - query_start)::int, usename, replace(query, E'\n', ' ')
    from pg_stat_activity
    where application_name = 'sqlsmith::dut' and state = 'active' and now() - query_start > interval '$HANG seconds'" 2>/dev/null) || true
  if [ -n "$hung" ]; then
    while IFS=$'\t' read -r pid _ secs user q; do
      printf '%s\tpid %s\t%ss\t%s\t%s\n' "$(date -u +%FT%TZ)" "$pid" "$secs" "$user" "$q" >>"$OUT/hangs.txt"
      psql_in $CL -d $DB -qAt -c "select pg_terminate_backend($pid)" >/dev/null 2>&1 || true
    done <<<"$hung"
  fi
  [ "$CORES" = 1 ] || return 0
  local core
  for core in "$DATA"/core*; do
    [ -f "$core" ] || continue
    local s1 s2; s1=$(stat -c %s "$core" 2>/dev/null) || continue; sleep 1; s2=$(stat -c %s "$core" 2>/dev/null) || continue
    [ "$s1" = "$s2" ] || continue
    if [ $ncores -lt "${SOAK_MAX_CORES:-5}" ]; then
      mv "$core" "$OUT/cores/core" 2>/dev/null || continue
      timeout 300 gdb -batch -nx -ex "set sysroot $SYSROOT" -ex 'bt 60' $PGBIN/postgres "$OUT/cores/core" \
        >"$OUT/cores/bt.$ncores.txt" 2>&1 || true
      local pid; pid=$(grep -m1 -oE '\[New LWP [0-9]+\]' "$OUT/cores/bt.$ncores.txt" | grep -oE '[0-9]+' || true)
      [ -n "$pid" ] && mv "$OUT/cores/bt.$ncores.txt" "$OUT/cores/bt.pid$pid.txt"
      rm -f "$OUT/cores/core"; ncores=$((ncores + 1))
      # enough: the cores of backends forked from now on hold no memory (and are removed)
      [ $ncores -lt "${SOAK_MAX_CORES:-5}" ] || core_filter 0
    else
      rm -f "$core"
    fi
  done
}

if [ "$ANALYZE_ONLY" != 1 ]; then
echo "== sqlsmith: $N queries per side ($SIDES), $( [ "${SOAK_PARALLEL:-0}" = 1 ] && echo 'sides at once' || echo 'one side after another')"
idx=0; pids=()
for side in $SIDES; do
  idx=$((idx + 1))
  run_side "$side" $idx &
  pids+=($!)
  if [ "${SOAK_PARALLEL:-0}" != 1 ]; then
    while kill -0 "${pids[-1]}" 2>/dev/null; do watch || true; sleep 2; done
    wait "${pids[-1]}" || true
    echo "   $side: $(progress "$OUT/$side"/run*.log | awk '{print $1 " queries"}') in $(cat "$OUT/$side/seconds")s"
  fi
done
if [ "${SOAK_PARALLEL:-0}" = 1 ]; then
  while :; do
    alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    watch || true; sleep 2
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
fi
watch || true
wait_ready $CL || true
for side in $SIDES; do progress "$OUT/$side"/run*.log >"$OUT/$side/counts"; done
fi
t_soak=$(date +%s)

# ---- the log: crashes and class XX errors, reruns, attribution, summary ---------------------------------
echo "== crashes and XX000 in the server log; reruns on $ST"
set +e
python3 - "$OUT" "$JSONLOG" "$DATA/log/server.log" "$(conninfo $CL $DB)" "$(conninfo $ST $DB)" "$(conninfo $ST ${DB}_w)" "$ROLE" "$WORLD" \
  "$SIDES" "$N" "${SOAK_MAX_RERUNS:-1000}" "${SOAK_MAX_CRASH_REPROS:-20}" <<'PY'
import glob, gzip, json, os, re, subprocess, sys, time

out, jsonlog, stderrlog, smith_ci, stock_ci, stock_w_ci, role, world, sides, n_want, max_reruns, max_repros = sys.argv[1:]
sides = sides.split(); n_want = int(n_want); max_reruns = int(max_reruns); max_repros = int(max_repros)
root = os.path.dirname(os.path.dirname(out))

def side_role(s): return 'postgres' if s.endswith('_su') else role
def side_world(s): return world if s.startswith('world_') else 'main'

# -- read the JSON log in order: which side each backend PID belongs to (log_connections), then the failures
pid_side, events = {}, []
crash_re = re.compile(r'\(PID (\d+)\) (was terminated by (signal|exception)|exited with exit code (\d+))')
with open(jsonlog, encoding='utf-8', errors='replace') as f:
    for line in f:
        try: r = json.loads(line)
        except ValueError: continue
        msg, pid = r.get('message', ''), r.get('pid')
        if msg.startswith('connection authorized:'):
            m = re.search(r'application_name=soak_(\w+)', msg)
            pid_side[pid] = m.group(1) if m else None
            continue
        if pid_side.get(pid) in ('rerun', 'watch'): continue     # the script's own reruns and checks
        m = crash_re.search(msg) if r.get('backend_type') == 'postmaster' else None
        if m and m.group(4) not in ('0', '1'):
            cpid = int(m.group(1))
            if pid_side.get(cpid) in ('rerun', 'watch'): continue
            d = r.get('detail', '') or ''
            stmt = d[len('Failed process was running: '):] if d.startswith('Failed process was running: ') else None
            events.append(dict(kind='crash', side=pid_side.get(cpid), pid=cpid, time=r.get('timestamp'),
                               message=msg, statement=stmt))
        elif r.get('error_severity') == 'PANIC':
            events.append(dict(kind='panic', side=pid_side.get(pid), pid=pid, time=r.get('timestamp'),
                               message=msg, statement=r.get('statement')))
        elif (r.get('state_code') or '').startswith('XX'):
            loc = ' '.join(x for x in (r.get('func_name'), r.get('file_name') and '%s:%s' % (r.get('file_name'), r.get('file_line_num'))) if x)
            events.append(dict(kind='xx', side=pid_side.get(pid), pid=pid, time=r.get('timestamp'), code=r['state_code'],
                               message=msg, detail=r.get('detail'), context=r.get('context'), statement=r.get('statement'),
                               location=loc))

# the stderr log's 30 lines before each crash report (one pass: the log runs to gigabytes)
crash_pids = {e['pid'] for e in events if e['kind'] == 'crash'}
crash_ctx, last = {}, []
try:
    with open(stderrlog, encoding='utf-8', errors='replace') as f:
        for l in f:
            if '(PID ' in l and ('was terminated' in l or 'exited with' in l):
                m = re.search(r'\(PID (\d+)\)', l)
                if m and int(m.group(1)) in crash_pids:
                    crash_ctx.setdefault(int(m.group(1)), []).append(''.join(last) + l[:300])
            last.append(l[:300] if l.endswith('\n') else l[:300] + '\n')
            if len(last) > 30: del last[0]
except OSError: pass

# -- the postmaster logs at most 1023 bytes of a crashed backend's statement: the whole one is the statement
# sqlsmith generated (--dump-all-queries, <side>/run<k>.sql.gz) that begins with them
dumps = {}
def full_statement(side, prefix):
    if side not in dumps:
        texts = []
        for fn in sorted(glob.glob(os.path.join(out, side, 'run*.sql.gz')), key=lambda x: int(re.findall(r'run(\d+)', x)[-1])):
            try:
                with gzip.open(fn, 'rt', encoding='utf-8', errors='replace') as f: texts.append(f.read())
            except (OSError, EOFError): pass
        dumps[side] = '\n'.join(texts)
    text = dumps[side]
    i = text.find(prefix)
    if i < 0: return None
    j = text.find(';\n', i + len(prefix) - 1)
    return text[i:j] if j >= 0 else text[i:]

# -- rerun a statement as sqlsmith ran it: BEGIN; statement; ROLLBACK as the side's role (in its world)
def ready(ci):
    for _ in range(360):
        if subprocess.run(['psql', ci + ' application_name=soak_watch', '-X', '-qAtc', 'select 1'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0: return True
        time.sleep(0.5)
    return False

def rerun(ci, rl, wd, stmt, timeout='1s'):
    # as sqlsmith ran it (1 s: a failure may need the cancel), again with 10 s when it timed out
    conn = ci + ' user=%s application_name=soak_rerun' % rl
    if wd != 'main': conn += " options='-c worlds.world=%s'" % wd
    try:
        p = subprocess.run(['psql', conn, '-X', '-q', '-v', 'VERBOSITY=verbose',
                            '-c', "set statement_timeout = '%s'" % timeout, '-c', 'set client_min_messages = error',
                            '-c', 'begin', '-c', stmt, '-c', 'rollback'],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        err = p.stderr.decode('utf-8', 'replace')
    except subprocess.TimeoutExpired:
        return dict(result='hang', code=None, message='no answer in 120 s')
    if 'server closed the connection unexpectedly' in err or 'terminated abnormally' in err or 'connection to server was lost' in err:
        ready(ci)
        return dict(result='crash', code=None, message='server closed the connection')
    m = re.search(r'^(?:psql:[^\n]*?)?ERROR:  ([0-9A-Z]{5}): (.*)$', err, re.M)
    if m and m.group(1) == '57014' and timeout == '1s': return rerun(ci, rl, wd, stmt, '10s')
    if m: return dict(result='error', code=m.group(1), message=m.group(2))
    return dict(result='ok', code=None, message='')

def same_failure(ev, res):
    if ev['kind'] in ('crash', 'panic'): return res['result'] == 'crash'
    return res['result'] == 'crash' or (res['result'] == 'error' and (res['code'] or '').startswith('XX'))

def fmt(res):
    if res is None: return '-'
    return res['result'] + (' %s: %s' % (res['code'], res['message']) if res['result'] == 'error' else
                            (': ' + res['message'] if res['message'] else ''))

def comment(text): return ''.join('-- ' + l + '\n' for l in str(text).splitlines())

# -- attribute each failure, write one file per failure
cache, reruns, repros, verdict_by_msg = {}, 0, {}, {}
per = {s: dict(crash=0, crash_w=0, xx=0, xx_w=0) for s in sides + ['other']}
nfile = {}
for ev in events:
    s = ev['side'] if ev['side'] in sides else 'other'
    ev['side'] = s
    rl = side_role(s) if s != 'other' else 'postgres'
    wd = side_world(s) if s != 'other' else 'main'
    ev['role'], ev['world'] = rl, wd
    stmt = ev.get('statement')
    if ev['kind'] == 'crash' and stmt is not None and len(stmt.encode()) >= 1000 and s != 'other':
        whole = full_statement(s, stmt)
        ev['truncated'] = whole is None
        if whole is not None: stmt = ev['statement'] = whole
    key = (rl, wd, stmt)
    ev['stock'] = ev['repro'] = None
    if stmt is None:
        ev['by'] = 'pg_worlds' if ev['kind'] == 'xx' else 'unknown (no statement)'
    elif key in cache:
        ev['stock'], ev['repro'], ev['by'] = cache[key]
    elif reruns >= max_reruns:
        ev['by'] = verdict_by_msg.get(ev['message'], 'pg_worlds') + ' (not rerun: SOAK_MAX_RERUNS reached)'
    else:
        reruns += 1
        ev['stock'] = rerun(stock_w_ci if wd != 'main' else stock_ci, rl, 'main', stmt)
        # a crash is rerun on its side only the first SOAK_MAX_CRASH_REPROS times per side (each crashes it again)
        if ev['kind'] == 'xx' or repros.get(s, 0) < max_repros:
            if ev['kind'] != 'xx': repros[s] = repros.get(s, 0) + 1
            ev['repro'] = rerun(smith_ci, rl, wd, stmt)
        ev['by'] = 'stock' if same_failure(ev, ev['stock']) else 'pg_worlds'
        # TABLESAMPLE picks other rows each time: stock gets a second chance with every sample whole
        whole = re.sub(r'(tablesample\s+(?:system|bernoulli)\s*)\(\s*[0-9.]+\s*\)', r'\1(100)', stmt, flags=re.I)
        if ev['by'] == 'pg_worlds' and whole != stmt:
            again = rerun(stock_w_ci if wd != 'main' else stock_ci, rl, 'main', whole)
            if same_failure(ev, again):
                ev['stock'] = dict(again, message=again['message'] + ' (every TABLESAMPLE at 100 percent)')
                ev['by'] = 'stock'
        cache[key] = (ev['stock'], ev['repro'], ev['by'])
        verdict_by_msg.setdefault(ev['message'], ev['by'])
    w = ev['by'].startswith('pg_worlds')
    ev['w'] = w
    if ev['kind'] == 'crash': per[s]['crash'] += 1; per[s]['crash_w'] += w
    if ev['kind'] == 'xx': per[s]['xx'] += 1; per[s]['xx_w'] += w
    name = 'xx000' if ev['kind'] == 'xx' else ev['kind']
    k = nfile.get((s, name), 0) + 1; nfile[(s, name)] = k
    os.makedirs(os.path.join(out, s), exist_ok=True)
    path = os.path.join(out, s, '%s_%d.sql' % (name, k))
    with open(path, 'w') as f:
        f.write(comment('%s on side %s (role %s, world %s), backend PID %s, at %s' % (ev['kind'], s, rl, wd, ev['pid'], ev['time'])))
        f.write(comment('message: ' + ('%s ' % ev['code'] if ev.get('code') else '') + ev['message']))
        for fld in ('detail', 'context', 'location'):
            if ev.get(fld): f.write(comment('%s: %s' % (fld, ev[fld])))
        if ev.get('truncated'): f.write(comment('the statement is the first 1023 bytes the postmaster logged (not found in the dumps)'))
        f.write(comment('rerun on stock: ' + fmt(ev['stock'])))
        f.write(comment('rerun on the side: ' + fmt(ev['repro'])))
        f.write(comment('attributed to: ' + ev['by']))
        if ev['kind'] == 'crash':
            ctx = crash_ctx.get(ev['pid'])
            if ctx:
                f.write(comment('server.log before the crash (lines cut at 300 characters):\n' + ctx.pop(0)))
            bt = os.path.join(out, 'cores', 'bt.pid%d.txt' % ev['pid'])
            if os.path.exists(bt):
                with open(bt, errors='replace') as b:
                    frames = [l for l in b if l.startswith('#')]
                ev['top'] = next((re.sub(r'^#\d+\s+(0x[0-9a-f]+ in )?', '', l).strip() for l in frames if 'pg_worlds::' in l
                                  and 'panic' not in l and 'catch_unwind' not in l), None)
                if ev['top'] is None:   # no frame of pg_worlds': the first functions named
                    names = []
                    for l in frames:
                        m = re.match(r'^#\d+\s+(?:0x[0-9a-f]+ in )?([^\s(]+)', l)
                        if m and m.group(1) != '??' and m.group(1) not in names: names.append(m.group(1))
                    ev['top'] = 'no pg_worlds frame: ' + ' <- '.join(names[:6])
                f.write(comment('backtrace (gdb, core):\n' + ''.join(frames)))
        f.write((stmt if stmt is not None else '-- (no statement)') + ';\n')
    ev['file'] = os.path.relpath(path, root)

with open(os.path.join(out, 'failures.tsv'), 'w') as f:
    f.write('side\tkind\tattributed\tfile\tmessage\tstatement\n')
    for ev in events:
        f.write('\t'.join([ev['side'], ev['kind'], ev['by'], ev['file'], ev['message'].replace('\t', ' '),
                           re.sub(r'\s+', ' ', ev.get('statement') or '')[:300]]) + '\n')

# -- summary: failures grouped by message (its numbers left out: PIDs, typmods), three examples each
def norm(m): return re.sub(r'\s+', ' ', re.sub(r'\b(0x[0-9a-f]+|\d+)\b', 'N', m))[:160]
groups = {}
for ev in events:
    if ev['kind'] in ('crash', 'panic') or ev['w']:
        groups.setdefault((ev['kind'], ev.get('code', ''), norm(ev['message']), ev['by'].split(' ')[0]), []).append(ev)
detail = []
if groups: detail.append('crashes, PANICs and XX000 of pg_worlds, grouped by message:')
for (kind, code, msg, by), evs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
    sidecount = {}
    for e in evs: sidecount[e['side']] = sidecount.get(e['side'], 0) + 1
    detail.append('  %d x %s %s%s  [%s; %s]' % (len(evs), kind, ('%s ' % code) if code else '', msg, by,
                  ', '.join('%s %d' % kv for kv in sidecount.items())))
    tops = sorted({e['top'] for e in evs if e.get('top')})
    for t in tops[:3]: detail.append('      backtrace: %s' % t)
    locs = {}
    for e in evs:
        if e.get('location'): locs[e['location']] = locs.get(e['location'], 0) + 1
    if locs:   # a .rs file: pg_worlds' own code raised it; a .c file: PostgreSQL's (called by pg_worlds, or fed other values)
        detail.append('      raised at: %s' % ', '.join('%s (%d)' % kv for kv in sorted(locs.items(), key=lambda kv: -kv[1])[:3]))
    # examples: statements stock could run (not failing on pg_worlds' functions or relations) first, short ones first
    def missing(e): return bool(e['stock'] and e['stock']['code'] in ('42883', '42P01', '3F000', '42704'))
    for e in sorted(evs, key=lambda e: (missing(e), len(e.get('statement') or '')))[:3]:
        detail.append('    %s: %s' % (e['file'], re.sub(r'\s+', ' ', e.get('statement') or '(no statement)')[:500]))
        detail.append('      stock: %s; side rerun: %s' % (fmt(e['stock']), fmt(e['repro'])))
stock_xx = [e for e in events if e['kind'] == 'xx' and not e['w']]
if stock_xx:
    msgs = {}
    for e in stock_xx: msgs[norm(e['message'])] = msgs.get(norm(e['message']), 0) + 1
    detail.append('XX000 of stock PostgreSQL (%d): %s' % (len(stock_xx), '; '.join('%s (%d)' % kv for kv in sorted(msgs.items()))))
hangs = []
if os.path.exists(os.path.join(out, 'hangs.txt')):
    with open(os.path.join(out, 'hangs.txt')) as f: hangs = f.read().splitlines()
if hangs: detail += ['statements past the hang limit (.run/sqlsmith/hangs.txt):'] + ['  ' + h[:400] for h in hangs]

summary, bad = [], False
summary.append('%-11s %9s %8s %8s %6s %9s %8s %6s %6s %7s' % ('side', 'queries', 'crashes', '(worlds)', 'XX000',
               'XX000 pgw', 'errors', 'tmout', 'lost', 'seconds'))
tot = dict(q=0, c=0, cw=0, x=0, xw=0)
for s in sides + (['other'] if per['other']['crash'] or per['other']['xx'] else []):
    cnt = [0] * 6; secs = '-'
    try:
        with open(os.path.join(out, s, 'counts')) as f: cnt = [int(x) for x in f.read().split()]
        with open(os.path.join(out, s, 'seconds')) as f: secs = f.read().strip()
    except (OSError, ValueError): pass
    p = per[s]
    summary.append('%-11s %9d %8d %8d %6d %9d %8d %6d %6d %7s' % (s, cnt[0], p['crash'], p['crash_w'], p['xx'], p['xx_w'],
                   cnt[2], cnt[3], cnt[5], secs))
    tot['q'] += cnt[0]; tot['c'] += p['crash']; tot['cw'] += p['crash_w']; tot['x'] += p['xx']; tot['xw'] += p['xx_w']
    if s != 'other' and cnt[0] < n_want:
        bad = True
        err = ''
        if os.path.exists(os.path.join(out, s, 'error')):
            with open(os.path.join(out, s, 'error')) as f: err = f.read().strip()
        summary.append('   %s ran %d of %d queries %s' % (s, cnt[0], n_want, err))
panics = sum(1 for e in events if e['kind'] == 'panic')
bad = bad or tot['c'] > 0 or tot['xw'] > 0 or panics > 0
summary.append('sqlsmith: %d queries on %d sides, %d crashes (%d pg_worlds), %d XX000 (%d pg_worlds), %d PANIC, %d hangs: %s' % (
    tot['q'], len(sides), tot['c'], tot['cw'], tot['x'], tot['xw'], panics, len(hangs), 'FAILED' if bad else 'ok'))
for note in ('library.txt', 'library_replaced', 'library_reanalysis'):
    if os.path.exists(os.path.join(out, note)):
        with open(os.path.join(out, note)) as f: summary.append(f.read().strip())
text = '\n'.join(detail + summary) + '\n'
with open(os.path.join(out, 'summary.txt'), 'w') as f: f.write(text)
sys.stdout.write(text)
sys.exit(1 if bad else 0)
PY
rc=$?
set -e
rm -f "$DATA"/core*
t_end=$(date +%s)
echo "   time: $((t_end - t_start))s in all ($((t_soak - t_start))s up to the end of the sides' runs)"
[ "${SOAK_KEEP:-0}" = 1 ] || { stop_cluster $CL; stop_cluster $ST; }
exit $rc
