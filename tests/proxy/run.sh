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
  # many clients at once across the proxy's threads: transfers in world w (chosen by the database name)
  # and in main, with a spec statement typed between them; every total kept, in the world, in main and
  # after the merge, and nothing left running
  db=proxy_money
  fresh_db "$db"
  psql_in "$CL" -d "$db" -q -c "create extension pg_worlds" \
    -c "create table acct (id int primary key, bal int not null)" \
    -c "insert into acct select g, 1000 from generate_series(1, 100) g" \
    -c "select worlds.create_world('w')"
  start_proxy "$db" || exit 1
  cat >"$OUT/money_world.sql" <<'SQL'
\set a random(51, 100)
\set b random(51, 100)
\set x random(1, 50)
begin;
update acct set bal = bal - :x where id = :a;
update acct set bal = bal + :x where id = :b;
commit;
show worlds;
SQL
  sed -e 's/random(51, 100)/random(1, 50)/' -e '/show worlds/d' "$OUT/money_world.sql" >"$OUT/money_main.sql"
  PGOPTIONS= $PGBIN/pgbench -h 127.0.0.1 -p "$PPORT" -U postgres -n -c 6 -j 2 -T 6 --max-tries=50 -f "$OUT/money_world.sql" w >"$OUT/money_world.log" 2>&1 &
  wpid=$!
  PGOPTIONS= $PGBIN/pgbench -h 127.0.0.1 -p "$PPORT" -U postgres -n -c 3 -j 1 -T 6 --max-tries=50 -f "$OUT/money_main.sql" "$db" >"$OUT/money_main.log" 2>&1
  mrc=$?; wait $wpid; wrc=$?
  through() { PGOPTIONS= $PGBIN/psql "host=127.0.0.1 port=$PPORT user=postgres dbname=$1" -XAtc "$2" 2>&1; }
  wsum=$(through w "select sum(bal) from acct")
  msum=$(through "$db" "select sum(bal) from acct")
  wtx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/money_world.log")
  mtx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/money_main.log")
  wfail=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$OUT/money_world.log")
  merged=$(through "$db" "merge world w;" | head -1)
  after=$(through "$db" "select sum(bal) from acct")
  threads=$(ls "/proc/$PID/task" 2>/dev/null | wc -l)
  stop_proxy
  if [ $mrc -eq 0 ] && [ $wrc -eq 0 ] && [ "$wsum" = 100000 ] && [ "$msum" = 100000 ] && [ "$after" = 100000 ] \
     && [ "${wtx:-0}" -gt 0 ] && [ "${mtx:-0}" -gt 0 ] && [ "${wfail:-1}" = 0 ] && [[ $merged == *"MERGE"* || $merged == *"merge"* ]]; then
    echo "ok   many clients across $threads threads: $wtx transfers in w, $mtx in main, totals kept (merge: $merged)"
  else
    echo "FAIL many clients: pgbench rc main $mrc world $wrc; world total '$wsum', main '$msum', after merge '$after' ($merged); transfers $wtx / $mtx, failed $wfail"
    tail -5 "$OUT/money_world.log" "$OUT/money_main.log"; failures=$((failures + 1))
  fi
fi
[ $failures -eq 0 ] && echo "proxy: ok" || { echo "proxy: $failures failed"; exit 1; }
