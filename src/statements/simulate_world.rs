//! One world of a simulation: forked by SIMULATE's own INSERT, its script and score run in it (seeded,
//! confined, in a subtransaction), dropped. Shared by SIMULATE in the session (simulate.rs) and by its
//! background workers (simulate_worker.rs).
use crate::api::raise;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use serde_json::json;
use worlds_core::grammar::random_seed;

/// Marks the caller's script running (governance::read_only refuses what would leave its world) for
/// as long as it lives.
struct Confined;
impl Confined {
    fn enter() -> Confined {
        crate::governance::read_only::set_confined(true);
        Confined
    }
}
impl Drop for Confined {
    fn drop(&mut self) {
        crate::governance::read_only::set_confined(false);
    }
}


pub(super) fn one<T: pgrx::datum::FromDatum + pgrx::datum::IntoDatum>(sql: &str, args: &[DatumWithOid]) -> Option<T> {
    crate::spi_calls::get_one_with_args::<T>(sql, args).unwrap_or_else(|e| raise("XX000", format!("{e}")))
}

/// `one` as pg_worlds' own work: its catalog and internal functions are not the caller's to read.
pub(super) fn catalog_one<T: pgrx::datum::FromDatum + pgrx::datum::IntoDatum>(sql: &str, args: &[DatumWithOid]) -> Option<T> {
    crate::storage::as_internal(|| one(sql, args))
}

pub(super) fn run(sql: &str, args: &[DatumWithOid]) {
    crate::spi_calls::run_with_args(sql, args).unwrap_or_else(|e| raise("XX000", format!("{e}")))
}


/// The score query's first value as a number (the world fails with 22023 when it isn't one).
pub(super) fn score_of(score: &str, args: &[DatumWithOid]) -> f64 {
    let text = crate::spi_calls::rows(score, Some(1), args, |t| {
        if t.is_empty() {
            return None;
        }
        unsafe {
            let tt = pg_sys::SPI_tuptable;
            if tt.is_null() || (*tt).numvals == 0 {
                return None;
            }
            let v = pg_sys::SPI_getvalue(*(*tt).vals, (*tt).tupdesc, 1);
            if v.is_null() { None } else { Some(std::ffi::CStr::from_ptr(v).to_string_lossy().into_owned()) }
        }
    })
    .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    let Some(text) = text else { raise("22004", "the score gave no value (no row, or NULL)") };
    match text.trim().parse::<f64>() {
        Ok(f) if f.is_finite() => f,
        _ => raise("22023", format!("the score's first value isn't a number: {text}")),
    }
}


/// A simulation's worlds are forked by one INSERT each, not by CREATE WORLD: what CREATE WORLD checks for
/// every fork (the rights, the names, the room, the database's first world's storage) SIMULATE checked
/// once, and its statement-wide work (the expiry sweep, counting live worlds) would scan the catalog's
/// rows of every world the run dropped so far, which no VACUUM can remove while the run's transaction is
/// open: O(worlds) per world. Also the workers' (RunParams carries it).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct ForkPlan {
    pub parent: i32,
    pub depth: i32,
    pub base_name: String,
    pub snapshot: Option<String>,
    pub fork_at: Option<String>,
    pub owner: Option<String>,
    pub creator: u32,
    pub ttl_ms: i64,
}

/// Forks one world of a simulation as `plan` says; its id. A name taken since SIMULATE checked: 42710.
pub(super) fn fork_sim_world(plan: &ForkPlan, name: &str, marker: Option<i32>) -> String {
    let meta = pgrx::JsonB(match marker {
        Some(run) => json!({"_worlds_sim": {"run": run}}),
        None => json!({}),
    });
    crate::storage::as_internal(|| {
        run("SELECT worlds._ensure_world_storage()", &[]);
        let taken: Option<bool> = one("SELECT EXISTS (SELECT 1 FROM worlds.world WHERE name = $1 AND dropped IS NULL)", &[name.into()]);
        if taken == Some(true) {
            raise("42710", format!("world \"{name}\" already exists"));
        }
        let (num, id): (i32, String) = crate::spi_calls::rows(
            "WITH n AS (SELECT nextval('worlds.world_num_seq')::integer AS num)
             INSERT INTO worlds.world (num, id, name, parent, depth, created, meta, active, fork_snapshot, fork_at, owner, creator, expires)
             SELECT n.num, 'w' || lpad(to_hex(n.num), 6, '0') || '-' || substr(md5(clock_timestamp()::text || n.num || pg_backend_pid()), 1, 10),
                    $1, $2, $3, clock_timestamp(), $4, clock_timestamp(), $5::pg_snapshot, $6::timestamptz, $7, $8::oid,
                    CASE WHEN $9 > 0 THEN clock_timestamp() + $9 * interval '1 ms' END
               FROM n RETURNING num, id",
            Some(1),
            &[
                name.into(),
                plan.parent.into(),
                (plan.depth + 1).into(),
                meta.into(),
                plan.snapshot.clone().into(),
                plan.fork_at.clone().into(),
                plan.owner.clone().into(),
                (plan.creator as i64).into(),
                plan.ttl_ms.into(),
            ],
            |mut t| t.next().map(|r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<String>(2).ok().flatten().unwrap_or_default())),
        )
        .unwrap_or_else(|e| raise("XX000", format!("{e}")))
        .unwrap_or_else(|| raise("XX000", "the world's row wasn't made"));
        run(
            "INSERT INTO worlds.event (world, event) VALUES ($1, 'forked from ' || $3), ($2, 'forked ' || $4)",
            &[num.into(), plan.parent.into(), plan.base_name.clone().into(), name.into()],
        );
        id
    })
}

/// Drops one world of a simulation (it has no forks: its script couldn't make one).
/// After the 16th, 64th, 256th, ... world a session ran: its cached plans are made again. pg_worlds'
/// catalog grows by a row per world (worlds.world keeps a dropped world's row), and a plan cached while it
/// was small (a sequential scan of two pages) would otherwise be kept for the whole run and walk every row
/// the run added, for every world: quadratic (bench P13f). Made again, the planner sees the table as it is
/// now (its pages) and takes the keys' indexes.
pub(super) fn replan_as_catalog_grows(worlds_done: i64) {
    if worlds_done >= 16 && (worlds_done as u64).is_power_of_two() && (worlds_done as u64).trailing_zeros() % 2 == 0 {
        unsafe { pg_sys::ResetPlanCache() };
    }
}

pub(super) fn drop_sim_world(name: &str) {
    crate::storage::as_internal(|| run("SELECT worlds._discard(w) FROM worlds.world w WHERE w.name = $1 AND w.dropped IS NULL", &[name.into()]));
}


pub(super) fn set_world(name: &str) {
    run("SELECT pg_catalog.set_config('worlds.world', $1, true)", &[name.into()]);
}


/// Runs a script and a score in world `name` with `$1` = i and `$2` = seed, random() seeded from the
/// seed before each (a subtransaction: a failure rolls the world's writes back and comes back as
/// `SQLSTATE: message`). Also the workers' (simulate_worker.rs).
pub(super) fn run_world_named(script: &str, score: &str, name: &str, i: i64, seed: i64, home: &str) -> Result<f64, String> {
    let args: Vec<DatumWithOid> = vec![i.into(), seed.into()];
    let r = crate::subxact::in_subtransaction(|| {
        set_world(name);
        run("SELECT setseed($1)", &[random_seed(seed).into()]);
        {
            let _c = Confined::enter();
            crate::spi_calls::run_with_args(script, &args).unwrap_or_else(|e| raise("XX000", format!("{e}")));
        }
        run("SELECT setseed($1)", &[random_seed(seed).into()]);
        let value = {
            let _c = Confined::enter();
            score_of(score, &args)
        };
        set_world(home);
        value
    });
    set_world(home);
    r.map_err(|e| {
        let (state, message) = crate::subxact::state_and_message(&e);
        format!("{state}: {message}")
    })
}
