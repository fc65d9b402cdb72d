//! Clients seen reading (spec, DIFF ... READERS): which columns each client's statements read, recorded
//! at ExecutorStart (after Postgres's) from the plan's range table: every user table's selected columns
//! (a SELECT's, an UPDATE's or DELETE's WHERE, RETURNING) and updated ones (an UPDATE's SET).
//!
//! A client is its session user's role, with application_name when the program gives one:
//! `billing (nightly)`. Reads in any world count, under the user's table: a world's statement keeps a
//! permission-only copy of the table's entry with the user's columns (route/rewrite), its storage lives
//! in worlds_data (not a user's namespace) and the overlay view's own entry for the table (checkAsUser
//! the view's owner) reads every column, so it is left out, as governance/reads/record.rs does. Not
//! recorded: pg_worlds' own SQL, system schemas (pg_*, information_schema), worlds and worlds_data, a
//! world's own tables (pg_w<n>_*), temporary tables, EXPLAIN without ANALYZE, parallel workers (the
//! leader has the same plan), `worlds.record_reads = off`.
//!
//! A session records a (client, table, column) at most once a minute: a backend-local map remembers what
//! it recorded and when, so a repeated read touches no shared memory and takes no lock. The entries live
//! in clients_shmem.rs.
use super::clients_shmem::{self as shmem, ReadEntry, ReadKey, APP_BYTES};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A session records a (client, table, column) at most this often (microseconds: a minute).
const EVERY: i64 = 60 * 1_000_000;

mod raw {
    use pgrx::pg_sys;
    // the same symbols pgrx binds, without its guard: none can raise an ERROR (reads of backend state)
    unsafe extern "C-unwind" {
        pub fn GetSessionUserId() -> pg_sys::Oid;
        pub fn GetCurrentStatementStartTimestamp() -> pg_sys::TimestampTz;
    }
}

/// A hasher for one u64 (table << 16 | column, or a table's oid): a multiply, its high bits folded down.
#[derive(Default)]
struct Mix(u64);

impl Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 32);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type Fast<K, V> = HashMap<K, V, BuildHasherDefault<Mix>>;

/// What this session recorded: for its client now.
struct Local {
    role: pg_sys::Oid,
    /// application_name as the key holds it (zero-padded)
    app: [u8; APP_BYTES],
    /// (table << 16 | column) → when this session last recorded it
    seen: Fast<u64, i64>,
    /// table → is it a user's table (a user namespace; pg_worlds' and the system's are not)
    tables: Fast<u32, bool>,
}

static LOCAL: crate::backend_local::BackendLocal<RefCell<Local>> = crate::backend_local::BackendLocal::new(RefCell::new(Local {
    role: pg_sys::Oid::INVALID,
    app: [0; APP_BYTES],
    seen: Fast::with_hasher(BuildHasherDefault::new()),
    tables: Fast::with_hasher(BuildHasherDefault::new()),
}));

/// The executor hook's test before it calls `record`: recording is on and this is a client's statement.
#[inline]
pub fn wanted(eflags: std::ffi::c_int) -> bool {
    crate::guc::RECORD_READS.get()
        && eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as std::ffi::c_int == 0
        && !crate::storage::internal()
        && unsafe { pg_sys::ParallelWorkerNumber } < 0
        && shmem::available()
}

/// Is C string `p` (null: none) the application_name kept in `app` (cut at APP_BYTES - 1 bytes, padded with
/// NULs)? Compared in place, up to the string's NUL: the hook runs for every statement.
unsafe fn same_app(p: *const std::ffi::c_char, app: &[u8; APP_BYTES]) -> bool {
    for (i, &kept) in app.iter().enumerate().take(APP_BYTES - 1) {
        let b = if p.is_null() { 0 } else { unsafe { *p.add(i) as u8 } };
        if b != kept {
            return false;
        }
        if b == 0 {
            return true;
        }
    }
    // a longer name whose first APP_BYTES - 1 bytes are the ones kept
    true
}

impl Local {
    /// Follows the session's client (SET SESSION AUTHORIZATION, SET application_name): what was recorded
    /// for another client says nothing for this one.
    fn follow_client(&mut self) {
        let role = unsafe { raw::GetSessionUserId() };
        let p = unsafe { pg_sys::application_name };
        let same = role == self.role && unsafe { same_app(p, &self.app) };
        if !same {
            let mut app = [0u8; APP_BYTES];
            if !p.is_null() {
                let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
                let n = s.len().min(APP_BYTES - 1);
                app[..n].copy_from_slice(&s[..n]);
            }
            self.role = role;
            self.app = app;
            self.seen.clear();
        }
    }

    /// Is this a user's table (kept per table)? Its namespace isn't the system's, pg_worlds', a world's
    /// own (pg_w<n>_...) or a temporary one, and it is a table (plain, partitioned, foreign, matview).
    fn user_table(&mut self, relid: pg_sys::Oid) -> bool {
        if let Some(&b) = self.tables.get(&relid.to_u32()) {
            return b;
        }
        let b = unsafe {
            let kind = pg_sys::get_rel_relkind(relid) as u8;
            let nsp = pg_sys::get_rel_namespace(relid);
            let name = if nsp == pg_sys::Oid::INVALID { std::ptr::null_mut() } else { pg_sys::get_namespace_name(nsp) };
            matches!(kind, b'r' | b'p' | b'f' | b'm')
                && !name.is_null()
                && match std::ffi::CStr::from_ptr(name).to_bytes() {
                    b"information_schema" | b"worlds" | b"worlds_data" => false,
                    n => !n.starts_with(b"pg_"),
                }
        };
        if self.tables.len() > 10_000 {
            self.tables.clear();
        }
        self.tables.insert(relid.to_u32(), b);
        b
    }
}

/// ExecutorStart, after Postgres's (when `wanted`): records the columns the statement reads that this
/// session hasn't recorded in the last minute.
pub unsafe fn record(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        let stmt = (*query_desc).plannedstmt;
        if stmt.is_null() || (*stmt).rtable.is_null() {
            return;
        }
        let rtable = (*stmt).rtable;
        let now = raw::GetCurrentStatementStartTimestamp();
        // (asked only of an entry checked as another role: the overlay view's are)
        let mut in_world: Option<bool> = None;
        let mut new: Vec<(u32, i16)> = Vec::new();
        let (role, app) = LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            l.follow_client();
            for i in 0..(*rtable).length {
                let rte = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
                if (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION || !l.user_table((*rte).relid) {
                    continue;
                }
                if (*rte).checkAsUser != pg_sys::Oid::INVALID && *in_world.get_or_insert_with(|| !crate::guc::in_main()) && overlay_entry(rte) {
                    continue;
                }
                let relid = (*rte).relid.to_u32();
                for cols in [(*rte).selectedCols, (*rte).updatedCols] {
                    for m in members(cols) {
                        let attnum = m + pg_sys::FirstLowInvalidHeapAttributeNumber;
                        // (a whole-row reference reads every column; system columns aren't the user's)
                        let range = match attnum {
                            0 => 1..=natts((*rte).relid),
                            a if a > 0 => a..=a,
                            _ => continue,
                        };
                        for a in range {
                            let k = (relid as u64) << 16 | (a as u16 as u64);
                            match l.seen.get(&k) {
                                Some(&t) if now - t < EVERY && now >= t => {}
                                _ => {
                                    l.seen.insert(k, now);
                                    new.push((relid, a as i16));
                                }
                            }
                        }
                    }
                }
            }
            if l.seen.len() > 50_000 {
                l.seen.retain(|_, t| now - *t < EVERY);
            }
            (l.role, l.app)
        });
        if new.is_empty() {
            return;
        }
        new.sort_unstable();
        new.dedup();
        let db = pg_sys::MyDatabaseId.to_u32();
        let keys: Vec<ReadKey> = new.into_iter().map(|(relid, attnum)| ReadKey { db, role: role.to_u32(), relid, attnum, app }).collect();
        shmem::record(&keys, now);
    }
}

/// The members of a Bitmapset, read in place (bms_next_member, without a call per member).
unsafe fn members(set: *const pg_sys::Bitmapset) -> impl Iterator<Item = i32> {
    let words: &[pg_sys::bitmapword] = if set.is_null() { &[] } else { unsafe { (*set).words.as_slice((*set).nwords as usize) } };
    words.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                (w as u32 * pg_sys::bitmapword::BITS + bit) as i32
            })
        })
    })
}

/// The table's number of columns (dropped ones included).
unsafe fn natts(relid: pg_sys::Oid) -> i32 {
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return 0;
        }
        let n = (*(*rel).rd_rel).relnatts as i32;
        pg_sys::RelationClose(rel);
        n
    }
}

/// A world's statement: the overlay view's own entry for a tracked table (its checkAsUser is the view's
/// owner), which reads every column whatever the user's statement reads.
unsafe fn overlay_entry(rte: *mut pg_sys::RangeTblEntry) -> bool {
    unsafe {
        if (*rte).checkAsUser == pg_sys::Oid::INVALID {
            return false;
        }
        let tracked = crate::storage::tracked_tables();
        match tracked.get(&(*rte).relid) {
            Some(&tabno) => (*rte).checkAsUser == crate::governance::reads::record::view_owner(tabno, (*rte).relid.to_u32()),
            None => false,
        }
    }
}

/// The client's name: its role, with ` (application_name)` when it has one.
fn client_name(role: &str, app: &str) -> String {
    if app.is_empty() {
        role.to_string()
    } else {
        format!("{role} ({app})")
    }
}

fn app_of(key: &ReadKey) -> String {
    let n = key.app.iter().position(|&b| b == 0).unwrap_or(APP_BYTES);
    String::from_utf8_lossy(&key.app[..n]).into_owned()
}

fn timestamp(t: i64) -> TimestampWithTimeZone {
    unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(t), false) }.unwrap_or_else(|| crate::api::raise("XX000", "a bad timestamp"))
}

/// Role names by oid, looked up once each (None: the role was dropped).
#[derive(Default)]
struct Roles(HashMap<u32, Option<String>>);

impl Roles {
    fn name(&mut self, role: u32) -> Option<String> {
        self.0
            .entry(role)
            .or_insert_with(|| unsafe {
                let p = pg_sys::GetUserNameFromId(pg_sys::Oid::from(role), true);
                (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
            })
            .clone()
    }
}

/// May the current user see every client's reads (as pg_stat_statements: a superuser, or a member of
/// pg_read_all_stats)? Else only its own role's.
pub fn sees_all() -> bool {
    unsafe { pg_sys::superuser() || pg_sys::has_privs_of_role(pg_sys::GetUserId(), pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS)) }
}

/// Does column `attnum` of `relid` exist (not dropped)?
fn column_exists(relid: u32, attnum: i16) -> bool {
    unsafe {
        let tup = pg_sys::SearchSysCacheAttNum(pg_sys::Oid::from(relid), attnum);
        if tup.is_null() {
            return false;
        }
        pg_sys::ReleaseSysCache(tup);
        true
    }
}

/// The current database's entries this user may see (all when `all`), of existing roles and columns.
fn visible(relid: Option<u32>, all: bool) -> Vec<(ReadEntry, String, String)> {
    let me = unsafe { pg_sys::GetUserId() }.to_u32();
    let mut roles = Roles::default();
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    shmem::entries(Some(db), relid)
        .into_iter()
        .filter(|e| all || e.key.role == me)
        .filter(|e| column_exists(e.key.relid, e.key.attnum))
        .filter_map(|e| {
            let role = roles.name(e.key.role)?;
            let app = app_of(&e.key);
            Some((e, role, app))
        })
        .collect()
}

/// What clients were seen reading of table `relid` in this database: (client, column's attnum, last
/// read), every client whoever asks (a merge policy's critical rule must not depend on who merges; show a
/// user only what `sees_all` allows, or use `visible_reads_of`). Dropped columns and roles are left out.
pub fn reads_of(relid: pg_sys::Oid) -> Vec<(String, i16, TimestampWithTimeZone)> {
    visible(Some(relid.to_u32()), true).into_iter().map(|(e, role, app)| (client_name(&role, &app), e.key.attnum, timestamp(e.last_read))).collect()
}

/// `reads_of` as the current user may see it (all clients, or its own role's only).
pub fn visible_reads_of(relid: pg_sys::Oid) -> Vec<(String, i16, TimestampWithTimeZone)> {
    visible(Some(relid.to_u32()), sees_all()).into_iter().map(|(e, role, app)| (client_name(&role, &app), e.key.attnum, timestamp(e.last_read))).collect()
}

/// When this cluster began recording clients' reads (its first start with pg_worlds preloaded; kept
/// across restarts). None without shared memory.
pub fn since() -> Option<TimestampWithTimeZone> {
    shmem::since().map(timestamp)
}

/// `worlds._client_reads()`: the rows of `worlds.client_reads()` with the table and column as numbers
/// (the SQL wrapper names them, and leaves out dropped tables).
#[pg_extern(volatile, parallel_safe)]
fn _client_reads() -> TableIterator<
    'static,
    (
        name!(client, String),
        name!(role, String),
        name!(application_name, Option<String>),
        name!(relid, pg_sys::Oid),
        name!(attnum, i16),
        name!(last_read, TimestampWithTimeZone),
    ),
> {
    let rows: Vec<_> = visible(None, sees_all())
        .into_iter()
        .map(|(e, role, app)| {
            (client_name(&role, &app), role, (!app.is_empty()).then_some(app), pg_sys::Oid::from(e.key.relid), e.key.attnum, timestamp(e.last_read))
        })
        .collect();
    TableIterator::new(rows)
}

/// `worlds.client_reads_since()`: when this cluster began recording clients' reads.
#[pg_extern(volatile, parallel_safe)]
fn client_reads_since() -> Option<TimestampWithTimeZone> {
    since()
}

/// `worlds._client_reads_count()`: entries kept now, every database's (at most 100,000).
#[pg_extern(volatile, parallel_safe)]
fn _client_reads_count() -> i64 {
    shmem::len() as i64
}

pgrx::extension_sql!(
    r#"
-- Which columns clients were seen reading in this database (governance/readers/clients.rs).
CREATE FUNCTION worlds.client_reads()
RETURNS TABLE(client text, role name, application_name text, "table" regclass, "column" name, last_read timestamptz)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.client, r.role::name, r.application_name, r.relid::regclass, a.attname, r.last_read
    FROM worlds._client_reads() r
    JOIN pg_catalog.pg_attribute a ON a.attrelid = r.relid AND a.attnum = r.attnum AND NOT a.attisdropped
    ORDER BY r.client, r.relid::regclass::text, r.attnum
$$;
"#,
    name = "client_reads",
    requires = [_client_reads]
);
