//! A world writer's commit bookkeeping (write_events::commit_writes) without SPI: the `write` / `commit`
//! event inserted and the world's version moved with the executor's own single-row calls, the ones
//! logical replication applies rows with (`ExecSimpleRelationInsert`, `ExecSimpleRelationUpdate`, and the
//! find-and-lock of its `RelationFindReplTupleByIndex` without that function's LOG line at every race):
//! constraints checked, indexes kept, AFTER triggers (the catalog's foreign keys) queued and fired. The SPI statement did the same through a generic plan, executor start and end,
//! and was a fifteenth of a world's TPC-B transaction.
//!
//! The world's row is found and locked at its latest version, waiting for a writer of it still in
//! progress, as an UPDATE does under READ COMMITTED, whatever the transaction's isolation level: the row
//! counts the world's commits, and another session's commit in the world is no conflict of this one (their
//! rows are checked key by key as they are written). Under REPEATABLE READ and SERIALIZABLE the commit
//! fails (40001, as Postgres's UPDATE of a row changed since the snapshot) when the world was dropped or
//! rebased since the transaction's snapshot: what it read of main stood on the old fork point. (The
//! UPDATE statement used there before failed at every other session's commit in the world.)
use pgrx::prelude::*;
use crate::backend_local::BackendLocal;

/// The commit's event row: (seq, at, event, rows); its world is the one whose version moves.
pub struct EventRow<'a> {
    pub seq: i64,
    pub at: pg_sys::TimestampTz,
    pub event: &'a str,
    pub rows: i64,
}

/// Inserts `event` (seq, at, world, event, rows, xid) when given and adds `k` to world `num`'s version; the
/// new version. None when nothing was done (no active snapshot, the catalog isn't as expected, no such
/// world): the caller runs its statement then.
///
/// # Safety
/// Inside a transaction, a snapshot active, as pg_worlds (as_internal).
pub unsafe fn commit(event: Option<EventRow>, num: i32, k: i64) -> Option<i64> {
    unsafe {
        if !crate::fast_ffi::ActiveSnapshotSet() {
            return None;
        }
        // (a world can't be dropped or rebased while its writers hold its lock, which they take at their
        // first write and keep to the end: checked once, here)
        if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 && super::overlay::world_moved_since_snapshot(num) {
            crate::api::raise("40001", "could not serialize access due to concurrent update".to_string());
        }
        let (Some(w), Some(e)) = (super::overlay::world_table(), events_table()) else { return None };
        let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
        let world = pg_sys::table_open(w.relid, lock);
        let events = pg_sys::table_open(e.relid, lock);
        let close = || {
            pg_sys::table_close(events, pg_sys::NoLock as i32);
            pg_sys::table_close(world, pg_sys::NoLock as i32);
        };
        let (w_num, w_version, w_active) = (w.num as usize, w.version as usize, w.active as usize);
        let e_cols = e.cols;
        let pkey = pg_sys::RelationGetPrimaryKeyIndex(world);
        // nothing of the table's own code on either relation but its constraints and the foreign keys'
        // AFTER triggers (which these calls run as the statement would)
        let plain = |rel: pg_sys::Relation| {
            let trig = (*rel).trigdesc;
            (trig.is_null() || (!(*trig).trig_insert_before_row && !(*trig).trig_update_before_row && !(*trig).trig_insert_instead_row))
                && !(*(*rel).rd_rel).relhasrules
                && !(*(*rel).rd_rel).relispartition
                && !(*(*rel).rd_att).constr.as_ref().is_some_and(|c| c.has_generated_stored)
        };
        if [w_num, w_version, w_active].contains(&0) || e_cols.contains(&0) || pkey == pg_sys::Oid::INVALID || !plain(world) || !plain(events) {
            close();
            return None;
        }
        let estate = pg_sys::CreateExecutorState();
        let rte = |rel: pg_sys::Relation| {
            let r = PgBox::<pg_sys::RangeTblEntry>::alloc_node(pg_sys::NodeTag::T_RangeTblEntry).into_pg();
            (*r).rtekind = pg_sys::RTEKind::RTE_RELATION;
            (*r).relid = (*rel).rd_id;
            (*r).relkind = pg_sys::RELKIND_RELATION as std::ffi::c_char;
            (*r).rellockmode = lock;
            r
        };
        let mut rtable = pg_sys::lappend(std::ptr::null_mut(), rte(world).cast());
        rtable = pg_sys::lappend(rtable, rte(events).cast());
        pg_sys::ExecInitRangeTable(estate, rtable);
        // (the world's result relation made only when its indexes or AFTER triggers have work: `Target`)
        let world_info = Target { rel: world, info: std::cell::Cell::new(std::ptr::null_mut()) };
        let event_info = PgBox::<pg_sys::ResultRelInfo>::alloc_node(pg_sys::NodeTag::T_ResultRelInfo).into_pg();
        pg_sys::InitResultRelInfo(event_info, events, 2, std::ptr::null_mut(), 0);
        (*estate).es_output_cid = pg_sys::GetCurrentCommandId(true);
        (*estate).es_snapshot = crate::fast_ffi::GetActiveSnapshot();
        pg_sys::AfterTriggerBeginQuery();
        // (the world's six indexes are opened only if its new version isn't a heap-only tuple: below)
        pg_sys::ExecOpenIndices(event_info, false);

        let set = |slot: *mut pg_sys::TupleTableSlot, at: usize, d: Option<pg_sys::Datum>| {
            *(*slot).tts_values.add(at - 1) = d.unwrap_or(pg_sys::Datum::from(0usize));
            *(*slot).tts_isnull.add(at - 1) = d.is_none();
        };
        // the world's row moved to its new version: updated from where this backend last saw it, when that
        // version is still there (update_from_known), else found and locked through its key first
        let newslot = pg_sys::ExecInitExtraTupleSlot(estate, (*world).rd_att, &pg_sys::TTSOpsVirtual);
        let cols = VersionColumns { version: w_version, active: w_active, num: w_num, k };
        let mut version = match super::overlay::known_world_row(num) {
            Some(known) => update_from_known(&world_info, estate, num, known, cols, newslot),
            None => None,
        };
        if version.is_none() {
            let found_slot = pg_sys::table_slot_create(world, &mut (*estate).es_tupleTable);
            if find_and_lock(world, pkey, num, found_slot) {
                let mut isnull = false;
                let v = crate::fast_ffi::slot_getattr(found_slot, w_version as i32, &mut isnull);
                if !isnull {
                    let new_version = v.value() as i64 + k;
                    pg_sys::ExecClearTuple(newslot);
                    pg_sys::slot_getallattrs(found_slot);
                    let natts = (*(*world).rd_att).natts as usize;
                    std::ptr::copy_nonoverlapping((*found_slot).tts_values, (*newslot).tts_values, natts);
                    std::ptr::copy_nonoverlapping((*found_slot).tts_isnull, (*newslot).tts_isnull, natts);
                    set(newslot, w_version, Some(pg_sys::Datum::from(new_version)));
                    set(newslot, w_active, Some(pg_sys::Datum::from(pg_sys::GetCurrentTimestamp())));
                    pg_sys::ExecStoreVirtualTuple(newslot);
                    update_world_row(&world_info, estate, found_slot, newslot);
                    version = Some(new_version);
                }
            }
        }
        if version.is_some() {
            // (the next statements, this backend's, read the world's row at this version by its position)
            super::overlay::wrote_world_row(num, super::overlay::RowAt { tid: (*newslot).tts_tid, xmin: pg_sys::GetCurrentTransactionId() });
            // (and the transaction's next first statement reads it without the heap, when nothing else
            // completed in between: overlay::worlds::wrote_world_row_values)
            super::overlay::wrote_world_row_values(num, newslot, (*world).rd_att);
        }
        if let (Some(_), Some(ev)) = (version, event) {
            let (seq, at, event, rows) = (ev.seq, ev.at, ev.event, ev.rows);
            // the event
            let eslot = pg_sys::ExecInitExtraTupleSlot(estate, (*events).rd_att, &pg_sys::TTSOpsVirtual);
            pg_sys::ExecClearTuple(eslot);
            for i in 0..(*(*events).rd_att).natts as usize {
                *(*eslot).tts_isnull.add(i) = true;
            }
            let text = pg_sys::cstring_to_text_with_len(event.as_ptr().cast(), event.len() as i32);
            let xid = pg_sys::GetTopFullTransactionIdIfAny();
            set(eslot, e_cols[0], Some(pg_sys::Datum::from(seq)));
            set(eslot, e_cols[1], Some(pg_sys::Datum::from(at)));
            set(eslot, e_cols[2], Some(pg_sys::Datum::from(num)));
            set(eslot, e_cols[3], Some(pg_sys::Datum::from(text)));
            set(eslot, e_cols[4], Some(pg_sys::Datum::from(rows)));
            set(eslot, e_cols[5], (xid.value != 0).then(|| pg_sys::Datum::from(xid.value)));
            pg_sys::ExecStoreVirtualTuple(eslot);
            pg_sys::ExecSimpleRelationInsert(event_info, estate, eslot);
        }
        let info = world_info.info.get();
        if !info.is_null() && !(*info).ri_IndexRelationDescs.is_null() {
            pg_sys::ExecCloseIndices(info);
        }
        pg_sys::ExecCloseIndices(event_info);
        pg_sys::AfterTriggerEndQuery(estate);
        // the relations the foreign keys' AFTER triggers opened (a world row made by this transaction is
        // checked at every update): closed, as ExecEndPlan does, or their references leak
        pg_sys::ExecCloseResultRelations(estate);
        pg_sys::ExecResetTupleTable((*estate).es_tupleTable, false);
        pg_sys::FreeExecutorState(estate);
        close();
        pg_sys::CommandCounterIncrement();
        // (None: no row of the world, nothing written; the statement then says what it says)
        version
    }
}

/// The world's row updated to `newslot` from its locked version in `found`, as `ExecSimpleRelationUpdate`
/// updates a row (no BEFORE triggers or generated columns: `commit` checked), but paying for the world's
/// indexes and AFTER triggers only when they have work (`after_update`).
///
/// # Safety
/// As `commit`'s, with `world_info` worlds.world as its target (range-table entry 1 of `estate`).
unsafe fn update_world_row(world_info: &Target, estate: *mut pg_sys::EState, found: *mut pg_sys::TupleTableSlot, newslot: *mut pg_sys::TupleTableSlot) {
    unsafe {
        let rel = world_info.rel;
        pg_sys::CheckCmdReplicaIdentity(rel, pg_sys::CmdType::CMD_UPDATE);
        world_info.check_constraints(estate, newslot);
        // (whether this transaction made the row, read before the update moves it)
        let made_here = {
            let mut free = false;
            let tuple = pg_sys::ExecFetchSlotHeapTuple(found, false, &mut free);
            crate::fast_ffi::TransactionIdIsCurrentTransactionId((*(*tuple).t_data).t_choice.t_heap.t_xmin)
        };
        let mut tid = (*found).tts_tid;
        let mut update_indexes = false;
        pg_sys::simple_table_tuple_update(rel, &mut tid, newslot, (*estate).es_snapshot, &mut update_indexes);
        after_update(world_info, estate, &mut tid, newslot, update_indexes, made_here);
    }
}

/// What an update of the world's row does after the heap's: the world's indexes kept (opened only when the
/// new version isn't a heap-only tuple: the version and `active` are in no index, so it is one unless its
/// page is full) and the AFTER UPDATE triggers fired when they can have work. The catalog's are the foreign
/// keys' (the tables that reference a world, and its `parent`): a key they compare doesn't change, so they
/// queue nothing, unless the row was made by this transaction (`made_here`), which the referencing side
/// checks again (`RI_FKey_fk_upd_check_required`); any trigger of another kind is always fired.
unsafe fn after_update(
    world_info: &Target,
    estate: *mut pg_sys::EState,
    old_tid: &mut pg_sys::ItemPointerData,
    newslot: *mut pg_sys::TupleTableSlot,
    update_indexes: bool,
    made_here: bool,
) {
    unsafe {
        let mut recheck: *mut pg_sys::List = std::ptr::null_mut();
        if update_indexes {
            let info = world_info.info(estate);
            pg_sys::ExecOpenIndices(info, false);
            if (*info).ri_NumIndices > 0 {
                recheck = pg_sys::ExecInsertIndexTuples(info, newslot, estate, true, false, std::ptr::null_mut(), std::ptr::null_mut());
            }
        }
        // (the relation's own trigger descriptor: the result relation's is a copy of it)
        let trig = (*world_info.rel).trigdesc;
        let only_foreign_keys = !trig.is_null()
            && (0..(*trig).numtriggers as usize).all(|i| {
                let t = &*(*trig).triggers.add(i);
                crate::fast_ffi::RI_FKey_trigger_type(t.tgfoid) != pg_sys::RI_TRIGGER_NONE as i32
            });
        if !trig.is_null() && (*trig).trig_update_after_row && (made_here || !only_foreign_keys) {
            pg_sys::ExecARUpdateTriggers(estate, world_info.info(estate), std::ptr::null_mut(), std::ptr::null_mut(), old_tid, std::ptr::null_mut(), newslot, recheck, std::ptr::null_mut(), false);
        }
        pg_sys::list_free(recheck);
    }
}

/// worlds.world as the commit's update target: its result relation (which copies the table's trigger
/// descriptor) made on first need, for its indexes (a new version that isn't heap-only), its AFTER triggers
/// or a CHECK constraint; most commits need none of them.
struct Target {
    rel: pg_sys::Relation,
    info: std::cell::Cell<*mut pg_sys::ResultRelInfo>,
}

impl Target {
    /// The result relation (range-table entry 1 of the commit's executor state).
    unsafe fn info(&self, _estate: *mut pg_sys::EState) -> *mut pg_sys::ResultRelInfo {
        unsafe {
            if self.info.get().is_null() {
                let info = PgBox::<pg_sys::ResultRelInfo>::alloc_node(pg_sys::NodeTag::T_ResultRelInfo).into_pg();
                pg_sys::InitResultRelInfo(info, self.rel, 1, std::ptr::null_mut(), 0);
                self.info.set(info);
            }
            self.info.get()
        }
    }

    /// The table's constraints on the new version, as ExecSimpleRelationUpdate checks them. Its NOT NULL
    /// ones hold by construction (every column copied from a committed version, the two set are never
    /// null): checked only when the table has a CHECK constraint.
    unsafe fn check_constraints(&self, estate: *mut pg_sys::EState, newslot: *mut pg_sys::TupleTableSlot) {
        unsafe {
            let constr = (*(*self.rel).rd_att).constr;
            if !constr.is_null() && (*constr).num_check > 0 {
                pg_sys::ExecConstraints(self.info(estate), newslot, estate);
            }
        }
    }
}

/// The columns the commit's update sets, and by how much the version moves.
#[derive(Clone, Copy)]
struct VersionColumns {
    version: usize,
    active: usize,
    num: usize,
    k: i64,
}

/// The world's row updated from where this backend last saw it (`known`: a version it read or wrote), as
/// an UPDATE under READ COMMITTED updates a row: the heap's update waits for a writer of it still in
/// progress, and a version updated since is followed along its update chain to the latest, whose values
/// the new version is made from. No index scan for the row and no separate row lock (`find_and_lock`'s
/// are a lock record in the WAL, and a third of the commit's bookkeeping). The new version in `newslot`
/// (its tid there), the version number it carries; None when the row isn't found so, and the caller finds
/// it through its key: the version at `known` is gone or another's (a pruned page reuses line pointers: the
/// tuple there must have `known`'s xmin and the world's number, and the page is pinned from that check to
/// the update, so it can't be pruned in between), was made by a transaction not committed (its update would
/// be an ERROR), or was changed by this transaction (the statement handles those), or the row was deleted.
///
/// # Safety
/// As `commit`'s, with `world_info` worlds.world as its target (range-table entry 1 of `estate`).
unsafe fn update_from_known(
    world_info: &Target,
    estate: *mut pg_sys::EState,
    num: i32,
    known: super::overlay::RowAt,
    cols: VersionColumns,
    newslot: *mut pg_sys::TupleTableSlot,
) -> Option<i64> {
    unsafe {
        let rel = world_info.rel;
        let desc = (*rel).rd_att;
        let cid = pg_sys::GetCurrentCommandId(true);
        let update = (*(*rel).rd_tableam).tuple_update?;
        let (mut tid, mut xmin) = (known.tid, known.xmin);
        // (each turn follows one committed update; a row updated that often while this commit runs is
        // found through its key instead)
        for _ in 0..16 {
            let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
            tuple.t_self = tid;
            let mut buffer: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
            let normal = pg_sys::heap_fetch(rel, &raw mut pg_sys::SnapshotAnyData, &mut tuple, &mut buffer, true);
            let release = |buffer: pg_sys::Buffer| {
                if buffer != pg_sys::InvalidBuffer as pg_sys::Buffer {
                    pg_sys::ReleaseBuffer(buffer);
                }
            };
            if !normal || tuple.t_data.is_null() || (*tuple.t_data).t_choice.t_heap.t_xmin != xmin {
                release(buffer);
                return None;
            }
            // its state for an update, under the buffer's lock (hint bits may be set)
            pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
            let state = pg_sys::HeapTupleSatisfiesUpdate(&mut tuple, cid, buffer);
            pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_UNLOCK as i32);
            if !matches!(state, pg_sys::TM_Result::TM_Ok | pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_BeingModified) {
                release(buffer);
                return None;
            }
            // the new version, made from this one (its values copied out of the page)
            pg_sys::ExecClearTuple(newslot);
            pg_sys::heap_deform_tuple(&mut tuple, desc, (*newslot).tts_values, (*newslot).tts_isnull);
            let get = |at: usize| (!*(*newslot).tts_isnull.add(at - 1)).then(|| *(*newslot).tts_values.add(at - 1));
            let (Some(n), Some(v)) = (get(cols.num), get(cols.version)) else {
                release(buffer);
                return None;
            };
            if n.value() as i32 != num {
                release(buffer);
                return None;
            }
            let new_version = v.value() as i64 + cols.k;
            *(*newslot).tts_values.add(cols.version - 1) = pg_sys::Datum::from(new_version);
            *(*newslot).tts_values.add(cols.active - 1) = pg_sys::Datum::from(pg_sys::GetCurrentTimestamp());
            *(*newslot).tts_isnull.add(cols.active - 1) = false;
            pg_sys::ExecStoreVirtualTuple(newslot);
            ((*(*newslot).tts_ops).materialize.expect("slots materialize"))(newslot);
            let made_here = crate::fast_ffi::TransactionIdIsCurrentTransactionId(xmin);
            // (checked as ExecSimpleRelationUpdate checks, before the heap's update)
            pg_sys::CheckCmdReplicaIdentity(rel, pg_sys::CmdType::CMD_UPDATE);
            world_info.check_constraints(estate, newslot);
            let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
            let mut lockmode: pg_sys::LockTupleMode::Type = 0;
            let mut update_indexes = false;
            let mut old_tid = tid;
            let result = update(rel, &mut old_tid, newslot, cid, (*estate).es_snapshot, std::ptr::null_mut(), true, &mut tmfd, &mut lockmode, &mut update_indexes);
            release(buffer);
            match result {
                pg_sys::TM_Result::TM_Ok => {
                    after_update(world_info, estate, &mut old_tid, newslot, update_indexes, made_here);
                    return Some(new_version);
                }
                // a writer committed a later version: follow the chain to it
                pg_sys::TM_Result::TM_Updated if !pg_sys::ItemPointerEquals(&mut tmfd.ctid, &mut tid) => {
                    tid = tmfd.ctid;
                    xmin = tmfd.xmax;
                }
                _ => return None,
            }
        }
        None
    }
}

/// worlds.event's relid and the attnums `commit` writes, looked up once per backend (forgotten at a
/// relcache invalidation of it); worlds.world's are `overlay::world_table`'s.
#[derive(Clone, Copy)]
struct Events {
    relid: pg_sys::Oid,
    cols: [usize; 6],
}

static EVENTS: BackendLocal<std::cell::Cell<Option<Events>>> = BackendLocal::new(std::cell::Cell::new(None));

pub(crate) fn on_relcache_invalidation(relid: pg_sys::Oid) {
    EVENTS.with(|c| {
        if relid == pg_sys::Oid::INVALID || c.get().is_some_and(|t| t.relid == relid) {
            c.set(None);
        }
    });
}

unsafe fn events_table() -> Option<Events> {
    if let Some(c) = EVENTS.with(|c| c.get()) {
        return Some(c);
    }
    unsafe {
        let relid = super::catalog_scan::catalog_table(c"event");
        if relid == pg_sys::Oid::INVALID {
            return None;
        }
        let cols = [c"seq", c"at", c"world", c"event", c"rows", c"xid"].map(|n| pg_sys::get_attnum(relid, n.as_ptr()).max(0) as usize);
        let e = Events { relid, cols };
        EVENTS.with(|x| x.set(Some(e)));
        Some(e)
    }
}

/// World `num`'s row at its latest version, locked (FOR NO KEY UPDATE) into `slot`, as logical replication
/// finds a row to update: through the primary key with a dirty snapshot, waiting for a transaction still
/// writing it, then locked on the latest snapshot, again from the start when a writer committed in between.
/// False when there is no such row, or the row is one this transaction changed (the caller's statement
/// then runs).
unsafe fn find_and_lock(rel: pg_sys::Relation, pkey: pg_sys::Oid, num: i32, slot: *mut pg_sys::TupleTableSlot) -> bool {
    unsafe {
        let index = pg_sys::index_open(pkey, pg_sys::RowExclusiveLock as i32);
        let mut snap: pg_sys::SnapshotData = std::mem::zeroed();
        snap.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let scan = pg_sys::index_beginscan(rel, index, &mut snap, 1, 0);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut key, 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_INT4EQ), pg_sys::Datum::from(num));
        let lock_tuple = (*(*rel).rd_tableam).tuple_lock.expect("a table access method locks tuples");
        let found = loop {
            pg_sys::index_rescan(scan, &mut key, 1, std::ptr::null_mut(), 0);
            if !pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
                break false;
            }
            ((*(*slot).tts_ops).materialize.expect("slots materialize"))(slot);
            let xwait = if snap.xmin != pg_sys::InvalidTransactionId { snap.xmin } else { snap.xmax };
            if xwait != pg_sys::InvalidTransactionId {
                pg_sys::XactLockTableWait(xwait, std::ptr::null_mut(), std::ptr::null_mut(), pg_sys::XLTW_Oper::XLTW_None);
                continue;
            }
            pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot());
            let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
            let res = lock_tuple(
                rel,
                &mut (*slot).tts_tid,
                crate::fast_ffi::GetActiveSnapshot(),
                slot,
                pg_sys::GetCurrentCommandId(false),
                pg_sys::LockTupleMode::LockTupleNoKeyExclusive,
                pg_sys::LockWaitPolicy::LockWaitBlock,
                0,
                &mut tmfd,
            );
            pg_sys::PopActiveSnapshot();
            match res {
                pg_sys::TM_Result::TM_Ok => break true,
                // a writer committed between the look and the lock: look again
                pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted => continue,
                _ => break false,
            }
        };
        pg_sys::index_endscan(scan);
        pg_sys::index_close(index, pg_sys::NoLock as i32);
        found
    }
}
