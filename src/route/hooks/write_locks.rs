//! The ExecutorStart hook's part for writes (and row-locking reads) in a world: the locks a statement takes
//! before it reads its target rows (storage/world_locks.rs), and the snapshot it then reads on.
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
/// - A statement that locks rows (`FOR UPDATE / SHARE`, route/row_locks.rs): under READ COMMITTED, when it
///   names their keys and waits for locks, those keys (SHARED for FOR SHARE) before it reads, as for a
///   write; else the world's lock SHARED, and each row's key is locked as the row is read. A table without
///   a key: the world's lock EXCLUSIVE.
pub(super) unsafe fn lock_world_before_reading(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        use storage::world_locks::{self, Mode, Wait};
        let stmt = (*query_desc).plannedstmt;
        let targets = world_targets(stmt);
        // the rows it locks (FOR UPDATE / SHARE: route/row_locks.rs)
        let locks = crate::route::row_locks::lock_calls(stmt);
        if targets.is_empty() && locks.is_empty() {
            return;
        }
        let Some(world) = overlay::routing_world().filter(|w| w.num > 0 && !w.read_only) else { return };
        let read_committed = pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32;
        let keyless = locks.iter().any(|l| storage::relation_layout(l.tabno).key_attnos.is_empty());
        // the tables whose keys are locked before reading: the targets, and under READ COMMITTED the tables
        // a plain FOR UPDATE / SHARE locks (SKIP LOCKED and NOWAIT lock row by row; under REPEATABLE READ a
        // row lock must see whether the row changed since the transaction's snapshot)
        let mut named: Vec<(i32, Mode)> = targets.iter().map(|&t| (t, Mode::Exclusive)).collect();
        if read_committed && !keyless {
            for l in locks.iter().filter(|l| l.wait == Wait::Block) {
                let mode = if l.exclusive { Mode::Exclusive } else { Mode::Shared };
                match named.iter_mut().find(|n| n.0 == l.tabno) {
                    Some(n) => n.1 = n.1.max(mode),
                    None => named.push((l.tabno, mode)),
                }
            }
        }
        let tabnos: Vec<i32> = named.iter().map(|n| n.0).collect();
        // the key locks taken before reading, for the writes' checks (world_locks::locked_before_reading)
        let mut before_reading: Vec<i64> = Vec::new();
        let fresh = if (*query_desc).operation == pg_sys::CmdType::CMD_INSERT && locks.is_empty() {
            world_locks::lock_world(&world, Mode::Shared);
            false
        } else if let Some(mut keys) = (!tabnos.is_empty() && (!keyless || !targets.is_empty()))
            .then(|| crate::route::scans::keys::keys_written(stmt, (*query_desc).params, &tabnos))
            .flatten()
            .filter(|k| k.len() <= world_locks::MAX_KEY_LOCKS)
        {
            let mut taken = world_locks::lock_world(&world, Mode::Shared);
            let mut ids: Vec<(i64, Mode)> = keys
                .drain(..)
                .map(|(t, k)| (world_locks::key_id(world.num, t, &k), named.iter().find(|n| n.0 == t).map(|n| n.1).unwrap_or(Mode::Exclusive)))
                .collect();
            ids.sort_unstable();
            ids.dedup_by(|b, a| a.0 == b.0 && {
                a.1 = a.1.max(b.1);
                true
            });
            for (id, mode) in ids {
                taken |= world_locks::lock_key_with(&world, id, mode, Wait::Block).unwrap_or(true);
                if mode == Mode::Exclusive {
                    before_reading.push(id);
                }
            }
            taken
        } else if !locks.is_empty() && !keyless {
            // rows locked as read: the world's lock SHARED (a write among them meets its locked rows
            // unchanged, or fails with 40001)
            world_locks::lock_world(&world, Mode::Shared)
        } else if world_locks::held(&world).is_none() {
            world_locks::lock_world(&world, Mode::Exclusive)
        } else {
            false
        };
        // the statement's snapshot, taken again now that the writers it waited for are done (the portal's
        // active snapshot is replaced in place: the portal pops it as its own), and the world resolved on it
        let mut read_after_locks = !fresh;
        if fresh
            && pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32
            && crate::fast_ffi::ActiveSnapshotSet()
            && !(*query_desc).snapshot.is_null()
            && (*query_desc).snapshot == crate::fast_ffi::GetActiveSnapshot()
        {
            pg_sys::PopActiveSnapshot();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            pg_sys::UnregisterSnapshot((*query_desc).snapshot);
            (*query_desc).snapshot = pg_sys::RegisterSnapshot(crate::fast_ffi::GetActiveSnapshot());
            overlay::next_statement();
            read_after_locks = true;
        }
        // (keys this transaction held before the statement began, or locked just now and then read on a
        // snapshot taken after them)
        if read_after_locks && read_committed && !before_reading.is_empty() {
            world_locks::note_locked_before_reading(before_reading);
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
        let overlays = storage::overlay_relations();
        let mut out = Vec::new();
        for i in 0..(*results).length {
            let index = crate::fast_ffi::list_nth_int(results, i);
            let relid = (*(crate::fast_ffi::list_nth((*stmt).rtable, index - 1) as *mut pg_sys::RangeTblEntry)).relid;
            if let Some(&t) = overlays.get(&relid) {
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
        // (compared by the schema's oid: its name was a second syscache lookup and a copy per write)
        let storage = storage::storage_namespace();
        storage != pg_sys::Oid::INVALID
            && (0..(*results).length).any(|i| {
                let index = crate::fast_ffi::list_nth_int(results, i);
                let rte = crate::fast_ffi::list_nth((*stmt).rtable, index - 1) as *mut pg_sys::RangeTblEntry;
                pg_sys::get_rel_namespace((*rte).relid) == storage
            })
    }
}
