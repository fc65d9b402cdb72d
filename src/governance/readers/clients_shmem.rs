//! Where clients' reads live (spec, DIFF ... READERS, "Clients seen reading"): one fixed-size hash table
//! in shared memory (Postgres's dynahash) under one LWLock (tranche "pg_worlds client reads"), sized at
//! server start for `MAX_ENTRIES` entries, (database, role, application_name, table, column) → last read.
//! When it is full, the oldest hundredth (by last read) is dropped in one pass, so the newest survive.
//!
//! Durable: `$PGDATA/pg_worlds_client_reads` (a temp file written, fsynced, renamed) is written by a small
//! background worker ("pg_worlds client reads") every `worlds.client_reads_save_interval` seconds when
//! something changed, and by the postmaster at a clean shutdown; it is loaded at every start, a crash
//! restart included (unlike the read sets' file), so a crash loses at most the last interval.
//! A worker rather than the recording backend: no client statement pays for writing and fsyncing the
//! file (up to 9 MB), and what was recorded just before a quiet spell is saved without waiting for the
//! next read. The file also keeps "recording since": the cluster's first start with the library.
use pgrx::pg_sys;
use std::ffi::CStr;

/// The most (database, client, table, column) entries kept (the spec's 100,000).
pub const MAX_ENTRIES: usize = 100_000;
/// The entries dropped when the table is full: the oldest hundredth.
const EVICT: usize = MAX_ENTRIES / 100;
/// application_name's bytes: Postgres cuts it at NAMEDATALEN - 1 (63); the rest is zeros (the key is
/// hashed as bytes), and 66 leaves no padding in the key.
pub const APP_BYTES: usize = 66;

/// An entry's key: every byte meaningful (no padding), so dynahash's HASH_BLOBS hashes it as it is.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ReadKey {
    pub db: u32,
    pub role: u32,
    pub relid: u32,
    pub attnum: i16,
    pub app: [u8; APP_BYTES],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReadEntry {
    pub key: ReadKey,
    /// a TimestampTz (microseconds since 2000-01-01)
    pub last_read: i64,
}

const _: () = assert!(std::mem::size_of::<ReadKey>() == 80);
const _: () = assert!(std::mem::size_of::<ReadEntry>() == 88);

/// What the whole cluster shares besides the entries.
#[repr(C)]
struct State {
    /// when this cluster began recording (its first start with pg_worlds), a TimestampTz
    since: i64,
    /// something was recorded since the last save (set under the exclusive lock, cleared by the saver
    /// under the shared one: the only writer then)
    dirty: bool,
}

struct Shared {
    lock: *mut pg_sys::LWLock,
    table: *mut pg_sys::HTAB,
    state: *mut State,
}

static mut SHARED: Option<Shared> = None;

const TRANCHE: &CStr = c"pg_worlds client reads";
const FILE: &str = "pg_worlds_client_reads";
const MAGIC: u32 = 0x7743_5231;

/// `worlds.client_reads_save_interval`: seconds between the worker's saves (the most a crash loses).
pub static SAVE_INTERVAL: pgrx::guc::GucSetting<i32> = pgrx::guc::GucSetting::<i32>::new(60);

/// From _PG_init, while preloading: the save interval and the worker that saves (the memory is asked for
/// by crate::shared_memory).
pub fn register() {
    pgrx::guc::GucRegistry::define_int_guc(
        c"worlds.client_reads_save_interval",
        c"Seconds between saves of the columns clients were seen reading (a crash loses at most this).",
        c"A background worker writes $PGDATA/pg_worlds_client_reads when something was recorded since its last save; a clean shutdown always saves.",
        &SAVE_INTERVAL,
        1,
        86400,
        pgrx::guc::GucContext::Sighup,
        pgrx::guc::GucFlags::UNIT_S,
    );
    pgrx::bgworkers::BackgroundWorkerBuilder::new("pg_worlds client reads")
        .set_library("pg_worlds")
        .set_function("worlds_client_reads_saver_main")
        .set_restart_time(Some(std::time::Duration::from_secs(5)))
        .load();
}

fn bytes() -> usize {
    unsafe { pg_sys::add_size(pg_sys::hash_estimate_size(MAX_ENTRIES as _, std::mem::size_of::<ReadEntry>()), std::mem::size_of::<State>()) }
}

/// At server start (crate::shared_memory's request hook): the memory and the lock.
pub(crate) unsafe fn request() {
    unsafe {
        pg_sys::RequestAddinShmemSpace(bytes());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

/// crate::shared_memory's startup hook, under AddinShmemInitLock: the table and the state.
pub(crate) unsafe fn attach() {
    unsafe {
        let mut info = pg_sys::HASHCTL { keysize: std::mem::size_of::<ReadKey>(), entrysize: std::mem::size_of::<ReadEntry>(), ..Default::default() };
        let table = pg_sys::ShmemInitHash(
            c"pg_worlds client reads".as_ptr(),
            MAX_ENTRIES as _,
            MAX_ENTRIES as _,
            &mut info,
            (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32,
        );
        let mut found = false;
        let state = pg_sys::ShmemInitStruct(c"pg_worlds client reads: state".as_ptr(), std::mem::size_of::<State>(), &mut found) as *mut State;
        if !found {
            (*state).since = 0;
            (*state).dirty = false;
        }
        SHARED = Some(Shared { lock: &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock, table, state });
    }
}

/// After attaching, in the postmaster (every start, a crash restart's too): what was last saved, and
/// saving at a clean shutdown. The first start saves at once, so "since" outlives a crash before the
/// first save.
pub(crate) unsafe fn load_and_save_at_exit() {
    unsafe {
        if !load() {
            if let Some(s) = shared() {
                (*s.state).since = pg_sys::GetCurrentTimestamp();
            }
            let _ = save(false);
        }
        pg_sys::on_shmem_exit(Some(save_at_exit), pg_sys::Datum::from(0usize));
    }
}

fn shared() -> Option<&'static Shared> {
    unsafe { (*std::ptr::addr_of!(SHARED)).as_ref() }
}

/// Shared memory is there (the library was preloaded).
pub fn available() -> bool {
    shared().is_some()
}

struct Held(*mut pg_sys::LWLock);

impl Drop for Held {
    fn drop(&mut self) {
        unsafe { pg_sys::LWLockRelease(self.0) };
    }
}

/// Runs f under the lock (exclusive or shared); None without shared memory.
fn with<R>(exclusive: bool, f: impl FnOnce(&Shared) -> R) -> Option<R> {
    let s = shared()?;
    unsafe {
        pg_sys::LWLockAcquire(s.lock, if exclusive { pg_sys::LWLockMode::LW_EXCLUSIVE } else { pg_sys::LWLockMode::LW_SHARED });
    }
    let _h = Held(s.lock);
    Some(f(s))
}

unsafe fn each(h: *mut pg_sys::HTAB, mut f: impl FnMut(*mut ReadEntry)) {
    unsafe {
        let mut st = std::mem::zeroed::<pg_sys::HASH_SEQ_STATUS>();
        pg_sys::hash_seq_init(&mut st, h);
        loop {
            let p = pg_sys::hash_seq_search(&mut st);
            if p.is_null() {
                break;
            }
            f(p as *mut ReadEntry);
        }
    }
}

unsafe fn search(h: *mut pg_sys::HTAB, key: &ReadKey, action: pg_sys::HASHACTION::Type) -> Option<(*mut ReadEntry, bool)> {
    unsafe {
        let mut found = false;
        let p = pg_sys::hash_search(h, key as *const ReadKey as *const std::ffi::c_void, action, &mut found);
        (!p.is_null()).then_some((p as *mut ReadEntry, found))
    }
}

unsafe fn count(h: *mut pg_sys::HTAB) -> usize {
    unsafe { pg_sys::hash_get_num_entries(h) as usize }
}

/// Drops the `EVICT` entries read longest ago (one pass to find the cut, one to drop).
unsafe fn evict(h: *mut pg_sys::HTAB) {
    unsafe {
        let mut times: Vec<i64> = Vec::with_capacity(count(h));
        each(h, |e| times.push((*e).last_read));
        if times.is_empty() {
            return;
        }
        let k = EVICT.min(times.len());
        let (_, cut, _) = times.select_nth_unstable(k - 1);
        let cut = *cut;
        // every entry older than the cut, then entries at the cut until k are gone
        let below = times.iter().filter(|&&t| t < cut).count();
        let mut at_cut = k - below;
        each(h, |e| {
            let t = (*e).last_read;
            if t < cut || (t == cut && at_cut > 0) {
                if t == cut {
                    at_cut -= 1;
                }
                let key = (*e).key;
                pg_sys::hash_search(h, &key as *const ReadKey as *const std::ffi::c_void, pg_sys::HASHACTION::HASH_REMOVE, std::ptr::null_mut());
            }
        });
    }
}

/// These clients' reads happened at `at` (one statement's new (client, table, column)s: one lock).
pub fn record(keys: &[ReadKey], at: i64) {
    with(true, |s| unsafe {
        for key in keys {
            if let Some((e, _)) = search(s.table, key, pg_sys::HASHACTION::HASH_FIND) {
                (*e).last_read = (*e).last_read.max(at);
                continue;
            }
            if count(s.table) >= MAX_ENTRIES {
                evict(s.table);
            }
            // (dynahash could take more shared memory than it was sized for: the count above keeps it in)
            if let Some((e, found)) = search(s.table, key, pg_sys::HASHACTION::HASH_ENTER_NULL) {
                (*e).last_read = if found { (*e).last_read.max(at) } else { at };
            }
        }
        (*s.state).dirty = true;
    });
}

/// The entries of database `db` (all when None), copied out under the shared lock.
pub fn entries(db: Option<u32>, relid: Option<u32>) -> Vec<ReadEntry> {
    with(false, |s| {
        let mut out = Vec::new();
        unsafe {
            each(s.table, |e| {
                if db.is_none_or(|d| d == (*e).key.db) && relid.is_none_or(|r| r == (*e).key.relid) {
                    out.push(*e);
                }
            })
        };
        out
    })
    .unwrap_or_default()
}

/// How many entries are kept now.
pub fn len() -> usize {
    with(false, |s| unsafe { count(s.table) }).unwrap_or(0)
}

/// When this cluster began recording (a TimestampTz), None without shared memory.
pub fn since() -> Option<i64> {
    with(false, |s| unsafe { (*s.state).since }).filter(|&t| t != 0)
}

/// Writes the file: every entry, under the shared lock when `lock` (a backend or the worker; the
/// postmaster at its exit holds none: nothing else runs then). Clears `dirty` when it took the lock.
unsafe fn save(lock: bool) -> std::io::Result<()> {
    use std::io::Write;
    let s = shared().ok_or(std::io::ErrorKind::NotFound)?;
    let collect = |s: &Shared| unsafe {
        let mut out: Vec<u8> = Vec::with_capacity(24 + count(s.table) * std::mem::size_of::<ReadEntry>());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&(std::mem::size_of::<ReadEntry>() as u32).to_le_bytes());
        out.extend_from_slice(&(*s.state).since.to_le_bytes());
        out.extend_from_slice(&(count(s.table) as u64).to_le_bytes());
        each(s.table, |e| out.extend_from_slice(std::slice::from_raw_parts(e as *const u8, std::mem::size_of::<ReadEntry>())));
        (*s.state).dirty = false;
        out
    };
    let out = if lock { with(false, collect).unwrap_or_default() } else { collect(s) };
    let tmp = format!("{FILE}.tmp");
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        std::fs::rename(&tmp, FILE)?;
        // (the rename itself, durable: the directory)
        std::fs::File::open(".")?.sync_all()
    })();
    if written.is_err() && lock {
        with(true, |s| unsafe { (*s.state).dirty = true });
    }
    written
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn save_at_exit(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // (not after a crash: shared memory may be torn; the file keeps the last interval's save)
    if code == 0 {
        let _ = unsafe { save(false) };
    }
}

/// Reads the file into the (empty) table. False when there is none or it can't be read.
unsafe fn load() -> bool {
    let Some(s) = shared() else { return false };
    let Ok(data) = std::fs::read(FILE) else { return false };
    let size = std::mem::size_of::<ReadEntry>();
    let word = |at: usize| data.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    if data.len() < 24 || data[..4] != MAGIC.to_le_bytes() || data[4..8] != (size as u32).to_le_bytes() {
        return false;
    }
    let (Some(since), Some(n)) = (word(8), word(16)) else { return false };
    // (a file cut short loads nothing but its "since")
    let body = &data[24..];
    unsafe { (*s.state).since = since as i64 };
    if body.len() != (n as usize).saturating_mul(size) {
        return true;
    }
    let mut entries: Vec<ReadEntry> = body.chunks_exact(size).map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const ReadEntry) }).collect();
    // (the newest, should the file hold more than fits now)
    if entries.len() > MAX_ENTRIES {
        entries.sort_unstable_by_key(|e| std::cmp::Reverse(e.last_read));
        entries.truncate(MAX_ENTRIES);
    }
    for e in entries {
        unsafe {
            if let Some((p, _)) = search(s.table, &e.key, pg_sys::HASHACTION::HASH_ENTER_NULL) {
                *p = e;
            }
        }
    }
    true
}

/// The worker: saves every `worlds.client_reads_save_interval` seconds when something was recorded.
#[pgrx::pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn worlds_client_reads_saver_main(_arg: pg_sys::Datum) {
    use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let mut last = unsafe { pg_sys::GetCurrentTimestamp() };
    while BackgroundWorker::wait_latch(Some(std::time::Duration::from_secs(1))) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        if now - last < SAVE_INTERVAL.get().max(1) as i64 * 1_000_000 {
            continue;
        }
        let dirty = with(false, |s| unsafe { (*s.state).dirty }).unwrap_or(false);
        if dirty {
            if let Err(e) = unsafe { save(true) } {
                pgrx::warning!("pg_worlds could not save the columns clients read to {FILE}: {e}");
            }
        }
        last = now;
    }
}
