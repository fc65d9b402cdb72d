//! Which world a session reads: the `worlds.world` setting resolved to a world (its chain of layers and
//! their snapshots), a past moment ('name@when'), and pg_worlds' own overrides (merges, DIFF).
use crate::spi_calls::Fresh;
use super::*;
use crate::backend_local::BackendLocal;
use crate::storage::catalog_scan;

/// The session's world for routing a query being analyzed: the one resolved last, unless the setting
/// changed since (the statement's execution validates it again).
pub fn routing_world() -> Option<World> {
    if let Some(w) = OVERRIDE.with(|o| o.borrow().clone()) {
        return w;
    }
    if guc::in_main() {
        return None;
    }
    let setting_gen = guc::world_generation();
    let cached = WORLD.with(|w| w.borrow().as_ref().and_then(|(_, s, w)| (*s == setting_gen).then(|| w.clone())));
    cached.or_else(session_world)
}

/// The session's world as already resolved for the current setting, without resolving it (None: in
/// main, or not resolved yet): for hooks that must never raise on a setting naming no world.
pub fn resolved_routing_world() -> Option<World> {
    if let Some(w) = OVERRIDE.with(|o| o.borrow().clone()) {
        return w;
    }
    if guc::in_main() {
        return None;
    }
    let setting_gen = guc::world_generation();
    WORLD.with(|w| w.borrow().as_ref().and_then(|(_, s, w)| (*s == setting_gen).then(|| w.clone())))
}

/// The session's world, or None in main. Resolved once per statement (a dropped world moves the session
/// to its nearest live ancestor, as DROP WORLD promises).
pub fn session_world() -> Option<World> {
    if let Some(w) = OVERRIDE.with(|o| o.borrow().clone()) {
        return w;
    }
    if guc::in_main() {
        return None;
    }
    let gen = exec_gen();
    let setting_gen = guc::world_generation();
    let cached = WORLD.with(|w| w.borrow().as_ref().and_then(|(g, s, w)| (*s == setting_gen).then(|| (*g, w.clone()))));
    if let Some((g, w)) = cached {
        if g == gen {
            return Some(w);
        }
        // a new statement, but no transaction has completed since the last check: nothing can have changed
        let sig = snapshot_signature();
        if sig != 0 && WORLD_SIG.with(|s| s.get()) == sig {
            WORLD.with(|c| *c.borrow_mut() = Some((gen, setting_gen, w.clone())));
            return Some(w);
        }
        // a new statement: the world is still live at the same version? (one lookup by its key, on the
        // statement's snapshot)
        let row = if unsafe { crate::fast_ffi::ActiveSnapshotSet() } {
            unsafe { live_world_row(w.num, crate::fast_ffi::GetActiveSnapshot()) }
        } else {
            as_internal(|| {
                snapshot_spi::query(
                    "SELECT version, name, coalesce(fork_snapshot::text, '@' || fork_at::text) FROM worlds.world WHERE num = $1 AND dropped IS NULL",
                    &[pg_sys::INT4OID],
                    &[arg(w.num)],
                    |r| (r.get::<i64>(1), r.get::<String>(2), r.get::<String>(3)),
                )
                .into_iter()
                .next()
            })
        };
        let current = row.as_ref().and_then(|r| r.0);
        if current == Some(w.version) {
            WORLD.with(|c| *c.borrow_mut() = Some((gen, setting_gen, w.clone())));
            WORLD_SIG.with(|s| s.set(sig));
            return Some(w);
        }
        // only its version moved (another session of the world committed writes): same name, same fork
        // point (a rebase moves it; an ancestor can't move while the world lives), so the same chain
        if let (Some(v), Some((_, Some(name), fork))) = (current, row.as_ref()) {
            if w.num > 0 && *name == w.name && *fork == w.fork_snapshot {
                let mut w = w;
                w.set_version(v);
                WORLD.with(|c| *c.borrow_mut() = Some((gen, setting_gen, w.clone())));
                WORLD_SIG.with(|s| s.set(sig));
                return Some(w);
            }
        }
        if current.is_none() && w.num > 0 {
            // the session's world was dropped: it carries on from the nearest live ancestor, not from
            // whatever world now has the name (a moment of the past, num < 0, is never dropped: it is
            // resolved again below, when another transaction committed since the last statement)
            let chain = as_internal(|| load_chain(w.num));
            let lname = chain.iter().find(|c| !c.dropped).map(|c| c.name.clone()).unwrap_or_else(|| "main".to_string());
            set_session_world(&lname);
        }
    }
    let sig = snapshot_signature();
    let setting = guc::current_world_setting().to_string_lossy().into_owned();
    let mut world = as_internal(|| resolve(&setting));
    // the version as the statement's snapshot sees it (resolve's reads take a fresh snapshot once the
    // transaction has an xid): the caches are read on that snapshot and labelled with it, so a writer that
    // committed after it moves the version past the label and is read in later
    if let Some(w) = world.as_mut().filter(|w| w.num > 0) {
        let seen = if unsafe { crate::fast_ffi::ActiveSnapshotSet() } {
            unsafe { world_row(w.num, crate::fast_ffi::GetActiveSnapshot()) }.map(|r| r.1)
        } else {
            as_internal(|| {
                snapshot_spi::query("SELECT version FROM worlds.world WHERE num = $1", &[pg_sys::INT4OID], &[arg(w.num)], |r| r.get::<i64>(1))
            })
            .into_iter()
            .next()
        };
        if let Some(Some(v)) = seen {
            w.set_version(v);
        }
    }
    let setting_gen = guc::world_generation(); // resolve may have moved the session
    // the names the next statements resolve: this world's namespaces (a world of that name made or
    // dropped since the setting was read changes them)
    super::super::search_path::set_chain(world.as_ref().filter(|w| w.num > 0).map(|w| w.chain.as_slice()).unwrap_or(&[]));
    WORLD.with(|w| *w.borrow_mut() = world.clone().map(|world| (gen, setting_gen, world)));
    WORLD_SIG.with(|s| s.set(sig));
    world
}

/// `SELECT version, name, coalesce(fork_snapshot::text, '@' || fork_at::text) FROM worlds.world WHERE num =
/// $1 AND dropped IS NULL` on `snapshot`, read through the table's primary key without SPI (an SPI
/// statement here was a twentieth of a world's write statement). None when no live row.
///
/// # Safety
/// `snapshot` is a registered or active snapshot; inside a transaction.
pub(crate) unsafe fn live_world_row(num: i32, snapshot: pg_sys::Snapshot) -> Option<(Option<i64>, Option<String>, Option<String>)> {
    unsafe { world_row(num, snapshot).filter(|r| !r.0).map(|r| (r.1, r.2, r.3)) }
}

/// `live_world_row`, dropped or not: (dropped, version, name, fork).
///
/// # Safety
/// As `live_world_row`.
pub(crate) unsafe fn world_row(num: i32, snapshot: pg_sys::Snapshot) -> Option<(bool, Option<i64>, Option<String>, Option<String>)> {
    unsafe {
        let seen = seen_by(snapshot);
        // the row this backend's last commit wrote, to a snapshot that sees that commit and nothing
        // completed after it (`committed_row`): a world's writer's next transaction, at its first read
        if let Some(row) = committed_row(num, snapshot) {
            // (kept for the copies of this snapshot, which carry no completion count: the active one)
            if let Some(seen) = seen {
                LAST_ROW.with(|l| {
                    let mut l = l.borrow_mut();
                    let at = l.as_ref().filter(|e| e.1 == num).and_then(|e| e.3);
                    *l = Some((seen, num, Some(row.clone()), at));
                });
            }
            return Some(row);
        }
        // two reads on snapshots that see the same transactions as committed, in the same command of the
        // same (sub)transaction, find the same row: the write lock's fresh snapshot and the statement's
        // are usually such a pair (nothing committed between them)
        if let Some(seen) = &seen {
            if let Some(row) = LAST_ROW.with(|l| l.borrow().as_ref().filter(|e| e.0 == *seen && e.1 == num).map(|e| e.2.clone())) {
                return row;
            }
        }
        // a snapshot that sees other transactions (the next statement's, another session's commit): the
        // version read last (or the one this backend's last commit wrote) is still the one it sees when that
        // same tuple is visible to it (a row has at most one version visible to a snapshot), found by its
        // position without the index
        let last = LAST_ROW.with(|l| l.borrow().as_ref().filter(|e| e.1 == num).and_then(|e| e.3));
        let found = match last.and_then(|at| row_at(at, num, snapshot)) {
            Some(row) => (Some(row), last),
            None => read_world_row(num, snapshot),
        };
        if let Some(seen) = seen {
            LAST_ROW.with(|l| *l.borrow_mut() = Some((seen, num, found.0.clone(), found.1)));
        }
        found.0
    }
}

/// Where a version of a world's row is: its tid and the raw xmin of the tuple there. A tuple's columns
/// never change in place, and a line pointer is reused only once its tuple is dead to every transaction;
/// the tuple found there again with the same xmin is the same version (a tuple another transaction put
/// there has its xid; one of an aborted subtransaction of this one is never read again, as its xid is
/// never used again).
#[derive(Clone, Copy)]
pub(crate) struct RowAt {
    pub(crate) tid: pg_sys::ItemPointerData,
    pub(crate) xmin: pg_sys::TransactionId,
}

/// The version of world `num`'s row this backend's commit just wrote at `at`: the next statements find it
/// by its position (`row_at`) rather than through the index.
pub(crate) fn wrote_world_row(num: i32, at: RowAt) {
    LAST_ROW.with(|l| *l.borrow_mut() = Some((Vec::new(), num, None, Some(at))));
}

/// The world row a commit of this backend wrote: (the completion count a snapshot seeing exactly that commit
/// and what completed before it has, 0 until the commit is confirmed; the count read after the update, the
/// world's number, the row).
static COMMITTED_ROW: BackendLocal<RefCell<Option<(u64, u64, i32, WorldRow)>>> = BackendLocal::new(RefCell::new(None));

/// Postgres's count of completed transactions (`xactCompletionCount`, what a snapshot's reuse is decided
/// by), read without ProcArrayLock: an aligned 64-bit read, after a full fence. A read that misses another
/// backend's latest completion only makes the check in `confirm_committed_row` fail (see
/// `wrote_world_row_values`); this backend's own completion is always seen (it made it, or the group
/// leader that cleared its xid woke it through a semaphore).
unsafe fn completion_count() -> u64 {
    unsafe {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        std::ptr::read_volatile(&raw const (*pg_sys::ShmemVariableCache).xactCompletionCount)
    }
}

/// This backend's commit (at PRE_COMMIT, its row lock held) just wrote `slot`, world `num`'s new row: kept
/// with the completion count read now, to be confirmed at commit (`confirm_committed_row`).
///
/// Why a snapshot whose completion count is the confirmed one sees exactly this row: the count moves by one
/// at every transaction's completion (commit or abort, and a subtransaction's abort), under ProcArrayLock,
/// which a snapshot reads it under. Confirmed only when the count at commit is the one read here plus one
/// (this transaction's own completion), so no other transaction completed between the two reads. Those
/// that completed before the first read and changed the row did so before this update (the update holds
/// the row's lock from then to the commit, and under READ COMMITTED follows every committed update to the
/// latest version): the row written here is their successor. A snapshot with the confirmed count was taken
/// after this commit and before any other completion: of this row's versions it sees this one. (Either
/// read may miss another backend's latest completion. The second always sees this transaction's own, so
/// "second = first + 1" means the first missed nothing; and a stale second only confirms a count no
/// snapshot past another completion has.)
///
/// # Safety
/// `slot` holds a row of worlds.world (`desc`).
pub(crate) unsafe fn wrote_world_row_values(num: i32, slot: *mut pg_sys::TupleTableSlot, desc: pg_sys::TupleDesc) {
    unsafe {
        let row = world_table().and_then(|t| {
            pg_sys::slot_getallattrs(slot);
            let natts = (*desc).natts as usize;
            let values = std::slice::from_raw_parts((*slot).tts_values, natts);
            let nulls = std::slice::from_raw_parts((*slot).tts_isnull, natts);
            decode_values(values, nulls, desc, &t, num)
        });
        let pending = row.map(|row| (0, completion_count(), num, row));
        COMMITTED_ROW.with(|c| *c.borrow_mut() = pending);
    }
}

/// At a transaction's end: the row its commit wrote is kept for the snapshots that see that commit and no
/// later completion; any other end forgets it.
pub(crate) fn confirm_committed_row(committed: bool) {
    COMMITTED_ROW.with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else { return };
        let confirmed = match c.take() {
            Some((0, before, num, row)) if committed => {
                let now = unsafe { completion_count() };
                (now == before + 1).then_some((now, before, num, row))
            }
            // (a confirmed row stays valid: a snapshot either has its count or doesn't)
            Some(e) if e.0 != 0 => Some(e),
            _ => None,
        };
        *c = confirmed;
    });
}

/// World `num`'s row as this backend's last commit wrote it, when `snapshot` sees that commit and nothing
/// completed since (its completion count is the confirmed one) and this transaction has written nothing
/// (no xid: its own changes of the row would be visible to it).
unsafe fn committed_row(num: i32, snapshot: pg_sys::Snapshot) -> Option<WorldRow> {
    unsafe {
        if snapshot.is_null() || (*snapshot).snapshot_type != pg_sys::SnapshotType::SNAPSHOT_MVCC || (*snapshot).snapXactCompletionCount == 0 {
            return None;
        }
        if crate::fast_ffi::GetCurrentTransactionIdIfAny() != pg_sys::InvalidTransactionId {
            return None;
        }
        let count = (*snapshot).snapXactCompletionCount;
        COMMITTED_ROW.with(|c| c.borrow().as_ref().filter(|e| e.0 == count && e.2 == num).map(|e| e.3.clone()))
    }
}

/// Where this backend last saw world `num`'s row (a version it read or its commit wrote): where the
/// commit's update starts from (storage/commit_direct.rs), which checks it is still that row.
pub(crate) fn known_world_row(num: i32) -> Option<RowAt> {
    LAST_ROW.with(|l| l.borrow().as_ref().filter(|e| e.1 == num).and_then(|e| e.3))
}

/// World `num`'s row at `at`, when that version is visible to `snapshot`.
unsafe fn row_at(at: RowAt, num: i32, snapshot: pg_sys::Snapshot) -> Option<WorldRow> {
    unsafe {
        let t = world_table()?;
        if snapshot.is_null() || (*snapshot).snapshot_type != pg_sys::SnapshotType::SNAPSHOT_MVCC {
            return None;
        }
        let rel = pg_sys::table_open(t.relid, pg_sys::AccessShareLock as i32);
        let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
        tuple.t_self = at.tid;
        let mut buffer: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
        let visible = if catalog_scan::serializable() {
            // (fetched as any version, then tested against the snapshot under the buffer's lock: no
            // predicate lock, storage/catalog_scan.rs)
            pg_sys::heap_fetch(rel, &raw mut pg_sys::SnapshotAnyData, &mut tuple, &mut buffer, true) && !tuple.t_data.is_null() && {
                pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
                let v = pg_sys::HeapTupleSatisfiesVisibility(&mut tuple, snapshot, buffer);
                pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_UNLOCK as i32);
                v
            }
        } else {
            pg_sys::heap_fetch(rel, snapshot, &mut tuple, &mut buffer, false)
        };
        let row = if visible && !tuple.t_data.is_null() && (*tuple.t_data).t_choice.t_heap.t_xmin == at.xmin {
            decode(&mut tuple, (*rel).rd_att, &t, num)
        } else {
            None
        };
        if buffer != pg_sys::InvalidBuffer as pg_sys::Buffer {
            pg_sys::ReleaseBuffer(buffer);
        }
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        row
    }
}

/// World `num`'s row as it is now (its latest committed version) and as the transaction's snapshot sees it:
/// whether it was dropped or its fork point moved (REBASE) since that snapshot, what a REPEATABLE READ or
/// SERIALIZABLE writer's commit checks (storage/commit_direct.rs). A change of its version alone (another
/// session's commit in the world) is no such change: their rows are checked key by key.
///
/// # Safety
/// Inside a transaction.
pub(crate) unsafe fn world_moved_since_snapshot(num: i32) -> bool {
    unsafe {
        let now = world_row(num, pg_sys::GetLatestSnapshot());
        let then = world_row(num, pg_sys::GetTransactionSnapshot());
        match (now, then) {
            (Some(now), Some(then)) => now.0 != then.0 || now.3 != then.3,
            // (a world the snapshot doesn't see: made since, which moved nothing under this transaction)
            (Some(now), None) => now.0,
            (None, _) => false,
        }
    }
}

/// A tuple of worlds.world as `world_row` returns it, when it is world `num`'s.
unsafe fn decode(tuple: pg_sys::HeapTuple, desc: pg_sys::TupleDesc, t: &WorldTable, num: i32) -> Option<WorldRow> {
    unsafe {
        // (deformed once: its columns after the first variable-length one would each be found by walking
        // the tuple from its start, `nocachegetattr`, a few hundred instructions a column)
        let natts = (*desc).natts as usize;
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![true; natts];
        pg_sys::heap_deform_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        decode_values(&values, &nulls, desc, t, num)
    }
}

/// `decode` of a row's deformed columns.
unsafe fn decode_values(values: &[pg_sys::Datum], nulls: &[bool], desc: pg_sys::TupleDesc, t: &WorldTable, num: i32) -> Option<WorldRow> {
    unsafe {
        let natts = values.len().min(nulls.len());
        let get = |a: i32| {
            let i = (a as usize).checked_sub(1).filter(|&i| i < natts)?;
            (!nulls[i]).then_some(values[i])
        };
        if get(t.num).map(|d| d.value() as i32) != Some(num) {
            return None;
        }
        let dropped = get(t.dropped).is_some();
        let version = get(t.version).map(|d| d.value() as i64);
        let name = get(t.name).map(|d| text_of(d));
        let fork = get(t.fork_snapshot).map(|d| output_text(desc, t.fork_snapshot, d)).or_else(|| get(t.fork_at).map(|d| format!("@{}", output_text(desc, t.fork_at, d))));
        Some((dropped, version, name, fork))
    }
}

/// What decides which version of a row `snapshot` sees, exactly: the committed transactions it sees (xmin,
/// xmax, in-progress and sub-transaction lists), and this transaction's own changes it sees (its xid,
/// subtransaction, command). None for a snapshot that isn't an MVCC one, or whose subtransaction list
/// overflowed.
unsafe fn seen_by(snapshot: pg_sys::Snapshot) -> Option<Vec<u64>> {
    unsafe {
        if snapshot.is_null() || (*snapshot).snapshot_type != pg_sys::SnapshotType::SNAPSHOT_MVCC || (*snapshot).suboverflowed {
            return None;
        }
        let (xcnt, subxcnt) = ((*snapshot).xcnt as usize, (*snapshot).subxcnt.max(0) as usize);
        let mut key = Vec::with_capacity(8 + xcnt + subxcnt);
        key.extend([
            (*snapshot).xmin.into_inner() as u64,
            (*snapshot).xmax.into_inner() as u64,
            u64::from((*snapshot).curcid),
            crate::fast_ffi::GetCurrentTransactionIdIfAny().into_inner() as u64,
            u64::from(crate::fast_ffi::GetCurrentSubTransactionId()),
            u64::from(pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0)),
            xcnt as u64,
            subxcnt as u64,
        ]);
        key.extend((0..xcnt).map(|i| (*(*snapshot).xip.add(i)).into_inner() as u64));
        key.extend((0..subxcnt).map(|i| (*(*snapshot).subxip.add(i)).into_inner() as u64));
        Some(key)
    }
}

unsafe fn read_world_row(num: i32, snapshot: pg_sys::Snapshot) -> (Option<WorldRow>, Option<RowAt>) {
    unsafe {
        let Some(t) = world_table() else { return (None, None) };
        let rel = pg_sys::table_open(t.relid, pg_sys::AccessShareLock as i32);
        let index = pg_sys::RelationGetPrimaryKeyIndex(rel);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut key, 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_INT4EQ), pg_sys::Datum::from(num));
        let desc = (*rel).rd_att;
        let mut found = None;
        // (without predicate locks under SERIALIZABLE: storage/catalog_scan.rs)
        catalog_scan::scan_tuples(rel, index, std::slice::from_mut(&mut key), snapshot, |tuple| match decode(tuple, desc, &t, num) {
            Some(row) => {
                found = Some((row, RowAt { tid: (*tuple).t_self, xmin: (*(*tuple).t_data).t_choice.t_heap.t_xmin }));
                false
            }
            None => true,
        });
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        match found {
            Some((row, at)) => (Some(row), Some(at)),
            None => (None, None),
        }
    }
}

/// `worlds.world`'s relid and the attnums `world_row` reads and the commit writes (storage/commit_direct.rs),
/// looked up once (forgotten at a relcache invalidation of the table: `on_relcache_invalidation`).
#[derive(Clone, Copy)]
pub(crate) struct WorldTable {
    pub(crate) relid: pg_sys::Oid,
    pub(crate) num: i32,
    dropped: i32,
    pub(crate) version: i32,
    name: i32,
    fork_snapshot: i32,
    fork_at: i32,
    pub(crate) active: i32,
}

static WORLD_TABLE: BackendLocal<std::cell::Cell<Option<WorldTable>>> = BackendLocal::new(std::cell::Cell::new(None));
/// the last value of an output-converted column (its bytes) and its text: a world's fork point is the
/// same statement after statement, and pg_snapshot's output function ran for each
static LAST_TEXT: BackendLocal<RefCell<Vec<(Vec<u8>, String)>>> = BackendLocal::new(RefCell::new(Vec::new()));
/// the last row `world_row` read: (`seen_by` of its snapshot, the world's number, the row, where it is)
static LAST_ROW: BackendLocal<RefCell<Option<(Vec<u64>, i32, Option<WorldRow>, Option<RowAt>)>>> = BackendLocal::new(RefCell::new(None));

type WorldRow = (bool, Option<i64>, Option<String>, Option<String>);

pub(crate) fn on_relcache_invalidation(relid: pg_sys::Oid) {
    WORLD_TABLE.with(|w| {
        if relid == pg_sys::Oid::INVALID || w.get().is_some_and(|t| t.relid == relid) {
            w.set(None);
            LAST_ROW.with(|l| *l.borrow_mut() = None);
            COMMITTED_ROW.with(|c| {
                if let Ok(mut c) = c.try_borrow_mut() {
                    *c = None;
                }
            });
        }
    });
}

pub(crate) unsafe fn world_table() -> Option<WorldTable> {
    if let Some(t) = WORLD_TABLE.with(|w| w.get()) {
        return Some(t);
    }
    unsafe {
        let relid = catalog_scan::catalog_table(c"world");
        if relid == pg_sys::Oid::INVALID {
            return None;
        }
        let attno = |name: &std::ffi::CStr| pg_sys::get_attnum(relid, name.as_ptr()) as i32;
        let t = WorldTable {
            relid,
            num: attno(c"num"),
            dropped: attno(c"dropped"),
            version: attno(c"version"),
            name: attno(c"name"),
            fork_snapshot: attno(c"fork_snapshot"),
            fork_at: attno(c"fork_at"),
            active: attno(c"active"),
        };
        if [t.num, t.dropped, t.version, t.name, t.fork_snapshot, t.fork_at, t.active].iter().any(|&a| a <= 0) {
            return None;
        }
        WORLD_TABLE.with(|w| w.set(Some(t)));
        Some(t)
    }
}

/// A text datum as a String.
unsafe fn text_of(d: pg_sys::Datum) -> String {
    unsafe {
        let c = pg_sys::text_to_cstring(d.cast_mut_ptr());
        let s = std::ffi::CStr::from_ptr(c).to_string_lossy().into_owned();
        pg_sys::pfree(c.cast());
        s
    }
}

/// Column `a`'s value as its type's output function writes it, remembered by the value's bytes.
unsafe fn output_text(desc: pg_sys::TupleDesc, a: i32, d: pg_sys::Datum) -> String {
    unsafe {
        let att = &*(*desc).attrs.as_ptr().add(a as usize - 1);
        let bytes: Vec<u8> = if att.attbyval {
            d.value().to_ne_bytes().to_vec()
        } else if att.attlen == -1 {
            let v = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
            let len = varlena_size(v);
            std::slice::from_raw_parts(vardata_any(v), len).to_vec()
        } else {
            std::slice::from_raw_parts(d.cast_mut_ptr::<u8>(), att.attlen as usize).to_vec()
        };
        let mut key = bytes;
        key.extend_from_slice(&att.atttypid.to_u32().to_ne_bytes());
        if let Some(t) = LAST_TEXT.with(|l| l.borrow().iter().find(|e| e.0 == key).map(|e| e.1.clone())) {
            return t;
        }
        let (mut out, mut varlena) = (pg_sys::Oid::INVALID, false);
        pg_sys::getTypeOutputInfo(att.atttypid, &mut out, &mut varlena);
        let text = std::ffi::CStr::from_ptr(pg_sys::OidOutputFunctionCall(out, d)).to_string_lossy().into_owned();
        LAST_TEXT.with(|l| {
            let mut l = l.borrow_mut();
            if l.len() >= 8 {
                l.remove(0);
            }
            l.push((key, text.clone()));
        });
        text
    }
}

/// The data bytes of a (detoasted, maybe short-header) varlena, and their length.
unsafe fn varlena_size(v: *mut pg_sys::varlena) -> usize {
    unsafe { pgrx::varlena::varsize_any_exhdr(v) }
}

unsafe fn vardata_any(v: *mut pg_sys::varlena) -> *const u8 {
    unsafe { pgrx::varlena::vardata_any(v) as *const u8 }
}

/// Which transactions the active snapshot sees as committed, as a hash of its xmin, xmax and in-progress
/// list: two snapshots with the same signature see the same committed data, so a cache checked with one
/// is current for the other (this transaction's own writes update the cache in place). 0 when there is no
/// active snapshot.
pub(super) fn snapshot_signature() -> u64 {
    use std::hash::Hasher;
    unsafe {
        if !crate::fast_ffi::ActiveSnapshotSet() {
            return 0;
        }
        let snap = crate::fast_ffi::GetActiveSnapshot();
        if snap.is_null() {
            return 0;
        }
        let mut h = Fx::default();
        h.write_u64((*snap).xmin.into_inner() as u64);
        h.write_u64((*snap).xmax.into_inner() as u64);
        h.write_u64(u64::from((*snap).xcnt));
        for i in 0..(*snap).xcnt as usize {
            h.write_u64((*(*snap).xip.add(i)).into_inner() as u64);
        }
        h.finish() | 1
    }
}

pub(super) fn resolve(setting: &str) -> Option<World> {
    Spi::connect(|client| {
        let installed = client
            .fresh("SELECT 1 FROM pg_namespace WHERE nspname = 'worlds_data'", None, &[])
            .map(|r| !r.is_empty())
            .unwrap_or(false);
        if !installed {
            raise("55000", format!("worlds.world is set to \"{setting}\", but pg_worlds is not installed in this database"));
        }
        if let Some((name, when)) = setting.split_once('@') {
            return Some(past_of(name, when));
        }
        // the live world of that name, or of that ID (through the live names' or the IDs' index); only
        // then the dropped ones (worlds.world keeps a row for every world ever made)
        // (in a SERIALIZABLE transaction read without predicate locks: storage/catalog_scan.rs)
        let found = if catalog_scan::serializable() {
            find_world_direct(setting)
        } else {
            let live = client
                .fresh(&format!("SELECT num, false FROM ({}) w LIMIT 1", crate::sql_text::live_world_query(setting)), None, &[setting.into()])
                .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
            let row = if !live.is_empty() {
                live
            } else {
                client
                    .fresh(
                        "SELECT num, dropped IS NOT NULL FROM worlds.world WHERE name = $1 OR id = $1
                         ORDER BY dropped IS NULL DESC, (name = $1) DESC, num DESC LIMIT 1",
                        None,
                        &[setting.into()],
                    )
                    .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            };
            row.into_iter().next().map(|r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<bool>(2).ok().flatten().unwrap_or(false)))
        };
        let Some((mut num, dropped)) = found else { not_found(setting) };
        if dropped {
            // carry on from the nearest live ancestor
            let chain = load_chain(num);
            let live = chain.iter().find(|c| !c.dropped).cloned();
            let (lnum, lname) = live.map(|c| (c.num, c.name)).unwrap_or((0, "main".to_string()));
            set_session_world(&lname);
            num = lnum;
        }
        world_by_num(num)
    })
}

/// 55000 for a world a restored dump brought and not made yet, else 3D000.
fn not_found(setting: &str) -> ! {
    let restored = crate::storage::as_internal(|| {
        crate::spi_calls::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM worlds.dumped_world WHERE name = $1 OR id = $1)",
            &[setting.into()],
        )
    })
    .ok()
    .flatten()
    .unwrap_or(false);
    if restored {
        crate::api::raise_with(
            "55000",
            format!("world \"{setting}\" came with a restored dump and is not made yet"),
            None,
            Some("Run SELECT worlds.restore_worlds() (or any worlds statement, e.g. SHOW WORLDS) first.".into()),
        );
    }
    raise("3D000", format!("world \"{setting}\" does not exist"));
}

/// In a SERIALIZABLE transaction, `resolve`'s lookup without predicate locks (storage/catalog_scan.rs): the
/// live world named (or with the ID) `setting`, else the dropped one that had it (the latest by name first),
/// as (num, dropped).
fn find_world_direct(setting: &str) -> Option<(i32, bool)> {
    let relid = catalog_scan::catalog_table(c"world");
    if relid == pg_sys::Oid::INVALID {
        return None;
    }
    let by_id = worlds_core::names::looks_like_id(setting);
    // (as the queries rank them: the live world the setting names (by ID when it looks like one), then live
    // before dropped, the name before the ID, the newest)
    let mut best: Option<((bool, bool, bool, i32), i32, bool)> = None;
    unsafe {
        catalog_scan::visible_rows(relid, pg_sys::Oid::INVALID, &mut [], pg_sys::GetTransactionSnapshot(), |r| {
            let Some(num) = r.int4("num") else { return true };
            let named = r.text("name").as_deref() == Some(setting);
            let ided = r.text("id").as_deref() == Some(setting);
            if !(named || ided) {
                return true;
            }
            let dropped = !r.is_null("dropped");
            let live_match = !dropped && if by_id { ided } else { named };
            let rank = (live_match, !dropped, named, num);
            if best.as_ref().is_none_or(|b| rank > b.0) {
                best = Some((rank, num, dropped));
            }
            true
        })
    };
    best.map(|b| (b.1, b.2))
}

/// 'name@when': a world (main included) as it was then, read only (25006 on writes). The moment is taken
/// anew for each statement, so '-1 hour' keeps meaning an hour ago. A world's own layer is cut at the
/// time; what it stood on (its parent as of the fork) is as it was.
pub fn past_of(name: &str, when: &str) -> World {
    let source = format!("{name}@{when}");
    let (num, at) = Spi::connect(|c| {
        c.fresh("SELECT (m.w).num, m.at::text FROM worlds._moment_of($1) m", None, &[source.as_str().into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .next()
            .map(|r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<String>(2).ok().flatten().unwrap_or_default()))
            .unwrap_or_default()
    });
    let cut = format!("@{at}");
    match world_by_num(num) {
        None => World::moment(-1, source, 0, Vec::new(), Vec::new(), cut),
        Some(w) => {
            // (a world with schema of its own keeps it in its namespaces and its copies of main's tables,
            // which have no history to be read as they were)
            let has_schema = w.num > 0
                && crate::storage::as_internal(|| {
                    crate::spi_calls::get_one_with_args::<bool>(
                        "SELECT EXISTS (SELECT 1 FROM worlds.world_schema WHERE world = $1) OR EXISTS (SELECT 1 FROM worlds.world_twin WHERE world = $1)",
                        &[w.num.into()],
                    )
                    .ok()
                    .flatten()
                    .unwrap_or(false)
                });
            if has_schema {
                crate::api::raise_with(
                    "0A000",
                    format!("'{source}': world {} changed the schema (objects of its own, or main's tables), and reading it as it was is not supported yet", w.name),
                    None,
                    Some(format!("Read it as it is now ({}), or read main as it was ('main@{when}').", w.name)),
                );
            }
            use std::hash::Hasher;
            let mut h = Fx::default();
            h.write(cut.as_bytes());
            let mut layer_snapshots = w.layer_snapshots.clone();
            layer_snapshots[0] = Some(cut);
            // its own cache entry: a number no world has, a version that changes with the moment
            World::moment(-1_000_000 - w.num, source, h.finish() as i64, w.chain.clone(), layer_snapshots, w.main_snapshot.clone())
        }
    }
}

/// One row of a world's chain.
#[derive(Clone, Debug)]
pub(super) struct ChainRow {
    num: i32,
    id: String,
    name: String,
    parent: Option<i32>,
    version: i64,
    /// the snapshot (or '@' time) it forked at
    snap: Option<String>,
    dropped: bool,
    merged_part: bool,
}

/// The chain from a world up to main (the world first).
pub(super) fn load_chain(num: i32) -> Vec<ChainRow> {
    if catalog_scan::serializable() {
        return chain_direct(num);
    }
    Spi::connect(|client| {
        client
            .fresh(
                "WITH RECURSIVE c AS (
                     SELECT num, id, name, parent, version, coalesce(fork_snapshot::text, '@' || fork_at::text) AS snap, dropped, merged_part, 0 AS lvl
                     FROM worlds.world WHERE num = $1
                     UNION ALL
                     SELECT w.num, w.id, w.name, w.parent, w.version, coalesce(w.fork_snapshot::text, '@' || w.fork_at::text), w.dropped, w.merged_part, c.lvl + 1
                     FROM worlds.world w JOIN c ON w.num = c.parent)
                 SELECT num, id, name, parent, version, snap, dropped IS NOT NULL, merged_part FROM c ORDER BY lvl",
                None,
                &[num.into()],
            )
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .map(|r| ChainRow {
                num: r.get::<i32>(1).ok().flatten().unwrap_or(0),
                id: r.get::<String>(2).ok().flatten().unwrap_or_default(),
                name: r.get::<String>(3).ok().flatten().unwrap_or_default(),
                parent: r.get::<i32>(4).ok().flatten(),
                version: r.get::<i64>(5).ok().flatten().unwrap_or(0),
                snap: r.get::<String>(6).ok().flatten(),
                dropped: r.get::<bool>(7).ok().flatten().unwrap_or(false),
                merged_part: r.get::<bool>(8).ok().flatten().unwrap_or(false),
            })
            .collect()
    })
}

/// `load_chain` in a SERIALIZABLE transaction, without predicate locks (storage/catalog_scan.rs): each
/// world's row through the primary key, then its parent's.
fn chain_direct(num: i32) -> Vec<ChainRow> {
    let mut chain: Vec<ChainRow> = Vec::new();
    let mut next = Some(num);
    // (a chain is a few worlds long; a cycle can't be made, but is never walked twice)
    while let Some(n) = next.take().filter(|n| !chain.iter().any(|c| c.num == *n)) {
        let Some(row) = catalog_scan::world_by_num(n, |r| ChainRow {
            num: n,
            id: r.text("id").unwrap_or_default(),
            name: r.text("name").unwrap_or_default(),
            parent: r.int4("parent"),
            version: r.int8("version").unwrap_or(0),
            snap: r.text("fork_snapshot").or_else(|| r.text("fork_at").map(|t| format!("@{t}"))),
            dropped: !r.is_null("dropped"),
            merged_part: r.bool("merged_part").unwrap_or(false),
        }) else {
            break;
        };
        next = row.parent;
        chain.push(row);
    }
    chain
}

/// A world by number (None for main, or for a number no world has): its row and its chain up to main.
pub fn world_by_num(num: i32) -> Option<World> {
    if num == 0 {
        return None;
    }
    let chain = load_chain(num);
    let layers: Vec<_> = chain.iter().filter(|c| c.num != 0).cloned().collect();
    let own = layers.first()?;
    let mut layer_snapshots = vec![None];
    for i in 1..layers.len() {
        layer_snapshots.push(layers[i - 1].snap.clone());
    }
    Some(World::new(WorldData {
        num,
        id: own.id.clone(),
        name: own.name.clone(),
        parent: own.parent,
        version: own.version,
        fork_snapshot: own.snap.clone(),
        merged_part: own.merged_part,
        chain: layers.iter().map(|c| c.num).collect(),
        layer_snapshots,
        main_snapshot: layers.last().and_then(|c| c.snap.clone()).unwrap_or_default(),
        read_only: false,
    }))
}

/// What a world stood on when it forked: its parent as of the fork (None when the parent is main, which
/// the caller reads from history). A pseudo-world with a negative number, so caches keep it apart.
pub fn base_of(world: &World) -> Option<World> {
    if world.chain.len() < 2 {
        return None;
    }
    Some(World::moment(
        -world.num,
        format!("{} (fork point)", world.name),
        world.version,
        world.chain[1..].to_vec(),
        world.layer_snapshots[1..].to_vec(),
        world.main_snapshot.clone(),
    ))
}

/// While set, the overlay reads (and the router routes into) this world instead of the session's:
/// how merges and diffs read and write other worlds.
pub(super) static OVERRIDE: BackendLocal<RefCell<Option<Option<World>>>> = BackendLocal::new(RefCell::new(None));

pub fn override_active() -> bool {
    OVERRIDE.with(|o| o.borrow().is_some())
}

/// Runs f reading and writing as `world` (None: main), routed even inside pg_worlds' own work.
pub fn with_world<R>(world: Option<World>, f: impl FnOnce() -> R) -> R {
    struct Guard(Option<Option<World>>, i32);
    impl Drop for Guard {
        fn drop(&mut self) {
            OVERRIDE.with(|o| *o.borrow_mut() = self.0.take());
            crate::storage::pop_setting(self.1);
            next_statement();
        }
    }
    let previous = OVERRIDE.with(|o| o.borrow_mut().replace(world));
    next_statement();
    // the visibility functions are parallel safe: a parallel worker reads the session's world, not this
    // one, so queries reading another world on purpose run without workers
    let level = crate::storage::push_setting(c"max_parallel_workers_per_gather", c"0");
    let _g = Guard(previous, level);
    f()
}

pub fn set_session_world(name: &str) {
    let v = std::ffi::CString::new(name).unwrap();
    unsafe {
        pg_sys::set_config_option(
            c"worlds.world".as_ptr(),
            v.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SET,
            true,
            0,
            false,
        );
    }
}
