//! What a world's writes record besides their rows: SHOW HISTORY's `write` / `commit` events (their row
//! counts added once per statement) and the world's version, moved at commit (PRE_COMMIT / PRE_PREPARE),
//! and what a rolled-back subtransaction undoes of them.
use super::overlay::{World, BUMPED, CACHES, WORLD, WRITE_EVENT};
use super::snapshot_spi::kept;
use super::{as_internal, world_locks};
use pgrx::prelude::*;
use crate::backend_local::BackendLocal;

/// (lxid, event, its world) of the `commit` event of this transaction block's writes
static COMMIT_EVENT: BackendLocal<std::cell::Cell<(u32, i64, i32)>> = BackendLocal::new(std::cell::Cell::new((0, 0, 0)));
/// the subtransactions that took the world's lock, bumped its version and wrote the `commit` event
static DONE_IN: BackendLocal<std::cell::Cell<[pg_sys::SubTransactionId; 3]>> = BackendLocal::new(std::cell::Cell::new([0; 3]));
/// rows of the statement's `write` (or `commit`) event not yet added to it: (event, rows, the event's world)
static PENDING_ROWS: BackendLocal<std::cell::Cell<(i64, i64, i32)>> = BackendLocal::new(std::cell::Cell::new((0, 0, 0)));
const BUMP: usize = 1;
const COMMIT: usize = 2;

fn done_in(what: usize) {
    DONE_IN.with(|d| {
        let mut v = d.get();
        v[what] = unsafe { crate::fast_ffi::GetCurrentSubTransactionId() };
        d.set(v);
    });
}

/// A subtransaction aborted (a plpgsql exception block, a savepoint rolled back): what it did once per
/// transaction or statement is undone with it (the advisory lock is released, the version bump and the
/// events are rolled back), so the next write does it again. Subtransactions nest, so those numbered from
/// `sub` on are the aborted one and its children.
pub fn forget_aborted(sub: pg_sys::SubTransactionId) {
    let done = DONE_IN.with(|d| d.get());
    world_locks::forget_aborted(sub);
    PENDING_BUMPS.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            p.retain(|&(_, _, s)| sub != 0 && s < sub);
        }
    });
    if done[BUMP] >= sub {
        BUMPED.with(|b| b.set((0, 0)));
        WRITE_EVENT.with(|e| e.set((0, 0)));
    }
    if done[COMMIT] >= sub {
        COMMIT_EVENT.with(|c| c.set((0, 0, 0)));
    }
    // rows counted since the last flush may be the aborted ones: counts are a report, not a guarantee
    PENDING_ROWS.with(|p| p.set((0, 0, 0)));
    // an event reserved in the aborted subtransaction goes with it, as its row did when written at once
    PENDING_EVENT.with(|p| {
        if p.get().is_some_and(|e| sub == 0 || e.sub >= sub) {
            p.set(None);
        }
    });
}

/// An event a write reserved (its number and time taken then, as the row's defaults would have), written
/// with its row count at the next flush: one INSERT per transaction instead of an INSERT at its first
/// write and an UPDATE of its count at commit (the two were a tenth of a world's TPC-B transaction).
#[derive(Clone, Copy)]
struct PendingEvent {
    seq: i64,
    at: pg_sys::TimestampTz,
    world: i32,
    commit: bool,
    sub: pg_sys::SubTransactionId,
}

static PENDING_EVENT: BackendLocal<std::cell::Cell<Option<PendingEvent>>> = BackendLocal::new(std::cell::Cell::new(None));

/// Adds the rows counted in this backend to their event (before the next statement's event, before
/// commit, and before SHOW HISTORY reads events), and writes the event reserved by the latest write
/// (`PendingEvent`): one INSERT per event, with its count, and an UPDATE only for rows counted after it.
#[pg_extern]
pub fn _flush_event_rows() {
    flush_except(0)
}

/// `_flush_event_rows`, but the event `keep` (reserved, or counting rows) stays as it is.
fn flush_except(keep: i64) {
    let pending = PENDING_EVENT.with(|p| match p.get() {
        Some(e) if e.seq == keep => None,
        other => {
            p.set(None);
            other
        }
    });
    let (event, rows, world) = PENDING_ROWS.with(|p| {
        let (e, n, w) = p.get();
        if e == keep && keep != 0 {
            (0, 0, 0)
        } else {
            p.set((0, 0, 0));
            (e, n, w)
        }
    });
    if pending.is_none() && (event == 0 || rows == 0) {
        return;
    }
    with_snapshot(|| {
    let mut counted = (event, rows);
    if let Some(e) = pending {
        // its first row, and those counted since
        let n = 1 + if event == e.seq { std::mem::take(&mut counted.1) } else { 0 };
        let at = unsafe { pgrx::datum::TimestampWithTimeZone::from_datum(pg_sys::Datum::from(e.at), false) };
        as_internal(|| {
            kept(
                "INSERT INTO worlds.event (seq, at, world, event, rows) VALUES ($1, $2, $3, $4, $5)",
                &[e.seq.into(), at.into(), e.world.into(), (if e.commit { "commit" } else { "write" }).into(), n.into()],
                |_| (),
            )
        });
    }
    if counted.0 != 0 && counted.1 != 0 {
        // (by its world and number: the (world, seq) index; the table has no index on seq alone)
        as_internal(|| kept("UPDATE worlds.event SET rows = rows + $2 WHERE world = $3 AND seq = $1", &[counted.0.into(), counted.1.into(), world.into()], |_| ()));
    }
    });
}

fn count_row(event: i64, world: i32) {
    if event == 0 {
        return;
    }
    let counting = PENDING_ROWS.with(|p| p.get().0);
    if counting != event {
        flush_except(event);
    }
    PENDING_ROWS.with(|p| {
        let (e, n, _) = p.get();
        p.set((event, if e == event { n + 1 } else { 1 }, world));
    });
}

/// Set while a merge writes into a world: its `merged ...` events say it, not a `write` of its own.
static MERGE_WRITING: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// Runs `f` (a merge's writes into a world) without SHOW HISTORY `write` events for them.
pub fn as_merge_writes<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            MERGE_WRITING.with(|m| m.set(self.0));
        }
    }
    let _reset = Reset(MERGE_WRITING.with(|m| m.replace(true)));
    f()
}

/// A world's version moves on once per write statement (and its `active` time with it).
pub(super) fn bump_version(world: &World) {
    let stmt = unsafe { (pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0), pg_sys::GetCurrentStatementStartTimestamp()) };
    if BUMPED.with(|b| b.get()) == stmt {
        // one more row of this statement's write, for SHOW HISTORY
        let (event, event_world) = WRITE_EVENT.with(|e| e.get());
        count_row(event, event_world);
        return;
    }
    // SHOW HISTORY: a statement on its own is a `write`; the statements of a transaction block are one
    // `commit` (the event goes with the transaction if it rolls back)
    let in_block = crate::api::explicit_transaction_block();
    let (xact, xact_event, xact_world) = COMMIT_EVENT.with(|c| c.get());
    // the rows counted for an earlier event (a transaction block's own event stays reserved to its end)
    flush_except(if in_block && xact == stmt.0 { xact_event } else { 0 });
    BUMPED.with(|b| b.set(stmt));
    done_in(BUMP);
    // (an event and its world: the block's event is its first write's world's, whichever world this
    // statement writes)
    let event = if MERGE_WRITING.with(|m| m.get()) {
        (0, 0) // the merge's own event says it
    } else if in_block && xact == stmt.0 && xact_event != 0 {
        count_row(xact_event, xact_world);
        (xact_event, xact_world)
    } else {
        // reserved now, written at the next flush (PendingEvent)
        let seq = super::capture::next_hseq();
        let at = unsafe { pg_sys::GetCurrentTimestamp() };
        let sub = unsafe { crate::fast_ffi::GetCurrentSubTransactionId() };
        PENDING_EVENT.with(|p| p.set(Some(PendingEvent { seq, at, world: world.num, commit: in_block, sub })));
        if in_block {
            COMMIT_EVENT.with(|c| c.set((stmt.0, seq, world.num)));
            done_in(COMMIT);
        }
        (seq, world.num)
    };
    WRITE_EVENT.with(|e| e.set(event));
    // the version itself moves at commit (apply_version_bumps): an UPDATE of the world's row here would
    // hold its row lock until commit, and every other writer of the world would queue behind it
    let sub = unsafe { crate::fast_ffi::GetCurrentSubTransactionId() };
    PENDING_BUMPS.with(|p| p.borrow_mut().push((stmt.0, world.num, sub)));
}

/// one entry per write statement of this transaction: (lxid, world, its subtransaction)
static PENDING_BUMPS: BackendLocal<std::cell::RefCell<Vec<(u32, i32, pg_sys::SubTransactionId)>>> = BackendLocal::new(std::cell::RefCell::new(Vec::new()));

/// Before commit (or PREPARE): each world written moves its version on by the statements that wrote it,
/// and its `active` time to now, in one UPDATE of its row per world (in world-number order, so two
/// committing writers of two worlds never wait for each other crosswise). The row lock is held only
/// from here to the commit. Readers of the world see the new version and the rows together.
///
/// The usual commit of a world's writer (one world written, its event still to be written and no other
/// event's count pending) does both in one statement (a statement less at every commit).
pub fn commit_writes() {
    let lxid = unsafe { pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0) };
    let one = PENDING_BUMPS.with(|p| {
        let p = p.borrow();
        let mut worlds = p.iter().filter(|e| e.0 == lxid).map(|e| e.1);
        let first = worlds.next()?;
        worlds.all(|w| w == first).then(|| (first, p.iter().filter(|e| e.0 == lxid).count() as i64))
    });
    let event = PENDING_EVENT.with(|p| p.get());
    let (counting, rows, _) = PENDING_ROWS.with(|p| p.get());
    let (Some((num, k)), Some(e)) = (one, event) else {
        _flush_event_rows();
        apply_version_bumps();
        return;
    };
    if e.world != num || (counting != 0 && counting != e.seq && rows != 0) {
        _flush_event_rows();
        apply_version_bumps();
        return;
    }
    PENDING_EVENT.with(|p| p.set(None));
    PENDING_ROWS.with(|p| p.set((0, 0, 0)));
    PENDING_BUMPS.with(|p| p.borrow_mut().clear());
    let n = 1 + if counting == e.seq { rows } else { 0 };
    let at = unsafe { pgrx::datum::TimestampWithTimeZone::from_datum(pg_sys::Datum::from(e.at), false) };
    with_snapshot(|| {
    let event = if e.commit { "commit" } else { "write" };
    // (with the executor's single-row calls where it can: commit_direct.rs)
    let row = super::commit_direct::EventRow { seq: e.seq, at: e.at, event, rows: n };
    let direct = super::as_internal_lazy(|| unsafe { super::commit_direct::commit(Some(row), num, k) });
    if let Some(v) = direct {
        moved_to(num, k, Some(v));
        return;
    }
    let new_version = as_internal(|| {
        kept(
            "WITH e AS (INSERT INTO worlds.event (seq, at, world, event, rows) VALUES ($1, $2, $3, $4, $5))
             UPDATE worlds.world SET version = version + $6, active = clock_timestamp() WHERE num = $3 RETURNING version",
            &[e.seq.into(), at.into(), num.into(), event.into(), n.into(), k.into()],
            |r| r.get::<i64>(1),
        )
    })
    .into_iter()
    .next()
    .flatten();
    moved_to(num, k, new_version);
    });
}

/// The versions' UPDATEs alone (`commit_writes` when its one statement doesn't fit).
pub fn apply_version_bumps() {
    let lxid = unsafe { pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0) };
    let pending = PENDING_BUMPS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let mut counts: std::collections::BTreeMap<i32, i64> = Default::default();
    for (x, num, _) in pending {
        if x == lxid {
            *counts.entry(num).or_default() += 1;
        }
    }
    if counts.is_empty() {
        return;
    }
    with_snapshot(|| {
    for (num, k) in counts {
        // (with the executor's single-row calls where it can, as commit_writes: under every isolation level
        // another session's commit in the world is no conflict of this one; commit_direct.rs)
        if let Some(v) = super::as_internal_lazy(|| unsafe { super::commit_direct::commit(None, num, k) }) {
            moved_to(num, k, Some(v));
            continue;
        }
        let new_version = as_internal(|| {
            kept(
                "UPDATE worlds.world SET version = version + $2, active = clock_timestamp() WHERE num = $1 RETURNING version",
                &[num.into(), k.into()],
                |r| r.get::<i64>(1),
            )
        })
        .into_iter()
        .next()
        .flatten();
        moved_to(num, k, new_version);
    }
    });
}

/// Runs `f` with a snapshot active: at commit none is (as for deferred triggers, one is taken).
fn with_snapshot(f: impl FnOnce()) {
    let pushed = unsafe { !crate::fast_ffi::ActiveSnapshotSet() };
    if pushed {
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    }
    f();
    if pushed {
        unsafe { pg_sys::PopActiveSnapshot() };
    }
}

/// The version of world `num` moved by `k` to `new_version` at this commit: when no other writer committed
/// since this backend's caches were read, they stay valid at the new version.
fn moved_to(num: i32, k: i64, new_version: Option<i64>) {
    let resolved = WORLD.with(|w| w.borrow().as_ref().map(|(_, _, w)| w.clone())).filter(|w| w.num == num);
    if let (Some(v), Some(w)) = (new_version, resolved) {
        if v == w.version + k {
            move_cached_version(&w, v);
        }
    }
}

/// Moves this backend's caches of the world, and the session's resolved world, from the version the
/// statement started at to `v`.
fn move_cached_version(world: &World, v: i64) {
    CACHES.with(|c| {
        for t in c.borrow_mut().values_mut() {
            if t.world_num == world.num && t.world_version == world.version {
                t.world_version = v;
            }
        }
    });
    WORLD.with(|w| {
        if let Some((_, _, w)) = w.borrow_mut().as_mut() {
            if w.num == world.num {
                w.set_version(v);
            }
        }
    });
}
