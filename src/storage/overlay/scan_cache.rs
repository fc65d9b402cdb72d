//! The overlay's visibility tests for the world scan (route/scans/world_scan/), on a table with an integer
//! key, and their hand-over to parallel workers.
use super::*;


/// One table's cache held by a scan across rows. Its main part is used while no other statement has
/// started (a statement may validate it again) and no cache was dropped (an aborted subtransaction): saves
/// the per-row lookup of `with_cache` on the hot path of a full scan. Its world part is the one current when
/// the scan started (`freeze`), kept for the scan's life: the world as of the scan's snapshot.
pub struct ScanCache {
    cache: *const TableCache,
    gen: u64,
    epoch: u64,
    world: Option<Rc<WorldPart>>,
}

impl ScanCache {
    pub const fn none() -> Self {
        ScanCache { cache: std::ptr::null(), gen: 0, epoch: 0, world: None }
    }

    /// The table's cache made current for this statement, its world part kept from now on.
    pub fn freeze(tabno: i32) -> Self {
        let (world, cache) = with_cache(tabno, |c| (c.world.clone(), c as *const TableCache));
        ScanCache { cache, gen: exec_gen(), epoch: EPOCH.with(|e| e.get()), world: Some(world) }
    }

    /// The table's cache made current for this statement, its world part read as it stands at each row: for
    /// the rows an UPDATE / DELETE writes, as the overlay view's visibility tests read them. (Its trigger
    /// writes the world part in place; a frozen copy would be copied whole at every write.)
    pub fn live(tabno: i32) -> Self {
        let cache = with_cache(tabno, |c| c as *const TableCache);
        ScanCache { cache, gen: exec_gen(), epoch: EPOCH.with(|e| e.get()), world: None }
    }

    /// The main part, made current for this statement.
    fn retake(&mut self, tabno: i32) {
        self.cache = with_cache(tabno, |c| c as *const TableCache);
        self.gen = exec_gen();
        self.epoch = EPOCH.with(|e| e.get());
    }

    #[inline]
    fn get(&self) -> Option<&TableCache> {
        // SAFETY: the box it points to is neither dropped nor changed while the statement and epoch are
        // the ones it was taken in (validation and in-place writes happen in other statements)
        (!self.cache.is_null() && self.gen == exec_gen() && self.epoch == EPOCH.with(|e| e.get())).then(|| unsafe { &*self.cache })
    }

    /// The world part the scan reads: the frozen one, else the cache's.
    #[inline(always)]
    fn world_of<'a>(&'a self, c: &'a TableCache) -> &'a WorldPart {
        self.world.as_deref().unwrap_or(&c.world)
    }

    /// `base_row_visible` through the held cache; None when it is no longer valid (taking it again runs SPI).
    #[inline(always)]
    pub fn try_base_row_visible(&self, tid: u64, key: i64) -> Option<bool> {
        self.get().map(|c| sees_base(&c.created_tids, self.world_of(c), || tid, || Some(Key::I(key))))
    }

    /// Is this row of main's table part of the world? (`tid` as `pack_tid` packs it)
    #[inline]
    pub fn base_row_visible(&mut self, tabno: i32, tid: u64, key: i64) -> bool {
        if self.get().is_none() {
            self.retake(tabno);
        }
        let c = self.get().expect("just taken");
        sees_base(&c.created_tids, self.world_of(c), || tid, || Some(Key::I(key)))
    }

    /// The world's live version of each integer key, as (key, dseq), in the order they were written (as a
    /// scan of the delta returns them): tombstones left out. For reading them one by one through the
    /// delta's (key, dseq) index where the delta holds many more versions.
    pub fn delta_winners(&self, tabno: i32) -> Vec<(i64, i64)> {
        let mut winners: Vec<(i64, i64)> = with_cache(tabno, |c| {
            self.world_of(c)
                .winner
                .iter()
                .filter_map(|(k, &(dseq, del))| match k {
                    Key::I(i) if !del => Some((*i, dseq)),
                    _ => None,
                })
                .collect()
        });
        winners.sort_unstable_by_key(|w| w.1);
        winners
    }

    /// How many keys the world has a version of.
    pub fn winner_count(&self, tabno: i32) -> usize {
        with_cache(tabno, |c| self.world_of(c).winner.len())
    }

    /// Is this delta row the world's version of its key?
    pub fn delta_row_visible(&self, tabno: i32, dseq: i64) -> bool {
        match &self.world {
            Some(w) => w.delta_pick.contains(&dseq),
            None => with_cache(tabno, |c| c.world.delta_pick.contains(&dseq)),
        }
    }

    /// Where main's before-images with keys in [lo, hi] are in history (tids as `pack_tid` packs them):
    /// candidates, each still to be tested with `history_row_visible`.
    pub fn history_rows_in(&self, tabno: i32, lo: i64, hi: i64) -> Vec<u64> {
        if lo > hi {
            return Vec::new();
        }
        with_cache(tabno, |c| c.hist_keys.range((lo, 0)..=(hi, u64::MAX)).map(|&(_, tid)| tid).collect())
    }

    /// The world part current now, held, when a portal's own SELECT is starting (a cursor reads the world
    /// as of its start); else none held (holding it would make each later write copy it).
    pub fn for_portal(tabno: i32) -> Self {
        if !starting_portal_select() || crate::storage::internal() || override_active() {
            return Self::none();
        }
        Self::freeze(tabno)
    }

    /// The world chain's version of a key: (its number, a tombstone?), None when the chain has none.
    pub fn winner_of(&self, tabno: i32, key: Key) -> Option<(i64, bool)> {
        with_cache(tabno, |c| self.world_of(c).winner.get(&key).copied())
    }

    /// Where main's before-images of a text key are in history (candidates, as `history_rows_in`).
    pub fn history_rows_of(&self, tabno: i32, key: &str) -> Vec<u64> {
        with_cache(tabno, |c| c.hist_text_keys.get(key).cloned().unwrap_or_default())
    }

    /// Is this before-image part of the world (main changed the row since the fork)?
    pub fn history_row_visible(&self, tabno: i32, hseq: i64, key: i64) -> bool {
        with_cache(tabno, |c| sees_history(&c.hist_pick, self.world_of(c), hseq, || Some(Key::I(key))))
    }

    /// Does the world's chain hold a version of any key in lo..=hi? None when the cache can't tell cheaply.
    pub fn chain_has_keys_in(&self, tabno: i32, lo: i64, hi: i64) -> Option<bool> {
        with_cache(tabno, |c| {
            let w = self.world_of(c);
            if w.winner.is_empty() {
                return Some(false);
            }
            w.winner_bits.as_ref().map(|b| b.any_in(lo, hi))
        })
    }

    /// Can the world have rows beyond main's table: (delta rows, before-images)?
    pub fn rows_beyond_main(&self, tabno: i32) -> (bool, bool) {
        with_cache(tabno, |c| (!self.world_of(c).delta_pick.is_empty(), !c.hist_pick.is_empty()))
    }
}

/// What a world scan's parallel workers need of a table's cache, flattened for the query's shared memory:
/// a worker then skips rebuilding it (a query of every row the world changed) and starts at once.
/// Layout: world, version, then each set as a count and its members (the chain's keys with their winning
/// version and tombstone flag; tids main created since the fork; delta versions and before-images shown).
pub fn export_for_workers(tabno: i32, scan: &ScanCache) -> Vec<i64> {
    let frozen = scan.world.as_deref();
    with_cache(tabno, |c| {
        let w = frozen.unwrap_or(&c.world);
        let mut out = Vec::with_capacity(7 + 3 * w.winner.len() + c.created_tids.len() + w.delta_pick.len() + c.hist_pick.len() + 2 * c.hist_keys.len());
        out.push(c.world_num as i64);
        out.push(c.world_version);
        out.push(w.winner.len() as i64);
        for (k, (dseq, del)) in &w.winner {
            let Key::I(k) = k else { return Vec::new() }; // integer keys only (the world scan's tables)
            out.extend([*k, *dseq, *del as i64]);
        }
        out.push(c.created_tids.len() as i64);
        out.extend(c.created_tids.iter().map(|t| *t as i64));
        out.push(w.delta_pick.len() as i64);
        out.extend(w.delta_pick.iter().copied());
        out.push(c.hist_pick.len() as i64);
        out.extend(c.hist_pick.iter().copied());
        out.push(c.hist_keys.len() as i64);
        for &(k, tid) in &c.hist_keys {
            out.extend([k, tid as i64]);
        }
        out
    })
}

/// A parallel worker's cache of a table, from `export_for_workers`: current for the worker's statement.
pub fn import_from_leader(tabno: i32, data: &[i64]) {
    let mut it = data.iter().copied();
    let mut next = || it.next().unwrap_or(0);
    let mut cache = TableCache { world_num: next() as i32, world_version: next(), ..Default::default() };
    let mut part = WorldPart::default();
    for _ in 0..next() {
        let (k, dseq, del) = (next(), next(), next() != 0);
        part.winner.insert(Key::I(k), (dseq, del));
    }
    for _ in 0..next() {
        cache.created_tids.insert(next() as u64);
    }
    for _ in 0..next() {
        part.delta_pick.insert(next());
    }
    for _ in 0..next() {
        cache.hist_pick.insert(next());
    }
    for _ in 0..next() {
        let (k, tid) = (next(), next() as u64);
        cache.hist_keys.insert((k, tid));
        cache.hist_rows.push(tid);
    }
    part.winner_bits = KeyBits::of(&part.winner);
    cache.world = Rc::new(part);
    cache.checked_gen = exec_gen();
    cache.sig = snapshot_signature();
    CACHES.with(|c| c.borrow_mut().insert(tabno, Box::new(cache)));
}
