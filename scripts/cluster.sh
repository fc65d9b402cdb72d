#!/usr/bin/env bash
# scripts/cluster.sh start|stop|psql NAME [psql args]: manage a throwaway cluster under .run/NAME
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cmd=${1:-}; name=${2:-demo}; shift 2 || true
case "$cmd" in
  start) start_cluster "$name" yes; echo "$(conninfo "$name")" ;;
  stop) stop_cluster "$name" ;;
  psql) psql_in "$name" "$@" ;;
  *) echo "usage: scripts/cluster.sh start|stop|psql NAME [psql args]"; exit 2 ;;
esac
