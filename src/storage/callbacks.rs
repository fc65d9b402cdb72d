//! Work of the rooms above storage that Postgres's callbacks run: at a relcache invalidation, at a
//! transaction's end, when a (sub)transaction aborts. Storage registers the one callback of each kind
//! with Postgres (each registered callback costs a guarded call at every transaction's end) and runs the
//! work its owners registered here, from lib.rs, as function pointers: storage never imports the rooms
//! above it.
//!
//! Registered once per backend, in `_PG_init`, before any callback can run; never changed after.
use pgrx::pg_sys;

const MAX: usize = 8;

struct List<F: Copy> {
    items: [Option<F>; MAX],
    len: usize,
}

impl<F: Copy> List<F> {
    const fn new() -> Self {
        List { items: [None; MAX], len: 0 }
    }
    fn push(&mut self, f: F) {
        assert!(self.len < MAX, "pg_worlds: too many storage callbacks");
        self.items[self.len] = Some(f);
        self.len += 1;
    }
    fn iter(&self) -> impl Iterator<Item = F> + '_ {
        self.items[..self.len].iter().flatten().copied()
    }
}

// (a backend is one thread; these are written only in _PG_init)
static mut RELCACHE: List<fn(pg_sys::Oid)> = List::new();
static mut XACT_END: List<fn(pg_sys::XactEvent::Type)> = List::new();
static mut ABORT: List<fn()> = List::new();
static mut SUBXACT_ABORT: List<fn()> = List::new();

/// `f(relid)` at every relcache invalidation (relid InvalidOid: all of them), after storage's own.
pub fn on_relcache_invalidation(f: fn(pg_sys::Oid)) {
    unsafe { (*std::ptr::addr_of_mut!(RELCACHE)).push(f) }
}

/// `f(event)` at every transaction event, after storage's own work (last).
pub fn at_xact_end(f: fn(pg_sys::XactEvent::Type)) {
    unsafe { (*std::ptr::addr_of_mut!(XACT_END)).push(f) }
}

/// `f()` when a transaction aborts, after the overlay forgot the transaction.
pub fn at_abort(f: fn()) {
    unsafe { (*std::ptr::addr_of_mut!(ABORT)).push(f) }
}

/// `f()` when a subtransaction aborts, before the overlay forgets it.
pub fn at_subxact_abort(f: fn()) {
    unsafe { (*std::ptr::addr_of_mut!(SUBXACT_ABORT)).push(f) }
}

pub(super) fn relcache() -> impl Iterator<Item = fn(pg_sys::Oid)> {
    unsafe { (*std::ptr::addr_of!(RELCACHE)).iter() }
}

pub(super) fn xact_end() -> impl Iterator<Item = fn(pg_sys::XactEvent::Type)> {
    unsafe { (*std::ptr::addr_of!(XACT_END)).iter() }
}

pub(super) fn abort() -> impl Iterator<Item = fn()> {
    unsafe { (*std::ptr::addr_of!(ABORT)).iter() }
}

pub(super) fn subxact_abort() -> impl Iterator<Item = fn()> {
    unsafe { (*std::ptr::addr_of!(SUBXACT_ABORT)).iter() }
}
