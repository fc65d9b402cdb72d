#!/usr/bin/env bash
# The system benchmark suite: figures P1–P12 of the performance goals, each printed beside its goal.
#
#   bash benches/run.sh                  full run: starts a throwaway cluster "bench", loads the full sizes, runs
#                                        every figure 3 times (alternating the two sides of each ratio), prints
#                                        the table and writes docs/benchmarks.md. About 15 minutes on 2 cores.
#   bash benches/run.sh --smoke          tiny sizes, one repetition, goals shown but not enforced; part of
#                                        scripts/test.sh so the suite cannot rot. Writes no docs.
#   --cluster NAME                       use that running cluster (started by scripts/lib.sh with the preload)
#                                        instead of "bench"; the suite's databases (bench_*) are dropped at the end.
#                                        The "without preload" variant of P1 needs its own cluster and is skipped.
#   --reps N                             repetitions (default 3, smoke 1)
#   --only p1,...,p10,p11 run only those groups of figures (p1c, p2c = P1, P2 counted in
#                                        instructions; p3 = P3, P4 and P5; p9 = main writing while worlds
#                                        merge; p10 = CREATE TABLE tracked vs plain; p11 = merge checks; p14 = pgbench
#                                        through worlds-proxy vs pgbouncer vs direct; default all)
#   BENCH_BUILD=debug|release            names the installed build in docs/benchmarks.md
#
# A missed goal is reported in the table, not an error. When something fails to run, its figures say
# "failed: <the error>", the run goes on with the other figures, and exits non-zero at the end.
# Each figure is the median over the repetitions (min and max shown); the table is made by benches/report.py.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
shopt -s inherit_errexit  # a failing psql inside $(...) stops the run too

ALL_FIGURES=p1,p1c,p2,p2c,p3,p6,p7,p8,p9,p10,p11,p12,p13,p14,p15,p16,p16c
MODE=full CLUSTER=bench OWN_CLUSTER=yes REPS= ONLY=$ALL_FIGURES
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) MODE=smoke ;;
    --cluster) CLUSTER=$2 OWN_CLUSTER=no; shift ;;
    --reps) REPS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    *) echo "usage: benches/run.sh [--smoke] [--cluster NAME] [--reps N] [--only p1,p1c,p2,p2c,p3,p6,p7,p8,p9,p10,p11,p12,p13,p14,p15,p16,p16c]" >&2; exit 2 ;;
  esac
  shift
done

# Sizes. T_* are pgbench durations in seconds; BIG_ROWS is the "1M-row table" of P3-P5, CHANGES the rows a
# world changes for P4/P5 (and the size of P4's small table), FORK_SMALL the "1k-row database" of P3.
if [ $MODE = smoke ]; then
  SCALE=1 INSTR_TX=50 INSTR_SCANS=2 T_WRITE=2 T_SELECT=2 T_READ=1 T_BUSY=2 READ_ROWS=10000 FORK_SMALL=100 BIG_ROWS=10000 CHANGES=100 DDL_TABLES=20 REPS=${REPS:-1}
  SIM_ROWS=2000 SIM_WORLDS=10 SIM_FEW=10 SIM_MANY=100
  SB_ROWS=1000 T_SB=1 MANY_WORLDS=20 MANY_ROWS=10
else
  SCALE=10 INSTR_TX=2000 INSTR_SCANS=3 T_WRITE=15 T_SELECT=10 T_READ=5 T_BUSY=20 READ_ROWS=1000000 FORK_SMALL=1000 BIG_ROWS=1000000 CHANGES=10000 DDL_TABLES=500 REPS=${REPS:-3}
  SIM_ROWS=100000 SIM_WORLDS=200 SIM_FEW=100 SIM_MANY=10000
  SB_ROWS=100000 T_SB=5 MANY_WORLDS=1000 MANY_ROWS=100
fi
DBS="bench_p14 bench_sb_stock bench_sb bench_many bench_one bench_p13 bench_p13f bench_p12 bench_tpcb_tracked bench_tpcb_plain bench_reads bench_small bench_big bench_mid bench_old bench_ddl_tracked bench_ddl_plain bench_ddl_eager"
WORK=$(mktemp -d)
SAMPLES=$WORK/samples.tsv EXPLAIN=$WORK/explain
mkdir -p "$EXPLAIN"; : >"$SAMPLES"
START=$SECONDS LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
LIBRARY=$($PG_CONFIG --pkglibdir)/pg_worlds.so
library_id() { stat -c '%i %Y %s' "$LIBRARY" 2>/dev/null || echo missing; }  # changes when it is reinstalled
LIBRARY_START=$(library_id)

# ---------------------------------------------------------------------------------------------- helpers
step() { echo "-- $(date +%T) $*"; }

# sql DB [psql args]: quiet, unaligned psql against the bench cluster
sql() { local db=$1; shift; psql_in "$CLUSTER" -d "$db" -qAt -c "set client_min_messages = warning" "$@"; }

pgbench_in() {
  local dir; dir=$(cluster_dir "$CLUSTER")
  $PGBIN/pgbench -h "$dir/sock" -p "$(cat "$dir/port")" -U postgres "$@"
}

# bench WORLD DB [pgbench args]: one pgbench run in that world ("main" = no option); output kept for tps/latency
bench() {
  local world=$1 db=$2 opts=; shift 2
  [ "$world" = main ] || opts="-c worlds.world=$world"
  if ! (export PGOPTIONS="$opts"; pgbench_in -n "$@" "$db") >"$WORK/pgbench.log" 2>&1; then
    echo "bench: pgbench $* on $db (world $world) failed:" >&2; cat "$WORK/pgbench.log" >&2; return 1
  fi
}
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$WORK/pgbench.log"; }
latency() { sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p' "$WORK/pgbench.log"; }

# timed DB SQL [SETUP]: runs SETUP (untimed) then SQL in one fresh session; prints "<ms> <SQL's output>"
timed() {
  local out ms
  out=$(sql "$1" ${3:+-c "$3"} -c '\timing on' -c "$2")
  ms=$(echo "$out" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1)
  echo "$ms $(echo "$out" | sed -n '/^Time: /!{p;q}')"
}

# sample FIGURE SERIES VALUE: one measurement (series x = the figure itself; see report.py)
sample() {
  # (a difference may be below zero: the latency a pooler adds, measured in a short smoke run, is noise)
  [[ $3 =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || { echo "bench: no number for $1/$2 (got '$3')" >&2; exit 1; }
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$SAMPLES"
}
note() { printf '%s\tnote\t%s\n' "$1" "$2" >>"$SAMPLES"; }  # note FIGURE TEXT: a row without a number
# pair FIGURE NAME_A A NAME_B B: both sides of a ratio figure and their ratio A/B
pair() { sample "$1" "$2" "$3"; sample "$1" "$4" "$5"; sample "$1" x "$(div "$3" "$5")"; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", a / b }'; }
median() { python3 -c 'import sys, statistics; print(statistics.median(float(l) for l in sys.stdin))'; }

fresh_db() { sql postgres -c "drop database if exists $1 with (force)" -c "create database $1"; }

# load_items DB ROWS: items(id int primary key, name text, price int) with ids 1..ROWS
load_items() {
  sql "$1" -c "create table items (id int primary key, name text, price int)" \
           -c "insert into items select g, 'item ' || g, g % 1000 from generate_series(1, $2) g"
}

track() {  # track DB: CREATE EXTENSION (tracks every table), checking that it did
  sql "$1" -c "create extension pg_worlds"
  [ "$(sql "$1" -c "select count(*) from worlds.tables")" -ge 1 ] || { echo "bench: $1 has no tracked table" >&2; exit 1; }
}

restart() {  # restart yes|no: our own cluster again, with or without shared_preload_libraries
  stop_cluster "$CLUSTER"; start_cluster "$CLUSTER" "$1"
}

# group "FIGURES" STEP...: runs the steps (functions) in a subshell; if one fails, its error is shown, each of
# FIGURES gets a row "failed: <error>" and the run goes on (exiting non-zero at the end). Sets GROUP_OK.
FAILED=0
group() {
  local figs=$1 rc f why; shift
  set +e
  ( set -e; for f in "$@"; do step "$f"; $f; done ) 2>"$WORK/err"
  rc=$?; set -e
  cat "$WORK/err" >&2
  if [ "$(library_id)" != "$LIBRARY_START" ] && [ -z "${LIBRARY_CHANGED_IN:-}" ]; then LIBRARY_CHANGED_IN="$*"; fi
  GROUP_OK=yes
  [ $rc -ne 0 ] || return 0
  GROUP_OK=no FAILED=1
  why=$(grep -m1 -o 'ERROR: .*' "$WORK/err" || tail -1 "$WORK/err")
  for f in $figs; do note "$f" "failed: $why"; done
}

cleanup() {
  local rc=$?
  stop_p14; rm -rf "$(cluster_dir "$CLUSTER")/p14"
  if [ $OWN_CLUSTER = yes ]; then
    [ $rc -eq 0 ] || tail -30 "$(cluster_dir "$CLUSTER")/server.log" 2>/dev/null || true
    stop_cluster "$CLUSTER"; rm -rf "$(cluster_dir "$CLUSTER")"
  else
    for db in $DBS; do sql postgres -c "drop database if exists $db with (force)" >/dev/null 2>&1 || true; done
  fi
  rm -rf "$WORK"
  exit $rc
}

# ---------------------------------------------------------------------------------------------- P1 main path
# Two databases with the same pgbench data in one (preloaded) cluster: tracked has CREATE EXTENSION pg_worlds
# (a capture trigger per table), plain has not. Runs alternate tracked, plain, tracked, plain.
setup_tpcb() {
  local db
  for db in bench_tpcb_tracked bench_tpcb_plain; do
    fresh_db $db
    pgbench_in -i -q -s $SCALE $db >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; exit 1; }
  done
  track bench_tpcb_tracked
}

PAIRS_RUN=0
tpcb() {  # tpcb FIGURE [pgbench args]: one tracked/plain pair, which side runs first alternating (the run
          # after the tracked one starts with its extra WAL to checkpoint and its pages in the cache)
  local t p
  PAIRS_RUN=$((PAIRS_RUN + 1))
  if [ $((PAIRS_RUN % 2)) -eq 1 ]; then
    sql postgres -c checkpoint; bench main bench_tpcb_tracked -c 2 -j 2 "${@:2}"; t=$(tps)
    sql postgres -c checkpoint; bench main bench_tpcb_plain -c 2 -j 2 "${@:2}"; p=$(tps)
  else
    sql postgres -c checkpoint; bench main bench_tpcb_plain -c 2 -j 2 "${@:2}"; p=$(tps)
    sql postgres -c checkpoint; bench main bench_tpcb_tracked -c 2 -j 2 "${@:2}"; t=$(tps)
  fi
  pair "$1" tracked "$t" plain "$p"
}

measure_p1() {
  local rep
  for rep in $(seq $REPS); do tpcb P1w -T $T_WRITE; done
  # select-only differs by ~1% (the hooks' work per statement; perf: pg_worlds.so is under 1% of a
  # backend's time) while single runs swing ±10%: twice as many pairs of half the length, so drift lands
  # on both sides of more pairs and the median ratio holds still
  for rep in $(seq $((REPS * 2))); do tpcb P1s -S -T $(((T_SELECT + 1) / 2)); done
}

# The same comparison against the cluster restarted without shared_preload_libraries (the plain database:
# no hooks, no triggers). Needs restarts, so only on our own cluster; each run after a 2 s warm-up.
measure_p1_nopreload() {
  local rep tw ts pw ps
  for rep in $(seq $REPS); do
    restart yes
    bench main bench_tpcb_tracked -S -T 2; bench main bench_tpcb_tracked -c 2 -j 2 -T $T_WRITE; tw=$(tps)
    bench main bench_tpcb_tracked -c 2 -j 2 -S -T $T_SELECT; ts=$(tps)
    restart no
    bench main bench_tpcb_plain -S -T 2; bench main bench_tpcb_plain -c 2 -j 2 -T $T_WRITE; pw=$(tps)
    bench main bench_tpcb_plain -c 2 -j 2 -S -T $T_SELECT; ps=$(tps)
    pair P1wn tracked "$tw" nopreload "$pw"; pair P1sn tracked "$ts" nopreload "$ps"
  done
}

# ---------------------------------------------------------------------------------------------- P1, counted
# P1's tps swings by ±10% between runs on these machines, more than the gap it measures. The same
# comparison counted: instructions a backend executes per transaction (valgrind's callgrind, which counts
# exactly and is not disturbed by the machine's other work). One backend in single-user mode runs a fixed
# TPC-B script (pgbench's statements, random values from a fixed seed) against a fresh copy of one
# database: tracked (library preloaded, capture on) or plain (not preloaded, triggers off through
# session_replication_role = replica: the same rows, pages and plans). Each side runs N and then 2N
# transactions; (count(2N) - count(N)) / N is a transaction without start-up. Select-only the same way.
# The ratios are plain / tracked, as P1's tps ratios are tracked / plain.
INSTR=instr
setup_instr() {
  command -v valgrind >/dev/null || { echo "bench: valgrind is missing (scripts/setup.sh installs it)" >&2; return 1; }
  stop_cluster $INSTR; rm -rf "$(cluster_dir $INSTR)"
  start_cluster $INSTR yes
  CLUSTER=$INSTR pgbench_in -i -q -s $SCALE postgres >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; return 1; }
  CLUSTER=$INSTR track postgres
  CLUSTER=$INSTR sql postgres -c "checkpoint"
  stop_cluster $INSTR
  write_instr_scripts
}

# the counted figures' fixed scripts (random values from fixed seeds): TPC-B (tpcb1/2), select-only (sel1/2),
# and select-only in world m1 (wsel1/2); the 2N script starts with the N one
write_instr_scripts() {
  python3 - "$WORK" $INSTR_TX $SCALE <<'PY'
import random, sys
work, n, scale = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def tpcb(count, seed):
    r = random.Random(seed); out = []
    for _ in range(count):
        aid, bid, tid, d = r.randint(1, 100000 * scale), r.randint(1, scale), r.randint(1, 10 * scale), r.randint(-5000, 5000)
        out += ["BEGIN;", f"UPDATE pgbench_accounts SET abalance = abalance + {d} WHERE aid = {aid};",
                f"SELECT abalance FROM pgbench_accounts WHERE aid = {aid};",
                f"UPDATE pgbench_tellers SET tbalance = tbalance + {d} WHERE tid = {tid};",
                f"UPDATE pgbench_branches SET bbalance = bbalance + {d} WHERE bid = {bid};",
                f"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ({tid}, {bid}, {aid}, {d}, CURRENT_TIMESTAMP);", "END;"]
    return out
def select(count, seed):
    r = random.Random(seed)
    return [f"SELECT abalance FROM pgbench_accounts WHERE aid = {r.randint(1, 100000 * scale)};" for _ in range(count)]
# the 2N script starts with the N script: the extra N transactions are the same for both sides
in_world = ["SET worlds.world = m1;"]
for name, lines in (("tpcb1", tpcb(n, 1)), ("tpcb2", tpcb(n, 1) + tpcb(n, 2)),
                    ("sel1", select(2 * n, 3)), ("sel2", select(2 * n, 3) + select(2 * n, 4)),
                    ("wsel1", in_world + select(2 * n, 3)), ("wsel2", in_world + select(2 * n, 3) + select(2 * n, 4))):
    open(f"{work}/{name}.sql", "w").write("\n".join(lines) + "\n")
PY
  chmod 755 "$WORK"; chmod 644 "$WORK"/*.sql
}

# count CLUSTER SCRIPT [postgres -c settings]: instructions one single-user backend executes for the
# script, on a fresh copy of that (stopped) cluster's database postgres (COUNT_DB: another of its databases)
count() {
  local cluster=$1 script=$2 copy=$WORK/instr_data; shift 2
  rm -rf "$copy"; cp -a "$(cluster_dir $cluster)/data" "$copy"
  as_pg valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    $PGBIN/postgres --single -D "$copy" -c fsync=off "$@" "${COUNT_DB:-postgres}" <"$WORK/$script.sql" >"$WORK/count.log" 2>&1 \
    || { tail -20 "$WORK/count.log" >&2; return 1; }
  rm -rf "$copy"
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$WORK/count.log"
}

# per_tx CLUSTER NAME N [settings]: instructions per transaction (or statement) of script NAME
per_tx() {
  local cluster=$1 name=$2 n=$3 a b; shift 3
  a=$(count $cluster ${name}1 "$@"); b=$(count $cluster ${name}2 "$@")
  awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.0f", (b - a) / n }'
}

measure_instr() {
  local tracked="-c shared_preload_libraries=pg_worlds" plain="-c session_replication_role=replica"
  local t p
  t=$(per_tx $INSTR tpcb $INSTR_TX $tracked); p=$(per_tx $INSTR tpcb $INSTR_TX $plain)
  pair P1wi plain "$p" tracked "$t"
  t=$(per_tx $INSTR sel $((2 * INSTR_TX)) $tracked); p=$(per_tx $INSTR sel $((2 * INSTR_TX)) $plain)
  pair P1si plain "$p" tracked "$t"
  rm -rf "$(cluster_dir $INSTR)"
}

# ---------------------------------------------------------------------------------------------- P2, counted
# P2's reads counted the same way: P2's tables and world (items and orders, 1% of both changed in world
# w) in a cluster of their own, each query's script run in main and in w (worlds.world set at start).
# pgbench's latency includes the round trip and the client, which both sides pay alike; the count is the
# server's work alone, so its ratios are the stricter ones.
INSTR_READS=instr_reads
setup_instr_reads() {
  command -v valgrind >/dev/null || { echo "bench: valgrind is missing (scripts/setup.sh installs it)" >&2; return 1; }
  stop_cluster $INSTR_READS; rm -rf "$(cluster_dir $INSTR_READS)"
  start_cluster $INSTR_READS yes
  CLUSTER=$INSTR_READS load_reads postgres
  CLUSTER=$INSTR_READS sql postgres -c "checkpoint"
  stop_cluster $INSTR_READS
  local q
  for q in $P2_QUERIES; do
    python3 - "$WORK" "$q" "${QUERY[$q]}" "${SPAN[$q]}" $READ_ROWS $([ $q = count ] && echo $INSTR_SCANS || echo $INSTR_TX) <<'PY'
import random, sys
work, name, query, span, rows, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def script(seed):
    r = random.Random(seed)
    return [query.replace(":id", str(r.randint(1, rows - span))) + ";" for _ in range(n)]
first = script(1)
open(f"{work}/{name}1.sql", "w").write("\n".join(first) + "\n")
open(f"{work}/{name}2.sql", "w").write("\n".join(first + script(2)) + "\n")
PY
  done
  chmod 755 "$WORK"; chmod 644 "$WORK"/*.sql
}

measure_instr_reads() {
  local q n m w preload="-c shared_preload_libraries=pg_worlds"
  for q in $P2_QUERIES; do
    n=$INSTR_TX; [ $q = count ] && n=$INSTR_SCANS
    m=$(per_tx $INSTR_READS $q $n $preload); w=$(per_tx $INSTR_READS $q $n $preload -c worlds.world=w)
    pair "P2${q}i" world "$w" main "$m"
  done
  rm -rf "$(cluster_dir $INSTR_READS)"
}

# ---------------------------------------------------------------------------------------------- P2 world reads
# items and orders of READ_ROWS rows each; world w updated 1% of both. Same queries in main and in w, one
# client, pgbench's average latency; ratio world / main.
declare -A QUERY=(
  [point]="select name, price from items where id = :id"
  [range]="select id, name, price from items where id between :id and :id + 99"
  [join]="select orders.id, items.name, orders.qty from orders join items on items.id = orders.item_id where orders.id between :id and :id + 9"
  [count]="select count(*) from items"
)
declare -A SPAN=([point]=0 [range]=99 [join]=9 [count]=0)
P2_QUERIES="point range join count"

# load_reads DB: P2's tables, tracked, and world w with 1% of both changed
load_reads() {
  load_items "$1" $READ_ROWS
  sql "$1" -c "create table orders (id int primary key, item_id int, qty int)" \
    -c "insert into orders select g, 1 + (g::bigint * 7919) % $READ_ROWS, g % 10 from generate_series(1, $READ_ROWS) g"
  track "$1"
  sql "$1" -c "select worlds.create_world('w')" >/dev/null
  sql "$1" -c "set worlds.world = 'w'" -c "update items set price = price + 1 where id % 100 = 0" \
    -c "update orders set qty = qty + 1 where id % 100 = 0"
  sql "$1" -c "vacuum analyze"
}

setup_reads() {
  fresh_db bench_reads
  load_reads bench_reads
  touch "$WORK/reads_loaded"
  local q
  for q in $P2_QUERIES; do
    printf '\\set id random(1, :rows - %d)\n%s;\n' "${SPAN[$q]}" "${QUERY[$q]}" >"$WORK/$q.sql"
  done
}

measure_p2() {
  local rep q m w
  for q in $P2_QUERIES; do  # warm-up: caches, and each side's first plan
    bench main bench_reads -f "$WORK/$q.sql" -D rows=$READ_ROWS -t 2
    bench w bench_reads -f "$WORK/$q.sql" -D rows=$READ_ROWS -t 2
  done
  for rep in $(seq $REPS); do
    for q in $P2_QUERIES; do
      bench main bench_reads -f "$WORK/$q.sql" -D rows=$READ_ROWS -T $T_READ; m=$(latency)
      bench w bench_reads -f "$WORK/$q.sql" -D rows=$READ_ROWS -T $T_READ; w=$(latency)
      pair "P2$q" world "$w" main "$m"
    done
  done
}

setup_reads_once() { [ -f "$WORK/reads_loaded" ] || setup_reads; }

# EXPLAIN ANALYZE of each query in w and in main, shown in docs under a missed goal; each after one unshown run
# of the same query in the session (as in pgbench's long sessions: the first query in a world builds caches)
explain_p2() {
  local q query
  for q in $P2_QUERIES; do
    query=${QUERY[$q]//:id/$((READ_ROWS / 2))}
    { echo "-- in world w:"; sql bench_reads -c "set worlds.world = 'w'" -c '\o /dev/null' -c "$query" -c '\o' -c "explain (analyze, costs off) $query"
      echo "-- in main:"; sql bench_reads -c '\o /dev/null' -c "$query" -c '\o' -c "explain (analyze, costs off) $query"; } >"$EXPLAIN/P2$q.txt"
  done
}

# ---------------------------------------------------------------------------------------------- P7 old world
# An old world over a busy main: TPC-B (pgbench's own script, one client) in a world forked before main ran
# TPC-B for T_BUSY seconds, against the same in a world forked after. A world reaches main's rows changed
# since its fork through history (see route/history_lookup.rs); its statements should not slow down as
# main works.
setup_old_world() {
  fresh_db bench_old
  pgbench_in -i -q -s $SCALE bench_old >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; exit 1; }
  track bench_old
  sql bench_old -c "select worlds.create_world('old')" >/dev/null
  bench main bench_old -c 2 -j 2 -T $T_BUSY
  sql bench_old -c "select worlds.create_world('fresh')" -c "vacuum analyze" >/dev/null
}

measure_p7() {
  local rep o f
  bench old bench_old -t 20; bench fresh bench_old -t 20  # warm-up: each world's cache
  for rep in $(seq $REPS); do
    if [ $((rep % 2)) -eq 1 ]; then
      bench old bench_old -T $T_READ; o=$(tps); bench fresh bench_old -T $T_READ; f=$(tps)
    else
      bench fresh bench_old -T $T_READ; f=$(tps); bench old bench_old -T $T_READ; o=$(tps)
    fi
    pair P7 old "$o" fresh "$f"
  done
}

# ---------------------------------------------------------------------------------------------- P8
# World writers run at once: pgbench TPC-B inside a world against main, same database, the sides
# alternating, at 1, 2 and 4 clients (goal >= 0.5x each). Each world run gets a world forked just before
# it (O(1)), so it measures writers of one world, not a world that must first catch up on main's changes
# since an old fork (that is P7).
setup_p8() {
  fresh_db bench_p8
  pgbench_in -i -q -s $SCALE bench_p8 >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; exit 1; }
  track bench_p8
}
p8_world() {  # p8_world N CLIENTS: tps of TPC-B in a world forked now
  sql bench_p8 -c "select worlds.create_world('p8_$1')" >/dev/null
  bench p8_$1 bench_p8 -c $2 -j $2 -T $T_BUSY || return 1
  tps
  sql bench_p8 -c "select worlds.drop_world('p8_$1')" >/dev/null
}
measure_p8() {
  local rep c w m n=0
  for c in 1 2 4; do
    for rep in $(seq $REPS); do
      n=$((n + 1))
      sql postgres -c checkpoint >/dev/null
      if [ $((rep % 2)) -eq 1 ]; then
        w=$(p8_world $n $c); bench main bench_p8 -c $c -j $c -T $T_BUSY; m=$(tps)
      else
        bench main bench_p8 -c $c -j $c -T $T_BUSY; m=$(tps); w=$(p8_world $n $c)
      fi
      pair P8c$c world "$w" main "$m"
    done
  done
}

# ---------------------------------------------------------------------------------------------- P9
# Main keeps writing while worlds merge: main's TPC-B (2 clients) while 4 other sessions loop, either
# writing a 4-row change straight to main (direct) or forking a world, making the same change there and
# merging it into main (merging); the sides alternate which runs first. A merge locks the rows it
# applies, not the tables, so TPC-B should barely notice the difference (goal >= 0.8x).
P9_SIDE_ROWS='\set a random(1, 100000 * :scale)
\set b random(1, 100000 * :scale)
\set c random(1, 100000 * :scale)
\set d random(1, 100000 * :scale)'
p9_scripts() {
  cat >"$WORK/p9_direct.sql" <<SQL
$P9_SIDE_ROWS
begin;
update pgbench_accounts set abalance = abalance - 1 where aid = :a;
update pgbench_accounts set abalance = abalance + 1 where aid = :b;
update pgbench_accounts set abalance = abalance - 1 where aid = :c;
update pgbench_accounts set abalance = abalance + 1 where aid = :d;
commit;
SQL
  cat >"$WORK/p9_merging.sql" <<SQL
$P9_SIDE_ROWS
\set n random(1, 2000000000)
select worlds.create_world('p9_' || :client_id || '_' || :n);
select set_config('worlds.world', 'p9_' || :client_id || '_' || :n, false);
update pgbench_accounts set abalance = abalance - 1 where aid = :a;
update pgbench_accounts set abalance = abalance + 1 where aid = :b;
update pgbench_accounts set abalance = abalance - 1 where aid = :c;
update pgbench_accounts set abalance = abalance + 1 where aid = :d;
select set_config('worlds.world', 'main', false);
select * from worlds.sql('merge world p9_' || :client_id || '_' || :n);
SQL
}
p9_side() {  # p9_side direct|merging: main's TPC-B tps while the side's 4 sessions run
  local side=$1 pid
  pgbench_in -n -c 4 -j 1 -T $((T_BUSY + 2)) -f "$WORK/p9_$side.sql" bench_tpcb_tracked >"$WORK/p9_$side.log" 2>&1 &
  pid=$!
  sleep 1
  bench main bench_tpcb_tracked -c 2 -j 2 -T $T_BUSY || { kill $pid 2>/dev/null; wait $pid; return 1; }
  wait $pid || { echo "bench: P9's $side sessions failed:" >&2; tail -5 "$WORK/p9_$side.log" >&2; return 1; }
  grep -q "^number of transactions actually processed: [1-9]" "$WORK/p9_$side.log" \
    || { echo "bench: P9's $side sessions did nothing:" >&2; tail -5 "$WORK/p9_$side.log" >&2; return 1; }
  tps
}
measure_p9() {
  local rep m d
  p9_scripts
  for rep in $(seq $REPS); do
    sql postgres -c checkpoint
    if [ $((rep % 2)) -eq 1 ]; then m=$(p9_side merging); d=$(p9_side direct); else d=$(p9_side direct); m=$(p9_side merging); fi
    pair P9 merging "$m" direct "$d"
  done
}

# ---------------------------------------------------------------------------------------------- P10
# DDL cost: DDL_TABLES CREATE TABLEs (each its own transaction, as a migration tool runs them) in a database
# with pg_worlds (every new table tracked) and in one without the extension, same cluster, sides alternating.
p10_side() {  # p10_side DB: milliseconds for the CREATE TABLEs, the tables dropped again (untimed)
  local db=$1 s e
  seq 1 $DDL_TABLES | sed 's/.*/create table p10_& (id int primary key, name text, n int);/' >"$WORK/p10_create.sql"
  seq 1 $DDL_TABLES | sed 's/.*/drop table p10_&;/' >"$WORK/p10_drop.sql"
  s=$(date +%s%N)
  psql_in "$CLUSTER" -d "$db" -q -f "$WORK/p10_create.sql" >/dev/null
  e=$(date +%s%N)
  psql_in "$CLUSTER" -d "$db" -q -f "$WORK/p10_drop.sql" >/dev/null
  awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'
}
setup_ddl() {
  fresh_db bench_ddl_tracked >/dev/null; fresh_db bench_ddl_plain >/dev/null; fresh_db bench_ddl_eager >/dev/null
  sql bench_ddl_tracked -c "create extension pg_worlds"
  # P10E: the same with worlds.lazy_storage off (each table's storage made by its CREATE TABLE)
  sql bench_ddl_eager -c "alter database bench_ddl_eager set worlds.lazy_storage = off"
  sql bench_ddl_eager -c "create extension pg_worlds"
}
measure_p10() {
  local rep t p l
  for rep in $(seq $REPS); do
    if [ $((rep % 2)) -eq 1 ]; then t=$(p10_side bench_ddl_tracked); p=$(p10_side bench_ddl_plain); l=$(p10_side bench_ddl_eager)
    else l=$(p10_side bench_ddl_eager); p=$(p10_side bench_ddl_plain); t=$(p10_side bench_ddl_tracked); fi
    pair P10 tracked "$t" plain "$p"
    pair P10E eager "$l" plain "$p"
  done
}

# ---------------------------------------------------------------------------------------------- P11
# Merge checks' cost: a world that updated CHANGES rows of items (every row of bench_mid) merged with three
# indexed checks on items, vs the same merge with none; sides alternating, a fresh world each.
setup_p11() {
  fresh_db bench_checks; load_items bench_checks $CHANGES; track bench_checks
  sql bench_checks -c "create index on items (price)" -c "create index on items (name)" -c "vacuum analyze" >/dev/null
}
p11_side() {  # p11_side with|without WORLD: the merge's milliseconds
  if [ "$1" = with ]; then
    sql bench_checks -c "select worlds.sql('create merge check no_negative on tables (items) as select id from items where price < 0')" \
      -c "select worlds.sql('create merge check no_huge on tables (items) as select id from items where price > 1000000')" \
      -c "select worlds.sql('create merge check named on tables (items) as select id from items where name = ''''')" >/dev/null
  fi
  world_with_changes bench_checks "$2" 1
  merge_ms bench_checks "$2"
  if [ "$1" = with ]; then
    sql bench_checks -c "select worlds.sql('drop merge check no_negative')" -c "select worlds.sql('drop merge check no_huge')" \
      -c "select worlds.sql('drop merge check named')" >/dev/null
  fi
}
measure_p11() {
  local rep w n
  for rep in $(seq $REPS); do
    if [ $((rep % 2)) -eq 1 ]; then w=$(p11_side with "c$rep"); n=$(p11_side without "n$rep")
    else n=$(p11_side without "n$rep"); w=$(p11_side with "c$rep"); fi
    pair P11 checks "$w" none "$n"
  done
}

# ---------------------------------------------------------------------------------------------- P12
# What checking reads costs: pgbench select-only (-S) and TPC-B inside a world forked WITH (check_reads =
# true) vs inside one forked without, same database, sides alternating, a fresh pair of worlds per run.
# Every read statement records what it read (a key; past 10,000 keys the table counts whole).
# P12r: what recording which columns clients read costs main (governance/readers/clients.rs): pgbench -S
# on main with worlds.record_reads on / off, same database, sides alternating.
setup_p12() {
  fresh_db bench_p12
  pgbench_in -i -q -s $SCALE bench_p12 >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; exit 1; }
  track bench_p12
}
p12_world() {  # p12_world NAME CHECK ARGS...: tps in a fresh world (check_reads CHECK)
  local name=$1 check=$2; shift 2
  sql bench_p12 -c "select worlds.create_world('$name', meta => '{\"check_reads\": $check}')" >/dev/null
  bench "$name" bench_p12 "$@" || return 1
  tps
  sql bench_p12 -c "select worlds.drop_world('$name')" >/dev/null
}
p12_main() {  # p12_main on|off ARGS...: main's tps with worlds.record_reads on / off
  local rec=$1; shift
  if ! (export PGOPTIONS="-c worlds.record_reads=$rec"; pgbench_in -n "$@" bench_p12) >"$WORK/pgbench.log" 2>&1; then
    echo "bench: pgbench $* on bench_p12 (record_reads $rec) failed:" >&2; cat "$WORK/pgbench.log" >&2; return 1
  fi
  tps
}
measure_p12() {
  local rep c n s r o
  for rep in $(seq $REPS); do
    for kind in S w; do
      local args=(-c 2 -j 2 -T $T_SELECT -S); [ $kind = w ] && args=(-c 2 -j 2 -T $T_BUSY)
      if [ $((rep % 2)) -eq 1 ]; then
        c=$(p12_world p12c_$kind$rep true "${args[@]}"); n=$(p12_world p12n_$kind$rep false "${args[@]}")
      else
        n=$(p12_world p12n_$kind$rep false "${args[@]}"); c=$(p12_world p12c_$kind$rep true "${args[@]}")
      fi
      pair P12$kind checking "$c" plain "$n"
    done
    local margs=(-c 2 -j 2 -T $T_SELECT -S)
    if [ $((rep % 2)) -eq 1 ]; then r=$(p12_main on "${margs[@]}"); o=$(p12_main off "${margs[@]}")
    else o=$(p12_main off "${margs[@]}"); r=$(p12_main on "${margs[@]}"); fi
    pair P12r recording "$r" off "$o"
  done
}

# ---------------------------------------------------------------------------------------------- P13
# SIMULATE (statements/simulate.rs): SIM_WORLDS worlds of the spec's pricing example (a SIM_ROWS-row table,
# each script updating 1% of it, the score a sum over the table), KEEP 10, in its background workers,
# against one client session running the same fork, run, score and drop loop itself; and the time per
# world of SIM_MANY worlds (KEEP 10, a tiny script) against that of SIM_FEW.
setup_p13() {
  fresh_db bench_p13
  sql bench_p13 -c "create table prices (sku int primary key, p numeric not null, sold int not null)" \
    -c "insert into prices select g, 10, g % 7 + 1 from generate_series(1, $SIM_ROWS) g" \
    -c "vacuum analyze" >/dev/null
  track bench_p13
  fresh_db bench_p13f
  sql bench_p13f -c "create table tiny (id int primary key, v int not null)" -c "insert into tiny select g, 0 from generate_series(1, 100) g" >/dev/null
  track bench_p13f
  local i
  {
    echo "set client_min_messages = warning;"
    for i in $(seq 0 $((SIM_WORLDS - 1))); do
      echo "select worlds.create_world('cl_$i');"
      echo "set worlds.world = cl_$i;"
      echo "update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $i % 100;"
      echo "select sum(p * sold) from prices;"
      echo "set worlds.world = main;"
      echo "select worlds.drop_world('cl_$i');"
    done
  } >"$WORK/p13_client.sql"
}
p13_sim() {  # p13_sim PREFIX N SCRIPT SCORE: SIMULATE's milliseconds (its kept worlds dropped after; P13_DB)
  local ms db=${P13_DB:-bench_p13}
  ms=$(timed $db "select count(*) from worlds.sql(\$q\$simulate $2 worlds as $1 run \$\$$3\$\$ score \$\$$4\$\$ keep 10\$q\$)" | cut -d' ' -f1)
  sql $db -c "select count(*) from (select worlds.drop_world(name) from worlds.show_worlds() where name like '${1}\\_%') d" >/dev/null
  echo "$ms"
}
p13_client() {  # the client's loop: its milliseconds
  local t0 t1
  t0=$(date +%s%N)
  sql bench_p13 -f "$WORK/p13_client.sql" >/dev/null
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
# quiesce DB: a checkpoint, then until no autovacuum worker runs (at most 60 s): the maintenance of the
# runs before (the pricing database's 100k-row table, the other side's worlds) lands on neither side
quiesce() {
  sql "$1" -c "checkpoint" >/dev/null
  local i
  for i in $(seq 1 120); do
    [ "$(sql "$1" -Atc "select count(*) from pg_stat_activity where backend_type = 'autovacuum worker'")" = 0 ] && return
    sleep 0.5
  done
}
measure_p13() {
  local rep s c few many
  local script='update prices set p = p * (0.9 + random() * 0.2) where sku % 100 = $1 % 100' score='select sum(p * sold) from prices'
  for rep in $(seq $REPS); do
    if [ $((rep % 2)) -eq 1 ]; then s=$(p13_sim sim$rep $SIM_WORLDS "$script" "$score"); c=$(p13_client)
    else c=$(p13_client); s=$(p13_sim sim$rep $SIM_WORLDS "$script" "$score"); fi
    pair P13 client "$c" simulate "$s"
    # (in a database of its own, both vacuumed first: the pricing runs' dead rows, and autovacuum cleaning
    # them up on the other core, don't weigh on either side; sides alternating)
    sql bench_p13 -c "vacuum" >/dev/null; sql bench_p13f -c "vacuum analyze" >/dev/null
    if [ $((rep % 2)) -eq 1 ]; then
      quiesce bench_p13f; few=$(P13_DB=bench_p13f p13_sim few$rep $SIM_FEW 'update tiny set v = v + 1 where id = $1 % 100 + 1' 'select sum(v) from tiny')
      quiesce bench_p13f; many=$(P13_DB=bench_p13f p13_sim many$rep $SIM_MANY 'update tiny set v = v + 1 where id = $1 % 100 + 1' 'select sum(v) from tiny')
    else
      quiesce bench_p13f; many=$(P13_DB=bench_p13f p13_sim many$rep $SIM_MANY 'update tiny set v = v + 1 where id = $1 % 100 + 1' 'select sum(v) from tiny')
      quiesce bench_p13f; few=$(P13_DB=bench_p13f p13_sim few$rep $SIM_FEW 'update tiny set v = v + 1 where id = $1 % 100 + 1' 'select sum(v) from tiny')
    fi
    echo "-- P13f rep $rep: many $many ms ($SIM_MANY worlds), few $few ms ($SIM_FEW worlds)" >&2
    pair P13f many "$(div "$many" $SIM_MANY)" few "$(div "$few" $SIM_FEW)"
  done
}

# ---------------------------------------------------------------------------------------------- P15
# sysbench's OLTP suite (the one Dolt publishes its multiples with), 4 tables of SB_ROWS rows, 1 thread,
# T_SB seconds per test, mean latency (1 / transactions per second), three sides in one cluster: a database without pg_worlds
# (stock), a database with pg_worlds in main, the same database in a world forked just before the run.
# The sides' order rotates per test and repetition. Per repetition also the geomean of each ratio.
SB_TESTS="oltp_point_select oltp_read_only select_random_points select_random_ranges oltp_read_write oltp_write_only oltp_update_index oltp_update_non_index oltp_insert oltp_delete"
sysbench_in() {  # sysbench_in DB TEST COMMAND [args]
  local dir; dir=$(cluster_dir "$CLUSTER")
  sysbench "$2" --db-driver=pgsql --pgsql-host="$dir/sock" --pgsql-port="$(cat "$dir/port")" --pgsql-user=postgres \
    --pgsql-db="$1" --tables=4 --table-size=$SB_ROWS --threads=1 "${@:3}"
}
setup_p15() {
  command -v sysbench >/dev/null || { echo "bench: sysbench is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
  local db
  for db in bench_sb_stock bench_sb; do
    fresh_db $db
    sysbench_in $db oltp_common prepare >"$WORK/sb_prepare.log" 2>&1 || { cat "$WORK/sb_prepare.log" >&2; exit 1; }
    sql $db -c "vacuum analyze"
  done
  track bench_sb
}
sb_run() {  # sb_run WORLD DB TEST: the average latency (ms) of one run ("main" = no world option)
  local opts=
  [ "$1" = main ] || opts="-c worlds.world=$1"
  (export PGOPTIONS="$opts"; sysbench_in "$2" "$3" run --time=$T_SB --report-interval=0) >"$WORK/sb.log" 2>&1 \
    || { echo "bench: sysbench $3 on $2 (world $1) failed:" >&2; cat "$WORK/sb.log" >&2; return 1; }
  # (the mean latency from the transaction rate: sysbench prints its own latencies to 0.01 ms)
  sed -n 's/^ *transactions: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' "$WORK/sb.log" | awk '{ printf "%.6f\n", 1000 / $1 }'

}
measure_p15() {
  local rep t n=0 side st ma wo
  for rep in $(seq $REPS); do
    local lw=0 lm=0 k=0
    for t in $SB_TESTS; do
      n=$((n + 1))
      for side in $(python3 -c "s=['stock','main','world']; r=$n % 3; print(' '.join(s[r:] + s[:r]))"); do
        case $side in
          stock) st=$(sb_run main bench_sb_stock $t) ;;
          main) ma=$(sb_run main bench_sb $t) ;;
          world) sql bench_sb -c "select worlds.create_world('p15_$n')" >/dev/null
                 wo=$(sb_run p15_$n bench_sb $t)
                 sql bench_sb -c "select worlds.drop_world('p15_$n')" >/dev/null ;;
        esac
      done
      sample "P15_$t" world "$wo"; sample "P15_$t" main "$ma"; sample "P15_$t" stock "$st"
      sample "P15_$t" x "$(div "$wo" "$st")"
      lw=$(awk -v a=$lw -v b="$(div "$wo" "$st")" 'BEGIN { print a + log(b) }')
      lm=$(awk -v a=$lm -v b="$(div "$ma" "$st")" 'BEGIN { print a + log(b) }')
      k=$((k + 1))
    done
    sample P15gw x "$(awk -v a=$lw -v k=$k 'BEGIN { printf "%.6f", exp(a / k) }')"
    sample P15gm x "$(awk -v a=$lm -v k=$k 'BEGIN { printf "%.6f", exp(a / k) }')"
  done
}

# ---------------------------------------------------------------------------------------------- P16
# Many worlds: two databases with the same pgbench data (scale SCALE), tracked. bench_many has
# MANY_WORLDS live worlds, each having changed MANY_ROWS rows of pgbench_accounts (every world its own
# rows, the same table); bench_one has one. Sides alternate:
# - reads (select-only, 1 client, T_SELECT s) in a world of bench_many / in bench_one's one world;
# - main's TPC-B (2 clients, T_WRITE s) beside those worlds / beside one;
# - MERGE of a world that changed MANY_ROWS rows, among them / alone (each merged world forked anew).
# the MANY_WORLDS worlds of bench_many, each changing its MANY_ROWS rows of pgbench_accounts
p16_worlds_sql() {
  local i
  echo "set client_min_messages = warning;"
  for i in $(seq 1 $MANY_WORLDS); do
    echo "select worlds.create_world('m$i');"
    echo "set worlds.world = m$i;"
    echo "update pgbench_accounts set abalance = abalance + 1 where aid > $(( (i * MANY_ROWS) % (SCALE * 100000 - MANY_ROWS) )) and aid <= $(( (i * MANY_ROWS) % (SCALE * 100000 - MANY_ROWS) + MANY_ROWS ));"
    echo "reset worlds.world;"
  done
}
setup_p16() {
  local db i
  for db in bench_many bench_one; do
    fresh_db $db
    pgbench_in -i -q -s $SCALE $db >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; exit 1; }
    track $db
    # (worlds.max_worlds, 1,000 by default, counts the merged world too)
    sql postgres -c "alter database $db set worlds.max_worlds = 0"
  done
  p16_worlds_sql >"$WORK/p16_many.sql"
  sql bench_many -f "$WORK/p16_many.sql" >/dev/null
  sql bench_one -c "select worlds.create_world('m1')" >/dev/null
  (export PGOPTIONS="-c worlds.world=m1"; sql bench_one -c "update pgbench_accounts set abalance = abalance + 1 where aid > $MANY_ROWS and aid <= $((2 * MANY_ROWS))") >/dev/null
  for db in bench_many bench_one; do sql $db -c "vacuum analyze"; done
  [ "$(sql bench_many -c "select count(*) from worlds.show_worlds() where name like 'm%'")" -ge $MANY_WORLDS ] \
    || { echo "bench: bench_many has fewer than $MANY_WORLDS worlds" >&2; exit 1; }
}
p16_merge() {  # p16_merge DB N: ms of MERGE of a world forked now that changed MANY_ROWS rows
  sql $1 -c "select worlds.create_world('mg$2')" >/dev/null
  (export PGOPTIONS="-c worlds.world=mg$2"; sql $1 -c "update pgbench_accounts set abalance = abalance - 1 where aid > $((SCALE * 100000 - MANY_ROWS))") >/dev/null
  timed $1 "select count(*) from worlds.sql('merge world mg$2')" | cut -d' ' -f1
}
measure_p16() {
  local rep a b
  for rep in $(seq $REPS); do
    if [ $((rep % 2)) -eq 1 ]; then
      bench m1 bench_many -S -T $T_SELECT; a=$(tps); bench m1 bench_one -S -T $T_SELECT; b=$(tps)
    else
      bench m1 bench_one -S -T $T_SELECT; b=$(tps); bench m1 bench_many -S -T $T_SELECT; a=$(tps)
    fi
    pair P16r one "$b" many "$a"
    sql postgres -c checkpoint >/dev/null
    if [ $((rep % 2)) -eq 1 ]; then
      bench main bench_many -c 2 -j 2 -T $T_WRITE; a=$(tps); sql postgres -c checkpoint >/dev/null; bench main bench_one -c 2 -j 2 -T $T_WRITE; b=$(tps)
    else
      bench main bench_one -c 2 -j 2 -T $T_WRITE; b=$(tps); sql postgres -c checkpoint >/dev/null; bench main bench_many -c 2 -j 2 -T $T_WRITE; a=$(tps)
    fi
    pair P16w many "$a" one "$b"
    if [ $((rep % 2)) -eq 1 ]; then a=$(p16_merge bench_many $rep); b=$(p16_merge bench_one $rep)
    else b=$(p16_merge bench_one $rep); a=$(p16_merge bench_many $rep); fi
    pair P16m many "$a" one "$b"
  done
}

# ---------------------------------------------------------------------------------------------- P3 fork
# CREATE WORLD in a database of BIG_ROWS rows vs one of FORK_SMALL rows: per repetition the median of 9
# CREATE WORLDs in one session (each dropped again, untimed).
setup_forks() {
  fresh_db bench_small; load_items bench_small $FORK_SMALL; track bench_small
  fresh_db bench_big; load_items bench_big $BIG_ROWS; track bench_big
  fresh_db bench_mid; load_items bench_mid $CHANGES; track bench_mid
  local db; for db in bench_small bench_big bench_mid; do sql $db -c "vacuum analyze"; done
}

fork_ms() {  # fork_ms DB
  local args=() i
  for i in $(seq 9); do
    args+=(-c '\timing on' -c "select worlds.create_world('bench_fork')" -c '\timing off' -c "select worlds.drop_world('bench_fork')")
  done
  sql "$1" "${args[@]}" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | median
}

measure_p3() {
  local rep s b
  for rep in $(seq $REPS); do
    s=$(fork_ms bench_small); b=$(fork_ms bench_big)
    pair P3 big "$b" small "$s"; sample P3abs x "$b"
  done
}

# ---------------------------------------------------------------------------------------------- P4, P5 merge
# A world that updated CHANGES rows of items, merged into main: items of BIG_ROWS rows (every k-th row) vs
# items of CHANGES rows (every row). P5: the same update run directly in main on the big table.
world_with_changes() {  # world_with_changes DB WORLD STEP: WORLD updates every STEP-th row of items
  sql "$1" -c "select worlds.create_world('$2')" -c "set worlds.world = '$2'" \
    -c "update items set price = price + 1 where id % $3 = 0" >/dev/null
}

merge_ms() {  # merge_ms DB WORLD: the merge's time; checks it merged CHANGES rows
  local r; r=$(timed "$1" "select worlds.merge('$2')")
  [ "${r#* }" = "MERGE $CHANGES" ] || { echo "bench: merge of $2 in $1 returned '${r#* }', want MERGE $CHANGES" >&2; exit 1; }
  echo "${r%% *}"
}

measure_p4_p5() {
  local rep step=$((BIG_ROWS / CHANGES)) s b d
  for rep in $(seq $REPS); do
    world_with_changes bench_mid "m$rep" 1; world_with_changes bench_big "m$rep" $step
    s=$(merge_ms bench_mid "m$rep"); b=$(merge_ms bench_big "m$rep")
    d=$(timed bench_big "update items set price = price + 1 where id % $step = 0"); d=${d%% *}
    pair P4 big "$b" small "$s"; sample P4rate x "$(div $((CHANGES * 1000)) "$b")"
    pair P5 merge "$b" dml "$d"
    # P5 planned: main changed the same rows of items since the fork (another column: BY COLUMNS merges
    # both, so the merge can't go fast-forward and plans each row against main's), against the same
    # UPDATE as DML
    world_with_changes bench_big "p$rep" $step
    sql bench_big -c "update items set name = name || '.' where id % $step = 0" >/dev/null
    b=$(timed bench_big "select j->>'tag' from worlds.sql('merge world p$rep by columns') j")
    [ "${b#* }" = "MERGE $CHANGES" ] || { echo "bench: merge of p$rep by columns returned '${b#* }', want MERGE $CHANGES" >&2; exit 1; }
    b=${b%% *}
    d=$(timed bench_big "update items set price = price + 1 where id % $step = 0"); d=${d%% *}
    pair P5p merge "$b" dml "$d"
  done
}

# ---------------------------------------------------------------------------------------------- P6 AS OF
# count(*) of items as of a moment before 1% of it changed in main, vs a plain count(*).
measure_p6() {
  if [ "$(sql bench_reads -c "select count(*) from pg_proc where proname = 'as_of' and pronamespace = 'worlds'::regnamespace")" = 0 ]; then
    note P6 "not yet: time travel (issue 6) not built"; return
  fi
  local ts rep a p f u
  ts=$(sql bench_reads -c "select clock_timestamp()")
  sql bench_reads -c "update items set price = price + 1 where id % 100 = 1"
  echo "select count(*) from items;" >"$WORK/plain.sql"
  # the spec's form (a statement reading the table AS OF), and the function
  echo "select * from worlds.sql('select count(*) from items as of ''$ts''');" >"$WORK/asof.sql"
  # an expression, not a time written out: rebuilt from history by every statement
  echo "select * from worlds.sql('select count(*) from items as of ''$ts''::timestamptz');" >"$WORK/asof_rebuilt.sql"
  echo "select count(*) from worlds.as_of(null::items, '$ts'::timestamptz);" >"$WORK/asof_fn.sql"
  for rep in $(seq $REPS); do
    bench main bench_reads -f "$WORK/plain.sql" -T $T_READ; p=$(latency)
    bench main bench_reads -f "$WORK/asof.sql" -T $T_READ; a=$(latency)
    bench main bench_reads -f "$WORK/asof_fn.sql" -T $T_READ; f=$(latency)
    bench main bench_reads -f "$WORK/asof_rebuilt.sql" -T $T_READ; u=$(latency)
    pair P6 asof "$a" plain "$p"
    pair P6u asof "$u" plain "$p"
    pair P6fn asof "$f" plain "$p"
  done
}

# ---------------------------------------------------------------------------------------------- P16, counted
# P16's main-beside-many-worlds comparison swings with the machine more than the 3% its goal allows, so
# it is counted too (as P1's counted figures): P16's two databases (MANY_WORLDS live worlds each having
# changed MANY_ROWS rows of pgbench_accounts, or one) in a stopped cluster of their own; one single-user
# backend runs P1's fixed TPC-B script in main, and a fixed select-only script in world m1, on a fresh
# copy of each. The ratios are one / many (instructions), so that ≥ goals read as P16w's.
INSTR_MANY=instr_many
setup_instr_many() {
  command -v valgrind >/dev/null || { echo "bench: valgrind is missing (scripts/setup.sh installs it)" >&2; return 1; }
  stop_cluster $INSTR_MANY; rm -rf "$(cluster_dir $INSTR_MANY)"
  start_cluster $INSTR_MANY yes
  local db
  for db in bench_many bench_one; do
    CLUSTER=$INSTR_MANY sql postgres -c "create database $db"
    CLUSTER=$INSTR_MANY pgbench_in -i -q -s $SCALE $db >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; return 1; }
    CLUSTER=$INSTR_MANY track $db
    CLUSTER=$INSTR_MANY sql postgres -c "alter database $db set worlds.max_worlds = 0"
  done
  p16_worlds_sql >"$WORK/p16c_many.sql"
  CLUSTER=$INSTR_MANY sql bench_many -f "$WORK/p16c_many.sql" >/dev/null
  CLUSTER=$INSTR_MANY sql bench_one -c "select worlds.create_world('m1')" >/dev/null
  (export PGOPTIONS="-c worlds.world=m1"; CLUSTER=$INSTR_MANY sql bench_one -c "update pgbench_accounts set abalance = abalance + 1 where aid > $MANY_ROWS and aid <= $((2 * MANY_ROWS))") >/dev/null
  for db in bench_many bench_one; do CLUSTER=$INSTR_MANY sql $db -c "vacuum analyze"; done
  CLUSTER=$INSTR_MANY sql postgres -c "checkpoint"
  stop_cluster $INSTR_MANY
  write_instr_scripts
}
measure_instr_many() {
  local preload="-c shared_preload_libraries=pg_worlds" m o
  m=$(COUNT_DB=bench_many per_tx $INSTR_MANY tpcb $INSTR_TX $preload); o=$(COUNT_DB=bench_one per_tx $INSTR_MANY tpcb $INSTR_TX $preload)
  pair P16wi one "$o" many "$m"
  m=$(COUNT_DB=bench_many per_tx $INSTR_MANY wsel $((2 * INSTR_TX)) $preload); o=$(COUNT_DB=bench_one per_tx $INSTR_MANY wsel $((2 * INSTR_TX)) $preload)
  pair P16ri one "$o" many "$m"
  rm -rf "$(cluster_dir $INSTR_MANY)"
}

# ---------------------------------------------------------------------------------------------- P14 proxy
# pgbench through worlds-proxy vs through pgbouncer (Debian's package, session mode) vs straight to the
# server, same server, same database, same run; pgbench connects over TCP to 127.0.0.1 on every side, and
# the proxy and pgbouncer reach the server over its Unix socket. Select-only (-S) and TPC-B at 2 clients,
# select-only with the extended protocol (-M prepared), select-only at 8 clients (more than cores: where
# one thread serving several connections gains), and select-only at 1 client for the latency each
# adds per round trip (one -S transaction is one statement, one round trip): 1/tps(side) - 1/tps(direct).
# The three sides run in an order that rotates with each repetition. On a machine whose cores the client,
# the backends and the proxy share, tps follows the CPU each spends per transaction: P14cS / P14cW give the
# proxy's process's CPU per transaction (/proc utime + stime over a run) against pgbouncer's, a figure the
# machine's other work moves less than tps. bench_p14 is a plain pgbench database
# (no CREATE EXTENSION: the capture triggers would slow every side alike and hide what the proxy costs);
# its main world is what the proxy serves under the database's own name.
# WORLDS_PROXY_BIN: a worlds-proxy binary to use instead of building the workspace's (cargo build -p
# worlds-proxy, --release in full mode).
P14_DIR= P14_PROXY= P14_PGB=
setup_p14() {
  local bin=${WORLDS_PROXY_BIN:-}
  if [ -z "$bin" ]; then
    local profile=release flag=--release
    [ $MODE = smoke ] && { profile=debug flag=; }
    (cd "$ROOT" && cargo build -q $flag -p worlds-proxy) >"$WORK/proxy-build.log" 2>&1 \
      || { tail -20 "$WORK/proxy-build.log" >&2; echo "bench: cargo build -p worlds-proxy failed" >&2; exit 1; }
    bin=$ROOT/target/$profile/worlds-proxy
  fi
  if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    echo "bench: installing pgbouncer (apt)" >&2
    local sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  fi
  fresh_db bench_p14
  pgbench_in -i -q -s $SCALE bench_p14 >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; exit 1; }
  sql bench_p14 -c "vacuum analyze" >/dev/null
  local cdir pgport; cdir=$(cluster_dir "$CLUSTER"); pgport=$(cat "$cdir/port")
  # pgbouncer refuses to run as root: its files in a directory of the cluster's owner
  P14_DIR=$cdir/p14; rm -rf "$P14_DIR"; mkdir -p "$P14_DIR"
  P14_PGB=$(free_port $((pgport + 20))); P14_PROXY=$(free_port $((P14_PGB + 1)))
  # the server trusts local connections (initdb -A trust), so pgbouncer does too; its auth_file lists the
  # role. Session mode: one server connection per client for the client's whole session, as the proxy.
  echo '"postgres" ""' >"$P14_DIR/userlist.txt"
  cat >"$P14_DIR/pgbouncer.ini" <<INI
[databases]
bench_p14 = host=$cdir/sock port=$pgport dbname=bench_p14
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $P14_PGB
unix_socket_dir =
auth_type = trust
auth_file = $P14_DIR/userlist.txt
pool_mode = session
max_client_conn = 100
default_pool_size = 10
logfile = $P14_DIR/pgbouncer.log
pidfile = $P14_DIR/pgbouncer.pid
INI
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$P14_DIR"
  as_pg /usr/sbin/pgbouncer -d -q "$P14_DIR/pgbouncer.ini" || { cat "$P14_DIR/pgbouncer.log" >&2; exit 1; }
  "$bin" --listen "127.0.0.1:$P14_PROXY" --upstream "host=$cdir/sock port=$pgport dbname=bench_p14" >"$P14_DIR/proxy.log" 2>&1 &
  echo $! >"$P14_DIR/proxy.pid"
  local i
  for i in $(seq 1 100); do
    { (exec 3<>/dev/tcp/127.0.0.1/$P14_PROXY) && (exec 3<>/dev/tcp/127.0.0.1/$P14_PGB) && [ -s "$P14_DIR/pgbouncer.pid" ]; } 2>/dev/null && break
    sleep 0.1
  done
  p14_bench proxy -S -t 10 && p14_bench pgbouncer -S -t 10 \
    || { tail -5 "$P14_DIR/proxy.log" "$P14_DIR/pgbouncer.log" >&2; exit 1; }
  echo "-- P14: worlds-proxy $bin on $P14_PROXY, pgbouncer $(/usr/sbin/pgbouncer --version | head -1) on $P14_PGB, server on $pgport" >&2
}
stop_p14() {  # stops what setup_p14 started, by its pid (also called by cleanup)
  local dir=${P14_DIR:-$(cluster_dir "$CLUSTER")/p14}
  [ -f "$dir/proxy.pid" ] && { kill "$(cat "$dir/proxy.pid")" 2>/dev/null || true; rm -f "$dir/proxy.pid"; }
  [ -f "$dir/pgbouncer.pid" ] && { kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true; }
  return 0
}
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }  # a process's user + system CPU, in clock ticks
p14_bench() {  # p14_bench proxy|pgbouncer|direct [pgbench args]: one run over TCP, output kept for tps; for the
               # proxy and pgbouncer, P14_CPU: the CPU their process spent per transaction (µs)
  local side=$1 port pid= t0 t1 n; shift
  case $side in
    proxy) port=$P14_PROXY pid=$(cat "$P14_DIR/proxy.pid") ;;
    pgbouncer) port=$P14_PGB pid=$(cat "$P14_DIR/pgbouncer.pid") ;;
    direct) port=$(cat "$(cluster_dir "$CLUSTER")/port") ;;
  esac
  [ -z "$pid" ] || t0=$(proc_ticks "$pid")
  if ! $PGBIN/pgbench -h 127.0.0.1 -p "$port" -U postgres -n "$@" bench_p14 >"$WORK/pgbench.log" 2>&1; then
    echo "bench: pgbench $* through $side (port $port) failed:" >&2; cat "$WORK/pgbench.log" >&2; return 1
  fi
  P14_CPU=
  if [ -n "$pid" ]; then
    t1=$(proc_ticks "$pid"); n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench.log")
    P14_CPU=$(awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$n" 'BEGIN { printf "%.3f", t / hz * 1000000 / n }')
  fi
}
p14_sides() {  # p14_sides REP [pgbench args]: the three sides in an order rotating with REP; sets P14_TPS_<side>
  local rep=$1 side order; shift
  case $((rep % 3)) in 1) order="proxy pgbouncer direct" ;; 2) order="pgbouncer direct proxy" ;; *) order="direct proxy pgbouncer" ;; esac
  for side in $order; do
    [[ " $* " == *" -S "* ]] || sql postgres -c checkpoint >/dev/null
    p14_bench $side "$@"
    printf -v "P14_TPS_$side" '%s' "$(tps)"
    printf -v "P14_CPU_$side" '%s' "$P14_CPU"
  done
}
latency_added() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (1 / a - 1 / b) * 1000000 }'; }  # µs from two tps
measure_p14() {
  local rep
  for rep in $(seq $REPS); do
    p14_sides $rep -S -c 2 -j 2 -T $T_SELECT
    pair P14S proxy "$P14_TPS_proxy" pgbouncer "$P14_TPS_pgbouncer"; pair P14Sd proxy "$P14_TPS_proxy" direct "$P14_TPS_direct"
    pair P14Sb pgbouncer "$P14_TPS_pgbouncer" direct "$P14_TPS_direct"
    pair P14cS proxy "$P14_CPU_proxy" pgbouncer "$P14_CPU_pgbouncer"
    p14_sides $rep -c 2 -j 2 -T $T_WRITE
    pair P14W proxy "$P14_TPS_proxy" pgbouncer "$P14_TPS_pgbouncer"; pair P14Wd proxy "$P14_TPS_proxy" direct "$P14_TPS_direct"
    pair P14Wb pgbouncer "$P14_TPS_pgbouncer" direct "$P14_TPS_direct"
    pair P14cW proxy "$P14_CPU_proxy" pgbouncer "$P14_CPU_pgbouncer"
    p14_sides $rep -S -M prepared -c 2 -j 2 -T $T_SELECT
    pair P14P proxy "$P14_TPS_proxy" pgbouncer "$P14_TPS_pgbouncer"; pair P14Pd proxy "$P14_TPS_proxy" direct "$P14_TPS_direct"
    p14_sides $rep -S -c 8 -j 2 -T $T_SELECT
    pair P14M proxy "$P14_TPS_proxy" pgbouncer "$P14_TPS_pgbouncer"; pair P14Md proxy "$P14_TPS_proxy" direct "$P14_TPS_direct"
    p14_sides $rep -S -c 1 -T $T_SELECT
    sample P14lat proxy "$P14_TPS_proxy"; sample P14lat direct "$P14_TPS_direct"
    sample P14lat x "$(latency_added "$P14_TPS_proxy" "$P14_TPS_direct")"
    sample P14latb pgbouncer "$P14_TPS_pgbouncer"; sample P14latb direct "$P14_TPS_direct"
    sample P14latb x "$(latency_added "$P14_TPS_pgbouncer" "$P14_TPS_direct")"
  done
  stop_p14
}

# ---------------------------------------------------------------------------------------------- report
commit_id() {  # the checked-out commit, read from .git (no git binary needed)
  local head ref
  head=$(cat "$ROOT/.git/HEAD" 2>/dev/null) || { echo unknown; return; }
  if [[ $head == ref:* ]]; then
    ref=${head#ref: }
    head=$(cat "$ROOT/.git/$ref" 2>/dev/null || awk -v r="$ref" '$2 == r { print $1 }' "$ROOT/.git/packed-refs" 2>/dev/null || true)
  fi
  echo "${head:0:7}"
}

write_meta() {
  local build=${BENCH_BUILD:-not recorded (set BENCH_BUILD=debug or release)}
  {
    printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    printf 'commit\t%s\n' "$(commit_id)"
    printf 'build\t%s\n' "$build"
    printf 'machine\t%s cores (%s), %s GB RAM, Linux %s\n' "$(nproc)" \
      "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)" \
      "$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)" "$(uname -r)"
    printf 'postgres\t%s; fsync=off, max_wal_size=8GB (own cluster), other settings default\n' "$($PGBIN/postgres --version)"
    printf 'sizes\tP1 pgbench scale %s, 2 clients, writes %ss and select-only %ss per run (select-only in one cluster: twice as many pairs, half as long); P2 items and orders %s rows each, 1%% of both changed in the world, 1 client, %ss per run (simple protocol); P3 %s vs %s rows; P4/P5 %s changed rows into %s vs %s rows; P14 pgbench scale %s over TCP, %ss per run (2 clients, and 1 for the latency)\n' \
      $SCALE $T_WRITE $T_SELECT $READ_ROWS $T_READ $BIG_ROWS $FORK_SMALL $CHANGES $BIG_ROWS $CHANGES $SCALE "$T_SELECT/$T_WRITE"
    printf 'repetitions\t%s\n' $REPS
    printf 'load\tload average %s at the start, %s at the end (1 minute; other work on the machine adds noise)\n' "$LOAD_START" "$(cut -d' ' -f1 /proc/loadavg)"
    printf 'duration\t%s s for the whole run, loading included\n' $((SECONDS - START))
    [ -z "${LIBRARY_NOTE:-}" ] || printf 'warning\t%s\n' "$LIBRARY_NOTE"
    [ "${BENCH_BUILD:-}" != debug ] || printf 'note\t%s\n' "**This run used a debug build of pg_worlds** (\`cargo pgrx install\` without \`--release\`): the extension's native code (capture trigger, overlay visibility functions, merge) runs unoptimised, so every figure that goes through it is pessimistic. Re-run with a release build before treating a missed goal as final."
  } >"$WORK/meta.tsv"
}

# ---------------------------------------------------------------------------------------------- main
trap cleanup EXIT
if [ $OWN_CLUSTER = yes ]; then
  stop_cluster "$CLUSTER"; rm -rf "$(cluster_dir "$CLUSTER")"; start_cluster "$CLUSTER" yes
  # fewer forced checkpoints in the middle of a measurement (loading 1M-row tables fills 1 GB of WAL fast)
  sql postgres -c "alter system set max_wal_size = '8GB'" -c "select pg_reload_conf()" >/dev/null
fi
grep -q pg_worlds <<<"$(sql postgres -c "show shared_preload_libraries")" \
  || { echo "bench: cluster $CLUSTER does not preload pg_worlds" >&2; exit 1; }
echo "bench: $MODE run on cluster $CLUSTER, $REPS repetition(s)"

want() { [[ ,$ONLY, == *,$1,* ]]; }
if want p1; then group "P1w P1s" setup_tpcb measure_p1; P1_OK=$GROUP_OK; fi
if want p1c; then group "P1wi P1si" setup_instr measure_instr; fi
if want p2; then group "P2point P2range P2join P2count" setup_reads measure_p2 explain_p2; fi
if want p2c; then group "P2pointi P2rangei P2joini P2counti" setup_instr_reads measure_instr_reads; fi
if want p3; then group "P3 P3abs P4 P4rate P5 P5p" setup_forks measure_p3 measure_p4_p5; fi
if want p6; then group "P6 P6u P6fn" setup_reads_once measure_p6; fi
if want p7; then group "P7" setup_old_world measure_p7; fi
if want p8; then group "P8c1 P8c2 P8c4" setup_p8 measure_p8; fi
if want p9; then group "P9" setup_tpcb measure_p9; fi
if want p10; then group "P10" setup_ddl measure_p10; fi
if want p11; then group "P11" setup_p11 measure_p11; fi
if want p12; then group "P12S P12w P12r" setup_p12 measure_p12; fi
if want p13; then group "P13 P13f" setup_p13 measure_p13; fi
if want p14; then
  P14_FIGS="P14S P14Sd P14Sb P14W P14Wd P14Wb P14P P14Pd P14M P14Md P14lat P14latb P14cS P14cW"
  if [ -n "${WORLDS_PROXY_BIN:-}" ] || [ -f "$ROOT/proxy/Cargo.toml" ]; then group "$P14_FIGS" setup_p14 measure_p14
  else for f in $P14_FIGS; do note $f "not yet: no worlds-proxy in this tree (proxy/; or set WORLDS_PROXY_BIN)"; done; fi
fi
if want p15; then group "P15gw P15gm $(for t in $SB_TESTS; do printf 'P15_%s ' $t; done)" setup_p15 measure_p15; fi
if want p16; then group "P16r P16w P16m" setup_p16 measure_p16; fi
if want p16c; then group "P16wi P16ri" setup_instr_many measure_instr_many; fi
if want p1 && [ $OWN_CLUSTER = yes ] && [ "$P1_OK" = yes ]; then  # last: it restarts the cluster
  group "P1wn P1sn" measure_p1_nopreload
fi
step "done in $((SECONDS - START)) s"
if [ -n "${LIBRARY_CHANGED_IN:-}" ]; then
  [ $MODE = smoke ] || FAILED=1
  LIBRARY_NOTE="pg_worlds.so was reinstalled during this run, before the end of: $LIBRARY_CHANGED_IN. Figures from there on may mix two builds, and errors like 'could not access file \"pg_worlds\"' come from the reinstall. Run again."
  echo "bench: WARNING: $LIBRARY_NOTE" >&2
fi
echo
if [ $MODE = full ] && [ "$ONLY" = "$ALL_FIGURES" ]; then
  # (only a run of every figure rewrites the page; a partial run prints its table)
  write_meta
  python3 "$ROOT/benches/report.py" "$SAMPLES" --markdown "$ROOT/docs/benchmarks.md" --meta "$WORK/meta.tsv" --explain "$EXPLAIN"
  echo; echo "bench: wrote docs/benchmarks.md"
else
  python3 "$ROOT/benches/report.py" "$SAMPLES"
  [ $FAILED -ne 0 ] || [ $MODE != smoke ] || echo "bench: smoke run ok (goals are not enforced in smoke mode)"
fi
[ $FAILED -eq 0 ] || echo "bench: FAILED: some figures could not be measured (the table says which)" >&2
exit $FAILED
