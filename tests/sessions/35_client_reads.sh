#!/usr/bin/env bash
# Clients seen reading (governance/readers/clients.rs, clients_shmem.rs): several sessions, roles and
# application_names; a read in a world; rights as pg_stat_statements; worlds.record_reads = off; a clean
# restart keeps the entries, a kill -9 (crash restart) keeps what the worker saved before it; 100,000+
# distinct (client, table, column)s keep the count at 100,000 at most, the newest kept.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s35_client_reads
OUT=$RUN_DIR/s35_client_reads; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
# (roles are the cluster's: made once, kept)
psql_in $CL -q -c "do \$\$ declare r text; begin foreach r in array array['billing', 'crm', 'snoop', 'stats'] loop
  if not exists (select 1 from pg_roles where rolname = r) then execute format('create role %I login', r); end if; end loop; end \$\$" \
  -c "set client_min_messages = warning" -c "grant pg_read_all_stats to stats"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table leads (id int primary key, status text, score int, note text);
insert into leads values (1, 'new', 0, 'x'), (2, 'won', 0, 'y');
grant select on leads to billing, snoop, stats;
grant select, update on leads to crm;
SQL
q() { psql_in $CL -d $DB -qAt "$@"; }
as() { # as ROLE APPNAME [psql args...]: a session of that role and application_name
  local role=$1 app=$2; shift 2
  psql "$(conninfo $CL $DB) user=$role application_name=$app" -XqAt -v ON_ERROR_STOP=1 "$@"
}
reads() { q -c "select string_agg(client || ':' || \"table\" || '.' || \"column\", ' ' order by client, \"column\") from worlds.client_reads() where $1"; }

echo "check: two clients, each its columns"
as billing nightly -c "select status from leads where id = 1" >/dev/null
as crm "" -c "update leads set score = 1 where note = 'x'" >/dev/null
expect "billing (nightly) read status (and id, its WHERE)" "$(reads "role = 'billing'")" "billing (nightly):leads.id billing (nightly):leads.status"
expect "crm's UPDATE read its WHERE and SET (no application_name: the role alone)" "$(reads "role = 'crm'")" "crm:leads.note crm:leads.score"
expect "application_name and role columns" "$(q -c "select role || '|' || application_name from worlds.client_reads() where role = 'billing' limit 1")" "billing|nightly"

echo "check: a read inside a world counts, under the user's table"
q -c "select worlds.create_world('w35')" >/dev/null
q -c "grant update on leads to billing" >/dev/null
PGOPTIONS="-c worlds.world=w35" as billing inworld -c "select note from leads where id = 2" -c "update leads set score = 2 where status = 'won'" >/dev/null
expect "billing (inworld) read note, id, and the UPDATE's status and score" "$(reads "application_name = 'inworld'")" \
  "billing (inworld):leads.id billing (inworld):leads.note billing (inworld):leads.score billing (inworld):leads.status"
PGOPTIONS="-c worlds.world=w35 -c worlds.world_scan=off" as billing inworld2 -c "select note from leads where id = 2" >/dev/null
expect "through the overlay views too (not every column the view reads)" "$(reads "application_name = 'inworld2'")" \
  "billing (inworld2):leads.id billing (inworld2):leads.note"
expect "main's row untouched by the world's UPDATE" "$(q -c "select score from leads where id = 2")" "0"

echo "check: rights as pg_stat_statements"
as snoop app -c "select score from leads" >/dev/null
expect "a role without pg_read_all_stats sees only its own rows" "$(as snoop app -c "select string_agg(distinct client, ',') from worlds.client_reads()")" "snoop (app)"
expect "a member of pg_read_all_stats sees every client" "$(as stats app -c "select count(distinct role) >= 4 from worlds.client_reads()")" "t"
expect "worlds.record_reads can't be set by a plain role" "$(as snoop app -c "set worlds.record_reads = off" 2>&1 | grep -c 'permission denied')" "1"

echo "check: worlds.record_reads = off records nothing"
PGOPTIONS="-c worlds.record_reads=off" psql "$(conninfo $CL $DB) application_name=quiet" -XqAt -c "select status, note from leads" >/dev/null
expect "nothing for the quiet client" "$(q -c "select count(*) from worlds.client_reads() where application_name = 'quiet'")" "0"

echo "check: the same session records a column at most once a minute"
before=$(q -c "select last_read from worlds.client_reads() where client = 'billing (nightly)' and \"column\" = 'status'")
as billing nightly -c "select status from leads" -c "select pg_sleep(0.1)" -c "select status from leads" >/dev/null
after=$(q -c "select last_read from worlds.client_reads() where client = 'billing (nightly)' and \"column\" = 'status'")
[ "$before" != "$after" ] && echo "  ok   a new session records again ($before -> $after)" || bad "a new session didn't record: $before"
s=$(as billing nightly -c "select status from leads" -c "select last_read from worlds.client_reads() where client = 'billing (nightly)' and \"column\" = 'status'" -c "select pg_sleep(0.2)" -c "select status from leads" -c "select last_read from worlds.client_reads() where client = 'billing (nightly)' and \"column\" = 'status'" | grep -v '^$' | grep -v 'new\|won' | sort -u | wc -l)
expect "a repeat read in the same session within the minute keeps the first last_read" "$s" "1"

echo "check: a clean restart keeps the entries and since"
n=$(q -c "select count(*) from worlds.client_reads()")
since=$(q -c "select worlds.client_reads_since()")
stop_cluster $CL; start_cluster $CL yes
expect "entries after a clean restart" "$(q -c "select count(*) from worlds.client_reads()")" "$n"
expect "since after a clean restart" "$(q -c "select worlds.client_reads_since()")" "$since"

echo "check: kill -9 of a backend keeps what was saved before the crash"
psql_in $CL -qAt -c "alter system set worlds.client_reads_save_interval = 2" -c "select pg_reload_conf()" >/dev/null
as billing before_crash -c "select note from leads" >/dev/null
sleep 4   # (the worker saves within 2 s, checking every second)
n=$(q -c "select count(*) from worlds.client_reads()")
as billing sleeper -c "select pg_sleep(60)" >/dev/null 2>&1 &
SLEEPER=$!
victim=""
for _ in $(seq 1 50); do
  victim=$(q -c "select pid from pg_stat_activity where application_name = 'sleeper' limit 1")
  [ -n "$victim" ] && break; sleep 0.1
done
[ -n "$victim" ] && kill -9 "$victim" || bad "no backend to kill"
wait $SLEEPER 2>/dev/null || true
for _ in $(seq 1 60); do q -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
grep -q "terminated by signal 9" "$(cluster_dir $CL)/server.log" && echo "  ok   the cluster went through a crash restart" || bad "no crash restart in the log"
expect "billing (before_crash) kept through the crash" "$(reads "application_name = 'before_crash'")" "billing (before_crash):leads.note"
expect "entries after the crash" "$(q -c "select count(*) from worlds.client_reads()")" "$n"
expect "since after the crash" "$(q -c "select worlds.client_reads_since()")" "$since"

echo "check: 100,000+ distinct entries don't overflow, the newest kept"
psql_in $CL -d $DB -q -c "create table wide ($(seq -s, -f 'c%g int' 1 100))" -c "insert into wide default values" -c "grant select on wide to billing"
{ for i in $(seq 1 1010); do echo "set application_name = 'bulk_$i';"; echo "select * from wide;"; done; } >"$OUT/bulk.sql"
as billing bulk -f "$OUT/bulk.sql" >/dev/null
total=$(q -c "select worlds._client_reads_count()")
[ "$total" -le 100000 ] && [ "$total" -ge 99000 ] && echo "  ok   $total entries kept (at most 100,000)" || bad "entries kept: $total"
expect "the newest client's every column kept" "$(q -c "select count(*) from worlds.client_reads() where application_name = 'bulk_1010'")" "100"
expect "the oldest bulk client dropped" "$(q -c "select count(*) from worlds.client_reads() where application_name = 'bulk_1'")" "0"
expect "the earlier clients (older still) dropped first" "$(q -c "select count(*) from worlds.client_reads() where application_name = 'nightly'")" "0"
stop_cluster $CL; start_cluster $CL yes
expect "the full table saved and loaded at a clean restart" "$(q -c "select worlds._client_reads_count()")" "$total"

psql_in $CL -qAt -c "alter system reset worlds.client_reads_save_interval" -c "select pg_reload_conf()" >/dev/null
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: client reads"
