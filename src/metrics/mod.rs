//! SHOW METRICS: how long pg_worlds' own operations take, and how often its gates refuse, cluster-wide
//! (the names and the histograms' arithmetic: worlds_core::metrics; the shared memory: shmem.rs; the SQL:
//! show.rs). Only pg_worlds' statements record: nothing here runs on main's reads or writes.
//!
//! A timed operation holds a `Timer` from its start; it records when the operation returns. An operation
//! that fails (an ERROR unwinding through it) records no duration: its refusal counts instead, where the
//! gate that refuses is (`refused`). Counted when the operation ends, not when its transaction commits:
//! pg_worlds' statements that change worlds run in a transaction of their own (25001 otherwise), so they
//! commit as they return; one that fails at its COMMIT (a deferred constraint) stays counted.
pub mod shmem;
mod show;

pub use worlds_core::metrics::{Counter, Timed};

/// Times an operation until dropped (see the module's comment): `let _t = metrics::time(Timed::Diff);`.
pub struct Timer {
    what: Timed,
    start: std::time::Instant,
}

/// Starts timing `what`.
pub fn time(what: Timed) -> Timer {
    Timer { what, start: std::time::Instant::now() }
}

impl Timer {
    /// The operation turned out to be another (a merge that went fast-forward).
    pub fn is(&mut self, what: Timed) {
        self.what = what;
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // (an ERROR unwinding: not a success)
        if !std::thread::panicking() {
            shmem::record(self.what, self.start.elapsed().as_micros().min(u64::MAX as u128) as u64);
        }
    }
}

/// One more of counter `c`.
pub fn count(c: Counter) {
    shmem::add(c, 1);
}

/// `n` more of counter `c`.
pub fn count_n(c: Counter, n: u64) {
    if n > 0 {
        shmem::add(c, n);
    }
}

/// A merge gate refused with `sqlstate` (governance/judge.rs): its counter, if it has one.
pub fn refused(sqlstate: &str) {
    if let Some(c) = Counter::of_refusal(sqlstate) {
        count(c);
    }
}
