//! Settings. `worlds.world` names the session's world: `main` (the real tables) or a world's name or ID.
//! It can be set per session (`SET worlds.world = ...`, `SWITCH WORLD`) or at connection time
//! (`options=-c worlds.world=agent_7`).
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::{CStr, CString};
use crate::backend_local::BackendLocal;

pub static WORLD: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"main"));

/// On while pg_worlds' own plpgsql changes its storage (set on those functions): see route/hooks.rs.
pub static INTERNAL_DDL: GucSetting<bool> = GucSetting::<bool>::new(false);

/// `worlds.lazy_storage`: CREATE TABLE tracks a table without making its storage; its first write makes it
/// (docs/architecture.md, "A table's storage is made at its first write"). On by default.
pub static LAZY_STORAGE: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Told of every change of `worlds.world` (registered by its owner from lib.rs: the search path).
static ON_WORLD_CHANGE: BackendLocal<Cell<Option<fn(&CStr)>>> = BackendLocal::new(Cell::new(None));
/// Bumped on every change of `worlds.world`, so caches keyed on the session's world know to re-resolve.
static WORLD_GENERATION: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(0));

pub fn world_generation() -> u64 {
    WORLD_GENERATION.with(|g| g.get())
}

/// The session's world as written in the setting (a name, an ID, or `main`). Reads the C string in place:
/// this is on the hot path of every query.
pub fn current_world_setting() -> &'static CStr {
    unsafe {
        let p = *WORLD.as_ptr();
        if p.is_null() {
            c"main"
        } else {
            CStr::from_ptr(p)
        }
    }
}

/// True when the session works on main (the real tables): the hooks then do nothing.
pub fn in_main() -> bool {
    // (read in place up to the first byte that decides: no strlen on every hook of every statement)
    unsafe {
        let p = *WORLD.as_ptr();
        if p.is_null() {
            return true;
        }
        let at = |i: usize| *p.add(i) as u8;
        at(0) == 0 || (at(0) == b'm' && at(1) == b'a' && at(2) == b'i' && at(3) == b'n' && at(4) == 0)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_world(newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
    WORLD_GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
    if let Some(f) = ON_WORLD_CHANGE.with(|c| c.get()) {
        f(if newval.is_null() { c"main" } else { unsafe { CStr::from_ptr(newval) } });
    }
    // Prepared statements and cached plans were routed for the old world: make them re-analyze.
    unsafe { pg_sys::ResetPlanCache() };
}

/// `f` is told of each change of `worlds.world` (in its assign hook: it must not fail).
pub fn on_world_change(f: fn(&CStr)) {
    ON_WORLD_CHANGE.with(|c| c.set(Some(f)));
}

pub fn register() {
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"worlds.world",
            c"The world this session reads and writes: main, or a world's name or ID.",
            c"Set with SWITCH WORLD, SET worlds.world, or options=-c worlds.world=<name> in a connection string.",
            &WORLD,
            GucContext::Userset,
            GucFlags::default(),
            None,
            Some(assign_world),
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"worlds.max_worlds",
        c"How many live worlds the database may hold at once (0: no limit).",
        c"CREATE WORLD past this fails with SQLSTATE 53400.",
        &MAX_WORLDS,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"worlds.world_scan",
        c"Read a world's tables in a SELECT through pg_worlds' world scan (on), or through the overlay views (off).",
        c"A diagnostic switch: both read the same rows; the world scan plans one relation per table, as main does.",
        &WORLD_SCAN,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"worlds.internal_ddl",
        c"Set by pg_worlds' own functions while they change its storage (not for users).",
        c"Their DDL then runs as a subcommand: event triggers don't fire for it or collect it, as for any DDL Postgres runs inside another command.",
        &INTERNAL_DDL,
        GucContext::Suset,
        GucFlags::NO_SHOW_ALL,
    );
    GucRegistry::define_bool_guc(
        c"worlds.lazy_storage",
        c"CREATE TABLE tracks a new table without making its storage: its first write makes it.",
        c"Makes CREATE TABLE cost close to stock (no relation of pg_worlds' per table until it is written); the first write of each table then makes its history in that write's transaction.",
        &LAZY_STORAGE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"worlds.record_reads",
        c"Record which columns each client's statements read (DIFF ... READERS, kind client).",
        c"A session records a (client, table, column) at most once a minute, in shared memory; off records nothing.",
        &RECORD_READS,
        GucContext::Suset,
        GucFlags::default(),
    );
    // (bytes, with units as memory settings take them: '10GB'; a real setting, as Postgres's integer ones
    // stop at 2^31 bytes)
    GucRegistry::define_float_guc(
        c"worlds.max_disk_bytes",
        c"Disk the database may use, WAL kept included, before CREATE WORLD and writes in worlds fail (0: no limit).",
        c"As SHOW DISK's total counts it; past it they fail with SQLSTATE 53100. Main's own writes are never refused. Measured at most every few seconds per session: see docs/sql.md.",
        &MAX_DISK_BYTES,
        0.0,
        i64::MAX as f64,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"worlds.expiry_interval",
        c"Time between the rounds of pg_worlds' expiry worker (expired and idle worlds discarded, history purged, in every database).",
        c"The worker visits every database that has pg_worlds, one after the other, then sleeps this long. Read at reload.",
        &EXPIRY_INTERVAL,
        1,
        86400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"worlds.world_idle_ttl",
        c"A world nothing wrote and no session switched to for this long is discarded, unless it is pinned (0: never).",
        c"Idle is counted from the world's active time (SHOW WORLDS). The expiry worker and the next world statement discard it. Read at reload.",
        &WORLD_IDLE_TTL,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    // a server-start setting can only be defined while the server starts (preloading)
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    GucRegistry::define_string_guc(
        c"worlds.purge_databases",
        c"Deprecated, ignored: the expiry worker purges history in every database that has pg_worlds.",
        c"Kept so that a postgresql.conf naming it still starts. See worlds.expiry_interval.",
        &PURGE_DATABASES,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"worlds.purge_naptime",
        c"Deprecated, ignored: history is purged at each round of the expiry worker (worlds.expiry_interval).",
        c"Kept so that a postgresql.conf naming it still starts.",
        &PURGE_NAPTIME,
        1,
        86400,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// `worlds.record_reads`: clients' reads are recorded (governance/readers/clients.rs). On by default.
pub static RECORD_READS: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static WORLD_SCAN: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static MAX_WORLDS: GucSetting<i32> = GucSetting::<i32>::new(1000);
/// `worlds.max_disk_bytes`: 0, no limit (storage/disk_limit.rs)
pub static MAX_DISK_BYTES: GucSetting<f64> = GucSetting::<f64>::new(0.0);
/// Deprecated, ignored (the expiry worker visits every database): kept so a postgresql.conf naming them starts.
pub static PURGE_DATABASES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static PURGE_NAPTIME: GucSetting<i32> = GucSetting::<i32>::new(10);
/// `worlds.expiry_interval` (seconds): time between the expiry worker's rounds (time/expiry.rs).
pub static EXPIRY_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(10);
/// `worlds.world_idle_ttl` (seconds, 0: off): worlds idle longer are discarded unless pinned.
pub static WORLD_IDLE_TTL: GucSetting<i32> = GucSetting::<i32>::new(0);

pub fn expiry_interval() -> std::time::Duration {
    std::time::Duration::from_secs(EXPIRY_INTERVAL.get().max(1) as u64)
}
