#!/usr/bin/env bash
# worlds-proxy's tests: the spec's examples typed verbatim in psql through the proxy, compared with
# tests/proxy/expected/*.out (times, IDs and tokens masked); tokio-postgres through it (extended
# protocol, binary rows, pipelining, cancel: proxy/examples/driver_check.rs); hostile input (hostile.py).
#   bash tests/proxy/run.sh            (PROXY_TESTS="spec_worlds" runs one file; PROXY_ACCEPT=1 rewrites expected)
# Uses the cluster $PROXY_CLUSTER (default proxy), started if needed, and a port from $PROXY_PORT (default $PORT + 10).
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
set +e
CL=${PROXY_CLUSTER:-proxy}
HERE="$ROOT/tests/proxy"
OUT="$RUN_DIR/proxy-tests"; rm -rf "$OUT"; mkdir -p "$OUT"
start_cluster "$CL" yes || exit 1
SPORT=$(cat "$(cluster_dir "$CL")/port")
(cd "$ROOT" && cargo build -q -p worlds-proxy && cargo build -q -p worlds-proxy --example driver_check) || exit 1
PROXY="$ROOT/target/debug/worlds-proxy"
failures=0
PPORT=$(free_port "${PROXY_PORT:-$((${PORT:-56422} + 10))}")
PID=
start_proxy() { # start_proxy DB
  "$PROXY" --listen "127.0.0.1:$PPORT" --upstream "host=127.0.0.1 port=$SPORT dbname=$1" >>"$OUT/proxy.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$PPORT) 2>/dev/null && return 0; sleep 0.1; done
  echo "worlds-proxy did not start"; cat "$OUT/proxy.log"; return 1
}
stop_proxy() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=; }
trap stop_proxy EXIT
# (agents are login roles, the cluster's: spec_agents' bot goes with its database)
fresh_db() { psql_in "$CL" -q -c "set client_min_messages = warning" -c "drop database if exists $1" -c "drop role if exists bot" -c "create database $1"; }
# what varies from run to run: times, world IDs, agents' tokens, process numbers, durations
mask() {
  sed -E -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(\+[0-9]{2}(:[0-9]{2})?)?/<time>/g' \
    -e 's/[wa][0-9]{6}-[0-9a-f]{10}/<id>/g' -e 's/wt_[A-Za-z0-9_-]+/<token>/g' -e 's/process with PID [0-9]+/process with PID <pid>/g' \
    -e 's/port [0-9]+ failed/port <port> failed/'
}

for f in ${PROXY_TESTS:-$(cd "$HERE" && ls *.sql | sed 's/\.sql$//')}; do
  db="proxy_$f"
  fresh_db "$db"
  start_proxy "$db" || exit 1
  (cd "$HERE" && PGOPTIONS= $PGBIN/psql "host=127.0.0.1 port=$PPORT user=postgres dbname=$db" -X -a -f "$f.sql" 2>&1) | mask >"$OUT/$f.out"
  stop_proxy
  if [ "${PROXY_ACCEPT:-}" = 1 ]; then cp "$OUT/$f.out" "$HERE/expected/$f.out"; fi
  if diff -u "$HERE/expected/$f.out" "$OUT/$f.out" >"$OUT/$f.diff"; then
    echo "ok   psql $f"
  else
    echo "FAIL psql $f"; head -40 "$OUT/$f.diff"; failures=$((failures + 1))
  fi
done

if [ -z "${PROXY_TESTS:-}" ]; then
  db=proxy_driver
  fresh_db "$db"
  psql_in "$CL" -d "$db" -q -c "create extension pg_worlds" -c "create table orders (id int primary key, status text)" -c "insert into orders values (1, 'new'), (2, 'new')"
  start_proxy "$db" || exit 1
  if "$ROOT/target/debug/examples/driver_check" "host=127.0.0.1 port=$PPORT user=postgres dbname=$db" >"$OUT/driver_check.log" 2>&1; then
    echo "ok   driver_check (tokio-postgres)"
  else
    echo "FAIL driver_check"; cat "$OUT/driver_check.log"; failures=$((failures + 1))
  fi
  if python3 "$HERE/hostile.py" "$PPORT" "$PID" "$db" >"$OUT/hostile.log" 2>&1; then
    echo "ok   hostile input ($(tail -1 "$OUT/hostile.log"))"
  else
    echo "FAIL hostile input"; cat "$OUT/hostile.log"; failures=$((failures + 1))
  fi
  stop_proxy
fi
[ $failures -eq 0 ] && echo "proxy: ok" || { echo "proxy: $failures failed"; exit 1; }
