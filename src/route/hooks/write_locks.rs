//! The ExecutorStart hook's part for writes in a world: the locks a write statement takes before it reads
//! its target rows (storage/world_locks.rs), and the snapshot it then reads on.
use crate::storage::{self, overlay};
use pgrx::pg_sys;

/// Before a write statement of a world reads its target rows, it takes the locks its writes need, and
/// under READ COMMITTED it then reads on a snapshot taken after them: as Postgres's UPDATE waits for a
/// row's writer and reads the row as that writer left it.
/// - An INSERT reads none of its target's rows: the world's lock SHARED (its keys are locked as written).
/// - A statement that names its target's keys (`WHERE id = $1`, `IN (...)`: storage::world_locks): the
///   world's lock SHARED and those keys' locks, sorted. Writers of other keys run beside it.
/// - Any other (a range, a join, a scan): the world's lock EXCLUSIVE when the transaction holds none yet,
///   so it reads what every other writer committed. A transaction holding the SHARED lock already keeps
///   it (taking EXCLUSIVE then could deadlock with another such one): its rows are locked as written, and
///   one another session changed since the statement read it fails with 40001, as under REPEATABLE READ.
pub(super) unsafe fn lock_world_before_reading(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        use storage::world_locks::{self, Mode};
        let stmt = (*query_desc).plannedstmt;
        let targets = world_targets(stmt);
        if targets.is_empty() {
            return;
        }
        let Some(world) = overlay::routing_world().filter(|w| w.num > 0 && !w.read_only) else { return };
        let fresh = if (*query_desc).operation == pg_sys::CmdType::CMD_INSERT {
            world_locks::lock_world(&world, Mode::Shared);
            false
        } else if let Some(mut keys) = crate::route::history_lookup::keys_written(stmt, (*query_desc).params, &targets)
            .filter(|k| k.len() <= world_locks::MAX_KEY_LOCKS)
        {
            let mut taken = world_locks::lock_world(&world, Mode::Shared);
            let mut ids: Vec<i64> = keys.drain(..).map(|(t, k)| world_locks::key_id(world.num, t, &k)).collect();
            ids.sort_unstable();
            ids.dedup();
            for id in ids {
                taken |= world_locks::lock_key(&world, id);
            }
            taken
        } else if world_locks::held(&world).is_none() {
            world_locks::lock_world(&world, Mode::Exclusive)
        } else {
            false
        };
        // the statement's snapshot, taken again now that the writers it waited for are done (the portal's
        // active snapshot is replaced in place: the portal pops it as its own), and the world resolved on it
        if fresh
            && pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32
            && pg_sys::ActiveSnapshotSet()
            && !(*query_desc).snapshot.is_null()
            && (*query_desc).snapshot == pg_sys::GetActiveSnapshot()
        {
            pg_sys::PopActiveSnapshot();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            pg_sys::UnregisterSnapshot((*query_desc).snapshot);
            (*query_desc).snapshot = pg_sys::RegisterSnapshot(pg_sys::GetActiveSnapshot());
            overlay::next_statement();
        }
    }
}

/// The tracked tables whose overlay views (or view twins) the plan writes: the session world's tables.
unsafe fn world_targets(stmt: *mut pg_sys::PlannedStmt) -> Vec<i32> {
    unsafe {
        let results = (*stmt).resultRelations;
        if results.is_null() || !writes_a_world(stmt) {
            return Vec::new();
        }
        let tracked = storage::tracked_tables();
        let mut out = Vec::new();
        for i in 0..(*results).length {
            let index = pg_sys::list_nth_int(results, i);
            let relid = (*(pg_sys::list_nth((*stmt).rtable, index - 1) as *mut pg_sys::RangeTblEntry)).relid;
            if let Some(&t) = tracked.values().find(|&&t| {
                let l = storage::relation_layout(t);
                l.overlay == relid || l.overlay_nothing == relid || l.overlay_rows == relid
            }) {
                out.push(t);
            }
        }
        out
    }
}

/// Does the plan write one of pg_worlds' overlay views (or a view twin): a write of the session's world?
unsafe fn writes_a_world(stmt: *mut pg_sys::PlannedStmt) -> bool {
    unsafe {
        let results = (*stmt).resultRelations;
        if results.is_null() {
            return false;
        }
        (0..(*results).length).any(|i| {
            let index = pg_sys::list_nth_int(results, i);
            let rte = pg_sys::list_nth((*stmt).rtable, index - 1) as *mut pg_sys::RangeTblEntry;
            let ns = pg_sys::get_rel_namespace((*rte).relid);
            let name = pg_sys::get_namespace_name(ns);
            !name.is_null() && std::ffi::CStr::from_ptr(name).to_bytes() == b"worlds_data"
        })
    }
}
