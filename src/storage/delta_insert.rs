//! A world's row version written into the delta with heap and index calls, as capture writes history
//! (capture.rs), instead of an INSERT through SPI: the SPI statement (executor start, a ModifyTable, its
//! projection) was about half of a world write's cost in its INSTEAD OF trigger.
//!
//! Only where that INSERT would run nothing but the storage itself: a delta with no CHECK constraint (the
//! table's, copied onto the delta), no trigger or rule, only plain btree indexes that are not unique
//! (what `_make_delta` makes), a table without generated columns (the delta computes them), and a table
//! with an integer key or no key (the cache's key of the row is then the integer itself, or none). The
//! row's values are the trigger's, already of the columns' types; the fixed columns get what their
//! defaults would (`_w_xid`: the top transaction's id, `_w_at`: the clock).
use super::Layout;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    /// delta relid -> may it be written directly; forgotten at any relcache invalidation of it
    static ELIGIBLE: RefCell<HashMap<pg_sys::Oid, bool>> = RefCell::new(HashMap::new());
}

pub fn on_relcache_invalidation(relid: pg_sys::Oid) {
    crate::storage::forget_relation(&ELIGIBLE, relid);
}

/// Can a version of this table's rows be written directly?
pub fn eligible(layout: &Layout) -> bool {
    if !layout.generated.is_empty() || !matches!(layout.key_kind, b'i' | b'r') || layout.delta == pg_sys::Oid::INVALID {
        return false;
    }
    if let Some(e) = ELIGIBLE.with(|e| e.borrow().get(&layout.delta).copied()) {
        return e;
    }
    let e = unsafe { delta_is_plain(layout.delta) };
    ELIGIBLE.with(|m| m.borrow_mut().insert(layout.delta, e));
    e
}

unsafe fn delta_is_plain(delta: pg_sys::Oid) -> bool {
    unsafe {
        let rel = pg_sys::table_open(delta, pg_sys::AccessShareLock as i32);
        let constr = (*(*rel).rd_att).constr;
        let mut plain = (constr.is_null() || (*constr).num_check == 0)
            && !(*(*rel).rd_rel).relhastriggers
            && !(*(*rel).rd_rel).relhasrules
            && (*rel).rd_rules.is_null();
        let list = pg_sys::RelationGetIndexList(rel);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            if !plain {
                break;
            }
            let index = pg_sys::index_open(crate::fast_ffi::list_nth_oid(list, i), pg_sys::AccessShareLock as i32);
            let ix = (*index).rd_index;
            plain = (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID
                && !(*ix).indisunique
                && !(*ix).indisexclusion
                && pg_sys::RelationGetIndexExpressions(index).is_null()
                && pg_sys::RelationGetIndexPredicate(index).is_null();
            pg_sys::index_close(index, pg_sys::AccessShareLock as i32);
        }
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        plain
    }
}

/// Writes one version: the row `tuple` (of the overlay view's descriptor `desc`, the table's columns by
/// name), as version `dseq` of world `world`, a tombstone when `del`.
///
/// # Safety
/// `tuple` is a valid tuple of `desc`; `eligible(layout)` holds.
pub unsafe fn insert(layout: &Layout, world: i32, dseq: i64, del: bool, desc: pg_sys::TupleDesc, tuple: pg_sys::HeapTuple) {
    unsafe {
        let (rel, indexes) = super::capture::open_target(layout.delta);
        let ddesc = (*rel).rd_att;
        let natts = (*ddesc).natts as usize;
        let vnatts = (*desc).natts as usize;
        let mut source = vec![pg_sys::Datum::from(0usize); vnatts];
        let mut source_nulls = vec![true; vnatts];
        pg_sys::heap_deform_tuple(tuple, desc, source.as_mut_ptr(), source_nulls.as_mut_ptr());
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![true; natts];
        let name_of = |d: pg_sys::TupleDesc, i: usize| {
            let a = &*(*d).attrs.as_ptr().add(i);
            (a.attisdropped, std::ffi::CStr::from_ptr(a.attname.data.as_ptr()))
        };
        for i in 0..natts {
            let (dropped, name) = name_of(ddesc, i);
            if dropped {
                continue;
            }
            let (v, n) = match name.to_bytes() {
                b"_w_world" => (pg_sys::Datum::from(world), false),
                b"_w_dseq" => (pg_sys::Datum::from(dseq), false),
                b"_w_xid" => (pg_sys::Datum::from(pg_sys::GetTopFullTransactionId().value), false),
                b"_w_at" => (pg_sys::Datum::from(pg_sys::GetCurrentTimestamp()), false),
                b"_w_del" => (pg_sys::Datum::from(del), false),
                b"_w_base_tid" | b"_w_of" => (pg_sys::Datum::from(0usize), true),
                _ => match (0..vnatts).find(|&j| name_of(desc, j) == (false, name)) {
                    Some(j) => (source[j], source_nulls[j]),
                    None => (pg_sys::Datum::from(0usize), true),
                },
            };
            values[i] = v;
            nulls[i] = n;
        }
        let tup = pg_sys::heap_form_tuple(ddesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::simple_heap_insert(rel, tup);
        for &(index, info) in indexes.iter() {
            let n = (*info).ii_NumIndexAttrs as usize;
            let mut v = [pg_sys::Datum::from(0usize); pg_sys::INDEX_MAX_KEYS as usize];
            let mut isnull = [true; pg_sys::INDEX_MAX_KEYS as usize];
            for j in 0..n {
                let attno = (*info).ii_IndexAttrNumbers[j] as usize;
                v[j] = values[attno - 1];
                isnull[j] = nulls[attno - 1];
            }
            pg_sys::index_insert(index, v.as_mut_ptr(), isnull.as_mut_ptr(), &mut (*tup).t_self, rel, pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO, false, info);
        }
        pg_sys::heap_freetuple(tup);
    }
}
