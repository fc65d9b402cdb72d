#!/usr/bin/env bash
# Merge policies from real connections: an agent logs in with its token (TCP, scram-sha-256) and merges
# within its policy on its own; past it, its merge is refused (42501) and queued, a person's session
# LISTENing on worlds_reviews hears it, and two people approving the same version at once apply it once.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s22_policies
DIR=$(cluster_dir $CL)
PORT=$(cat "$DIR/port")
HBA=$(psql_in $CL -qAt -c "show hba_file")
restore_hba() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- sed -i '/# s22_policies$/d' "$HBA"; else sed -i '/# s22_policies$/d' "$HBA"; fi
  psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null
}
trap restore_hba EXIT
restore_hba
line="host all s22_bot 127.0.0.1/32 scram-sha-256 # s22_policies"
if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- sed -i "1i $line" "$HBA"; else sed -i "1i $line" "$HBA"; fi
psql_in $CL -qAt -c "select pg_reload_conf()" >/dev/null

psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "drop role if exists s22_bot" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, bal int not null);
insert into acct select g, 1000 from generate_series(1, 50) g;
grant select, insert, update, delete on acct to public;
select * from worlds.sql('create merge policy small with (max_rows = 4, max_deletes = 0)');
SQL
BOT=$(psql_in $CL -d $DB -qAt -c "select j ->> 'token' from worlds.sql('create agent s22_bot with (can = ''read,fork,write_own,merge_own'', policy = ''small'')') j")
as() { # as WORLD SQL...: the agent's own TCP login
  local world=$1; shift
  local a=(); for s in "$@"; do a+=(-c "$s"); done
  PGPASSWORD=$BOT $PGBIN/psql "host=127.0.0.1 port=$PORT dbname=$DB user=s22_bot options='-c worlds.world=$world'" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "${a[@]}" 2>&1
}
admin() { psql_in $CL -d $DB -qAt "$@"; }
TOTAL="select sum(bal) from acct"

echo "check: within its policy the agent merges on its own"
out=$(as main "select j ->> 'tag' from worlds.sql('create world a1') j") ; expect "fork" "$out" "CREATE WORLD"
as a1 "update acct set bal = bal - 10 where id = 1" "update acct set bal = bal + 10 where id = 2" >/dev/null
expect "its merge" "$(as main "select j ->> 'tag' from worlds.sql('merge world a1') j")" "MERGE 2"
expect "total" "$(admin -c "$TOTAL")" "50000"

echo "check: past it the merge is refused and queued; a listening person hears it"
( psql_in $CL -d $DB -qAt -c "listen worlds_reviews" -c "select pg_sleep(4)" -c "select 1" >/tmp/s22_listen.out 2>&1 ) &
listener=$!
sleep 0.5
as main "select * from worlds.sql('create world big')" >/dev/null
as big "update acct set bal = bal - 1 where id <= 5" "update acct set bal = bal + 5 where id = 6" >/dev/null
out=$(as main "select * from worlds.sql('merge world big')" || true)
grep -q "42501.*needs a person.*changes 6 rows (max_rows 4)" <<<"$out" && echo "  ok   refused with its reasons (42501)" || bad "refusal: $out"
expect "main untouched" "$(admin -c "select bal from acct where id = 6")" "1000"
wait $listener
grep 'Asynchronous notification "worlds_reviews"' /tmp/s22_listen.out | grep '"world": "big"' | grep -q '"event": "queued"' \
  && echo "  ok   LISTEN worlds_reviews: queued" || bad "listen: $(cat /tmp/s22_listen.out)"
expect "SHOW REVIEWS" "$(admin -c "select world || ' ' || owner || ' ' || policy || ' ' || array_to_string(reasons, '; ') from worlds.show_reviews()")" \
  "big s22_bot small changes 6 rows (max_rows 4)"
expect "the agent sees the queue too" "$(as main "select count(*) from worlds.sql('show reviews')")" "1"

echo "check: two people approve the same version at once: applied once, both told the same"
V=$(admin -c "select version from worlds.world where name = 'big' and dropped is null")
( psql_in $CL -d $DB -qAt -c "listen worlds_reviews" -c "select pg_sleep(3)" -c "select 1" >/tmp/s22_listen2.out 2>&1 ) &
listener=$!
sleep 0.3
admin -c "select j ->> 'tag' from worlds.sql('merge world big at version $V') j" >/tmp/s22_a.out 2>&1 &
a=$!
admin -c "select j ->> 'tag' from worlds.sql('merge world big at version $V') j" >/tmp/s22_b.out 2>&1 &
b=$!
wait $a; wait $b
expect "first approval" "$(cat /tmp/s22_a.out)" "MERGE 6"
expect "second approval" "$(cat /tmp/s22_b.out)" "MERGE 6"
expect "applied once" "$(admin -c "select string_agg(bal::text, ',' order by id) from acct where id <= 6")" "989,1009,999,999,999,1005"
expect "total" "$(admin -c "$TOTAL")" "50000"
expect "again, later: the same answer" "$(admin -c "select j ->> 'tag' from worlds.sql('merge world big at version $V') j")" "MERGE 6"
expect "the queue is empty" "$(admin -c "select count(*) from worlds.review")" "0"
wait $listener
grep -q '"event": "merged"' /tmp/s22_listen2.out && echo "  ok   LISTEN worlds_reviews: merged" || bad "listen merged: $(cat /tmp/s22_listen2.out)"

echo "check: a queued world dropped by a person leaves the queue"
as main "select * from worlds.sql('create world del')" >/dev/null
as del "delete from acct where id = 50" >/dev/null
as main "select * from worlds.sql('merge world del')" >/dev/null 2>&1 || true
for i in $(seq 1 50); do [ "$(admin -c "select count(*) from worlds.review")" = 1 ] && break; sleep 0.1; done
expect "queued" "$(admin -c "select world from worlds.show_reviews()")" "del"
admin -c "select worlds.drop_world('del')" >/dev/null
expect "gone from the queue" "$(admin -c "select count(*) from worlds.review")" "0"
expect "row 50 still in main" "$(admin -c "select count(*) from acct where id = 50")" "1"

echo "check: a world's NOTIFY reaches listeners only when its merge into main commits"
admin -c "select worlds.create_world('fx')" >/dev/null
PGOPTIONS='-c worlds.world=fx' admin -c "update acct set bal = bal - 3 where id = 7" -c "update acct set bal = bal + 3 where id = 9" -c "notify shipping, 'box 7'" -c "select pg_notify('shipping', 'box 8')" >/dev/null
psql_in $CL -d $DB -qAt -c "listen shipping" -c "select pg_sleep(1)" -c "select 1" >/tmp/s22_early.out 2>&1
expect "heard before the merge" "$(grep -c 'Asynchronous notification' /tmp/s22_early.out)" "0"
( psql_in $CL -d $DB -qAt -c "listen shipping" -c "select pg_sleep(3)" -c "select 1" >/tmp/s22_late.out 2>&1 ) &
listener=$!
sleep 0.5
admin -c "select worlds.create_world('fx2')" >/dev/null
PGOPTIONS='-c worlds.world=fx2' admin -c "update acct set bal = bal + 1 where id = 8" -c "notify shipping, 'never sent'" >/dev/null
admin -c "update acct set bal = bal + 2 where id = 8" >/dev/null
out=$(admin -c "select * from worlds.sql('merge world fx2')" 2>&1 || true)
grep -q "conflicts" <<<"$out" && echo "  ok   fx2's merge fails (a conflict)" || bad "fx2 merge: $out"
expect "fx's merge" "$(admin -c "select j ->> 'tag' from worlds.sql('merge world fx') j")" "MERGE 2"
wait $listener
expect "heard at its commit, in order" "$(grep -o 'payload "[^"]*"' /tmp/s22_late.out | tr '\n' ' ')" 'payload "box 7" payload "box 8" '
admin -c "select worlds.drop_world('fx2')" >/dev/null

admin -c "select worlds.drop_agent('s22_bot')" >/dev/null
[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: merge policies"
