//! Read-only SPI against the statement's own snapshot.
//!
//! pgrx's `select` runs read-only only while the transaction has no xid; once a world has written in
//! this transaction, every query would take a fresh snapshot. The overlay cache must see exactly what the
//! statement's scan sees (or a base row and its before-image could both show), so its queries go through
//! here: `SPI_execute_plan(..., read_only = true)` on plans prepared once and kept for the backend.
use crate::api::raise;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    static PLANS: RefCell<HashMap<String, pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
}

/// One result row.
pub struct Row {
    tuple: pg_sys::HeapTuple,
    desc: pg_sys::TupleDesc,
}

impl Row {
    /// The number of columns.
    pub fn width(&self) -> usize {
        unsafe { (*self.desc).natts as usize }
    }

    /// Column `ord` (1-based) as a datum in SPI's memory (copy it out before the query ends), None when NULL.
    pub fn raw(&self, ord: usize) -> Option<pg_sys::Datum> {
        unsafe {
            let mut isnull = false;
            let d = pg_sys::SPI_getbinval(self.tuple, self.desc, ord as i32, &mut isnull);
            (!isnull).then_some(d)
        }
    }

    /// Column `ord` (1-based) as T, None when NULL.
    pub fn get<T: FromDatum>(&self, ord: usize) -> Option<T> {
        unsafe {
            let mut isnull = false;
            let d = pg_sys::SPI_getbinval(self.tuple, self.desc, ord as i32, &mut isnull);
            T::from_datum(d, isnull)
        }
    }
}

/// Runs `sql` (with `$n` parameters of the given types) read-only on the active snapshot and calls `f`
/// for each row. The plan is prepared once per backend and kept.
pub fn query<R>(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>], f: impl FnMut(&Row) -> R) -> Vec<R> {
    run(sql, types, args, true, false, f)
}

/// As `query`, always on one generic plan: for the lookups of a write by key, whose custom plans (one per
/// call, as Postgres keeps choosing them for queries through the overlay views) were a tenth of a world's
/// TPC-B. Not for range conditions, whose generic estimates may pick a scan of everything.
pub fn query_generic<R>(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>], f: impl FnMut(&Row) -> R) -> Vec<R> {
    run(sql, types, args, true, true, f)
}

/// As `query`, but on a fresh snapshot (READ COMMITTED: what has committed by now), seeing this
/// transaction's own latest writes: for reading a row under a lock, as Postgres re-reads one it waited for.
pub fn query_fresh<R>(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>], f: impl FnMut(&Row) -> R) -> Vec<R> {
    run(sql, types, args, false, false, f)
}

/// `query_fresh` on one generic plan (see `query_generic`).
pub fn query_fresh_generic<R>(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>], f: impl FnMut(&Row) -> R) -> Vec<R> {
    run(sql, types, args, false, true, f)
}

/// As `query_generic`, on the latest snapshot whatever the isolation level (under REPEATABLE READ too):
/// whether a row changed since the transaction's snapshot, for a row lock taken after a wait.
pub fn query_latest_generic<R>(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>], f: impl FnMut(&Row) -> R) -> Vec<R> {
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
    // (on an error the (sub)transaction's abort pops it)
    let out = run(sql, types, args, true, true, f);
    unsafe { pg_sys::PopActiveSnapshot() };
    out
}

fn run<R>(
    sql: &str,
    types: &[pg_sys::Oid],
    args: &[Option<pg_sys::Datum>],
    read_only: bool,
    generic: bool,
    mut f: impl FnMut(&Row) -> R,
) -> Vec<R> {
    Spi::connect(|_client| unsafe {
        execute_plan(sql, types, args, read_only, generic);
        let table = pg_sys::SPI_tuptable;
        let mut out = Vec::new();
        if !table.is_null() {
            for i in 0..pg_sys::SPI_processed as usize {
                let row = Row { tuple: *(*table).vals.add(i), desc: (*table).tupdesc };
                out.push(f(&row));
            }
        }
        out
    })
}

/// Runs the kept plan of `sql` inside a connected SPI: its rows are in SPI_tuptable, its count in
/// SPI_processed.
unsafe fn execute_plan(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>], read_only: bool, generic: bool) {
    // (its names resolve on the safe search_path, deferred by as_internal_lazy until now)
    super::ensure_safe_path();
    unsafe {
        let plan = plan_for(sql, types, generic);
        let mut values: Vec<pg_sys::Datum> = args.iter().map(|a| a.unwrap_or(pg_sys::Datum::from(0usize))).collect();
        let nulls: Vec<std::ffi::c_char> = args.iter().map(|a| if a.is_some() { b' ' as _ } else { b'n' as _ }).collect();
        let rc = pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_ptr(), read_only, 0);
        if rc < 0 {
            raise("XX000", format!("pg_worlds: SPI error {rc} running {sql}"));
        }
    }
}

/// Runs a write (`$n` parameters of the given types) on a fresh snapshot, as a statement of its own would
/// run; the number of rows it wrote.
pub fn execute(sql: &str, types: &[pg_sys::Oid], args: &[Option<pg_sys::Datum>]) -> u64 {
    Spi::connect(|_client| unsafe {
        execute_plan(sql, types, args, false, false);
        pg_sys::SPI_processed
    })
}

unsafe fn plan_for(sql: &str, types: &[pg_sys::Oid], generic: bool) -> pg_sys::SPIPlanPtr {
    // one text can be planned with different parameter types (an upsert's action, prepared twice)
    let key = format!("{sql}\u{0}{:?}{generic}", types.iter().map(|t| t.to_u32()).collect::<Vec<_>>());
    if let Some(p) = PLANS.with(|p| p.borrow().get(&key).copied()) {
        return p;
    }
    let c = std::ffi::CString::new(sql).unwrap();
    let mut types = types.to_vec();
    let options = if generic { pg_sys::CURSOR_OPT_GENERIC_PLAN as i32 } else { 0 };
    let plan = unsafe { pg_sys::SPI_prepare_cursor(c.as_ptr(), types.len() as i32, types.as_mut_ptr(), options) };
    if plan.is_null() {
        raise("XX000", format!("pg_worlds: could not prepare {sql}"));
    }
    unsafe { pg_sys::SPI_keepplan(plan) };
    PLANS.with(|p| p.borrow_mut().insert(key, plan));
    plan
}

/// The datum of a Rust value, for `query`'s arguments.
pub fn arg<T: IntoDatum>(v: T) -> Option<pg_sys::Datum> {
    v.into_datum()
}

/// A query over the world's rows with the statement's snapshot (see above), arguments as given.
/// A statement of pg_worlds' own on a write's path: planned once per backend (planning them every time was
/// a sixth of a world's TPC-B), run as a statement of its own would run (on a fresh snapshot).
pub(crate) fn kept<R>(sql: &str, args: &[pgrx::datum::DatumWithOid], f: impl FnMut(&Row) -> R) -> Vec<R> {
    let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let values: Vec<Option<pg_sys::Datum>> = args.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
    query_fresh_generic(sql, &types, &values, f)
}

/// As `kept`, but what has committed by now under every isolation level: under REPEATABLE READ too (whose
/// fresh queries read the transaction's snapshot), on the latest snapshot, after a command counter
/// increment so the statement's own earlier versions are seen. For the checks a write makes after it took
/// a key's lock: a concurrent session's version of the key, or of a unique value, is found here and fails
/// the statement (40001, 23505) instead of the commit.
pub(crate) fn latest<R>(sql: &str, args: &[pgrx::datum::DatumWithOid], f: impl FnMut(&Row) -> R) -> Vec<R> {
    if unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32 {
        return kept(sql, args, f);
    }
    let types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let values: Vec<Option<pg_sys::Datum>> = args.iter().map(|a| a.datum().map(|d| d.sans_lifetime())).collect();
    unsafe { pg_sys::CommandCounterIncrement() };
    query_latest_generic(sql, &types, &values, f)
}
