//! The stale-read gate (spec, "Stale reads"): a world forked WITH (check_reads = true) is held when
//! rows it only read changed in its parent since the fork.
//!
//! - `record.rs`: what each statement reads through the world, from its plan at ExecutorStart;
//! - `shmem.rs`: where that is kept (shared memory, saved at a clean shutdown);
//! The facts are gathered by the merge (merge/stale_reads.rs: the parent's changes since the fork, matched
//! against these reads) and judged by the judge (governance/judge.rs).
//!
//! MERGE (every form: partial merges check every read) and REBASE are refused with 40001, DRY RUN shows
//! it in its blocked row, an agent keeping to a merge policy has it as a broken rule (queued), and
//! CHECK READS lists it without merging.
use crate::api::raise;
use pgrx::prelude::*;

pub mod record;
mod nodes;
mod sent;
pub mod shmem;
mod stopped;
pub use stopped::finish;

pub use record::record;

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
