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
