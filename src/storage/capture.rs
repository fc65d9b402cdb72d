//! History capture on main: the one cost main pays. A row-level AFTER trigger on every tracked table that
//! forms the history tuple itself and inserts it with heap and index calls (no SPI, no plpgsql).
//!
//! A history row: hseq (order: see next_hseq), xid (writer's xid8), at, op ('I','U','D'), old_tid / new_tid (the
//! physical rows before and after; how a world tells which rows of main it still sees), src (the world a
//! merge brought the change from), then the table's columns: the before-image for 'U'/'D', only the key
//! for 'I'. An UPDATE that changes the primary key is recorded as a 'D' and an 'I'.
use super::{relation_layout, Layout};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use crate::backend_local::BackendLocal;

/// Fixed leading columns of a history table (1-based attnums).
pub const H_HSEQ: usize = 0;
pub const H_XID: usize = 1;
pub const H_AT: usize = 2;
pub const H_OP: usize = 3;
pub const H_OLD_TID: usize = 4;
pub const H_NEW_TID: usize = 5;
pub const H_SRC: usize = 6;
pub const H_FIXED: usize = 7;

/// The world a merge in progress brings changes from; recorded in history's `src`.
pub static MERGE_SOURCE: BackendLocal<RefCell<Option<String>>> = BackendLocal::new(RefCell::new(None));

static LAST_HSEQ: BackendLocal<std::cell::Cell<i64>> = BackendLocal::new(std::cell::Cell::new(0));

/// History's order, without a sequence (whose page lock two writers of main would fight over): the WAL
/// insert position, times 1024, plus the backend's number. Two changes of one row are ordered by their
/// row lock, and the second is captured after the first one's history insert reached the WAL, so its
/// position is later; the backend number keeps two backends reading one position apart.
pub fn next_hseq() -> i64 {
    next_hseq_at(unsafe { pg_sys::GetXLogInsertRecPtr() })
}

fn next_hseq_at(lsn: pg_sys::XLogRecPtr) -> i64 {
    let lsn = lsn as i64;
    let backend = unsafe { pg_sys::MyBackendId } as i64 & 1023;
    let candidate = (lsn << 10) | backend;
    LAST_HSEQ.with(|l| {
        let next = if candidate > l.get() { candidate } else { l.get() + 1024 };
        l.set(next);
        next
    })
}

/// The number of an event (worlds.event.seq's default): ordered as history's changes are, and taken
/// without a sequence, since nextval would move the session's lastval() on every write in a world.
#[pg_extern(volatile, parallel_unsafe)]
fn _next_seq() -> i64 {
    next_hseq()
}

#[pg_trigger]
fn _capture<'a>(
    trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, pgrx::AllocatedByPostgres>>, pgrx::PgTriggerError> {
    unsafe { capture(trigger.trigger_data()) };
    Ok(None)
}

unsafe fn capture(td: &pg_sys::TriggerData) {
    unsafe {
        let trig = &*td.tg_trigger;
        let tabno: i32 = if trig.tgnargs > 0 {
            std::ffi::CStr::from_ptr(*trig.tgargs).to_str().unwrap_or("0").parse().unwrap_or(0)
        } else {
            0
        };
        let source_rel = td.tg_relation;
        let Some(layout) = super::ensure_history(tabno) else { return };
        let event = td.tg_event & pg_sys::TRIGGER_EVENT_OPMASK;
        let old = td.tg_trigtuple;
        match event {
            pg_sys::TRIGGER_EVENT_INSERT => write_entry(&layout, source_rel, b'I', old, std::ptr::null_mut(), old),
            pg_sys::TRIGGER_EVENT_DELETE => write_entry(&layout, source_rel, b'D', old, old, std::ptr::null_mut()),
            pg_sys::TRIGGER_EVENT_UPDATE => {
                let new = td.tg_newtuple;
                if key_changed(&layout, source_rel, old, new) {
                    write_entry(&layout, source_rel, b'D', old, old, std::ptr::null_mut());
                    write_entry(&layout, source_rel, b'I', new, std::ptr::null_mut(), new);
                } else {
                    write_entry(&layout, source_rel, b'U', old, old, new);
                }
            }
            _ => {}
        }
    }
}

/// Every row of a tracked table into its history: as deleted (op 'D': TRUNCATE and DROP TABLE are
/// captured, not lost), or as inserted (op 'I': the rows a CREATE TABLE AS / SELECT INTO wrote before
/// tracking began, so the past doesn't hold them), each as capture keeps that change. Read with the table's
/// own access method on the latest snapshot (the caller holds the table's ACCESS EXCLUSIVE lock, or made
/// it), not by a query: no plan over the table, so nothing of the user's (an index expression calling a
/// function found through the session's search_path) runs here.
#[pg_extern(volatile, parallel_unsafe)]
fn _capture_rows(tabno: i32, op: i8) {
    let op = op as u8;
    if op != b'D' && op != b'I' {
        crate::api::raise("22023", format!("pg_worlds: no such capture operation: {}", op as char));
    }
    // (a table without storage yet gets it at its first row: one never written and empty keeps none)
    let mut layout = relation_layout(tabno);
    unsafe {
        let rel = pg_sys::table_open(layout.relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let am = (*rel).rd_tableam;
        let flags = pg_sys::ScanOptions::SO_TYPE_SEQSCAN | pg_sys::ScanOptions::SO_ALLOW_STRAT | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE;
        let scan = (*am).scan_begin.unwrap()(rel, snapshot, 0, std::ptr::null_mut(), std::ptr::null_mut(), flags);
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        // each row's history tuple in a context of its own, reset after it is written
        let row_cxt = pg_sys::AllocSetContextCreateInternal(pg_sys::CurrentMemoryContext, c"pg_worlds capture rows".as_ptr(), 0, 8 * 1024, 8 * 1024 * 1024);
        while (*am).scan_getnextslot.unwrap()(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            if layout.history == pg_sys::Oid::INVALID {
                match super::ensure_history(tabno) {
                    Some(l) => layout = l,
                    None => break, // (its storage can't be made: logged, nothing to keep the rows in)
                }
            }
            let old = pg_sys::MemoryContextSwitchTo(row_cxt);
            let mut should_free = false;
            let tuple = pg_sys::ExecFetchSlotHeapTuple(slot, false, &mut should_free);
            if op == b'D' {
                write_entry(&layout, rel, b'D', tuple, tuple, std::ptr::null_mut());
            } else {
                write_entry(&layout, rel, b'I', tuple, std::ptr::null_mut(), tuple);
            }
            if should_free {
                pg_sys::heap_freetuple(tuple);
            }
            pg_sys::MemoryContextSwitchTo(old);
            pg_sys::MemoryContextReset(row_cxt);
        }
        pg_sys::MemoryContextDelete(row_cxt);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        (*am).scan_end.unwrap()(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
    }
}

/// Does an UPDATE change the primary key? (Binary comparison of the key columns.)
unsafe fn key_changed(layout: &Layout, rel: pg_sys::Relation, old: pg_sys::HeapTuple, new: pg_sys::HeapTuple) -> bool {
    unsafe {
        let desc = (*rel).rd_att;
        for &attno in &layout.key_attnos {
            let mut n1 = false;
            let mut n2 = false;
            let d1 = pg_sys::heap_getattr(old, attno, desc, &mut n1);
            let d2 = pg_sys::heap_getattr(new, attno, desc, &mut n2);
            if n1 != n2 {
                return true;
            }
            if !n1 {
                let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
                if !super::datum_is_equal(d1, d2, att.attbyval, att.attlen as i32) {
                    return true;
                }
            }
        }
        false
    }
}

/// Postgres functions capture calls without pgrx's guard, each group of them inside one
/// `pg_guard_ffi_boundary` (whose closure holds nothing to drop and cannot panic): a guard per call
/// (sigsetjmp and its bookkeeping) was a tenth of capture's instructions.
mod raw {
    use pgrx::pg_sys::{Datum, FullTransactionId, HeapTuple, IndexInfo, IndexUniqueCheck, ItemPointer, Relation, TimestampTz, TupleDesc, XLogRecPtr};
    unsafe extern "C-unwind" {
        pub fn heap_deform_tuple(tuple: HeapTuple, desc: TupleDesc, values: *mut Datum, isnull: *mut bool);
        pub fn heap_form_tuple(desc: TupleDesc, values: *mut Datum, isnull: *mut bool) -> HeapTuple;
        pub fn simple_heap_insert(relation: Relation, tup: HeapTuple);
        pub fn heap_freetuple(tup: HeapTuple);
        pub fn index_insert(
            index: Relation,
            values: *mut Datum,
            isnull: *mut bool,
            heap_tid: ItemPointer,
            heap: Relation,
            check_unique: IndexUniqueCheck::Type,
            index_unchanged: bool,
            info: *mut IndexInfo,
        ) -> bool;
        pub fn GetTopFullTransactionId() -> FullTransactionId;
        pub fn GetCurrentStatementStartTimestamp() -> TimestampTz;
        pub fn GetXLogInsertRecPtr() -> XLogRecPtr;
    }
}

/// Forms and inserts one history row. `image` is the tuple whose columns are stored (the before-image,
/// or for an insert the new row, of which only the key columns are kept).
unsafe fn write_entry(
    layout: &Layout,
    rel: pg_sys::Relation,
    op: u8,
    image: pg_sys::HeapTuple,
    old_tuple: pg_sys::HeapTuple,
    new_tuple: pg_sys::HeapTuple,
) {
    unsafe {
        // inserts go apart from before-images: a world's scans read only the latter
        let (hist, indexes) = open_target(if op == b'I' { layout.inserts } else { layout.history });
        let hdesc = (*hist).rd_att;
        let natts = (*hdesc).natts as usize;
        let sdesc = (*rel).rd_att;
        let snatts = (*sdesc).natts as usize;
        let mut values = vec![pg_sys::Datum::from(0usize); natts + snatts];
        let mut nulls = vec![true; natts + snatts];
        let (row_values, source_values) = values.split_at_mut(natts);
        let (row_nulls, source_nulls) = nulls.split_at_mut(natts);
        // a table without a key is told apart by new_tid alone; an insert keeps only the key
        let keep_columns = op != b'I' || !layout.key_attnos.is_empty();
        let (xid, at, lsn) = pg_sys::ffi::pg_guard_ffi_boundary(|| {
            if keep_columns {
                raw::heap_deform_tuple(image, sdesc, source_values.as_mut_ptr(), source_nulls.as_mut_ptr());
            }
            (raw::GetTopFullTransactionId().value, raw::GetCurrentStatementStartTimestamp(), raw::GetXLogInsertRecPtr())
        });

        // before the row exists, so before its writer commits (history_marks: a world's cache may skip
        // its catch-up query while no writer new to it wrote this table)
        super::history_marks::note(layout.relid, xid);
        row_values[H_HSEQ] = pg_sys::Datum::from(next_hseq_at(lsn));
        row_values[H_XID] = pg_sys::Datum::from(xid);
        row_values[H_AT] = pg_sys::Datum::from(at);
        row_values[H_OP] = pg_sys::Datum::from(op as i8);
        row_nulls[H_HSEQ..=H_OP].fill(false);
        // tids are stored by reference: point at the tuples' own t_self, copied when the tuple is formed
        if !old_tuple.is_null() {
            row_values[H_OLD_TID] = pg_sys::Datum::from(&mut (*old_tuple).t_self as *mut pg_sys::ItemPointerData);
            row_nulls[H_OLD_TID] = false;
        }
        if !new_tuple.is_null() {
            row_values[H_NEW_TID] = pg_sys::Datum::from(&mut (*new_tuple).t_self as *mut pg_sys::ItemPointerData);
            row_nulls[H_NEW_TID] = false;
        }
        if let Some(src) = MERGE_SOURCE.with(|s| s.borrow().clone()) {
            row_values[H_SRC] = pgrx::IntoDatum::into_datum(src.as_str()).unwrap();
            row_nulls[H_SRC] = false;
        }
        if keep_columns {
            for (i, src_attno) in layout.history_map.iter().enumerate() {
                let Some(src_attno) = *src_attno else { continue };
                if op == b'I' && !layout.key_attnos.contains(&src_attno) {
                    continue;
                }
                // (a column added since the row was written: deform gave its default, as heap_getattr does)
                row_values[H_FIXED + i] = source_values[src_attno as usize - 1];
                row_nulls[H_FIXED + i] = source_nulls[src_attno as usize - 1];
            }
        }
        // the storage's indexes are on plain columns (the key, _w_xid): their values are the row's
        let mut index_values = Vec::with_capacity(indexes.len());
        for &(_, info) in indexes.iter() {
            let n = (*info).ii_NumIndexAttrs as usize;
            let mut v = [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize];
            let mut isnull = [true; pg_sys::INDEX_MAX_KEYS as usize];
            for j in 0..n {
                let attno = (*info).ii_IndexAttrNumbers[j] as usize;
                v[j] = row_values[attno - 1];
                isnull[j] = row_nulls[attno - 1];
            }
            index_values.push((v, isnull));
        }
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            let tup = raw::heap_form_tuple(hdesc, row_values.as_mut_ptr(), row_nulls.as_mut_ptr());
            raw::simple_heap_insert(hist, tup);
            for (&(index, info), (v, isnull)) in indexes.iter().zip(index_values.iter_mut()) {
                raw::index_insert(
                    index,
                    v.as_mut_ptr(),
                    isnull.as_mut_ptr(),
                    &mut (*tup).t_self,
                    hist,
                    pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO,
                    false,
                    info,
                );
            }
            raw::heap_freetuple(tup);
        });
    }
}

/// A storage relation capture inserts into, open with its indexes across the transaction's rows: opening
/// and closing them for every captured row (as CatalogTupleInsert does) was a fifth of capture's cost. They
/// belong to the top transaction's resource owner and are closed before commit and prepare, when a
/// subtransaction aborts (a relation it created would otherwise stay referenced), and before a utility
/// statement (DDL refuses a table the session holds open); at a top-level abort Postgres closes them and
/// they are only forgotten here.
struct Target {
    relid: pg_sys::Oid,
    rel: pg_sys::Relation,
    /// the indexes ready for inserts, each with its IndexInfo (from the relation's IndexPlan)
    indexes: IndexList,
}

type IndexList = Rc<Vec<(pg_sys::Relation, *mut pg_sys::IndexInfo)>>;

/// What capture needs to fill a storage relation's indexes: their oids and IndexInfos, in a memory context
/// of their own. Kept across transactions when every index is a btree (which keeps nothing in an IndexInfo
/// between inserts): listing the indexes and BuildIndexInfo in every transaction were a third of opening a
/// target. A relcache invalidation of the relation or of one of its indexes makes a plan stale; a stale
/// plan (and one made for other kinds of index, stale from the start) is freed when no target uses it.
struct IndexPlan {
    relid: pg_sys::Oid,
    indexes: Vec<(pg_sys::Oid, *mut pg_sys::IndexInfo)>,
    cxt: pg_sys::MemoryContext,
    stale: bool,
}

struct Held {
    targets: Vec<Target>,
    /// relations opened by an `open_target` that hasn't finished (an error may stop it halfway)
    opening: Vec<pg_sys::Relation>,
}

static HELD: BackendLocal<RefCell<Held>> = BackendLocal::new(RefCell::new(Held { targets: Vec::new(), opening: Vec::new() }));
static PLANS: BackendLocal<RefCell<Vec<IndexPlan>>> = BackendLocal::new(RefCell::new(Vec::new()));
/// a relcache invalidation arrived since they were opened: an index may have been added
static TARGETS_STALE: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));
/// relcache invalidations seen: one during the making of a plan leaves it stale
static INVALIDATIONS: BackendLocal<std::cell::Cell<u64>> = BackendLocal::new(std::cell::Cell::new(0));

pub(super) unsafe fn open_target(relid: pg_sys::Oid) -> (pg_sys::Relation, IndexList) {
    unsafe {
        if TARGETS_STALE.with(|s| s.replace(false)) {
            close_targets();
        }
        if let Some(found) = HELD.with(|h| h.borrow().targets.iter().find(|t| t.relid == relid).map(|t| (t.rel, t.indexes.clone()))) {
            return found;
        }
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        let restore = || pg_sys::CurrentResourceOwner = owner;
        let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as i32);
        HELD.with(|h| h.borrow_mut().opening.push(rel));
        // after the lock: an index added before it was granted has invalidated the plan by now
        let planned = PLANS.with(|p| p.borrow().iter().find(|p| p.relid == relid && !p.stale).map(|p| p.indexes.clone()));
        let mut indexes = Vec::new();
        match planned {
            Some(planned) => {
                for (oid, info) in planned {
                    let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
                    HELD.with(|h| h.borrow_mut().opening.push(index));
                    indexes.push((index, info));
                }
            }
            None => {
                let cxt = pg_sys::AllocSetContextCreateInternal(pg_sys::TopMemoryContext, c"pg_worlds capture indexes".as_ptr(), 0, 1024, 8 * 1024);
                // stale until complete: an error halfway leaves it to be freed
                let invalidations = INVALIDATIONS.with(|n| n.get());
                PLANS.with(|p| p.borrow_mut().push(IndexPlan { relid, indexes: Vec::new(), cxt, stale: true }));
                let old_cxt = pg_sys::MemoryContextSwitchTo(cxt);
                let list = pg_sys::RelationGetIndexList(rel);
                let mut all_btree = true;
                let mut plan = Vec::new();
                for i in 0..if list.is_null() { 0 } else { (*list).length } {
                    let oid = crate::fast_ffi::list_nth_oid(list, i);
                    let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
                    HELD.with(|h| h.borrow_mut().opening.push(index));
                    let info = pg_sys::BuildIndexInfo(index);
                    if !(*info).ii_Expressions.is_null() || !(*info).ii_Predicate.is_null() {
                        pg_sys::MemoryContextSwitchTo(old_cxt);
                        restore();
                        let name = std::ffi::CStr::from_ptr((*(*index).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
                        crate::api::raise(
                            "0A000",
                            format!("pg_worlds: capture can't fill index \"{name}\" of history storage (on expressions or with a predicate); drop it"),
                        );
                    }
                    all_btree &= (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID;
                    if (*info).ii_ReadyForInserts {
                        indexes.push((index, info));
                        plan.push((oid, info));
                    } else {
                        all_btree = false; // being built concurrently: look again next time
                    }
                }
                pg_sys::MemoryContextSwitchTo(old_cxt);
                PLANS.with(|p| {
                    if let Some(p) = p.borrow_mut().iter_mut().rev().find(|p| p.cxt == cxt) {
                        p.indexes = plan;
                        p.stale = !all_btree || INVALIDATIONS.with(|n| n.get()) != invalidations;
                    }
                });
            }
        }
        restore();
        let indexes = Rc::new(indexes);
        let opening = HELD.with(|h| std::mem::take(&mut h.borrow_mut().opening));
        // indexes not ready for inserts (being built concurrently) are not kept
        for r in opening {
            if r != rel && !indexes.iter().any(|&(i, _)| i == r) {
                close_held(r);
            }
        }
        HELD.with(|h| h.borrow_mut().targets.push(Target { relid, rel, indexes: indexes.clone() }));
        (rel, indexes)
    }
}

/// Closes a relation capture opened, under the owner that holds it.
unsafe fn close_held(rel: pg_sys::Relation) {
    unsafe {
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        pg_sys::RelationClose(rel);
        pg_sys::CurrentResourceOwner = owner;
    }
}

/// Closes the relations capture holds open (before commit, prepare, a utility statement, or when a
/// subtransaction aborts), then frees the stale plans no target uses any more.
pub fn close_targets() {
    let (targets, opening) = HELD.with(|h| {
        let mut h = h.borrow_mut();
        (std::mem::take(&mut h.targets), std::mem::take(&mut h.opening))
    });
    unsafe {
        for t in targets {
            for &(index, _) in t.indexes.iter() {
                close_held(index);
            }
            close_held(t.rel);
        }
        for r in opening {
            close_held(r);
        }
    }
    free_stale_plans();
}

/// Forgets them: the transaction's end closes them.
fn forget_targets() {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        h.targets.clear();
        h.opening.clear();
    });
    free_stale_plans();
}

fn free_stale_plans() {
    let stale: Vec<pg_sys::MemoryContext> = PLANS.with(|p| {
        let mut p = p.borrow_mut();
        let stale = p.iter().filter(|p| p.stale).map(|p| p.cxt).collect();
        p.retain(|p| !p.stale);
        stale
    });
    for cxt in stale {
        unsafe { pg_sys::MemoryContextDelete(cxt) };
    }
}

/// At a transaction's end (called by storage's one transaction callback, first). Most transactions
/// captured nothing and have nothing to close.
pub fn on_xact(event: pg_sys::XactEvent::Type) {
    use pg_sys::XactEvent::*;
    let idle = HELD.with(|h| h.try_borrow().is_ok_and(|h| h.targets.is_empty() && h.opening.is_empty()))
        && PLANS.with(|p| p.try_borrow().is_ok_and(|p| !p.iter().any(|p| p.stale)));
    if idle {
        return;
    }
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => close_targets(),
        XACT_EVENT_ABORT | XACT_EVENT_COMMIT | XACT_EVENT_PREPARE => forget_targets(),
        _ => {}
    }
}

/// An index may have been added to a storage relation or dropped: reopen before the next insert, and
/// describe that relation's indexes anew (`relid` invalid: every relation).
pub fn on_relcache_invalidation(relid: pg_sys::Oid) {
    TARGETS_STALE.with(|s| s.set(true));
    INVALIDATIONS.with(|n| n.set(n.get() + 1));
    PLANS.with(|p| {
        // (never borrowed across a call into Postgres, where invalidations arrive)
        if let Ok(mut p) = p.try_borrow_mut() {
            for plan in p.iter_mut() {
                if relid == pg_sys::Oid::INVALID || plan.relid == relid || plan.indexes.iter().any(|&(i, _)| i == relid) {
                    plan.stale = true;
                }
            }
        }
    });
}

