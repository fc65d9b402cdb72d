#!/usr/bin/env bash
# In-database fuzz: generated statements of the spec through worlds.sql(text), every typed function of
# pg_worlds with generated arguments, and the worlds.* settings followed by reads and writes of tracked
# tables, run inside the server by plpgsql (scripts/fuzz-soak.sql), one subtransaction per input, by
# several backends at once, on a cluster of its own. Counts every input's SQLSTATE; an XX000 is kept with
# its input; the server log is checked for crashes afterwards. Doesn't build or install pg_worlds: it
# runs the installed one.
#   scripts/fuzz-soak.sh                                   # 20,000 inputs, 2 backends (a minute or two)
#   FUZZ_INPUTS=1000000 FUZZ_JOBS=2 scripts/fuzz-soak.sh   # the soak
# Settings: FUZZ_INPUTS (total, default 20000), FUZZ_JOBS (backends, 2), FUZZ_SEED (1), FUZZ_BATCH (inputs
# per commit, 100), FUZZ_MAX_WORLDS (live worlds kept below this, 40), FUZZ_STALL_SECONDS (a backend
# without a committed batch for this long is cancelled and reported, 300), FUZZ_CLUSTER (fuzz), PORT
# (56600), FUZZ_SECONDS (stop after this long, the inputs not run then left out), FUZZ_KEEP=1 (leave the
# cluster running). Exits non-zero on any XX000, crash, stall or job failure.
# Last line: "fuzz: N inputs ..." (scripts/test.sh records it).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set +e
N=${FUZZ_INPUTS:-20000}
JOBS=${FUZZ_JOBS:-2}
SEED=${FUZZ_SEED:-1}
BATCH=${FUZZ_BATCH:-100}
MAXW=${FUZZ_MAX_WORLDS:-40}
STALL=${FUZZ_STALL_SECONDS:-300}
CL=${FUZZ_CLUSTER:-fuzz}
OUT=$RUN_DIR/fuzz-$CL
DB=fuzz

stop_cluster "$CL"
rm -rf "$(cluster_dir "$CL")" "$OUT"
mkdir -p "$OUT"; touch "$OUT/lost_batches" "$OUT/stalls" "$OUT/call_failures"
PORT=${PORT:-56600} start_cluster "$CL" yes || { echo "fuzz: the cluster didn't start"; exit 1; }
LOG=$(cluster_dir "$CL")/server.log
q() { psql_in "$CL" -d $DB -qAtX "$@"; }
# the input each backend is on shows in pg_stat_activity and in every line it logs
psql_in "$CL" -qc "alter system set log_line_prefix = '%m [%p] %a '" -c "select pg_reload_conf()" >/dev/null
psql_in "$CL" -qc "create database $DB" || exit 1
if ! psql_in "$CL" -d $DB -q -f "$ROOT/scripts/fuzz-soak.sql" >"$OUT/setup.log" 2>&1; then
  tail -20 "$OUT/setup.log"; echo "fuzz: setup failed"; exit 1
fi
log_from=$(($(stat -c %s "$LOG") + 1))
echo "== fuzz: $N inputs, $JOBS backends, seed $SEED, cluster $CL (port $(cat "$(cluster_dir "$CL")/port")), logs in $OUT"

# run_job J COUNT: inputs 0 .. COUNT-1 of job J. A CALL that fails (a crash took the backend, or it was
# cancelled as stalled) is started again after the batch it was on, which is noted as lost.
run_job() {
  local j=$1 n=$2 first=0 restarts=0 next
  while [ "$first" -lt "$n" ] && [ -z "$(q -c 'select 1 from fuzz.stop limit 1' 2>/dev/null)" ]; do
    if psql_in "$CL" -d $DB -qX -c "set lock_timeout = '2s'" -c "set client_min_messages = error" \
         -c "call fuzz.run($j, $SEED, $first, $((n - first)), $BATCH, $MAXW)" >"$OUT/job$j.attempt" 2>&1; then
      cat "$OUT/job$j.attempt" >>"$OUT/job$j.log"
      return 0
    fi
    cat "$OUT/job$j.attempt" >>"$OUT/job$j.log"
    # the error that ended the CALL (outside the inputs' own blocks: at a batch's COMMIT, a lost connection)
    echo "job $j at $(date +%T): $(grep -m1 -E '^(ERROR|FATAL|psql|server closed)' "$OUT/job$j.attempt" | head -c 300) $(grep -m1 -E '^(DETAIL|CONTEXT)' "$OUT/job$j.attempt" | head -c 300)" >>"$OUT/call_failures"
    restarts=$((restarts + 1))
    [ $restarts -gt "${FUZZ_MAX_RESTARTS:-20}" ] && return 1
    for _ in $(seq 1 120); do q -c "select 1" >/dev/null 2>&1 && break; sleep 1; done
    next=$(q -c "select next_i from fuzz.progress where job = $j" 2>/dev/null)
    [ -z "$next" ] && next=$first
    echo "$j $next" >>"$OUT/lost_batches"
    first=$((next + BATCH))
  done
}

started=$(date +%s)
pids=()
for j in $(seq 1 "$JOBS"); do
  n=$((N / JOBS)); [ "$j" -eq 1 ] && n=$((n + N % JOBS))
  run_job "$j" "$n" & pids+=($!)
done

# progress, and stalls: a backend that committed no batch for STALL seconds is cancelled
while :; do
  alive=0
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  sleep "${FUZZ_POLL_SECONDS:-20}"
  done_n=$(q -c "select coalesce(sum(n), 0) from fuzz.counts where job < 1000" 2>/dev/null)
  el=$(($(date +%s) - started))
  if [ -n "${FUZZ_SECONDS:-}" ] && [ "$el" -ge "$FUZZ_SECONDS" ]; then
    [ -z "$(q -c 'select 1 from fuzz.stop limit 1')" ] && { q -c "insert into fuzz.stop default values"; echo "  ${el}s: FUZZ_SECONDS reached, the jobs stop after their batch"; }
  fi
  [ -n "$done_n" ] && echo "  $(date +%T) ${el}s: $done_n inputs done ($((done_n / (el > 0 ? el : 1)))/s)"
  q -F '|' -c "select a.pid, p.job, a.application_name, coalesce(a.wait_event_type || ':' || a.wait_event, 'running')
                 from fuzz.progress p join pg_stat_activity a on a.application_name like 'fuzz j' || p.job || ' i%'
                where p.job < 1000 and p.updated < now() - interval '$STALL seconds'" 2>/dev/null |
  while IFS='|' read -r pid job app wait; do
    echo "  STALL: backend $pid ($app), $wait, no batch committed for ${STALL}s: cancelled" | tee -a "$OUT/stalls"
    q -c "select pg_cancel_backend($pid)" >/dev/null
    sleep 5
    q -c "select pg_terminate_backend($pid) from pg_stat_activity where pid = $pid and state = 'active'" >/dev/null
  done
done
job_failures=0
for p in "${pids[@]}"; do wait "$p" || job_failures=$((job_failures + 1)); done
elapsed=$(($(date +%s) - started))

# crashes in the log since the setup; each lost batch replayed one input at a time, to name the input
crash_re='terminated by signal|was terminated by exception|PANIC|TRAP:|stuck spinlock|server process .* exited with exit code [^01]'
tail -c +$log_from "$LOG" >"$OUT/run.log"
crashes=$(grep -cE "$crash_re" "$OUT/run.log")
if [ -s "$OUT/lost_batches" ] && [ "$crashes" -gt 0 ]; then
  echo "== replaying the batches lost to crashes, one input per session"
  while read -r j next; do
    for i in $(seq "$next" $((next + BATCH - 1))); do
      before=$(stat -c %s "$LOG")
      psql_in "$CL" -d $DB -qX -c "set lock_timeout = '2s'" -c "set client_min_messages = error" \
        -c "call fuzz.run($j, $SEED, $i, 1, 1, $MAXW, $((1000 + j)))" >/dev/null 2>&1
      if tail -c +$((before + 1)) "$LOG" | grep -qE "$crash_re"; then
        for _ in $(seq 1 120); do q -c "select 1" >/dev/null 2>&1 && break; sleep 1; done
        echo "  crash replayed: job $j input $i:"
        q -c "select cat || ': ' || input from fuzz.inputs($SEED, $j, $i, 1)" | head -c 2000; echo
      fi
    done
  done <"$OUT/lost_batches"
fi

echo
echo "== fuzz report"
total=$(q -c "select coalesce(sum(n), 0) from fuzz.counts where job < 1000")
echo "inputs run: $total in ${elapsed}s ($((total / (elapsed > 0 ? elapsed : 1))) per second, $JOBS backends); not run (batches lost to failed CALLs: a crash, a stall, an error at a batch's COMMIT): $(($(wc -l <"$OUT/lost_batches") * BATCH)) at most"
q -F ' | ' -c "select category, sum(n), sum(n) filter (where sqlstate = '00000') as ok from fuzz.counts where job < 1000 group by 1 order by 1" |
  awk -F' \\| ' '{printf "  %-8s %9d inputs, %9d ran without error\n", $1, $2, $3}'
echo "per SQLSTATE (top 30):"
q -F ' | ' -c "
  with names(code, name) as (values ('00000', 'ok'), ('42601', 'syntax_error'), ('22023', 'invalid_parameter_value'), ('3D000', 'no such world'),
    ('42710', 'duplicate_object'), ('42704', 'undefined_object'), ('22P02', 'invalid_text_representation'), ('25001', 'active_sql_transaction'),
    ('0A000', 'feature_not_supported'), ('42501', 'insufficient_privilege'), ('40001', 'serialization_failure'), ('55000', 'object_not_in_prerequisite_state'),
    ('42883', 'undefined_function'), ('22003', 'numeric_value_out_of_range'), ('22007', 'invalid_datetime_format'), ('22008', 'datetime_field_overflow'),
    ('2BP01', 'dependent_objects_still_exist'), ('42602', 'invalid_name'), ('42939', 'reserved_name'), ('42622', 'name_too_long'), ('23505', 'unique_violation'),
    ('23514', 'check_violation'), ('23503', 'foreign_key_violation'), ('23502', 'not_null_violation'), ('25006', 'read_only_sql_transaction'),
    ('55P03', 'lock_not_available'), ('40P01', 'deadlock_detected'), ('53400', 'configuration_limit_exceeded'), ('22021', 'character_not_in_repertoire'),
    ('22025', 'invalid_escape_sequence'), ('42P01', 'undefined_table'), ('42703', 'undefined_column'), ('22004', 'null_value_not_allowed'),
    ('54001', 'statement_too_complex'), ('XX000', 'internal_error'), ('P0001', 'raise_exception'), ('42804', 'datatype_mismatch'),
    ('22012', 'division_by_zero'), ('42P02', 'undefined_parameter'), ('55P02', 'cant_change_runtime_param'), ('42725', 'ambiguous_function'),
    ('22001', 'string_data_right_truncation'), ('0LP01', 'invalid_grant_operation'), ('42846', 'cannot_coerce'), ('57014', 'query_canceled'),
    ('22009', 'invalid_time_zone_displacement_value'), ('22015', 'interval_field_overflow'), ('42809', 'wrong_object_type'), ('428C9', 'generated_always'),
    ('21000', 'cardinality_violation'), ('42P10', 'invalid_column_reference'), ('22P05', 'untranslatable_character'), ('2F005', 'function_executed_no_return'))
  select c.sqlstate, coalesce(n.name, ''), sum(c.n), string_agg(c.category || ' ' || c.n, ', ' order by c.n desc)
    from (select sqlstate, category, sum(n) n from fuzz.counts where job < 1000 group by 1, 2) c left join names n on n.code = c.sqlstate
   group by 1, 2 order by 3 desc limit 30" | awk -F' \\| ' '{printf "  %s %-34s %9d   (%s)\n", $1, $2, $3, $4}'

xx=$(q -c "select count(*) from fuzz.failures where sqlstate = 'XX000'")
other=$(q -c "select count(*) from fuzz.failures where sqlstate <> 'XX000'")
groups=$(q -c "select count(distinct regexp_replace(message, '\`[^\`]*\`|\"[^\"]*\"|''[^'']*''|[0-9]+', '…', 'g')) from fuzz.failures where sqlstate = 'XX000'")
echo "XX000: $xx (in $groups groups by message); other internal-class errors (XX, 58, 54001, P0004): $other"
# each group: how many, by which category, its first input and message, and where the server raised it
q -F $'\x1f' -c "
  select sqlstate, count(*) over w, job, i, category, input, exec, message, coalesce(detail, ''), coalesce(context, '')
    from (select *, regexp_replace(message, '\`[^\`]*\`|\"[^\"]*\"|''[^'']*''|[0-9]+', '…', 'g') grp from fuzz.failures) f
  window w as (partition by sqlstate, category, grp)
  order by sqlstate, grp, job, i" >"$OUT/failures.txt"
q -F $'\x1f' -c "
  select distinct on (sqlstate, category, grp) sqlstate, n, job, i, category, regexp_replace(input, '[\n\r]', '⏎', 'g'), regexp_replace(message, '[\n\r]', '⏎', 'g')
    from (select *, count(*) over (partition by sqlstate, category, grp) n
            from (select *, regexp_replace(message, '\`[^\`]*\`|\"[^\"]*\"|''[^'']*''|[0-9]+', '…', 'g') grp from fuzz.failures where job < 2000) f0) f
  order by sqlstate, category, grp, length(input), job, i" |
while IFS=$'\x1f' read -r st n j i cat input message; do
  echo "  [$st x$n] $cat (job $j input $i): $message"
  echo "      input: ${input:0:400}"
  # where the server raises it: the example again, alone, uncaught, with VERBOSITY verbose (it may not
  # reproduce outside the run: the database has moved on)
  setting=
  [ "$cat" = setting ] && setting="select set_config(x.guc, x.gucval, false) from fuzz.inputs($SEED, $j % 1000, $i, 1) x;"
  loc=$(printf '%s\n' "\\set VERBOSITY verbose" "set client_min_messages = error;" "$setting" \
          "select exec from fuzz.failures where job = $j and i = $i limit 1 \\gexec" |
        psql_in "$CL" -d $DB -qX -v ON_ERROR_STOP=0 2>&1 >/dev/null | grep -E '^(ERROR|LOCATION)' | tr '\n' ' ')
  echo "      again: ${loc:-no error this time}"
done | head -c 60000
echo "(every failure with its input: $OUT/failures.txt)"

echo "slowest inputs (over 2 s):"
q -F ' | ' -c "select round(ms)::text || ' ms', category, sqlstate, left(regexp_replace(input, '\s+', ' ', 'g'), 160) from fuzz.slow where job < 1000 order by ms desc limit 10" | sed 's/^/  /'
echo "upkeep errors:"
q -F ' | ' -c "select count(*), what ~ '^base world', sqlstate, left(message, 140) from fuzz.maintenance group by 2, 3, 4 order by 1 desc limit 10" | sed 's/^/  /'

echo "server log since the setup ($(wc -l <"$OUT/run.log") lines): crashes $crashes"
grep -E "$crash_re" "$OUT/run.log" | head -20 | sed 's/^/  /'
echo "  WARNING lines by message, each with the input its backend was on (a warning at COMMIT belongs to the batch that input ends):"
awk '
  nl { if ($0 ~ /CONTEXT: /) ctx[want] = $0; nl = 0 }
  / WARNING: / { m = $0; sub(/^.*WARNING: +/, "", m); gsub(/[0-9]+/, "N", m); c[m]++
                 if (!(m in first)) { first[m] = $0; want = m; nl = 1 } }
  END { for (m in c) printf "%d\t%s\t%s\t%s\n", c[m], m, first[m], ctx[m] }' "$OUT/run.log" | sort -rn | head -15 |
while IFS=$'\t' read -r count msg line ctx; do
  at=$(grep -oE 'line [0-9]+ at [A-Z]+' <<<"$ctx" | tail -1)
  echo "   $count x $msg${at:+ ($at)}"
  if [[ $line =~ fuzz\ j([0-9]+)\ i([0-9]+) ]]; then
    echo "      e.g. job ${BASH_REMATCH[1]} input ${BASH_REMATCH[2]}: $(q -c "select cat || ': ' || left(regexp_replace(input, '\s+', ' ', 'g'), 300) from fuzz.inputs($SEED, ${BASH_REMATCH[1]} % 1000, ${BASH_REMATCH[2]}, 1)")"
  fi
done
echo "  FATAL / ERROR lines not caught by the run: $(grep -cE ' (FATAL|ERROR): ' "$OUT/run.log")"
grep -E ' (FATAL|ERROR): ' "$OUT/run.log" | sed -E 's/^[^]]*\] //' | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -8 | sed 's/^/   /'
echo "CALLs that ended with an error outside the inputs' blocks (the batch then lost, the job carried on after it; for an error at a batch's COMMIT the log names the last input of the batch before, its settings rolled back with it; lost_batches has each failed batch's first input): $(wc -l <"$OUT/call_failures")"
sed -E 's/ at [0-9:]+:/:/' "$OUT/call_failures" | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -10 | sed 's/^/  /'
stalls=$(wc -l <"$OUT/stalls")
[ "$stalls" -gt 0 ] && { echo "stalls:"; sed 's/^/  /' "$OUT/stalls"; }

[ "${FUZZ_KEEP:-}" = 1 ] || stop_cluster "$CL"
rc=0
[ "$xx" -gt 0 ] || [ "$crashes" -gt 0 ] || [ "$stalls" -gt 0 ] || [ "$job_failures" -gt 0 ] && rc=1
echo "fuzz: $total inputs in ${elapsed}s, XX000 $xx ($groups groups), crashes $crashes, stalls $stalls, failed jobs $job_failures$( [ $rc -eq 0 ] || echo ' FAILED')"
exit $rc
