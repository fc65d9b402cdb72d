//! A world write's key checks without a query, for a table with one integer key column (writes.rs asks;
//! other keys are checked by queries there):
//!
//! - the world's latest version of a key: the delta's `(key, _w_dseq)` index read backwards from the key's
//!   highest version to the first of this world's;
//! - main's row of a key: main's btree index on the key column (its primary key's), every row visible to
//!   the snapshot given, which the caller filters by what the world hides of main.
//!
//! Queries did the same through SPI and the overlay view: three of them were half a one-row INSERT
//! transaction in a world (counted: 265 k of 561 k instructions). Here they are index probes on relations
//! the statement has open already. What they see is the snapshot the caller passes, as the queries did.
use super::Layout;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

/// Where one table's probes look, found once per backend (forgotten at a relcache invalidation of any of
/// the relations).
#[derive(Clone, Copy)]
struct Meta {
    /// the delta and its (key, _w_dseq) index
    delta: pg_sys::Oid,
    version_index: pg_sys::Oid,
    world_at: i16,
    dseq_at: i16,
    del_at: i16,
    /// main's table and a valid btree index on its key column alone
    relid: pg_sys::Oid,
    main_index: pg_sys::Oid,
    /// the key column's type (int2, int4 or int8), in main and in the delta
    key_type: pg_sys::Oid,
}

impl Meta {
    fn names(&self, relid: pg_sys::Oid) -> bool {
        [self.delta, self.version_index, self.relid, self.main_index].contains(&relid)
    }
}

thread_local! {
    /// tabno -> (the relations the answer depends on, where to probe: None when the table can't be probed)
    static META: RefCell<HashMap<i32, (pg_sys::Oid, pg_sys::Oid, Option<Meta>)>> = RefCell::new(HashMap::new());
}

pub(crate) fn on_relcache_invalidation(relid: pg_sys::Oid) {
    META.with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            if relid == pg_sys::Oid::INVALID {
                m.clear();
            } else {
                m.retain(|_, (relid_of, delta, meta)| *relid_of != relid && *delta != relid && !meta.is_some_and(|m| m.names(relid)));
            }
        }
    });
}

fn meta_of(layout: &Layout) -> Option<Meta> {
    if let Some((_, _, m)) = META.with(|m| m.borrow().get(&layout.tabno).copied()) {
        return m;
    }
    let m = unsafe { look_up(layout) };
    META.with(|c| c.borrow_mut().insert(layout.tabno, (layout.relid, layout.delta, m)));
    m
}

unsafe fn look_up(layout: &Layout) -> Option<Meta> {
    if layout.key_kind != b'i' || layout.key_columns.len() != 1 || layout.delta == pg_sys::Oid::INVALID {
        return None;
    }
    let key = layout.key_columns[0].as_str();
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let attno = |relid: pg_sys::Oid, name: &str| {
            let c = std::ffi::CString::new(name).unwrap_or_default();
            pg_sys::get_attnum(relid, c.as_ptr())
        };
        let type_of = |relid: pg_sys::Oid, at: i16| if at > 0 { pg_sys::get_atttype(relid, at) } else { pg_sys::Oid::INVALID };
        let (world_at, dseq_at, del_at, delta_key_at) = (attno(layout.delta, "_w_world"), attno(layout.delta, "_w_dseq"), attno(layout.delta, "_w_del"), attno(layout.delta, key));
        let key_type = type_of(layout.relid, attno(layout.relid, key));
        if [world_at, dseq_at, del_at, delta_key_at].contains(&0)
            || !matches!(key_type, pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID)
            || type_of(layout.delta, delta_key_at) != key_type
        {
            return None;
        }
        let delta = pg_sys::try_relation_open(layout.delta, lock);
        if delta.is_null() {
            return None;
        }
        let version_index = super::index_probe::index_on(delta, &[key, "_w_dseq"]);
        pg_sys::relation_close(delta, lock);
        let main = pg_sys::try_relation_open(layout.relid, lock);
        if main.is_null() {
            return None;
        }
        // (a partitioned table's index has no storage of its own to probe)
        let plain = (*(*main).rd_rel).relkind == pg_sys::RELKIND_RELATION as std::ffi::c_char;
        let main_index = if plain { super::index_probe::index_on(main, &[key]) } else { None };
        pg_sys::relation_close(main, lock);
        Some(Meta { delta: layout.delta, version_index: version_index?, world_at, dseq_at, del_at, relid: layout.relid, main_index: main_index?, key_type })
    }
}

/// A scan key: the index's first column equal to `key`, compared as its type.
unsafe fn equal_key(key_type: pg_sys::Oid, key: i64) -> pg_sys::ScanKeyData {
    let (proc, datum) = match key_type {
        pg_sys::INT2OID => (pg_sys::F_INT2EQ, pg_sys::Datum::from(key as i16)),
        pg_sys::INT4OID => (pg_sys::F_INT4EQ, pg_sys::Datum::from(key as i32)),
        _ => (pg_sys::F_INT8EQ, pg_sys::Datum::from(key)),
    };
    unsafe {
        let mut k: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut k, 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(proc), datum);
        k
    }
}

/// How a table's keys are probed: None when they can't be (the caller runs its queries).
pub(super) fn probe(layout: &Layout) -> Option<Probe> {
    meta_of(layout).map(Probe)
}

/// Where one table's keys are probed.
pub(super) struct Probe(Meta);

impl Probe {
    /// World `world`'s latest version of integer key `key` in the delta that `snapshot` sees: (its number, a
    /// tombstone?), None when it has none. Only the key's versions are read, newest first, up to this world's.
    pub(super) fn latest_version(&self, world: i32, key: i64, snapshot: pg_sys::Snapshot) -> Option<(i64, bool)> {
        let m = self.0;
        let mut found = None;
        unsafe {
            rows_of_key(m.delta, m.version_index, m.key_type, key, snapshot, pg_sys::ScanDirection::BackwardScanDirection, |slot| {
                let get = |at: i16| {
                    let mut isnull = false;
                    let d = crate::fast_ffi::slot_getattr(slot, at as i32, &mut isnull);
                    (!isnull).then_some(d)
                };
                if get(m.world_at).map(|d| d.value() as i32) != Some(world) {
                    return true;
                }
                found = get(m.dseq_at).map(|d| (d.value() as i64, get(m.del_at).is_some_and(|d| d.value() != 0)));
                false
            })
        };
        found
    }

    /// The positions (tids packed as the overlay cache keeps them) of main's rows with integer key `key` that
    /// `snapshot` sees: the world sees those main didn't create since its fork.
    pub(super) fn main_rows(&self, key: i64, snapshot: pg_sys::Snapshot) -> Vec<u64> {
        let m = self.0;
        let mut out = Vec::new();
        unsafe {
            rows_of_key(m.relid, m.main_index, m.key_type, key, snapshot, pg_sys::ScanDirection::ForwardScanDirection, |slot| {
                out.push(super::overlay::pack_tid(&(*slot).tts_tid));
                true
            })
        };
        out
    }
}

/// The rows of `relid` that `snapshot` sees whose first column of btree `index` equals `key`, in `direction`,
/// each given to `visit` until it returns false. The relation and index are locked ACCESS SHARE and the locks
/// kept to the transaction's end, as a query's would be.
unsafe fn rows_of_key(
    relid: pg_sys::Oid,
    index: pg_sys::Oid,
    key_type: pg_sys::Oid,
    key: i64,
    snapshot: pg_sys::Snapshot,
    direction: pg_sys::ScanDirection::Type,
    mut visit: impl FnMut(*mut pg_sys::TupleTableSlot) -> bool,
) {
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(relid, lock);
        let index = pg_sys::index_open(index, lock);
        let mut scan_key = equal_key(key_type, key);
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let scan = pg_sys::index_beginscan(rel, index, snapshot, 1, 0);
        pg_sys::index_rescan(scan, &mut scan_key, 1, std::ptr::null_mut(), 0);
        while pg_sys::index_getnext_slot(scan, direction, slot) && visit(slot) {}
        pg_sys::index_endscan(scan);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
    }
}

impl Probe {
    /// Under SERIALIZABLE: the predicate lock a read of integer key `key` in a world takes, on the delta's
    /// `(key, _w_dseq)` index page where a new version of the key would go (the key's last entry, or where
    /// it would be: a backward scan's first page), whether or not any version is there.
    fn lock_key(&self, key: i64, snapshot: pg_sys::Snapshot) {
        let m = self.0;
        unsafe { rows_of_key(m.delta, m.version_index, m.key_type, key, snapshot, pg_sys::ScanDirection::BackwardScanDirection, |_| false) };
    }
}

/// In a SERIALIZABLE transaction, the predicate locks a read of a world's part of a table takes. The world
/// scan reads that part from the overlay cache, which an earlier statement (or transaction) loaded or which
/// knows a key has no version: such a read touches no delta page, so a concurrent world writer's new
/// version would meet no lock of this transaction, and a write skew across two sessions of worlds would go
/// undetected. For keys read one by one (`keys`), the delta's index page where a new version of each would
/// go (`Probe::lock_key`); otherwise the delta whole (`PredicateLockRelation`, what a sequential scan of it
/// takes). A concurrent world writer's new version then meets them as a write of main's rows meets main's
/// scan's predicate locks.
pub fn lock_world_part(layout: &Layout, keys: Option<&[i64]>, snapshot: pg_sys::Snapshot) {
    if layout.delta == pg_sys::Oid::INVALID {
        return;
    }
    match (keys, probe(layout)) {
        (Some(keys), Some(p)) => {
            for &k in keys {
                p.lock_key(k, snapshot);
            }
        }
        _ => unsafe {
            let rel = pg_sys::table_open(layout.delta, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            guarded::PredicateLockRelation(rel, snapshot);
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        },
    }
}

/// predicate.h's calls, which pgrx's bindings leave out (called guarded: they raise an ERROR when the
/// predicate lock table is full).
mod guarded {
    use pgrx::prelude::*;
    mod raw {
        use pgrx::prelude::*;
        unsafe extern "C-unwind" {
            pub fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot);
        }
    }

    #[allow(non_snake_case)]
    pub unsafe fn PredicateLockRelation(relation: pg_sys::Relation, snapshot: pg_sys::Snapshot) {
        unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| raw::PredicateLockRelation(relation, snapshot)) }
    }
}
