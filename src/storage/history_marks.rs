//! History marks: for each tracked table (by a hash of database and table, in a fixed array of shared
//! memory), the highest transaction id that has written a history row of it. A world's cache brings its
//! main part forward with one query whenever the statement's snapshot sees other transactions finished
//! (overlay.rs `advance_main_part`); when no transaction that could be new to the cache's frontier wrote
//! the table's history, that query can only return nothing, and is skipped. In a world whose own
//! sessions write while main is quiet (every commit of theirs changes the snapshot), that was one
//! planned query per table per statement.
//!
//! Why skipping is exact. Capture stores each history row with its writer's top-level xid (`_w_xid`), and
//! `note` raises the table's mark to that xid before the row is inserted, so before the writer commits.
//! The query reads the rows with `_w_xid >= xmin(frontier)` not visible at the frontier. A reader checks
//! the mark after its statement's snapshot was taken. If a row with `_w_xid = X` is visible to that
//! snapshot, X committed before the snapshot was taken, and the mark was raised before that commit, so
//! the reader sees a mark >= X. The query is skipped only when the mark is below xmin(frontier): then
//! every such X is below the frontier's xmin, finished at the frontier, and already read (committed) or
//! never visible (aborted). A collision of two tables in one slot only makes a mark higher (a query run
//! for nothing).
//!
//! After a restart the array starts empty while history of before it exists: a floor, the next xid as
//! first seen after start (set once, by whoever reads first), stands in for every table: no skip for a
//! frontier older than the restart. Without the preload (no shared memory) nothing is ever skipped.
use pgrx::pg_sys;
use std::sync::atomic::{AtomicU64, Ordering};

const SLOTS: usize = 4096;

#[repr(C)]
struct Marks {
    floor: AtomicU64,
    slots: [AtomicU64; SLOTS],
}

static mut MARKS: *mut Marks = std::ptr::null_mut();

/// At server start (crate::shared_memory's request hook).
pub(crate) unsafe fn request() {
    unsafe { pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Marks>()) };
}

/// crate::shared_memory's startup hook, under AddinShmemInitLock.
pub(crate) unsafe fn attach() {
    unsafe {
        let mut found = false;
        let p = pg_sys::ShmemInitStruct(c"pg_worlds history marks".as_ptr(), std::mem::size_of::<Marks>(), &mut found) as *mut Marks;
        if !found {
            // all zero: no mark, no floor yet
            std::ptr::write_bytes(p as *mut u8, 0, std::mem::size_of::<Marks>());
        }
        MARKS = p;
    }
}

fn slot(relid: pg_sys::Oid) -> usize {
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32() as u64;
    let h = (db.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ relid.to_u32() as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (h >> 32) as usize % SLOTS
}

/// Capture is about to write a history row of `relid` for top-level transaction `xid` (a full xid).
#[inline]
pub fn note(relid: pg_sys::Oid, xid: u64) {
    let m = unsafe { MARKS };
    if m.is_null() {
        return;
    }
    let s = unsafe { &(*m).slots[slot(relid)] };
    if s.load(Ordering::Relaxed) < xid {
        s.fetch_max(xid, Ordering::SeqCst);
    }
}

/// Can no transaction new to a cache whose frontier snapshot has `frontier_xmin` (a full xid) have
/// written history of `relid`? Call after the statement's snapshot was taken.
pub fn quiet_since(relid: pg_sys::Oid, frontier_xmin: u64) -> bool {
    let m = unsafe { MARKS };
    // (a standby replays history without capture: its marks never move)
    if m.is_null() || frontier_xmin == 0 || unsafe { pg_sys::RecoveryInProgress() } {
        return false;
    }
    let marks = unsafe { &*m };
    let mut floor = marks.floor.load(Ordering::SeqCst);
    if floor == 0 {
        let next = unsafe { pg_sys::ReadNextFullTransactionId() }.value;
        floor = match marks.floor.compare_exchange(0, next, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => next,
            Err(v) => v,
        };
    }
    let mark = marks.slots[slot(relid)].load(Ordering::SeqCst);
    // (this transaction's own history rows are visible to it whatever the frontier says: a mark at or past
    // its own xid may be its own write)
    let own = unsafe { pg_sys::GetTopFullTransactionIdIfAny() }.value;
    if own != 0 && mark >= own {
        return false;
    }
    mark.max(floor) < frontier_xmin
}

