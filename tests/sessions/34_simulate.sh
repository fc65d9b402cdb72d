#!/usr/bin/env bash
# SIMULATE under load, cancelled and killed (statements/simulate.rs, simulate_worker.rs).
# (a) SIMULATE of 40 worlds (2 background workers) while pgbench moves money in main and another session
#     forks, writes and merges worlds into main: every world starts from the same rows (each script
#     records the total it finds; one distinct total, the one main had when SIMULATE began), main's writes
#     never show in a world, main's total is kept, and the same SIMULATE run again gives the same scores.
# (b) statement_timeout cancels a SIMULATE of slow worlds: 57014, its workers stop, and no world of it
#     is left (the next world statement discards what the workers had forked).
# (c) kill -9 of a worker in the middle: the cluster restarts, and no world of the run is left after
#     the first world statement.
source "$(dirname "$0")/common.sh"

start_cluster $CL yes
DB=s34_simulate
OUT=$RUN_DIR/s34_simulate; rm -rf "$OUT"; mkdir -p "$OUT"
CONN=$(conninfo $CL $DB)
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table accounts (id int primary key, balance int not null);
insert into accounts select g, 1000 from generate_series(1, 100) g;
create table prices (sku int primary key, p numeric not null, sold int not null);
insert into prices select g, 10, g % 7 + 1 from generate_series(1, 2000) g;
create table seen (i bigint primary key, total bigint not null);
SQL
q() { psql_in $CL -d $DB -qAt "$@"; }
cat > "$OUT/transfer.sql" <<'SQL'
\set a random(1, 100)
\set b random(1, 100)
begin;
update accounts set balance = balance - 1 where id = :a;
update accounts set balance = balance + 1 where id = :b;
commit;
SQL

echo "check: (a) SIMULATE while main writes and another session merges"
START_TOTAL=$(q -c "select sum(balance) from accounts")
pgbench -n -c 2 -T 12 -f "$OUT/transfer.sql" "$CONN" >"$OUT/pgbench.log" 2>&1 &
PGB=$!
# the merger: worlds forked, written and merged into main, over and over (prices too: they change under
# the simulation's feet)
(
  for r in $(seq 1 15); do
    psql "$CONN" -XqAt -c "select worlds.create_world('m_$r')" >/dev/null 2>&1 || continue
    PGOPTIONS="-c worlds.world=m_$r" psql "$CONN" -XqAt -c "update prices set p = p + 1 where sku % 50 = $r" >/dev/null 2>&1
    psql "$CONN" -XqAt -c "select worlds.merge('m_$r')" >/dev/null 2>&1 || psql "$CONN" -XqAt -c "select worlds.drop_world('m_$r')" >/dev/null 2>&1
  done
) &
MERGER=$!
sleep 1
SIM="simulate 40 worlds as sa run \$\$insert into seen select \$1, (select sum(p * sold) from prices)::bigint;
   update prices set p = p * (0.9 + random() * 0.2) where sku % 40 = \$1 % 40\$\$
   score \$\$select sum(p * sold) from prices\$\$ keep 5 seed 7 threads 2"
q -c "create table base_total as select sum(p * sold)::bigint as t from prices" >/dev/null
q -c "select count(*) from worlds.sql(\$q\$$SIM\$q\$)" >"$OUT/sim_a.log" 2>&1 || bad "SIMULATE under load: $(cat "$OUT/sim_a.log")"
wait $PGB; wait $MERGER
expect "worlds kept" "$(q -c "select count(*) from worlds.show_worlds() where name like 'sa\_%'")" "5"
# (each kept world's own table seen holds the total its script found at its start)
distinct=$(for w in $(q -c "select name from worlds.show_worlds() where name like 'sa\_%'"); do
  PGOPTIONS="-c worlds.world=$w" psql "$CONN" -XqAt -c "select total from seen"; done | sort -u | wc -l)
expect "one distinct starting total in the kept worlds" "$distinct" "1"
expect "main's total kept" "$(q -c "select sum(balance) from accounts")" "$START_TOTAL"
expect "main's seen untouched by the worlds" "$(q -c "select count(*) from seen")" "0"
expect "no result rows left" "$(q -c "select count(*) from worlds.sim_result")" "0"
# the same SIMULATE again: the same scores for the same indexes (main is quiet now, and its prices moved:
# compare with a fresh run of both, from the same main)
q -c "select count(*) from (select worlds.drop_world(name) from worlds.show_worlds() where name like 'sa\_%') d" >/dev/null
q -c "select * from worlds.sql(\$q\$$SIM\$q\$)" -o "$OUT/first.out"
q -c "select count(*) from (select worlds.drop_world(name) from worlds.show_worlds() where name like 'sa\_%') d" >/dev/null
q -c "select * from worlds.sql(\$q\$${SIM/threads 2/threads 1}\$q\$)" -o "$OUT/second.out"
strip() { sed -E 's/"id": "[^"]*", //' "$1"; }
if diff <(strip "$OUT/first.out") <(strip "$OUT/second.out") >/dev/null; then echo "  ok   the same SIMULATE (2 threads, then 1) gives the same rows"; else bad "not deterministic: $(diff <(strip "$OUT/first.out") <(strip "$OUT/second.out") | head -5)"; fi
q -c "select count(*) from (select worlds.drop_world(name) from worlds.show_worlds() where name <> 'main') d" >/dev/null

echo "check: (b) a cancelled SIMULATE leaves no world and no worker"
out=$(q -c "set statement_timeout = '2s'" -c "select count(*) from worlds.sql(\$q\$simulate 30 worlds as cx run 'select pg_sleep(0.5)' score 'select 1' threads 2\$q\$)" 2>&1 || true)
grep -q "canceling statement due to statement timeout" <<<"$out" && echo "  ok   57014 after 2 s" || bad "cancel: $out"
for _ in $(seq 1 50); do
  [ "$(q -c "select count(*) from pg_stat_activity where backend_type = 'pg_worlds simulate'")" = 0 ] && break; sleep 0.2
done
expect "workers gone" "$(q -c "select count(*) from pg_stat_activity where backend_type = 'pg_worlds simulate'")" "0"
expect "no cx world left (SHOW WORLDS discards them)" "$(q -c "select count(*) from worlds.show_worlds() where name like 'cx\_%'")" "0"
expect "none in the catalog either" "$(q -c "select count(*) from worlds.world where name like 'cx\_%' and dropped is null")" "0"

echo "check: (c) kill -9 of a worker mid-run"
q -c "select count(*) from worlds.sql(\$q\$simulate 40 worlds as kx run 'select pg_sleep(0.3)' score 'select 1' threads 2\$q\$)" >"$OUT/kill.log" 2>&1 &
SIMPID=$!
victim=""
for _ in $(seq 1 50); do
  victim=$(q -c "select pid from pg_stat_activity where backend_type = 'pg_worlds simulate' limit 1" 2>/dev/null)
  [ -n "$victim" ] && [ "$(q -c "select count(*) from worlds.world where name like 'kx\_%' and dropped is null")" -ge 2 ] && break
  sleep 0.2
done
[ -n "$victim" ] && kill -9 "$victim"
wait $SIMPID 2>/dev/null || true
for _ in $(seq 1 60); do q -c "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
expect "no kx world left after the restart (SHOW WORLDS discards them)" "$(q -c "select count(*) from worlds.show_worlds() where name like 'kx\_%'")" "0"
expect "the catalog agrees" "$(q -c "select count(*) from worlds.world where name like 'kx\_%' and dropped is null")" "0"
expect "main's total still kept" "$(q -c "select sum(balance) from accounts")" "$START_TOTAL"

[ $failures -eq 0 ] || fail "$failures check(s) failed"
echo "ok: simulate"
