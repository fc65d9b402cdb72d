//! Running the world scan: main's rows the world sees, then (or merged in key order with them) the world's own.
use crate::route::scans::methods::{int_at, list_items, narrow};
use crate::datum::{array_elements, integer_of};
use crate::storage::{self, overlay};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// Is this plan-state node one the world scan runs under it (a scan of the table it reads)?
pub(crate) fn is_scan_state(tag: pg_sys::NodeTag) -> bool {
    use pg_sys::NodeTag::*;
    matches!(tag, T_SeqScanState | T_IndexScanState | T_BitmapHeapScanState | T_TidScanState | T_TidRangeScanState | T_SampleScanState)
}

// --------------------------------------------------------------------------------------------- execution

#[repr(C)]
pub(crate) struct ScanNode {
    pub(crate) css: pg_sys::CustomScanState,
    pub(crate) run: *mut Run,
}

/// A storage relation whose rows the world adds (the delta, or main's history), read as the table's rows.
pub(crate) struct Side {
    pub(crate) rel: pg_sys::Relation,
    /// its index on the key column, when main's scan is an index scan on the key with the same operators
    pub(crate) key_index: pg_sys::Relation,
    pub(crate) slot: *mut pg_sys::TupleTableSlot,
    /// for each attribute of the table: the side's attribute of the same name (0: none, read as NULL)
    pub(crate) map: Vec<i32>,
    pub(crate) seq_attno: i32,
    pub(crate) key_attno: i32,
    pub(crate) is_delta: bool,
}

pub(crate) struct Run {
    pub(crate) tabno: i32,
    pub(crate) key_attno: i32,
    /// 1 / -1: main's scan is in ascending / descending key order, and so is the output; 0: no order
    pub(crate) order: i32,
    pub(crate) child: *mut pg_sys::PlanState,
    /// the key column in the tuple descriptor of main's scan slot (its cached offset)
    pub(crate) key_att: *const pg_sys::FormData_pg_attribute,
    pub(crate) qual: *mut pg_sys::ExprState,
    pub(crate) extra_slot: *mut pg_sys::TupleTableSlot,
    /// holds the world's rows of the current scan
    pub(crate) cxt: pg_sys::MemoryContext,
    /// the delta and history relations, opened when first read
    pub(crate) sides: [Option<Side>; 2],
    /// the world's rows that pass the quals, with their keys (sorted when ordered)
    pub(crate) extras: Vec<(i64, pg_sys::MinimalTuple)>,
    pub(crate) next_extra: usize,
    pub(crate) gathered: bool,
    pub(crate) base_done: bool,
    /// a row of main's the world sees (key, main's output slot), waiting for its turn in the merge
    pub(crate) pending: Option<(i64, *mut pg_sys::TupleTableSlot)>,
    pub(crate) cache: overlay::ScanCache,
    /// a parallel scan: whether a participant has taken the world's rows (they are added once)
    pub(crate) shared: *const AtomicU32,
    /// the leader's cache of the table, between sizing the shared memory and filling it
    pub(crate) export: Vec<i64>,
    /// how main's rows leave the node (see `Output`)
    pub(crate) output: Output,
    /// a row of main's taken by the unguarded path whose test needs the cache made current first
    pub(crate) unchecked: Option<(i64, u64, *mut pg_sys::TupleTableSlot)>,
    /// main's scan is a sequential scan of a heap: its rows are prefetched (see `prefetch_ahead`)
    pub(crate) heap_seq: bool,
    /// the keys the statement's own conditions name (`key = x`, `key = ANY(x)`, x known before it runs),
    /// computed at the first gather: None = not yet, Some(None) = no such condition
    pub(crate) condition_keys: Option<Option<Vec<i64>>>,
}

/// How the node returns main's rows.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Output {
    /// as main's scan projected them (its output slot)
    Projected,
    /// main's scan slot itself: the node's target list is the table's row as stored
    Stored,
    /// an empty row: the node's target list is empty (`count(*)`)
    Empty,
}

/// How the node can return main's rows given its target list (see `Output`).
pub(crate) unsafe fn output_for(tlist: *mut pg_sys::List, scanrelid: pg_sys::Index, desc: pg_sys::TupleDesc) -> Output {
    unsafe {
        let entries = list_items::<pg_sys::TargetEntry>(tlist);
        if entries.is_empty() {
            return Output::Empty;
        }
        // every column of the table, in order, as plain references (what Postgres calls a physical tlist)
        let natts = (*desc).natts as usize;
        let stored = entries.len() == natts
            && entries.iter().enumerate().all(|(i, &te)| {
                let e = (*te).expr as *mut pg_sys::Node;
                let att = &*(*desc).attrs.as_ptr().add(i);
                // (a column added with a default since the rows were stored reads its value through the
                // table's descriptor only: a parent copying the row would read NULL)
                !att.attisdropped
                    && !att.atthasmissing
                    && !e.is_null()
                    && (*e).type_ == pg_sys::NodeTag::T_Var
                    && {
                        let v = e as *mut pg_sys::Var;
                        (*v).varno as pg_sys::Index == scanrelid && (*v).varattno as usize == i + 1 && (*v).varlevelsup == 0 && (*v).vartype == att.atttypid
                    }
            });
        if stored { Output::Stored } else { Output::Projected }
    }
}

pub(crate) unsafe fn run_of<'a>(node: *mut pg_sys::CustomScanState) -> &'a mut Run {
    unsafe { &mut *(*(node as *mut ScanNode)).run }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn drop_run(arg: *mut std::ffi::c_void) {
    unsafe { drop(Box::from_raw(arg as *mut Run)) }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn begin(node: *mut pg_sys::CustomScanState, estate: *mut pg_sys::EState, eflags: std::ffi::c_int) {
    unsafe {
        let cscan = (*node).ss.ps.plan as *mut pg_sys::CustomScan;
        let tabno = int_at((*cscan).custom_private, 0);
        let order = int_at((*cscan).custom_private, 1);
        let child = pg_sys::ExecInitNode(crate::fast_ffi::list_nth((*cscan).custom_plans, 0) as *mut pg_sys::Plan, estate, eflags);
        if !is_scan_state((*child).type_) {
            // a plan shape the planner hook didn't foresee: an error, never a read of another node as a scan
            pgrx::error!("pg_worlds: world scan over an unexpected plan node {:?}", (*child).type_);
        }
        // Main's plan reads a table's tuples as stored when its parent needs no particular columns; a custom
        // scan's child never gets that physical target list, so it would project every row (a full scan's
        // largest cost in a world). When the node's output is the stored row or no columns, the child's
        // projection is dropped and its scan slot used as is.
        let output = output_for((*cscan).scan.plan.targetlist, (*cscan).scan.scanrelid, (*(*node).ss.ss_currentRelation).rd_att);
        if output != Output::Projected {
            (*child).ps_ProjInfo = std::ptr::null_mut();
        }
        (*node).custom_ps = pg_sys::lappend(std::ptr::null_mut(), child as *mut std::ffi::c_void);
        let ps = &mut (*node).ss.ps as *mut pg_sys::PlanState;
        // main's rows are returned as main's scan projected them (both project the relation's target list);
        // the world's are projected here: the result's slot type varies. The projection reads the world's
        // rows from a minimal-tuple slot, not the virtual scan slot it was first built for: built again
        (*ps).resultopsfixed = false;
        (*ps).scanopsfixed = false;
        let desc = (*(*node).ss.ss_currentRelation).rd_att;
        (*ps).ps_ProjInfo =
            pg_sys::ExecBuildProjectionInfo((*cscan).scan.plan.targetlist, (*ps).ps_ExprContext, (*ps).ps_ResultTupleSlot, ps, desc);
        let qual = pg_sys::ExecInitQual((*cscan).custom_exprs, ps);
        let extra_slot = pg_sys::ExecAllocTableSlot(&mut (*estate).es_tupleTable, desc, &pg_sys::TTSOpsMinimalTuple);
        let cxt = pg_sys::AllocSetContextCreateInternal((*estate).es_query_cxt, c"world scan".as_ptr(), 0, 8 * 1024, 8 * 1024 * 1024);
        let key_attno = int_at((*cscan).custom_private, 2);
        let child_desc = (*(*(child as *mut pg_sys::ScanState)).ss_ScanTupleSlot).tts_tupleDescriptor;
        let run = Box::into_raw(Box::new(Run {
            tabno,
            key_attno,
            order,
            child,
            key_att: (*child_desc).attrs.as_ptr().add(key_attno as usize - 1),
            qual,
            extra_slot,
            cxt,
            sides: [None, None],
            extras: Vec::new(),
            next_extra: 0,
            gathered: false,
            base_done: false,
            pending: None,
            // the world as of the scan's start, kept while later statements write it (a cursor's rows);
            // a parallel worker takes the leader's (initialize_worker)
            cache: if pg_sys::ParallelWorkerNumber >= 0 {
                overlay::ScanCache::none()
            } else if int_at((*cscan).custom_private, 3) != 0 {
                overlay::ScanCache::live(tabno)
            } else {
                overlay::ScanCache::freeze(tabno)
            },
            shared: std::ptr::null(),
            export: Vec::new(),
            output,
            unchecked: None,
            condition_keys: None,
            heap_seq: (*child).type_ == pg_sys::NodeTag::T_SeqScanState
                && (*(*(*node).ss.ss_currentRelation).rd_rel).relam == pg_sys::HEAP_TABLE_AM_OID,
        }));
        (*(node as *mut ScanNode)).run = run;
        // the Rust state goes with the query's memory, also when the query fails
        let cb = pg_sys::MemoryContextAlloc((*estate).es_query_cxt, std::mem::size_of::<pg_sys::MemoryContextCallback>())
            as *mut pg_sys::MemoryContextCallback;
        (*cb).func = Some(drop_run);
        (*cb).arg = run as *mut std::ffi::c_void;
        (*cb).next = std::ptr::null_mut();
        pg_sys::MemoryContextRegisterResetCallback((*estate).es_query_cxt, cb);
    }
}

#[inline]
pub(crate) unsafe fn tup_is_null(slot: *mut pg_sys::TupleTableSlot) -> bool {
    unsafe { slot.is_null() || ((*slot).tts_flags & pg_sys::TTS_FLAG_EMPTY as u16) != 0 }
}

#[inline]
pub(crate) unsafe fn attr_i64(slot: *mut pg_sys::TupleTableSlot, attno: i32) -> Option<i64> {
    unsafe {
        let mut isnull = false;
        let d = crate::fast_ffi::slot_getattr(slot, attno, &mut isnull);
        // int2, int4 and int8 datums all hold the value sign-extended
        (!isnull).then(|| d.value() as i64)
    }
}

/// Postgres functions called per row of main's scan without pgrx's guard (a setjmp per call, a third of
/// a full scan's cost in a world). An ERROR inside them longjmps over `exec`'s frame, which holds nothing
/// that needs dropping at those points, as C callers of the executor do.
mod unguarded {
    unsafe extern "C-unwind" {
        pub fn slot_getsomeattrs_int(slot: *mut pgrx::pg_sys::TupleTableSlot, attnum: std::ffi::c_int);
        pub fn ExecStoreVirtualTuple(slot: *mut pgrx::pg_sys::TupleTableSlot) -> *mut pgrx::pg_sys::TupleTableSlot;
    }
}

/// The hot path of a full scan, without pgrx's guard (a setjmp per row, 5% of a full scan in a world): main's
/// next row the world sees, while the cache is current. It neither panics nor holds anything that needs
/// dropping when main's scan raises an ERROR (a longjmp over this frame, as over a C caller's); everything
/// else goes through `exec_guarded`.
pub(crate) unsafe extern "C-unwind" fn exec(node: *mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        let run = run_of(node);
        if run.gathered && run.order == 0 && !run.base_done && run.unchecked.is_none() {
            if let Base::Row(_, out) = next_base_row::<true>(run) {
                return emit(node, run, out);
            }
        }
        exec_guarded(node)
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn exec_guarded(node: *mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        let run = run_of(node);
        if !(*(*node).ss.ps.state).es_epq_active.is_null() {
            return epq_row(node, run);
        }
        if !run.gathered {
            run.gathered = true;
            gather(node, run);
        }
        if run.order == 0 {
            // main's rows as they come, then the world's
            if !run.base_done {
                if let Base::Row(_, out) = next_base_row::<false>(run) {
                    return emit(node, run, out);
                }
            }
            return next_extra(node, run);
        }
        // merged in key order
        if run.pending.is_none() && !run.base_done {
            if let Base::Row(key, out) = next_base_row::<false>(run) {
                run.pending = Some((key, out));
            }
        }
        let extra = run.extras.get(run.next_extra).map(|e| e.0);
        match (run.pending, extra) {
            (Some((b, out)), Some(e)) if (run.order == 1 && b <= e) || (run.order == -1 && b >= e) => {
                run.pending = None;
                emit(node, run, out)
            }
            (Some((_, out)), None) => {
                run.pending = None;
                emit(node, run, out)
            }
            _ => next_extra(node, run),
        }
    }
}

/// The row an EvalPlanQual re-check tests (a row-locking read or a write that waited on a row another
/// session changed): main's scan under the world scan returns it, as every scan node does under a re-check
/// (ExecScan: the test row of this relation, once, if it passes the scan's conditions). The world's own rows
/// are not added: the re-check is of the one row the statement locked. Never taken by the fast path
/// (`exec`), which runs only once the world's rows are gathered.
pub(crate) unsafe fn epq_row(node: *mut pg_sys::CustomScanState, run: &mut Run) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        let child = run.child;
        if !(*child).chgParam.is_null() {
            pg_sys::ExecReScan(child);
        }
        let out = ((*child).ExecProcNode.unwrap_unchecked())(child);
        if tup_is_null(out) {
            return pg_sys::ExecClearTuple((*node).ss.ps.ps_ResultTupleSlot);
        }
        emit(node, run, out)
    }
}

/// A row of main's as the node returns it (see `Output`).
#[inline(always)]
pub(crate) unsafe fn emit(node: *mut pg_sys::CustomScanState, run: &Run, out: *mut pg_sys::TupleTableSlot) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        if run.output != Output::Empty {
            return out;
        }
        // a virtual row of no columns, stored once (pgrx's wrappers of Postgres calls cost a setjmp each)
        let result = (*node).ss.ps.ps_ResultTupleSlot;
        if tup_is_null(result) {
            unguarded::ExecStoreVirtualTuple(result);
        }
        result
    }
}

/// The next of the world's own rows, projected; an empty slot at the end.
pub(crate) unsafe fn next_extra(node: *mut pg_sys::CustomScanState, run: &mut Run) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        let Some(&(_, tuple)) = run.extras.get(run.next_extra) else {
            return pg_sys::ExecClearTuple((*node).ss.ps.ps_ResultTupleSlot);
        };
        run.next_extra += 1;
        let econtext = (*node).ss.ps.ps_ExprContext;
        pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
        pg_sys::ExecStoreMinimalTuple(tuple, run.extra_slot, false);
        (*econtext).ecxt_scantuple = run.extra_slot;
        pg_sys::ExecProject((*node).ss.ps.ps_ProjInfo)
    }
}

/// The key of main's row in a scan slot. Read in place from a heap tuple without nulls when the key's
/// offset is known (always for a first column), as deforming the tuple would, at a fraction of the cost.
#[inline]
pub(crate) unsafe fn key_of(slot: *mut pg_sys::TupleTableSlot, key_attno: i32, att: *const pg_sys::FormData_pg_attribute) -> Option<i64> {
    unsafe {
        let ops = (*slot).tts_ops;
        if ((*slot).tts_nvalid as i32) < key_attno && (ops == &pg_sys::TTSOpsBufferHeapTuple || ops == &pg_sys::TTSOpsHeapTuple) {
            let tuple = (*(slot as *mut pg_sys::HeapTupleTableSlot)).tuple;
            let off = (*att).attcacheoff;
            if !tuple.is_null() && off >= 0 {
                let hdr = (*tuple).t_data;
                if ((*hdr).t_infomask as u32 & pg_sys::HEAP_HASNULL) == 0 && ((*hdr).t_infomask2 as u32 & pg_sys::HEAP_NATTS_MASK) as i32 >= key_attno {
                    let p = (hdr as *const u8).add((*hdr).t_hoff as usize + off as usize);
                    return match (*att).attlen {
                        8 => Some(std::ptr::read_unaligned(p as *const i64)),
                        4 => Some(std::ptr::read_unaligned(p as *const i32) as i64),
                        2 => Some(std::ptr::read_unaligned(p as *const i16) as i64),
                        _ => None,
                    };
                }
            }
        }
        if ((*slot).tts_nvalid as i32) < key_attno {
            unguarded::slot_getsomeattrs_int(slot, key_attno);
        }
        let i = key_attno as usize - 1;
        // int2, int4 and int8 datums all hold the value sign-extended
        (!*(*slot).tts_isnull.add(i)).then(|| (*(*slot).tts_values.add(i)).value() as i64)
    }
}

/// Main's sequential scan reads a page's rows in order without touching them (`count(*)` reads the line
/// pointers only); the world scan reads each row's key, and that first touch of the row was a third of the
/// node's time (a cache miss). So the row a few places ahead on the page is fetched into the cache now.
/// Reads the heap scan's page-at-a-time state; a prefetch never faults, and the page is pinned by the scan.
#[inline(always)]
pub(crate) unsafe fn prefetch_ahead(child: *mut pg_sys::PlanState) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        const AHEAD: i32 = 4;
        let scan = (*(child as *mut pg_sys::ScanState)).ss_currentScanDesc as *mut pg_sys::HeapScanDescData;
        if scan.is_null() {
            return;
        }
        let (i, buf) = ((*scan).rs_cindex + AHEAD, (*scan).rs_cbuf);
        if i >= (*scan).rs_ntuples || i < 0 || buf <= 0 {
            return;
        }
        let Some(&off) = (*scan).rs_vistuples.get(i as usize) else { return };
        if off == 0 {
            return;
        }
        let page = pg_sys::BufferBlocks.add((buf as usize - 1) * pg_sys::BLCKSZ as usize);
        // the line pointer: lp_off is its low 15 bits
        let lp = std::ptr::read(page.add(std::mem::offset_of!(pg_sys::PageHeaderData, pd_linp) + (off as usize - 1) * 4) as *const u32);
        let lp_off = (lp & 0x7fff) as usize;
        if lp_off != 0 && lp_off < pg_sys::BLCKSZ as usize {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(page.add(lp_off) as *const i8);
        }
    }
}

/// What advancing main's scan gave.
pub(crate) enum Base {
    /// a row of main's the world sees: its key and main's output slot (the node's output: both project
    /// the relation's target list, or `Output` says how it is returned)
    Row(i64, *mut pg_sys::TupleTableSlot),
    /// main's scan is done
    Done,
    /// (the unguarded path) a row whose test needs the cache made current: held in `Run::unchecked`
    Unchecked,
}

/// Advances main's scan to its next row the world sees. `FAST`: the unguarded path, which stops at a row
/// it can't test without making the cache current (SPI).
#[inline(always)]
pub(crate) unsafe fn next_base_row<const FAST: bool>(run: &mut Run) -> Base {
    unsafe {
        if !FAST {
            if let Some((key, tid, out)) = run.unchecked.take() {
                if run.cache.base_row_visible(run.tabno, tid, key) {
                    return Base::Row(key, out);
                }
            }
        }
        let child = run.child;
        let scan_slot = (*(child as *mut pg_sys::ScanState)).ss_ScanTupleSlot;
        let key_attno = run.key_attno;
        loop {
            if !(*child).chgParam.is_null() {
                pg_sys::ExecReScan(child);
            }
            let out = ((*child).ExecProcNode.unwrap_unchecked())(child);
            if tup_is_null(out) {
                run.base_done = true;
                return Base::Done;
            }
            if run.heap_seq {
                prefetch_ahead(child);
            }
            let Some(key) = key_of(scan_slot, key_attno, run.key_att) else { continue };
            let tid = overlay::pack_tid(&(*scan_slot).tts_tid);
            let seen = if FAST {
                match run.cache.try_base_row_visible(tid, key) {
                    Some(seen) => seen,
                    None => {
                        run.unchecked = Some((key, tid, out));
                        return Base::Unchecked;
                    }
                }
            } else {
                run.cache.base_row_visible(run.tabno, tid, key)
            };
            if seen {
                return Base::Row(key, out);
            }
        }
    }
}

/// Reads the world's own rows for this scan: those of its delta and main's before-images it sees, that pass
/// the quals. Through main's index keys when its scan is an index scan on the key, else whole.
pub(crate) unsafe fn gather(node: *mut pg_sys::CustomScanState, run: &mut Run) {
    unsafe {
        if !run.shared.is_null() && (*run.shared).swap(1, Ordering::AcqRel) != 0 {
            return; // another participant of the parallel scan adds them
        }
        let (mut delta, history) = run.cache.rows_beyond_main(run.tabno);
        // (no delta before the database's first world)
        delta &= storage::relation_layout(run.tabno).delta != pg_sys::Oid::INVALID;
        let keys = index_keys(run.child, run.key_attno);
        // under SERIALIZABLE, the predicate locks of a read of the world's part, which the cache may answer
        // without reading the delta (storage::lock_world_part)
        if storage::catalog_scan::serializable() {
            let points = match keys.and_then(|(index, sk, n)| key_bounds(index, sk, n)) {
                Some(ranges) => ranges.iter().all(|&(lo, hi)| lo == hi).then(|| ranges.iter().map(|r| r.0).collect::<Vec<i64>>()),
                None if keys.is_none() => condition_keys(node, run),
                None => None,
            };
            storage::lock_world_part(&storage::relation_layout(run.tabno), points.as_deref(), (*(*node).ss.ps.state).es_snapshot);
        }
        // main's scan is on a key range where the world has no version of any key: no delta row can match
        if let Some(ranges) = keys.and_then(|(index, sk, n)| key_bounds(index, sk, n)) {
            if delta && ranges.iter().all(|&(lo, hi)| run.cache.chain_has_keys_in(run.tabno, lo, hi) == Some(false)) {
                delta = false;
            }
        }
        if !delta && !history {
            return;
        }
        for (i, wanted) in [delta, history].into_iter().enumerate() {
            if wanted && run.sides[i].is_none() {
                run.sides[i] = Some(open_side(node, run, i == 0));
            }
        }
        let estate = (*node).ss.ps.state;
        let snapshot = (*estate).es_snapshot;
        let econtext = (*node).ss.ps.ps_ExprContext;
        let vslot = (*node).ss.ss_ScanTupleSlot;
        let natts = (*(*vslot).tts_tupleDescriptor).natts as usize;
        let sides = std::mem::take(&mut run.sides);
        for side in sides.iter().flatten().filter(|s| if s.is_delta { delta } else { history }) {
            // the world's own versions, read one by one through the delta's (key, dseq) index instead of
            // every version of the keys main's scan names, where the delta holds many more rows than the
            // world has keys (a hot row's versions pile up there: every UPDATE of a pgbench branch adds
            // one): for keys main's scan names one by one (`= x`, `IN (...)`), or, when main's scan names
            // none (a sequential scan of a small table), every key of the world's
            // (the delta's size asked only where it decides: a system call)
            let piled_up = |run: &Run| {
                let blocks = if side.is_delta { pg_sys::RelationGetNumberOfBlocksInFork(side.rel, pg_sys::ForkNumber::MAIN_FORKNUM) as usize } else { 0 };
                blocks.saturating_mul(8) > run.cache.winner_count(run.tabno).saturating_mul(4)
            };
            // main's scan names no key (a sequential scan of pgbench_tellers, `Filter: tid = 3`): the keys the
            // statement's own conditions name, if any, whether or not versions piled up
            let named = if side.is_delta && keys.is_none() { condition_keys(node, run) } else { None };
            let winners = if let Some(named) = named {
                let mut v: Vec<(i64, i64)> = named
                    .iter()
                    .filter_map(|&k| match run.cache.winner_of(run.tabno, overlay::Key::I(k)) {
                        Some((dseq, false)) => Some((k, dseq)),
                        _ => None,
                    })
                    .collect();
                // (in the delta's order, as the read of every key returns them)
                v.sort_unstable_by_key(|&(_, dseq)| dseq);
                v.dedup();
                Some(v)
            } else if !side.is_delta || !piled_up(run) {
                None
            } else if let Some(ranges) = keys.and_then(|(index, sk, n)| key_bounds(index, sk, n)) {
                ranges.iter().all(|&(lo, hi)| lo == hi).then(|| {
                    ranges
                        .iter()
                        .filter_map(|&(k, _)| match run.cache.winner_of(run.tabno, overlay::Key::I(k)) {
                            Some((dseq, false)) => Some((k, dseq)),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                })
            } else if keys.is_none() {
                Some(run.cache.delta_winners(run.tabno))
            } else {
                None
            };
            let mut consider = |slot: *mut pg_sys::TupleTableSlot| {
                let Some(seq) = attr_i64(slot, side.seq_attno) else { return };
                let Some(key) = attr_i64(slot, side.key_attno) else { return };
                let seen = if side.is_delta {
                    run.cache.delta_row_visible(run.tabno, seq)
                } else {
                    run.cache.history_row_visible(run.tabno, seq, key)
                };
                if !seen {
                    return;
                }
                // the row as the table's: a virtual tuple in the node's own scan slot
                pg_sys::ExecClearTuple(vslot);
                pg_sys::slot_getsomeattrs(slot, (*(*slot).tts_tupleDescriptor).natts);
                for (i, &a) in side.map.iter().enumerate().take(natts) {
                    if a > 0 {
                        *(*vslot).tts_values.add(i) = *(*slot).tts_values.add(a as usize - 1);
                        *(*vslot).tts_isnull.add(i) = *(*slot).tts_isnull.add(a as usize - 1);
                    } else {
                        *(*vslot).tts_values.add(i) = pg_sys::Datum::from(0usize);
                        *(*vslot).tts_isnull.add(i) = true;
                    }
                }
                pg_sys::ExecStoreVirtualTuple(vslot);
                (*econtext).ecxt_scantuple = vslot;
                if pg_sys::ExecQual(run.qual, econtext) {
                    let old = pg_sys::MemoryContextSwitchTo(run.cxt);
                    let tuple = pg_sys::ExecCopySlotMinimalTuple(vslot);
                    pg_sys::MemoryContextSwitchTo(old);
                    run.extras.push((key, tuple));
                }
                pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            };
            if !side.is_delta {
                // main's before-images, where the cache says they are (history has no index on the key):
                // those in main's key ranges when its scan is on some, else all it picked
                let ranges = keys.and_then(|(index, sk, n)| key_bounds(index, sk, n)).unwrap_or_else(|| vec![(i64::MIN, i64::MAX)]);
                for (lo, hi) in ranges {
                    for place in run.cache.history_rows_in(run.tabno, lo, hi) {
                        let mut tid = overlay::unpack_tid(place);
                        if pg_sys::table_tuple_fetch_row_version(side.rel, &mut tid, snapshot, side.slot) {
                            consider(side.slot);
                        }
                    }
                }
                pg_sys::ExecClearTuple(side.slot);
                continue;
            }
            // (the side's key index when it is that one, already open: no second open)
            let own = !side.key_index.is_null() && is_version_index(side.key_index, side.key_attno, side.seq_attno);
            let version_index = match &winners {
                Some(_) if own => side.key_index,
                Some(_) => crate::route::scans::keys::find_version_index(side.rel, side.key_attno as i16),
                None => std::ptr::null_mut(),
            };
            match keys {
                _ if !version_index.is_null() => {
                    read_versions(side, version_index, snapshot, winners.as_deref().unwrap_or_default(), &mut consider);
                    if version_index != side.key_index {
                        pg_sys::index_close(version_index, pg_sys::NoLock as i32);
                    }
                }
                Some((index, scan_keys, n)) if !side.key_index.is_null() && same_operators(index, side.key_index) => {
                    let scan = pg_sys::index_beginscan(side.rel, side.key_index, snapshot, n, 0);
                    pg_sys::index_rescan(scan, scan_keys, n, std::ptr::null_mut(), 0);
                    while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, side.slot) {
                        consider(side.slot);
                    }
                    pg_sys::index_endscan(scan);
                }
                _ => {
                    let scan = pg_sys::table_beginscan(side.rel, snapshot, 0, std::ptr::null_mut());
                    while pg_sys::table_scan_getnextslot(scan, pg_sys::ScanDirection::ForwardScanDirection, side.slot) {
                        consider(side.slot);
                    }
                    pg_sys::table_endscan(scan);
                }
            }
            pg_sys::ExecClearTuple(side.slot);
        }
        run.sides = sides;
        match run.order {
            1 => run.extras.sort_by_key(|e| e.0),
            -1 => run.extras.sort_by_key(|e| std::cmp::Reverse(e.0)),
            _ => {}
        }
    }
}

/// The integer keys the scan's own conditions name (`world_scan::key_condition`), when they can be computed
/// before it runs (constants, the statement's parameters): every world row that passes the conditions has one
/// of them. Computed once per scan.
pub(crate) unsafe fn condition_keys(node: *mut pg_sys::CustomScanState, run: &mut Run) -> Option<Vec<i64>> {
    unsafe {
        if run.condition_keys.is_none() {
            let plan = (*node).ss.ps.plan;
            let params = (*(*node).ss.ps.state).es_param_list_info;
            let keys = crate::route::scans::keys::key_condition(plan)
                .and_then(|(expr, list)| crate::route::scans::keys::evaluate_keys(expr, params, list))
                .and_then(|keys| keys.into_iter().map(|k| match k {
                    overlay::Key::I(i) => Some(i),
                    _ => None,
                }).collect::<Option<Vec<i64>>>());
            run.condition_keys = Some(keys);
        }
        run.condition_keys.clone().flatten()
    }
}

/// The delta's rows at these (key, dseq), through its (key, _w_dseq) index.
pub(crate) unsafe fn read_versions(
    side: &Side,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    versions: &[(i64, i64)],
    consider: &mut impl FnMut(*mut pg_sys::TupleTableSlot),
) {
    unsafe {
        let key_type = (*(*index).rd_att).attrs.as_ptr().read().atttypid;
        let scan = pg_sys::index_beginscan(side.rel, index, snapshot, 2, 0);
        let mut keys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        for &(key, dseq) in versions {
            let (eq, datum) = match key_type {
                pg_sys::INT2OID => (pg_sys::F_INT2EQ, pg_sys::Datum::from(key as i16)),
                pg_sys::INT4OID => (pg_sys::F_INT4EQ, pg_sys::Datum::from(key as i32)),
                _ => (pg_sys::F_INT8EQ, pg_sys::Datum::from(key)),
            };
            pg_sys::ScanKeyInit(&mut keys[0], 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(eq), datum);
            pg_sys::ScanKeyInit(&mut keys[1], 2, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_INT8EQ), pg_sys::Datum::from(dseq));
            pg_sys::index_rescan(scan, keys.as_mut_ptr(), 2, std::ptr::null_mut(), 0);
            while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, side.slot) {
                consider(side.slot);
            }
        }
        pg_sys::index_endscan(scan);
    }
}

/// main's scan keys, when its scan is an index scan on the key column alone, or a bitmap heap scan of one
/// such index scan: (index, keys, how many).
pub(crate) unsafe fn index_keys(child: *mut pg_sys::PlanState, key_attno: i32) -> Option<(pg_sys::Relation, pg_sys::ScanKey, i32)> {
    unsafe {
        if (*child).type_ == pg_sys::NodeTag::T_BitmapHeapScanState {
            let inner = (*child).lefttree;
            if inner.is_null() || (*inner).type_ != pg_sys::NodeTag::T_BitmapIndexScanState {
                return None; // a BitmapAnd / BitmapOr of several
            }
            let biss = inner as *mut pg_sys::BitmapIndexScanState;
            let index = (*biss).biss_RelationDesc;
            if index.is_null()
                || (*(*index).rd_index).indnatts != 1
                || *(*(*index).rd_index).indkey.values.as_ptr() as i32 != key_attno
                // keys from a nested loop's outer row are filled when the bitmap is built: not yet known
                || ((*biss).biss_NumRuntimeKeys != 0 && !(*biss).biss_RuntimeKeysReady)
            {
                return None;
            }
            return Some((index, (*biss).biss_ScanKeys, (*biss).biss_NumScanKeys));
        }
        if (*child).type_ != pg_sys::NodeTag::T_IndexScanState {
            return None;
        }
        let iss = child as *mut pg_sys::IndexScanState;
        let index = (*iss).iss_RelationDesc;
        if index.is_null()
            || (*(*index).rd_index).indnatts != 1
            || *(*(*index).rd_index).indkey.values.as_ptr() as i32 != key_attno
            || (*iss).iss_NumOrderByKeys != 0
        {
            return None;
        }
        // keys computed from parameters (a nested loop's outer row) are filled when the scan (re)starts
        if (*iss).iss_NumRuntimeKeys != 0 && !(*iss).iss_RuntimeKeysReady {
            pg_sys::ExecReScan(child);
        }
        Some((index, (*iss).iss_ScanKeys, (*iss).iss_NumScanKeys))
    }
}

/// Main's index and the side's index on the same column compare with the same operators: main's scan keys
/// are valid for the side's index.
pub(crate) unsafe fn same_operators(a: pg_sys::Relation, b: pg_sys::Relation) -> bool {
    // (the side's index may go on past the key: the delta's is on (key, version))
    unsafe { *(*a).rd_opfamily == *(*b).rd_opfamily && (*(*a).rd_index).indnatts == 1 }
}

pub(crate) unsafe fn open_side(node: *mut pg_sys::CustomScanState, run: &Run, is_delta: bool) -> Side {
    unsafe {
        let layout = storage::relation_layout(run.tabno);
        let table_desc = (*(*node).ss.ss_currentRelation).rd_att;
        let main_index = index_keys(run.child, run.key_attno).map(|k| k.0);
        let estate = (*node).ss.ps.state;
        let rel = pg_sys::table_open(if is_delta { layout.delta } else { layout.history }, pg_sys::AccessShareLock as i32);
        let desc = (*rel).rd_att;
        let attno_of = |name: &std::ffi::CStr| -> i32 {
            (0..(*desc).natts as usize)
                .find(|&i| {
                    let a = &*(*desc).attrs.as_ptr().add(i);
                    !a.attisdropped && std::ffi::CStr::from_ptr(a.attname.data.as_ptr()) == name
                })
                .map(|i| i as i32 + 1)
                .unwrap_or(0)
        };
        let map: Vec<i32> = (0..(*table_desc).natts as usize)
            .map(|i| {
                let a = &*(*table_desc).attrs.as_ptr().add(i);
                if a.attisdropped { 0 } else { attno_of(std::ffi::CStr::from_ptr(a.attname.data.as_ptr())) }
            })
            .collect();
        let key_attno = map[run.key_attno as usize - 1];
        let seq_attno = attno_of(if is_delta { c"_w_dseq" } else { c"_w_hseq" });
        if key_attno == 0 || seq_attno == 0 {
            crate::api::raise("XX000", format!("pg_worlds: storage of table {} is out of step with it", layout.table_name));
        }
        let key_index = match main_index {
            // (the (key, _w_dseq) index, whose oid is kept per delta, when there is one: it serves main's
            // index scans on the key and the reads of versions by (key, dseq) alike)
            Some(_) if is_delta => {
                let index = crate::route::scans::keys::find_version_index(rel, key_attno as i16);
                if index.is_null() { key_index_of(rel, key_attno) } else { index }
            }
            _ => std::ptr::null_mut(),
        };
        let slot = pg_sys::ExecAllocTableSlot(&mut (*estate).es_tupleTable, desc, pg_sys::table_slot_callbacks(rel));
        Side { rel, key_index, slot, map, seq_attno, key_attno, is_delta }
    }
}

/// The key ranges main's index scan keys select, when they are plain comparisons of integers: one range
/// [lo, hi], or for `key = ANY(...)` (an IN list) one range per listed key, each once.
pub(crate) unsafe fn key_bounds(index: pg_sys::Relation, keys: pg_sys::ScanKey, n: i32) -> Option<Vec<(i64, i64)>> {
    unsafe {
        if *(*index).rd_opfamily != pg_sys::INTEGER_BTREE_FAM_OID {
            return None;
        }
        let mut range = (i64::MIN, i64::MAX);
        let mut listed: Option<Vec<i64>> = None;
        for i in 0..n as usize {
            let k = &*keys.add(i);
            let odd = pg_sys::SK_ISNULL | pg_sys::SK_ROW_HEADER | pg_sys::SK_SEARCHNULL | pg_sys::SK_SEARCHNOTNULL;
            let flags = k.sk_flags as u32;
            if flags & odd != 0 {
                return None;
            }
            if flags & pg_sys::SK_SEARCHARRAY != 0 {
                if k.sk_strategy as u32 != pg_sys::BTEqualStrategyNumber || listed.is_some() {
                    return None;
                }
                listed = Some(array_of_integers(k.sk_argument)?);
                continue;
            }
            // int2, int4 and int8 datums all hold the value sign-extended
            if !narrow(&mut range, k.sk_strategy as u32, k.sk_argument.value() as i64)? {
                return Some(Vec::new());
            }
        }
        let (lo, hi) = range;
        Some(match listed {
            None => vec![(lo, hi)],
            Some(keys) => keys.into_iter().filter(|k| (lo..=hi).contains(k)).map(|k| (k, k)).collect(),
        })
    }
}

/// The non-null elements of an int2, int4 or int8 array, sorted, each once.
pub(crate) unsafe fn array_of_integers(d: pg_sys::Datum) -> Option<Vec<i64>> {
    unsafe {
        let (elem, elements) = array_elements(d);
        let mut keys = elements.into_iter().map(|e| integer_of(elem, e)).collect::<Option<Vec<i64>>>()?;
        keys.sort_unstable();
        keys.dedup();
        Some(keys)
    }
}

/// The relation's btree index led by the key column, opened (null when it has none).
/// Whether `index` is the delta's btree on (key, _w_dseq).
pub(crate) unsafe fn is_version_index(index: pg_sys::Relation, key_attno: i32, seq_attno: i32) -> bool {
    unsafe {
        let ix = (*index).rd_index;
        let keys = (*ix).indkey.values.as_ptr();
        (*ix).indnkeyatts == 2 && *keys as i32 == key_attno && *keys.add(1) as i32 == seq_attno && (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID
    }
}

pub(crate) unsafe fn key_index_of(rel: pg_sys::Relation, key_attno: i32) -> pg_sys::Relation {
    unsafe {
        let list = pg_sys::RelationGetIndexList(rel);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let oid = crate::fast_ffi::list_nth_oid(list, i);
            let index = pg_sys::index_open(oid, pg_sys::AccessShareLock as i32);
            let ix = (*index).rd_index;
            if *(*ix).indkey.values.as_ptr() as i32 == key_attno && (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID && pg_sys::RelationGetIndexPredicate(index).is_null() {
                return index;
            }
            pg_sys::index_close(index, pg_sys::AccessShareLock as i32);
        }
        std::ptr::null_mut()
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn rescan(node: *mut pg_sys::CustomScanState) {
    unsafe {
        let run = run_of(node);
        if !(*node).ss.ps.chgParam.is_null() {
            pg_sys::UpdateChangedParamSet(run.child, (*node).ss.ps.chgParam);
        }
        pg_sys::ExecReScan(run.child);
        run.extras.clear();
        run.next_extra = 0;
        run.gathered = false;
        run.base_done = false;
        run.pending = None;
        run.unchecked = None;
        pg_sys::MemoryContextReset(run.cxt);
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn end(node: *mut pg_sys::CustomScanState) {
    unsafe {
        let run = run_of(node);
        pg_sys::ExecEndNode(run.child);
        for side in std::mem::take(&mut run.sides).into_iter().flatten() {
            if !side.key_index.is_null() {
                pg_sys::index_close(side.key_index, pg_sys::NoLock as i32);
            }
            pg_sys::table_close(side.rel, pg_sys::NoLock as i32);
        }
    }
}
