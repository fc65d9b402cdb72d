#!/usr/bin/env bash
# Readers and blast radius across sessions (governance/readers): clients with their own roles and
# application_names read main while an agent, logged in with its token over TCP, works in a world and
# merges; DIFF ... READERS shows the clients; MARK READER billing CRITICAL makes the policy's critical
# rule hold the agent's merge that changes what billing reads (42501, queued in SHOW REVIEWS), while a
# change no critical reader reads merges on its own. Reads keep being recorded under merges and several
# readers at once (no error, nothing lost), and a clean restart keeps them.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s36_readers
OUT=$RUN_DIR/s36_readers; rm -rf "$OUT"; mkdir -p "$OUT"
HBA=$(psql_in $CL -qAt -c "show hba_file")
restore_hba() {
  [ "$(id -u)" -eq 0 ] && runuser -u postgres -- sed -i '/# s36_readers$/d' "$HBA" || sed -i '/# s36_readers$/d' "$HBA"
  psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null
}
trap restore_hba EXIT
restore_hba
line="host all r36_bot 127.0.0.1/32 scram-sha-256 # s36_readers"
if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- sed -i "1i $line" "$HBA"; else sed -i "1i $line" "$HBA"; fi
psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null

psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "drop role if exists r36_bot" -c "create database $DB"
psql_in $CL -q -c "do \$\$ declare r text; begin foreach r in array array['r36_billing', 'r36_crm'] loop
  if not exists (select 1 from pg_roles where rolname = r) then execute format('create role %I login', r); end if; end loop; end \$\$"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table leads (id int primary key, status text check (status in ('new', 'won')), score int not null, note text);
insert into leads select g, 'new', 0, 'n' from generate_series(1, 200) g;
create view open_leads as select id, score from leads where status = 'new';
grant select on leads, open_leads to r36_billing, r36_crm;
grant select, insert, update, delete on leads to public;
select * from worlds.sql('create merge policy r36_careful with (max_rows = 1000)');
SQL
q() { psql_in $CL -d $DB -qAt "$@"; }
as() { local role=$1 app=$2; shift 2; psql "$(conninfo $CL $DB) user=$role application_name=$app" -XqAt -v ON_ERROR_STOP=1 "$@"; }
TOKEN=$(q -c "select j ->> 'token' from worlds.sql(\$s\$create agent r36_bot with (can = 'read,fork,write_own,merge_own', policy = 'r36_careful')\$s\$) j")
[ ${#TOKEN} -ge 30 ] || fail "no token: $TOKEN"
bot() { PGPASSWORD=$TOKEN psql "host=127.0.0.1 port=$(cat "$(cluster_dir $CL)/port") dbname=$DB user=r36_bot" -XqAt -v ON_ERROR_STOP=1 "$@"; }
expect "the agent logs in with its token" "$(bot -c "select session_user")" "r36_bot"

echo "check: clients read while the agent works and merges (readers in loops, merges racing)"
reader() { # reader ROLE APP COLUMNS: reads in a loop until the stop file appears; counts errors
  local n=0 errs=0
  while [ ! -e "$OUT/stop" ]; do
    as "$1" "$2" -c "select $3 from leads where id = $((RANDOM % 200 + 1))" >/dev/null 2>>"$OUT/$2.err" || errs=$((errs + 1))
    n=$((n + 1))
  done
  echo "$n $errs" >"$OUT/$2.count"
}
reader r36_billing nightly status &
reader r36_crm sync note &
reader r36_billing adhoc score &
# the agent: worlds changing scores (no one critical reads them yet), merged while the readers read
merges=0
for i in $(seq 1 6); do
  bot -c "select worlds.create_world('b36_$i')" >/dev/null
  PGOPTIONS="-c worlds.world=b36_$i" bot -c "update leads set score = score + 1 where id % 6 = $((i % 6))" >/dev/null
  r=$(bot -c "select count(*) from worlds.sql('merge world b36_$i')" 2>&1) && merges=$((merges + 1)) || echo "  merge b36_$i: $r"
done
touch "$OUT/stop"; wait
expect "the agent's six merges went through" "$merges" "6"
for app in nightly sync adhoc; do
  read -r n errs <"$OUT/$app.count"
  [ "$n" -gt 0 ] && [ "$errs" -eq 0 ] && echo "  ok   reader $app: $n reads, no error" || bad "reader $app: $n reads, $errs errors ($(head -3 "$OUT/$app.err"))"
done
expect "every score change landed (each row once: totals kept)" "$(q -c "select sum(score) || '/' || max(score) from leads")" "200/1"
clients() { q -c "select string_agg(client || ':' || \"column\", ' ' order by client, \"column\") from worlds.client_reads() where \"table\" = 'leads'::regclass and role in ('r36_billing', 'r36_crm')"; }
expect "each client's columns recorded (its SELECT list and WHERE)" "$(clients)" \
  "r36_billing (adhoc):id r36_billing (adhoc):score r36_billing (nightly):id r36_billing (nightly):status r36_crm (sync):id r36_crm (sync):note"

echo "check: DIFF ... READERS in the agent's world shows them"
bot -c "select worlds.create_world('crit36')" >/dev/null
PGOPTIONS="-c worlds.world=crit36" bot -c "update leads set status = 'won' where id = 7" >/dev/null
diffr() { bot -c "select string_agg((j ->> 'kind') || ':' || (j ->> 'reader') || ':' || (j ->> 'critical'), ' ' order by j ->> 'kind', j ->> 'reader') from worlds.sql('diff world crit36 readers') j where j ->> 'kind' in ('client', 'view', 'check')"; }
expect "the clients that read status (every one, as pg_stat_activity names them), the view, the CHECK (none critical yet)" "$(diffr)" \
  "check:leads_status_check:false client:r36_billing (nightly):false client:r36_bot (psql):false view:open_leads:false"
expect "the agent (no pg_read_all_stats) sees only its own clients' reads in client_reads()" "$(bot -c "select count(*) from worlds.client_reads() where role <> 'r36_bot'")" "0"

echo "check: MARK READER r36_billing CRITICAL: the policy's critical rule holds the agent's merge"
q -c "select * from worlds.sql('mark reader r36_billing critical')" >/dev/null
expect "now critical, and first" "$(bot -c "select (j ->> 'reader') || ':' || (j ->> 'critical') from worlds.sql('diff world crit36 readers') j limit 1")" "r36_billing (nightly):true"
err=$(bot -c "select * from worlds.sql('merge world crit36')" 2>&1 || true)
expect "42501, naming the column and the critical client" "$(echo "$err" | grep -o 'it changes leads.status, which critical client r36_billing (nightly) reads' | head -1)" \
  "it changes leads.status, which critical client r36_billing (nightly) reads"
for _ in $(seq 1 100); do [ "$(q -c "select count(*) from worlds.show_reviews() where world = 'crit36'")" = 1 ] && break; sleep 0.1; done
expect "queued in SHOW REVIEWS with the reason" "$(q -c "select array_to_string(reasons, '; ') from worlds.show_reviews() where world = 'crit36'")" \
  "changes leads.status, which critical client r36_billing (nightly) reads"
expect "main's status untouched" "$(q -c "select status from leads where id = 7")" "new"
echo "check: a change no critical reader reads merges on its own"
bot -c "select worlds.create_world('safe36')" >/dev/null
PGOPTIONS="-c worlds.world=safe36" bot -c "update leads set note = 'checked' where id = 8" >/dev/null
expect "r36_billing reads status and score, not note (r36_crm does, not critical): merged" "$(bot -c "select j ->> 'tag' from worlds.sql('merge world safe36') j")" "MERGE 1"
echo "check: a person approves the queued one"
expect "the person merges it" "$(q -c "select j ->> 'tag' from worlds.sql('merge world crit36') j")" "MERGE 1"
expect "status changed in main" "$(q -c "select status from leads where id = 7")" "won"

echo "check: a clean restart keeps the recorded reads and the mark"
stop_cluster $CL; start_cluster $CL yes
expect "the clients' reads after the restart" "$(clients)" \
  "r36_billing (adhoc):id r36_billing (adhoc):score r36_billing (nightly):id r36_billing (nightly):status r36_crm (sync):id r36_crm (sync):note"
expect "the mark, on the role's every program" "$(q -c "select string_agg(reader || ':' || kind, ' ' order by reader) from worlds.show_readers() where critical")" \
  "r36_billing (adhoc):client r36_billing (nightly):client"

q -c "select * from worlds.sql('unmark reader r36_billing')" >/dev/null
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: readers"
