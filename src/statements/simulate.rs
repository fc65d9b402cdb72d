//! SIMULATE n WORLDS and REPLAY WORLD (issue 44): fork n worlds from one moment of a base, run a script
//! in each with `$1` = its index and `$2` = its seed, score each with a query, keep the best k and drop the
//! rest; REPLAY WORLD runs a kept world's script again from the same moment and compares.
//!
//! The worlds run in THREADS background workers (simulate_worker.rs), or, with THREADS 1 or no worker
//! free, one after another in the statement's own transaction (then a cancelled or failed SIMULATE, or a
//! crash, leaves nothing: nothing commits until it ends; KEEP k holds k + 1 worlds at once). Each world's
//! script and score run in a subtransaction: a failure rolls back that world's writes, records its
//! SQLSTATE, and the others go on.
//!
//! One moment: every world forks with the snapshot SIMULATE took at its start (its row made by
//! `fork_sim_world`, not CREATE WORLD), so main's writes committed while it runs show in none of them; a
//! past base ('main@-1 hour') is resolved to one time first.
//!
//! Deterministic: `random()` is seeded (`setseed`) from the world's seed before its script and again
//! before its score (and `gen_random_uuid()` made from it: governance/read_only.rs), so the same SIMULATE
//! gives the same scores at any THREADS and REPLAY can say `identical`.
use super::simulate_world::{catalog_one, drop_sim_world, fork_sim_world, one, replan_as_catalog_grows, run, run_world_named, ForkPlan};
use crate::api::{raise, raise_with};
use pgrx::prelude::*;
use serde_json::{json, Value};
use worlds_core::grammar::{better, rank, Simulation};

/// One world's outcome.
struct Outcome {
    world: String,
    id: Option<String>,
    index: i64,
    seed: i64,
    score: Option<f64>,
    error: Option<String>,
    kept: bool,
}

/// Refuses a score that isn't one SELECT (22023), with Postgres's own parser.
fn check_score_is_one_select(score: &str) {
    let text = std::ffi::CString::new(score).unwrap_or_else(|_| raise("22023", "the score contains a zero byte"));
    let ok = unsafe {
        let list = pg_sys::raw_parser(text.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        if list.is_null() || (*list).length != 1 {
            false
        } else {
            let raw = pg_sys::list_nth(list, 0) as *mut pg_sys::RawStmt;
            !(*raw).stmt.is_null() && (*(*raw).stmt).type_ == pg_sys::NodeTag::T_SelectStmt
        }
    };
    if !ok {
        raise("22023", "the score must be one SELECT whose first value is a number");
    }
}

/// Live worlds named prefix_i for an i below n (42710 names the first).
fn refuse_taken_names(sim: &Simulation) {
    let taken: Option<String> = catalog_one(
        "SELECT min(w.name) FROM worlds.world w
          WHERE w.dropped IS NULL AND starts_with(w.name, $1 || '_')
            AND substr(w.name, length($1) + 2) ~ '^(0|[1-9][0-9]{0,17})$'
            AND substr(w.name, length($1) + 2)::numeric < $2",
        &[sim.prefix.clone().into(), sim.n.into()],
    );
    if let Some(name) = taken {
        raise("42710", format!("world \"{name}\" already exists"));
    }
}

/// Room under max_worlds (53400) and the agent's own max_worlds (42501) for the worlds alive at once.
fn refuse_without_room(need: i64) {
    let cap: i64 = one::<String>("SELECT current_setting('worlds.max_worlds')", &[]).and_then(|s| s.parse().ok()).unwrap_or(0);
    let live: i64 = catalog_one("SELECT count(*) FROM worlds.world WHERE dropped IS NULL AND num <> 0", &[]).unwrap_or(0);
    if cap > 0 && live + need > cap {
        raise_with(
            "53400",
            format!("SIMULATE needs room for {need} worlds at once; the database holds {live} live worlds, max_worlds is {cap}"),
            None,
            Some("KEEP k needs k + 1 worlds at once, KEEP ALL needs n: drop or merge worlds, keep fewer, or raise worlds.max_worlds.".into()),
        );
    }
    let agent: Option<(i64, i64, String)> = crate::storage::as_internal(|| crate::spi_calls::rows(
        "SELECT a.max_worlds::bigint, (SELECT count(*) FROM worlds.world w WHERE w.owner = a.name AND w.dropped IS NULL), a.name
           FROM worlds._session_agent() a WHERE a.name IS NOT NULL",
        Some(1),
        &[],
        |mut t| t.next().map(|r| (r.get::<i64>(1).ok().flatten().unwrap_or(0), r.get::<i64>(2).ok().flatten().unwrap_or(0), r.get::<String>(3).ok().flatten().unwrap_or_default())),
    ))
    .unwrap_or(None);
    if let Some((max, owned, name)) = agent {
        if max > 0 && owned + need > max {
            raise_with(
                "42501",
                format!("permission denied: SIMULATE needs room for {need} worlds at once; agent \"{name}\" owns {owned}, its max_worlds is {max}"),
                None,
                Some("Keep fewer worlds (KEEP k), or merge or drop some of its worlds first.".into()),
            );
        }
    }
}

/// The base as a fork source naming one moment: a past base resolved to its time once (so every world
/// forks from the same rows), with its name, id and moment for the kept worlds' metadata.
struct Base {
    name: String,
    id: String,
    at: String,
    /// how every world of the run is forked (simulate's own fork: `fork_sim_world`)
    plan: ForkPlan,
}

fn resolve_base(sim: &Simulation) -> Base {
    let given = sim.base.clone().unwrap_or_else(|| crate::guc::current_world_setting().to_string_lossy().into_owned());
    let row: Option<(String, String, String, bool)> = crate::storage::as_internal(|| crate::spi_calls::rows(
        "SELECT (m.w).name, (m.w).id, m.at::text, true FROM worlds._moment_of($1) m WHERE position('@' IN $1) > 0
         UNION ALL
         SELECT r.name, r.id, clock_timestamp()::text, false FROM worlds._resolve($1) r WHERE position('@' IN $1) = 0",
        Some(1),
        &[given.clone().into()],
        |mut t| {
            t.next().map(|r| {
                (
                    r.get::<String>(1).ok().flatten().unwrap_or_default(),
                    r.get::<String>(2).ok().flatten().unwrap_or_default(),
                    r.get::<String>(3).ok().flatten().unwrap_or_default(),
                    r.get::<bool>(4).ok().flatten().unwrap_or(false),
                )
            })
        },
    ))
    .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    let Some((name, id, at, past)) = row else { raise("3D000", format!("world \"{given}\" does not exist")) };
    // CREATE WORLD's checks, once: the right to fork (a past moment: restore), the database's storage for
    // worlds, the base's row, the agent that will own the worlds and its TTL
    // (the database's storage for worlds is made by the first fork: in the session's path here, by a
    // worker's own fork transaction in the workers' path, so that it is committed before they need it)
    crate::storage::as_internal(|| run("SELECT worlds._require($1)", &[(if past { "fork_past" } else { "fork" }).into()]));
    let (parent, depth): (i32, i32) = crate::storage::as_internal(|| {
        crate::spi_calls::rows("SELECT num, depth FROM worlds.world WHERE id = $1 AND dropped IS NULL", Some(1), &[id.clone().into()], |mut t| {
            t.next().map(|r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<i32>(2).ok().flatten().unwrap_or(0)))
        })
        .unwrap_or(None)
    })
    .unwrap_or_else(|| raise("3D000", format!("world \"{given}\" does not exist")));
    if parent != 0 {
        let schema: Option<bool> = catalog_one(
            "SELECT EXISTS (SELECT 1 FROM worlds.world_schema s WHERE s.world = $1)
                 OR EXISTS (SELECT 1 FROM worlds.world_twin t WHERE t.world = $1)",
            &[parent.into()],
        );
        if schema == Some(true) {
            raise_with(
                "0A000",
                format!("forking world \"{name}\" is not supported yet: it has schema changes of its own"),
                None,
                Some("Merge its schema changes first, or simulate from its parent.".into()),
            );
        }
    }
    let (owner, ttl_ms): (Option<String>, i64) = crate::storage::as_internal(|| {
        crate::spi_calls::rows("SELECT a.name, a.world_ttl FROM worlds._session_agent() a WHERE a.name IS NOT NULL", Some(1), &[], |mut t| {
            t.next().map(|r| (r.get::<String>(1).ok().flatten(), r.get::<i64>(2).ok().flatten().unwrap_or(0)))
        })
        .unwrap_or(None)
    })
    .unwrap_or((None, 0));
    let creator: u32 = catalog_one::<pg_sys::Oid>("SELECT worlds._session_user_id()", &[]).map(|o| o.to_u32()).unwrap_or(0);
    let snapshot: Option<String> = if past { None } else { one("SELECT pg_current_snapshot()::text", &[]) };
    let plan = ForkPlan {
        parent,
        depth,
        base_name: name.clone(),
        snapshot,
        fork_at: if past { Some(at.clone()) } else { None },
        owner,
        creator,
        ttl_ms,
    };
    Base { name, id, at, plan }
}

/// World i in this session: forked (its row committed with the statement), its script and score run.
fn one_here(sim: &Simulation, base: &Base, i: i64, home: &str) -> Outcome {
    let seed = sim.world_seed(i);
    let name = sim.world_name(i);
    let id = fork_sim_world(&base.plan, &name, None);
    let (score, error) = match run_world_named(&sim.script, &sim.score, &name, i, seed, home) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e)),
    };
    Outcome { world: name, id: Some(id), index: i, seed, score, error, kept: true }
}


fn sim_meta(sim: &Simulation, base: &Base, o: &Outcome) -> Value {
    json!({
        "seed": o.seed, "index": o.index, "script": sim.script, "score_query": sim.score,
        "score": o.score, "error": o.error, "base": base.name, "base_id": base.id, "at": base.at,
        "descending": sim.descending,
    })
}

/// SIMULATE: the spec's rows (world, id, index, seed, score, error, kept), best first, failed last.
pub fn simulate(sim: Simulation) -> Vec<Value> {
    crate::api::refuse_in_transaction("SIMULATE");
    let _timer = crate::metrics::time(crate::metrics::Timed::Simulate);
    sim.check().unwrap_or_else(|(state, message)| raise(state, message));
    check_score_is_one_select(&sim.score);
    refuse_taken_names(&sim);
    // past worlds.max_disk_bytes no world is made (53100), as CREATE WORLD
    crate::storage::disk_limit::check_simulate(&sim.prefix);
    // THREADS: every free core by default, at most one per world
    let cores = std::thread::available_parallelism().map(|c| c.get() as i64).unwrap_or(1);
    let threads = sim.threads.unwrap_or(cores).clamp(1, sim.n.max(1));
    let base = resolve_base(&sim);
    let home = crate::guc::current_world_setting().to_string_lossy().into_owned();
    let mut outcomes = if threads > 1 {
        // (KEEP k: each worker holds one world more than the k kept)
        refuse_without_room(sim.room_needed().saturating_add(threads - 1).min(sim.n));
        in_workers(&sim, &base, threads)
    } else {
        None
    }
    .unwrap_or_else(|| {
        refuse_without_room(sim.room_needed());
        in_this_session(&sim, &base, &home)
    });
    // the kept worlds remember how they were made (REPLAY WORLD reads it), and are no longer the run's
    for o in outcomes.iter().filter(|o| o.kept) {
        let meta = sim_meta(&sim, &base, o);
        crate::storage::as_internal(|| {
            run(
                "UPDATE worlds.world SET meta = (coalesce(meta, '{}'::jsonb) - '_worlds_sim') || jsonb_build_object('sim', $2::jsonb)
                  WHERE name = $1 AND dropped IS NULL",
                &[o.world.clone().into(), pgrx::JsonB(meta).into()],
            )
        });
    }
    // an agent's SIMULATE is one line of SHOW AUDIT (its worlds' forks aren't one each)
    crate::storage::as_internal(|| run("SELECT worlds._audit('simulate', $1, $2)", &[sim.prefix.clone().into(), sim.n.into()]));
    outcomes.sort_by(|x, y| rank((x.score, x.index), (y.score, y.index), sim.descending));
    outcomes
        .into_iter()
        .map(|o| json!({"world": o.world, "id": o.id, "index": o.index, "seed": o.seed, "score": o.score, "error": o.error, "kept": o.kept}))
        .collect()
}

/// The worlds one after another in this session's transaction (THREADS 1, or no worker free).
fn in_this_session(sim: &Simulation, base: &Base, home: &str) -> Vec<Outcome> {
    let mut outcomes: Vec<Outcome> = Vec::new();
    // the kept ones so far, best first (KEEP k: at most k, each alive)
    let mut best: Vec<usize> = Vec::new();
    for i in 0..sim.n {
        pgrx::check_for_interrupts!();
        replan_as_catalog_grows(i);
        outcomes.push(one_here(sim, base, i, home));
        let me = outcomes.len() - 1;
        let pos = best
            .iter()
            .position(|&b| better((outcomes[me].score, i), (outcomes[b].score, outcomes[b].index), sim.descending))
            .unwrap_or(best.len());
        best.insert(pos, me);
        if let Some(k) = sim.keep {
            while best.len() as i64 > k {
                let out = best.pop().expect("more than k");
                outcomes[out].kept = false;
                drop_sim_world(&outcomes[out].world);
            }
        }
    }
    outcomes
}

/// The worlds in THREADS background workers (simulate_worker.rs), the run's lock held by this
/// transaction; None when no worker could start (then this session runs them, said in a NOTICE).
fn in_workers(sim: &Simulation, base: &Base, threads: i64) -> Option<Vec<Outcome>> {
    // (not random(): SIMULATE seeds this session's)
    let run_id: i32 = one("SELECT hashtext(pg_backend_pid()::text || ':' || clock_timestamp()::text) & 2147483647", &[]).unwrap_or(1);
    run("SELECT pg_advisory_xact_lock(2092161, $1)", &[run_id.into()]);
    let params = super::simulate_worker::RunParams {
        run: run_id,
        worker: 0,
        threads,
        n: sim.n,
        prefix: sim.prefix.clone(),
        script: sim.script.clone(),
        score: sim.score.clone(),
        descending: sim.descending,
        keep: sim.keep,
        seed: sim.seed,
        plan: base.plan.clone(),
        database: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        role: unsafe { pg_sys::GetSessionUserId() }.to_u32(),
    };
    let started = super::simulate_worker::start(&params, threads);
    if started == 0 {
        super::simulate_worker::wait_all(); // (frees the parameters' segments)
        pgrx::notice!("SIMULATE: no background worker free (max_worker_processes): its worlds run in this session");
        return None;
    }
    if started < threads {
        pgrx::notice!("SIMULATE: {started} of {threads} background workers could start (max_worker_processes); the others' worlds wait");
    }
    // (a worker that couldn't start leaves its share: the started ones never take it, so they are run here)
    super::simulate_worker::wait_all();
    let rows: Vec<Outcome> = crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            // (each forked world alive unless it fell out of the best k: the workers' rank, in order)
            "SELECT idx, world, id, seed, score, error,
                    id IS NOT NULL AND ($2::bigint IS NULL OR row_number() OVER (
                        PARTITION BY id IS NOT NULL ORDER BY rank_key NULLS LAST, idx) <= $2)
               FROM worlds.sim_result WHERE run = $1",
            None,
            &[run_id.into(), sim.keep.into()],
            |t| {
                t.map(|r| Outcome {
                    index: r.get::<i64>(1).ok().flatten().unwrap_or(0),
                    world: r.get::<String>(2).ok().flatten().unwrap_or_default(),
                    id: r.get::<String>(3).ok().flatten(),
                    seed: r.get::<i64>(4).ok().flatten().unwrap_or(0),
                    score: r.get::<f64>(5).ok().flatten(),
                    error: r.get::<String>(6).ok().flatten(),
                    kept: r.get::<bool>(7).ok().flatten().unwrap_or(false),
                })
                .collect()
            },
        )
        .unwrap_or_default()
    });
    crate::storage::as_internal(|| run("DELETE FROM worlds.sim_result WHERE run = $1", &[run_id.into()]));
    let mut outcomes = rows;
    let done: std::collections::HashSet<i64> = outcomes.iter().map(|o| o.index).collect();
    // the share of a worker that couldn't start, or stopped: run here, in this session
    let home = crate::guc::current_world_setting().to_string_lossy().into_owned();
    for i in (0..sim.n).filter(|i| !done.contains(i)) {
        pgrx::check_for_interrupts!();
        outcomes.push(one_here(sim, base, i, &home));
    }
    // KEEP k over them all (the workers kept at most k among theirs; the ones run here join them)
    if let Some(k) = sim.keep {
        let mut order: Vec<usize> = (0..outcomes.len()).filter(|&j| outcomes[j].kept).collect();
        order.sort_by(|&a, &b| rank((outcomes[a].score, outcomes[a].index), (outcomes[b].score, outcomes[b].index), sim.descending));
        for &j in order.iter().skip(k as usize) {
            outcomes[j].kept = false;
            drop_sim_world(&outcomes[j].world);
        }
    }
    Some(outcomes)
}

/// REPLAY WORLD w [AS name]: one row (world, replay, identical, rows_differing, score, recorded_score,
/// error).
pub fn replay(world: &str, keep_as: Option<String>) -> Vec<Value> {
    crate::api::refuse_in_transaction("REPLAY WORLD");
    let sim: Option<pgrx::JsonB> = catalog_one("SELECT (w).meta -> 'sim' FROM (SELECT worlds._resolve($1) w) r", &[world.into()]);
    let Some(pgrx::JsonB(meta)) = sim else {
        raise("22023", format!("world \"{world}\" has no sim metadata: it wasn't kept by SIMULATE"))
    };
    let text = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
    let (Some(script), Some(score_query), Some(base), Some(at), Some(index), Some(seed)) = (
        text("script"),
        text("score_query"),
        text("base"),
        text("at"),
        meta.get("index").and_then(Value::as_i64),
        meta.get("seed").and_then(Value::as_i64),
    ) else {
        raise("22023", format!("world \"{world}\"'s sim metadata is incomplete (it needs script, score_query, base, at, index and seed)"))
    };
    let recorded_score = meta.get("score").and_then(Value::as_f64);
    let recorded_error = text("error");
    let name = keep_as.clone().unwrap_or_else(|| {
        one::<String>("SELECT '_replay_' || substr(md5(random()::text || clock_timestamp()::text), 1, 12)", &[]).unwrap_or_default()
    });
    let home = crate::guc::current_world_setting().to_string_lossy().into_owned();
    run("SELECT worlds.create_world(name => $1, source => $2)", &[name.clone().into(), format!("{base}@{at}").into()]);
    let sim = Simulation {
        n: index + 1,
        base: Some(base),
        prefix: String::new(),
        script,
        score: score_query,
        descending: meta.get("descending").and_then(Value::as_bool).unwrap_or(true),
        keep: None,
        seed: seed - index,
        threads: None,
    };
    let r = run_world_named(&sim.script, &sim.score, &name, index, seed, &home);
    let (score, error) = match r {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e)),
    };
    let differing: i64 = one(
        "SELECT count(*) FROM worlds.sql('diff world ' || quote_literal($1) || ' to ' || quote_literal($2)) d WHERE d ? 'table'",
        &[name.clone().into(), world.into()],
    )
    .unwrap_or(0);
    let identical = differing == 0 && score == recorded_score && error.is_none() == recorded_error.is_none();
    if keep_as.is_none() {
        drop_sim_world(&name);
    }
    vec![json!({
        "world": world, "replay": keep_as, "identical": identical, "rows_differing": differing,
        "score": score, "recorded_score": recorded_score, "error": error,
    })]
}
