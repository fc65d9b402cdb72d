# Sourced by tests/drivers/run.sh: installs the two drivers the tests use, idempotently, into a cache
# directory (DRIVERS_CACHE, default $RUN_DIR/drivers-deps) that a second run reuses:
#   psycopg 3 (psycopg[binary], from PyPI) in a venv:  $DRIVERS_CACHE/venv
#   node-postgres (npm `pg`):                          $DRIVERS_CACHE/node/node_modules/pg
# plus Debian's python3-venv, nodejs and npm when they are missing. Versions are pinned: a driver release
# changing behaviour shows up as a commit here, not as a red CI run.
PSYCOPG_VERSION=3.3.9
NODE_PG_VERSION=8.23.1
DRIVERS_CACHE=${DRIVERS_CACHE:-$RUN_DIR/drivers-deps}
VENV=$DRIVERS_CACHE/venv
NODE_DIR=$DRIVERS_CACHE/node

drivers_deps() {
  local need=() p
  command -v node >/dev/null 2>&1 || need+=(nodejs)
  command -v npm >/dev/null 2>&1 || need+=(npm)
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
  if [ ${#need[@]} -gt 0 ]; then
    echo "drivers: installing ${need[*]} (apt)"
    local sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  mkdir -p "$DRIVERS_CACHE"
  if ! "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('psycopg') == '$PSYCOPG_VERSION'" >/dev/null 2>&1; then
    echo "drivers: installing psycopg[binary]==$PSYCOPG_VERSION into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "psycopg[binary]==$PSYCOPG_VERSION" >/dev/null
  fi
  if [ "$(node -p "require('$NODE_DIR/node_modules/pg/package.json').version" 2>/dev/null)" != "$NODE_PG_VERSION" ]; then
    echo "drivers: installing pg@$NODE_PG_VERSION (node-postgres) into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    [ -f "$NODE_DIR/package.json" ] || echo '{"name": "pg-worlds-driver-tests", "private": true}' >"$NODE_DIR/package.json"
    (cd "$NODE_DIR" && npm install --silent --no-audit --no-fund "pg@$NODE_PG_VERSION" >/dev/null)
  fi
  "$VENV/bin/python" -c 'import psycopg; print("drivers: psycopg", psycopg.__version__, "libpq", psycopg.pq.version(), psycopg.pq.__impl__)'
  echo "drivers: node $(node --version), pg $(node -p "require('$NODE_DIR/node_modules/pg/package.json').version")"
}
