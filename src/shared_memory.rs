//! pg_worlds' shared memory, asked for at server start and attached by one pair of hooks: the read sets of
//! worlds that check their reads (governance/reads/shmem.rs) and the history marks that let a world's
//! cache skip its catch-up of main (storage/history_marks.rs), the columns clients were seen reading (governance/readers/clients_shmem.rs), SHOW METRICS' numbers (metrics/shmem.rs). Each part sizes and attaches its own.
use pgrx::pg_sys;

static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// From _PG_init, while preloading.
pub fn register() {
    unsafe {
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    unsafe {
        if let Some(p) = PREV_REQUEST {
            p();
        }
        crate::governance::reads::shmem::request();
        crate::storage::history_marks::request();
        crate::governance::readers::clients_shmem::request();
        crate::metrics::shmem::request();
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    unsafe {
        if let Some(p) = PREV_STARTUP {
            p();
        }
        let init = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(init, pg_sys::LWLockMode::LW_EXCLUSIVE);
        crate::governance::reads::shmem::attach();
        crate::storage::history_marks::attach();
        crate::governance::readers::clients_shmem::attach();
        crate::metrics::shmem::attach();
        pg_sys::LWLockRelease(init);
        if !pg_sys::IsUnderPostmaster {
            crate::governance::reads::shmem::load_and_save_at_exit();
            crate::governance::readers::clients_shmem::load_and_save_at_exit();
        }
    }
}
