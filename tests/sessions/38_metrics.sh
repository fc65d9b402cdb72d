#!/usr/bin/env bash
# SHOW METRICS (metrics/): cluster-wide numbers in shared memory. Sessions in two databases forking and
# diffing at once: every operation counted (no recording lost to a race), seen from either database;
# main's own reads and writes record nothing; a pg_monitor login scrapes worlds.metrics as an exporter
# would; a restart begins again at zero (the numbers aren't saved).
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
q() { local db=$1; shift; psql_in $CL -d "$db" -qAt "$@"; }
for DB in s38_a s38_b; do
  psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
  q $DB >/dev/null <<'SQL'
create extension pg_worlds;
create table t (id int primary key, v int);
insert into t select g, g from generate_series(1, 100) g;
SQL
done
psql_in $CL -q -c "set client_min_messages = warning" -c "drop role if exists s38_exporter" -c "create role s38_exporter login in role pg_monitor"
metric() { q s38_a -c "select count from worlds.show_metrics() where metric = '$1'"; }

echo "check: 8 sessions in two databases, 5 forks and 5 diffs each, at once"
q s38_a -c "select worlds.reset_metrics()" >/dev/null
pids=()
for s in $(seq 1 8); do
  DB=$([ $((s % 2)) -eq 0 ] && echo s38_a || echo s38_b)
  ( for i in $(seq 1 5); do
      q $DB -c "select worlds.create_world('w${s}_$i')" -c "select count(*) from worlds.diff('w${s}_$i')" >/dev/null || echo "session $s failed"
    done ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p; done
expect "forks counted, both databases, none lost" "$(metric fork)" "40"
expect "diffs counted" "$(metric diff)" "40"
expect "the same numbers from the other database" "$(q s38_b -c "select count from worlds.show_metrics() where metric = 'fork'")" "40"
expect "fork latencies in order (p50 <= p95 <= p99 <= max <= total, max > 0)" \
  "$(q s38_a -c "select p50_ms <= p95_ms and p95_ms <= p99_ms and p99_ms <= max_ms and max_ms <= total_ms and max_ms > 0 from worlds.show_metrics() where metric = 'fork'")" "t"
expect "SHOW METRICS typed in psql" "$(q s38_b -c "show metrics" | head -1 | cut -d'|' -f1-2)" "fork|40"

echo "check: main's own reads and writes record nothing"
q s38_a -c "select worlds.reset_metrics()" >/dev/null
q s38_a -c "update t set v = v + 1" -c "select sum(v) from t" -c "insert into t values (1000, 0)" -c "delete from t where id = 1000" >/dev/null
for i in $(seq 1 20); do echo "update t set v = v + 1 where id = $i;"; done | q s38_a >/dev/null
expect "every number still zero" "$(q s38_a -c "select sum(count) from worlds.show_metrics()")" "0"

echo "check: a pg_monitor login scrapes worlds.metrics (as postgres_exporter's custom queries do)"
q s38_a -c "select worlds.create_world('scraped')" >/dev/null
scrape=$(psql "$(conninfo $CL s38_a) user=s38_exporter" -XqAt -v ON_ERROR_STOP=1 -c "select metric || '=' || count from worlds.metrics where metric in ('fork', 'conflicts') order by metric")
expect "fork and conflicts" "$(echo $scrape)" "conflicts=0 fork=1"

echo "check: a restart begins again at zero"
before=$(q s38_a -c "select worlds.metrics_since()")
stop_cluster $CL; start_cluster $CL yes
expect "fork after the restart" "$(metric fork)" "0"
expect "counting again from the restart" "$(q s38_a -c "select worlds.metrics_since() > '$before'")" "t"
q s38_a -c "select worlds.create_world('after_restart')" >/dev/null
expect "fork counted after the restart" "$(metric fork)" "1"

psql_in $CL -q -c "set client_min_messages = warning" -c "drop database s38_a" -c "drop database s38_b" -c "drop role s38_exporter"
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: metrics"
