//! The world part's catch-up without a query: the world's delta versions written by transactions its
//! frontier (the snapshot the part was last read on) didn't see, read through the delta's
//! `(_w_world, _w_xid)` index on the statement's snapshot. The same rows the catch-up query reads
//! (`_w_world = $1 AND _w_xid >= xmin(frontier) AND NOT pg_visible_in_snapshot(_w_xid, frontier)`), but
//! planning that query, a custom plan each time, was most of its cost: in a world several sessions
//! write, every statement after another writer's commit ran it, once per table read.
use super::*;

/// One version the catch-up brings: (dseq, deleted, key, base tid packed as the cache keeps tids, of).
pub(super) type DeltaRow = (i64, bool, Option<Key>, Option<u64>, Option<i64>);

/// What the catch-up reads of a delta: its (_w_world, _w_xid) index and the attnums of the columns it
/// reads, looked up once per delta (forgotten at a relcache invalidation of it).
#[derive(Clone, Copy)]
struct Meta {
    index: pg_sys::Oid,
    xid: i16,
    dseq: i16,
    del: i16,
    base: i16,
    of: i16,
    /// the integer key's attnum (0: a table without a key)
    key: i16,
    key_type: pg_sys::Oid,
}

thread_local! {
    /// delta relid -> its Meta, or None when the catch-up can't read it so
    static META: std::cell::RefCell<HashMap<pg_sys::Oid, Option<Meta>>> = std::cell::RefCell::new(HashMap::new());
}

pub(crate) fn on_relcache_invalidation(relid: pg_sys::Oid) {
    crate::storage::forget_relation(&META, relid);
}

unsafe fn meta_of(layout: &Layout) -> Option<Meta> {
    if let Some(m) = META.with(|m| m.borrow().get(&layout.delta).copied()) {
        return m;
    }
    let m = unsafe { look_up_meta(layout) };
    META.with(|c| c.borrow_mut().insert(layout.delta, m));
    m
}

unsafe fn look_up_meta(layout: &Layout) -> Option<Meta> {
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(layout.delta, lock);
        let attno = |name: &str| {
            let c = std::ffi::CString::new(name).unwrap_or_default();
            pg_sys::get_attnum(layout.delta, c.as_ptr())
        };
        let (world_at, dseq_at, xid_at, del_at, base_at, of_at) = (attno("_w_world"), attno("_w_dseq"), attno("_w_xid"), attno("_w_del"), attno("_w_base_tid"), attno("_w_of"));
        let key_at = if layout.key_kind == b'i' { attno(&layout.key_columns[0]) } else { 0 };
        let mut index = pg_sys::Oid::INVALID;
        let list = pg_sys::RelationGetIndexList(rel);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let ix = pg_sys::index_open(crate::fast_ffi::list_nth_oid(list, i), lock);
            let form = (*ix).rd_index;
            let keys = (*form).indkey.values.as_ptr();
            let found = (*form).indnkeyatts == 2 && *keys == world_at && *keys.add(1) == xid_at && (*(*ix).rd_rel).relam == pg_sys::BTREE_AM_OID;
            if found {
                index = (*ix).rd_id;
            }
            pg_sys::index_close(ix, lock);
            if found {
                break;
            }
        }
        let key_type = if key_at > 0 { (*(*(*rel).rd_att).attrs.as_ptr().add(key_at as usize - 1)).atttypid } else { pg_sys::Oid::INVALID };
        pg_sys::table_close(rel, lock);
        if index == pg_sys::Oid::INVALID || [dseq_at, del_at, base_at, of_at].contains(&0) || (layout.key_kind == b'i' && key_at <= 0) {
            return None;
        }
        if key_at > 0 && !matches!(key_type, pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID) {
            return None;
        }
        Some(Meta { index, xid: xid_at, dseq: dseq_at, del: del_at, base: base_at, of: of_at, key: key_at, key_type })
    }
}

/// The delta's versions of `world` the frontier didn't see, or None when they can't be read this way (a
/// key that isn't an integer, no such index, no active snapshot): the caller runs its query then.
pub(super) fn delta_since(layout: &Layout, world: i32, frontier: &str) -> Option<Vec<DeltaRow>> {
    if !matches!(layout.key_kind, b'i' | b'r') || (layout.key_kind == b'i' && layout.key_columns.len() != 1) {
        return None;
    }
    let f = worlds_core::snapshot::Snapshot::parse(frontier)?;
    unsafe {
        if !crate::fast_ffi::ActiveSnapshotSet() {
            return None;
        }
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let m = meta_of(layout)?;
        let (xid_at, dseq_at, del_at, base_at, of_at, key_at, key_type) = (m.xid, m.dseq, m.del, m.base, m.of, m.key, m.key_type);
        let rel = pg_sys::table_open(layout.delta, lock);
        let index = pg_sys::index_open(m.index, lock);
        let mut keys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut keys[0], 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_INT4EQ), pg_sys::Datum::from(world));
        pg_sys::ScanKeyInit(&mut keys[1], 2, pg_sys::BTGreaterEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_XID8GE), pg_sys::Datum::from(f.xmin));
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let scan = pg_sys::index_beginscan(rel, index, crate::fast_ffi::GetActiveSnapshot(), 2, 0);
        pg_sys::index_rescan(scan, keys.as_mut_ptr(), 2, std::ptr::null_mut(), 0);
        let mut out = Vec::new();
        let get = |slot: *mut pg_sys::TupleTableSlot, at: i16| -> Option<pg_sys::Datum> {
            let mut isnull = false;
            let d = crate::fast_ffi::slot_getattr(slot, at as i32, &mut isnull);
            (!isnull).then_some(d)
        };
        while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            let Some(xid) = get(slot, xid_at) else { continue };
            if f.visible(xid.value() as u64) {
                continue;
            }
            let Some(dseq) = get(slot, dseq_at) else { continue };
            let key = if key_at > 0 { get(slot, key_at).and_then(|d| crate::datum::integer_of(key_type, d)).map(Key::I) } else { None };
            out.push((dseq.value() as i64, get(slot, del_at).is_some_and(|d| d.value() != 0), key, get(slot, base_at).map(|d| tid_of_datum(d)), get(slot, of_at).map(|d| d.value() as i64)));
        }
        pg_sys::index_endscan(scan);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        // (the locks are kept to the transaction's end, as a query's would be)
        pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        Some(out)
    }
}
