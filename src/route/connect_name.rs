//! The database name choosing the world, for clients that connect straight to Postgres (issue 47):
//! `psql "dbname=app/agent_7"` is database `app` with `worlds.world = agent_7`, set as
//! `options=-c worlds.world=agent_7` sets it; `dbname='app/main@-1 hour'` reads main as it was.
//! docs/architecture.md, "Choosing a world by database name".
//!
//! Postgres authenticates a connection before it looks its database up, and `ClientAuthentication_hook`
//! runs between the two (postinit.c: InitPostgres → PerformAuthentication → ClientAuthentication → the
//! hook; then GetDatabaseTuple(in_dbname)). `in_dbname` is `MyProcPort->database_name` itself
//! (postmaster.c BackendRun → PostgresMain → InitPostgres), so cutting that string at the '/' in the hook
//! makes Postgres look up and connect to `app`, with every check it makes of a database (CONNECT
//! privilege, datallowconn, its connection limit) made on `app`.
//!
//! 1. In the hook, once authentication succeeded (and not for a replication connection): how the name
//!    splits is `worlds_core::connect_name::choose`, asking pg_database (a real database named with a '/'
//!    is itself).
//! 2. pg_hba.conf matched the whole name. The line `app` matches must be that same line, or the
//!    connection is refused (28000): a DBA's `host app alice reject`, or another method or option for
//!    `app`, is never bypassed by adding `/world` to the name.
//! 3. The world is appended to the startup packet's settings (`Port.guc_options`), which Postgres applies
//!    as it applies `options=-c ...`: the session is in the world from then on exactly as with options.
//! 4. At the end of the connection's startup transaction (connected to `app` now), the world is looked
//!    up: a database without pg_worlds, or no live world of that name or ID, fails the connection with
//!    3D000 'database "app/agent_9" does not exist', as Postgres fails an unknown database.
use crate::api::code_of;
use pgrx::pg_sys;
use pgrx::pg_sys::ffi::pg_guard_ffi_boundary;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use worlds_core::connect_name::{choose, Choice};
use crate::backend_local::BackendLocal;

/// The start of PostgreSQL 15's `Port` (libpq/libpq-be.h), which pgrx leaves opaque: the fields up to
/// `hba`, none of them under an #ifdef. Offsets measured with offsetof() against the server headers
/// (database_name 328, guc_options 352, hba 368) and checked below at compile time; the pg_test
/// `port_fields_read_as_postgres_has_them` reads them in a live backend.
#[repr(C)]
struct PortPrefix {
    sock: c_int,
    noblock: bool,
    proto: u32,
    laddr: pg_sys::SockAddr,
    raddr: pg_sys::SockAddr,
    remote_host: *mut c_char,
    remote_hostname: *mut c_char,
    remote_hostname_resolv: c_int,
    remote_hostname_errcode: c_int,
    remote_port: *mut c_char,
    can_accept_connections: c_int,
    database_name: *mut c_char,
    user_name: *mut c_char,
    cmdline_options: *mut c_char,
    guc_options: *mut pg_sys::List,
    application_name: *mut c_char,
    /// the pg_hba.conf line that matched (an `HbaLine`, whose first field is its line number)
    hba: *mut c_int,
}
#[cfg(feature = "pg15")]
const _: () = {
    assert!(std::mem::offset_of!(PortPrefix, database_name) == 328);
    assert!(std::mem::offset_of!(PortPrefix, guc_options) == 352);
    assert!(std::mem::offset_of!(PortPrefix, hba) == 368);
};

type ClientAuthHook = Option<unsafe extern "C-unwind" fn(*mut pg_sys::Port, c_int)>;

unsafe extern "C-unwind" {
    // libpq/auth.h and libpq/hba.h, not in pgrx's bindings
    static mut ClientAuthentication_hook: ClientAuthHook;
    fn hba_getauthmethod(port: *mut pg_sys::Port);
}

static mut PREV_CLIENT_AUTHENTICATION: ClientAuthHook = None;

/// A world chosen by the database name, looked up at the end of the startup transaction.
struct Chosen {
    /// the name as the client sent it
    full: String,
    database: String,
    world: String,
}

static CHOSEN: BackendLocal<RefCell<Option<Chosen>>> = BackendLocal::new(RefCell::new(None));

/// Installs the hook (from _PG_init, while preloading). PostgreSQL 15 only: `Port`'s layout is read by
/// offset.
pub fn install() {
    #[cfg(feature = "pg15")]
    unsafe {
        PREV_CLIENT_AUTHENTICATION = ClientAuthentication_hook;
        ClientAuthentication_hook = Some(client_authenticated);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn client_authenticated(port: *mut pg_sys::Port, status: c_int) {
    unsafe {
        if let Some(prev) = PREV_CLIENT_AUTHENTICATION {
            pg_guard_ffi_boundary(|| prev(port, status));
        }
        // (a failed authentication is reported by Postgres right after; a replication connection's
        // database, if any, is for logical decoding: left alone)
        if status != pg_sys::STATUS_OK as c_int || pg_sys::am_walsender || port.is_null() {
            return;
        }
        let p = port as *mut PortPrefix;
        if (*p).database_name.is_null() {
            return;
        }
        let Ok(full) = CStr::from_ptr((*p).database_name).to_str() else { return };
        let full = full.to_string();
        let (database, world) = match choose(&full, database_exists) {
            Choice::AsIs => return,
            Choice::MaybeCut { database } => fatal(
                "42622",
                format!("database name \"{full}\" is too long to choose a world of database \"{database}\""),
                Some(format!(
                    "Postgres keeps the first {} bytes of a database name: the world after the '/' may have been cut.",
                    worlds_core::connect_name::MAX_NAME_BYTES
                )),
                Some(format!("Connect to \"{database}\" with options=-c worlds.world=<world>.")),
            ),
            Choice::Split { database, world } => (database.to_string(), world.to_string()),
        };
        // pg_hba.conf matched the whole name: `database` must be matched by the same line
        let matched = (*p).hba;
        *(*p).database_name.add(database.len()) = 0;
        pg_guard_ffi_boundary(|| hba_getauthmethod(port));
        let again = (*p).hba;
        if again != matched {
            let line = |h: *mut c_int| if h.is_null() || *h == 0 { "none".to_string() } else { format!("line {}", *h) };
            let user = if (*p).user_name.is_null() { String::new() } else { CStr::from_ptr((*p).user_name).to_string_lossy().into_owned() };
            let log = format!(
                "\"{full}\" matched pg_hba.conf {}, \"{database}\" matches {}; a world is chosen by name only where both are matched by the same line.",
                line(matched),
                line(again)
            );
            ErrorReport::new(
                code_of("28000"),
                format!("pg_hba.conf does not let user \"{user}\" open database \"{database}\" by the name \"{full}\""),
                "pg_worlds",
            )
            .set_detail(log)
            .set_hint(format!("Connect to \"{database}\" itself, with options=-c worlds.world={world}."))
            .report(PgLogLevel::FATAL);
            unreachable!("FATAL does not return");
        }
        // the world, as options=-c worlds.world=... sets it: applied by Postgres with the startup packet's
        // other settings (after the client's own: the name wins), in TopMemoryContext as they are
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let name = CString::new("worlds.world").unwrap();
        let value = CString::new(world.as_str()).unwrap_or_default();
        let mut list = (*p).guc_options;
        list = pg_sys::lappend(list, pg_sys::pstrdup(name.as_ptr()).cast());
        list = pg_sys::lappend(list, pg_sys::pstrdup(value.as_ptr()).cast());
        (*p).guc_options = list;
        pg_sys::MemoryContextSwitchTo(old);
        if pg_sys::Log_connections {
            pgrx::log!("connection by the name \"{full}\": database \"{database}\", world \"{world}\"");
        }
        CHOSEN.with(|c| *c.borrow_mut() = Some(Chosen { full, database, world }));
    }
}

/// A database of that name, as Postgres's own startup looks it up (postinit.c GetDatabaseTuple: not yet
/// connected to any database; by pg_database's name index if its relcache entry is built, else a scan).
fn database_exists(name: &str) -> bool {
    let Ok(name) = CString::new(name) else { return false };
    unsafe {
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_database_datname as pg_sys::AttrNumber,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::RegProcedure::from(pg_sys::F_NAMEEQ),
            pg_sys::Datum::from(name.as_ptr()),
        );
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let scan = pg_sys::systable_beginscan(
            rel,
            pg_sys::Oid::from(pg_sys::DatabaseNameIndexId),
            pg_sys::criticalSharedRelcachesBuilt,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let found = !pg_sys::systable_getnext(scan).is_null();
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        found
    }
}

/// At every transaction event (storage's one callback, registered from lib.rs): at the end of the
/// connection's startup transaction, the world the name chose is looked up in the database it opened.
pub fn on_xact_end(event: pg_sys::XactEvent::Type) {
    if event != pg_sys::XactEvent::XACT_EVENT_PRE_COMMIT {
        return;
    }
    let Some(chosen) = CHOSEN.with(|c| c.borrow_mut().take()) else { return };
    // (the startup transaction has a snapshot but no active one, which SPI needs; a FATAL ends the
    // backend, so there is nothing to pop on the way out)
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    check(&chosen);
    unsafe { pg_sys::PopActiveSnapshot() };
}

/// The world `chosen` names is in its database, or the connection fails: 3D000 as for an unknown database.
fn check(chosen: &Chosen) {
    let Chosen { full, database, world } = chosen;
    let missing = |detail: String| -> ! {
        fatal("3D000", format!("database \"{full}\" does not exist"), Some(detail), None);
    };
    let installed = crate::spi_calls::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_worlds')")
        .ok()
        .flatten()
        .unwrap_or(false);
    if !installed {
        missing(format!("Database \"{database}\" does not have pg_worlds: \"{full}\" can't choose a world in it."));
    }
    let name = world.split_once('@').map_or(world.as_str(), |(name, _)| name);
    let live = name == "main"
        || crate::storage::as_internal(|| {
            // (the resolver's own query: by name, or by ID for a text of an ID's form)
            crate::spi_calls::get_one_with_args::<bool>(
                &format!("SELECT EXISTS ({})", crate::sql_text::live_world_query(name)),
                &[name.into()],
            )
        })
        .ok()
        .flatten()
        .unwrap_or(false);
    if !live {
        missing(format!("Database \"{database}\" has no world \"{name}\"."));
    }
    if world.contains('@') {
        // a moment: its time, and that the world existed then, checked as the session's first statement
        // would check them (their own errors and SQLSTATEs: 22P02, 22023, 55000)
        crate::storage::as_internal(|| {
            crate::spi_calls::get_one_with_args::<bool>("SELECT true FROM worlds._moment_of($1)", &[world.as_str().into()])
        })
        .ok();
    }
}

fn fatal(sqlstate: &str, message: String, detail: Option<String>, hint: Option<String>) -> ! {
    crate::api::report(PgLogLevel::FATAL, sqlstate, message, detail, hint)
}

/// For the pg_test: this backend's `MyProcPort`, read through `PortPrefix`: (database, user, hba line).
pub fn port_fields() -> Option<(String, String, i32)> {
    unsafe {
        let p = pg_sys::MyProcPort as *mut PortPrefix;
        if p.is_null() || (*p).database_name.is_null() || (*p).user_name.is_null() || (*p).hba.is_null() {
            return None;
        }
        Some((
            CStr::from_ptr((*p).database_name).to_string_lossy().into_owned(),
            CStr::from_ptr((*p).user_name).to_string_lossy().into_owned(),
            *(*p).hba,
        ))
    }
}
