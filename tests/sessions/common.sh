# Shared by the session tests: the cluster, and check helpers that record failures and carry on.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
# the shared cluster (SESSIONS_CLUSTER / SESSIONS_NOPRELOAD_CLUSTER override the names, e.g. to run beside scripts/test.sh)
CL=${SESSIONS_CLUSTER:-test}
NP=${SESSIONS_NOPRELOAD_CLUSTER:-nopreload}
failures=0
fail() { echo "FAIL: $*" >&2; exit 1; }
bad() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect() { # expect WHAT ACTUAL EXPECTED
  if [ "$2" = "$3" ]; then echo "  ok   $1 = $3"; else bad "$1: expected '$3', got '$2'"; fi
}

# crash_pgbench DB PID: after 2 s, kill -9 one pgbench backend of database DB (the postmaster then restarts
# every backend and shared memory), wait for the pgbench run PID to end and for the cluster to take
# connections again
crash_pgbench() {
  sleep 2
  local victim
  victim=$(psql_in $CL -qAt -c "select pid from pg_stat_activity where datname = '$1' and application_name = 'pgbench' limit 1")
  [ -n "$victim" ] && kill -9 "$victim"
  wait "$2" 2>/dev/null || true
  for _ in $(seq 1 60); do psql_in $CL -qAt -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
}
