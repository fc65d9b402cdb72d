//! Whether a table's storage has rows of a kind, asked through an index without a query: a world's rows
//! in a delta (its `(_w_world, _w_xid)` index), main's changes since a transaction in a history or its
//! inserts (their `(_w_xid)` index). merge/gather.rs's first look at each tracked table, so that a
//! statement about one world costs little for each table it has nothing to do with (a query, in a
//! subtransaction of its own, was about 2.5 ms a table: a MERGE of one row in a database of 2,000 tracked
//! tables took 5 s).
use pgrx::prelude::*;

/// Has world `world` rows in delta `delta`, on the latest snapshot (every committed row, and this
/// transaction's up to its last command)? The delta and its index are locked ACCESS SHARE to look, and
/// released again whatever it finds: the caller locks the table before it reads its storage (the order
/// DROP TABLE takes them in). None: it can't be asked so (no such delta, or no valid index whose keys are
/// `(_w_world, _w_xid)`): the caller asks a query.
pub fn world_has_rows(delta: pg_sys::Oid, world: i32) -> Option<bool> {
    any_row(delta, &["_w_world", "_w_xid"], pg_sys::BTEqualStrategyNumber, pg_sys::F_INT4EQ, pg_sys::Datum::from(world))
}

/// Has history (or inserts) `rel` rows written by transactions numbered `xmin` or later (`_w_xid >=
/// xmin`), through its `(_w_xid)` index? As `world_has_rows`: on the latest snapshot, locks released,
/// None when it can't be asked so.
pub fn rows_since(rel: pg_sys::Oid, xmin: u64) -> Option<bool> {
    any_row(rel, &["_w_xid"], pg_sys::BTGreaterEqualStrategyNumber, pg_sys::F_XID8GE, pg_sys::Datum::from(xmin))
}

/// Has `relid` a row whose first index key (`keys[0]`) compares to `value` as `strategy` / `proc` say,
/// through its valid btree index on exactly `keys`?
fn any_row(relid: pg_sys::Oid, keys: &[&str], strategy: u32, proc: u32, value: pg_sys::Datum) -> Option<bool> {
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::try_relation_open(relid, lock);
        if rel.is_null() {
            return None;
        }
        let index = index_on(rel, keys);
        let Some(index) = index else {
            pg_sys::relation_close(rel, lock);
            return None;
        };
        let irel = pg_sys::index_open(index, lock);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut key, 1, strategy as u16, pg_sys::Oid::from(proc), value);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let scan = pg_sys::index_beginscan(rel, irel, snapshot, 1, 0);
        pg_sys::index_rescan(scan, &mut key, 1, std::ptr::null_mut(), 0);
        let found = pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
        pg_sys::index_endscan(scan);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::index_close(irel, lock);
        pg_sys::relation_close(rel, lock);
        Some(found)
    }
}

/// The relation's valid btree index whose keys are exactly the columns `keys`, in order (read from the
/// syscache: no lock taken on the indexes it passes over).
pub(super) unsafe fn index_on(rel: pg_sys::Relation, keys: &[&str]) -> Option<pg_sys::Oid> {
    unsafe {
        let relid = (*rel).rd_id;
        let mut attnums = Vec::new();
        for k in keys {
            let name = std::ffi::CString::new(*k).ok()?;
            let at = pg_sys::get_attnum(relid, name.as_ptr());
            if at <= 0 {
                return None;
            }
            attnums.push(at);
        }
        let list = pg_sys::RelationGetIndexList(rel);
        let mut found = None;
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let oid = crate::fast_ffi::list_nth_oid(list, i);
            let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::INDEXRELID as i32, pg_sys::Datum::from(oid));
            if tuple.is_null() {
                continue;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_index>(tuple);
            let have = (*form).indkey.values.as_ptr();
            let ok = (*form).indisvalid
                && (*form).indisready
                && (*form).indnkeyatts as usize == attnums.len()
                && attnums.iter().enumerate().all(|(i, &a)| *have.add(i) == a);
            pg_sys::ReleaseSysCache(tuple);
            if ok && am_of(oid) == pg_sys::BTREE_AM_OID {
                found = Some(oid);
                break;
            }
        }
        pg_sys::list_free(list);
        found
    }
}

/// A relation's access method (pg_class.relam), from the syscache.
unsafe fn am_of(relid: pg_sys::Oid) -> pg_sys::Oid {
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid));
        if tuple.is_null() {
            return pg_sys::Oid::INVALID;
        }
        let am = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple)).relam;
        pg_sys::ReleaseSysCache(tuple);
        am
    }
}
