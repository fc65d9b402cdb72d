//! Where SHOW METRICS' numbers live: one fixed-size struct in shared memory, cluster-wide (every
//! database's operations together), asked for at server start. Each timed operation has a histogram
//! (worlds_core::metrics: 128 log-spaced buckets, its total and its max in microseconds); each counter a
//! number. All are atomics: recording is a few atomic adds, no lock, no Postgres call (nothing that could
//! raise an ERROR while a guard records). Not saved: a restart (or a crash) begins again at zero, as does
//! `worlds.reset_metrics()`.
//!
//! Readers see each number whole but not a snapshot of all of them: a histogram is read max first, then
//! total, then buckets, and recorded in the reverse order (buckets, total, max), so what is read always
//! has total >= max and at least one entry at or above any max read. A reset racing a recording may keep
//! part of that one operation.
use pgrx::pg_sys;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use worlds_core::metrics::{Counter, Timed, BUCKETS};

#[repr(C)]
struct Histogram {
    total_us: AtomicU64,
    max_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

#[repr(C)]
struct State {
    /// when the numbers began: the server's start or the last reset (a TimestampTz)
    since: AtomicI64,
    timed: [Histogram; Timed::ALL.len()],
    counters: [AtomicU64; Counter::ALL.len()],
}

static mut SHARED: *mut State = std::ptr::null_mut();

fn shared() -> Option<&'static State> {
    unsafe { std::ptr::addr_of!(SHARED).read().as_ref() }
}

/// At server start (crate::shared_memory's request hook): about 12 KB.
pub(crate) unsafe fn request() {
    unsafe { pg_sys::RequestAddinShmemSpace(std::mem::size_of::<State>()) };
}

/// crate::shared_memory's startup hook, under AddinShmemInitLock.
pub(crate) unsafe fn attach() {
    unsafe {
        let mut found = false;
        let s = pg_sys::ShmemInitStruct(c"pg_worlds metrics".as_ptr(), std::mem::size_of::<State>(), &mut found) as *mut State;
        if !found {
            // (all zeros is every atomic at zero)
            std::ptr::write_bytes(s as *mut u8, 0, std::mem::size_of::<State>());
            (*s).since.store(pg_sys::GetCurrentTimestamp(), SeqCst);
        }
        SHARED = s;
    }
}

/// Shared memory is there (the library was preloaded).
pub fn available() -> bool {
    shared().is_some()
}

/// One operation of `us` microseconds.
pub fn record(t: Timed, us: u64) {
    let Some(s) = shared() else { return };
    let h = &s.timed[t.index()];
    h.buckets[worlds_core::metrics::bucket(us)].fetch_add(1, SeqCst);
    h.total_us.fetch_add(us, SeqCst);
    h.max_us.fetch_max(us, SeqCst);
}

/// `n` more of counter `c`.
pub fn add(c: Counter, n: u64) {
    if let Some(s) = shared() {
        s.counters[c.index()].fetch_add(n, SeqCst);
    }
}

/// A timed operation's numbers: (buckets, total µs, max µs), read max first.
pub fn read(t: Timed) -> Option<([u64; BUCKETS], u64, u64)> {
    let h = &shared()?.timed[t.index()];
    let max = h.max_us.load(SeqCst);
    let total = h.total_us.load(SeqCst);
    let buckets = std::array::from_fn(|i| h.buckets[i].load(SeqCst));
    Some((buckets, total, max))
}

/// A counter's value.
pub fn count(c: Counter) -> Option<u64> {
    Some(shared()?.counters[c.index()].load(SeqCst))
}

/// When the numbers began (a TimestampTz): the server's start or the last reset.
pub fn since() -> Option<i64> {
    Some(shared()?.since.load(SeqCst))
}

/// Everything back to zero, from now.
pub fn reset() {
    let Some(s) = shared() else { return };
    for h in &s.timed {
        h.max_us.store(0, SeqCst);
        h.total_us.store(0, SeqCst);
        for b in &h.buckets {
            b.store(0, SeqCst);
        }
    }
    for c in &s.counters {
        c.store(0, SeqCst);
    }
    s.since.store(unsafe { pg_sys::GetCurrentTimestamp() }, SeqCst);
}
