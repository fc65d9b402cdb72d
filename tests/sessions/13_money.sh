#!/usr/bin/env bash
# The money check: merges, rebases and main's writers racing never lose or invent an update.
#
# 200 accounts of 1000 each. Every step of every session moves money between accounts and keeps the total,
# so the total must be 200,000 in main at every moment, and in every world at every moment.
#   - MONEY_MAIN pgbench clients move money on main (two updates in one transaction).
#   - worker kinds, one session each, looping for MONEY_SECONDS:
#       plain    fork, four updates (a -= x; b += x; b -= 1; c += 1), MERGE WORLD
#       cols     the same, then REBASE WORLD, then MERGE WORLD ... BY COLUMNS
#       keys     two transfers (a->b, c->d); MERGE ONLY KEYS the first pair's keys, then the rest
#       nested   fork p, fork q from p, a transfer in q, MERGE q INTO p (the total checked in p), a transfer
#                in p, MERGE p
#     A merge that fails with 40001 (a conflict) drops its world and goes on; any other failure counts.
#   - a checker reads sum(v) in main every 50 ms: each reading must be 200,000.
# At the end: the total is 200,000; no merge or rebase failed with 40P01 (deadlock) or anything but 40001;
# at least one merge of each kind succeeded; every world is gone. MONEY_SECONDS (default 20) sets the run;
# scripts/money-soak.sh runs it for 10 minutes.
source "$(dirname "$0")/common.sh"
SECONDS_TO_RUN=${MONEY_SECONDS:-20}
MAIN_CLIENTS=${MONEY_MAIN:-2}
KINDS=${MONEY_KINDS:-plain cols keys nested}

start_cluster $CL yes
DB=s13_money
OUT=$RUN_DIR/s13_money; rm -rf "$OUT"; mkdir -p "$OUT"
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
CONN=$(conninfo $CL $DB)
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
# without main's writers, count the merges that went fast-forward (their DEBUG1 line in the server log)
log_lines=$(wc -l <"$(cluster_dir $CL)/server.log")
[ "$MAIN_CLIENTS" -gt 0 ] || psql_in $CL -q -c "alter database $DB set log_min_messages = debug1"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create extension pg_worlds;
create table acct (id int primary key, v int not null, note text);
insert into acct select g, 1000, 'a' || g from generate_series(1, 200) g;
SQL
end_at=$(( $(date +%s) + SECONDS_TO_RUN ))

# main's writers
cat >"$OUT/transfer.sql" <<'SQL'
\set a random(1, 200)
\set b random(1, 200)
\set x random(1, 50)
begin;
update acct set v = v - :x where id = :a;
update acct set v = v + :x where id = :b;
commit;
SQL
# (MONEY_MAIN=0: no writer on main, so most merges find their tables untouched since the fork and
# merge fast-forward, src/merge/fast_forward.rs, racing each other)
if [ "$MAIN_CLIENTS" -gt 0 ]; then
  $PGBIN/pgbench -n -c "$MAIN_CLIENTS" -j 1 -T "$SECONDS_TO_RUN" -f "$OUT/transfer.sql" -h "$dir/sock" -p "$port" -U postgres $DB \
    >"$OUT/pgbench.log" 2>&1 &
  pgbench_pid=$!
else
  : >"$OUT/pgbench.log"; sleep "$SECONDS_TO_RUN" & pgbench_pid=$!
fi

rnd() { echo $(( (RANDOM % 200) + 1 )); }
# transfer SQL of one world step: a -= x; b += x; b -= 1; c += 1
four() {
  local a b c x; a=$(rnd); b=$(rnd); c=$(rnd); x=$(( RANDOM % 40 + 1 ))
  echo "update acct set v = v - $x where id = $a;"
  echo "update acct set v = v + $x where id = $b;"
  echo "update acct set v = v - 1 where id = $b;"
  echo "update acct set v = v + 1 where id = $c;"
}
# a worker writes its statements to one psql (errors don't stop it); each merge or rebase prints a marker
# line first, so the log tells which statement an error belongs to
worker() {
  local kind=$1 n=0
  while [ "$(date +%s)" -lt "$end_at" ]; do
    n=$((n + 1))
    local w="${kind}_$n"
    case $kind in
      plain)
        echo "select worlds.create_world('$w');"
        echo "set worlds.world = $w;"
        echo "select 'fork_sum=' || sum(v) from acct;"
        four
        echo "select 'sum_in_world=' || sum(v) from acct;"
        echo "set worlds.world = main;"
        echo "\\echo @merge $w"; echo "select * from worlds.sql('merge world $w');"
        echo "select worlds.drop_world('$w', if_exists => true);" ;;
      cols)
        echo "select worlds.create_world('$w');"
        echo "set worlds.world = $w;"; four
        echo "set worlds.world = main;"
        echo "\\echo @rebase $w"; echo "select * from worlds.sql('rebase world $w');"
        echo "\\echo @merge $w"; echo "select * from worlds.sql('merge world $w by columns');"
        echo "select worlds.drop_world('$w', if_exists => true);" ;;
      keys)
        local a b c d x y; a=$(rnd); b=$(rnd); c=$(rnd); d=$(rnd); x=$(( RANDOM % 40 + 1 )); y=$(( RANDOM % 40 + 1 ))
        echo "select worlds.create_world('$w');"
        echo "set worlds.world = $w;"
        echo "update acct set v = v - $x where id = $a;"; echo "update acct set v = v + $x where id = $b;"
        echo "update acct set v = v - $y where id = $c;"; echo "update acct set v = v + $y where id = $d;"
        echo "set worlds.world = main;"
        if [ "$a" != "$c" ] && [ "$a" != "$d" ] && [ "$b" != "$c" ] && [ "$b" != "$d" ]; then
          echo "\\echo @merge_part $w"; echo "select * from worlds.sql('merge world $w only keys (''acct/$a'', ''acct/$b'')');"
        fi
        echo "\\echo @merge $w"; echo "select * from worlds.sql('merge world $w');"
        echo "select worlds.drop_world('$w', if_exists => true);" ;;
      nested)
        local q="${w}_q"
        echo "select worlds.create_world('$w');"
        echo "select worlds.create_world('$q', source => '$w');"
        echo "set worlds.world = $q;"; four
        echo "set worlds.world = main;"
        echo "\\echo @merge_into $q"; echo "select * from worlds.sql('merge world $q into $w');"
        echo "set worlds.world = $w;"
        echo "\\echo @sum_in $w"; echo "select 'sum_in_world=' || sum(v) from acct;"
        four
        echo "set worlds.world = main;"
        echo "select worlds.drop_world('$q', if_exists => true);"
        echo "\\echo @merge $w"; echo "select * from worlds.sql('merge world $w');"
        echo "select worlds.drop_world('$w', if_exists => true, cascade => true);" ;;
    esac
  done | $PGBIN/psql "$CONN" -X -qAt -v VERBOSITY=verbose >"$OUT/$kind.out" 2>&1
}
checker() {
  while [ "$(date +%s)" -lt "$end_at" ]; do
    echo "select 'total=' || sum(v) from acct;"
    echo "select pg_sleep(0.05);"
  done | $PGBIN/psql "$CONN" -X -qAt >"$OUT/checker.out" 2>&1
}
pids=()
for k in $KINDS; do worker $k & pids+=($!); done
checker & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
wait $pgbench_pid || bad "pgbench failed: $(tail -5 "$OUT/pgbench.log")"

if [ "$MAIN_CLIENTS" -eq 0 ]; then
  fast=$(tail -n +"$((log_lines + 1))" "$(cluster_dir $CL)/server.log" | grep -c "fast-forward (main unchanged since its fork)")
  echo "  merges that went fast-forward: $fast"
  [ "$fast" -gt 0 ] || bad "no merge went fast-forward"
  psql_in $CL -q -c "alter database $DB reset log_min_messages"
fi
total=$(psql_in $CL -d $DB -qAt -c "select sum(v) from acct")
expect "total in main at the end" "$total" 200000
wrong=$(grep '^total=' "$OUT/checker.out" | grep -vc '^total=200000$' || true)
readings=$(grep -c '^total=' "$OUT/checker.out" || true)
expect "readings of main's total that were not 200000 (of $readings)" "$wrong" 0
wrong_in=$(cat $(for k in $KINDS; do echo "$OUT/$k.out"; done) | grep '^sum_in_world=' | grep -vc '=200000$' || true)
expect "totals read inside a world (after its own transfers, or a MERGE ... INTO it) that were not 200000" "$wrong_in" 0
deadlocks=$(cat $(for k in $KINDS; do echo "$OUT/$k.out"; done) | grep -c '40P01' || true)
expect "statements that failed with 40P01 (deadlock)" "$deadlocks" 0
# every error but a conflict (40001) is a failure
others=$(cat $(for k in $KINDS; do echo "$OUT/$k.out"; done) | grep 'ERROR:' | grep -v 'ERROR:  40001' || true)
expect "errors other than 40001" "$(echo -n "$others" | grep -c . || true)" 0
[ -z "$others" ] || echo "$others" | sort | uniq -c | sort -rn | head -10
summary=$(psql_in $CL -d $DB -qAt -c "select string_agg(k || '=' || n, ' ' order by k) from (
   select split_part(w.name, '_', 1) || case when e.event like 'merged part into %' then '_part' when e.event like 'merged into main' then '' else '_into' end k, count(*) n
   from worlds.event e join worlds.world w on w.num = e.world where e.event like 'merged %into %' group by 1) s")
echo "  merges that succeeded: $summary; main: $(grep -E '^(number of transactions actually processed|tps)' "$OUT/pgbench.log" | tr '\n' ' ')"
for k in $KINDS; do
  case " $summary " in *" $k="*) ;; *) bad "no $k merge succeeded: $(grep ERROR "$OUT/$k.out" | sort | uniq -c | head -3)";; esac
done
live=$(psql_in $CL -d $DB -qAt -c "select count(*) from worlds.world where dropped is null and num <> 0")
expect "worlds left" "$live" 0
# every btree of pg_worlds' catalog and storage (and of main's tables) holds every heap row it should:
# the commit's version update opens worlds.world's indexes only when its new row isn't heap-only
# (storage/commit_direct.rs), and writes in worlds fill the deltas' indexes with the executor's own calls
broken=$(psql_in $CL -d $DB -qAt -c "create extension if not exists amcheck" -c "
  select count(*) from (select bt_index_check(i.indexrelid, true) from pg_index i join pg_class c on c.oid = i.indexrelid
   join pg_namespace n on n.oid = c.relnamespace join pg_am a on a.oid = c.relam
   where a.amname = 'btree' and n.nspname in ('worlds', 'worlds_data', 'public') and i.indisvalid) s" 2>&1 | tail -1)
case "$broken" in
  ''|*[!0-9]*) bad "amcheck of the btree indexes (heapallindexed) failed: $broken" ;;
  *) echo "  ok   $broken btree indexes of pg_worlds' catalog and storage and of main's tables hold every row (amcheck)" ;;
esac
[ $failures -eq 0 ] || exit 1
echo "13_money: ok"
