#!/usr/bin/env bash
# PostgreSQL's own regression suite (src/test/regress, the installcheck-parallel schedule) against two
# throwaway clusters: `core_stock` (no preload) and `core_worlds` (shared_preload_libraries=pg_worlds, and
# CREATE EXTENSION pg_worlds in the test database). Reports the tests that pass stock but fail with pg_worlds.
#
#   scripts/pg-core-regress.sh                          both halves; exit 1 if a test passes stock, fails with pg_worlds
#   CORE_REGRESS=worlds-only scripts/pg-core-regress.sh  (CI) only the pg_worlds half; the stock failures are taken
#                                                        from tests/pg-core/stock-failures.txt
#   CORE_REGRESS=stock-only scripts/pg-core-regress.sh   only the stock half; compares with stock-failures.txt
#     CORE_UPDATE_STOCK=1                                ... and rewrites tests/pg-core/stock-failures.txt
#   CORE_REGRESS=world scripts/pg-core-regress.sh       the suite run entirely inside a world: the test database's
#                                                        default world (ALTER DATABASE ... SET worlds.world) is a
#                                                        fresh world; compares with tests/pg-core/world-failures.txt
#                                                        (exit 1 on a test not listed there)
#     CORE_UPDATE_WORLD=1                                ... and rewrites tests/pg-core/world-failures.txt
#   CORE_TESTS="boolean int4 triggers"                   just these tests, in this order, in ONE database (a schedule
#                                                        of one test per line; test_setup is prepended if absent).
#                                                        Tests that need objects of other tests (e.g. create_index,
#                                                        create_view, copy) are not resolved: name them too, in order.
#   CORE_MAX_CONNECTIONS=1                               run the schedule serially (default: parallel groups, <= 20)
#   CORE_PORT (57432)  first port tried;  CORE_KEEP=1  leave the clusters running;  PGSRC_CACHE ($ROOT/.run/pgsrc)
#   CORE_PSQL=source|system   (source) which psql pg_regress runs the files with: the one built from the same
#                             source as the tests, or the server's ($PGBIN). psql changes within a major version
#                             change the expected output: 15.20's psql skips the in-line data of a COPY FROM STDIN
#                             that failed, and the 15.18 files have failing COPYs without data (7 tests then fail).
#   CORE_INSTALL=1                                       (re)build and install pg_worlds first (lib.sh install_extension)
#
# Needs the PostgreSQL source of the server's major version for the suite (pg_regress, regress.so, contrib/spi's
# refint/autoinc, sql/ and expected/): fetched with `apt-get source postgresql-15` (deb-src is enabled if missing),
# newest version the archive really serves, tried from the installed one down. It can be a minor older than the
# server, whose fixes may then show up as stock failures (which is why the comparison is stock vs pg_worlds).
# Everything is cached under $PGSRC_CACHE, each step skipped once done. Results: $RUN_DIR/core-regress/
#   {stock,worlds}/  pg_regress output dir (results/, regression.diffs, pg_regress.log, status, diffs/<test>.diff)
#   regressions/<test>.diff  + regressions.txt   the tests that pass stock and fail with pg_worlds
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODE=${CORE_REGRESS:-both}
case "$MODE" in both|stock-only|worlds-only|world) ;; *) echo "CORE_REGRESS must be both, stock-only, worlds-only or world" >&2; exit 2;; esac
PGSRC_CACHE=${PGSRC_CACHE:-$RUN_DIR/pgsrc}
CORE_PSQL=${CORE_PSQL:-source}
case "$CORE_PSQL" in source|system) ;; *) echo "CORE_PSQL must be source or system" >&2; exit 2;; esac
OUT=$RUN_DIR/core-regress
STOCK_LIST=$ROOT/tests/pg-core/stock-failures.txt
WORLD_LIST=$ROOT/tests/pg-core/world-failures.txt
KNOWN_LIST=$ROOT/tests/pg-core/worlds-known-failures.txt
export PORT=${CORE_PORT:-57432}
MAJOR=$($PG_CONFIG --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
PKG=postgresql-$MAJOR
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
APT="$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"
now() { date +%s; }
log() { echo "core-regress: $*"; }
die() { echo "core-regress: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------------------------
# 1. the source and a minimal build of what installcheck needs
# ---------------------------------------------------------------------------------------------------------------
ensure_build_deps() {
  # configured --without-readline/zlib/icu: no -dev libraries needed; bison/flex only if a .y/.l is rebuilt
  local need=() p
  for p in build-essential bison flex dpkg-dev bzip2 xz-utils; do
    grep -q 'install ok installed' <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    $APT update -qq && $APT install -y -qq "${need[@]}" >/dev/null
  fi
}

src_versions() {  # every $MAJOR.x source version apt knows of
  { apt-cache showsrc "$PKG" 2>/dev/null | awk '/^Version:/ {print $2}'
    apt-cache madison "$PKG" 2>/dev/null | awk -F' *[|] *' '$3 ~ /Sources/ {print $2}'; } | grep "^$MAJOR\." | sort -u
}

ensure_deb_src() {
  [ -n "$(src_versions)" ] && return 0
  if ! grep -rqsE '^(Types:.*deb-src|deb-src[[:space:]])' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      log "enabling deb-src (/etc/apt/sources.list.d/pg-worlds-deb-src.sources)"
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        | $SUDO tee /etc/apt/sources.list.d/pg-worlds-deb-src.sources >/dev/null
    elif grep -qsE '^deb[[:space:]]' /etc/apt/sources.list; then
      log "enabling deb-src (/etc/apt/sources.list.d/pg-worlds-deb-src.list)"
      grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed 's/^deb/deb-src/' \
        | $SUDO tee /etc/apt/sources.list.d/pg-worlds-deb-src.list >/dev/null
    else
      die "no apt sources to derive deb-src entries from"
    fi
  fi
  $APT update -qq
  [ -n "$(src_versions)" ] || die "apt knows no source package $PKG even with deb-src enabled"
}

# sets SRC_VERSION and SRC_DIR (the extracted, Debian-patched tree; built in place)
ensure_source() {
  local dl=$PGSRC_CACHE/download v candidates installed
  mkdir -p "$dl"
  if [ -f "$PGSRC_CACHE/version" ] && [ -f "$PGSRC_CACHE/src/.extracted" ]; then
    SRC_VERSION=$(cat "$PGSRC_CACHE/version"); SRC_DIR=$PGSRC_CACHE/src; return 0
  fi
  ensure_deb_src
  installed=$(dpkg-query -W -f='${Version}' "$PKG" 2>/dev/null || true)
  # the installed version first, then the others newest first (a listed version may not be downloadable:
  # e.g. a security update whose source is not on the mirror)
  candidates=$({ [ -n "$installed" ] && echo "$installed"; src_versions | grep -vxF "${installed:-none}" | sort -rV; } || true)
  SRC_VERSION=""
  for v in $candidates; do
    if ls "$dl"/"${PKG}_${v#*:}".dsc >/dev/null 2>&1; then SRC_VERSION=$v; break; fi
    log "apt-get source $PKG=$v"
    if (cd "$dl" && apt-get source --download-only -qq "$PKG=$v" >"$PGSRC_CACHE/apt-source.log" 2>&1); then
      SRC_VERSION=$v; break
    fi
    log "  not downloadable: $(grep -m1 -E '^E:' "$PGSRC_CACHE/apt-source.log" || tail -1 "$PGSRC_CACHE/apt-source.log")"
  done
  [ -n "$SRC_VERSION" ] || die "no version of $PKG source could be downloaded (tried: $(echo $candidates))"
  rm -rf "$PGSRC_CACHE/src"
  (cd "$dl" && dpkg-source -x "${PKG}_${SRC_VERSION#*:}.dsc" "$PGSRC_CACHE/src" >"$PGSRC_CACHE/extract.log" 2>&1) \
    || { tail -20 "$PGSRC_CACHE/extract.log"; die "dpkg-source -x failed"; }
  touch "$PGSRC_CACHE/src/.extracted"
  echo "$SRC_VERSION" > "$PGSRC_CACHE/version"
  rm -f "$PGSRC_CACHE/.built"
  SRC_DIR=$PGSRC_CACHE/src
}

ensure_build() {
  local t0; t0=$(now)
  REGRESS_DIR=$SRC_DIR/src/test/regress
  PSQL_BINDIR=$PGBIN; [ "$CORE_PSQL" = source ] && PSQL_BINDIR=$SRC_DIR/src/bin/psql
  if [ -f "$PGSRC_CACHE/.built" ] && [ -x "$REGRESS_DIR/pg_regress" ] && [ -x "$PSQL_BINDIR/psql" ]; then return 0; fi
  if [ ! -f "$SRC_DIR/config.status" ]; then
    log "configure (log: $PGSRC_CACHE/configure.log)"
    (cd "$SRC_DIR" && ./configure --without-icu --without-readline --without-zlib --prefix="$PGSRC_CACHE/unused-prefix" \
       >"$PGSRC_CACHE/configure.log" 2>&1) || { tail -30 "$PGSRC_CACHE/configure.log"; rm -f "$SRC_DIR/config.status"; die "configure failed"; }
  fi
  log "make -C src/test/regress (pg_regress, regress.so, refint.so, autoinc.so; log: $PGSRC_CACHE/make.log)"
  make -C "$SRC_DIR/src/test/regress" -j"$(nproc)" >"$PGSRC_CACHE/make.log" 2>&1 \
    || { tail -30 "$PGSRC_CACHE/make.log"; die "make failed"; }
  if [ "$CORE_PSQL" = source ]; then
    log "make -C src/bin/psql (the psql the expected files were written for)"
    make -C "$SRC_DIR/src/bin/psql" -j"$(nproc)" >>"$PGSRC_CACHE/make.log" 2>&1 \
      || { tail -30 "$PGSRC_CACHE/make.log"; die "make psql failed"; }
  fi
  [ -x "$PSQL_BINDIR/psql" ] || die "no $PSQL_BINDIR/psql"
  local f; for f in pg_regress regress.so refint.so autoinc.so; do [ -e "$REGRESS_DIR/$f" ] || die "build did not produce $f"; done
  # the server (user postgres) loads the .so files and reads data/; pg_regress runs as postgres too
  chmod -R a+rX "$PGSRC_CACHE"
  touch "$PGSRC_CACHE/.built"
  log "built in $(( $(now) - t0 ))s"
}

# ---------------------------------------------------------------------------------------------------------------
# 2. running the suite
# ---------------------------------------------------------------------------------------------------------------
STARTED=()
cleanup() {
  [ "${CORE_KEEP:-}" = 1 ] && return 0
  local c; for c in "${STARTED[@]:-}"; do [ -n "$c" ] && stop_cluster "$c"; done
  return 0
}
trap cleanup EXIT

schedule_tests() { awk '/^test:/ { for (i = 2; i <= NF; i++) print $i }' "$1"; }

# run_half stock|worlds: fresh cluster, pg_regress into $OUT/<half>, writes $OUT/<half>/status ("name ok|FAILED|ignored")
run_half() {
  local half=$1 cluster preload ext_opt=() conn_opt=() out=$OUT/$1 dir t0
  case "$half" in
    stock) cluster=core_stock; preload=no ;;
    worlds) cluster=core_worlds; preload=yes; ext_opt=(--load-extension=pg_worlds) ;;
    # the database made as pg_regress makes it, with pg_worlds and a fresh world as its default world
    world) cluster=core_world; preload=yes; ext_opt=(--use-existing) ;;
  esac
  [ -n "${CORE_MAX_CONNECTIONS:-}" ] && conn_opt=(--max-connections="$CORE_MAX_CONNECTIONS")
  stop_cluster "$cluster"; rm -rf "$(cluster_dir "$cluster")"
  STARTED+=("$cluster")
  start_cluster "$cluster" "$preload"
  dir=$(cluster_dir "$cluster")
  rm -rf "$out"; mkdir -p "$out"; cp "$SCHEDULE" "$out/schedule"
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$out"
  if [ "$half" = world ]; then
    psql_in "$cluster" -q -d postgres <<'SQL'
CREATE DATABASE regression TEMPLATE = template0;
ALTER DATABASE regression SET lc_messages TO 'C';
ALTER DATABASE regression SET lc_monetary TO 'C';
ALTER DATABASE regression SET lc_numeric TO 'C';
ALTER DATABASE regression SET lc_time TO 'C';
ALTER DATABASE regression SET bytea_output TO 'hex';
ALTER DATABASE regression SET timezone_abbreviations TO 'Default';
SQL
    psql_in "$cluster" -q -d regression -c "CREATE EXTENSION pg_worlds" -c "SELECT worlds.sql('create world regress_world')" \
      -c "ALTER DATABASE regression SET worlds.world = 'regress_world'" >/dev/null
  fi
  log "$half: pg_regress on $cluster (port $(cat "$dir/port")), output in $out"
  t0=$(now)
  set +e
  # without --use-existing pg_regress drops and creates the database `regression` (from template0, lc_* and
  # bytea_output set as the expected files assume), then --load-extension runs CREATE EXTENSION in it
  (cd "$out" && as_pg env -u PGDATABASE -u PGUSER -u PGOPTIONS -u PGSERVICE "$REGRESS_DIR/pg_regress" \
      --host="$dir/sock" --port="$(cat "$dir/port")" --user=postgres \
      --inputdir="$REGRESS_DIR" --outputdir="$out" --bindir="$PSQL_BINDIR" --dlpath="$REGRESS_DIR" \
      --max-concurrent-tests=20 "${conn_opt[@]}" "${ext_opt[@]}" \
      --schedule="$out/schedule" --dbname=regression >"$out/pg_regress.log" 2>&1)
  local rc=$?
  set -e
  printf -v "TIME_$half" %s "$(( $(now) - t0 ))"
  sed -nE 's/^(test |     )([A-Za-z0-9_.-]+) +\.\.\. (ok|FAILED|failed \(ignored\)).*/\2 \3/p' "$out/pg_regress.log" \
    | sed 's/failed (ignored)/ignored/' > "$out/status"
  # a test the schedule has but the log does not (pg_regress stopped early) counts as failed
  local t; for t in "${TESTS[@]}"; do grep -q "^$t " "$out/status" || echo "$t NOT-RUN" >> "$out/status"; done
  mkdir -p "$out/diffs"
  [ -f "$out/regression.diffs" ] && awk -v d="$out/diffs" '
      /^diff / { n = $NF; sub(/.*\//, "", n); sub(/\.out$/, "", n); f = d "/" n ".diff" }
      f { print > f }' "$out/regression.diffs"
  stop_cluster "$cluster"
  [ $rc -eq 0 ] || grep -q " ok$" "$out/status" || { tail -20 "$out/pg_regress.log"; die "$half: pg_regress failed to run (rc $rc)"; }
  local tv="TIME_$half"
  log "$half: $(grep -c ' ok$' "$out/status" || true) of ${#TESTS[@]} pass in ${!tv}s"
}

failing() { awk '$2 != "ok" { print $1 }' "$OUT/$1/status" | sort; }
committed_stock_failures() { [ -f "$STOCK_LIST" ] && grep -vE '^[[:space:]]*(#|$)' "$STOCK_LIST" | awk '{print $1}' | sort -u || true; }

# ---------------------------------------------------------------------------------------------------------------
ensure_build_deps
t_build=$(now)
ensure_source
ensure_build
t_build=$(( $(now) - t_build ))
log "source $PKG $SRC_VERSION in $SRC_DIR; server $($PGBIN/postgres --version | sed 's/^postgres (PostgreSQL) //'); psql $("$PSQL_BINDIR/psql" --version | awk '{print $3}') ($CORE_PSQL); source+build ${t_build}s"

mkdir -p "$OUT"; chmod 755 "$OUT"
SCHEDULE=$OUT/schedule
if [ -n "${CORE_TESTS:-}" ]; then
  { grep -qw test_setup <<<"$CORE_TESTS" || echo "test: test_setup"; for t in $CORE_TESTS; do echo "test: $t"; done; } > "$SCHEDULE"
else
  cp "$REGRESS_DIR/parallel_schedule" "$SCHEDULE"
fi
mapfile -t TESTS < <(schedule_tests "$SCHEDULE")
M=${#TESTS[@]}

if [ "$MODE" = world ]; then
  if [ "${CORE_INSTALL:-}" = 1 ] || [ ! -f "$($PG_CONFIG --pkglibdir)/pg_worlds.so" ]; then
    log "installing pg_worlds"; "$ROOT/scripts/setup.sh"; install_extension
  fi
  run_half world
  world_fail=$(failing world)
  echo
  echo "== PostgreSQL core regression suite inside a world ($PKG $SRC_VERSION source, $M tests)"
  echo "in a world: $(( M - $(grep -c . <<<"$world_fail" || true) )) of $M pass   (${TIME_world}s)"
  printf '%s\n' $world_fail > "$OUT/world-failures.txt"
  listed=$( [ -f "$WORLD_LIST" ] && grep -vE '^[[:space:]]*(#|$)' "$WORLD_LIST" | awk '{print $1}' | sort -u || true)
  new_fail=$(comm -23 <(printf '%s\n' $world_fail | sort) <(printf '%s\n' $listed) | grep . || true)
  fixed=$(comm -13 <(printf '%s\n' $world_fail | sort) <(printf '%s\n' $listed) | grep . || true)
  [ -z "$fixed" ] || echo "now passing in a world, listed in ${WORLD_LIST#$ROOT/}: $(echo $fixed)"
  if [ "${CORE_UPDATE_WORLD:-}" = 1 ] && [ -z "${CORE_TESTS:-}" ]; then
    { echo "# PostgreSQL core regression tests that fail when the whole suite runs inside a world"
      echo "# (CORE_REGRESS=world scripts/pg-core-regress.sh); grouped by cause in docs/architecture.md."
      echo "# tests from source: $PKG $SRC_VERSION; recorded $(date -u +%Y-%m-%d) with CORE_UPDATE_WORLD=1"
      printf '%s\n' $world_fail; } > "$WORLD_LIST"
    echo "wrote ${WORLD_LIST#$ROOT/}"
    exit 0
  fi
  if [ -n "$new_fail" ] && [ -z "${CORE_TESTS:-}" ]; then
    echo "fail in a world, NOT in ${WORLD_LIST#$ROOT/}: $(echo $new_fail)"
    echo "diffs: ${OUT#$ROOT/}/world/diffs/<test>.diff"
    exit 1
  fi
  exit 0
fi
if [ "$MODE" != worlds-only ]; then run_half stock; fi
if [ "$MODE" != stock-only ]; then
  if [ "${CORE_INSTALL:-}" = 1 ] || [ ! -f "$($PG_CONFIG --pkglibdir)/pg_worlds.so" ]; then
    log "installing pg_worlds"; "$ROOT/scripts/setup.sh"; install_extension
  fi
  run_half worlds
fi

echo
echo "== PostgreSQL core regression suite ($PKG $SRC_VERSION source, $M tests)"
if [ "$MODE" = stock-only ]; then
  stock_fail=$(failing stock)
  echo "stock: $(( M - $(grep -c . <<<"$stock_fail" || true) )) of $M pass   (${TIME_stock}s)"
  echo "fail stock: $(echo $stock_fail)"
  printf '%s\n' $stock_fail > "$OUT/stock-failures.txt"
  if [ -z "${CORE_TESTS:-}" ]; then
    committed=$(committed_stock_failures)
    new=$(comm -23 <(printf '%s\n' $stock_fail) <(printf '%s\n' $committed) | grep . || true)
    gone=$(comm -13 <(printf '%s\n' $stock_fail) <(printf '%s\n' $committed) | grep . || true)
    [ -z "$new$gone" ] || echo "differs from ${STOCK_LIST#$ROOT/}: now failing: $(echo $new); no longer failing: $(echo $gone)"
    if [ "${CORE_UPDATE_STOCK:-}" = 1 ]; then
      mkdir -p "$(dirname "$STOCK_LIST")"
      { echo "# PostgreSQL core regression tests (src/test/regress parallel_schedule, installcheck) that fail on a"
        echo "# stock cluster, without pg_worlds: scripts/pg-core-regress.sh (CORE_REGRESS=worlds-only) does not count them."
        echo "# server: $($PGBIN/postgres --version | sed 's/^postgres (PostgreSQL) //')"
        echo "# tests from source: $PKG $SRC_VERSION (apt-get source); psql: $("$PSQL_BINDIR/psql" --version | awk '{print $3}') (CORE_PSQL=$CORE_PSQL)"
        echo "# recorded: $(date -u +%Y-%m-%d) with CORE_REGRESS=stock-only CORE_UPDATE_STOCK=1 scripts/pg-core-regress.sh"
        printf '%s\n' $stock_fail; } > "$STOCK_LIST"
      echo "wrote ${STOCK_LIST#$ROOT/}"
    fi
  fi
  exit 0
fi

worlds_fail=$(failing worlds)
if [ "$MODE" = both ]; then
  stock_fail=$(failing stock)
  echo "stock: $(( M - $(grep -c . <<<"$stock_fail" || true) )) of $M pass   (${TIME_stock}s)"
else
  stock_fail=$(committed_stock_failures)
  if [ ! -f "$STOCK_LIST" ]; then echo "warning: no ${STOCK_LIST#$ROOT/}: every failure counts"
  else
    grep -q "^# tests from source: $PKG $SRC_VERSION .*CORE_PSQL=$CORE_PSQL)" "$STOCK_LIST" \
      || echo "warning: ${STOCK_LIST#$ROOT/} was recorded with another source version or CORE_PSQL: $(grep -m1 '^# tests from source' "$STOCK_LIST")"
  fi
  echo "stock (${STOCK_LIST#$ROOT/}): $(( M - $(comm -12 <(printf '%s\n' ${TESTS[@]} | sort) <(printf '%s\n' $stock_fail) | grep -c . || true) )) of $M pass"
fi
echo "with pg_worlds: $(( M - $(grep -c . <<<"$worlds_fail" || true) )) of $M pass   (${TIME_worlds}s)"
regressions=$(comm -23 <(printf '%s\n' $worlds_fail) <(printf '%s\n' $stock_fail) | grep . || true)
rm -rf "$OUT/regressions"; mkdir -p "$OUT/regressions"
printf '%s\n' $regressions > "$OUT/regressions.txt"
for t in $regressions; do
  if [ -f "$OUT/worlds/diffs/$t.diff" ]; then cp "$OUT/worlds/diffs/$t.diff" "$OUT/regressions/"
  else echo "(no diff: $(grep "^$t " "$OUT/worlds/status"))" > "$OUT/regressions/$t.diff"; fi
done
n=$(grep -c . <<<"$regressions" || true)
if [ "$n" -gt 0 ]; then
  echo "pass stock, FAIL with pg_worlds ($n): $(echo $regressions)"
  echo "diffs: ${OUT#$ROOT/}/regressions/<test>.diff"
  # CORE_KNOWN=1 (scripts/test.sh): the tests listed in tests/pg-core/worlds-known-failures.txt are the open
  # work of issue "main behaves exactly as stock"; only a failure outside that list (a regression) fails
  if [ "${CORE_KNOWN:-}" = 1 ] && [ -f "$KNOWN_LIST" ]; then
    known=$(grep -v '^#' "$KNOWN_LIST" | grep . | sort || true)
    new_fail=$(comm -23 <(printf '%s\n' $regressions | sort) <(printf '%s\n' $known) | grep . || true)
    fixed=$(comm -13 <(printf '%s\n' $regressions | sort) <(printf '%s\n' $known) | grep . || true)
    [ -z "$fixed" ] || echo "now passing, listed as known in ${KNOWN_LIST#$ROOT/}: $(echo $fixed) (take them off the list)"
    if [ -n "$new_fail" ]; then echo "NOT in ${KNOWN_LIST#$ROOT/} (regressions): $(echo $new_fail)"; exit 1; fi
    echo "all $n are listed in ${KNOWN_LIST#$ROOT/} (open work)"
    exit 0
  fi
  exit 1
fi
echo "no test passes stock and fails with pg_worlds"
