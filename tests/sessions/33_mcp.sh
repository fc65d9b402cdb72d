#!/usr/bin/env bash
# worlds-mcp driven by a real MCP client nobody here wrote (the official MCP Python SDK, `mcp` on PyPI),
# over stdio and over HTTP, logged in as agents with their tokens (SCRAM over TCP): the whole agent loop
# (fork, query, describe, diff, dry run, merge; a merge policy queueing a merge and a migration), rights
# enforced by Postgres (no write to main without write_main, no dropping another agent's world), safe mode
# refusing every write (also for a superuser: the database refuses, through worlds.read_only), and a
# hostile suite (escapes from the world or the read-only call, oversized results, malformed arguments,
# wrong and missing tokens, one agent's token used on another's world). tests/sessions/mcp_agent.py.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s33_mcp
DIR=$(cluster_dir $CL)
PORT=$(cat "$DIR/port")
BIN="$ROOT/target/debug/worlds-mcp"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build -q -p worlds-mcp) || fail "worlds-mcp doesn't build"
python3 -c "import mcp" 2>/dev/null || fail "the MCP Python SDK is missing (scripts/setup.sh installs it)"
HBA=$(psql_in $CL -qAt -c "show hba_file")
# the agents authenticate with their tokens over TCP; everything else stays as it was
restore_hba() {
  [ "$(id -u)" -eq 0 ] && runuser -u postgres -- sed -i '/# s33_mcp$/d' "$HBA" || sed -i '/# s33_mcp$/d' "$HBA"
  psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null
}
trap restore_hba EXIT
restore_hba
line="host all m33_bot,m33_peer,nobody 127.0.0.1/32 scram-sha-256 # s33_mcp"
if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- sed -i "1i $line" "$HBA"; else sed -i "1i $line" "$HBA"; fi
psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null

psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" \
  -c "drop role if exists m33_bot" -c "drop role if exists m33_peer" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, bal numeric(12,2) not null);
insert into acct select g, 1000 from generate_series(1, 10) g;
create table secrets (id int primary key, s text);
insert into secrets values (1, 'top secret');
create sequence m33_seq;
grant select, insert, update, delete on acct to public;
grant usage on sequence m33_seq to public;
create function m33_notify() returns void language plpgsql as $$ begin perform pg_notify('m33', 'x'); end $$;
grant execute on function m33_notify() to public;
select * from worlds.sql('create merge policy m33_small with (max_rows = 3)');
select * from worlds.sql('create merge check m33_no_negative as select id from acct where bal < 0');
SQL
tok() { psql_in $CL -d $DB -qAt -c "select j ->> 'token' from worlds.sql(\$s\$create agent $1 with ($2)\$s\$) j"; }
BOT_TOK=$(tok m33_bot "can = 'read,fork,write_own,merge_own', policy = 'm33_small'")
PEER_TOK=$(tok m33_peer "can = 'read,fork,write_own'")
# a table the bot owns (as an app's role owns its tables): its migration may alter it
psql_in $CL -d $DB -q -c "create table notes (id int primary key, body text)" -c "insert into notes values (1, 'a'), (2, 'b')" \
  -c "alter table notes owner to m33_bot" >/dev/null
[ ${#BOT_TOK} -ge 35 ] && [ ${#PEER_TOK} -ge 35 ] || fail "no tokens: $BOT_TOK $PEER_TOK"
# a world of each agent's, made from their own logins (the other one must not reach it)
as() { PGPASSWORD=$2 $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=$1" -XqAt -v ON_ERROR_STOP=1 -c "$3"; }
as m33_peer "$PEER_TOK" "select worlds.create_world('peer_w')" >/dev/null || fail "peer_w"
as m33_bot "$BOT_TOK" "select worlds.create_world('bot_keep')" >/dev/null || fail "bot_keep"
HTTP_PORT=$(free_port 57330)

MCP_BIN=$BIN PGPORT=$PORT DB=$DB BOT=m33_bot BOT_TOKEN=$BOT_TOK PEER=m33_peer PEER_TOKEN=$PEER_TOK HTTP_PORT=$HTTP_PORT \
  ADMIN_DSN="$(conninfo $CL $DB)" PATH="$PGBIN:$PATH" timeout 600 python3 "$ROOT/tests/sessions/mcp_agent.py" || failures=$((failures + 1))

expect "total kept in main" "$(psql_in $CL -d $DB -qAt -c "select sum(bal) from acct")" "10000.00"
psql_in $CL -d $DB -qAt -c "select worlds.drop_agent('m33_bot')" -c "select worlds.drop_agent('m33_peer')" >/dev/null
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: mcp"
