//! pg_worlds' reads of its own catalog (`worlds.world`, `worlds.tables`, `worlds.world_twin`) inside a
//! SERIALIZABLE transaction, without predicate locks.
//!
//! Postgres takes no predicate (SIRead) lock on its system catalogs; pg_worlds' catalog is ordinary tables,
//! and a read of them on an MVCC snapshot in a serializable transaction takes such locks. Every commit in a
//! world updates the world's row, so a serializable transaction that had read it (to find the session's
//! world) had a read/write conflict with every other session's commit in that world, and two serializable
//! writers of different rows of one world failed each other with 40001 where two in main don't. These
//! reads are pg_worlds' bookkeeping, not the user's data (whose reads keep their locks: the delta's rows
//! and pages, main's rows), so they scan every version (`SnapshotAny`, which takes no predicate lock) and
//! test each against the snapshot themselves, under the buffer's lock, as an MVCC scan would.
//!
//! Outside a serializable transaction the callers keep their usual queries (`scan_tuples`, which the
//! world's row is always read with, then scans on the snapshot itself).
use pgrx::prelude::*;

/// Is this a SERIALIZABLE transaction (whose reads on an MVCC snapshot take predicate locks)?
pub(crate) fn serializable() -> bool {
    unsafe { pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32 }
}

/// A table of pg_worlds' catalog (schema `worlds`) by name; InvalidOid when there is none.
pub(crate) fn catalog_table(name: &std::ffi::CStr) -> pg_sys::Oid {
    unsafe {
        let ns = pg_sys::get_namespace_oid(c"worlds".as_ptr(), true);
        if ns == pg_sys::Oid::INVALID {
            return pg_sys::Oid::INVALID;
        }
        pg_sys::get_relname_relid(name.as_ptr(), ns)
    }
}

/// One visible row: its columns by attnum (1-based), as deformed from the tuple (valid during the call).
pub(crate) struct CatalogRow<'a> {
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
    desc: pg_sys::TupleDesc,
}

impl CatalogRow<'_> {
    /// The column named `name`, None when NULL or no such column.
    pub(crate) fn get(&self, name: &str) -> Option<pg_sys::Datum> {
        let at = self.attnum(name)?;
        (!self.nulls[at]).then(|| self.values[at])
    }

    pub(crate) fn is_null(&self, name: &str) -> bool {
        self.get(name).is_none()
    }

    pub(crate) fn int4(&self, name: &str) -> Option<i32> {
        self.get(name).map(|d| d.value() as i32)
    }

    pub(crate) fn int8(&self, name: &str) -> Option<i64> {
        self.get(name).map(|d| d.value() as i64)
    }

    pub(crate) fn bool(&self, name: &str) -> Option<bool> {
        self.get(name).map(|d| d.value() != 0)
    }

    pub(crate) fn oid(&self, name: &str) -> Option<pg_sys::Oid> {
        self.get(name).map(|d| pg_sys::Oid::from(d.value() as u32))
    }

    /// The column as its type's output function writes it.
    pub(crate) fn text(&self, name: &str) -> Option<String> {
        let at = self.attnum(name)?;
        if self.nulls[at] {
            return None;
        }
        unsafe {
            let att = &*(*self.desc).attrs.as_ptr().add(at);
            let (mut out, mut varlena) = (pg_sys::Oid::INVALID, false);
            pg_sys::getTypeOutputInfo(att.atttypid, &mut out, &mut varlena);
            let c = pg_sys::OidOutputFunctionCall(out, self.values[at]);
            Some(std::ffi::CStr::from_ptr(c).to_string_lossy().into_owned())
        }
    }

    fn attnum(&self, name: &str) -> Option<usize> {
        unsafe {
            (0..(*self.desc).natts as usize).find(|&i| {
                let att = &*(*self.desc).attrs.as_ptr().add(i);
                !att.attisdropped && std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_bytes() == name.as_bytes()
            })
        }
    }
}

/// Calls `f` for each tuple of `rel` visible to `snapshot`, through index `index` with `keys` (their attnos
/// the table's columns, as `systable_beginscan` takes them) or, with no index, by a scan of the table; `f`
/// returns false to stop. In a SERIALIZABLE transaction every version is scanned (`SnapshotAny`) and each
/// tested against `snapshot` under its buffer's lock, so no predicate lock is taken (the module's comment);
/// otherwise the scan is on `snapshot` itself.
///
/// # Safety
/// Inside a transaction; `rel` open; `snapshot` an MVCC snapshot registered or active for the call's length.
pub(crate) unsafe fn scan_tuples(
    rel: pg_sys::Relation,
    index: pg_sys::Oid,
    keys: &mut [pg_sys::ScanKeyData],
    snapshot: pg_sys::Snapshot,
    mut f: impl FnMut(pg_sys::HeapTuple) -> bool,
) {
    unsafe {
        let any = serializable();
        let scan_snapshot = if any { &raw mut pg_sys::SnapshotAnyData } else { snapshot };
        let scan = pg_sys::systable_beginscan(rel, index, index != pg_sys::Oid::INVALID, scan_snapshot, keys.len() as i32, keys.as_mut_ptr());
        let satisfies = (*(*rel).rd_tableam).tuple_satisfies_snapshot.expect("a table access method tests visibility");
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            if any && !satisfies(rel, (*scan).slot, snapshot) {
                continue;
            }
            if !f(tuple) {
                break;
            }
        }
        pg_sys::systable_endscan(scan);
    }
}

/// `scan_tuples` over catalog table `relid`, each row deformed into a `CatalogRow`.
///
/// # Safety
/// As `scan_tuples`.
pub(crate) unsafe fn visible_rows(
    relid: pg_sys::Oid,
    index: pg_sys::Oid,
    keys: &mut [pg_sys::ScanKeyData],
    snapshot: pg_sys::Snapshot,
    mut f: impl FnMut(&CatalogRow) -> bool,
) {
    unsafe {
        let rel = pg_sys::table_open(relid, pg_sys::AccessShareLock as i32);
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![true; natts];
        scan_tuples(rel, index, keys, snapshot, |tuple| {
            pg_sys::heap_deform_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            f(&CatalogRow { values: &values, nulls: &nulls, desc })
        });
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
    }
}

/// An equality key on column `attno` for `visible_rows` (`proc`: the type's equality function).
pub(crate) fn key_eq(attno: i16, proc: u32, value: pg_sys::Datum) -> pg_sys::ScanKeyData {
    unsafe {
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(&mut key, attno, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(proc), value);
        key
    }
}

/// `f` of world `num`'s row (`worlds.world`, through its primary key) on the transaction's snapshot, what
/// a catalog query in the transaction reads; None when there is none.
pub(crate) fn world_by_num<R>(num: i32, f: impl FnOnce(&CatalogRow) -> R) -> Option<R> {
    let relid = catalog_table(c"world");
    if relid == pg_sys::Oid::INVALID {
        return None;
    }
    let mut f = Some(f);
    let mut out = None;
    unsafe {
        let rel = pg_sys::table_open(relid, pg_sys::AccessShareLock as i32);
        let pkey = pg_sys::RelationGetPrimaryKeyIndex(rel);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
        let mut keys = [key_eq(pg_sys::get_attnum(relid, c"num".as_ptr()), pg_sys::F_INT4EQ, pg_sys::Datum::from(num))];
        visible_rows(relid, pkey, &mut keys, pg_sys::GetTransactionSnapshot(), |r| {
            if r.int4("num") != Some(num) {
                return true;
            }
            out = f.take().map(|f| f(r));
            false
        });
    }
    out
}

/// The first row of catalog table `relid` visible to `snapshot` through `index` and `keys`, as a composite
/// datum of the table's row type (in the current memory context), for a query that takes the row as a
/// parameter instead of reading the table (`($1::worlds.tables).*`).
///
/// # Safety
/// As `scan_tuples`.
pub(crate) unsafe fn row_datum(relid: pg_sys::Oid, index: pg_sys::Oid, keys: &mut [pg_sys::ScanKeyData], snapshot: pg_sys::Snapshot) -> Option<pg_sys::Datum> {
    let mut out = None;
    unsafe {
        let rel = pg_sys::table_open(relid, pg_sys::AccessShareLock as i32);
        scan_tuples(rel, index, keys, snapshot, |tuple| {
            out = Some(pg_sys::heap_copy_tuple_as_datum(tuple, (*rel).rd_att));
            false
        });
        pg_sys::table_close(rel, pg_sys::AccessShareLock as i32);
    }
    out
}
