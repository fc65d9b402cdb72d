//! The stale-read gate (spec, "Stale reads"): a world forked WITH (check_reads = true) is held when
//! rows it only read changed in its parent since the fork.
//!
//! - `record.rs`: what each statement reads through the world, from its plan at ExecutorStart;
//! - `shmem.rs`: where that is kept (shared memory, saved at a clean shutdown);
//! - `check.rs`: the judgement against the parent's changes since the fork.
//!
//! MERGE (every form: partial merges check every read) and REBASE are refused with 40001, DRY RUN shows
//! it in its blocked row, an agent keeping to a merge policy has it as a broken rule (queued), and
//! CHECK READS lists it without merging.
use crate::api::raise;
use crate::world::WorldRow;
use pgrx::prelude::*;

pub mod check;
pub mod record;
mod nodes;
mod sent;
pub mod shmem;
mod stopped;
pub use stopped::finish;

pub use record::record;

/// The hold a stale read puts on a merge (or rebase) of `world`.
pub fn held(world: &WorldRow, verb: &str) -> Option<super::Hold> {
    let s = check::stale(world.num)?;
    let what = s.what();
    Some(super::Hold {
        code: "40001",
        message: worlds_core::reads::refusal(verb, &world.name, &what),
        hint: Some(format!("Or, having checked, a person turns the check off: ALTER WORLD {} SET (check_reads = false).", world.name)),
        rule: what,
    })
}

/// After the merge applied, right before it commits: the reads judged again, each query on a new
/// snapshot, so a read row its parent changed while the merge ran refuses it (40001, whoever merges:
/// the race is lost, not a rule broken). A parent's write committed after this is ordered after the
/// merge: it read nothing the merge wrote, the merge read what it had before.
pub fn gate_again(world: &WorldRow) {
    if let Some(h) = held(world, "merging") {
        crate::api::raise_with(h.code, h.message, None, h.hint);
    }
}

/// `worlds._reads_begin(world)`: a world forked WITH (check_reads = true) begins keeping its reads.
/// Worlds that ended since are forgotten first.
#[pg_extern(volatile, parallel_unsafe)]
fn _reads_begin(world: i32) {
    if !shmem::available() {
        crate::api::raise_with(
            "0A000",
            "check_reads needs pg_worlds in shared_preload_libraries: what a world reads is kept in shared memory",
            None,
            Some("Add pg_worlds to shared_preload_libraries and restart the server.".into()),
        );
    }
    let registered = shmem::registered();
    if !registered.is_empty() {
        let live: Vec<i32> = crate::storage::as_internal(|| {
            crate::spi_calls::get_one_with_args::<Vec<i32>>(
                "SELECT coalesce(array_agg(num), '{}') FROM worlds.world WHERE num = ANY($1) AND dropped IS NULL",
                &[registered.clone().into()],
            )
        })
        .ok()
        .flatten()
        .unwrap_or_default();
        let ended: Vec<i32> = registered.into_iter().filter(|w| !live.contains(w) && *w != world).collect();
        shmem::forget(&ended);
    }
    if !shmem::register_world(world) {
        raise("53400", "too many worlds check their reads (1024 at most): merge or drop one first");
    }
}

/// `worlds._read_set_stats()`: entries held in shared memory (worlds, tables, keys, scans) and its size.
#[pg_extern(volatile, parallel_safe)]
fn _read_set_stats() -> TableIterator<'static, (name!(worlds, i64), name!(tables, i64), name!(keys, i64), name!(scans, i64), name!(bytes, i64))> {
    let [w, t, k, s] = shmem::counts();
    TableIterator::once((w, t, k, s, shmem::bytes() as i64))
}

/// CHECK READS [OF WORLD w] (`worlds.check_reads(w)`): what the world read that changed since its fork,
/// with what it was checked against; changes nothing. 55000 for a world that doesn't check its reads.
#[pg_extern(volatile, parallel_unsafe)]
fn check_reads(world: default!(Option<&str>, "NULL")) -> TableIterator<'static, (name!(checked_against, String), name!(changed, String))> {
    let session = crate::guc::current_world_setting().to_string_lossy().into_owned();
    let rows = crate::storage::as_internal(|| {
        let name = world.map(str::to_string).unwrap_or(session);
        let w = crate::world::resolve_world(&name);
        if w.num == 0 {
            raise("55000", "main doesn't check its reads: it has no fork point to check them against");
        }
        crate::governance::agents::require("read", Some(w.num));
        if !record::checks_reads_now(w.num) {
            crate::api::raise_with(
                "55000",
                format!("world {} doesn't check its reads", w.name),
                None,
                Some("Fork a world WITH (check_reads = true) to have its reads checked.".into()),
            );
        }
        let parent = crate::spi_calls::get_one_with_args::<String>("SELECT name FROM worlds.world WHERE num = $1", &[w.parent.unwrap_or(0).into()])
            .ok()
            .flatten()
            .unwrap_or_else(|| "main".into());
        check::stale(w.num).map(|s| vec![(parent, s.what())]).unwrap_or_default()
    });
    TableIterator::new(rows)
}
