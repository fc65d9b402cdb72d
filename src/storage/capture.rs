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

/// A storage relation capture inserts into, open with its indexes across the transaction's rows: opening
/// and closing them for every captured row (as CatalogTupleInsert does) was a fifth of capture's cost. They
/// belong to the top transaction's resource owner and are closed before commit and prepare, when a
/// subtransaction aborts (a relation it created would otherwise stay referenced), and before a utility
/// statement (DDL refuses a table the session holds open); at a top-level abort Postgres closes them and
/// they are only forgotten here. Their IndexInfos live in a memory context deleted when they are closed.
struct Target {
    relid: pg_sys::Oid,
    rel: pg_sys::Relation,
    /// the indexes ready for inserts, each with its IndexInfo
    indexes: IndexList,
}

type IndexList = Rc<Vec<(pg_sys::Relation, *mut pg_sys::IndexInfo)>>;

struct Held {
    targets: Vec<Target>,
    /// relations opened by an `open_target` that hasn't finished (an error may stop it halfway)
    opening: Vec<pg_sys::Relation>,
    /// holds the IndexInfos and index lists (a child of the transaction's context)
    cxt: pg_sys::MemoryContext,
}

thread_local! {
    static HELD: RefCell<Held> = const { RefCell::new(Held { targets: Vec::new(), opening: Vec::new(), cxt: std::ptr::null_mut() }) };
    /// a relcache invalidation arrived since they were opened: an index may have been added
    static TARGETS_STALE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

unsafe fn open_target(relid: pg_sys::Oid) -> (pg_sys::Relation, IndexList) {
    unsafe {
        if TARGETS_STALE.with(|s| s.replace(false)) {
            close_targets();
        }
        if let Some(found) = HELD.with(|h| h.borrow().targets.iter().find(|t| t.relid == relid).map(|t| (t.rel, t.indexes.clone()))) {
            return found;
        }
        let mut cxt = HELD.with(|h| h.borrow().cxt);
        if cxt.is_null() {
            cxt = pg_sys::AllocSetContextCreateInternal(pg_sys::TopTransactionContext, c"pg_worlds capture".as_ptr(), 0, 8 * 1024, 8 * 1024 * 1024);
            HELD.with(|h| h.borrow_mut().cxt = cxt);
        }
        let old_cxt = pg_sys::MemoryContextSwitchTo(cxt);
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::CurrentResourceOwner = pg_sys::TopTransactionResourceOwner;
        let restore = || {
            pg_sys::CurrentResourceOwner = owner;
            pg_sys::MemoryContextSwitchTo(old_cxt);
        };
        let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as i32);
        HELD.with(|h| h.borrow_mut().opening.push(rel));
        let mut indexes = Vec::new();
        let list = pg_sys::RelationGetIndexList(rel);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let index = pg_sys::index_open(pg_sys::list_nth_oid(list, i), pg_sys::RowExclusiveLock as i32);
            HELD.with(|h| h.borrow_mut().opening.push(index));
            let info = pg_sys::BuildIndexInfo(index);
            if !(*info).ii_Expressions.is_null() || !(*info).ii_Predicate.is_null() {
                restore();
                let name = std::ffi::CStr::from_ptr((*(*index).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
                crate::api::raise(
                    "0A000",
                    format!("pg_worlds: capture can't fill index \"{name}\" of history storage (on expressions or with a predicate); drop it"),
                );
            }
            if (*info).ii_ReadyForInserts {
                indexes.push((index, info));
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

/// Closes the relations capture holds open and frees what described them (before commit, prepare, a
/// utility statement, or when a subtransaction aborts).
pub fn close_targets() {
    let (targets, opening, cxt) = HELD.with(|h| {
        let mut h = h.borrow_mut();
        (std::mem::take(&mut h.targets), std::mem::take(&mut h.opening), std::mem::replace(&mut h.cxt, std::ptr::null_mut()))
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
        if !cxt.is_null() {
            pg_sys::MemoryContextDelete(cxt);
        }
    }
}

/// Forgets them: the transaction's end closes them and frees its memory.
fn forget_targets() {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        h.targets.clear();
        h.opening.clear();
        h.cxt = std::ptr::null_mut();
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => close_targets(),
        XACT_EVENT_ABORT | XACT_EVENT_COMMIT | XACT_EVENT_PREPARE => forget_targets(),
        _ => {}
    }
}

/// An index may have been added to a storage relation: reopen before the next insert.
pub fn on_relcache_invalidation() {
    TARGETS_STALE.with(|s| s.set(true));
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
    }
}
