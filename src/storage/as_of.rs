//! AS OF's helpers in C: which physical rows main created since a moment (a hash set per statement), and
//! a dropped column's value still held by a row unchanged since. See worlds._as_of_query.
use super::overlay::{exec_gen, tid_of_datum, BackendLocal, FastMap, FastSet, FxBuild};
use super::snapshot_spi;
use super::{as_internal, relation_layout};
use crate::api::raise;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

pgrx::extension_sql!(
    r#"
CREATE FUNCTION worlds._created_since(rel oid, at timestamptz, row_tid tid) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_created_since' LANGUAGE c STABLE STRICT PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._dropped_value(rel oid, row_tid tid, attnum int2, hint anyelement) RETURNS anyelement
    AS 'MODULE_PATHNAME', 'worlds_dropped_value' LANGUAGE c STABLE PARALLEL RESTRICTED;
"#,
    name = "as_of_functions",
    requires = ["catalog"],
);

/// Per statement: the physical rows main created since a moment, per (table, moment) — AS OF hides them.
/// (table OID, moment) -> (the statement it was read for, the tids created since)
type CreatedSince = FastMap<(u32, i64), (u64, FastSet<u64>)>;
static CREATED_SINCE: BackendLocal<RefCell<CreatedSince>> =
    BackendLocal::new(RefCell::new(HashMap::with_hasher(FxBuild::new())));

v1!(pg_finfo_worlds_created_since);
/// `worlds._created_since(rel, at, row_tid)`: did main create this physical row after `at`? (AS OF reads
/// the rows it didn't.) The set of such rows is read from history once per statement and kept in a hash
/// set: a hashed probe per row, the cost of reading a table as it was.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_created_since(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let relid = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as u32;
        let at = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1).value() as i64;
        let tid = tid_of_datum(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2));
        let gen = exec_gen();
        let hit = CREATED_SINCE.with(|c| match c.borrow().get(&(relid, at)) {
            Some((g, set)) if *g == gen => Some(set.contains(&tid)),
            _ => None,
        });
        if let Some(h) = hit {
            return pg_sys::Datum::from(h);
        }
        let oid = pg_sys::Oid::from(relid);
        if pg_sys::pg_class_aclcheck(oid, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
            raise("42501", format!("permission denied for table {}", relid));
        }
        let Some(&tabno) = super::tracked_tables().get(&oid) else {
            raise("42809", "AS OF reads tracked tables");
        };
        let layout = relation_layout(tabno);
        let sql = format!("SELECT c._w_new_tid FROM {} c WHERE c._w_at > $1 AND c._w_new_tid IS NOT NULL", layout.history_name);
        let tids = as_internal(|| {
            snapshot_spi::query(&sql, &[pg_sys::TIMESTAMPTZOID], &[Some(pg_sys::Datum::from(at))], |row| {
                row.raw(1).map(|d| tid_of_datum(d))
            })
        });
        let set: FastSet<u64> = tids.into_iter().flatten().collect();
        let found = set.contains(&tid);
        CREATED_SINCE.with(|c| {
            let mut c = c.borrow_mut();
            c.retain(|_, (g, _)| *g == gen);
            c.insert((relid, at), (gen, set));
        });
        pg_sys::Datum::from(found)
    }
}

v1!(pg_finfo_worlds_dropped_value);
/// AS OF a moment before a column was dropped: a row unchanged since still holds the dropped column's
/// value in the heap (DROP COLUMN only marks the attribute dropped; length and alignment stay known), so
/// it is read from the row version at `row_tid`. The caller names the column's type with `hint`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_dropped_value(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let null = |fcinfo: pg_sys::FunctionCallInfo| {
            (*fcinfo).isnull = true;
            pg_sys::Datum::from(0usize)
        };
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, 0) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 1) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 2) {
            return null(fcinfo);
        }
        let relid = pg_sys::Oid::from(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as u32);
        let tid = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1).cast_mut_ptr::<pg_sys::ItemPointerData>();
        let attnum = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2).value() as i16 as i32;
        // the row is read as the caller: only with the right to read the table
        if pg_sys::pg_class_aclcheck(relid, pg_sys::GetUserId(), pg_sys::ACL_SELECT as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
            raise("42501", "permission denied to read a dropped column of this table");
        }
        let rel = pg_sys::relation_open(relid, pg_sys::AccessShareLock as i32);
        let desc = (*rel).rd_att;
        if attnum < 1 || attnum > (*desc).natts {
            pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
            return null(fcinfo);
        }
        let att = &*(*desc).attrs.as_ptr().add(attnum as usize - 1);
        // the column is read as the hint's type: only the column's own type (a dropped column's, as
        // worlds.column_log recorded it), never another one read over its bytes
        let hint = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 3);
        let same_type = if att.attisdropped { dropped_column_is(relid, attnum as i16, hint) } else { att.atttypid == hint };
        if !same_type {
            pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
            raise("42804", format!("column {attnum} of relation {} is not of type {}", relid.to_u32(), hint.to_u32()));
        }
        // a row position past the table's end holds no row (heap_fetch would fail to read the block)
        let block = ((*tid).ip_blkid.bi_hi as u32) << 16 | (*tid).ip_blkid.bi_lo as u32;
        if block >= pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM) {
            pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
            return null(fcinfo);
        }
        let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
        tuple.t_self = *tid;
        let mut buffer: pg_sys::Buffer = 0;
        let found = pg_sys::heap_fetch(rel, crate::fast_ffi::GetActiveSnapshot(), &mut tuple, &mut buffer, false);
        let mut result = None;
        if found {
            let mut isnull = false;
            let d = pg_sys::heap_getattr(&mut tuple, attnum, desc, &mut isnull);
            if !isnull {
                result = Some(super::datum_copy(d, att.attbyval, att.attlen as i32));
            }
            pg_sys::ReleaseBuffer(buffer);
        }
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        match result {
            Some(d) => d,
            None => null(fcinfo),
        }
    }
}


/// Per statement: whether a dropped column (table, attnum) was of a type (worlds.column_log's record).
type DroppedTypes = FastMap<(u32, i16, u32), (u64, bool)>;
static DROPPED_TYPES: BackendLocal<RefCell<DroppedTypes>> = BackendLocal::new(RefCell::new(HashMap::with_hasher(FxBuild::new())));

/// Was this dropped column of type `typ`, as worlds.column_log recorded it? Read once per statement.
fn dropped_column_is(relid: pg_sys::Oid, attnum: i16, typ: pg_sys::Oid) -> bool {
    let gen = exec_gen();
    let key = (relid.to_u32(), attnum, typ.to_u32());
    if let Some(hit) = DROPPED_TYPES.with(|c| c.borrow().get(&key).filter(|(g, _)| *g == gen).map(|(_, ok)| *ok)) {
        return hit;
    }
    let ok = crate::spi_calls::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT FROM worlds.column_log l JOIN worlds.tables t ON t.tabno = l.tabno
                         WHERE t.relid = $1 AND l.attnum = $2 AND NOT l.renamed AND l.dropped IS NOT NULL
                           AND to_regtype(l.typ)::oid = $3)",
        &[relid.into(), attnum.into(), typ.into()],
    )
    .ok()
    .flatten()
    .unwrap_or(false);
    DROPPED_TYPES.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|_, (g, _)| *g == gen);
        c.insert(key, (gen, ok));
    });
    ok
}
