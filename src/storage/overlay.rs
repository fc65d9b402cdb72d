//! The overlay: what a world sees of a tracked table (its writes: see writes.rs).
//!
//! The overlay view (see catalog/tracking.sql) has three qual-free branches, each filtered by one of the
//! visibility functions below:
//! - base rows of the real table, unless main created them after the world's fork (by ctid) or the
//!   world's chain shadows their key;
//! - delta rows: the winning version of each key in the world's chain (own rows first, then each
//!   ancestor as of the fork below it), tombstones excluded;
//! - history before-images: the first before-image of each physical row main changed since the fork,
//!   unless the world shadows its key.
//!
//! The sets behind these tests live in a backend-local cache per table, validated once per statement:
//! the world part is rebuilt when the world's version moves (O(rows the world changed)); the main part is
//! brought forward incrementally from the last snapshot seen (O(rows main changed since)). The world's
//! own writes update the cache in place (writes.rs), so a statement sees its earlier rows.
use super::snapshot_spi::{self, arg};
use super::{as_internal, relation_layout, Layout};
use crate::api::raise;
use crate::guc;
use pgrx::prelude::*;
use std::rc::Rc;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    I(i64),
    T(String),
}

/// A world: the one shape every statement, the routing and the merge use. Resolved from `worlds.world`
/// by the one resolver (src/world.rs, for a statement naming a world) or from the `worlds.world` setting
/// (overlay/worlds.rs, for the session's world); both build it with `world_by_num`. Shared, since it is
/// asked for many times in every statement (routing, each scan, each write).
#[derive(Clone, Debug)]
pub struct World(std::rc::Rc<WorldData>);

impl World {
    pub fn new(data: WorldData) -> World {
        World(std::rc::Rc::new(data))
    }

    /// The world's version moved on (a write of this session): copied if shared.
    pub fn set_version(&mut self, v: i64) {
        std::rc::Rc::make_mut(&mut self.0).version = v;
    }

    /// A read-only view that is no live world (a moment of the past, what a world stood on at its fork):
    /// `num` is one no world has, so caches keep it apart.
    pub fn moment(num: i32, name: String, version: i64, chain: Vec<i32>, layer_snapshots: Vec<Option<String>>, main_snapshot: String) -> World {
        World::new(WorldData {
            num,
            id: name.clone(),
            name,
            parent: None,
            version,
            fork_snapshot: None,
            merged_part: false,
            chain,
            layer_snapshots,
            main_snapshot,
            read_only: true,
        })
    }

    /// What a world stood on when it forked, main's side included: its parent world as of the fork, or
    /// main as of the fork (a pseudo-world numbered `num`).
    pub fn at_fork(&self, num: i32) -> World {
        worlds::base_of(self).unwrap_or_else(|| {
            World::moment(num, format!("{} (fork point)", self.name), self.version, Vec::new(), Vec::new(), self.main_snapshot.clone())
        })
    }
}

impl std::ops::Deref for World {
    type Target = WorldData;
    fn deref(&self) -> &WorldData {
        &self.0
    }
}

#[derive(Clone, Debug)]
pub struct WorldData {
    pub num: i32,
    /// its ID (`w_...`); a moment's is its name
    pub id: String,
    pub name: String,
    /// its parent's number (0: main); None for a moment
    pub parent: Option<i32>,
    pub version: i64,
    /// the parent's snapshot when it forked (or '@' and a time); None for a moment
    pub fork_snapshot: Option<String>,
    /// merged in part (ONLY TABLES / ONLY KEYS) at least once: its later merges leave out what main
    /// changed of those rows before that merge (merge/gather.rs)
    pub merged_part: bool,
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
        // the product's high bits are its well-mixed ones; hashbrown picks buckets by the low bits. Without
        // the rotation, keys whose low bits agree collide: history and delta numbers end in the backend's
        // number, tids in a line pointer (measured: 6% of a full scan in a world went to probing)
        self.0.rotate_left(26)
    }
}

pub(crate) type FxBuild = std::hash::BuildHasherDefault<Fx>;
pub(crate) type FastSet<T> = HashSet<T, FxBuild>;
pub(crate) type FastMap<K, V> = HashMap<K, V, FxBuild>;

#[derive(Default)]
pub(super) struct TableCache {
    checked_gen: u64,
    /// snapshot_signature() when last validated
    sig: u64,
    pub(super) world_num: i32,
    pub(super) world_version: i64,
    main_snapshot: String,
    /// what the world's chain has, shared with the scans that started before a later write changed it
    /// (copied on write, see `WorldPart`)
    pub(super) world: Rc<WorldPart>,
    /// the snapshot the world's own rows in `world` were read on (a refresh reads those committed since)
    pub(super) world_frontier: String,
    /// the chain `world` was read for: its worlds and the snapshot each is seen through
    chain: Vec<(i32, Option<String>)>,
    // main part
    frontier: String,
    created_tids: FastSet<u64>,
    hist_pick: FastSet<i64>,
    /// where each picked before-image is in history (its tid), in history's order: history has no index
    /// on the key (capture would pay for it on every write of main), so a world reaches them by these
    hist_rows: Vec<u64>,
    /// the same, by key, for a table with an integer key: (key, tid), what the world scan looks up
    hist_keys: std::collections::BTreeSet<(i64, u64)>,
    /// the same for a table with one text-keyed column (its key as text): what a key lookup looks up
    hist_text_keys: HashMap<String, Vec<u64>>,
    /// the storage (relfilenodes) of the history relation and of main's table when the tids above were
    /// read: VACUUM FULL or CLUSTER of history moves its rows, a rewrite of main moves main's and history's
    /// positions with them (storage/rewrite.rs); either way the main part is read again
    hist_file: (u32, u32),

}

/// The world part of a table's cache: the chain's version of each key. A scan holds the one that was current
/// when it started (a cursor, or a plpgsql FOR loop's query, reads on while later statements write the
/// world): a write copies it first when a scan still holds it (`Rc::make_mut`), so the scan keeps seeing the
/// world as of its snapshot, as a cursor over a table does.
#[derive(Default, Clone)]
pub(super) struct WorldPart {
    pub(super) winner: FastMap<Key, (i64, bool)>,
    /// the integer keys of `winner` as a bitmap, when they span a range small enough: a full scan in a world
    /// probes it once per row of main (a bit test instead of a hash lookup)
    winner_bits: Option<KeyBits>,
    pub(super) delta_pick: FastSet<i64>,
    /// a table without a key: main's physical rows the chain deleted (base rows and before-images)
    pub(super) hidden_tids: FastSet<u64>,
}

pub use crate::backend_local::BackendLocal;

/// Bumped by every statement the executor starts (other than pg_worlds' own SPI work).
static EXEC_GEN: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(1));
/// Boxed, so a table's cache keeps its address while others are added (see `ScanCache`).
pub(super) static CACHES: BackendLocal<RefCell<FastMap<i32, Box<TableCache>>>> =
    BackendLocal::new(RefCell::new(HashMap::with_hasher(FxBuild::new())));

pub(super) static WORLD: BackendLocal<RefCell<Option<(u64, u64, World)>>> = BackendLocal::new(RefCell::new(None));
/// the snapshot signature the session's world was last checked with
static WORLD_SIG: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(0));
/// (lxid, statement start) of the last statement that bumped the world's version
pub(super) static BUMPED: BackendLocal<Cell<(u32, i64)>> = BackendLocal::new(Cell::new((0, 0)));
/// its 'write' (or the block's 'commit') event in worlds.event: (seq, the event's world)
pub(super) static WRITE_EVENT: BackendLocal<Cell<(i64, i32)>> = BackendLocal::new(Cell::new((0, 0)));

pub fn next_statement() {
    EXEC_GEN.with(|g| g.set(g.get() + 1));
}

pub(crate) fn exec_gen() -> u64 {
    EXEC_GEN.with(|g| g.get())
}

/// Bumped whenever caches are dropped: a `ScanCache` taken before is no longer valid.
static EPOCH: BackendLocal<Cell<u64>> = BackendLocal::new(Cell::new(0));

/// Forget everything cached (transaction abort: in-place updates from this transaction's writes are gone).
pub fn forget_all() {
    EPOCH.with(|e| e.set(e.get() + 1));
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

/// At a transaction's end (called by storage's one transaction callback, after capture's).
/// (storage's transaction callback runs write_events' work first: storage/mod.rs, on_xact)
pub(super) fn on_xact(event: pg_sys::XactEvent::Type) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT => worlds::confirm_committed_row(true),
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE => worlds::confirm_committed_row(false),
        _ => {}
    }
    // PREPARE TRANSACTION: the transaction's writes, which its statements put into the caches as they went
    // (and the world's version, moved on at PRE_PREPARE), are no longer this session's to see: a prepared
    // transaction is seen only once committed. The caches are read again, as after an abort.
    if event == pg_sys::XactEvent::XACT_EVENT_PREPARE {
        forget_all();
    }
    if event == pg_sys::XactEvent::XACT_EVENT_ABORT || event == pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT {
        forget_all();
        for f in super::callbacks::abort() {
            f();
        }
        // an error may have skipped a guard's reset: nothing of pg_worlds' own work survives the abort
        super::INTERNAL.with(|i| i.set(0));
        OVERRIDE.with(|o| {
            if let Ok(mut o) = o.try_borrow_mut() {
                *o = None;
            }
        });
    }
}

pub(crate) mod delta_since;
mod functions;
mod scan_cache;
pub(crate) mod worlds;
pub use functions::*;
pub use scan_cache::*;
pub use worlds::*;

pub(super) fn parse_tid(s: &str) -> u64 {
    let s = s.trim_matches(|c| c == '(' || c == ')');
    let mut it = s.split(',');
    let block: u64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let off: u64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (block << 16) | off
}

pub(super) unsafe fn tid_of_datum(d: pg_sys::Datum) -> u64 {
    unsafe { pack_tid(&*d.cast_mut_ptr::<pg_sys::ItemPointerData>()) }
}

/// A physical row's tid as one number (block << 16 | offset), as the sets above keep it.
#[inline]
pub fn pack_tid(p: &pg_sys::ItemPointerData) -> u64 {
    let block = (p.ip_blkid.bi_hi as u64) << 16 | p.ip_blkid.bi_lo as u64;
    (block << 16) | p.ip_posid as u64
}

/// Makes sure the cache of one table is current for this statement, and runs f on it.
pub(super) fn with_cache<R>(tabno: i32, f: impl FnOnce(&TableCache) -> R) -> R {
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

/// What the world sees of integer key `k` of a table, for a write's check of a new key (storage/writes.rs),
/// as the overlay view would show it to this statement: Some(seen) when the world's chain has a version of
/// the key (seen unless a tombstone) or main's before-images the world sees include one of it; None when
/// main's table decides: a row of the key the statement's snapshot sees there is the world's unless
/// `created_since_fork` says main made it after the fork.
pub(super) fn int_key_seen(tabno: i32, k: i64) -> Option<bool> {
    with_cache(tabno, |c| match c.world.winner.get(&Key::I(k)) {
        Some((_, del)) => Some(!del),
        None => c.hist_keys.range((k, 0)..=(k, u64::MAX)).next().is_some().then_some(true),
    })
}

/// Did main create the row at `tid` (packed) after the world's fork? (The world doesn't see it.)
pub(super) fn created_since_fork(tabno: i32, tid: u64) -> bool {
    with_cache(tabno, |c| c.created_tids.contains(&tid))
}

/// (full validations, statements that found their cache current): what `worlds._cache_stats()` shows
static STATS: BackendLocal<Cell<(i64, i64)>> = BackendLocal::new(Cell::new((0, 0)));

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
            **t = TableCache { checked_gen: gen, ..Default::default() };
        });
        return;
    };
    let layout = relation_layout(tabno);
    let mut cache = CACHES.with(|c| c.borrow_mut().remove(&tabno)).unwrap_or_default();
    // (the catch-up mostly runs no SQL: the search_path is set only if it does)
    super::as_internal_lazy(|| {
        if cache.world_num != world.num || cache.world_version != world.version || cache.main_snapshot != world.main_snapshot {
            let main_changed = cache.main_snapshot != world.main_snapshot || cache.world_num != world.num;
            if !main_changed && world.version > cache.world_version && cache.chain == chain_of(&world) {
                // only the world's own layer moved (another session of the world wrote): read what it added
                advance_world_part(&layout, &world, &mut cache);
            } else {
                load_world_part(&layout, &world, &mut cache);
            }
            if main_changed {
                reset_main_part(&mut cache, &world.main_snapshot);
            }
            cache.world_num = world.num;
            cache.world_version = world.version;
        }
        let file = (history_file(&layout), relation_file(layout.relid));
        if file != cache.hist_file {
            // history was rewritten (or this is the first read): the tids held point nowhere
            if cache.hist_file != (0, 0) {
                reset_main_part(&mut cache, &world.main_snapshot);
            }
            cache.hist_file = file;
        }
        advance_main_part(&layout, &mut cache);
    });
    cache.checked_gen = gen;
    CACHES.with(|c| c.borrow_mut().insert(tabno, cache));
}

pub(super) fn key_expr(layout: &Layout, alias: &str) -> String {
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

use crate::sql_text::quote_ident;

/// The key of a row as the cache keeps it (column `ord` of a `snapshot_spi` row).
pub(super) fn read_key_of(layout: &Layout, row: &super::snapshot_spi::Row, ord: usize) -> Option<Key> {
    match layout.key_kind {
        b'i' => row.get::<i64>(ord).map(Key::I),
        b't' => row.get::<String>(ord).map(Key::T),
        _ => None,
    }
}

/// The world part: every version of every key in the world's chain, decided in Rust.
fn load_world_part(layout: &Layout, world: &World, cache: &mut TableCache) {
    // a new part: scans holding the old one keep it
    let mut part = WorldPart::default();
    let sql = format!(
        "SELECT d._w_world, d._w_dseq, d._w_del, {}, d._w_base_tid::text, d._w_of FROM {} d JOIN unnest($1::int4[], $2::text[]) AS c(w, snap) ON d._w_world = c.w
         WHERE c.snap IS NULL
            OR CASE WHEN left(c.snap, 1) = '@' THEN d._w_at <= substr(c.snap, 2)::timestamptz
                    ELSE pg_visible_in_snapshot(d._w_xid, c.snap::pg_snapshot) END",
        key_expr(layout, "d"),
        layout.delta_name
    );
    let snaps: Vec<Option<String>> = world.layer_snapshots.clone();
    let kind = layout.key_kind;
    // (no delta before the database's first world: a past moment of main has no rows of its own)
    let rows = if layout.delta == pg_sys::Oid::INVALID { Vec::new() } else { snapshot_spi::query(
        &sql,
        &[pg_sys::INT4ARRAYOID, pg_sys::TEXTARRAYOID],
        &[arg(world.chain.clone()), arg(snaps)],
        |row| {
            let key = match kind {
                b'i' => row.get::<i64>(4).map(Key::I),
                b't' => row.get::<String>(4).map(Key::T),
                _ => None,
            };
            let removes = (row.get::<String>(5), row.get::<i64>(6));
            (row.get::<i32>(1).unwrap_or(0), row.get::<i64>(2).unwrap_or(0), row.get::<bool>(3).unwrap_or(false), key, removes)
        },
    ) };
    // best (layer, dseq) per key: the nearest layer wins, then its latest version
    let mut best: FastMap<Key, (usize, i64, bool)> = FastMap::default();
    let mut cancelled: Vec<i64> = Vec::new();
    cache.world_frontier = snapshot_spi::query("SELECT pg_current_snapshot()::text", &[], &[], |r| r.get::<String>(1))
        .into_iter()
        .next()
        .flatten()
        .unwrap_or_default();
    cache.chain = chain_of(world);
    for (w, dseq, del, key, (base_tid, of)) in rows {
        let layer = world.chain.iter().position(|&c| c == w).unwrap_or(usize::MAX);
        match key {
            Some(k) => {
                let e = best.entry(k).or_insert((layer, dseq, del));
                if layer < e.0 || (layer == e.0 && dseq > e.1) {
                    *e = (layer, dseq, del);
                }
            }
            None => keyless_version(&mut part, &mut cancelled, dseq, del, base_tid.map(|t: String| parse_tid(&t)), of),
        }
    }
    for of in cancelled {
        part.delta_pick.remove(&of);
    }
    for (k, (_, dseq, del)) in best {
        if !del {
            part.delta_pick.insert(dseq);
        }
        part.winner.insert(k, (dseq, del));
    }
    part.winner_bits = KeyBits::of(&part.winner);
    cache.world = Rc::new(part);
}

/// The chain a world part is read for.
fn chain_of(world: &World) -> Vec<(i32, Option<String>)> {
    world.chain.iter().copied().zip(world.layer_snapshots.iter().cloned()).collect()
}

/// Brings the world part forward by the world's own versions committed since its frontier (the snapshot
/// it was read on): O(rows written since), where a rebuild is O(every version the world ever wrote), which
/// made each statement of several sessions writing one world slower as the world grew. Found by writer
/// (the delta's `(_w_world, _w_xid)` index), not by number: the world's writers run at once, and one that
/// commits later may have numbered its versions lower. Writers of one key queue on its lock, so of one
/// key's versions the one committed last has the highest number, and the highest number wins, as in a
/// rebuild; a world's own version beats any of its ancestors' (it was written after the fork that cut
/// them). Versions read twice (this backend's own, already kept in place) change nothing.
/// `pg_current_snapshot()::text` of the active snapshot (what `snapshot_spi::query` reads on), without a
/// query: each transaction id widened to 64 bits against the next one, as Postgres's function does, the
/// in-progress ones sorted and each once. (A query here was a third of a world statement's catch-up.)
pub(crate) fn active_snapshot_text() -> Option<String> {
    unsafe {
        if !crate::fast_ffi::ActiveSnapshotSet() {
            return snapshot_spi::query("SELECT pg_current_snapshot()::text", &[], &[], |r| r.get::<String>(1)).into_iter().next().flatten();
        }
        let snap = crate::fast_ffi::GetActiveSnapshot();
        let next = pg_sys::ReadNextFullTransactionId().value;
        let widen = |xid: pg_sys::TransactionId| -> u64 {
            let diff = xid.into_inner().wrapping_sub(next as u32) as i32 as i64;
            (next as i64 + diff) as u64
        };
        let mut xip: Vec<u64> = (0..(*snap).xcnt as usize).map(|i| widen(*(*snap).xip.add(i))).collect();
        xip.sort_unstable();
        xip.dedup();
        let list: Vec<String> = xip.iter().map(|x| x.to_string()).collect();
        Some(format!("{}:{}:{}", widen((*snap).xmin), widen((*snap).xmax), list.join(",")))
    }
}

fn advance_world_part(layout: &Layout, world: &World, cache: &mut TableCache) {
    if layout.delta == pg_sys::Oid::INVALID {
        return; // (no delta before the database's first world)
    }
    if cache.world_frontier.is_empty() {
        load_world_part(layout, world, cache);
        return;
    }
    // read without a query where it can (delta_since.rs); the frontier moves to the statement's snapshot
    let (now, versions): (Option<String>, Vec<delta_since::DeltaRow>) = match delta_since::delta_since(layout, world.num, &cache.world_frontier) {
        Some(versions) => {
            let now = active_snapshot_text();
            (now, versions)
        }
        None => {
            let sql = format!(
                "SELECT s.snap, d._w_dseq, d._w_del, d.k, d._w_base_tid::text, d._w_of
                 FROM (SELECT pg_current_snapshot()::text AS snap) s
                 LEFT JOIN LATERAL (SELECT d._w_dseq, d._w_del, {} AS k, d._w_base_tid, d._w_of FROM {} d
                                    WHERE d._w_world = $1 AND d._w_xid >= pg_snapshot_xmin($2::pg_snapshot)
                                      AND NOT pg_visible_in_snapshot(d._w_xid, $2::pg_snapshot)) d ON true",
                key_expr(layout, "d"),
                layout.delta_name
            );
            let kind = layout.key_kind;
            let rows = snapshot_spi::query(
                &sql,
                &[pg_sys::INT4OID, pg_sys::TEXTOID],
                &[arg(world.num), arg(cache.world_frontier.clone())],
                |row| {
                    let key = match kind {
                        b'i' => row.get::<i64>(4).map(Key::I),
                        b't' => row.get::<String>(4).map(Key::T),
                        _ => None,
                    };
                    let version = row.get::<i64>(2).map(|dseq| (dseq, row.get::<bool>(3).unwrap_or(false), key, row.get::<String>(5).map(|t| parse_tid(&t)), row.get::<i64>(6)));
                    (row.get::<String>(1), version)
                },
            );
            let now = rows.first().and_then(|r| r.0.clone());
            (now, rows.into_iter().filter_map(|r| r.1).collect())
        }
    };
    if let Some(now) = now {
        cache.world_frontier = now;
    }
    if versions.is_empty() {
        return;
    }
    let part = Rc::make_mut(&mut cache.world);
    let mut cancelled = Vec::new();
    for (dseq, del, key, base_tid, of) in versions {
        match key {
            Some(k) => {
                if part.winner.get(&k).is_some_and(|(d, _)| *d >= dseq) {
                    continue;
                }
                if let Some((old, _)) = part.set_winner(k, (dseq, del)) {
                    part.delta_pick.remove(&old);
                }
                if !del {
                    part.delta_pick.insert(dseq);
                }
            }
            None => keyless_version(part, &mut cancelled, dseq, del, base_tid, of),
        }
    }
    for of in cancelled {
        part.delta_pick.remove(&of);
    }
}

/// A version of a row of a table without a key: every added row of the chain is seen, but those a
/// tombstone removes (a row of main by its tid; a row the chain added by its dseq, collected in
/// `cancelled`, removed once all versions are read).
fn keyless_version(part: &mut WorldPart, cancelled: &mut Vec<i64>, dseq: i64, del: bool, base_tid: Option<u64>, of: Option<i64>) {
    if !del {
        part.delta_pick.insert(dseq);
        return;
    }
    if let Some(tid) = base_tid {
        part.hidden_tids.insert(tid);
    }
    cancelled.extend(of);
}

fn reset_main_part(cache: &mut TableCache, main_snapshot: &str) {
    // a time cut starts from a snapshot that sees nothing: every entry after the time counts
    cache.frontier = if main_snapshot.starts_with('@') { "1:1:".into() } else { main_snapshot.to_string() };
    cache.created_tids.clear();
    cache.hist_pick.clear();
    cache.hist_rows.clear();
    cache.hist_keys.clear();
    cache.hist_text_keys.clear();
    cache.main_snapshot = main_snapshot.to_string();
}

/// A table with one key column of a type whose text is its identity (text, varchar, uuid): its key as the
/// cache keeps it (`col::text`) is what a key lookup (route/scans/key_lookup.rs) looks up.
pub fn text_keyed(layout: &Layout) -> bool {
    layout.key_kind == b't'
        && layout.key_attnos.len() == 1
        && matches!(unsafe { pg_sys::get_atttype(layout.relid, layout.key_attnos[0] as i16) }, pg_sys::TEXTOID | pg_sys::VARCHAROID | pg_sys::UUIDOID)
}

/// The relfilenode of the table's before-images, from the relcache (no catalog read when it is cached).
fn history_file(layout: &Layout) -> u32 {
    relation_file(layout.history)
}

fn relation_file(relid: pg_sys::Oid) -> u32 {
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return 0;
        }
        let file = (*rel).rd_node.relNode.to_u32();
        pg_sys::RelationClose(rel);
        file
    }
}

/// The main part: history entries that became visible since the frontier (and were not visible at the
/// fork), applied in order: the first before-image of each physical row is shown, every row main created
/// since the fork is hidden.
fn advance_main_part(layout: &Layout, cache: &mut TableCache) {
    // no transaction the frontier didn't see as finished wrote this table's history: nothing to read
    if super::history_marks::quiet_since(layout.relid, worlds_core::snapshot::xmin_of(&cache.frontier)) {
        return;
    }
    let cond = format!(
        "h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot) AND {}",
        if cache.main_snapshot.starts_with('@') {
            "h._w_at > substr($2, 2)::timestamptz"
        } else {
            "NOT pg_visible_in_snapshot(h._w_xid, $2::pg_snapshot)"
        }
    );
    let key = if layout.key_kind == b'i' { key_expr(layout, "h") } else { "NULL::int8".to_string() };
    let text_key = text_keyed(layout);
    let tkey = if text_key { key_expr(layout, "h") } else { "NULL::text".to_string() };
    let sql = format!(
        "SELECT pg_current_snapshot()::text,
                array_agg(_w_hseq), array_agg(_w_op::text),
                array_agg(_w_old_tid), array_agg(_w_new_tid), array_agg(r), array_agg(coalesce(k, 0)),
                array_agg(kt)
         FROM (SELECT h._w_hseq, h._w_op, h._w_old_tid, h._w_new_tid, h.ctid AS r, {key} AS k, {tkey} AS kt FROM {} h WHERE {cond}
               UNION ALL
               SELECT h._w_hseq, h._w_op, h._w_old_tid, h._w_new_tid, NULL::tid, NULL::int8, NULL::text FROM {} h WHERE {cond}) h",
        layout.before_images_name, layout.inserts_name,
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
                // (the positions as tids, not text: their output and parsing were a third of the rest)
                row.get::<Vec<Option<pg_sys::ItemPointerData>>>(4).unwrap_or_default(),
                row.get::<Vec<Option<pg_sys::ItemPointerData>>>(5).unwrap_or_default(),
                row.get::<Vec<Option<pg_sys::ItemPointerData>>>(6).unwrap_or_default(),
                row.get::<Vec<i64>>(7).unwrap_or_default(),
                if text_key { row.get::<Vec<Option<String>>>(8).unwrap_or_default() } else { Vec::new() },
            )
        },
    );
    let Some((now, hseqs, ops, olds, news, places, keys, text_keys)) = rows.into_iter().next() else { return };
    let int_key = layout.key_kind == b'i';
    // applied in history's order: the aggregates of one pass take the rows in one order, so the arrays
    // line up, and are sorted here (an ORDER BY in each of the seven was seven sorts: half of an old
    // world's first statement, which reads every change main made since the fork)
    let mut order: Vec<usize> = (0..hseqs.len()).collect();
    order.sort_unstable_by_key(|&i| hseqs[i]);
    for i in order {
        if let Some(old) = &olds[i] {
            let old = pack_tid(old);
            if ops[i] != "I" && !cache.created_tids.contains(&old) && cache.hist_pick.insert(hseqs[i]) {
                let place = places[i].as_ref().map(pack_tid).unwrap_or(0);
                cache.hist_rows.push(place);
                if int_key {
                    cache.hist_keys.insert((keys[i], place));
                }
                if let Some(Some(k)) = text_keys.get(i) {
                    cache.hist_text_keys.entry(k.clone()).or_default().push(place);
                }
            }
        }
        if let Some(new) = &news[i] {
            cache.created_tids.insert(pack_tid(new));
        }
    }
    if let Some(now) = now {
        cache.frontier = now;
    }
}

/// A set of integer keys as one bit per value from the smallest.
#[derive(Clone)]
pub(crate) struct KeyBits {
    min: i64,
    words: Vec<u64>,
}

impl KeyBits {
    /// The bitmap of a map's integer keys, when it takes at most 1 MiB or 8 bytes per key (the map itself
    /// takes more than that per key).
    pub(crate) fn of(winner: &FastMap<Key, (i64, bool)>) -> Option<KeyBits> {
        let mut ints = winner.keys().map(|k| match k {
            Key::I(i) => Some(*i),
            Key::T(_) => None,
        });
        let first = ints.next()??;
        let (mut min, mut max) = (first, first);
        for k in ints {
            let k = k?;
            min = min.min(k);
            max = max.max(k);
        }
        let span = (max as i128 - min as i128 + 1) as u128;
        if span > (8 * 1024 * 1024u128).max(64 * winner.len() as u128) {
            return None;
        }
        // room for keys the world adds next to the range
        let mut bits = KeyBits { min, words: vec![0; (span as usize).div_ceil(64) + 16] };
        for k in winner.keys() {
            if let Key::I(i) = k {
                bits.insert(*i);
            }
        }
        Some(bits)
    }

    #[inline]
    pub(crate) fn contains(&self, k: i64) -> bool {
        let d = k.wrapping_sub(self.min) as u64;
        self.words.get((d >> 6) as usize).is_some_and(|w| w & (1 << (d & 63)) != 0)
    }

    /// Is any key in lo..=hi set?
    pub(crate) fn any_in(&self, lo: i64, hi: i64) -> bool {
        let top = self.min as i128 + self.words.len() as i128 * 64 - 1;
        let (lo, hi) = ((lo as i128).max(self.min as i128), (hi as i128).min(top));
        if lo > hi {
            return false;
        }
        let (a, b) = ((lo - self.min as i128) as u64, (hi - self.min as i128) as u64);
        let (wa, wb) = ((a >> 6) as usize, (b >> 6) as usize);
        (wa..=wb).any(|w| {
            let mut word = self.words[w];
            if w == wa {
                word &= !0u64 << (a & 63);
            }
            if w == wb {
                word &= !0u64 >> (63 - (b & 63));
            }
            word != 0
        })
    }

    /// false when the key is outside the bitmap's range
    pub(crate) fn insert(&mut self, k: i64) -> bool {
        let d = k.wrapping_sub(self.min) as u64;
        match self.words.get_mut((d >> 6) as usize) {
            Some(w) => {
                *w |= 1 << (d & 63);
                true
            }
            None => false,
        }
    }
}

impl WorldPart {
    /// Does the world's chain have a version of this key?
    #[inline]
    fn shadows(&self, key: &Key) -> bool {
        match (&self.winner_bits, key) {
            (Some(bits), Key::I(k)) => bits.contains(*k),
            _ => self.winner.contains_key(key),
        }
    }

    /// Records the world's latest version of a key (a write in this backend); returns the one it replaces.
    pub(super) fn set_winner(&mut self, key: Key, version: (i64, bool)) -> Option<(i64, bool)> {
        if let (Some(bits), Key::I(k)) = (&mut self.winner_bits, &key) {
            if !bits.insert(*k) {
                self.winner_bits = None;
            }
        }
        self.winner.insert(key, version)
    }
}

/// A row of main's table: seen unless main created it since the fork (by tid) or the world's chain shadows
/// it (by key; by tid for a table without a key). The arguments are read only when needed.
#[inline]
fn sees_base(created_tids: &FastSet<u64>, world: &WorldPart, tid: impl FnOnce() -> u64, key: impl FnOnce() -> Option<Key>) -> bool {
    // fast paths: nothing main created since the fork, nothing the world shadows
    if !created_tids.is_empty() || !world.hidden_tids.is_empty() {
        let tid = tid();
        if created_tids.contains(&tid) || world.hidden_tids.contains(&tid) {
            return false;
        }
    }
    world.winner.is_empty() || key().map(|k| !world.shadows(&k)).unwrap_or(true)
}

/// A before-image of a row main changed since the fork: seen when it is the row's first one, unless the
/// world's chain shadows its key.
#[inline]
fn sees_history(hist_pick: &FastSet<i64>, world: &WorldPart, hseq: i64, key: impl FnOnce() -> Option<Key>) -> bool {
    hist_pick.contains(&hseq) && (world.winner.is_empty() || key().map(|k| !world.shadows(&k)).unwrap_or(true))
}
