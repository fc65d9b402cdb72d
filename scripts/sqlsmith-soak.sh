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
# holds the same schema and rows: the reference a failing statement is rerun on.
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
# statement_timeout=1s'" --exclude-catalog --verbose --seed=S --max-queries=M`. sqlsmith runs each
# statement as BEGIN; statement; ROLLBACK, so the writes it generates (INSERT, UPDATE, DELETE, upserts,
# MERGE, SELECT ... FOR UPDATE) leave main and the world as they were. It sets statement_timeout to 1s
# itself right after connecting (over whatever the connection string says), so the timeout is 1 s.
#
# --exclude-catalog: without it, sqlsmith picks the relations of its FROM clauses among every relation in
# information_schema.tables, and the ~200 of pg_catalog and information_schema would crowd out the
# twelve user relations pg_worlds routes (in a world, statements over catalogs alone run as in main). With
# it, the FROM clauses name the user's tables and views (and, for the superuser, pg_worlds' own relations
# in schemas worlds and worlds_data, which information_schema shows it; the ordinary role sees only the
# user's); functions and operators still come from all of pg_proc / pg_operator, pg_catalog's included.
#
# How queries are counted: sqlsmith --verbose prints one progress character per statement it generated:
# '.' ran, 'e' error, 't' timeout, 's' syntax error, 'c' connection lost (its report lines never consist of
# those characters alone, so the progress is the lines made only of them). A lost connection is the
# statement that was running when the backend died (the first 'c' of a run of them); the next 'c's are
# statements sqlsmith could not send while the server was still recovering (it reconnects once a second).
# Queries run = '.' + 'e' + 't' + 's' + runs of 'c'. sqlsmith stops when it has generated --max-queries
# and exits if it can't connect at its start or load the schema: the script runs it in chunks of
# SOAK_CHUNK (default 5000), each with a new seed (written to .run/sqlsmith/<side>/seeds), until the side
# has run SOAK_QUERIES, waiting for the server to take connections before each chunk.
#
# Crashes and internal errors are read from the server's JSON log (logging_collector, jsonlog;
# log_connections maps each backend's PID to its side through its application_name soak_<side>;
# log_min_error_statement=error puts the statement in the error's record; log_error_verbosity=verbose the
# C function and file): a crash is the postmaster's "server process (PID n) was terminated by signal ..."
# (or an exit code other than 0 and 1), its statement the "Failed process was running:" detail; a PANIC is
# counted with it; an internal error is a record with SQLSTATE class XX (XX000, XX001, XX002), its
# statement the record's. The stderr log .run/smith/data/log/server.log has them too, with the SQLSTATE
# in each line's prefix. Every such statement is rerun (BEGIN; statement; ROLLBACK, 5 s timeout) as the
# same role on the stock cluster: it is stock's if stock fails the same way (a crash, or a class XX error),
# else pg_worlds'. It is also rerun on the side itself, to tell whether it reproduces. After a crash the
# postmaster reinitialises and replays WAL; sqlsmith reconnects on its own and the script waits for
# connections before each chunk and after each rerun that crashed.
#
# Cores: the smith cluster runs with an unlimited core size (SOAK_CORES=0: no); a core that appears in its
# data directory (kernel.core_pattern a plain file name) is read by gdb (SOAK_MAX_CORES backtraces, default
# 5) and removed. A statement still running SOAK_HANG seconds (default 30) after it started despite the 1 s
# timeout is recorded as a hang and its backend terminated.
#
# Output under .run/sqlsmith/: <side>/crash_<n>.sql and <side>/xx000_<n>.sql (the failing statement, with
# its message, location, the reruns and the attribution as comments; a crash's file also holds the server
# log's lines before it and the backtrace when there is one), <side>/run<k>.log (sqlsmith's output),
# hangs.txt, summary.txt. It prints a summary line per side: queries run, crashes, XX000 total, XX000 of
# pg_worlds. Exits non-zero on any crash, any XX000 attributed to pg_worlds, or a side that could not run
# its queries. SOAK_PARALLEL=1 runs the four sides at once (the default runs them one after another);
# SOAK_SEED (default 1) changes every seed; SOAK_KEEP=1 leaves both clusters running.
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

t_start=$(date +%s)
for c in $CL $ST; do stop_cluster $c; rm -rf "$(cluster_dir $c)"; done
rm -rf "$OUT"; mkdir -p "$OUT/cores"

# the smith cluster's processes may write cores (runuser resets the soft limit: raise it inside)
as_pg_cores() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- bash -c 'ulimit -c unlimited 2>/dev/null; exec "$@"' as_pg "$@"
  else (ulimit -c unlimited 2>/dev/null; exec "$@"); fi
}
CORES=${SOAK_CORES:-1}
core_pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo "|")
case "$core_pattern" in "|"*|*/*) CORES=0 ;; esac
command -v gdb >/dev/null || CORES=0

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
)
# make_cluster NAME PRELOAD PORT: a fresh cluster with the log settings above
make_cluster() {
  PORT=$3 start_cluster "$1" "$2"
  local a=(); for s in "${LOGCONF[@]}"; do a+=(-c "$s"); done
  psql_in "$1" -q "${a[@]}"
  stop_cluster "$1"
  if [ "$1" = $CL ] && [ "$CORES" = 1 ]; then
    local saved; saved=$(declare -f as_pg); eval "as_pg() { as_pg_cores \"\$@\"; }"
    PORT=$3 start_cluster "$1" "$2"
    eval "$saved"
  else
    PORT=$3 start_cluster "$1" "$2"
  fi
}
echo "== clusters: $CL (pg_worlds preloaded) and $ST (stock)"
make_cluster $CL yes "${SOAK_PORT:-56300}"
make_cluster $ST no "${SOAK_STOCK_PORT:-56310}"
DATA=$(cluster_dir $CL)/data
JSONLOG=$DATA/log/server.json

# wait_ready CLUSTER: until it takes connections again (after a crash: recovery), at most 180 s
wait_ready() {
  for _ in $(seq 1 360); do
    $PGBIN/psql "$(conninfo "$1" $DB) application_name=soak_watch" -X -qAtc "select 1" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# ---- the schema and the rows, the same on both clusters -------------------------------------------------
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
create role smith_user login;
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
  psql_in $c -q -c "create database $DB"
  psql_in $c -d $DB -q -f "$OUT/schema.sql" >/dev/null
done
psql_in $CL -d $DB -q -c "set client_min_messages = warning" -c "create extension pg_worlds" \
  -c "select * from worlds.sql('create world $WORLD')" >/dev/null
$PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=$WORLD'" -X -q -v ON_ERROR_STOP=1 -f "$OUT/world.sql" >/dev/null
counts="select (select count(*) from customers) || '/' || (select count(*) from events) || '/' || (select count(*) from accounts)"
main_counts=$(psql_in $CL -d $DB -qAt -c "$counts")
world_counts=$($PGBIN/psql "$(conninfo $CL $DB) options='-c worlds.world=$WORLD'" -X -qAt -c "$counts")
stock_counts=$(psql_in $ST -d $DB -qAt -c "$counts")
echo "   rows customers/events/accounts: main $main_counts, world $world_counts, stock $stock_counts"
[ "$main_counts" = "$stock_counts" ] || { echo "stock and main differ" >&2; exit 1; }
[ "$main_counts" != "$world_counts" ] || { echo "the world doesn't differ from main" >&2; exit 1; }
rels="select count(*) filter (where table_schema = 'public') || ' user, ' || count(*) filter (where table_schema like 'worlds%') || ' pg_worlds'
      from information_schema.tables where table_schema not in ('pg_catalog', 'information_schema')"
echo "   relations sqlsmith can pick: superuser $(psql_in $CL -d $DB -qAt -c "$rels"), $ROLE $($PGBIN/psql "$(conninfo $CL $DB) user=$ROLE" -X -qAt -c "$rels")"

# ---- the sides ------------------------------------------------------------------------------------------
side_role() { case $1 in *_su) echo postgres ;; *) echo $ROLE ;; esac; }
side_world() { case $1 in world_*) echo $WORLD ;; *) echo main ;; esac; }

# progress FILE...: "sent ok err timeout syntax lost" from sqlsmith's progress characters
progress() {
  cat "$@" 2>/dev/null | grep -E '^[.etsc]+$' | tr -d '\n' | awk '
    { for (i = 1; i <= length($0); i++) { ch = substr($0, i, 1); n[ch]++; if (ch == "c" && prev != "c") runs++; prev = ch } }
    END { printf "%d %d %d %d %d %d\n", n["."] + n["e"] + n["t"] + n["s"] + runs, n["."], n["e"], n["t"], n["s"], n["c"] }'
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
    local n=$((N - sent)); [ $n -gt "$CHUNK" ] && n=$CHUNK
    seed=$(( (SEED * 1000003 + idx * 10007 + k * 101) % 2147483647 ))
    echo "run$k seed=$seed max-queries=$n" >>"$dir/seeds"
    sqlsmith --verbose --exclude-catalog --seed=$seed --max-queries=$n --target="$target" >/dev/null 2>"$dir/run$k.log" || true
    got=$(progress "$dir/run$k.log" | cut -d' ' -f1)
    sent=$((sent + got)); k=$((k + 1))
    if [ "$got" -eq 0 ]; then empty=$((empty + 1)); else empty=0; fi
    if [ $empty -ge 5 ]; then echo "$side: sqlsmith ran nothing 5 times running (see $dir/run$((k - 1)).log)" >"$dir/error"; break; fi
  done
  echo "$(( $(date +%s) - start ))" >"$dir/seconds"
}

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
    local s1 s2; s1=$(stat -c %s "$core"); sleep 1; s2=$(stat -c %s "$core")
    [ "$s1" = "$s2" ] || continue
    if [ $ncores -lt "${SOAK_MAX_CORES:-5}" ]; then
      mv "$core" "$OUT/cores/core"
      timeout 300 gdb -batch -nx -ex 'info sharedlibrary pg_worlds' -ex 'bt 60' $PGBIN/postgres "$OUT/cores/core" \
        >"$OUT/cores/bt.$ncores.txt" 2>&1 || true
      local pid; pid=$(grep -m1 -oE '\[New LWP [0-9]+\]' "$OUT/cores/bt.$ncores.txt" | grep -oE '[0-9]+' || true)
      [ -n "$pid" ] && mv "$OUT/cores/bt.$ncores.txt" "$OUT/cores/bt.pid$pid.txt"
      rm -f "$OUT/cores/core"; ncores=$((ncores + 1))
    else
      rm -f "$core"
    fi
  done
}

echo "== sqlsmith: $N queries per side ($SIDES), $( [ "${SOAK_PARALLEL:-0}" = 1 ] && echo 'sides at once' || echo 'one side after another')"
idx=0; pids=()
for side in $SIDES; do
  idx=$((idx + 1))
  run_side "$side" $idx &
  pids+=($!)
  if [ "${SOAK_PARALLEL:-0}" != 1 ]; then
    while kill -0 "${pids[-1]}" 2>/dev/null; do watch; sleep 2; done
    wait "${pids[-1]}" || true
    echo "   $side: $(progress "$OUT/$side"/run*.log | awk '{print $1 " queries"}') in $(cat "$OUT/$side/seconds")s"
  fi
done
if [ "${SOAK_PARALLEL:-0}" = 1 ]; then
  while :; do
    alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    watch; sleep 2
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
fi
watch
wait_ready $CL || true
for side in $SIDES; do progress "$OUT/$side"/run*.log >"$OUT/$side/counts"; done
t_soak=$(date +%s)

# ---- the log: crashes and class XX errors, reruns, attribution, summary ---------------------------------
echo "== crashes and XX000 in the server log; reruns on $ST"
set +e
python3 - "$OUT" "$JSONLOG" "$DATA/log/server.log" "$(conninfo $CL $DB)" "$(conninfo $ST $DB)" "$ROLE" "$WORLD" \
  "$SIDES" "$N" "${SOAK_MAX_RERUNS:-200}" <<'PY'
import json, os, re, subprocess, sys, time

out, jsonlog, stderrlog, smith_ci, stock_ci, role, world, sides, n_want, max_reruns = sys.argv[1:]
sides = sides.split(); n_want = int(n_want); max_reruns = int(max_reruns)

def side_role(s): return 'postgres' if s.endswith('_su') else role
def side_world(s): return world if s.startswith('world_') else 'main'

# -- read the JSON log in order: which side each backend PID belongs to, then the failures
pid_side, events = {}, []
crash_re = re.compile(r'\(PID (\d+)\) (was terminated by (signal|exception)|exited with exit code (\d+))')
with open(jsonlog, encoding='utf-8', errors='replace') as f:
    for line in f:
        try: r = json.loads(line)
        except ValueError: continue
        msg, pid = r.get('message', ''), r.get('pid')
        if msg.startswith('connection authorized:') or msg.startswith('connection received:'):
            m = re.search(r'application_name=soak_(\w+)', msg)
            pid_side[pid] = m.group(1) if m else None
            continue
        m = crash_re.search(msg) if r.get('backend_type') == 'postmaster' else None
        if m and not (m.group(4) in ('0', '1')):
            cpid = int(m.group(1))
            d = r.get('detail', '') or ''
            stmt = d[len('Failed process was running: '):] if d.startswith('Failed process was running: ') else None
            events.append(dict(kind='crash', side=pid_side.get(cpid), pid=cpid, time=r.get('timestamp'),
                               message=msg, statement=stmt, location=''))
        elif r.get('error_severity') == 'PANIC':
            events.append(dict(kind='panic', side=pid_side.get(pid), pid=pid, time=r.get('timestamp'),
                               message=msg, statement=r.get('statement'), location=''))
        elif (r.get('state_code') or '').startswith('XX'):
            loc = ' '.join(x for x in (r.get('func_name'), r.get('file_name') and '%s:%s' % (r.get('file_name'), r.get('file_line_num'))) if x)
            events.append(dict(kind='xx', side=pid_side.get(pid), pid=pid, time=r.get('timestamp'), code=r['state_code'],
                               message=msg, detail=r.get('detail'), context=r.get('context'), statement=r.get('statement'),
                               location=loc, backend=r.get('backend_type'), app=r.get('application_name')))

try:
    with open(stderrlog, encoding='utf-8', errors='replace') as f: stderr_lines = f.readlines()
except OSError: stderr_lines = []

# -- rerun a statement as sqlsmith ran it: BEGIN; statement; ROLLBACK as the side's role (in its world)
def ready(ci):
    for _ in range(360):
        if subprocess.run(['psql', ci + ' application_name=soak_watch', '-X', '-qAtc', 'select 1'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0: return True
        time.sleep(0.5)
    return False

def rerun(ci, rl, wd, stmt):
    conn = ci + ' user=%s application_name=soak_rerun' % rl
    if wd != 'main': conn += " options='-c worlds.world=%s'" % wd
    try:
        p = subprocess.run(['psql', conn, '-X', '-q', '-v', 'VERBOSITY=verbose',
                            '-c', "set statement_timeout = '5s'", '-c', 'set client_min_messages = error',
                            '-c', 'begin', '-c', stmt, '-c', 'rollback'],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        err = p.stderr.decode('utf-8', 'replace')
    except subprocess.TimeoutExpired:
        return dict(result='hang', code=None, message='no answer in 120 s')
    if 'server closed the connection unexpectedly' in err or 'terminated abnormally' in err or 'connection to server was lost' in err:
        ready(ci)
        return dict(result='crash', code=None, message=err.strip().splitlines()[0] if err.strip() else '')
    m = re.search(r'^(?:psql:[^\n]*?)?ERROR:  ([0-9A-Z]{5}): (.*)$', err, re.M)
    if m: return dict(result='error', code=m.group(1), message=m.group(2))
    return dict(result='ok', code=None, message='')

def same_failure(ev, res):
    if ev['kind'] in ('crash', 'panic'): return res['result'] == 'crash'
    return res['result'] == 'crash' or (res['result'] == 'error' and (res['code'] or '').startswith('XX'))

def fmt(res):
    return res['result'] + (' %s: %s' % (res['code'], res['message']) if res['result'] == 'error' else
                            (': ' + res['message'] if res['message'] else ''))

def comment(text): return '\n'.join('-- ' + l for l in str(text).splitlines()) + '\n'

# -- attribute each failure, write one file per failure
cache, reruns, verdict_by_msg = {}, 0, {}
per = {s: dict(crash=0, crash_w=0, xx=0, xx_w=0) for s in sides + ['other']}
lines_out = []
nfile = {}
for ev in events:
    s = ev['side'] if ev['side'] in sides else 'other'
    ev['side'] = s
    rl = side_role(s) if s != 'other' else 'postgres'
    wd = side_world(s) if s != 'other' else 'main'
    stmt = ev.get('statement')
    key = (rl, wd, stmt)
    if stmt is None:
        ev['stock'], ev['repro'], ev['by'] = None, None, 'pg_worlds' if ev['kind'] == 'xx' else 'unknown (no statement)'
    elif key in cache:
        ev['stock'], ev['repro'], ev['by'] = cache[key]
    elif reruns >= max_reruns:
        ev['stock'] = ev['repro'] = None
        ev['by'] = verdict_by_msg.get(ev['message'], 'pg_worlds') + ' (not rerun: SOAK_MAX_RERUNS reached; by its message)'
    else:
        reruns += 1
        stock = rerun(stock_ci, rl, 'main', stmt)
        repro = rerun(smith_ci, rl, wd, stmt)
        by = 'stock' if same_failure(ev, stock) else 'pg_worlds'
        cache[key] = (stock, repro, by)
        verdict_by_msg.setdefault(ev['message'], by)
        ev['stock'], ev['repro'], ev['by'] = stock, repro, by
    w = ev['by'].startswith('pg_worlds')
    if ev['kind'] in ('crash', 'panic'):
        if ev['kind'] == 'crash':
            per[s]['crash'] += 1; per[s]['crash_w'] += w
        name = ev['kind']
    else:
        per[s]['xx'] += 1; per[s]['xx_w'] += w
        name = 'xx000'
    k = nfile.get((s, name), 0) + 1; nfile[(s, name)] = k
    os.makedirs(os.path.join(out, s), exist_ok=True)
    path = os.path.join(out, s, '%s_%d.sql' % (name, k))
    with open(path, 'w') as f:
        f.write(comment('%s on side %s (role %s, world %s), backend PID %s, at %s' % (ev['kind'], s, rl, wd, ev['pid'], ev['time'])))
        f.write(comment('message: ' + ('%s ' % ev['code'] if ev.get('code') else '') + ev['message']))
        for fld in ('detail', 'context', 'location'):
            if ev.get(fld): f.write(comment('%s: %s' % (fld, ev[fld])))
        if ev['stock'] is not None: f.write(comment('rerun on stock: ' + fmt(ev['stock'])))
        if ev['repro'] is not None: f.write(comment('rerun on the side: ' + fmt(ev['repro'])))
        f.write(comment('attributed to: ' + ev['by']))
        if ev['kind'] == 'crash':
            idx = next((i for i, l in enumerate(stderr_lines) if '(PID %d) was terminated' % ev['pid'] in l
                        or '(PID %d) exited with' % ev['pid'] in l), None)
            if idx is not None:
                f.write(comment('server.log before the crash:\n' + ''.join(stderr_lines[max(0, idx - 30):idx + 2])))
            bt = os.path.join(out, 'cores', 'bt.pid%d.txt' % ev['pid'])
            if os.path.exists(bt):
                with open(bt, errors='replace') as b:
                    f.write(comment('backtrace (gdb, core):\n' + ''.join(l for l in b if l.startswith('#'))))
        f.write((stmt if stmt is not None else '-- (no statement)') + ';\n')
    ev['file'] = os.path.relpath(path, os.path.dirname(os.path.dirname(out)))
    if ev['kind'] in ('crash', 'panic') or w:
        lines_out.append('  %s %s %s: %s%s\n      %s\n      stock: %s; side rerun: %s; -> %s' % (
            s, ev['kind'], ev['file'], ('%s ' % ev['code']) if ev.get('code') else '', ev['message'],
            re.sub(r'\s+', ' ', stmt or '(no statement)')[:600],
            fmt(ev['stock']) if ev['stock'] else '-', fmt(ev['repro']) if ev['repro'] else '-', ev['by']))

# -- summary
hangs = []
if os.path.exists(os.path.join(out, 'hangs.txt')):
    with open(os.path.join(out, 'hangs.txt')) as f: hangs = f.read().splitlines()
summary, bad = [], False
summary.append('%-11s %9s %8s %8s %6s %9s %8s %6s %6s %7s' % ('side', 'queries', 'crashes', '(worlds)', 'XX000',
               'XX000 pgw', 'errors', 'tmout', 'lost', 'seconds'))
tot = dict(q=0, c=0, cw=0, x=0, xw=0)
for s in sides + (['other'] if per['other']['crash'] or per['other']['xx'] else []):
    cnt = [0] * 6; secs = '-'
    try:
        with open(os.path.join(out, s, 'counts')) as f: cnt = [int(x) for x in f.read().split()]
        with open(os.path.join(out, s, 'seconds')) as f: secs = f.read().strip()
    except OSError: pass
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
detail = []
if lines_out: detail += ['crashes, PANICs and XX000 of pg_worlds:'] + lines_out
stock_xx = [e for e in events if e['kind'] == 'xx' and not e['by'].startswith('pg_worlds')]
if stock_xx:
    detail.append('XX000 of stock PostgreSQL (%d): %s' % (len(stock_xx), '; '.join(sorted({e['message'] for e in stock_xx}))))
if hangs: detail += ['statements past the hang limit (.run/sqlsmith/hangs.txt):'] + ['  ' + h[:400] for h in hangs]
text = '\n'.join(detail + summary) + '\n'
with open(os.path.join(out, 'summary.txt'), 'w') as f: f.write(text)
sys.stdout.write(text)
sys.exit(1 if bad else 0)
PY
rc=$?
set -e
t_end=$(date +%s)
echo "   time: $((t_end - t_start))s in all ($((t_soak - t_start))s up to the end of the sides' runs)"
[ "${SOAK_KEEP:-0}" = 1 ] || { stop_cluster $CL; stop_cluster $ST; }
exit $rc
