#!/usr/bin/env bash
# The money check (tests/sessions/13_money.sh) as a soak: 10 minutes by default (SOAK_SECONDS), with four
# pgbench clients on main (SOAK_MAIN), on a cluster of its own ("soak"), after building and installing
# pg_worlds. Prints the check's lines and its counts; exits non-zero if the invariant broke.
#   scripts/money-soak.sh            # 600 s
#   SOAK_SECONDS=1800 scripts/money-soak.sh
#   SOAK_MAIN=0 scripts/money-soak.sh   # no writers on main: the merges race alone, most go fast-forward
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/setup.sh" >/dev/null
[ "${SOAK_NO_INSTALL:-}" = 1 ] || install_extension ${SOAK_BUILD:---release}
stop_cluster soak
PORT=56432 start_cluster soak yes
SESSIONS_CLUSTER=soak MONEY_SECONDS=${SOAK_SECONDS:-600} MONEY_MAIN=${SOAK_MAIN:-4} bash "$ROOT/tests/sessions/13_money.sh"
rc=$?
stop_cluster soak
exit $rc
