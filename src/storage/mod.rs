//! Storage: history of main (capture), what a world sees (overlay: visibility and its cache), how a
//! world writes (writes: the overlay's trigger), and AS OF's helpers (as_of). All read a per-table
//! `Layout` loaded once per backend from worlds.tables and dropped on any relcache invalidation (DDL,
//! track/untrack).

/// The finfo record of a raw version-1 C function (the hot-path functions skip pgrx's wrappers).
macro_rules! v1 {
    ($finfo:ident) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}

pub mod app_triggers;
pub mod as_of;
pub mod capture;
pub(crate) mod catalog_scan;
mod commit_direct;
pub mod decoding;
mod delta_insert;
mod key_probe;
pub use key_probe::lock_world_part;
pub mod index_probe;
pub mod disk_limit;
pub mod history_marks;
mod layout;
mod maker;
pub mod overlay;
pub mod callbacks;
pub mod rewrite;
pub mod search_path;
pub mod snapshot_spi;
pub mod world_locks;
pub mod world_schemas;
pub mod world_storage;
pub mod world_twins;
pub mod unique_checks;
pub mod upsert_wire;
pub mod write_events;
pub mod writes;

use crate::spi_calls::Fresh;
use crate::api::raise;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use crate::backend_local::BackendLocal;

unsafe extern "C-unwind" {
    #[link_name = "datumIsEqual"]
    fn datum_is_equal_c(value1: pg_sys::Datum, value2: pg_sys::Datum, typ_by_val: bool, typ_len: i32) -> bool;
    #[link_name = "datumCopy"]
    fn datum_copy_c(value: pg_sys::Datum, typ_by_val: bool, typ_len: i32) -> pg_sys::Datum;
}

/// A copy of a non-null datum in the current memory context (Postgres's datumCopy).
pub(crate) unsafe fn datum_copy(d: pg_sys::Datum, by_val: bool, len: i32) -> pg_sys::Datum {
    unsafe { datum_copy_c(d, by_val, len) }
}

/// Binary equality of two non-null datums of one type (Postgres's datumIsEqual).
pub(crate) unsafe fn datum_is_equal(a: pg_sys::Datum, b: pg_sys::Datum, by_val: bool, len: i32) -> bool {
    unsafe { datum_is_equal_c(a, b, by_val, len) }
}

/// What the native code needs to know of a tracked table.
pub struct Layout {
    pub tabno: i32,
    /// qualified, quoted names of the table and its storage, for SQL text (history_name: every change
    /// of main, history and inserts together)
    pub table_name: crate::sql_text::QuotedName,
    pub history_name: crate::sql_text::QuotedName,
    pub delta_name: crate::sql_text::QuotedName,
    pub overlay_name: crate::sql_text::QuotedName,
    /// the two tables behind history_name: main's before-images (updates, deletes) and its inserts
    pub before_images_name: crate::sql_text::QuotedName,
    pub inserts_name: crate::sql_text::QuotedName,
    pub relid: pg_sys::Oid,
    pub history: pg_sys::Oid,
    /// where main's inserts are recorded (the same columns as history)
    pub inserts: pg_sys::Oid,
    pub delta: pg_sys::Oid,
    pub overlay: pg_sys::Oid,
    pub overlay_nothing: pg_sys::Oid,
    /// the overlay's twin `k_`, an UPDATE / DELETE target: a table without a key, the rows twin (its rows
    /// say which physical row each is); a table with an integer key, the write twin (the bare table, read in
    /// place by the world scan: route/hooks/planner.rs); else InvalidOid
    pub overlay_rows: pg_sys::Oid,
    pub key_kind: u8,
    pub key_columns: Vec<String>,
    /// attnums (in the tracked table) of the primary key columns; empty when the whole row is the key
    pub key_attnos: Vec<i32>,
    /// for each history column after the fixed ones: the tracked table's attnum of the same name
    pub history_map: Vec<Option<i32>>,
    pub unsupported: Option<String>,
    /// unique indexes other than the primary key (plain columns, no predicate): (name, columns)
    pub uniques: Vec<(String, Vec<String>)>,
    /// generated columns: the delta computes them (they are never written)
    pub generated: Vec<String>,
    /// unique indexes `uniques` can't check column by column: on expressions, partial, or NULLS NOT DISTINCT
    pub other_uniques: Vec<OtherUnique>,
}

impl Layout {
    /// The relations the layout describes: an invalidation of any of them makes it stale.
    fn relations(&self) -> [pg_sys::Oid; 7] {
        [self.relid, self.history, self.inserts, self.delta, self.overlay, self.overlay_nothing, self.overlay_rows]
    }
}

/// A unique index on expressions, partial, or NULLS NOT DISTINCT, as SQL over the table's columns.
pub struct OtherUnique {
    pub name: String,
    /// each key column or expression, as Postgres deparses it (`email`, `lower(email)`)
    pub keys: Vec<String>,
    /// the index's WHERE, if partial
    pub predicate: Option<String>,
    pub nulls_not_distinct: bool,
}

/// the tracked tables that have their storage (the others route as main has them)
static ROUTED: BackendLocal<RefCell<Option<Rc<HashMap<pg_sys::Oid, i32>>>>> = BackendLocal::new(RefCell::new(None));
/// relid -> tabno of every tracked table, for the router; None until loaded.
static TRACKED: BackendLocal<RefCell<Option<Rc<HashMap<pg_sys::Oid, i32>>>>> = BackendLocal::new(RefCell::new(None));
/// the overlay views of every tracked table (the router leaves them alone); None until made
static OVERLAYS: BackendLocal<RefCell<Option<Rc<HashMap<pg_sys::Oid, i32>>>>> = BackendLocal::new(RefCell::new(None));
thread_local! {
    static LAYOUTS: RefCell<HashMap<i32, Rc<Layout>>> = RefCell::new(HashMap::new());
}

/// The role (and security context) pg_worlds' internal work was entered from.
static SESSION_USER: BackendLocal<std::cell::Cell<(pg_sys::Oid, i32)>> = BackendLocal::new(std::cell::Cell::new((pg_sys::Oid::INVALID, 0)));

/// Inside `as_internal`, runs f with the rights of the role that called pg_worlds (a merge's DML on main
/// is checked against the merging role's privileges and row-level security).
pub fn as_session_user<R>(f: impl FnOnce() -> R) -> R {
    struct Guard(pg_sys::Oid, i32);
    impl Drop for Guard {
        fn drop(&mut self) {
            unsafe { pg_sys::SetUserIdAndSecContext(self.0, self.1) };
        }
    }
    let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut sec) };
    let (outer, outer_sec) = SESSION_USER.with(|s| s.get());
    if outer == pg_sys::Oid::INVALID {
        return f();
    }
    unsafe { pg_sys::SetUserIdAndSecContext(outer, outer_sec) };
    let _g = Guard(user, sec);
    // (the session's search_path too: the app's triggers and defaults find their tables by it)
    struct PathGuard(i32);
    impl Drop for PathGuard {
        fn drop(&mut self) {
            pop_setting(self.0);
        }
    }
    let path = SESSION_SEARCH_PATH.with(|p| p.borrow().clone());
    let _p = path.filter(|_| unsafe { crate::fast_ffi::IsTransactionState() }).map(|p| PathGuard(push_setting(c"search_path", &p)));
    f()
}


/// Runs f, pg_worlds' own SQL over a table's storage that evaluates the table's code (its CHECK
/// constraints, generated columns and defaults copied onto the delta, its column types' domains, casts and
/// equality operators), as the table's owner under SECURITY_RESTRICTED_OPERATION, as Postgres runs a
/// table's index expressions in VACUUM: as superuser, code a table owner wrote would run with pg_worlds'
/// rights. The owner holds SELECT and INSERT on the delta and SELECT on the overlay view for this (see
/// worlds._sync_owner); a superuser owner runs as now.
pub fn as_table_owner<R>(layout: &Layout, f: impl FnOnce() -> R) -> R {
    let owner = unsafe {
        let rel = pg_sys::RelationIdGetRelation(layout.relid);
        if rel.is_null() {
            raise("42P01", format!("pg_worlds: relation {} is gone", layout.relid.to_u32()));
        }
        let owner = (*(*rel).rd_rel).relowner;
        pg_sys::RelationClose(rel);
        owner
    };
    if unsafe { pg_sys::superuser_arg(owner) } {
        return as_internal(f);
    }
    // a new owner the event trigger didn't see (REASSIGN OWNED), or a table tracked before these grants
    let granted = |rel: pg_sys::Oid, mode: u32| unsafe { pg_sys::pg_class_aclcheck(rel, owner, mode as pg_sys::AclMode) == pg_sys::AclResult::ACLCHECK_OK };
    if !granted(layout.delta, pg_sys::ACL_INSERT) || !granted(layout.overlay, pg_sys::ACL_SELECT) {
        as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._sync_owner(t) FROM worlds.tables t WHERE t.tabno = $1", &[layout.tabno.into()]))
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: granting the table's owner its storage: {e}")));
    }
    as_internal(|| {
        struct Guard(pg_sys::Oid, i32);
        impl Drop for Guard {
            fn drop(&mut self) {
                unsafe { pg_sys::SetUserIdAndSecContext(self.0, self.1) };
            }
        }
        let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut sec);
            pg_sys::SetUserIdAndSecContext(
                owner,
                sec | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32 | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
            );
        }
        let _g = Guard(user, sec);
        f()
    })
}


// Depth of pg_worlds' own SPI work; the router leaves those queries alone and they don't count as a new
// statement for the overlay cache.
pub static INTERNAL: BackendLocal<std::cell::Cell<u32>> = BackendLocal::new(std::cell::Cell::new(0));

pub fn internal() -> bool {
    INTERNAL.with(|i| i.get() > 0)
}

/// Runs f as pg_worlds' own work: not routed into worlds, and with the bootstrap superuser's rights over
/// the catalog and generated storage (the role's own rights were checked on the real table first).
/// On an error the transaction's abort restores the user id.
///
/// Its SQL runs with `search_path = pg_catalog, pg_temp`, as pg_worlds' SECURITY DEFINER functions do: a
/// function or operator a role made in a schema of its own search_path (a `to_jsonb(t)` more exact than
/// the built-in) would otherwise run with pg_worlds' rights. Where pg_worlds runs the app's own work as the
/// session's user (a merge's DML, whose triggers find their tables), `as_session_user` gives the session's
/// search_path back.
pub fn as_internal<R>(f: impl FnOnce() -> R) -> R {
    internal_work(false, f)
}

/// `as_internal` for work that mostly runs no SQL (the overlay cache's catch-up, the commit's bookkeeping):
/// the safe search_path is set only when SQL does run (`ensure_safe_path`: snapshot_spi before it runs
/// anything, a nested `as_internal`, the session-path helpers before they set theirs), not at every call
/// (setting and restoring it was a hundredth of a world's TPC-B transaction).
pub fn as_internal_lazy<R>(f: impl FnOnce() -> R) -> R {
    internal_work(true, f)
}

/// as_internal_lazy's search_path: (pending: not set yet, the GUC level it was set at)
/// (and whether the search_path is to be set, or only the fixed settings)
static LAZY_PATH: BackendLocal<std::cell::Cell<(bool, Option<i32>, bool)>> = BackendLocal::new(std::cell::Cell::new((false, None, false)));

/// Sets the safe search_path an `as_internal_lazy` deferred, if it did and hasn't yet.
pub fn ensure_safe_path() {
    if let (true, _, path) = LAZY_PATH.with(|l| l.get()) {
        let level = push_internal_settings(path);
        LAZY_PATH.with(|l| l.set((false, Some(level), false)));
    }
}

/// The settings pg_worlds' own SQL text is written for, beside the search_path: a literal means what it
/// says (`standard_conforming_strings`), and a value printed to be read again (a row as JSON, a literal of
/// DIFF AS SQL, a key's text) is printed exactly and in one form (`extra_float_digits` 1: every float
/// digit; ISO dates, `postgres` intervals, hex bytea). Any role may change these for its session; inside
/// pg_worlds' work they are the defaults again, so what it writes and reads doesn't depend on them.
/// Two are left to the session: TimeZone (every timestamptz pg_worlds prints carries its offset) and
/// DateStyle's order of day, month and year (only the output style is set: a date ISO prints reads
/// the same in every order, and a moment the user wrote, '06/12/2026', is read in the user's order).
const FIXED_SETTINGS: [(&std::ffi::CStr, &std::ffi::CStr); 5] = [
    (c"standard_conforming_strings", c"on"),
    (c"DateStyle", c"ISO"),
    (c"IntervalStyle", c"postgres"),
    (c"extra_float_digits", c"1"),
    (c"bytea_output", c"hex"),
];

extern "C" {
    /// utils/adt/varlena.c (pgrx doesn't bind it): BYTEA_OUTPUT_ESCAPE 0, BYTEA_OUTPUT_HEX 1
    static bytea_output: std::ffi::c_int;
}

/// Which of FIXED_SETTINGS the session has changed, as a bit each (read from Postgres's own variables:
/// no lookup by name on this path).
fn changed_settings() -> u8 {
    unsafe {
        (!pg_sys::standard_conforming_strings) as u8
            | ((pg_sys::DateStyle != pg_sys::USE_ISO_DATES as i32) as u8) << 1
            | ((pg_sys::IntervalStyle != pg_sys::INTSTYLE_POSTGRES as i32) as u8) << 2
            | ((pg_sys::extra_float_digits != 1) as u8) << 3
            | ((bytea_output != 1) as u8) << 4
    }
}

/// Runs f with the settings that change how values print fixed as internal work has them (DateStyle's
/// style, IntervalStyle, extra_float_digits, bytea_output), and those that change how the session's own
/// SQL text reads left as they are (search_path, standard_conforming_strings): for a query of the
/// session's own run by pg_worlds whose rows it returns as JSON (`worlds.sql('select ...')`, AS OF), so
/// its values read the same whatever the session set.
pub fn with_fixed_output<R>(f: impl FnOnce() -> R) -> R {
    struct Pop(i32);
    impl Drop for Pop {
        fn drop(&mut self) {
            pop_setting(self.0);
        }
    }
    // (standard_conforming_strings, bit 0, stays the session's)
    let changed = changed_settings() & !1;
    let _pop = (changed != 0 && unsafe { crate::fast_ffi::IsTransactionState() }).then(|| Pop(push_fixed(changed, false)));
    f()
}

/// One GUC nest level holding the safe search_path (when `path`) and every fixed setting the session
/// changed; undone with `pop_setting(level)`.
fn push_internal_settings(path: bool) -> i32 {
    push_fixed(changed_settings(), path)
}

/// One GUC nest level holding the safe search_path (when `path`) and the fixed settings whose bits are in
/// `changed`.
fn push_fixed(changed: u8, path: bool) -> i32 {
    unsafe {
        let level = pg_sys::NewGUCNestLevel();
        let set = |name: &std::ffi::CStr, value: &std::ffi::CStr| set_saved(name, value);
        if path {
            set(c"search_path", SAFE_SEARCH_PATH);
        }
        for (i, (name, value)) in FIXED_SETTINGS.iter().enumerate() {
            if changed & (1 << i) != 0 {
                set(name, value);
            }
        }
        level
    }
}

fn internal_work<R>(lazy: bool, f: impl FnOnce() -> R) -> R {
    struct Guard(pg_sys::Oid, i32, Option<i32>, bool);
    impl Drop for Guard {
        fn drop(&mut self) {
            INTERNAL.with(|i| i.set(i.get().saturating_sub(1)));
            if let Some(level) = self.2 {
                pop_setting(level);
            }
            if self.3 {
                if let (_, Some(level), _) = LAZY_PATH.with(|l| l.replace((false, None, false))) {
                    pop_setting(level);
                }
            }
            unsafe { pg_sys::SetUserIdAndSecContext(self.0, self.1) };
        }
    }
    let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
    let mut level = None;
    let mut lazy_scope = false;
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec);
        if internal() {
            // (inside a lazy scope, work that may run SQL of its own)
            if !lazy {
                ensure_safe_path();
            }
        } else {
            SESSION_USER.with(|s| s.set((user, sec)));
            if crate::fast_ffi::IsTransactionState() {
                let path = pg_sys::GetConfigOptionByName(c"search_path".as_ptr(), std::ptr::null_mut(), true);
                let path = if path.is_null() { None } else { Some(std::ffi::CStr::from_ptr(path).to_owned()) };
                let other_path = path.as_deref() != Some(SAFE_SEARCH_PATH);
                if other_path {
                    SESSION_SEARCH_PATH.with(|p| *p.borrow_mut() = path);
                } else {
                    // inside a pg_worlds plpgsql function (SHOW REVIEWS judging a world): its caller's
                    SESSION_SEARCH_PATH.with(|p| *p.borrow_mut() = caller_path());
                }
                if other_path || changed_settings() != 0 {
                    if lazy {
                        LAZY_PATH.with(|l| l.set((true, None, other_path)));
                        lazy_scope = true;
                    } else {
                        level = Some(push_internal_settings(other_path));
                    }
                }
            }
        }
        pg_sys::SetUserIdAndSecContext(
            pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
            sec | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
    }
    INTERNAL.with(|i| i.set(i.get() + 1));
    let _g = Guard(user, sec, level, lazy_scope);
    f()
}

/// Runs f, from inside pg_worlds' internal work, as a statement `role` runs in main with `path` as its
/// search_path: not internal (event triggers fire, its DDL is main's), with the role's rights, unrouted and
/// with no world namespace on the path. For a world's statements a merge runs again on main's tables.
pub fn as_role_in_main<R>(role: pg_sys::Oid, path: &std::ffi::CStr, f: impl FnOnce() -> R) -> R {
    struct Back(u32, pg_sys::Oid, i32, i32);
    impl Drop for Back {
        fn drop(&mut self) {
            INTERNAL.with(|i| i.set(self.0));
            // (the session's world and path back: their assign hooks put its namespaces back too)
            pop_setting(self.3);
            unsafe { pg_sys::SetUserIdAndSecContext(self.1, self.2) };
        }
    }
    let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut sec) };
    // main for this statement, as a session of main runs it (routing off, no world namespace on the path,
    // main's DDL handling on)
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    let _back = Back(INTERNAL.with(|i| i.replace(0)), user, sec, level);
    set_saved(c"worlds.world", c"main");
    set_saved(c"search_path", path);
    unsafe { pg_sys::SetUserIdAndSecContext(role, sec | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32) };
    f()
}

/// Runs f with the session's search_path, inside pg_worlds' internal work: for names the user wrote
/// (ONLY TABLES (orders), RESOLVE ('orders/7' = ...)) and names shown back to the user, both read as the
/// user's own statements read them.
pub fn in_session_search_path<R>(f: impl FnOnce() -> R) -> R {
    struct PathGuard(i32);
    impl Drop for PathGuard {
        fn drop(&mut self) {
            pop_setting(self.0);
        }
    }
    // (the safe path an as_internal_lazy deferred goes first, below the session's)
    ensure_safe_path();
    let path = if internal() { SESSION_SEARCH_PATH.with(|p| p.borrow().clone()) } else { None };
    let _p = path.filter(|_| unsafe { crate::fast_ffi::IsTransactionState() }).map(|p| PathGuard(push_setting(c"search_path", &p)));
    f()
}

/// Runs f with the search_path of whoever called the pg_worlds function running now: inside pg_worlds'
/// internal work, the session's (as `in_session_search_path`); inside a plpgsql API function (which runs
/// with `search_path = pg_catalog, pg_temp`, install.sql), the value that function's SET saved, i.e. its
/// caller's. For names a user wrote that such a function resolves (CREATE WORLD's may_change).
pub fn in_caller_search_path<R>(f: impl FnOnce() -> R) -> R {
    if internal() {
        return in_session_search_path(f);
    }
    ensure_safe_path();
    struct PathGuard(i32);
    impl Drop for PathGuard {
        fn drop(&mut self) {
            pop_setting(self.0);
        }
    }
    let saved = caller_path();
    let _p = saved.filter(|_| unsafe { crate::fast_ffi::IsTransactionState() }).map(|p| PathGuard(push_setting(c"search_path", &p)));
    f()
}

/// The search_path a pg_worlds plpgsql function's own SET saved (its caller's), when that SET is what
/// is in force now; None otherwise.
fn caller_path() -> Option<std::ffi::CString> {
    unsafe {
        let vars = pg_sys::get_guc_variables();
        let n = pg_sys::GetNumConfigOptions();
        let mut found = None;
        for i in 0..n.max(0) as usize {
            let g = *vars.add(i);
            if g.is_null() || std::ffi::CStr::from_ptr((*g).name) != c"search_path" {
                continue;
            }
            let current = *(*(g as *mut pg_sys::config_string)).variable;
            if current.is_null() || std::ffi::CStr::from_ptr(current) != SAFE_SEARCH_PATH {
                break;
            }
            // the innermost function SET (a save): its prior value is the caller's
            let mut st = (*g).stack;
            while !st.is_null() && (*st).state != pg_sys::GucStackState::GUC_SAVE {
                st = (*st).prev;
            }
            if !st.is_null() && !(*st).prior.val.stringval.is_null() {
                found = Some(std::ffi::CStr::from_ptr((*st).prior.val.stringval).to_owned());
            }
            break;
        }
        found
    }
}

/// The search_path pg_worlds' own SQL runs with.
const SAFE_SEARCH_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

/// The session's search_path when pg_worlds' internal work began (None: it was already the safe one).
static SESSION_SEARCH_PATH: BackendLocal<RefCell<Option<std::ffi::CString>>> = BackendLocal::new(RefCell::new(None));

pub fn relation_layout(tabno: i32) -> Rc<Layout> {
    if let Some(l) = LAYOUTS.with(|m| m.borrow().get(&tabno).cloned()) {
        return l;
    }
    let layout = Rc::new(layout::load_layout(tabno));
    LAYOUTS.with(|m| m.borrow_mut().insert(tabno, layout.clone()));
    layout
}

/// Why a table's storage could not be made, as its worlds.tables `unsupported` says (worlds' statements
/// name it; capture skips the table rather than fail the user's write).
const NO_STORAGE: &str = "its storage could not be made: ";


/// The layout of a table whose change is about to be kept: its storage made first if it has none yet (a
/// table is tracked at CREATE TABLE, its history made at its first captured write: worlds._make_history,
/// by a worker in a transaction of its own (maker.rs), or, when the worker can't, in this transaction, the
/// table's making lock held until it ends). None: its storage can't be
/// made (the reason logged and kept in worlds.tables.unsupported): the write goes on uncaptured, as for a
/// table that could not be tracked, rather than fail. Made in a subtransaction, with the backend's
/// progress report (a COPY's, pg_stat_progress_copy) kept across the DDL (CREATE INDEX reports its own).
pub fn ensure_history(tabno: i32) -> Option<Rc<Layout>> {
    let layout = relation_layout(tabno);
    if layout.history != pg_sys::Oid::INVALID {
        return Some(layout);
    }
    if layout.unsupported.as_deref().is_some_and(|u| u.starts_with(NO_STORAGE)) {
        return None;
    }
    // Made by a worker in a transaction of its own (maker.rs): no lock of the making outlives it.
    if maker::made_by_worker(tabno, layout.relid) {
        LAYOUTS.with(|m| m.borrow_mut().remove(&tabno));
        let layout = relation_layout(tabno);
        if layout.history != pg_sys::Oid::INVALID {
            return Some(layout);
        }
    }
    // Else made here, in this transaction. First writers of one table queue on a lock of their own (held to their transaction's end), and the
    // one that waited finds the storage the other made, on the latest snapshot (load_layout): no row lock
    // of worlds.tables is taken for it, which under REPEATABLE READ would have failed the second writer
    // with 40001 where stock Postgres lets both insert. An object lock, not an advisory one: the user's
    // advisory locks in pg_locks are the user's alone (PostgreSQL's advisory_lock test lists them all).
    // (Not taken by CREATE WORLD's making of every table's storage: that many locks would fill the lock
    // table; `_make_history` still locks the worlds.tables row.)
    unsafe {
        let worlds = pg_sys::get_namespace_oid(c"worlds".as_ptr(), false);
        let tables = pg_sys::get_relname_relid(c"tables".as_ptr(), worlds);
        pg_sys::LockDatabaseObject(tables, pg_sys::Oid::from(tabno as u32), 0, pg_sys::ExclusiveLock as pg_sys::LOCKMODE);
    }
    LAYOUTS.with(|m| m.borrow_mut().remove(&tabno));
    let layout = relation_layout(tabno);
    if layout.history != pg_sys::Oid::INVALID {
        return Some(layout);
    }
    let made = progress_kept(|| {
        crate::subxact::in_subtransaction(|| {
            as_internal(|| crate::spi_calls::run_with_args("SELECT worlds._make_history(t) FROM worlds.tables t WHERE t.tabno = $1", &[tabno.into()]))
        })
    });
    LAYOUTS.with(|m| m.borrow_mut().remove(&tabno));
    let reason = match made {
        Ok(Ok(())) => {
            let layout = relation_layout(tabno);
            return (layout.history != pg_sys::Oid::INVALID).then_some(layout);
        }
        Ok(Err(e)) => e.to_string(),
        Err(e) => {
            let (state, message) = crate::subxact::state_and_message(&e);
            // a failure of the moment (a serialization failure, a deadlock, a lock or statement timeout, a
            // cancel, no memory) is the write's: it fails as it would, and the next write tries again
            if matches!(&state[..2], "40" | "53" | "55" | "57") {
                e.rethrow();
            }
            message
        }
    };
    pgrx::log!("pg_worlds could not make the storage of table {}: {reason}", layout.table_name);
    let _ = crate::subxact::in_subtransaction(|| {
        as_internal(|| {
            crate::spi_calls::run_with_args(
                "UPDATE worlds.tables SET unsupported = $2 WHERE tabno = $1 AND history IS NULL",
                &[tabno.into(), format!("{NO_STORAGE}{reason}").into()],
            )
        })
    });
    LAYOUTS.with(|m| m.borrow_mut().remove(&tabno));
    None
}

/// Runs f, then puts the backend's progress report back as it was (a command's, with its parameters).
fn progress_kept<R>(f: impl FnOnce() -> R) -> R {
    let saved = unsafe {
        let be = pg_sys::MyBEEntry;
        (!be.is_null() && (*be).st_progress_command != pg_sys::ProgressCommandType::PROGRESS_COMMAND_INVALID)
            .then(|| ((*be).st_progress_command, (*be).st_progress_command_target, (*be).st_progress_param))
    };
    let r = f();
    if let Some((command, target, params)) = saved {
        unsafe {
            pg_sys::pgstat_progress_start_command(command, target);
            let index: Vec<i32> = (0..params.len() as i32).collect();
            pg_sys::pgstat_progress_update_multi_param(params.len() as i32, index.as_ptr(), params.as_ptr());
        }
    }
    r
}

/// Is pg_worlds installed in this database? (The library is preloaded for the whole cluster.)
pub fn extension_installed() -> bool {
    storage_namespace() != pg_sys::Oid::INVALID
}

/// The oid of schema worlds_data, where the tables' storage and overlays live (InvalidOid: pg_worlds isn't
/// installed in this database). Kept until pg_namespace changes (`namespace_changed`, a syscache callback,
/// which also runs when the caches are reset): a lookup by name a statement used to make several times.
pub fn storage_namespace() -> pg_sys::Oid {
    STORAGE_NAMESPACE.with(|kept| match kept.get() {
        Some(oid) => oid,
        None => {
            let oid = unsafe { pg_sys::get_namespace_oid(c"worlds_data".as_ptr(), true) };
            kept.set(Some(oid));
            oid
        }
    })
}

static STORAGE_NAMESPACE: crate::backend_local::BackendLocal<std::cell::Cell<Option<pg_sys::Oid>>> =
    crate::backend_local::BackendLocal::new(std::cell::Cell::new(None));

/// Any change of pg_namespace (or a reset of the caches): the schema's oid is looked up again.
#[pg_guard]
unsafe extern "C-unwind" fn namespace_changed(_arg: pg_sys::Datum, _cache: std::ffi::c_int, _hash: u32) {
    STORAGE_NAMESPACE.with(|kept| kept.set(None));
}

/// relid -> tabno of every tracked table (loaded once, dropped on relcache invalidation).
pub fn tracked_tables() -> Rc<HashMap<pg_sys::Oid, i32>> {
    if let Some(t) = TRACKED.with(|t| t.borrow().clone()) {
        return t;
    }
    load_tracked().0
}

/// Is the table tracked, as far as this backend's loaded map says? (False when it isn't loaded: never
/// loads it.)
pub fn is_tracked(relid: pg_sys::Oid) -> bool {
    TRACKED.with(|t| t.borrow().as_ref().is_some_and(|m| m.contains_key(&relid)))
}

/// relid -> tabno of the tracked tables a world's statement is routed for: those with storage. A table
/// tracked at CREATE TABLE gets it at its first captured write (worlds._make_history) or with the
/// database's first world; until then nothing changed it since it was tracked, and a moment of main's
/// past reads it as main has it. (Once the database has a world, every tracked table has its storage.)
pub fn routed_tables() -> Rc<HashMap<pg_sys::Oid, i32>> {
    if let Some(t) = ROUTED.with(|t| t.borrow().clone()) {
        return t;
    }
    load_tracked().1
}

type TableMap = Rc<HashMap<pg_sys::Oid, i32>>;

fn load_tracked() -> (TableMap, TableMap) {
    let rows: Vec<(pg_sys::Oid, i32, bool)> = if catalog_scan::serializable() {
        // (no predicate lock on the catalog: catalog_scan.rs)
        let relid = catalog_scan::catalog_table(c"tables");
        let installed = relid != pg_sys::Oid::INVALID && unsafe { pg_sys::get_extension_oid(c"pg_worlds".as_ptr(), true) } != pg_sys::Oid::INVALID;
        let mut rows = Vec::new();
        if installed {
            unsafe {
                catalog_scan::visible_rows(relid, pg_sys::Oid::INVALID, &mut [], pg_sys::GetTransactionSnapshot(), |r| {
                    if let (Some(rel), Some(tabno)) = (r.oid("relid"), r.int4("tabno")) {
                        rows.push((rel, tabno, !r.is_null("history")));
                    }
                    true
                })
            };
        }
        rows
    } else { as_internal(|| {
        Spi::connect(|client| {
            // the extension may not be installed in this database: then nothing is tracked
            let installed = client
                .fresh("SELECT 1 FROM pg_extension WHERE extname = 'pg_worlds' AND to_regclass('worlds.tables') IS NOT NULL", None, &[])
                .map(|r| !r.is_empty())
                .unwrap_or(false);
            if !installed {
                return Vec::new();
            }
            client
                .fresh("SELECT relid::oid, tabno, history IS NOT NULL FROM worlds.tables", None, &[])
                .map(|rows| {
                    rows.into_iter()
                        .filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok()??, r.get::<i32>(2).ok()??, r.get::<bool>(3).ok()??)))
                        .collect()
                })
                .unwrap_or_default()
        })
    }) };
    let all: TableMap = Rc::new(rows.iter().map(|&(r, t, _)| (r, t)).collect());
    let routed: TableMap = Rc::new(rows.iter().filter(|(_, _, stored)| *stored).map(|&(r, t, _)| (r, t)).collect());
    TRACKED.with(|t| *t.borrow_mut() = Some(all.clone()));
    ROUTED.with(|t| *t.borrow_mut() = Some(routed.clone()));
    (all, routed)
}

/// The overlay views of every tracked table (each table's three), kept until a relcache invalidation: the
/// router asks for them in every statement of a world.
pub fn overlay_relations() -> Rc<HashMap<pg_sys::Oid, i32>> {
    if let Some(o) = OVERLAYS.with(|o| o.borrow().clone()) {
        return o;
    }
    // each overlay view (and its twins) with its table's number: a write of a world finds its table here
    let overlays: HashMap<pg_sys::Oid, i32> = tracked_tables()
        .values()
        .flat_map(|&t| {
            let l = relation_layout(t);
            [l.overlay, l.overlay_nothing, l.overlay_rows].into_iter().filter(|o| *o != pg_sys::Oid::INVALID).map(move |o| (o, t))
        })
        .collect();
    let overlays = Rc::new(overlays);
    OVERLAYS.with(|o| *o.borrow_mut() = Some(overlays.clone()));
    overlays
}

/// Forgets what a per-relation map remembers of `relid` (of every relation when it is InvalidOid): a
/// relcache invalidation of it (its DDL, an index added or dropped).
pub(crate) fn forget_relation<V: 'static>(map: &'static std::thread::LocalKey<RefCell<HashMap<pg_sys::Oid, V>>>, relid: pg_sys::Oid) {
    map.with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            if relid == pg_sys::Oid::INVALID {
                m.clear();
            } else {
                m.remove(&relid);
            }
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    // The maps are rebuilt on next use. A layout goes only when one of its relations is invalidated (DDL
    // on the table or its storage, an index added, tracking changed): autovacuum invalidates tracked
    // tables and their history all the time, and reloading every layout then was 0.5% of TPC-B.
    capture::on_relcache_invalidation(relid);
    delta_insert::on_relcache_invalidation(relid);
    key_probe::on_relcache_invalidation(relid);
    rewrite::on_relcache_invalidation(relid);
    overlay::worlds::on_relcache_invalidation(relid);
    overlay::delta_since::on_relcache_invalidation(relid);
    commit_direct::on_relcache_invalidation(relid);
    world_twins::on_relcache_invalidation(relid);
    for f in callbacks::relcache() {
        f(relid);
    }
    LAYOUTS.with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            if relid == pg_sys::Oid::INVALID {
                m.clear();
            } else {
                m.retain(|_, l| !l.relations().contains(&relid));
            }
        }
    });
    TRACKED.with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            *t = None;
        }
    });
    ROUTED.with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            *t = None;
        }
    });
    OVERLAYS.with(|o| {
        if let Ok(mut o) = o.try_borrow_mut() {
            *o = None;
        }
    });
}

/// The one transaction callback (each registered callback costs a guarded call at every transaction's
/// end): capture closes its relations before the overlay flushes its event rows.
#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    // (first: following a rewrite writes history, which capture then closes)
    rewrite::on_xact(event);
    capture::on_xact(event);
    if event == pg_sys::XactEvent::XACT_EVENT_PRE_COMMIT || event == pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE {
        // (events first: the world's row, locked by the version's UPDATE, is held as briefly as can be)
        write_events::commit_writes();
    }
    if event == pg_sys::XactEvent::XACT_EVENT_ABORT || event == pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT {
        write_events::forget_aborted(0);
    }
    overlay::on_xact(event);
    for f in callbacks::xact_end() {
        f(event);
    }
    use pg_sys::XactEvent::*;
    if matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE | XACT_EVENT_PARALLEL_COMMIT | XACT_EVENT_PARALLEL_ABORT) {
        crate::api::transaction_block_ended();
    }
}

/// A subtransaction's abort: the rooms above forget what they began in it, then the overlay, write events
/// and capture.
#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    my: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        for f in callbacks::subxact_abort() {
            f();
        }
        overlay::forget_all();
        write_events::forget_aborted(my);
        // before the subtransaction's relations leave the relcache (those it created are removed)
        capture::close_targets();
    }
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), pg_sys::Datum::from(0usize));
        pg_sys::CacheRegisterSyscacheCallback(pg_sys::SysCacheIdentifier::NAMESPACEOID as std::ffi::c_int, Some(namespace_changed), pg_sys::Datum::from(0usize));
    }
    unsafe {
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
    }
    unsafe { pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut()) };
}

/// Sets a setting for this transaction's current nesting level; undo it with `pop_setting(level)` (as
/// `SET LOCAL` inside a function would be undone when it returns).
pub fn push_setting(name: &std::ffi::CStr, value: &std::ffi::CStr) -> i32 {
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    set_saved(name, value);
    level
}

/// A setting set at the current GUC nest level, its value before saved (undone by `pop_setting`).
fn set_saved(name: &std::ffi::CStr, value: &std::ffi::CStr) {
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
    }
}

/// Runs f with the client told only warnings and errors (pg_worlds' own DROP ... CASCADE, whose NOTICE
/// lists objects the user didn't drop by name).
pub fn quietly<R>(f: impl FnOnce() -> R) -> R {
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    set_saved(c"client_min_messages", c"warning");
    let r = f();
    pop_setting(level);
    r
}

/// Runs f allowed to make a namespace named `pg_...` (allow_system_table_mods, which only a superuser may
/// set: pg_worlds sets it for its own statement, as the extension's owner): the namespaces of a world's
/// own objects (world_schemas.rs).
pub fn with_reserved_names<R>(f: impl FnOnce() -> R) -> R {
    let level = allow_reserved_names();
    let r = f();
    pop_setting(level);
    r
}

/// A GUC level with allow_system_table_mods on (`pop_setting` takes it off; an error does too).
pub fn allow_reserved_names() -> i32 {
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    unsafe {
        pg_sys::set_config_option(
            c"allow_system_table_mods".as_ptr(),
            c"on".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
    }
    level
}

pub fn pop_setting(level: i32) {
    unsafe { pg_sys::AtEOXact_GUC(true, level) };
}
