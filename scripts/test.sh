#!/usr/bin/env bash
# Command (2): install what is missing, then run every suite and print each runner's summary line.
#   unit        cargo test -p worlds_core -p worlds-mcp -p worlds-proxy (grammar, names, merge decision, safe mode; the
#               MCP server's own; the proxy's recognition, framing and rewriting)
#   pg_test     cargo pgrx test pg15                 (Rust tests inside a real cluster)
#   regress     pg_regress over sql/ and expected/   (what a user types, one file per feature)
#   sessions    tests/sessions/*.sh                  (several sessions, clusters without the preload, pgbench)
#   proxy       tests/proxy/run.sh                   (worlds-proxy: the spec's examples in psql, tokio-postgres, hostile input)
#   fuzz        scripts/fuzz-soak.sh                 (20,000 generated inputs inside the server, 2 backends: no XX000, no crash)
#   smith       scripts/sqlsmith-soak.sh             (random SQL, 2,000 statements on each of four sides)
#   bench smoke benches/run.sh --smoke               (the benchmark suite at tiny sizes, no goals enforced)
#   core        scripts/pg-core-regress.sh           (PostgreSQL's own regression suite in main, with pg_worlds,
#                                                     and again entirely inside a world: CORE_REGRESS=world)
# Exits non-zero if any suite fails. ONLY=regress (or unit, pg_test, sessions, proxy, fuzz, smith, bench, core) runs one suite;
# ONLY=regress TESTS="create_world" runs one regress file.
# ONLY=drivers runs tests/drivers/run.sh (psycopg 3 and node-postgres through worlds-proxy) alone.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# A run is one build: cargo's incremental cache (5-6 GB under target/debug/incremental) buys it nothing, and
# CI's disk is shared and sometimes nearly full (a run once died of "No space left on device" in its last
# stage). CARGO_INCREMENTAL=1 keeps it for a developer who reruns the suite after small edits.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
"$ROOT/scripts/setup.sh"
mkdir -p "$RUN_DIR"
summary=()
failed=0
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }
record() { summary+=("$1"); if [ "$2" -eq 0 ]; then free_disk; else keep_disk; failed=1; fi; }
disk_free() { df -Pm "$RUN_DIR" | awk 'NR == 2 {print $4}'; }
rm -f "$RUN_DIR"/*/kept
min_free=$(disk_free)
echo "== disk: $min_free MB free where the clusters go ($RUN_DIR)"
# free_disk: once a stage has passed, the data directories of its stopped clusters go (their logs stay; a
# failed stage keeps its clusters to look at, marked by keep_disk; KEEP_DATA=1 keeps everything). A running
# cluster is left alone.
free_disk() {
  local d f
  if [ "${KEEP_DATA:-0}" != 1 ]; then
    for d in "$RUN_DIR"/*/data; do
      [ -f "$d/PG_VERSION" ] || continue
      [ -f "$d/postmaster.pid" ] || [ -f "$d/../kept" ] && continue
      rm -rf "$d"
    done
  fi
  f=$(disk_free); [ "$f" -lt "$min_free" ] && min_free=$f
  return 0
}
keep_disk() {
  local d
  for d in "$RUN_DIR"/*/data; do [ -f "$d/PG_VERSION" ] && touch "$d/../kept"; done
  return 0
}

if want unit; then
  echo "== unit: cargo test -p worlds_core -p worlds-mcp -p worlds-proxy"
  set +e
  (cd "$ROOT" && cargo test -q -p worlds_core -p worlds-mcp -p worlds-proxy 2>&1 | tee "$RUN_DIR/unit.log" | grep -E "^test result|FAILED|panicked")
  rc=${PIPESTATUS[0]}; set -e
  passed=$(grep -E '^test result' "$RUN_DIR/unit.log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s += $1} END {print s}')
  record "unit:     $passed passed ($(grep -cE '^test result: ok' "$RUN_DIR/unit.log") test binaries ok)" $rc
fi

if want pg_test; then
  echo "== pg_test: cargo pgrx test pg15"
  set +e
  if [ "$(id -u)" -eq 0 ]; then
    pgdata="$RUN_DIR/pgrx-test-data"; mkdir -p "$pgdata"; chown postgres:postgres "$pgdata"
    # pgrx copies the .so over the installed one with sudo cp (same inode): remove it first, or
    # running clusters that preloaded it crash
    rm -f "$($PG_CONFIG --pkglibdir)/pg_worlds.so"
    chmod 755 "$ROOT/target" 2>/dev/null
    (cd "$ROOT" && RUST_TEST_THREADS=1 cargo pgrx test pg15 --runas postgres --pgdata "$pgdata" >"$RUN_DIR/pg_test.log" 2>&1)
  else
    (cd "$ROOT" && RUST_TEST_THREADS=1 cargo pgrx test pg15 >"$RUN_DIR/pg_test.log" 2>&1)
  fi
  rc=$?; set -e
  grep -E "^test .* (ok|FAILED)$|^test result" "$RUN_DIR/pg_test.log" | grep -v "^test result: ok. 0 passed" | tail -60
  [ $rc -eq 0 ] || tail -40 "$RUN_DIR/pg_test.log"
  record "pg_test:  $(grep -E '^test result' "$RUN_DIR/pg_test.log" | grep -v ' 0 passed' | tail -1)" $rc
fi

if want regress || want sessions || want proxy || want fuzz || want smith || want bench; then
  echo "== installing pg_worlds and starting the test cluster"
  stop_cluster test
  # a run interrupted in the middle of a check leaves that check's ALTER SYSTEM settings behind (its trap
  # never ran: sessions/39's two-second idle TTL then discards every later check's worlds): the suite's
  # cluster starts from its own configuration only
  auto_conf="$(cluster_dir test)/data/postgresql.auto.conf"
  [ -f "$auto_conf" ] && printf '# Do not edit this file manually!\n# It will be overwritten by the ALTER SYSTEM command.\n' >"$auto_conf"
  install_extension
  start_cluster test yes
fi

if want regress; then
  echo "== regress: pg_regress over sql/"
  regress=$($PG_CONFIG --pkglibdir)/pgxs/src/test/regress/pg_regress
  out="$RUN_DIR/regress"; rm -rf "$out"; mkdir -p "$out"; [ "$(id -u)" -eq 0 ] && chown -R postgres "$out"
  tests=${TESTS:-$(cd "$ROOT/sql" && ls *.sql | sed 's/\.sql$//')}
  pass=0; fail=0; failed_tests=()
  dir=$(cluster_dir test)
  for t in $tests; do
    # one database per file, so files don't see each other's worlds
    if (cd "$ROOT" && $regress --host="$dir/sock" --port="$(cat "$dir/port")" --user=postgres \
          --inputdir=. --outputdir="$out/$t" --dbname="regress_$t" "$t" >"$out/$t.log" 2>&1); then
      pass=$((pass + 1))
    else
      fail=$((fail + 1)); failed_tests+=("$t")
      { cat "$out/$t/regression.diffs" 2>/dev/null || tail -5 "$out/$t.log"; } | head -60 || true
    fi
  done
  echo "regress: $pass passed, $fail failed ${failed_tests[*]:-}"
  record "regress:  $pass passed, $fail failed ${failed_tests[*]:-}" $fail
fi

if want sessions; then
  echo "== sessions: tests/sessions/*.sh"
  # (tests/sessions/33 drives the MCP server)
  (cd "$ROOT" && cargo build -q -p worlds-mcp)
  pass=0; fail=0; failed_tests=()
  for s in "$ROOT"/tests/sessions/[0-9]*.sh; do
    name=$(basename "$s" .sh)
    if bash "$s" >"$RUN_DIR/session_$name.log" 2>&1; then
      pass=$((pass + 1)); echo "ok   $name"; free_disk
    else
      fail=$((fail + 1)); failed_tests+=("$name"); echo "FAIL $name"; tail -30 "$RUN_DIR/session_$name.log"; keep_disk
    fi
  done
  record "sessions: $pass passed, $fail failed ${failed_tests[*]:-}" $fail
fi

if want proxy; then
  echo "== proxy: tests/proxy/run.sh (worlds-proxy)"
  set +e
  PROXY_CLUSTER=test bash "$ROOT/tests/proxy/run.sh" >"$RUN_DIR/proxy.log" 2>&1
  rc=$?; set -e
  grep -E "^(ok|FAIL) " "$RUN_DIR/proxy.log"
  [ $rc -eq 0 ] || tail -40 "$RUN_DIR/proxy.log"
  record "proxy:    $(tail -1 "$RUN_DIR/proxy.log")" $rc
fi

if want fuzz; then
  # the short in-database fuzz (the grammar's own fuzz runs in unit: core/tests/fuzz_grammar.rs), on a
  # cluster of its own. FUZZ_SUITE_INPUTS sets its size (FUZZ_INPUTS is the core fuzz's).
  echo "== fuzz: scripts/fuzz-soak.sh (generated statements, typed calls and settings inside the server)"
  set +e
  FUZZ_INPUTS=${FUZZ_SUITE_INPUTS:-20000} bash "$ROOT/scripts/fuzz-soak.sh" >"$RUN_DIR/fuzz.log" 2>&1
  rc=$?; set -e
  [ $rc -eq 0 ] || sed -n '/^XX000:/,/^(every failure/p; /^server log/,/^fuzz:/p' "$RUN_DIR/fuzz.log" | head -60
  record "fuzz:     $(tail -1 "$RUN_DIR/fuzz.log")" $rc
fi

if want smith; then
  # sqlsmith on main and a world, as a superuser and as an ordinary role, on clusters of its own: no
  # crash and no internal error (XX000) of pg_worlds' making (the long run: SOAK_QUERIES=100000)
  echo "== smith: scripts/sqlsmith-soak.sh (random SQL)"
  set +e
  SOAK_QUERIES=${SOAK_QUERIES:-2000} bash "$ROOT/scripts/sqlsmith-soak.sh" >"$RUN_DIR/smith.log" 2>&1
  rc=$?; set -e
  grep -A12 '^side ' "$RUN_DIR/smith.log" || tail -20 "$RUN_DIR/smith.log"
  [ $rc -eq 0 ] || sed -n '/^crashes, PANICs/,/^side /p' "$RUN_DIR/smith.log" | head -40
  record "smith:    $(grep -m1 '^sqlsmith:' "$RUN_DIR/smith.log" || echo "no summary (see .run/smith.log)")" $rc
fi

if want bench; then
  echo "== bench smoke: benches/run.sh --smoke"
  set +e
  bash "$ROOT/benches/run.sh" --smoke --cluster test >"$RUN_DIR/bench_smoke.log" 2>&1
  rc=$?; set -e
  tail -20 "$RUN_DIR/bench_smoke.log"
  record "bench:    smoke $( [ $rc -eq 0 ] && echo ok || echo FAILED)" $rc
fi

if want drivers; then
  # real drivers nobody here wrote, through worlds-proxy, on the test cluster (alone, install first)
  echo "== drivers: tests/drivers/run.sh (psycopg 3, node-postgres)"
  [ -z "${ONLY:-}" ] || { stop_cluster test; install_extension; }
  set +e
  DRIVERS_CLUSTER=test bash "$ROOT/tests/drivers/run.sh" >"$RUN_DIR/drivers.log" 2>&1
  rc=$?; set -e
  grep -E "^(ok|FAIL) |^✔|^✖|^drivers" "$RUN_DIR/drivers.log" || true
  [ $rc -eq 0 ] || tail -40 "$RUN_DIR/drivers.log"
  record "drivers:  $(grep -m1 '^drivers ([a-z]*):' "$RUN_DIR/drivers.log" || echo "no summary (see $RUN_DIR/drivers.log)")" $rc
fi

stop_cluster test
if [ $failed -eq 0 ]; then free_disk; fi

if want core; then
  # PostgreSQL's own regression suite in main, with pg_worlds (the stock half's failures are committed in
  # tests/pg-core/stock-failures.txt; run scripts/pg-core-regress.sh for both halves)
  echo "== core: PostgreSQL's regression suite with pg_worlds (scripts/pg-core-regress.sh)"
  set +e
  CORE_REGRESS=worlds-only CORE_KNOWN=1 bash "$ROOT/scripts/pg-core-regress.sh" >"$RUN_DIR/core.log" 2>&1
  rc=$?; set -e
  tail -6 "$RUN_DIR/core.log"
  # (record frees core_worlds' data before the run in a world makes its own)
  record "core:     $(grep -m1 '^with pg_worlds' "$RUN_DIR/core.log" | sed 's/  */ /g')$( [ $rc -eq 0 ] || echo ' FAILED')" $rc
  # the same suite run entirely inside a world (the test database's default world); a test failing that
  # isn't listed in tests/pg-core/world-failures.txt fails the run
  echo "== core in a world: PostgreSQL's regression suite inside a world (CORE_REGRESS=world)"
  set +e
  CORE_REGRESS=world bash "$ROOT/scripts/pg-core-regress.sh" >"$RUN_DIR/core-world.log" 2>&1
  rc=$?; set -e
  tail -4 "$RUN_DIR/core-world.log"
  record "core in a world: $(grep -m1 '^in a world' "$RUN_DIR/core-world.log" | sed 's/  */ /g')$( [ $rc -eq 0 ] || echo ' FAILED')" $rc
fi

if [ $failed -eq 0 ]; then free_disk; fi
echo
echo "== summary"
printf '%s\n' "${summary[@]}"
echo "disk:     $(disk_free) MB free at the end, $min_free MB at the least (between stages)"
exit $failed
