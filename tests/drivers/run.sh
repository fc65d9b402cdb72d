#!/usr/bin/env bash
# Real drivers nobody here wrote, through worlds-proxy (issue 47): psycopg 3 (tests/drivers/test_psycopg.py)
# and node-postgres (tests/drivers/test_node_pg.mjs). Installs them when missing (tests/drivers/deps.sh),
# makes a fresh database drivers_app on the cluster, starts worlds-proxy in front of it on a port of its
# own, runs both, stops the proxy. Exits non-zero if either fails; the last line is
# "drivers: N passed, N failed".
#
#   bash tests/drivers/run.sh
#   DRIVERS_CLUSTER=NAME   the cluster (scripts/lib.sh; default "test", started with the preload if it isn't
#                          running; pg_worlds must be installed: scripts/test.sh installs it first)
#   DRIVERS_VIA=proxy      through worlds-proxy (the default when the workspace has proxy/ or WORLDS_PROXY_BIN
#                          is set); built with `cargo build -p worlds-proxy` unless WORLDS_PROXY_BIN names a binary
#   DRIVERS_VIA=direct     straight to Postgres: the world by options=-c worlds.world=..., the spec's
#                          statements through worlds.sql() (the default when there is no proxy to run)
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
source "$ROOT/tests/drivers/deps.sh"
CL=${DRIVERS_CLUSTER:-test}
DB=drivers_app

VIA=${DRIVERS_VIA:-}
if [ -z "$VIA" ]; then
  if [ -n "${WORLDS_PROXY_BIN:-}" ] || [ -f "$ROOT/proxy/Cargo.toml" ]; then VIA=proxy; else VIA=direct; fi
fi
[ "$VIA" = proxy ] || [ "$VIA" = direct ] || { echo "drivers: DRIVERS_VIA must be proxy or direct" >&2; exit 2; }

drivers_deps

PROXY_PID=
cleanup() {
  local rc=$?
  if [ -n "$PROXY_PID" ]; then kill "$PROXY_PID" 2>/dev/null || true; wait "$PROXY_PID" 2>/dev/null || true; fi
  exit $rc
}
trap cleanup EXIT

start_cluster "$CL" yes
dir=$(cluster_dir "$CL")
PG_PORT=$(cat "$dir/port")
psql_in "$CL" -q -c "set client_min_messages = warning" -c "drop database if exists $DB with (force)" -c "create database $DB"
# orders 1..10, all 'new'; DRIVERS_PAST a moment after they were written, and before main changed order 3
psql_in "$CL" -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table orders (id int primary key, status text not null, amount numeric(10, 2),
                     placed timestamptz default '2026-01-02 03:04:05+00', doc jsonb);
insert into orders (id, status, amount, doc) select g, 'new', g, jsonb_build_object('n', g) from generate_series(1, 10) g;
SQL
sleep 1.1
PAST=$(psql_in "$CL" -d $DB -qAt -c "select to_char(now() at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS')")
sleep 1.1
psql_in "$CL" -d $DB -q -c "update orders set status = 'changed after' where id = 3"

HOST=127.0.0.1 PORT_USED=$PG_PORT
if [ "$VIA" = proxy ]; then
  BIN=${WORLDS_PROXY_BIN:-}
  if [ -z "$BIN" ]; then
    echo "drivers: building worlds-proxy"
    (cd "$ROOT" && cargo build -q -p worlds-proxy) || { echo "drivers: cargo build -p worlds-proxy failed" >&2; exit 1; }
    BIN=$ROOT/target/debug/worlds-proxy
  fi
  PORT_USED=$(free_port $((PG_PORT + 1)))
  "$BIN" --listen "$HOST:$PORT_USED" --upstream "host=$HOST port=$PG_PORT dbname=$DB" >"$RUN_DIR/drivers-proxy.log" 2>&1 &
  PROXY_PID=$!
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/$HOST/$PORT_USED") 2>/dev/null && break; sleep 0.1; done
  kill -0 "$PROXY_PID" 2>/dev/null || { echo "drivers: worlds-proxy did not start:" >&2; cat "$RUN_DIR/drivers-proxy.log" >&2; exit 1; }
  echo "drivers: through worlds-proxy $BIN on $HOST:$PORT_USED -> Postgres on port $PG_PORT, database $DB"
else
  echo "drivers: straight to Postgres on $HOST:$PG_PORT, database $DB (DRIVERS_VIA=direct: no proxy; the spec's statements through worlds.sql)"
fi

export DRIVERS_VIA=$VIA DRIVERS_HOST=$HOST DRIVERS_PORT=$PORT_USED DRIVERS_DB=$DB DRIVERS_USER=postgres DRIVERS_PAST=$PAST
set +e
"$VENV/bin/python" "$ROOT/tests/drivers/test_psycopg.py" 2>&1 | tee "$RUN_DIR/drivers-psycopg.log"
py_rc=${PIPESTATUS[0]}
NODE_PATH=$NODE_DIR/node_modules node --test --test-reporter=spec "$ROOT/tests/drivers/test_node_pg.mjs" 2>&1 | tee "$RUN_DIR/drivers-node.log"
node_rc=${PIPESTATUS[0]}
set -e

py_pass=$(sed -n 's/^psycopg: \([0-9]*\) passed.*/\1/p' "$RUN_DIR/drivers-psycopg.log")
py_fail=$(sed -n 's/^psycopg: [0-9]* passed, \([0-9]*\) failed.*/\1/p' "$RUN_DIR/drivers-psycopg.log")
node_pass=$(sed -n 's/^ℹ pass \([0-9]*\)$/\1/p' "$RUN_DIR/drivers-node.log")
node_fail=$(sed -n 's/^ℹ fail \([0-9]*\)$/\1/p' "$RUN_DIR/drivers-node.log")
[ -n "$py_pass" ] || { py_pass=0; py_fail=1; }   # the script died before its summary
[ -n "$node_pass" ] || { node_pass=0; node_fail=1; }
if [ -n "$PROXY_PID" ] && ! kill -0 "$PROXY_PID" 2>/dev/null; then
  echo "drivers: worlds-proxy died during the tests:" >&2; tail -20 "$RUN_DIR/drivers-proxy.log" >&2; py_fail=$((py_fail + 1))
fi
echo "drivers ($VIA): psycopg $py_pass passed, $py_fail failed; node-postgres $node_pass passed, $node_fail failed"
echo "drivers: $((py_pass + node_pass)) passed, $((py_fail + node_fail)) failed"
[ $py_rc -eq 0 ] && [ $node_rc -eq 0 ] && [ $((py_fail + node_fail)) -eq 0 ]
