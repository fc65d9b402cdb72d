#!/usr/bin/env bash
# Command (1): install what is missing, build and install pg_worlds, start a throwaway cluster with it
# preloaded, run the walkthrough, and say how to connect and stop.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/setup.sh"
mkdir -p "$RUN_DIR"
stop_cluster demo
echo "run: building and installing pg_worlds"
install_extension
echo "run: building worlds-mcp (the MCP server)"
(cd "$ROOT" && cargo build -q --release -p worlds-mcp)
start_cluster demo yes
psql_in demo -q -c "DROP DATABASE IF EXISTS demo" -c "CREATE DATABASE demo"
echo "run: examples/walkthrough.sql"
psql_in demo -d demo -f "$ROOT/examples/walkthrough.sql"
psql_in demo -d demo -Atc "select 'pg_worlds ' || extversion || ' is installed' from pg_extension where extname = 'pg_worlds'"
cat <<MSG

The cluster is running. Connect:
  psql "$(conninfo demo demo)"
Start a session inside a world from any libpq client:
  psql "$(conninfo demo demo) options='-c worlds.world=agent_7'"
Give an MCP client (Claude, Cursor, the MCP SDKs) the database as an agent (README: "Connecting an MCP client"):
  PGHOST=$(cluster_dir demo)/sock PGPORT=$(cat "$(cluster_dir demo)/port") PGDATABASE=demo PGUSER=postgres \\
    $ROOT/target/release/worlds-mcp            # stdio; add --safe for reads only, --http 127.0.0.1:7000 for HTTP
Stop it:
  $ROOT/scripts/cluster.sh stop demo
MSG
