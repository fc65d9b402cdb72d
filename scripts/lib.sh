# Shared by the scripts: where things live and how to run Postgres as a non-root user.
# Postgres refuses to run as root (initdb/pg_ctl exit), and CI runs as root: clusters are then owned by
# the `postgres` system user that Debian's package creates.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# PG_TREE: a copy of the server tree (its usr/lib/postgresql/15 and usr/share/postgresql/15) to run instead of the
# system one, e.g. a soak that must keep the pg_worlds it started with while a newer one is installed
PGBIN=${PG_TREE:-}/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
# WORLDS_RUN_DIR: where clusters and logs go (default .run): two runs at once each need their own
RUN_DIR=${WORLDS_RUN_DIR:-$ROOT/.run}
export PATH="$HOME/.cargo/bin:$PGBIN:$PATH"

if [ "$(id -u)" -eq 0 ]; then
  PGUSER_OS=postgres
  as_pg() { runuser -u postgres -- "$@"; }
else
  PGUSER_OS=$(id -un)
  as_pg() { "$@"; }
fi

# cluster_dir NAME -> the data/socket directory of a throwaway cluster
cluster_dir() { echo "$RUN_DIR/$1"; }

free_port() {
  local p=${1:-55432}
  while (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || [ -e "/tmp/.s.PGSQL.$p" ]; do p=$((p + 1)); done
  echo $p
}

# start_cluster NAME [preload=yes|no]: initdb (once) and start; prints nothing, writes $dir/port.
# EXTRA_CONF (optional): more "-c name=value" options for this start (e.g. "-c wal_level=logical")
start_cluster() {
  local name=$1 preload=${2:-yes} dir port
  dir=$(cluster_dir "$name")
  mkdir -p "$RUN_DIR"
  chmod 755 "$ROOT" "$RUN_DIR" 2>/dev/null || true
  if [ -f "$dir/data/postmaster.pid" ] && as_pg $PGBIN/pg_ctl -D "$dir/data" status >/dev/null 2>&1; then
    return 0
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    rm -rf "$dir"; mkdir -p "$dir/sock"
    [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$dir"
    as_pg $PGBIN/initdb -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1
  fi
  port=$(free_port "${PORT:-55432}")
  echo "$port" > "$dir/port"; [ "$(id -u)" -eq 0 ] && chown postgres "$dir/port"
  local conf="-c port=$port -c unix_socket_directories=$dir/sock -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
  [ "$preload" = yes ] && conf="$conf -c shared_preload_libraries=pg_worlds"
  [ -n "${EXTRA_CONF:-}" ] && conf="$conf $EXTRA_CONF"
  # a Rust backtrace in every error DETAIL is noise for users: the server runs without RUST_BACKTRACE
  # (KEEP_RUST_BACKTRACE=1 keeps it: tests/sessions/16 proves errors don't change with it)
  local unset="-u RUST_BACKTRACE -u RUST_LIB_BACKTRACE"
  [ "${KEEP_RUST_BACKTRACE:-}" = 1 ] && unset=
  as_pg env $unset $PGBIN/pg_ctl -D "$dir/data" -l "$dir/server.log" -o "$conf" -w -t 60 start >/dev/null
}

stop_cluster() {
  local dir; dir=$(cluster_dir "$1")
  if [ -f "$dir/data/postmaster.pid" ]; then as_pg $PGBIN/pg_ctl -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true; fi
}

# psql_in NAME [args...]: psql against that cluster as the postgres superuser
psql_in() {
  local name=$1; shift
  local dir; dir=$(cluster_dir "$name")
  $PGBIN/psql -h "$dir/sock" -p "$(cat "$dir/port")" -U postgres -X -v ON_ERROR_STOP=1 "$@"
}

conninfo() {
  local dir; dir=$(cluster_dir "$1")
  echo "host=$dir/sock port=$(cat "$dir/port") user=postgres dbname=${2:-postgres}"
}

# install_extension [--release]: build a package, then install it into the system Postgres. The old .so is
# removed (not overwritten) only once the build succeeded: overwriting a loaded library in place crashes
# running backends, and a failed build must leave the installed one alone.
install_extension() {
  local mode=--debug profile=debug
  [ "${1:-}" = --release ] && { mode=; profile=release; }
  local pkg="$ROOT/target/$profile/pg_worlds-pg15"
  mkdir -p "$RUN_DIR"
  (cd "$ROOT" && cargo pgrx package $mode --pg-config "$PG_CONFIG" >"$RUN_DIR/install.log" 2>&1) || { tail -40 "$RUN_DIR/install.log"; return 1; }
  local libdir sharedir
  libdir=$($PG_CONFIG --pkglibdir); sharedir=$($PG_CONFIG --sharedir)
  rm -f "$libdir/pg_worlds.so"
  cp "$pkg$libdir/pg_worlds.so" "$libdir/pg_worlds.so"
  cp "$pkg$sharedir/extension/"pg_worlds* "$sharedir/extension/"
}
