#!/usr/bin/env bash
# pgbench TPC-B in a world: `pgbench -i` in main with CREATE EXTENSION afterwards (existing tables get
# tracked), and again in a second database with CREATE EXTENSION first (pgbench creates its tables, loads
# them, then adds primary keys). Then 2 clients x 200 transactions run in world `bench` through the
# connection string.
# Main must be byte-for-byte unchanged; the world must hold exactly 400 history rows and the TPC-B
# invariant sum(abalance) = sum(bbalance) = sum(tbalance) = sum(delta). Then pgbench runs in main and the
# world must not change.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
dir=$(cluster_dir $CL); port=$(cat "$dir/port")

# The script runs itself once per ORDER (its own database each): ORDER=after creates the extension
# after pgbench -i, ORDER=before creates it first (pgbench's tables are then tracked as they are created).
if [ -z "${1:-}" ]; then
  rc=0
  bash "$0" after || rc=1
  bash "$0" before || rc=1
  [ $rc -eq 0 ] || { echo "05_pgbench_in_world: failed" >&2; exit 1; }
  echo "ok: 05_pgbench_in_world"
  exit 0
fi
ORDER=$1
DB=s05_pgbench_$ORDER
OUT=$RUN_DIR/s05_pgbench_$ORDER; rm -rf "$OUT"; mkdir -p "$OUT"
echo "=== extension created $ORDER pgbench -i"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"

if [ "$ORDER" = after ]; then
  echo "check: pgbench -i -s 1 in main, then CREATE EXTENSION pg_worlds tracks the four pgbench tables"
  $PGBIN/pgbench -i -s 1 -q -h "$dir/sock" -p "$port" -U postgres $DB >"$OUT/init.log" 2>&1 \
    || { cat "$OUT/init.log"; fail "pgbench -i failed"; }
  psql_in $CL -d $DB -q -v VERBOSITY=verbose -c "create extension pg_worlds" \
    || fail "CREATE EXTENSION pg_worlds failed on a database initialised by pgbench -i"
else
  echo "check: CREATE EXTENSION pg_worlds, then pgbench -i -s 1 (tables created, loaded, then given keys) tracks them"
  psql_in $CL -d $DB -q -c "create extension pg_worlds"
  $PGBIN/pgbench -i -s 1 -q -h "$dir/sock" -p "$port" -U postgres $DB >"$OUT/init.log" 2>&1 \
    || { cat "$OUT/init.log"; fail "pgbench -i failed with pg_worlds created first"; }
fi
expect "tracked pgbench tables" \
  "$(psql_in $CL -d $DB -qAt -c "select string_agg(relid::text, ',' order by relid::text) from worlds.tables where relid::text like 'pgbench%'")" \
  "pgbench_accounts,pgbench_branches,pgbench_history,pgbench_tellers"

# sums W: checksums of every pgbench table, read in world W
sums() {
  psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "
    select concat_ws(' ',
      (select count(*) || ':' || coalesce(md5(string_agg(t::text, ',' order by aid)), '-') from pgbench_accounts t),
      (select count(*) || ':' || coalesce(md5(string_agg(t::text, ',' order by bid)), '-') from pgbench_branches t),
      (select count(*) || ':' || coalesce(md5(string_agg(t::text, ',' order by tid)), '-') from pgbench_tellers t),
      (select count(*) || ':' || coalesce(md5(string_agg(t::text, ',' order by tid, bid, aid, delta, mtime, filler)), '-')
         from pgbench_history t))"
}
# invariant W: counts and the TPC-B sums, read in world W
invariant() {
  psql_in $CL -d $DB -qAt -c "set worlds.world = $1" -c "
    select (select count(*) from pgbench_history) || ' ' ||
           (select sum(abalance) from pgbench_accounts) || ' ' || (select coalesce(sum(delta), 0) from pgbench_history) || ' ' ||
           (select sum(bbalance) from pgbench_branches) || ' ' || (select sum(tbalance) from pgbench_tellers)"
}

MAIN0=$(sums main)
echo "  main before: $MAIN0"
expect "main row counts after -i" "$(echo "$MAIN0" | sed 's/:[0-9a-f-]*//g')" "100000 1 10 0"

echo "check: world bench, forked now, reads exactly main"
psql_in $CL -d $DB -qAt -c "select worlds.create_world('bench')" >/dev/null
expect "bench checksums at fork" "$(sums bench)" "$MAIN0"

echo "check: pgbench -n -c 2 -j 2 -t 200 on a conninfo with options='-c worlds.world=bench'"
BENCH="host=$dir/sock port=$port user=postgres dbname=$DB options='-c worlds.world=bench'"
# Two writers of one world may meet on a row: the later one gets 40001 (as under REPEATABLE READ) and
# retries, as an app does. Retries are shown below; seen in about 1 run in 10 (open question: the
# conflicting row was written by the other client milliseconds before, more often than chance).
echo "  $PGBIN/pgbench -n -c 2 -j 2 -t 200 --max-tries=5 \"$BENCH\""
if ! $PGBIN/pgbench -n -c 2 -j 2 -t 200 --max-tries=5 "$BENCH" >"$OUT/bench.log" 2>&1; then
  tail -20 "$OUT/bench.log"; bad "pgbench in world bench exited non-zero (log: $OUT/bench.log)"
fi
grep -E "processed|failed|retried|tps" "$OUT/bench.log" | sed 's/^/    | /' || true
grep -q "number of transactions actually processed: 400/400" "$OUT/bench.log" \
  || bad "pgbench did not process 400/400 transactions in the world"

echo "check: main is unchanged"
expect "main checksums after the world's pgbench" "$(sums main)" "$MAIN0"

echo "check: the world has 400 history rows and the TPC-B invariant holds"
inv=$(invariant bench)
echo "  bench: history=$(echo "$inv" | cut -d' ' -f1) sum(abalance)=$(echo "$inv" | cut -d' ' -f2) sum(delta)=$(echo "$inv" | cut -d' ' -f3) sum(bbalance)=$(echo "$inv" | cut -d' ' -f4) sum(tbalance)=$(echo "$inv" | cut -d' ' -f5)"
read -r h a d b t <<<"$inv"
expect "bench pgbench_history rows" "$h" 400
expect "bench sum(abalance) = sum(delta)" "$a" "$d"
expect "bench sum(bbalance) = sum(delta)" "$b" "$d"
expect "bench sum(tbalance) = sum(delta)" "$t" "$d"
expect "bench accounts count" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = bench" -c "select count(*) from pgbench_accounts")" 100000
# every history row's delta is applied to its account exactly once: per account, abalance = sum of its deltas
expect "bench accounts whose abalance != sum of their deltas" \
  "$(psql_in $CL -d $DB -qAt -c "set worlds.world = bench" -c "
     select count(*) from (select aid, sum(delta) as s from pgbench_history group by aid) h
       join pgbench_accounts a using (aid) where a.abalance <> h.s")" 0
expect "bench accounts changed without a history row" \
  "$(psql_in $CL -d $DB -qAt -c "set worlds.world = bench" -c "
     select count(*) from pgbench_accounts a where abalance <> 0 and not exists (select 1 from pgbench_history h where h.aid = a.aid)")" 0
# pgbench -i adds the primary keys after loading: the catalog must know them
expect "key columns known to pg_worlds" \
  "$(psql_in $CL -d $DB -qAt -c "select string_agg(relid::text || '(' || array_to_string(key_columns, ',') || ')', ' ' order by relid::text) from worlds.tables where relid::text like 'pgbench%'")" \
  "pgbench_accounts(aid) pgbench_branches(bid) pgbench_history() pgbench_tellers(tid)"
BENCH1=$(sums bench)

echo "check: pgbench in main (PGOPTIONS unset, 2 x 50) changes main and leaves the world as it was"
if ! $PGBIN/pgbench -n -c 2 -j 2 -t 50 "host=$dir/sock port=$port user=postgres dbname=$DB" >"$OUT/main.log" 2>&1; then
  tail -20 "$OUT/main.log"; bad "pgbench in main exited non-zero (log: $OUT/main.log)"
fi
read -r h a d b t <<<"$(invariant main)"
expect "main pgbench_history rows" "$h" 100
expect "main sum(abalance) = sum(delta)" "$a" "$d"
expect "main sum(bbalance) = sum(delta)" "$b" "$d"
expect "bench checksums after main's pgbench" "$(sums bench)" "$BENCH1"

if [ $failures -ne 0 ]; then echo "05_pgbench_in_world ($ORDER): $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 05_pgbench_in_world ($ORDER)"
