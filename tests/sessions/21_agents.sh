#!/usr/bin/env bash
# Agents log in with their tokens over TCP (scram-sha-256; a wrong token is refused) and meet every right
# and quota from their own connections. Then a hostile suite: agent roles and a plain role try the ways
# around the rules; every attempt must fail, and the suite counts attempts and escapes.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s21_agents
DIR=$(cluster_dir $CL)
PORT=$(cat "$DIR/port")
HBA=$(psql_in $CL -qAt -c "show hba_file")
# the agents (and the plain role) authenticate with a password over TCP; everything else stays as it was
restore_hba() {
  [ "$(id -u)" -eq 0 ] && runuser -u postgres -- sed -i '/# s21_agents$/d' "$HBA" || sed -i '/# s21_agents$/d' "$HBA"
  psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null
}
trap restore_hba EXIT
restore_hba
line="host all s21_bot,s21_peer,s21_plain 127.0.0.1/32 scram-sha-256 # s21_agents"
if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- sed -i "1i $line" "$HBA"; else sed -i "1i $line" "$HBA"; fi
psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null

psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" \
  -c "drop role if exists s21_bot" -c "drop role if exists s21_peer" -c "drop role if exists s21_plain" \
  -c "create role s21_plain login password 'plain-pw'" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, bal int not null);
insert into acct select g, 1000 from generate_series(1, 10) g;
create table secrets (id int primary key, s text);
insert into secrets values (1, 'top secret');
grant select, insert, update, delete, truncate on acct to public;
create function zero_all() returns void language sql security definer as $$ update acct set bal = 0 $$;
create function plain_zero() returns void language sql as $$ update acct set bal = 0 $$;
grant execute on function zero_all(), plain_zero() to public;
select worlds.create_world('people_w');
SQL
# people_w changes a table the agents can't read: what DIFF and DRY RUN would show of it must stay hidden
PGOPTIONS="-c worlds.world=people_w" psql_in $CL -d $DB -q -c "update secrets set s = 'changed secret' where id = 1" >/dev/null
tok() { psql_in $CL -d $DB -qAt -c "select j ->> 'token' from worlds.sql('create agent $1 with (can = ''$2'')') j"; }
BOT=$(tok s21_bot 'read,fork,write_own,merge_own')
PEER=$(tok s21_peer 'read,fork,write_own')
[ ${#BOT} -ge 35 ] || fail "no token for s21_bot: $BOT"
# as USER PASSWORD WORLD SQL...: a TCP login; prints output (stderr too), returns psql's rc
as() {
  local user=$1 pw=$2 world=$3; shift 3
  local a=(); for s in "$@"; do a+=(-c "$s"); done
  PGPASSWORD=$pw $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=$user options='-c worlds.world=$world'" \
    -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "${a[@]}" 2>&1
}
ok() { local what=$1 want=$2 out; shift 2
  if out=$(as "$@"); then expect "$what" "$out" "$want"; else bad "$what: expected success, got: $out"; fi; }
admin() { psql_in $CL -d $DB -qAt "$@"; }
TOTAL="select sum(bal) from acct"

echo "check: logins over TCP with the token (SCRAM)"
expect "stored as" "$(admin -c "select left(rolpassword, 14) from pg_authid where rolname = 's21_bot'")" 'SCRAM-SHA-256$'
ok "s21_bot logs in with its token" "s21_bot" s21_bot "$BOT" main "select session_user"
out=$(as s21_bot "wrong-$BOT" main "select 1" || true)
if grep -q "password authentication failed" <<<"$out"; then echo "  ok   a wrong token is refused"; else bad "wrong token: $out"; fi
out=$(as s21_bot "$PEER" main "select 1" || true)
grep -q "password authentication failed" <<<"$out" && echo "  ok   another agent's token is refused" || bad "peer token: $out"

START=$(admin -c "select clock_timestamp()")
echo "check: rights from the agent's own connection"
ok "fork" "CREATE WORLD" s21_bot "$BOT" main "select j ->> 'tag' from worlds.sql('create world bot_w') j"
ok "owner is the agent" "s21_bot" s21_bot "$BOT" main "select owner from worlds.show_worlds() where name = 'bot_w'"
ok "write its own world" "" s21_bot "$BOT" bot_w "update acct set bal = bal - 5 where id = 1" "update acct set bal = bal + 5 where id = 2"
ok "merge its own world (merge_own)" "MERGE 2" s21_bot "$BOT" main "select j ->> 'tag' from worlds.sql('merge world bot_w') j"
expect "total after the agent's merge" "$(admin -c "$TOTAL")" "10000"
expect "main has the agent's change" "$(admin -c "select bal from acct where id = 1")" "995"
ok "peer forks" "CREATE WORLD" s21_peer "$PEER" main "select j ->> 'tag' from worlds.sql('create world peer_w') j"
ok "peer writes its own world" "" s21_peer "$PEER" peer_w "update acct set bal = bal - 1 where id = 3" "update acct set bal = bal + 1 where id = 4"
ok "audit names the agent's actions" "fork,write,write,merge" s21_bot "$BOT" main \
  "select string_agg(action, ',' order by at) from worlds.show_audit('s21_bot')"

echo "check: quotas from the agent's own connection"
# writes_per_minute: one more write this minute, then 42501 (counted from its audit; placed where its
# only writes are seconds old)
n=$(admin -c "select count(*) from worlds.audit where agent = 's21_bot' and action = 'write' and at > clock_timestamp() - interval '1 minute'")
admin -c "select count(*) from worlds.sql('alter agent s21_bot set (writes_per_minute = $((n + 1)))')" >/dev/null
ok "fork bot_q" "CREATE WORLD" s21_bot "$BOT" main "select j ->> 'tag' from worlds.sql('create world bot_q') j"
ok "a write within writes_per_minute" "" s21_bot "$BOT" bot_q "update acct set bal = bal where id = 1"
out=$(as s21_bot "$BOT" bot_q "update acct set bal = bal where id = 2" || true)
grep -q "42501.*writes_per_minute" <<<"$out" && echo "  ok   writes_per_minute: the next write is refused (42501)" || bad "writes_per_minute: $out"
# max_changes: rows its world may change; a statement past it writes nothing, COPY included
admin -c "select count(*) from worlds.sql('alter agent s21_bot set (writes_per_minute = 0, max_changes = 3)')" >/dev/null
ok "two more rows in bot_q" "" s21_bot "$BOT" bot_q "update acct set bal = bal + 1 where id in (2, 3)"
out=$(printf '20\t5\n21\t5\n' | as s21_bot "$BOT" bot_q "copy acct from stdin" || true)
grep -q "42501.*max_changes" <<<"$out" && echo "  ok   max_changes: a COPY past it is refused (42501)" || bad "max_changes COPY: $out"
out=$(as s21_bot "$BOT" bot_q "update acct set bal = bal + 1 where id in (4, 5)" || true)
grep -q "42501.*max_changes" <<<"$out" && echo "  ok   max_changes: an UPDATE past it is refused (42501)" || bad "max_changes UPDATE: $out"
ok "one more row is within it" "" s21_bot "$BOT" bot_q "update acct set bal = bal + 1 where id = 4"
expect "bot_q's rows: nothing of the refused statements" \
  "$(PGOPTIONS='-c worlds.world=bot_q' admin -c "select string_agg(id || ':' || bal, ',' order by id) from acct where id between 1 and 5 or id > 10")" \
  "1:995,2:1006,3:1001,4:1001,5:1000"
admin -c "select count(*) from worlds.sql('alter agent s21_bot set (max_changes = 0)')" >/dev/null
admin -c "select worlds.drop_world('bot_q')" >/dev/null
admin -c "select count(*) from worlds.sql('alter agent s21_peer set (max_worlds = 1, max_query_ms = ''300ms'', max_concurrent = 1)')" >/dev/null
out=$(as s21_peer "$PEER" main "select worlds.create_world('peer_w2')" || true)
grep -q "42501.*max_worlds" <<<"$out" && echo "  ok   max_worlds: 42501" || bad "max_worlds: $out"
ok "max_query_ms is its statement_timeout" "300ms" s21_peer "$PEER" main "show statement_timeout"
out=$(as s21_peer "$PEER" main "select pg_sleep(2)" || true)
grep -q "57014" <<<"$out" && echo "  ok   a statement past max_query_ms is cancelled (57014)" || bad "max_query_ms: $out"
# max_concurrent: its CONNECTION LIMIT
( PGPASSWORD=$PEER $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=s21_peer options='-c statement_timeout=0'" -X -qAt -c "select pg_sleep(3)" >/dev/null 2>&1 & )
sleep 1
out=$(as s21_peer "$PEER" main "select 1" || true)
grep -q "too many connections for role" <<<"$out" && echo "  ok   max_concurrent: a second connection is refused" || bad "max_concurrent: $out"
sleep 2.5
# disabled: its sessions end, it can't log in
( PGPASSWORD=$PEER $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=s21_peer options='-c statement_timeout=0'" -X -qAt -c "select pg_sleep(20)" >/tmp/s21_disabled.out 2>&1; echo "rc=$?" >>/tmp/s21_disabled.out ) &
sleep 1
admin -c "select count(*) from worlds.sql('alter agent s21_peer set (disabled = true, max_concurrent = 0)')" >/dev/null
wait
grep -q "terminat" /tmp/s21_disabled.out && echo "  ok   disabled: its running session is ended" || bad "disabled session: $(cat /tmp/s21_disabled.out)"
out=$(as s21_peer "$PEER" main "select 1" || true)
grep -q "not permitted to log in" <<<"$out" && echo "  ok   disabled: it can't log in" || bad "disabled login: $out"
admin -c "select count(*) from worlds.sql('alter agent s21_peer set (disabled = false, max_query_ms = 0)')" >/dev/null
ok "enabled again" "1" s21_peer "$PEER" main "select 1"

echo "check: the hostile suite (every attempt must fail; main and the worlds stay as they were)"
attempts=0; escapes=0
before=$(admin -c "select string_agg(id || ':' || bal, ',' order by id) from acct")
attempt() { # attempt WHAT USER PASSWORD WORLD SQL...: must fail
  local what=$1 out; shift
  attempts=$((attempts + 1))
  if out=$(as "$@"); then escapes=$((escapes + 1)); bad "ESCAPE: $what succeeded: $out"; else echo "  ok   refused: $what ($(echo "$out" | grep -m1 -o 'ERROR: .*' | cut -c1-110))"; fi
}
B=(s21_bot "$BOT" main)
attempt "insert into main" "${B[@]}" "insert into acct values (99, 1)"
attempt "update main" "${B[@]}" "update acct set bal = 0"
attempt "delete from main" "${B[@]}" "delete from acct"
attempt "update main in a CTE" "${B[@]}" "with x as (update acct set bal = 0 returning 1) select count(*) from x"
attempt "SQL MERGE into main" "${B[@]}" "merge into acct a using (select 1 id) s on a.id = s.id when matched then update set bal = 0"
attempt "COPY into main" "${B[@]}" "copy acct from stdin" 
attempt "TRUNCATE main" "${B[@]}" "truncate acct"
attempt "a plpgsql function writing main" "${B[@]}" "do \$\$ begin update acct set bal = 0; end \$\$"
attempt "a SQL function writing main" "${B[@]}" "select plain_zero()"
attempt "a SECURITY DEFINER function it doesn't own" "${B[@]}" "select zero_all()"
attempt "a prepared statement writing main" "${B[@]}" "prepare p as update acct set bal = 0" "execute p"
attempt "SET ROLE to a role it isn't" "${B[@]}" "set role postgres" "update acct set bal = 0"
attempt "SET SESSION AUTHORIZATION" "${B[@]}" "set session authorization postgres" "update acct set bal = 0"
attempt "switch to another's world and write" s21_bot "$BOT" peer_w "update acct set bal = 0 where id = 5"
attempt "write another's world through worlds.sql" s21_bot "$BOT" main "select * from worlds.sql('switch world people_w')" "update acct set bal = 0"
attempt "drop another's world" "${B[@]}" "select * from worlds.sql('drop world peer_w')"
attempt "drop a person's world" "${B[@]}" "select worlds.drop_world('people_w')"
attempt "alter another's world" "${B[@]}" "select * from worlds.sql('alter world peer_w set (x = 1)')"
attempt "merge another's world" "${B[@]}" "select * from worlds.sql('merge world peer_w')"
attempt "rebase another's world" "${B[@]}" "select * from worlds.sql('rebase world peer_w')"
attempt "checkpoint another's world" "${B[@]}" "select * from worlds.sql('checkpoint world peer_w as ''x''')"
attempt "restore main (no restore right)" "${B[@]}" "select * from worlds.sql('restore world main to ''-1 minute''')"
attempt "undo a merge (no restore right)" "${B[@]}" "select * from worlds.sql('undo merge of world bot_w')"
attempt "fork a past moment (admin only)" "${B[@]}" "select * from worlds.sql('create world past_w from ''main@-1 second''')"
attempt "raise its own rights" "${B[@]}" "select * from worlds.sql('alter agent s21_bot set (can = ''admin'')')"
attempt "raise its own quota" "${B[@]}" "select worlds.alter_agent('s21_peer', '{\"max_worlds\": 0}')"
attempt "make an agent" "${B[@]}" "select * from worlds.sql('create agent s21_evil')"
attempt "drop another agent" "${B[@]}" "select * from worlds.sql('drop agent s21_peer')"
attempt "write the agent catalog" "${B[@]}" "update worlds.agent set can = '{admin}' where name = 's21_bot'"
attempt "write the world catalog" "${B[@]}" "update worlds.world set owner = 's21_bot' where name = 'peer_w'"
attempt "write the audit" "${B[@]}" "delete from worlds.audit"
attempt "call the rights check's internals" "${B[@]}" "select worlds._audit('merge', 'x', 1)"
attempt "call the internal discard" "${B[@]}" "select worlds._discard(w) from worlds.world w where name = 'peer_w'"
attempt "read main's history directly" "${B[@]}" "select count(*) from $(admin -c "select history from worlds.tables where relid = 'acct'::regclass")"
attempt "write a world's delta directly" "${B[@]}" "delete from $(admin -c "select delta from worlds.tables where relid = 'acct'::regclass")"
attempt "read secrets (no SELECT) in main" "${B[@]}" "select * from secrets"
attempt "read secrets through DIFF of a world" s21_bot "$BOT" main "select * from worlds.sql('diff world people_w')"
attempt "read secrets through MERGE ... DRY RUN" s21_bot "$BOT" main "select * from worlds.sql('merge world people_w dry run')"
attempt "read secrets through DIFF ... TO" s21_bot "$BOT" main "select * from worlds.sql('diff world main to people_w')"
attempt "read secrets in the world" s21_bot "$BOT" people_w "select * from secrets"
attempt "read secrets AS OF" "${B[@]}" "select * from worlds.sql('select * from secrets as of ''-1 second''')"
attempt "read secrets through worlds.as_of" "${B[@]}" "select * from worlds.as_of(null::secrets, now())"
attempt "search_path: temp tables named like the catalog" "${B[@]}" "create temp table world (num int, owner text)" "create temp table agent (name text, can text[])" "insert into agent values ('s21_bot', '{admin}')" "set search_path = pg_temp, public, worlds" "select * from worlds.sql('drop world peer_w')"
attempt "a name with a NUL" "${B[@]}" "select * from worlds.sql(E'create world a\\\\u0000b')"
attempt "a world name 10 kB long" "${B[@]}" "select * from worlds.sql('create world ' || repeat('x', 10000))"
attempt "metadata of 100 kB" "${B[@]}" "select worlds.create_world('big_meta', meta => jsonb_build_object('x', repeat('y', 100000)))"
attempt "an agent name with a quote" "${B[@]}" "select * from worlds.sql('create agent \"a''b\"')"
attempt "plain role: make an agent" s21_plain plain-pw main "select * from worlds.sql('create agent s21_evil')"
attempt "plain role: drop a person's world" s21_plain plain-pw main "select * from worlds.sql('drop world people_w')"
attempt "plain role: drop an agent's world" s21_plain plain-pw main "select * from worlds.sql('drop world peer_w')"
attempt "plain role: merge an agent's world" s21_plain plain-pw main "select * from worlds.sql('merge world peer_w')"
attempt "plain role: alter an agent's rights" s21_plain plain-pw main "select * from worlds.sql('alter agent s21_bot set (can = ''admin'')')"
attempt "plain role: set history retention" s21_plain plain-pw main "select * from worlds.sql('alter system set history_retention = ''0''')"
after=$(admin -c "select string_agg(id || ':' || bal, ',' order by id) from acct")
expect "main's rows after the hostile suite" "$after" "$before"
expect "peer_w and people_w still live" "$(admin -c "select string_agg(name, ',' order by name) from worlds.world where dropped is null and name in ('peer_w', 'people_w')")" "peer_w,people_w"
expect "rights unchanged" "$(admin -c "select string_agg(name || '=' || array_to_string(can, ','), ' ' order by name) from worlds.agent")" "s21_bot=read,fork,write_own,merge_own s21_peer=read,fork,write_own"
echo "  hostile suite: $attempts attempts, $escapes escapes"
[ "$escapes" -eq 0 ] || bad "$escapes escapes"

echo "check: search_path tricks can't run the agent's code with pg_worlds' rights"
admin -c "create schema s21_evil authorization s21_bot" >/dev/null
ok "the agent's own functions, more exact than the built-ins pg_worlds calls" "" s21_bot "$BOT" main \
  "create table s21_evil.ran (who text)" \
  "create function s21_evil.to_jsonb(acct) returns jsonb language sql as \$\$ insert into s21_evil.ran values (current_user); alter role s21_bot superuser; select pg_catalog.to_jsonb(\$1) \$\$" \
  "create function s21_evil.jsonb_populate_record(acct, jsonb) returns acct language sql as \$\$ insert into s21_evil.ran values (current_user); alter role s21_bot superuser; select pg_catalog.jsonb_populate_record(\$1, \$2) \$\$" \
  "create function s21_evil.jsonb_build_object(text, int, text, int) returns jsonb language sql as \$\$ insert into s21_evil.ran values (current_user); alter role s21_bot superuser; select pg_catalog.jsonb_build_object(\$1, \$2, \$3, \$4) \$\$" \
  "create function s21_evil.count(int) returns bigint language sql as \$\$ insert into s21_evil.ran values (current_user); alter role s21_bot superuser; select 1::bigint \$\$"
ok "fork bot_e" "CREATE WORLD" s21_bot "$BOT" main "select j ->> 'tag' from worlds.sql('create world bot_e') j"
EVIL="set search_path = s21_evil, public, pg_catalog"
as s21_bot "$BOT" bot_e "$EVIL" "update acct set bal = bal + 1 where id = 6" "select count(*) from acct" >/dev/null 2>&1 || true
as s21_bot "$BOT" main "$EVIL" "select * from worlds.sql('diff world bot_e')" >/dev/null 2>&1 || true
as s21_bot "$BOT" main "$EVIL" "select * from worlds.sql('merge world bot_e dry run')" >/dev/null 2>&1 || true
as s21_bot "$BOT" main "$EVIL" "select * from worlds.sql('merge world bot_e')" >/dev/null 2>&1 || true
expect "the agent is still not a superuser" "$(admin -c "select rolsuper from pg_roles where rolname = 's21_bot'")" "f"
expect "its functions ran only as itself, if at all" "$(admin -c "select coalesce(string_agg(distinct who, ','), 'never') from s21_evil.ran")" "never"
admin -c "drop schema s21_evil cascade" >/dev/null 2>&1
admin -c "select worlds.drop_world('bot_e')" >/dev/null 2>&1 || true

echo "check: UNDO AGENT from an agent's own connection (restore and merge)"
out=$(as s21_bot "$BOT" main "select * from worlds.sql('undo agent s21_bot since ''$START''')" || true)
grep -q "42501" <<<"$out" && echo "  ok   without restore and merge: 42501" || bad "undo without rights: $out"
admin -c "select count(*) from worlds.sql('alter agent s21_bot set (can = ''read,fork,write_own,merge_own,restore,merge'')')" >/dev/null
ok "UNDO AGENT puts back its merges (bot_w's two rows, bot_e's one)" '{"tag": "UNDO AGENT 3"}' s21_bot "$BOT" main "select * from worlds.sql('undo agent s21_bot since ''$START''')"
expect "main as before the agent" "$(admin -c "select string_agg(bal::text, ',' order by id) from acct where id <= 2")" "1000,1000"
expect "total" "$(admin -c "$TOTAL")" "10000"

echo "check: DROP AGENT drops the role and keeps its worlds and audit"
admin -c "select worlds.drop_agent('s21_peer')" >/dev/null
expect "role gone" "$(admin -c "select count(*) from pg_roles where rolname = 's21_peer'")" "0"
expect "its world stays" "$(admin -c "select owner from worlds.show_worlds() where name = 'peer_w'")" "s21_peer"
expect "its audit stays" "$(admin -c "select count(*) > 0 from worlds.audit where agent = 's21_peer'")" "t"
admin -c "select worlds.drop_agent('s21_bot')" >/dev/null

[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: agents"
