//! pg_worlds: isolated, instantly forked worlds inside PostgreSQL.
//!
//! Layout (see docs/architecture.md):
//! - `guc`        the session's world (`worlds.world`) and other settings
//! - `route`      hooks that send an existing app's queries into the session's world
//! - `catalog`    the SQL objects the extension installs (catalog tables, lifecycle functions)
//! - `storage`    history capture on main, world deltas, the overlay read cache
//! - `merge`      DIFF, MERGE (and DRY RUN), REBASE: gather three sides, decide (worlds_core), apply
//! - `statements` `worlds.sql(text)`: the spec's statements, parsed by `worlds_core::grammar`
//! - `api`        small SQL-callable helpers shared by the above
use pgrx::prelude::*;

pub mod api;
pub mod catalog;
pub mod guc;
pub mod merge;
pub mod route;
pub mod statements;
pub mod storage;

::pgrx::pg_module_magic!(name, version);

/// True when the library was loaded through `shared_preload_libraries`; only then are the hooks installed.
static PRELOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn preloaded() -> bool {
    PRELOADED.load(std::sync::atomic::Ordering::Relaxed)
}

#[allow(non_snake_case)]
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    // Loaded by a CREATE FUNCTION or a call in a server that did not preload us: define the settings
    // (so SHOW works) but install nothing; CREATE EXTENSION then refuses with a hint.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        PRELOADED.store(true, std::sync::atomic::Ordering::Relaxed);
        route::install_hooks();
        storage::register_callbacks();
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_worlds'"]
    }
}
