#!/usr/bin/env bash
# Installs what pg_worlds needs to build and test, idempotently and fast when already present:
# Debian's PostgreSQL 15 server + headers, the MCP Python SDK (tests/sessions/33), pg_repack (the table-maintenance tests), clang/libclang, sudo, valgrind (the counted benchmarks), sqlsmith (scripts/sqlsmith-soak.sh), sysbench (bench P15), and cargo-pgrx of exactly the pinned version,
# initialised against the system pg_config (never a source download of Postgres).
set -euo pipefail
PGRX_VERSION=0.18.1
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config

need_pkgs=()
for p in postgresql-15 postgresql-server-dev-15 postgresql-contrib postgresql-15-repack libclang-dev clang pkg-config sudo valgrind sqlsmith sysbench; do
  grep -q 'install ok installed' <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! grep -q "$PGRX_VERSION" <<<"$(cargo pgrx --version 2>/dev/null)"; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION (a few minutes, once per machine)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi
if ! grep -q "pg15" "$HOME/.pgrx/config.toml" 2>/dev/null; then
  cargo pgrx init --pg15 "$PG_CONFIG"
fi
# the official MCP Python SDK: tests/sessions/33_mcp.sh drives worlds-mcp with it (a client nobody here wrote)
MCP_SDK_VERSION=2.3.0
if ! python3 -c "import importlib.metadata as m; assert m.version('mcp') == '$MCP_SDK_VERSION'" 2>/dev/null; then
  echo "setup: installing the MCP Python SDK (mcp==$MCP_SDK_VERSION)"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "mcp==$MCP_SDK_VERSION" >/dev/null
fi
echo "setup: ok (PostgreSQL $($PG_CONFIG --version | awk '{print $2}'), cargo-pgrx $PGRX_VERSION)"
