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

/// Fixed leading columns of a history table (1-based attnums).
pub const H_HSEQ: usize = 0;
pub const H_XID: usize = 1;
pub const H_AT: usize = 2;
pub const H_OP: usize = 3;
pub const H_OLD_TID: usize = 4;
pub const H_NEW_TID: usize = 5;
pub const H_SRC: usize = 6;
pub const H_FIXED: usize = 7;

thread_local! {
    /// The world a merge in progress brings changes from; recorded in history's `src`.
    pub static MERGE_SOURCE: RefCell<Option<String>> = const { RefCell::new(None) };
}

thread_local! {
    static LAST_HSEQ: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// History's order, without a sequence (whose page lock two writers of main would fight over): the WAL
/// insert position, times 1024, plus the backend's number. Two changes of one row are ordered by their
/// row lock, and the second is captured after the first one's history insert reached the WAL, so its
/// position is later; the backend number keeps two backends reading one position apart.
pub fn next_hseq() -> i64 {
    let lsn = unsafe { pg_sys::GetXLogInsertRecPtr() } as i64;
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
        let layout = relation_layout(tabno);
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
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![true; natts];

        values[H_HSEQ] = pg_sys::Datum::from(next_hseq());
        nulls[H_HSEQ] = false;
        values[H_XID] = pg_sys::Datum::from(pg_sys::GetTopFullTransactionId().value);
        nulls[H_XID] = false;
        values[H_AT] = pg_sys::Datum::from(pg_sys::GetCurrentStatementStartTimestamp());
        nulls[H_AT] = false;
        values[H_OP] = pg_sys::Datum::from(op as i8);
        nulls[H_OP] = false;
        // tids are stored by reference: point at the tuples' own t_self, copied when the tuple is formed
        if !old_tuple.is_null() {
            values[H_OLD_TID] = pg_sys::Datum::from(&mut (*old_tuple).t_self as *mut pg_sys::ItemPointerData);
            nulls[H_OLD_TID] = false;
        }
        if !new_tuple.is_null() {
            values[H_NEW_TID] = pg_sys::Datum::from(&mut (*new_tuple).t_self as *mut pg_sys::ItemPointerData);
            nulls[H_NEW_TID] = false;
        }
        if let Some(src) = MERGE_SOURCE.with(|s| s.borrow().clone()) {
            values[H_SRC] = pgrx::IntoDatum::into_datum(src.as_str()).unwrap();
            nulls[H_SRC] = false;
        }
        let sdesc = (*rel).rd_att;
        for (i, src_attno) in layout.history_map.iter().enumerate() {
            let Some(src_attno) = *src_attno else { continue };
            if op == b'I' && !layout.key_attnos.contains(&src_attno) && !layout.key_attnos.is_empty() {
                continue;
            }
            if op == b'I' && layout.key_attnos.is_empty() {
                continue; // a table without a key is told apart by new_tid alone
            }
            let mut isnull = false;
            let d = pg_sys::heap_getattr(image, src_attno, sdesc, &mut isnull);
            values[H_FIXED + i] = d;
            nulls[H_FIXED + i] = isnull;
        }
        let tup = pg_sys::heap_form_tuple(hdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::simple_heap_insert(hist, tup);
        // the storage's indexes are on plain columns (the key, _w_xid): their values are the row's
        let mut ivalues = [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize];
        let mut inulls = [true; pg_sys::INDEX_MAX_KEYS as usize];
        for &(index, info) in indexes.iter() {
            for j in 0..(*info).ii_NumIndexAttrs as usize {
                let attno = (*info).ii_IndexAttrNumbers[j] as usize;
                ivalues[j] = values[attno - 1];
                inulls[j] = nulls[attno - 1];
            }
            pg_sys::index_insert(
                index,
                ivalues.as_mut_ptr(),
                inulls.as_mut_ptr(),
                &mut (*tup).t_self,
                hist,
                pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO,
                false,
                info,
            );
        }
        pg_sys::heap_freetuple(tup);
    }
}

/// A storage relation capture inserts into, open with its indexes for the rest of the transaction: opening
/// and closing them for every captured row (as CatalogTupleInsert does) was a fifth of capture's cost.
/// They belong to the top transaction's resource owner (an aborted subtransaction doesn't close them), and
/// are closed before commit and before any utility statement (DDL refuses a table the session holds open);
/// at abort Postgres closes them and they are only forgotten here.
struct Target {
    relid: pg_sys::Oid,
    rel: pg_sys::Relation,
    /// the indexes ready for inserts, each with its IndexInfo
    indexes: Rc<Vec<(pg_sys::Relation, *mut pg_sys::IndexInfo)>>,
}

thread_local! {
    static TARGETS: RefCell<Vec<Target>> = const { RefCell::new(Vec::new()) };
    /// a relcache invalidation arrived since they were opened: an index may have been added
    static TARGETS_STALE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

type IndexList = Rc<Vec<(pg_sys::Relation, *mut pg_sys::IndexInfo)>>;

unsafe fn open_target(relid: pg_sys::Oid) -> (pg_sys::Relation, IndexList) {
    unsafe {
        if TARGETS_STALE.with(|s| s.replace(false)) {
            close_targets();
        }
        if let Some(found) = TARGETS.with(|t| t.borrow().iter().find(|t| t.relid == relid).map(|t| (t.rel, t.indexes.clone()))) {
            return found;
        }
        // (the trigger runs in a per-row memory context: the IndexInfos must outlive it)
        let cxt = pg_sys::MemoryContextSwitchTo(pg_sys::TopTransactionContext);
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as i32);
        let mut indexes = Vec::new();
        let list = pg_sys::RelationGetIndexList(rel);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let index = pg_sys::index_open(pg_sys::list_nth_oid(list, i), pg_sys::RowExclusiveLock as i32);
            let info = pg_sys::BuildIndexInfo(index);
            if !(*info).ii_Expressions.is_null() || !(*info).ii_Predicate.is_null() {
                pg_sys::CurrentResourceOwner = owner;
                pg_sys::MemoryContextSwitchTo(cxt);
                crate::api::raise(
                    "0A000",
                    format!("pg_worlds: an index on expressions or with a predicate on history storage {} is not supported; drop it", relid.to_u32()),
                );
            }
            if (*info).ii_ReadyForInserts {
                indexes.push((index, info));
            } else {
                pg_sys::index_close(index, pg_sys::NoLock as i32);
            }
        }
        pg_sys::CurrentResourceOwner = owner;
        pg_sys::MemoryContextSwitchTo(cxt);
        let indexes = Rc::new(indexes);
        TARGETS.with(|t| t.borrow_mut().push(Target { relid, rel, indexes: indexes.clone() }));
        (rel, indexes)
    }
}

/// Closes the relations capture holds open (before commit, prepare, or a utility statement).
pub fn close_targets() {
    let targets = TARGETS.with(|t| std::mem::take(&mut *t.borrow_mut()));
    if targets.is_empty() {
        return;
    }
    unsafe {
        // released by the owner that holds them
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        for t in targets {
            for &(index, _) in t.indexes.iter() {
                pg_sys::index_close(index, pg_sys::NoLock as i32);
            }
            pg_sys::table_close(t.rel, pg_sys::NoLock as i32);
        }
        pg_sys::CurrentResourceOwner = owner;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => close_targets(),
        // the transaction's resource owner closes them
        XACT_EVENT_ABORT | XACT_EVENT_COMMIT | XACT_EVENT_PREPARE => TARGETS.with(|t| t.borrow_mut().clear()),
        _ => {}
    }
}

/// An index may have been added to a storage relation: reopen before the next insert.
pub fn on_relcache_invalidation() {
    TARGETS_STALE.with(|s| s.set(true));
}

pub fn register_callbacks() {
    unsafe { pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut()) }
}
