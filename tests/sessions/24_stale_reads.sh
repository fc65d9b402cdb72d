#!/usr/bin/env bash
# Stale reads across sessions, restarts and crashes (its own cluster: it restarts it and kills it):
#   - an agent logged in with its token (TCP, scram) reads a balance in its world inside a transaction
#     while a person changes it in main; its merge is refused and queued; a world whose reads didn't
#     move merges;
#   - workers race: each forks a world that checks its reads, reads an account's generation, writes a
#     payout citing it, and merges (retrying on 40001), while a person bumps generations in main. An
#     AFTER trigger in main records any payout merged on a generation that was no longer current:
#     there must be none, and merges must both succeed and be refused;
#   - a clean restart keeps what worlds read (a moved read still holds, an unmoved world merges);
#   - kill -9 of a backend (the postmaster reinitializes shared memory): a world that checks its reads is
#     held, "relies on reads made before the database restarted", until a person turns the check off.
source "$(dirname "$0")/common.sh"

C=s24
start_cluster $C yes
DIR=$(cluster_dir $C)
PORT=$(cat "$DIR/port")
DB=s24_reads
HBA=$(psql_in $C -qAt -c "show hba_file")
line="host all s24_bot 127.0.0.1/32 scram-sha-256 # s24"
if ! grep -q "# s24$" "$HBA"; then
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- sed -i "1i $line" "$HBA"; else sed -i "1i $line" "$HBA"; fi
fi
psql_in $C -qAt -c "select pg_reload_conf()" >/dev/null
trap 'stop_cluster $C' EXIT
psql_in $C -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "drop role if exists s24_bot" -c "create database $DB"
psql_in $C -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table accounts (id int primary key, balance int not null, gen int not null default 0);
insert into accounts select g, 100, 0 from generate_series(1, 40) g;
create table payouts (id bigserial primary key, account int not null, seen_gen int not null, amount int not null);
create table violations (payout bigint, account int, seen_gen int, gen int);
create function check_payout() returns trigger language plpgsql security definer set search_path = public as $$
begin
  insert into violations select new.id, new.account, new.seen_gen, a.gen from accounts a where a.id = new.account and a.gen <> new.seen_gen;
  return null;
end $$;
create trigger check_payout after insert on payouts for each row execute function check_payout();
grant select, insert, update on accounts, payouts to public;
grant usage on sequence payouts_id_seq to public;
select * from worlds.sql('create merge policy careful with (check_reads = true)');
SQL
admin() { psql_in $C -d $DB -qAt "$@"; }
TOKEN=$(admin -c "select j ->> 'token' from worlds.sql('create agent s24_bot with (can = ''read,fork,write_own,merge_own'', policy = ''careful'')') j")
bot() { PGPASSWORD=$TOKEN $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=s24_bot" -X -qAt "$@" 2>&1 || true; }

echo "check: an agent reads while a person changes main"
bot -c "select worlds.create_world('bot_pay')" >/dev/null
expect "the policy turned check_reads on" "$(admin -c "select meta ->> 'check_reads' from worlds.world where name = 'bot_pay'")" "true"
fifo=/tmp/s24_fifo; rm -f $fifo; mkfifo $fifo
( PGPASSWORD=$TOKEN $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=s24_bot options='-c worlds.world=bot_pay'" -X -qAt <$fifo >/tmp/s24_bot.out 2>&1 ) &
bp=$!
exec 7>$fifo
echo "begin; select balance from accounts where id = 1;" >&7
sleep 0.5
admin -c "update accounts set balance = 60, gen = gen + 1 where id = 1" >/dev/null
echo "insert into payouts (account, seen_gen, amount) values (1, 0, 100); commit;" >&7
exec 7>&-
wait $bp || true
rm -f $fifo
expect "the agent read the balance it saw" "$(head -1 /tmp/s24_bot.out)" "100"
expect "CHECK READS from the agent's login" "$(bot -c "select j ->> 'changed' from worlds.sql('check reads of world bot_pay') j")" "read rows that changed since it forked: accounts/1"
out=$(bot -v VERBOSITY=verbose -c "select * from worlds.sql('merge world bot_pay')")
case "$out" in *42501*"read rows that changed since it forked: accounts/1"*"waits in SHOW REVIEWS"*) echo "  ok   the agent's merge is refused and queued";; *) bad "agent merge: $out";; esac
for i in $(seq 1 100); do [ "$(admin -c "select count(*) from worlds.review")" = "1" ] && break; sleep 0.1; done
expect "SHOW REVIEWS has it" "$(admin -c "select world || ': ' || array_to_string(reasons, '; ') from worlds.show_reviews()")" "bot_pay: read rows that changed since it forked: accounts/1"
expect "nothing of it reached main" "$(admin -c "select count(*) from payouts")" "0"
bot -c "select worlds.create_world('bot_ok')" >/dev/null
bot -c "set worlds.world = bot_ok" -c "select balance from accounts where id = 2" -c "insert into payouts (account, seen_gen, amount) values (2, 0, 5)" >/dev/null
admin -c "update accounts set balance = 1 where id = 3" >/dev/null
expect "a world whose reads didn't move merges" "$(bot -c "select j ->> 'tag' from worlds.sql('merge world bot_ok') j")" "MERGE 1"
admin -c "select worlds.drop_world('bot_pay')" >/dev/null

echo "check: workers racing a person who changes what they read"
SECS=${S24_SECONDS:-12}
worker() {
  local w=$1 merged=0 refused=0 other=0 n=0 end=$((SECONDS + SECS))
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1)); local name="w${w}_$n" acct=$(( (RANDOM % 40) + 1 ))
    admin -c "select worlds.create_world('$name', meta => '{\"check_reads\": true}')" >/dev/null 2>&1 || { other=$((other + 1)); continue; }
    PGOPTIONS="-c worlds.world=$name" admin -c "insert into payouts (account, seen_gen, amount) select id, gen, 1 from accounts where id = $acct" >/dev/null 2>&1 || true
    local r; r=$(admin -v VERBOSITY=verbose -c "select j ->> 'tag' from worlds.sql('merge world $name') j" 2>&1 || true)
    case "$r" in "MERGE 1") merged=$((merged + 1));; *40001*) refused=$((refused + 1)); admin -c "select worlds.drop_world('$name')" >/dev/null 2>&1;; *) other=$((other + 1)); echo "  worker $w: $r" >&2; admin -c "select worlds.drop_world('$name')" >/dev/null 2>&1;; esac
  done
  echo "$merged $refused $other" >/tmp/s24_worker_$w
}
person() {
  local end=$((SECONDS + SECS))
  while [ $SECONDS -lt $end ]; do
    admin -c "update accounts set gen = gen + 1, balance = balance + 1 where id = $(( (RANDOM % 40) + 1 ))" >/dev/null 2>&1 || true
  done
}
pids=()
for w in 1 2 3; do worker $w & pids+=($!); done
person & pids+=($!)
for p in "${pids[@]}"; do wait $p || true; done
read m1 r1 o1 </tmp/s24_worker_1; read m2 r2 o2 </tmp/s24_worker_2; read m3 r3 o3 </tmp/s24_worker_3
merged=$((m1 + m2 + m3)); refused=$((r1 + r2 + r3)); other=$((o1 + o2 + o3))
echo "  merges: $merged merged, $refused refused (40001), $other other"
expect "payouts merged on a generation no longer current" "$(admin -c "select count(*) from violations")" "0"
[ $merged -gt 0 ] || bad "no merge went through"
[ $refused -gt 0 ] || bad "no merge was refused: the race didn't happen"
expect "other outcomes" "$other" "0"
expect "payouts in main are the merges" "$(admin -c "select count(*) - 1 from payouts")" "$merged"

echo "check: a clean restart keeps what worlds read"
admin -c "select worlds.create_world('moved', meta => '{\"check_reads\": true}')" -c "select worlds.create_world('still', meta => '{\"check_reads\": true}')" >/dev/null
PGOPTIONS="-c worlds.world=moved" admin -c "select balance from accounts where id = 10" >/dev/null
PGOPTIONS="-c worlds.world=still" admin -c "select balance from accounts where id = 11" -c "insert into payouts (account, seen_gen, amount) select 11, gen, 1 from accounts where id = 11" >/dev/null
stop_cluster $C; start_cluster $C yes
[ -f "$DIR/data/pg_worlds_readsets" ] && bad "the saved read sets stay on disk after the start loaded them"
admin -c "update accounts set balance = 0 where id = 10" >/dev/null
expect "a moved read still holds after the restart" "$(admin -c "select j ->> 'changed' from worlds.sql('check reads of world moved') j")" "read rows that changed since it forked: accounts/10"
expect "an unmoved world merges after the restart" "$(admin -c "select j ->> 'tag' from worlds.sql('merge world still') j")" "MERGE 1"

echo "check: kill -9 holds a world that checks its reads"
admin -c "select worlds.create_world('crashed', meta => '{\"check_reads\": true}')" >/dev/null
PGOPTIONS="-c worlds.world=crashed" admin -c "select balance from accounts where id = 12" -c "insert into payouts (account, seen_gen, amount) select 12, gen, 1 from accounts where id = 12" >/dev/null
( admin -c "select pg_sleep(30)" >/dev/null 2>&1 & )
victim=""; for i in $(seq 1 50); do victim=$(admin -c "select pid from pg_stat_activity where query = 'select pg_sleep(30)'" 2>/dev/null); [ -n "$victim" ] && break; sleep 0.1; done
[ -n "$victim" ] && kill -9 "$victim"
for i in $(seq 1 100); do admin -c "select 1" >/dev/null 2>&1 && break; sleep 0.2; done
out=$(admin -v VERBOSITY=verbose -c "select * from worlds.sql('merge world crashed')" 2>&1 || true)
case "$out" in *40001*"merging crashed relies on reads made before the database restarted"*) echo "  ok   held after the crash";; *) bad "after kill -9: $out";; esac
expect "CHECK READS says why" "$(admin -c "select j ->> 'changed' from worlds.sql('check reads of world crashed') j")" "relies on reads made before the database restarted"
admin -c "select * from worlds.sql('alter world crashed set (check_reads = false)')" >/dev/null
expect "a person turns the check off and it merges" "$(admin -c "select j ->> 'tag' from worlds.sql('merge world crashed') j")" "MERGE 1"
expect "no violation recorded through it all" "$(admin -c "select count(*) from violations")" "0"
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: stale reads across sessions, restarts and crashes"
