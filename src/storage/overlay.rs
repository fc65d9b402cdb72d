//! The overlay: what a world sees of a tracked table, and how its writes land in the delta.
//!
//! The overlay view (see catalog/tracking.sql) has three qual-free branches, each filtered by one of the
//! visibility functions below:
//! - base rows of the real table, unless main created them after the world's fork (by ctid) or the
//!   world's chain shadows their key;
//! - delta rows: the winning version of each key in the world's chain (own rows first, then each
//!   ancestor as of the fork below it), tombstones excluded;
//! - history before-images: the first before-image of each physical row main changed since the fork,
//!   unless the world shadows its key.
//! The sets behind these tests live in a backend-local cache per table, validated once per statement:
//! the world part is rebuilt when the world's version moves (O(rows the world changed)); the main part is
//! brought forward incrementally from the last snapshot seen (O(rows main changed since)). The world's
//! own writes update the cache in place, so a statement sees its earlier rows.
use super::snapshot_spi::{self, arg};
use super::{as_internal, relation_layout, Layout};
use crate::api::raise;
use crate::guc;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    I(i64),
    T(String),
}

/// The session's world as resolved from `worlds.world`.
#[derive(Clone, Debug)]
pub struct World {
    pub num: i32,
    pub name: String,
    pub version: i64,
    /// the world and its ancestors up to (not including) main
    pub chain: Vec<i32>,
    /// for each chain layer, the snapshot through which the world sees it (None for its own rows)
    pub layer_snapshots: Vec<Option<String>>,
    /// how the chain sees main: a pg_snapshot (as of the fork), or '@' and a time ('main@when')
    pub main_snapshot: String,
    /// a moment of main ('main@-1 hour'): read only
    pub read_only: bool,
}

/// FxHash: the sets below are probed once per row of every scan in a world; SipHash is needlessly slow there.
#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = std::hash::BuildHasherDefault<Fx>;
type FastSet<T> = HashSet<T, FxBuild>;
type FastMap<K, V> = HashMap<K, V, FxBuild>;

#[derive(Default)]
struct TableCache {
    checked_gen: u64,
    /// snapshot_signature() when last validated
    sig: u64,
    world_num: i32,
    world_version: i64,
    main_snapshot: String,
    // world part
    winner: FastMap<Key, (i64, bool)>,
    delta_pick: FastSet<i64>,
    // main part
    frontier: String,
    created_tids: FastSet<u64>,
    hist_pick: FastSet<i64>,
}

/// Backend-local state without thread-local storage: a Postgres backend is single-threaded, and in a
/// shared library every thread_local access goes through __tls_get_addr, which the per-row functions
/// below can't afford (measured: ~10% of a world's full scan).
pub struct BackendLocal<T>(std::cell::UnsafeCell<T>);

// SAFETY: Postgres runs a backend's queries on one thread; pgrx's guards refuse calls from others.
unsafe impl<T> Sync for BackendLocal<T> {}

impl<T> BackendLocal<T> {
    pub const fn new(value: T) -> Self {
        BackendLocal(std::cell::UnsafeCell::new(value))
    }
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(unsafe { &*self.0.get() })
    }
}

/// Bumped by every statement the executor starts (other than pg_worlds' own SPI work).
static EXEC_GEN: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(1));
static CACHES: BackendLocal<RefCell<FastMap<i32, TableCache>>> =
    BackendLocal::new(RefCell::new(HashMap::with_hasher(FxBuild::new())));

thread_local! {
    static WORLD: RefCell<Option<(u64, u64, World)>> = const { RefCell::new(None) };
    /// the snapshot signature the session's world was last checked with
    static WORLD_SIG: Cell<u64> = const { Cell::new(0) };
    /// (lxid, statement start) of the last statement that bumped the world's version
    static BUMPED: Cell<(u32, i64)> = const { Cell::new((0, 0)) };
    /// (lxid, world) whose write lock this transaction holds
    static LOCKED: Cell<(u32, i32)> = const { Cell::new((0, 0)) };
    /// its 'write' event in worlds.event
    static WRITE_EVENT: Cell<i64> = const { Cell::new(0) };
}

pub fn next_statement() {
    EXEC_GEN.with(|g| g.set(g.get() + 1));
}

fn exec_gen() -> u64 {
    EXEC_GEN.with(|g| g.get())
}

/// Forget everything cached (transaction abort: in-place updates from this transaction's writes are gone).
pub fn forget_all() {
    CACHES.with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            c.clear();
        }
    });
    WORLD.with(|w| {
        if let Ok(mut w) = w.try_borrow_mut() {
            *w = None;
        }
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    if event == pg_sys::XactEvent::XACT_EVENT_ABORT || event == pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT {
        forget_all();
        // an error may have skipped a guard's reset: nothing of pg_worlds' own work survives the abort
        super::INTERNAL.with(|i| i.set(0));
        OVERRIDE.with(|o| {
            if let Ok(mut o) = o.try_borrow_mut() {
                *o = None;
            }
        });
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    _my: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        forget_all();
    }
}

pub fn register_xact_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
    }
}

/// The session's world for routing a query being analyzed: the one resolved last, unless the setting
/// changed since (the statement's execution validates it again).
pub fn routing_world() -> Option<World> {
    if let Some(w) = OVERRIDE.with(|o| o.borrow().clone()) {
        return w;
    }
    if guc::in_main() {
        return None;
    }
    let setting_gen = guc::world_generation();
    let cached = WORLD.with(|w| w.borrow().as_ref().and_then(|(_, s, w)| (*s == setting_gen).then(|| w.clone())));
    cached.or_else(session_world)
}

/// The session's world, or None in main. Resolved once per statement (a dropped world moves the session
/// to its nearest live ancestor, as DROP WORLD promises).
pub fn session_world() -> Option<World> {
    if let Some(w) = OVERRIDE.with(|o| o.borrow().clone()) {
        return w;
    }
    if guc::in_main() {
        return None;
    }
    let gen = exec_gen();
    let setting_gen = guc::world_generation();
    let cached = WORLD.with(|w| w.borrow().as_ref().and_then(|(g, s, w)| (*s == setting_gen).then(|| (*g, w.clone()))));
    if let Some((g, w)) = cached {
        if g == gen {
            return Some(w);
        }
        // a new statement, but no transaction has completed since the last check: nothing can have changed
        let sig = snapshot_signature();
        if sig != 0 && WORLD_SIG.with(|s| s.get()) == sig {
            WORLD.with(|c| *c.borrow_mut() = Some((gen, setting_gen, w.clone())));
            return Some(w);
        }
        // a new statement: the world is still live at the same version? (one indexed lookup, kept plan)
        let current = as_internal(|| {
            snapshot_spi::query(
                "SELECT version FROM worlds.world WHERE num = $1 AND dropped IS NULL",
                &[pg_sys::INT4OID],
                &[arg(w.num)],
                |r| r.get::<i64>(1),
            )
            .into_iter()
            .next()
            .flatten()
        });
        if current == Some(w.version) {
            WORLD.with(|c| *c.borrow_mut() = Some((gen, setting_gen, w.clone())));
            WORLD_SIG.with(|s| s.set(sig));
            return Some(w);
        }
    }
    let sig = snapshot_signature();
    let setting = guc::current_world_setting().to_string_lossy().into_owned();
    let world = as_internal(|| resolve(&setting));
    let setting_gen = guc::world_generation(); // resolve may have moved the session
    WORLD.with(|w| *w.borrow_mut() = world.clone().map(|world| (gen, setting_gen, world)));
    WORLD_SIG.with(|s| s.set(sig));
    world
}

/// Which transactions the active snapshot sees as committed, as a hash of its xmin, xmax and in-progress
/// list: two snapshots with the same signature see the same committed data, so a cache checked with one
/// is current for the other (this transaction's own writes update the cache in place). 0 when there is no
/// active snapshot.
fn snapshot_signature() -> u64 {
    use std::hash::Hasher;
    unsafe {
        if !pg_sys::ActiveSnapshotSet() {
            return 0;
        }
        let snap = pg_sys::GetActiveSnapshot();
        if snap.is_null() {
            return 0;
        }
        let mut h = Fx::default();
        h.write_u64((*snap).xmin.into_inner() as u64);
        h.write_u64((*snap).xmax.into_inner() as u64);
        h.write_u64(u64::from((*snap).xcnt));
        for i in 0..(*snap).xcnt as usize {
            h.write_u64((*(*snap).xip.add(i)).into_inner() as u64);
        }
        h.finish() | 1
    }
}

fn resolve(setting: &str) -> Option<World> {
    Spi::connect(|client| {
        let installed = client
            .select("SELECT 1 FROM pg_namespace WHERE nspname = 'worlds_data'", None, &[])
            .map(|r| !r.is_empty())
            .unwrap_or(false);
        if !installed {
            raise("55000", format!("worlds.world is set to \"{setting}\", but pg_worlds is not installed in this database"));
        }
        if let Some((name, when)) = setting.split_once('@') {
            return Some(past_of(name, when));
        }
        let row = client
            .select(
                "SELECT num, dropped IS NOT NULL FROM worlds.world WHERE name = $1 OR id = $1
                 ORDER BY dropped IS NULL DESC, (name = $1) DESC, num DESC LIMIT 1",
                None,
                &[setting.into()],
            )
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
        let Some(row) = row.into_iter().next() else {
            raise("3D000", format!("world \"{setting}\" does not exist"));
        };
        let mut num: i32 = row.get(1).ok().flatten().unwrap_or(0);
        let dropped: bool = row.get(2).ok().flatten().unwrap_or(false);
        if dropped {
            // carry on from the nearest live ancestor
            let chain = load_chain(num);
            let live = chain.iter().find(|c| !c.4).cloned();
            let (lnum, lname) = live.map(|c| (c.0, c.1)).unwrap_or((0, "main".to_string()));
            set_session_world(&lname);
            num = lnum;
        }
        world_by_num(num)
    })
}

/// 'name@when': a world (main included) as it was then, read only (25006 on writes). The moment is taken
/// anew for each statement, so '-1 hour' keeps meaning an hour ago. A world's own layer is cut at the
/// time; what it stood on (its parent as of the fork) is as it was.
pub fn past_of(name: &str, when: &str) -> World {
    let source = format!("{name}@{when}");
    let (num, at) = Spi::connect(|c| {
        c.select("SELECT (m.w).num, m.at::text FROM worlds._moment_of($1) m", None, &[source.as_str().into()])
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .next()
            .map(|r| (r.get::<i32>(1).ok().flatten().unwrap_or(0), r.get::<String>(2).ok().flatten().unwrap_or_default()))
            .unwrap_or_default()
    });
    let cut = format!("@{at}");
    match world_by_num(num) {
        None => World {
            num: -1,
            name: source,
            version: 0,
            chain: Vec::new(),
            layer_snapshots: Vec::new(),
            main_snapshot: cut,
            read_only: true,
        },
        Some(w) => {
            use std::hash::Hasher;
            let mut h = Fx::default();
            h.write(cut.as_bytes());
            let mut layer_snapshots = w.layer_snapshots.clone();
            layer_snapshots[0] = Some(cut);
            World {
                // its own cache entry: a number no world has, a version that changes with the moment
                num: -1_000_000 - w.num,
                name: source,
                version: h.finish() as i64,
                chain: w.chain,
                layer_snapshots,
                main_snapshot: w.main_snapshot,
                read_only: true,
            }
        }
    }
}

/// One row of a world's chain: (num, name, version, fork snapshot, dropped).
type ChainRow = (i32, String, i64, Option<String>, bool);

/// The chain from a world up to main (the world first).
fn load_chain(num: i32) -> Vec<ChainRow> {
    Spi::connect(|client| {
        client
            .select(
                "WITH RECURSIVE c AS (
                     SELECT num, name, parent, version, coalesce(fork_snapshot::text, '@' || fork_at::text) AS snap, dropped, 0 AS lvl
                     FROM worlds.world WHERE num = $1
                     UNION ALL
                     SELECT w.num, w.name, w.parent, w.version, coalesce(w.fork_snapshot::text, '@' || w.fork_at::text), w.dropped, c.lvl + 1
                     FROM worlds.world w JOIN c ON w.num = c.parent)
                 SELECT num, name, version, snap, dropped IS NOT NULL FROM c ORDER BY lvl",
                None,
                &[num.into()],
            )
            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")))
            .map(|r| {
                (
                    r.get::<i32>(1).ok().flatten().unwrap_or(0),
                    r.get::<String>(2).ok().flatten().unwrap_or_default(),
                    r.get::<i64>(3).ok().flatten().unwrap_or(0),
                    r.get::<String>(4).ok().flatten(),
                    r.get::<bool>(5).ok().flatten().unwrap_or(false),
                )
            })
            .collect()
    })
}

/// A world as the overlay reads it, by number (None for main).
pub fn world_by_num(num: i32) -> Option<World> {
    if num == 0 {
        return None;
    }
    let chain = load_chain(num);
    let layers: Vec<_> = chain.iter().filter(|c| c.0 != 0).cloned().collect();
    let mut layer_snapshots = vec![None];
    for i in 1..layers.len() {
        layer_snapshots.push(layers[i - 1].3.clone());
    }
    Some(World {
        num,
        name: layers[0].1.clone(),
        version: layers[0].2,
        chain: layers.iter().map(|c| c.0).collect(),
        layer_snapshots,
        main_snapshot: layers.last().and_then(|c| c.3.clone()).unwrap_or_default(),
        read_only: false,
    })
}

/// What a world stood on when it forked: its parent as of the fork (None when the parent is main, which
/// the caller reads from history). A pseudo-world with a negative number, so caches keep it apart.
pub fn base_of(world: &World) -> Option<World> {
    if world.chain.len() < 2 {
        return None;
    }
    Some(World {
        num: -world.num,
        name: format!("{} (fork point)", world.name),
        version: world.version,
        chain: world.chain[1..].to_vec(),
        layer_snapshots: world.layer_snapshots[1..].to_vec(),
        main_snapshot: world.main_snapshot.clone(),
        read_only: true,
    })
}

thread_local! {
    /// While set, the overlay reads (and the router routes into) this world instead of the session's:
    /// how merges and diffs read and write other worlds.
    static OVERRIDE: RefCell<Option<Option<World>>> = const { RefCell::new(None) };
}

pub fn override_active() -> bool {
    OVERRIDE.with(|o| o.borrow().is_some())
}

/// Runs f reading and writing as `world` (None: main), routed even inside pg_worlds' own work.
pub fn with_world<R>(world: Option<World>, f: impl FnOnce() -> R) -> R {
    struct Guard(Option<Option<World>>, i32);
    impl Drop for Guard {
        fn drop(&mut self) {
            OVERRIDE.with(|o| *o.borrow_mut() = self.0.take());
            unsafe { pg_sys::AtEOXact_GUC(true, self.1) };
            next_statement();
        }
    }
    let previous = OVERRIDE.with(|o| o.borrow_mut().replace(world));
    next_statement();
    // the visibility functions are parallel safe: a parallel worker reads the session's world, not this
    // one, so queries reading another world on purpose run without workers
    let level = unsafe {
        let level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"max_parallel_workers_per_gather".as_ptr(),
            c"0".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        level
    };
    let _g = Guard(previous, level);
    f()
}

pub fn set_session_world(name: &str) {
    let v = std::ffi::CString::new(name).unwrap();
    unsafe {
        pg_sys::set_config_option(
            c"worlds.world".as_ptr(),
            v.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SET,
            true,
            0,
            false,
        );
    }
}

fn parse_tid(s: &str) -> u64 {
    let s = s.trim_matches(|c| c == '(' || c == ')');
    let mut it = s.split(',');
    let block: u64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let off: u64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (block << 16) | off
}

unsafe fn tid_of_datum(d: pg_sys::Datum) -> u64 {
    unsafe {
        let p = d.cast_mut_ptr::<pg_sys::ItemPointerData>();
        let block = ((*p).ip_blkid.bi_hi as u64) << 16 | (*p).ip_blkid.bi_lo as u64;
        (block << 16) | (*p).ip_posid as u64
    }
}

/// Makes sure the cache of one table is current for this statement, and runs f on it.
fn with_cache<R>(tabno: i32, f: impl FnOnce(&TableCache) -> R) -> R {
    let gen = exec_gen();
    let mut f = Some(f);
    // the hot path: one lookup when the cache is current for this statement
    let done = CACHES.with(|c| match c.borrow().get(&tabno) {
        Some(t) if t.checked_gen == gen => Some((f.take().unwrap())(t)),
        _ => None,
    });
    if let Some(r) = done {
        return r;
    }
    // a new statement that sees the same committed data as the last check, in the same world: current
    let sig = snapshot_signature();
    let world_num = session_world().map(|w| (w.num, w.version));
    let still = CACHES.with(|c| {
        let mut c = c.borrow_mut();
        match c.get_mut(&tabno) {
            Some(t) if sig != 0 && t.sig == sig && world_num.map(|(n, v)| n == t.world_num && v == t.world_version).unwrap_or(false) => {
                t.checked_gen = gen;
                STATS.with(|s| s.set((s.get().0, s.get().1 + 1)));
                true
            }
            _ => false,
        }
    });
    if !still {
        validate(tabno, gen);
        CACHES.with(|c| {
            if let Some(t) = c.borrow_mut().get_mut(&tabno) {
                t.sig = sig;
            }
        });
    }
    CACHES.with(|c| (f.take().unwrap())(c.borrow().get(&tabno).expect("validated")))
}

thread_local! {
    /// (full validations, statements that found their cache current): what `worlds._cache_stats()` shows
    static STATS: Cell<(i64, i64)> = const { Cell::new((0, 0)) };
}

/// This backend's overlay cache activity: validations run, and statements that reused a current cache.
#[pg_extern]
fn _cache_stats() -> pgrx::iter::TableIterator<'static, (pgrx::name!(validations, i64), pgrx::name!(reused, i64))> {
    let (v, r) = STATS.with(|s| s.get());
    pgrx::iter::TableIterator::once((v, r))
}

fn validate(tabno: i32, gen: u64) {
    STATS.with(|s| s.set((s.get().0 + 1, s.get().1)));
    let Some(world) = session_world() else {
        // in main the overlay shows the real table as it is
        CACHES.with(|c| {
            let mut c = c.borrow_mut();
            let t = c.entry(tabno).or_default();
            *t = TableCache { checked_gen: gen, ..Default::default() };
        });
        return;
    };
    let layout = relation_layout(tabno);
    let mut cache = CACHES.with(|c| c.borrow_mut().remove(&tabno)).unwrap_or_default();
    as_internal(|| {
        if cache.world_num != world.num || cache.world_version != world.version || cache.main_snapshot != world.main_snapshot {
            let main_changed = cache.main_snapshot != world.main_snapshot || cache.world_num != world.num;
            load_world_part(&layout, &world, &mut cache);
            if main_changed {
                // a time cut starts from a snapshot that sees nothing: every entry after the time counts
                cache.frontier = if world.main_snapshot.starts_with('@') { "1:1:".into() } else { world.main_snapshot.clone() };
                cache.created_tids.clear();
                cache.hist_pick.clear();
                cache.main_snapshot = world.main_snapshot.clone();
            }
            cache.world_num = world.num;
            cache.world_version = world.version;
        }
        advance_main_part(&layout, &mut cache);
    });
    cache.checked_gen = gen;
    CACHES.with(|c| c.borrow_mut().insert(tabno, cache));
}

fn key_expr(layout: &Layout, alias: &str) -> String {
    match layout.key_kind {
        b'i' => format!("{alias}.{}::int8", quote_ident(&layout.key_columns[0])),
        b't' if layout.key_columns.len() == 1 => format!("{alias}.{}::text", quote_ident(&layout.key_columns[0])),
        b't' => format!(
            "ROW({})::text",
            layout.key_columns.iter().map(|c| format!("{alias}.{}", quote_ident(c))).collect::<Vec<_>>().join(", ")
        ),
        _ => "NULL::text".to_string(),
    }
}

pub fn quote_ident(s: &str) -> String {
    let c = std::ffi::CString::new(s).unwrap();
    unsafe { std::ffi::CStr::from_ptr(pg_sys::quote_identifier(c.as_ptr())).to_string_lossy().into_owned() }
}

fn read_key(layout: &Layout, row: &pgrx::spi::SpiHeapTupleData, ord: usize) -> Option<Key> {
    match layout.key_kind {
        b'i' => row.get::<i64>(ord).ok().flatten().map(Key::I),
        b't' => row.get::<String>(ord).ok().flatten().map(Key::T),
        _ => None,
    }
}

/// The world part: every version of every key in the world's chain, decided in Rust.
fn load_world_part(layout: &Layout, world: &World, cache: &mut TableCache) {
    cache.winner.clear();
    cache.delta_pick.clear();
    let sql = format!(
        "SELECT d._w_world, d._w_dseq, d._w_del, {} FROM {} d JOIN unnest($1::int4[], $2::text[]) AS c(w, snap) ON d._w_world = c.w
         WHERE c.snap IS NULL
            OR CASE WHEN left(c.snap, 1) = '@' THEN d._w_at <= substr(c.snap, 2)::timestamptz
                    ELSE pg_visible_in_snapshot(d._w_xid, c.snap::pg_snapshot) END",
        key_expr(layout, "d"),
        layout.delta_name
    );
    let snaps: Vec<Option<String>> = world.layer_snapshots.clone();
    let kind = layout.key_kind;
    let rows = snapshot_spi::query(
        &sql,
        &[pg_sys::INT4ARRAYOID, pg_sys::TEXTARRAYOID],
        &[arg(world.chain.clone()), arg(snaps)],
        |row| {
            let key = match kind {
                b'i' => row.get::<i64>(4).map(Key::I),
                b't' => row.get::<String>(4).map(Key::T),
                _ => None,
            };
            (row.get::<i32>(1).unwrap_or(0), row.get::<i64>(2).unwrap_or(0), row.get::<bool>(3).unwrap_or(false), key)
        },
    );
    // best (layer, dseq) per key: the nearest layer wins, then its latest version
    let mut best: FastMap<Key, (usize, i64, bool)> = FastMap::default();
    for (w, dseq, del, key) in rows {
        let layer = world.chain.iter().position(|&c| c == w).unwrap_or(usize::MAX);
        match key {
            Some(k) => {
                let e = best.entry(k).or_insert((layer, dseq, del));
                if layer < e.0 || (layer == e.0 && dseq > e.1) {
                    *e = (layer, dseq, del);
                }
            }
            // a table without a key: every added row of the chain is seen
            None if !del => {
                cache.delta_pick.insert(dseq);
            }
            None => {}
        }
    }
    for (k, (_, dseq, del)) in best {
        if !del {
            cache.delta_pick.insert(dseq);
        }
        cache.winner.insert(k, (dseq, del));
    }
}

/// The main part: history entries that became visible since the frontier (and were not visible at the
/// fork), applied in order: the first before-image of each physical row is shown, every row main created
/// since the fork is hidden.
fn advance_main_part(layout: &Layout, cache: &mut TableCache) {
    let sql = format!(
        "SELECT pg_current_snapshot()::text,
                array_agg(_w_hseq ORDER BY _w_hseq), array_agg(_w_op::text ORDER BY _w_hseq),
                array_agg(coalesce(_w_old_tid::text, '') ORDER BY _w_hseq), array_agg(coalesce(_w_new_tid::text, '') ORDER BY _w_hseq)
         FROM {} h
         WHERE h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot)
           AND {}",
        layout.history_name,
        if cache.main_snapshot.starts_with('@') {
            "h._w_at > substr($2, 2)::timestamptz"
        } else {
            "NOT pg_visible_in_snapshot(h._w_xid, $2::pg_snapshot)"
        }
    );
    let rows = snapshot_spi::query(
        &sql,
        &[pg_sys::TEXTOID, pg_sys::TEXTOID],
        &[arg(cache.frontier.clone()), arg(cache.main_snapshot.clone())],
        |row| {
            (
                row.get::<String>(1),
                row.get::<Vec<i64>>(2).unwrap_or_default(),
                row.get::<Vec<String>>(3).unwrap_or_default(),
                row.get::<Vec<String>>(4).unwrap_or_default(),
                row.get::<Vec<String>>(5).unwrap_or_default(),
            )
        },
    );
    let Some((now, hseqs, ops, olds, news)) = rows.into_iter().next() else { return };
    for i in 0..hseqs.len() {
        if !olds[i].is_empty() {
            let old = parse_tid(&olds[i]);
            if ops[i] != "I" && !cache.created_tids.contains(&old) {
                cache.hist_pick.insert(hseqs[i]);
            }
        }
        if !news[i].is_empty() {
            cache.created_tids.insert(parse_tid(&news[i]));
        }
    }
    if let Some(now) = now {
        cache.frontier = now;
    }
}

// ---- visibility functions, called per row from the overlay views (raw V1 functions: the hot path) ----

macro_rules! v1 {
    ($finfo:ident) => {
        #[unsafe(no_mangle)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}

unsafe fn arg_key(fcinfo: pg_sys::FunctionCallInfo, n: usize, int_key: bool) -> Option<Key> {
    unsafe {
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, n) {
            return None;
        }
        let d = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n);
        if int_key {
            // int2, int4 and int8 datums all hold the value sign-extended
            Some(Key::I(d.value() as i64))
        } else {
            String::from_datum(d, false).map(Key::T)
        }
    }
}

unsafe fn base_visible(fcinfo: pg_sys::FunctionCallInfo, int_key: bool) -> pg_sys::Datum {
    unsafe {
        let tabno = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i32;
        let visible = with_cache(tabno, |c| {
            // fast paths: nothing main created since the fork, nothing the world shadows
            if !c.created_tids.is_empty() && c.created_tids.contains(&tid_of_datum(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1))) {
                return false;
            }
            c.winner.is_empty() || arg_key(fcinfo, 2, int_key).map(|k| !c.winner.contains_key(&k)).unwrap_or(true)
        });
        pg_sys::Datum::from(visible)
    }
}

v1!(pg_finfo_worlds_base_visible_i);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_base_visible_i(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { base_visible(fcinfo, true) }
}

v1!(pg_finfo_worlds_base_visible_t);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_base_visible_t(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { base_visible(fcinfo, false) }
}

v1!(pg_finfo_worlds_delta_visible);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_delta_visible(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let tabno = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i32;
        let dseq = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2).value() as i64;
        pg_sys::Datum::from(with_cache(tabno, |c| c.delta_pick.contains(&dseq)))
    }
}

unsafe fn history_visible(fcinfo: pg_sys::FunctionCallInfo, int_key: bool) -> pg_sys::Datum {
    unsafe {
        let tabno = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i32;
        let hseq = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1).value() as i64;
        let visible = with_cache(tabno, |c| {
            c.hist_pick.contains(&hseq)
                && (c.winner.is_empty() || arg_key(fcinfo, 2, int_key).map(|k| !c.winner.contains_key(&k)).unwrap_or(true))
        });
        pg_sys::Datum::from(visible)
    }
}

v1!(pg_finfo_worlds_history_visible_i);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_history_visible_i(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { history_visible(fcinfo, true) }
}

v1!(pg_finfo_worlds_history_visible_t);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_history_visible_t(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { history_visible(fcinfo, false) }
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k int8) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k int4) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k int2) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k text) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_t' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._delta_visible(tabno int4, world int4, dseq int8) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_delta_visible' LANGUAGE c STABLE STRICT PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k int8) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k int4) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k int2) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k text) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_t' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._created_since(rel oid, at timestamptz, row_tid tid) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_created_since' LANGUAGE c STABLE STRICT PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._dropped_value(rel oid, row_tid tid, attnum int2, hint anyelement) RETURNS anyelement
    AS 'MODULE_PATHNAME', 'worlds_dropped_value' LANGUAGE c STABLE PARALLEL RESTRICTED;
"#,
    name = "visibility_functions",
    requires = ["catalog"],
);

/// Per statement: the physical rows main created since a moment, per (table, moment) — AS OF hides them.
static CREATED_SINCE: BackendLocal<RefCell<FastMap<(u32, i64), (u64, FastSet<u64>)>>> =
    BackendLocal::new(RefCell::new(HashMap::with_hasher(FxBuild::new())));

v1!(pg_finfo_worlds_created_since);
/// `worlds._created_since(rel, at, row_tid)`: did main create this physical row after `at`? (AS OF reads
/// the rows it didn't.) The set of such rows is read from history once per statement and kept in a hash
/// set: a hashed probe per row, the cost of reading a table as it was.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_created_since(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let relid = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as u32;
        let at = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1).value() as i64;
        let tid = tid_of_datum(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2));
        let gen = exec_gen();
        let hit = CREATED_SINCE.with(|c| match c.borrow().get(&(relid, at)) {
            Some((g, set)) if *g == gen => Some(set.contains(&tid)),
            _ => None,
        });
        if let Some(h) = hit {
            return pg_sys::Datum::from(h);
        }
        let oid = pg_sys::Oid::from(relid);
        if pg_sys::pg_class_aclcheck(oid, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
            raise("42501", format!("permission denied for table {}", relid));
        }
        let Some(&tabno) = super::tracked_tables().get(&oid) else {
            raise("42809", "AS OF reads tracked tables");
        };
        let layout = relation_layout(tabno);
        let sql = format!("SELECT c._w_new_tid FROM {} c WHERE c._w_at > $1 AND c._w_new_tid IS NOT NULL", layout.history_name);
        let tids = as_internal(|| {
            snapshot_spi::query(&sql, &[pg_sys::TIMESTAMPTZOID], &[Some(pg_sys::Datum::from(at))], |row| {
                row.raw(1).map(|d| tid_of_datum(d))
            })
        });
        let set: FastSet<u64> = tids.into_iter().flatten().collect();
        let found = set.contains(&tid);
        CREATED_SINCE.with(|c| {
            let mut c = c.borrow_mut();
            c.retain(|_, (g, _)| *g == gen);
            c.insert((relid, at), (gen, set));
        });
        pg_sys::Datum::from(found)
    }
}

v1!(pg_finfo_worlds_dropped_value);
/// AS OF a moment before a column was dropped: a row unchanged since still holds the dropped column's
/// value in the heap (DROP COLUMN only marks the attribute dropped; length and alignment stay known), so
/// it is read from the row version at `row_tid`. The caller names the column's type with `hint`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_dropped_value(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let null = |fcinfo: pg_sys::FunctionCallInfo| {
            (*fcinfo).isnull = true;
            pg_sys::Datum::from(0usize)
        };
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, 0) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 1) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 2) {
            return null(fcinfo);
        }
        let relid = pg_sys::Oid::from(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as u32);
        let tid = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1).cast_mut_ptr::<pg_sys::ItemPointerData>();
        let attnum = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2).value() as i16 as i32;
        // the row is read as the caller: only with the right to read the table
        if pg_sys::pg_class_aclcheck(relid, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
            raise("42501", "permission denied to read a dropped column of this table");
        }
        let rel = pg_sys::relation_open(relid, pg_sys::AccessShareLock as i32);
        let desc = (*rel).rd_att;
        if attnum < 1 || attnum > (*desc).natts {
            pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
            return null(fcinfo);
        }
        let att = &*(*desc).attrs.as_ptr().add(attnum as usize - 1);
        let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
        tuple.t_self = *tid;
        let mut buffer: pg_sys::Buffer = 0;
        let found = pg_sys::heap_fetch(rel, pg_sys::GetActiveSnapshot(), &mut tuple, &mut buffer, false);
        let mut result = None;
        if found {
            let mut isnull = false;
            let d = pg_sys::heap_getattr(&mut tuple, attnum, desc, &mut isnull);
            if !isnull {
                result = Some(super::datum_copy(d, att.attbyval, att.attlen as i32));
            }
            pg_sys::ReleaseBuffer(buffer);
        }
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        match result {
            Some(d) => d,
            None => null(fcinfo),
        }
    }
}

// ---- writes in a world: the INSTEAD OF trigger of every overlay view ----

#[pg_trigger]
fn _overlay_write<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, pgrx::AllocatedByPostgres>>, pgrx::PgTriggerError> {
    let td = trigger.trigger_data();
    let tg = unsafe { &*td.tg_trigger };
    let tabno: i32 = unsafe { std::ffi::CStr::from_ptr(*tg.tgargs) }.to_str().unwrap_or("0").parse().unwrap_or(0);
    // the DO NOTHING twin of the view: a row whose key the world already has is skipped
    let on_conflict_nothing = tg.tgnargs > 1;
    let layout = relation_layout(tabno);
    if let Some(why) = &layout.unsupported {
        raise("0A000", why.clone());
    }
    let Some(world) = session_world() else {
        raise("0A000", "the overlay views of pg_worlds are written only from inside a world");
    };
    if world.read_only {
        raise("25006", format!("{} is a moment of the past: it can be read, not written", world.name));
    }
    let event = td.tg_event & pg_sys::TRIGGER_EVENT_OPMASK;
    let view_desc = unsafe { (*td.tg_relation).rd_att };
    let old = td.tg_trigtuple;
    let new = td.tg_newtuple;
    match event {
        pg_sys::TRIGGER_EVENT_INSERT => {
            if on_conflict_nothing {
                if let Some(action) = unsafe { upsert_action(view_desc, old) } {
                    return Ok(upsert(&layout, &world, view_desc, old, &action)
                        .map(|t| unsafe { PgHeapTuple::from_heap_tuple(pgrx::PgTupleDesc::from_pg_unchecked(view_desc), t) }));
                }
            }
            check_not_null(&layout, view_desc, old);
            if on_conflict_nothing && key_exists(&layout, view_desc, old) {
                return Ok(None);
            }
            let dseq = write_version(&layout, &world, view_desc, old, false, KeyCheck::New);
            bump_version(&world);
            Ok(returned(trigger, &layout, &world, view_desc, old, dseq))
        }
        pg_sys::TRIGGER_EVENT_UPDATE => {
            if layout.key_kind == b'r' {
                raise_no_key(&layout);
            }
            check_not_null(&layout, view_desc, new);
            let changed = unsafe { key_differs(&layout, view_desc, old, new) };
            if changed {
                write_version(&layout, &world, view_desc, old, true, KeyCheck::Unchanged);
            }
            let dseq = write_version(&layout, &world, view_desc, new, false, if changed { KeyCheck::New } else { KeyCheck::Unchanged });
            bump_version(&world);
            Ok(returned(trigger, &layout, &world, view_desc, new, dseq))
        }
        pg_sys::TRIGGER_EVENT_DELETE => {
            if layout.key_kind == b'r' {
                raise_no_key(&layout);
            }
            write_version(&layout, &world, view_desc, old, true, KeyCheck::Unchanged);
            bump_version(&world);
            Ok(trigger.old())
        }
        _ => Ok(None),
    }
}

/// The DO UPDATE action a row for the conflict twin carries (None for ON CONFLICT DO NOTHING).
unsafe fn upsert_action(desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> Option<String> {
    unsafe {
        let natts = (*desc).natts;
        let att = &*(*desc).attrs.as_ptr().add(natts as usize - 1);
        if std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_bytes() != crate::route::upsert::ACTION_COLUMN.as_bytes() {
            return None;
        }
        let mut isnull = false;
        let d = pg_sys::heap_getattr(tuple, natts, desc, &mut isnull);
        String::from_datum(d, isnull)
    }
}

/// INSERT ... ON CONFLICT DO UPDATE of one proposed row: the new row when the world has no row with its
/// key, otherwise the updated row (when DO UPDATE's WHERE holds). Returns what RETURNING shows, or None
/// when nothing was written.
fn upsert(layout: &Layout, world: &World, desc: pg_sys::TupleDesc, proposed: pg_sys::HeapTuple, action: &str) -> Option<pg_sys::HeapTuple> {
    // the statement's command id: versions this statement writes come at or after it
    let statement_cid = unsafe { (*pg_sys::GetActiveSnapshot()).curcid };
    let (names, args) = row_args(desc, proposed);
    // the statement's own parameters come first ($n in the action is the statement's $n), the proposed row after
    let (action, param_types, param_values) = crate::route::upsert::decode(action);
    let user = statement_params(&param_types, param_values.as_deref());
    let excluded: Vec<String> =
        names.iter().enumerate().map(|(i, n)| format!("${} AS {}", user.len() + i + 1, quote_ident(n))).collect();
    let matches: Vec<String> = layout
        .key_columns
        .iter()
        .map(|k| format!("{a}.{k} = excluded.{k}", a = crate::route::upsert::TARGET_ALIAS, k = quote_ident(k)))
        .collect();
    let sql = format!("{action}, (SELECT {}) AS excluded WHERE {}", excluded.join(", "), matches.join(" AND "));
    with_cache(layout.tabno, |_| ());
    let types: Vec<pg_sys::Oid> = user.iter().map(|u| u.0).chain(args.iter().map(|a| a.oid())).collect();
    let values: Vec<Option<pg_sys::Datum>> = user.iter().map(|u| u.1).chain(args.iter().map(|a| a.datum().map(|d| d.sans_lifetime()))).collect();
    let upper = unsafe { pg_sys::CurrentMemoryContext };
    let natts = unsafe { (*desc).natts } as usize;
    // As Postgres does under READ COMMITTED: the conflicting row is read as it is now, under the world's
    // write lock, so concurrent upserts of one key queue instead of failing. Under REPEATABLE READ the
    // statement's snapshot is read and a row changed since fails with 40001.
    let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    if read_committed {
        lock_world(world);
    }
    let read = if read_committed { snapshot_spi::query_fresh } else { snapshot_spi::query };
    let check = if read_committed { KeyCheck::Locked } else { KeyCheck::Unchanged };
    // run as the session (routed, with its rights): the action reads the world's row of the real table
    let updated: Vec<Option<pg_sys::HeapTuple>> = read(&sql, &types, &values, &mut |row: &snapshot_spi::Row| unsafe {
        let ncols = row.width();
        if row.get::<bool>(ncols) != Some(true) {
            return None; // DO UPDATE ... WHERE said no
        }
        let mut datums = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![true; natts];
        let mut col = 0;
        for i in 0..natts {
            let att = &*(*desc).attrs.as_ptr().add(i);
            let name = std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy();
            if att.attisdropped || name.starts_with("........pg.dropped.") || (i + 1 == natts && name == crate::route::upsert::ACTION_COLUMN) {
                continue;
            }
            col += 1;
            if let Some(d) = row.raw(col) {
                datums[i] = d;
                nulls[i] = false;
            }
        }
        let old = pg_sys::MemoryContextSwitchTo(upper);
        let t = pg_sys::heap_form_tuple(desc, datums.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::MemoryContextSwitchTo(old);
        Some(t)
    });
    // a key this very statement wrote already (two proposed rows with one key): Postgres's 21000
    if written_by_this_statement(layout, world, &names, &args, statement_cid) {
        crate::api::raise_with(
            "21000",
            "ON CONFLICT DO UPDATE command cannot affect row a second time",
            None,
            Some("Ensure that no rows proposed for insertion within the same command have duplicate constrained values.".into()),
        );
    }
    match updated.into_iter().next() {
        // the world has no row with this key: an ordinary insert
        None => {
            check_not_null(layout, desc, proposed);
            let dseq = write_version(layout, world, desc, proposed, false, KeyCheck::New);
            bump_version(world);
            Some(with_generated(layout, world, desc, proposed, dseq))
        }
        Some(None) => None,
        Some(Some(new)) => {
            check_not_null(layout, desc, new);
            let changed = unsafe { key_differs(layout, desc, proposed, new) };
            if changed {
                write_version(layout, world, desc, proposed, true, check);
            }
            let dseq = write_version(layout, world, desc, new, false, if changed { KeyCheck::New } else { check });
            bump_version(world);
            Some(with_generated(layout, world, desc, new, dseq))
        }
    }
}

/// The statement's parameters an upsert's action uses, back from text with their types' input functions
/// (an unused one: a NULL text).
fn statement_params(types: &[pg_sys::Oid], values: Option<&str>) -> Vec<(pg_sys::Oid, Option<pg_sys::Datum>)> {
    let Some(values) = values else { return Vec::new() };
    let texts: Vec<Option<String>> = Spi::connect(|c| {
        c.select("SELECT v FROM unnest($1::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n", None, &[values.into()])
            .map(|rows| rows.map(|r| r.get::<String>(1).ok().flatten()).collect())
            .unwrap_or_default()
    });
    types
        .iter()
        .enumerate()
        .map(|(i, &ty)| {
            if ty == pg_sys::Oid::INVALID {
                return (pg_sys::TEXTOID, None);
            }
            let datum = texts.get(i).cloned().flatten().map(|t| unsafe {
                let mut input = pg_sys::Oid::INVALID;
                let mut ioparam = pg_sys::Oid::INVALID;
                pg_sys::getTypeInputInfo(ty, &mut input, &mut ioparam);
                let c = std::ffi::CString::new(t).unwrap_or_default();
                pg_sys::OidInputFunctionCall(input, c.as_ptr() as *mut std::ffi::c_char, ioparam, -1)
            });
            (ty, datum)
        })
        .collect()
}

/// Did this very statement write a version of the key in the world (this transaction, at or after the
/// statement's command id)?
fn written_by_this_statement(
    layout: &Layout,
    world: &World,
    names: &[String],
    args: &[pgrx::datum::DatumWithOid],
    statement_cid: pg_sys::CommandId,
) -> bool {
    let conds: Vec<String> = layout
        .key_columns
        .iter()
        .map(|k| format!("d.{} = ${}", quote_ident(k), names.iter().position(|n| n == k).unwrap() + 3))
        .collect();
    let sql = format!(
        "SELECT 1 FROM {} d WHERE d._w_world = $1 AND {} AND d._w_xid = pg_current_xact_id_if_assigned()
           AND d.cmin::text::int8 >= $2 LIMIT 1",
        layout.delta_name,
        conds.join(" AND ")
    );
    let mut all: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into(), (statement_cid as i64).into()];
    all.extend(args.iter().map(|a| unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) }));
    as_internal(|| Spi::connect_mut(|c| c.update(&sql, None, &all).map(|r| !r.is_empty()).unwrap_or(false)))
}

/// What an INSERT or UPDATE through the overlay returns: the new row, with generated columns computed.
fn returned<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
    layout: &Layout,
    world: &World,
    desc: pg_sys::TupleDesc,
    tuple: pg_sys::HeapTuple,
    dseq: i64,
) -> Option<PgHeapTuple<'a, pgrx::AllocatedByPostgres>> {
    if layout.generated.is_empty() {
        return trigger.new();
    }
    let t = with_generated(layout, world, desc, tuple, dseq);
    Some(unsafe { PgHeapTuple::from_heap_tuple(pgrx::PgTupleDesc::from_pg_unchecked(desc), t) })
}

fn raise_no_key(layout: &Layout) -> ! {
    raise(
        "0A000",
        format!(
            "updating or deleting rows of {} inside a world needs a primary key: the table has none (inserts work)",
            layout.table_name
        ),
    )
}

unsafe fn key_differs(layout: &Layout, desc: pg_sys::TupleDesc, a: pg_sys::HeapTuple, b: pg_sys::HeapTuple) -> bool {
    unsafe {
        for &attno in &layout.key_attnos {
            let (mut n1, mut n2) = (false, false);
            let d1 = pg_sys::heap_getattr(a, attno, desc, &mut n1);
            let d2 = pg_sys::heap_getattr(b, attno, desc, &mut n2);
            if n1 != n2 {
                return true;
            }
            let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
            if !n1 && !super::datum_is_equal(d1, d2, att.attbyval, att.attlen as i32) {
                return true;
            }
        }
        false
    }
}

/// NOT NULL of the real table holds inside the world (23502, Postgres's own message).
fn check_not_null(layout: &Layout, view_desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) {
    unsafe {
        let rel = pg_sys::table_open(layout.relid, pg_sys::AccessShareLock as i32);
        let tdesc = (*rel).rd_att;
        for i in 0..(*tdesc).natts as usize {
            let att = &*(*tdesc).attrs.as_ptr().add(i);
            if att.attisdropped || !att.attnotnull {
                continue;
            }
            let mut isnull = false;
            pg_sys::heap_getattr(tuple, (i + 1) as i32, view_desc, &mut isnull);
            if isnull {
                let col = std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned();
                let relname = std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
                pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
                crate::api::raise_with(
                    "23502",
                    format!("null value in column \"{col}\" of relation \"{relname}\" violates not-null constraint"),
                    None,
                    None,
                );
            }
        }
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
    }
}

/// The view's live columns and the tuple's values, as SPI arguments.
fn row_args(desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> (Vec<String>, Vec<pgrx::datum::DatumWithOid<'static>>) {
    let mut names = Vec::new();
    let mut args = Vec::new();
    unsafe {
        for i in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(i);
            let name = std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned();
            if name.starts_with("........pg.dropped.") || (i + 1 == (*desc).natts as usize && name == crate::route::upsert::ACTION_COLUMN) {
                continue;
            }
            let mut isnull = false;
            let d = pg_sys::heap_getattr(tuple, (i + 1) as i32, desc, &mut isnull);
            names.push(name);
            args.push(if isnull {
                pgrx::datum::DatumWithOid::null_oid(att.atttypid)
            } else {
                pgrx::datum::DatumWithOid::new(d, att.atttypid)
            });
        }
    }
    (names, args)
}

/// Does the world already see a row with this row's primary key?
fn key_exists(layout: &Layout, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) -> bool {
    if layout.key_kind == b'r' {
        return false;
    }
    let (names, args) = row_args(desc, tuple);
    key_visible(layout, &names, &args)
}

/// Serializes writers of one key in one world (a transaction-level advisory lock), then returns the
/// world's own latest version of the key as this statement saw it and as committed now.
fn serialize_key(
    layout: &Layout,
    world: &World,
    names: &[String],
    args: &[pgrx::datum::DatumWithOid],
) -> (Option<i64>, Option<(i64, bool)>) {
    let key_args: Vec<pgrx::datum::DatumWithOid> = layout
        .key_columns
        .iter()
        .map(|k| {
            let p = names.iter().position(|n| n == k).unwrap();
            unsafe { pgrx::datum::DatumWithOid::new_from_datum(args[p].datum(), args[p].oid()) }
        })
        .collect();
    let conds = layout
        .key_columns
        .iter()
        .enumerate()
        .map(|(i, k)| format!("d.{} = ${}", quote_ident(k), i + 2))
        .collect::<Vec<_>>()
        .join(" AND ");
    let latest = format!(
        "SELECT d._w_dseq, d._w_del FROM {} d WHERE d._w_world = $1 AND {conds} ORDER BY d._w_dseq DESC LIMIT 1",
        layout.delta_name
    );
    let mut all: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into()];
    all.extend(key_args);
    // the statement's snapshot
    let seen = as_internal(|| snapshot_query(&latest, &all).into_iter().next().flatten());
    lock_world(world);
    as_internal(|| {
        Spi::connect_mut(|c| {
            // read-write: a fresh snapshot, taken after the lock
            let now = c
                .update(&latest, None, &all)
                .ok()
                .and_then(|r| r.into_iter().next().map(|r| (r.get::<i64>(1).ok().flatten().unwrap_or(0), r.get::<bool>(2).ok().flatten().unwrap_or(false))));
            (seen, now)
        })
    })
}

/// The world's write lock, once per transaction (a transaction-level advisory lock): writers of one world
/// serialize on it (a lock per key would fill the lock table on bulk updates).
fn lock_world(world: &World) {
    let xact = (unsafe { pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0) }, world.num);
    if LOCKED.with(|l| l.get()) == xact {
        return;
    }
    as_internal(|| Spi::run_with_args("SELECT pg_advisory_xact_lock(2092147, $1)", &[world.num.into()]))
        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
    LOCKED.with(|l| l.set(xact));
}

fn key_visible(layout: &Layout, names: &[String], args: &[pgrx::datum::DatumWithOid]) -> bool {
    with_cache(layout.tabno, |_| ());
    let conds: Vec<String> = layout
        .key_columns
        .iter()
        .map(|k| {
            let pos = names.iter().position(|n| n == k).unwrap();
            format!("v.{} = ${}", quote_ident(k), pos + 1)
        })
        .collect();
    let sql = format!("SELECT 1 FROM {} v WHERE {} LIMIT 1", layout.overlay_name, conds.join(" AND "));
    as_internal(|| !snapshot_query(&sql, args).is_empty())
}

/// A query over the world's rows with the statement's snapshot (see snapshot_spi), arguments as given.
fn snapshot_query(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> Vec<Option<i64>> {
    let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let values: Vec<Option<pg_sys::Datum>> = args.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
    snapshot_spi::query(sql, &types, &values, |r| r.get::<i64>(1))
}

/// What a write checks about the row's key before it writes a version.
#[derive(Clone, Copy, PartialEq)]
enum KeyCheck {
    /// a new key: not visible in the world, nor written by a session that committed since (23505)
    New,
    /// the row as this statement read it: unchanged by a concurrent session since (40001 otherwise)
    Unchanged,
    /// read under the world's lock on a fresh snapshot (ON CONFLICT DO UPDATE): nothing left to check
    Locked,
}

/// Writes one version of a row into the world's delta (a tombstone when `del`), checking the primary
/// key against what the world sees when `check_key`, and updates this backend's cache in place.
fn write_version(layout: &Layout, world: &World, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple, del: bool, check: KeyCheck) -> i64 {
    let (names, args) = row_args(desc, tuple);
    if layout.key_kind != b'r' {
        let (seen, latest) = serialize_key(layout, world, &names, &args);
        if check == KeyCheck::New {
            // a new key must not be visible in the world already, nor written by a concurrent session
            // that committed since this statement began (23505, as Postgres words it)
            if key_visible(layout, &names, &args) || latest.is_some_and(|(_, del)| !del) {
                let constraint = as_internal(|| primary_key_name(layout));
                raise_duplicate(&constraint, &layout.key_columns, &names, &args);
            }
        } else if check == KeyCheck::Unchanged && seen != latest.map(|(dseq, _)| dseq) {
            // the row this statement read was changed by a concurrent session in the same world since:
            // like REPEATABLE READ, refuse rather than lose that update (retry the transaction)
            raise(
                "40001",
                format!("could not serialize access due to concurrent update of {} in world \"{}\"", layout.table_name, world.name),
            );
        }
    }
    if !del {
        check_unique(layout, &names, &args);
    }
    // generated columns are the delta's to compute
    let (names, args): (Vec<String>, Vec<pgrx::datum::DatumWithOid>) = if layout.generated.is_empty() {
        (names, args)
    } else {
        names.into_iter().zip(args).filter(|(n, _)| !layout.generated.contains(n)).unzip()
    };
    let cols: Vec<String> = names.iter().map(|n| quote_ident(n)).collect();
    // $1 world, $2 deleted, $3 the delta's sequence (a value, so passed as one); the row's columns follow
    let placeholders: Vec<String> = (0..names.len()).map(|i| format!("${}", i + 4)).collect();
    let delta = &layout.delta_name;
    let sql = format!(
        "INSERT INTO {delta} AS d (_w_world, _w_dseq, _w_del{}{}) VALUES ($1, nextval($3::text::regclass), $2{}{}) RETURNING _w_dseq, {}",
        if cols.is_empty() { "" } else { ", " },
        cols.join(", "),
        if placeholders.is_empty() { "" } else { ", " },
        placeholders.join(", "),
        key_expr(layout, "d")
    );
    let mut all_args: Vec<pgrx::datum::DatumWithOid> = vec![world.num.into(), del.into(), layout.sequence_name.as_str().into()];
    all_args.extend(args);
    let insert = std::panic::AssertUnwindSafe(|| {
        as_internal(|| {
            Spi::connect_mut(|c| {
                let rows = c.update(&sql, None, &all_args).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: writing the world's row: {e}")));
                let row = rows.into_iter().next().expect("RETURNING gives a row");
                (row.get::<i64>(1).ok().flatten().unwrap_or(0), read_key(layout, &row, 2))
            })
        })
    });
    // the table's CHECK constraints fire on the delta's copies: report them as Postgres would for the table
    let (delta, table, row) = (layout.delta, layout.relid, std::panic::AssertUnwindSafe(&all_args[3..]));
    let failing = move |e: pgrx::pg_sys::panic::CaughtError| match &e {
        pgrx::pg_sys::panic::CaughtError::PostgresError(r) => unsafe {
            let name = |oid| std::ffi::CStr::from_ptr(pg_sys::get_rel_name(oid)).to_string_lossy().into_owned();
            let message = r.message().replace(&format!("\"{}\"", name(delta)), &format!("\"{}\"", name(table)));
            crate::api::raise_with("23514", message, Some(format!("Failing row contains ({}).", output_values(&row).join(", "))), None)
        },
        _ => e.rethrow(),
    };
    let (dseq, key) = pgrx::PgTryBuilder::new(insert).catch_when(PgSqlErrorCode::ERRCODE_CHECK_VIOLATION, failing).execute();
    // keep this backend's view of the world current without a rebuild
    CACHES.with(|c| {
        if let Some(t) = c.borrow_mut().get_mut(&layout.tabno) {
            match key {
                Some(k) => {
                    if let Some((old, _)) = t.winner.insert(k, (dseq, del)) {
                        t.delta_pick.remove(&old);
                    }
                    if !del {
                        t.delta_pick.insert(dseq);
                    }
                }
                None => {
                    if !del {
                        t.delta_pick.insert(dseq);
                    }
                }
            }
        }
    });
    dseq
}

/// The row as written, with the generated columns the delta computed (what RETURNING shows); the tuple
/// itself when the table has none.
fn with_generated(layout: &Layout, world: &World, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple, dseq: i64) -> pg_sys::HeapTuple {
    if layout.generated.is_empty() {
        return tuple;
    }
    let cols = layout.generated.iter().map(|c| format!("d.{}", quote_ident(c))).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT {cols} FROM {} d WHERE d._w_world = $1 AND d._w_dseq = $2", layout.delta_name);
    let natts = unsafe { (*desc).natts } as usize;
    let upper = unsafe { pg_sys::CurrentMemoryContext };
    let rows = as_internal(|| {
        snapshot_spi::query_fresh(&sql, &[pg_sys::INT4OID, pg_sys::INT8OID], &[arg(world.num), arg(dseq)], |row| unsafe {
            let mut values = vec![pg_sys::Datum::from(0usize); natts];
            let mut nulls = vec![false; natts];
            let mut replace = vec![false; natts];
            for (k, name) in layout.generated.iter().enumerate() {
                let Some(i) = (0..natts).find(|&i| {
                    let att = &*(*desc).attrs.as_ptr().add(i);
                    std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_bytes() == name.as_bytes()
                }) else {
                    continue;
                };
                replace[i] = true;
                match row.raw(k + 1) {
                    Some(d) => values[i] = d,
                    None => nulls[i] = true,
                }
            }
            let old = pg_sys::MemoryContextSwitchTo(upper);
            let t = pg_sys::heap_modify_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr(), replace.as_mut_ptr());
            pg_sys::MemoryContextSwitchTo(old);
            t
        })
    });
    rows.into_iter().next().unwrap_or(tuple)
}

fn primary_key_name(layout: &Layout) -> String {
    Spi::get_one_with_args::<String>(
        "SELECT conname::text FROM pg_constraint WHERE conrelid = $1 AND contype = 'p'",
        &[layout.relid.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| "primary key".into())
}

/// Unique constraints other than the primary key hold inside the world: another row the world sees with
/// the same (non-null) values is a 23505.
fn check_unique(layout: &Layout, names: &[String], args: &[pgrx::datum::DatumWithOid]) {
    if layout.uniques.is_empty() {
        return;
    }
    let pos = |c: &String| names.iter().position(|n| n == c);
    let overlay = &layout.overlay_name;
    for (index, cols) in &layout.uniques {
        let Some(positions) = cols.iter().map(pos).collect::<Option<Vec<usize>>>() else { continue };
        if positions.iter().any(|&p| args[p].datum().is_none()) {
            continue; // NULLs are distinct
        }
        let mut conds: Vec<String> = cols.iter().zip(&positions).map(|(c, p)| format!("v.{} = ${}", quote_ident(c), p + 1)).collect();
        if !layout.key_columns.is_empty() {
            let same_row = layout
                .key_columns
                .iter()
                .filter_map(|k| pos(k).map(|p| format!("v.{} = ${}", quote_ident(k), p + 1)))
                .collect::<Vec<_>>()
                .join(" AND ");
            conds.push(format!("NOT ({same_row})"));
        }
        let sql = format!("SELECT 1 FROM {overlay} v WHERE {} LIMIT 1", conds.join(" AND "));
        let clash = as_internal(|| !snapshot_query(&sql, args).is_empty());
        if clash {
            raise_duplicate(index, cols, names, args);
        }
    }
}

fn raise_duplicate(constraint: &str, cols: &[String], names: &[String], args: &[pgrx::datum::DatumWithOid]) -> ! {
    let detail = duplicate_detail(cols, names, args);
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION,
        format!("duplicate key value violates unique constraint \"{constraint}\""),
        "pg_worlds",
    )
    .set_detail(detail)
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Values as Postgres prints them in an error's DETAIL ("null" for NULL).
fn output_values(args: &[pgrx::datum::DatumWithOid]) -> Vec<String> {
    args.iter()
        .map(|a| match a.datum() {
            None => "null".to_string(),
            Some(d) => unsafe {
                let mut out_fn = pg_sys::Oid::INVALID;
                let mut varlena = false;
                pg_sys::getTypeOutputInfo(a.oid(), &mut out_fn, &mut varlena);
                let s = pg_sys::OidOutputFunctionCall(out_fn, d.sans_lifetime());
                std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned()
            },
        })
        .collect()
}

/// Postgres's wording of a duplicate key's detail: "Key (id)=(7) already exists."
fn duplicate_detail(cols: &[String], names: &[String], args: &[pgrx::datum::DatumWithOid]) -> String {
    let key_args: Vec<pgrx::datum::DatumWithOid> = cols
        .iter()
        .map(|k| {
            let a = &args[names.iter().position(|n| n == k).unwrap()];
            unsafe { pgrx::datum::DatumWithOid::new_from_datum(a.datum(), a.oid()) }
        })
        .collect();
    let vals = output_values(&key_args);
    format!("Key ({})=({}) already exists.", cols.join(", "), vals.join(", "))
}

/// A world's version moves on once per write statement (and its `active` time with it).
fn bump_version(world: &World) {
    let stmt = unsafe { (pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0), pg_sys::GetCurrentStatementStartTimestamp()) };
    if BUMPED.with(|b| b.get()) == stmt {
        // one more row of this statement's write, for SHOW HISTORY
        let event = WRITE_EVENT.with(|e| e.get());
        as_internal(|| Spi::run_with_args("UPDATE worlds.event SET rows = rows + 1 WHERE seq = $1", &[event.into()])).ok();
        return;
    }
    BUMPED.with(|b| b.set(stmt));
    let event = as_internal(|| {
        Spi::get_one_with_args::<i64>(
            "INSERT INTO worlds.event (world, event, rows) VALUES ($1, 'write', 1) RETURNING seq",
            &[world.num.into()],
        )
    })
    .ok()
    .flatten()
    .unwrap_or(0);
    WRITE_EVENT.with(|e| e.set(event));
    let new_version = as_internal(|| {
        Spi::connect_mut(|c| {
            c.update(
                "UPDATE worlds.world SET version = version + 1, active = clock_timestamp() WHERE num = $1 RETURNING version",
                None,
                &[world.num.into()],
            )
            .ok()
            .and_then(|r| r.into_iter().next().and_then(|r| r.get::<i64>(1).ok().flatten()))
        })
    });
    if new_version != Some(world.version + 1) {
        // another session wrote the world since this statement's cache was built: start over
        forget_all();
        return;
    }
    if let Some(v) = new_version {
        // caches of this world were brought up to date in place: they stay valid at the new version
        CACHES.with(|c| {
            for t in c.borrow_mut().values_mut() {
                if t.world_num == world.num && t.world_version == world.version {
                    t.world_version = v;
                }
            }
        });
        WORLD.with(|w| {
            if let Some((_, _, w)) = w.borrow_mut().as_mut() {
                if w.num == world.num {
                    w.version = v;
                }
            }
        });
    }
}
