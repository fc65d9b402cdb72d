//! Where what worlds read lives: four fixed-size hash tables in shared memory (Postgres's dynahash),
//! under one LWLock, sized at server start:
//!
//! - worlds: a world that checks its reads, registered at its fork (`full`: its reads overflowed, any
//!   change of its parent holds it);
//! - tables: per (world, table), how many keys and scans it holds, and `whole` once it read the table
//!   whole (a scan without conditions, past 10,000 keys or 1,000 scans, or when an entry didn't fit);
//! - keys: (world, table, hash of the key's text) → the columns read;
//! - scans: (world, table, hash of its conditions) → the columns read and the conditions (bytes,
//!   `worlds_core::reads::encode`).
//!
//! Full tables degrade, never lose: a key or scan that finds no room makes its table whole; a table
//! that finds none makes its world full. Saved to `$PGDATA/pg_worlds_readsets` when the postmaster exits
//! cleanly, loaded (and the file removed) when it starts: after a crash the file is gone, the worlds
//! table is empty, and a world that checks reads and isn't in it is held (`check.rs`).
use pgrx::pg_sys;
use std::ffi::CStr;
use worlds_core::reads::{Columns, PRED_BYTES};

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct WorldKey {
    pub world: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct WorldEntry {
    pub key: WorldKey,
    pub full: bool,
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TableKey {
    pub world: i32,
    pub relid: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct TableEntry {
    pub key: TableKey,
    pub nkeys: u32,
    pub nscans: u32,
    pub whole: bool,
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ReadKey {
    pub world: i32,
    pub relid: u32,
    pub hash: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KeyEntry {
    pub key: ReadKey,
    pub cols: Columns,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ScanEntry {
    pub key: ReadKey,
    pub cols: Columns,
    pub len: u16,
    pub pred: [u8; PRED_BYTES],
}

const MAX_WORLDS: i64 = 1024;
const MAX_TABLES: i64 = 16384;

pub static KEYS: pgrx::guc::GucSetting<i32> = pgrx::guc::GucSetting::<i32>::new(65536);
pub static SCANS: pgrx::guc::GucSetting<i32> = pgrx::guc::GucSetting::<i32>::new(8192);

struct Shared {
    lock: *mut pg_sys::LWLock,
    worlds: *mut pg_sys::HTAB,
    tables: *mut pg_sys::HTAB,
    keys: *mut pg_sys::HTAB,
    scans: *mut pg_sys::HTAB,
}

static mut SHARED: Option<Shared> = None;

const TRANCHE: &CStr = c"pg_worlds read sets";
const FILE: &CStr = c"pg_worlds_readsets";
const MAGIC: u32 = 0x7752_5331;

fn sizes() -> [(i64, usize); 4] {
    [
        (MAX_WORLDS, std::mem::size_of::<WorldEntry>()),
        (MAX_TABLES, std::mem::size_of::<TableEntry>()),
        (KEYS.get().max(1024) as i64, std::mem::size_of::<KeyEntry>()),
        (SCANS.get().max(128) as i64, std::mem::size_of::<ScanEntry>()),
    ]
}

/// The bytes the read sets take (the documented cost: about 5 MB for keys, 2 MB for scans by default).
pub fn bytes() -> usize {
    sizes().iter().fold(0usize, |a, (n, e)| unsafe { pg_sys::add_size(a, pg_sys::hash_estimate_size(*n as _, *e)) })
}

/// From _PG_init, while preloading: the settings (the memory is asked for by crate::shared_memory).
pub fn register() {
    pgrx::guc::GucRegistry::define_int_guc(
        c"worlds.read_set_keys",
        c"Keys looked up that worlds checking their reads can keep, across all of them (server start).",
        c"Each takes about 72 bytes of shared memory. Past it, a table whose keys find no room counts as read whole.",
        &KEYS,
        1024,
        16_777_216,
        pgrx::guc::GucContext::Postmaster,
        pgrx::guc::GucFlags::default(),
    );
    pgrx::guc::GucRegistry::define_int_guc(
        c"worlds.read_set_scans",
        c"Filtered scans that worlds checking their reads can keep, across all of them (server start).",
        c"Each takes about 270 bytes of shared memory. Past it, a table whose scans find no room counts as read whole.",
        &SCANS,
        128,
        1_048_576,
        pgrx::guc::GucContext::Postmaster,
        pgrx::guc::GucFlags::default(),
    );
}

/// At server start (crate::shared_memory's request hook): the memory and the lock the read sets need.
pub(crate) unsafe fn request() {
    unsafe {
        pg_sys::RequestAddinShmemSpace(bytes());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

unsafe fn hash_table(name: &CStr, n: i64, key: usize, entry: usize) -> *mut pg_sys::HTAB {
    unsafe {
        let mut info = pg_sys::HASHCTL { keysize: key, entrysize: entry, ..Default::default() };
        pg_sys::ShmemInitHash(name.as_ptr(), n as _, n as _, &mut info, (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32)
    }
}

/// crate::shared_memory's startup hook, under AddinShmemInitLock: the read sets' tables.
pub(crate) unsafe fn attach() {
    unsafe {
        let s = sizes();
        SHARED = Some(Shared {
            lock: &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock,
            worlds: hash_table(c"pg_worlds read sets: worlds", s[0].0, std::mem::size_of::<WorldKey>(), s[0].1),
            tables: hash_table(c"pg_worlds read sets: tables", s[1].0, std::mem::size_of::<TableKey>(), s[1].1),
            keys: hash_table(c"pg_worlds read sets: keys", s[2].0, std::mem::size_of::<ReadKey>(), s[2].1),
            scans: hash_table(c"pg_worlds read sets: scans", s[3].0, std::mem::size_of::<ReadKey>(), s[3].1),
        });
    }
}

/// After attaching, in the postmaster: what a clean shutdown saved, and saving at the next one.
pub(crate) unsafe fn load_and_save_at_exit() {
    unsafe {
        load();
        pg_sys::on_shmem_exit(Some(save_at_exit), pg_sys::Datum::from(0usize));
    }
}

/// Shared memory is there (the library was preloaded).
pub fn available() -> bool {
    unsafe { (*std::ptr::addr_of!(SHARED)).is_some() }
}

struct Held(*mut pg_sys::LWLock);

impl Drop for Held {
    fn drop(&mut self) {
        unsafe { pg_sys::LWLockRelease(self.0) };
    }
}

/// Runs f under the lock (exclusive or shared) with the tables; None without shared memory.
fn with<R>(exclusive: bool, f: impl FnOnce(&Shared) -> R) -> Option<R> {
    let s = unsafe { (*std::ptr::addr_of!(SHARED)).as_ref()? };
    unsafe {
        pg_sys::LWLockAcquire(s.lock, if exclusive { pg_sys::LWLockMode::LW_EXCLUSIVE } else { pg_sys::LWLockMode::LW_SHARED });
    }
    let _h = Held(s.lock);
    Some(f(s))
}

unsafe fn find<K, E>(h: *mut pg_sys::HTAB, key: &K, action: pg_sys::HASHACTION::Type) -> Option<(*mut E, bool)> {
    unsafe {
        let mut found = false;
        let p = pg_sys::hash_search(h, key as *const K as *const std::ffi::c_void, action, &mut found);
        (!p.is_null()).then_some((p as *mut E, found))
    }
}

unsafe fn each<E>(h: *mut pg_sys::HTAB, mut f: impl FnMut(*mut E)) {
    unsafe {
        let mut st = std::mem::zeroed::<pg_sys::HASH_SEQ_STATUS>();
        pg_sys::hash_seq_init(&mut st, h);
        loop {
            let p = pg_sys::hash_seq_search(&mut st);
            if p.is_null() {
                break;
            }
            f(p as *mut E);
        }
    }
}

unsafe fn remove<K>(h: *mut pg_sys::HTAB, key: &K) {
    unsafe {
        pg_sys::hash_search(h, key as *const K as *const std::ffi::c_void, pg_sys::HASHACTION::HASH_REMOVE, std::ptr::null_mut());
    }
}

/// A world begins checking its reads (its fork). False: no room (or no shared memory).
pub fn register_world(world: i32) -> bool {
    with(true, |s| unsafe {
        match find::<_, WorldEntry>(s.worlds, &WorldKey { world }, pg_sys::HASHACTION::HASH_ENTER_NULL) {
            Some((e, found)) => {
                if !found {
                    (*e).full = false;
                }
                true
            }
            None => false,
        }
    })
    .unwrap_or(false)
}

/// Is the world registered (None: it isn't: shared memory was reset since its fork), and is it full?
pub fn world_state(world: i32) -> Option<bool> {
    with(false, |s| unsafe { find::<_, WorldEntry>(s.worlds, &WorldKey { world }, pg_sys::HASHACTION::HASH_FIND).map(|(e, _)| (*e).full) }).flatten()
}

/// What recording one read came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// kept (or already there)
    Kept,
    /// the table counts as read whole now (or already did)
    Whole,
    /// the world isn't registered (a reset since its fork): nothing to keep
    Unknown,
}

/// The table entry of (world, relid), made if missing (with the world made full when there is no room).
unsafe fn table_entry(s: &Shared, world: i32, relid: u32) -> Option<*mut TableEntry> {
    unsafe {
        let w = find::<_, WorldEntry>(s.worlds, &WorldKey { world }, pg_sys::HASHACTION::HASH_FIND)?.0;
        if (*w).full {
            return None;
        }
        match find::<_, TableEntry>(s.tables, &TableKey { world, relid }, pg_sys::HASHACTION::HASH_ENTER_NULL) {
            Some((t, found)) => {
                if !found {
                    (*t).nkeys = 0;
                    (*t).nscans = 0;
                    (*t).whole = false;
                }
                Some(t)
            }
            None => {
                (*w).full = true;
                None
            }
        }
    }
}

/// Drops (world, relid)'s keys and scans: the table counts whole now.
unsafe fn make_whole(s: &Shared, t: *mut TableEntry) {
    unsafe {
        (*t).whole = true;
        let k = (*t).key;
        if (*t).nkeys > 0 {
            each::<KeyEntry>(s.keys, |e| {
                if (*e).key.world == k.world && (*e).key.relid == k.relid {
                    remove(s.keys, &(*e).key);
                }
            });
        }
        if (*t).nscans > 0 {
            each::<ScanEntry>(s.scans, |e| {
                if (*e).key.world == k.world && (*e).key.relid == k.relid {
                    remove(s.scans, &(*e).key);
                }
            });
        }
        (*t).nkeys = 0;
        (*t).nscans = 0;
    }
}

fn world_is_known(s: &Shared, world: i32) -> bool {
    unsafe { find::<_, WorldEntry>(s.worlds, &WorldKey { world }, pg_sys::HASHACTION::HASH_FIND).is_some() }
}

/// The world read the whole table.
pub fn record_whole(world: i32, relid: u32) -> Recorded {
    with(true, |s| unsafe {
        if !world_is_known(s, world) {
            return Recorded::Unknown;
        }
        if let Some(t) = table_entry(s, world, relid) {
            if !(*t).whole {
                make_whole(s, t);
            }
        }
        Recorded::Whole
    })
    .unwrap_or(Recorded::Unknown)
}

/// The world looked up keys of the table (their texts' hashes) using these columns.
pub fn record_keys(world: i32, relid: u32, hashes: &[u64], cols: Columns) -> Recorded {
    with(true, |s| unsafe {
        if !world_is_known(s, world) {
            return Recorded::Unknown;
        }
        let Some(t) = table_entry(s, world, relid) else { return Recorded::Whole };
        if (*t).whole {
            return Recorded::Whole;
        }
        for &hash in hashes {
            let key = ReadKey { world, relid, hash };
            if let Some((e, _)) = find::<_, KeyEntry>(s.keys, &key, pg_sys::HASHACTION::HASH_FIND) {
                (*e).cols = (*e).cols.union(&cols);
                continue;
            }
            if (*t).nkeys >= worlds_core::reads::MAX_KEYS {
                make_whole(s, t);
                return Recorded::Whole;
            }
            match find::<_, KeyEntry>(s.keys, &key, pg_sys::HASHACTION::HASH_ENTER_NULL) {
                Some((e, _)) => {
                    (*e).cols = cols;
                    (*t).nkeys += 1;
                }
                None => {
                    make_whole(s, t);
                    return Recorded::Whole;
                }
            }
        }
        Recorded::Kept
    })
    .unwrap_or(Recorded::Unknown)
}

/// The world scanned the table with these conditions (encoded), using these columns.
pub fn record_scan(world: i32, relid: u32, pred: &[u8], cols: Columns) -> Recorded {
    with(true, |s| unsafe {
        if !world_is_known(s, world) {
            return Recorded::Unknown;
        }
        let Some(t) = table_entry(s, world, relid) else { return Recorded::Whole };
        if (*t).whole {
            return Recorded::Whole;
        }
        let key = ReadKey { world, relid, hash: worlds_core::reads::hash(pred) };
        if let Some((e, _)) = find::<_, ScanEntry>(s.scans, &key, pg_sys::HASHACTION::HASH_FIND) {
            (*e).cols = (*e).cols.union(&cols);
            return Recorded::Kept;
        }
        if (*t).nscans >= worlds_core::reads::MAX_SCANS {
            make_whole(s, t);
            return Recorded::Whole;
        }
        match find::<_, ScanEntry>(s.scans, &key, pg_sys::HASHACTION::HASH_ENTER_NULL) {
            Some((e, _)) => {
                (*e).cols = cols;
                (*e).len = pred.len() as u16;
                (&mut (*e).pred)[..pred.len()].copy_from_slice(pred);
                (*t).nscans += 1;
                Recorded::Kept
            }
            None => {
                make_whole(s, t);
                Recorded::Whole
            }
        }
    })
    .unwrap_or(Recorded::Unknown)
}

/// What a world read of one table.
#[derive(Default)]
pub struct TableReads {
    pub whole: bool,
    pub keys: std::collections::HashMap<u64, Columns>,
    pub scans: Vec<(Columns, Vec<u8>)>,
}

/// What a world read: None when it isn't registered; (full, per table).
pub fn reads_of(world: i32) -> Option<(bool, std::collections::HashMap<u32, TableReads>)> {
    with(false, |s| unsafe {
        let full = find::<_, WorldEntry>(s.worlds, &WorldKey { world }, pg_sys::HASHACTION::HASH_FIND)?.0;
        let full = (*full).full;
        let mut out: std::collections::HashMap<u32, TableReads> = std::collections::HashMap::new();
        each::<TableEntry>(s.tables, |t| {
            if (*t).key.world == world {
                out.entry((*t).key.relid).or_default().whole = (*t).whole;
            }
        });
        if out.values().any(|t| !t.whole) {
            each::<KeyEntry>(s.keys, |e| {
                if (*e).key.world == world {
                    out.entry((*e).key.relid).or_default().keys.insert((*e).key.hash, (*e).cols);
                }
            });
            each::<ScanEntry>(s.scans, |e| {
                if (*e).key.world == world {
                    out.entry((*e).key.relid).or_default().scans.push(((*e).cols, (&(*e).pred)[..(*e).len as usize].to_vec()));
                }
            });
        }
        Some((full, out))
    })
    .flatten()
}

/// Worlds registered now.
pub fn registered() -> Vec<i32> {
    with(false, |s| {
        let mut v = Vec::new();
        unsafe { each::<WorldEntry>(s.worlds, |e| v.push((*e).key.world)) };
        v
    })
    .unwrap_or_default()
}

/// Forgets these worlds (ended: merged or dropped) and everything they read.
pub fn forget(worlds: &[i32]) {
    if worlds.is_empty() {
        return;
    }
    with(true, |s| unsafe {
        each::<WorldEntry>(s.worlds, |e| {
            if worlds.contains(&(*e).key.world) {
                remove(s.worlds, &(*e).key);
            }
        });
        each::<TableEntry>(s.tables, |e| {
            if worlds.contains(&(*e).key.world) {
                remove(s.tables, &(*e).key);
            }
        });
        each::<KeyEntry>(s.keys, |e| {
            if worlds.contains(&(*e).key.world) {
                remove(s.keys, &(*e).key);
            }
        });
        each::<ScanEntry>(s.scans, |e| {
            if worlds.contains(&(*e).key.world) {
                remove(s.scans, &(*e).key);
            }
        });
    });
}

/// How many entries each table holds (worlds, tables, keys, scans): `worlds._read_set_stats()`.
pub fn counts() -> [i64; 4] {
    with(false, |s| unsafe {
        [s.worlds, s.tables, s.keys, s.scans].map(|h| pg_sys::hash_get_num_entries(h) as i64)
    })
    .unwrap_or([0; 4])
}

/// Writes every table's entries (the postmaster exiting cleanly).
unsafe fn save() -> std::io::Result<()> {
    use std::io::Write;
    let s = unsafe { (*std::ptr::addr_of!(SHARED)).as_ref() }.ok_or(std::io::ErrorKind::NotFound)?;
    let mut out: Vec<u8> = Vec::new();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    let mut section = |h: *mut pg_sys::HTAB, size: usize| {
        let mut body: Vec<u8> = Vec::new();
        let mut n: u64 = 0;
        unsafe {
            each::<u8>(h, |e| {
                body.extend_from_slice(std::slice::from_raw_parts(e, size));
                n += 1;
            })
        };
        out.extend_from_slice(&(size as u64).to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&body);
    };
    section(s.worlds, std::mem::size_of::<WorldEntry>());
    section(s.tables, std::mem::size_of::<TableEntry>());
    section(s.keys, std::mem::size_of::<KeyEntry>());
    section(s.scans, std::mem::size_of::<ScanEntry>());
    let path = FILE.to_str().unwrap_or("pg_worlds_readsets");
    let tmp = format!("{path}.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn save_at_exit(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // (not after a crash: then what was read can't be known, and the file stays absent)
    if code == 0 {
        let _ = unsafe { save() };
    }
}

/// Reads what the last clean shutdown saved into the (empty) tables, then removes the file.
unsafe fn load() {
    let path = FILE.to_str().unwrap_or("pg_worlds_readsets");
    let Ok(data) = std::fs::read(path) else { return };
    let _ = std::fs::remove_file(path);
    let Some(s) = (unsafe { (*std::ptr::addr_of!(SHARED)).as_ref() }) else { return };
    if data.len() < 4 || data[..4] != MAGIC.to_le_bytes() {
        return;
    }
    let mut at = 4usize;
    let expect = [
        (s.worlds, std::mem::size_of::<WorldEntry>()),
        (s.tables, std::mem::size_of::<TableEntry>()),
        (s.keys, std::mem::size_of::<KeyEntry>()),
        (s.scans, std::mem::size_of::<ScanEntry>()),
    ];
    // the whole file is read before anything goes in: a file cut short or of another layout loads nothing
    // (its worlds then can't show their reads, as after a crash), never worlds without their reads
    let mut sections: Vec<(*mut pg_sys::HTAB, usize, Vec<&[u8]>)> = Vec::new();
    for (h, size) in expect {
        let word = |at: usize| data.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        let (Some(sz), Some(n)) = (word(at), word(at + 8)) else { return };
        at += 16;
        if sz as usize != size {
            return;
        }
        let mut entries = Vec::new();
        for _ in 0..n {
            let Some(e) = data.get(at..at + size) else { return };
            at += size;
            entries.push(e);
        }
        sections.push((h, size, entries));
    }
    for (h, size, entries) in sections {
        for e in entries {
            // (the key is each entry's first field; a table that is full keeps what fits)
            unsafe {
                let p = pg_sys::hash_search(h, e.as_ptr() as *const std::ffi::c_void, pg_sys::HASHACTION::HASH_ENTER_NULL, std::ptr::null_mut());
                if !p.is_null() {
                    std::ptr::copy_nonoverlapping(e.as_ptr(), p as *mut u8, size);
                } else if h == s.keys || h == s.scans {
                    // (no room for it now: its table counts whole, its world full without one)
                    let key = std::ptr::read_unaligned(e.as_ptr() as *const TableKey);
                    match find::<_, TableEntry>(s.tables, &key, pg_sys::HASHACTION::HASH_FIND) {
                        Some((t, _)) => (*t).whole = true,
                        None => {
                            if let Some((w, _)) = find::<_, WorldEntry>(s.worlds, &WorldKey { world: key.world }, pg_sys::HASHACTION::HASH_FIND) {
                                (*w).full = true;
                            }
                        }
                    }
                } else if h == s.tables {
                    let key = std::ptr::read_unaligned(e.as_ptr() as *const TableKey);
                    if let Some((w, _)) = find::<_, WorldEntry>(s.worlds, &WorldKey { world: key.world }, pg_sys::HASHACTION::HASH_FIND) {
                        (*w).full = true;
                    }
                }
            }
        }
    }
}
