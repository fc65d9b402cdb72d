#!/usr/bin/env bash
# The money check (tests/sessions/13) without writers on main: merges, rebases and merges INTO other
# worlds race each other alone, so most merges into main find their tables untouched since the fork and
# go fast-forward (src/merge/fast_forward.rs: typed statements from the delta, no plan). The invariant is
# the same (the total stays 200,000, no 40P01, nothing but 40001); the check also counts the fast-forward
# merges (at least one). MONEY_SECONDS (default 15) sets the run.
MONEY_MAIN=0 MONEY_SECONDS=${MONEY_SECONDS:-15} exec bash "$(dirname "$0")/13_money.sh"
