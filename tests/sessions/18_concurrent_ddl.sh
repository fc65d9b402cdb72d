#!/usr/bin/env bash
# Concurrent DDL and DML on main with pg_worlds installed and a world alive: four sessions loop over
# CREATE TABLE / ALTER TABLE (add a column, a type change that rewrites, a rename) / DROP TABLE of tables
# of their own, over a shared enum type, while two pgbench clients run DML on a shared tracked table.
# Nothing may fail: no deadlock (40P01), no "out of shared memory", no error at all; afterwards the
# world still reads its rows and main's counts add up.
source "$(dirname "$0")/common.sh"
start_cluster $CL yes
dir=$(cluster_dir $CL); port=$(cat "$dir/port")
DB=s18_ddl
OUT=$RUN_DIR/s18_ddl; rm -rf "$OUT"; mkdir -p "$OUT"
psql_in $CL -q -c "set client_min_messages = warning" -c "drop database if exists $DB" -c "create database $DB"
psql_in $CL -d $DB -q >/dev/null <<'SQL'
create type mood as enum ('ok', 'sad');
create table shared (id int primary key, n int not null default 0);
insert into shared select g from generate_series(1, 50) g;
create extension pg_worlds;
select * from worlds.sql('create world w');
set worlds.world = w;
update shared set n = -1 where id = 1;
SQL
ROUNDS=${DDL_ROUNDS:-4}
ddl() { # ddl N: session N's loop
  local n=$1
  for r in $(seq 1 "$ROUNDS"); do
    psql_in $CL -d $DB -q -v ON_ERROR_STOP=1 <<SQL || { echo "session $n round $r failed" >&2; return 1; }
create table d${n}_$r (id int primary key, m mood, v text);
insert into d${n}_$r select g, 'ok', g::text from generate_series(1, 20) g;
alter table d${n}_$r add column extra int default 7;
alter table d${n}_$r alter column v type varchar(40);
update d${n}_$r set m = 'sad' where id <= 5;
alter table d${n}_$r rename to e${n}_$r;
create index on e${n}_$r (extra);
drop table e${n}_$r;
SQL
  done
}
printf '%s\n' '\set r random(0, 6)' 'UPDATE shared SET n = n + 1 WHERE id = 1 + (:client_id * 7 + :r) % 50;' > "$OUT/dml.sql"
echo "check: 4 DDL sessions x $ROUNDS rounds beside 2 DML clients: nothing fails"
$PGBIN/pgbench -n -c 2 -j 2 -T ${DML_SECONDS:-25} -f "$OUT/dml.sql" -h "$dir/sock" -p "$port" -U postgres $DB >"$OUT/dml.log" 2>&1 &
DML=$!
pids=()
for n in 1 2 3 4; do ddl $n >"$OUT/ddl$n.log" 2>&1 & pids+=($!); done
ddl_failed=0
for p in "${pids[@]}"; do wait "$p" || ddl_failed=$((ddl_failed + 1)); done
wait $DML 2>/dev/null || true
expect "DDL sessions that failed" "$ddl_failed" 0
cat "$OUT"/ddl*.log | grep -E 'ERROR|FATAL' | sort | uniq -c | head -5 | sed 's/^/    | /' || true
expect "deadlocks met by the sessions" "$(cat "$OUT"/*.log | grep -c 'deadlock detected' || true)" 0
expect "failed DML transactions" "$(sed -n 's/.*failed transactions: \([0-9]*\).*/\1/p' "$OUT/dml.log" | head -1)" "0"
expect "tables left" "$(psql_in $CL -d $DB -qAt -c "select count(*) from pg_class where relnamespace = 'public'::regnamespace and relkind = 'r' and relname ~ '^[de][0-9]'")" 0
expect "DROP TYPE mood after its tables went (stock: it works)" "$(psql_in $CL -d $DB -qAt -v ON_ERROR_STOP=0 -c "drop type mood" 2>&1)" ""
expect "world w still reads its row" "$(psql_in $CL -d $DB -qAt -c "set worlds.world = w" -c "select n from shared where id = 1")" "-1"
if [ $failures -ne 0 ]; then echo "18_concurrent_ddl: $failures check(s) failed (logs in $OUT)" >&2; exit 1; fi
psql_in $CL -q -c "drop database $DB"
echo "ok: 18_concurrent_ddl"
