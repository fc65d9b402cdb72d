//! Backend-local state without thread-local storage. A Postgres backend runs its queries on one thread,
//! and in a shared library every `thread_local!` access goes through `__tls_get_addr`: about 11
//! instructions each, and main's statements touched thirty of them (counted: a quarter of what pg_worlds
//! added to a select-only statement in main). So pg_worlds' per-backend state is plain statics of this type.
pub struct BackendLocal<T>(std::cell::UnsafeCell<T>);

// SAFETY: Postgres runs a backend's queries on one thread; pgrx's guards refuse calls from others, and
// pg_worlds starts no threads.
unsafe impl<T> Sync for BackendLocal<T> {}

impl<T> BackendLocal<T> {
    pub const fn new(value: T) -> Self {
        BackendLocal(std::cell::UnsafeCell::new(value))
    }

    /// Runs f on the value (as `LocalKey::with`). The values are Cells and RefCells: f can't hold a
    /// reference past its return, and a RefCell's borrow rules still hold inside.
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(unsafe { &*self.0.get() })
    }
}
