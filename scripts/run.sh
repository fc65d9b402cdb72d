#!/usr/bin/env bash
# Command (1): install what is missing, build and install pg_worlds, start a throwaway cluster with it
# preloaded, run the walkthrough, and say how to connect and stop.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/setup.sh"
mkdir -p "$RUN_DIR"
stop_cluster demo
echo "run: building and installing pg_worlds"
install_extension
echo "run: building worlds-mcp (the MCP server) and worlds-proxy (the wire proxy)"
(cd "$ROOT" && cargo build -q --release -p worlds-mcp -p worlds-proxy)
start_cluster demo yes
psql_in demo -q -c "DROP DATABASE IF EXISTS demo" -c "CREATE DATABASE demo"
echo "run: examples/walkthrough.sql"
psql_in demo -d demo -f "$ROOT/examples/walkthrough.sql"
psql_in demo -d demo -Atc "select 'pg_worlds ' || extversion || ' is installed' from pg_extension where extname = 'pg_worlds'"
# worlds-proxy beside the cluster: the database name chooses the world, the spec's statements run as typed
if [ -f "$RUN_DIR/proxy.pid" ]; then kill "$(cat "$RUN_DIR/proxy.pid")" 2>/dev/null || true; rm -f "$RUN_DIR/proxy.pid"; fi
PROXY_PORT=$(free_port "${PROXY_PORT:-6432}")
nohup "$ROOT/target/release/worlds-proxy" --listen "127.0.0.1:$PROXY_PORT" \
  --upstream "host=127.0.0.1 port=$(cat "$(cluster_dir demo)/port") dbname=demo" >"$RUN_DIR/proxy.log" 2>&1 &
echo $! >"$RUN_DIR/proxy.pid"
cat <<MSG

The cluster is running. Connect:
  psql "$(conninfo demo demo)"
Start a session inside a world from any libpq client:
  psql "$(conninfo demo demo) options='-c worlds.world=agent_7'"
Or through worlds-proxy (README: "worlds-proxy"): the database name is the world, the spec's statements run typed
  psql postgres://postgres@127.0.0.1:$PROXY_PORT/demo        # main: try  show worlds;  show branches;
  psql "postgres://postgres@127.0.0.1:$PROXY_PORT/<a world>"  # in that world; 'main@-1 hour' reads the past
Give an MCP client (Claude, Cursor, the MCP SDKs) the database as an agent (README: "Connecting an MCP client"):
  PGHOST=$(cluster_dir demo)/sock PGPORT=$(cat "$(cluster_dir demo)/port") PGDATABASE=demo PGUSER=postgres \\
    $ROOT/target/release/worlds-mcp            # stdio; add --safe for reads only, --http 127.0.0.1:7000 for HTTP
Stop it:
  kill \$(cat $RUN_DIR/proxy.pid); $ROOT/scripts/cluster.sh stop demo
MSG
