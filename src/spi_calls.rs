//! pg_worlds' SPI calls. pgrx's `Spi::get_one` / `Spi::run` / `SpiClient::update` run a query read-write
//! by first asking for the transaction's id (pgrx reads "has an xid" as "may write"). Asking costs what a
//! stock read-only transaction never pays: an xid consumed (wraparound), a commit record, and, since such a
//! transaction writes no WAL, an asynchronous commit whose CLOG group LSN keeps VACUUM from setting the
//! hint bits of every other transaction in its group of 32 until the WAL writer flushes (PostgreSQL's
//! create_index test lost its index-only scans that way). And a hot standby can't give an xid at all
//! ("cannot assign TransactionIds during recovery").
//!
//! These calls run the query read-write (SPI's `read_only = false`: a fresh snapshot and command counter,
//! as a plpgsql statement) without asking: an xid is assigned, as in stock PostgreSQL, by the first write.
//! During recovery a SELECT reads as on the primary; anything else fails with 25006 as Postgres's own
//! writes do there.
use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::prelude::*;
use pgrx::spi::SpiResult;

/// Is this server a standby replaying WAL (so no transaction here may write)?
pub fn in_recovery() -> bool {
    unsafe { pg_sys::RecoveryInProgress() }
}

fn refuse_write(query: &str) -> ! {
    let command = query.split_whitespace().next().unwrap_or("statement").to_ascii_uppercase();
    crate::api::raise("25006", format!("cannot execute {command} in a read-only transaction"))
}

fn reads(query: &str) -> bool {
    let first = query.trim_start().split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
    matches!(first.as_str(), "select" | "with" | "values" | "table" | "show")
}

pub fn get_one<A: FromDatum + IntoDatum>(query: &str) -> SpiResult<Option<A>> {
    get_one_with_args(query, &[])
}

pub fn get_one_with_args<A: FromDatum + IntoDatum>(query: &str, args: &[DatumWithOid]) -> SpiResult<Option<A>> {
    if in_recovery() && !reads(query) {
        refuse_write(query);
    }
    rows(query, Some(1), args, |t| t.first().get_one()).and_then(|r| r)
}

pub fn run(query: &str) -> SpiResult<()> {
    run_with_args(query, &[])
}

/// Runs a query string (it may hold several statements, each parsed once the one before has run, as
/// SPI_execute does) and drops its rows.
pub fn run_with_args(query: &str, args: &[DatumWithOid]) -> SpiResult<()> {
    if in_recovery() {
        if !reads(query) {
            refuse_write(query);
        }
        return Spi::connect(|c| c.select(query, None, args).map(|_| ()));
    }
    Spi::connect(|_c| execute(query, args))
}

/// `SPI_execute` / `SPI_execute_with_args`, read-write (a new snapshot for the command), no row limit;
/// inside an open SPI connection. Its rows are left in `SPI_tuptable`.
fn execute(query: &str, args: &[DatumWithOid]) -> SpiResult<()> {
    let cmd = std::ffi::CString::new(query).expect("query contained a null byte");
    let status = unsafe {
        pg_sys::SPI_tuptable = std::ptr::null_mut();
        if args.is_empty() {
            pg_sys::SPI_execute(cmd.as_ptr(), false, 0)
        } else {
            let mut types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
            let mut values: Vec<pg_sys::Datum> =
                args.iter().map(|a| a.datum().map(|d| d.sans_lifetime()).unwrap_or(pg_sys::Datum::from(0usize))).collect();
            let nulls: Vec<std::os::raw::c_char> =
                args.iter().map(|a| if a.datum().is_some() { b' ' } else { b'n' } as std::os::raw::c_char).collect();
            pg_sys::SPI_execute_with_args(cmd.as_ptr(), args.len() as i32, types.as_mut_ptr(), values.as_mut_ptr(), nulls.as_ptr(), false, 0)
        }
    };
    Spi::check_status(status).map(|_| ())
}

/// A query whose rows are one jsonb each (worlds.sql's results), run as `run_with_args` runs one
/// (read-write: a new snapshot, as `Fresh::fresh`), so that the planner may make it parallel: a prepared
/// plan (`SPI_prepare`, which `fresh` uses) never is, and a SELECT reading a big table AS OF a moment
/// through worlds.sql then ran on one core where the same SELECT of the table itself ran on all of them
/// (bench P6).
pub fn jsonb_rows(query: &str, args: &[DatumWithOid]) -> SpiResult<Vec<serde_json::Value>> {
    if in_recovery() {
        return rows(query, None, args, |t| t.filter_map(|r| r.get::<pgrx::JsonB>(1).ok().flatten().map(|j| j.0)).collect());
    }
    Spi::connect(|_c| {
        execute(query, args)?;
        let mut out = Vec::new();
        unsafe {
            let tt = pg_sys::SPI_tuptable;
            if tt.is_null() {
                return Ok(out);
            }
            for i in 0..pg_sys::SPI_processed as usize {
                let mut isnull = false;
                let d = pg_sys::SPI_getbinval(*(*tt).vals.add(i), (*tt).tupdesc, 1, &mut isnull);
                if let Some(j) = <pgrx::JsonB as pgrx::FromDatum>::from_datum(d, isnull) {
                    out.push(j.0);
                }
            }
        }
        Ok(out)
    })
}

/// A query whose rows the caller reads, as `Fresh::fresh` runs it.
pub fn rows<R>(query: &str, limit: Option<std::ffi::c_long>, args: &[DatumWithOid], f: impl FnOnce(pgrx::spi::SpiTupleTable<'_>) -> R) -> SpiResult<R> {
    Spi::connect(|c| c.fresh(query, limit, args).map(f))
}

/// `SpiClient::select` as pg_worlds means it: on a primary the query runs read-write (a new snapshot for
/// the command, as a plpgsql statement), without asking for a transaction id. pgrx's `select` runs
/// read-only while the transaction has no xid, reading with the snapshot the outer statement began with: a
/// merge that waited for a world's lock would then read the world as it was before the lock's holder
/// committed. During recovery it is `select` itself.
pub trait Fresh<'conn> {
    fn fresh<Q: AsRef<str>>(&self, query: Q, limit: Option<std::ffi::c_long>, args: &[DatumWithOid]) -> SpiResult<pgrx::spi::SpiTupleTable<'conn>>;
}

impl<'conn> Fresh<'conn> for pgrx::spi::SpiClient<'conn> {
    fn fresh<Q: AsRef<str>>(&self, query: Q, limit: Option<std::ffi::c_long>, args: &[DatumWithOid]) -> SpiResult<pgrx::spi::SpiTupleTable<'conn>> {
        let query = query.as_ref();
        // (a parallel worker can't start a command: there, as during recovery, the query reads on the
        // active snapshot)
        if in_recovery() || unsafe { pg_sys::IsInParallelMode() } {
            return self.select(query, limit, args);
        }
        let types: Vec<pgrx::PgOid> = args.iter().map(|a| pgrx::PgOid::from(a.oid())).collect();
        let statement = self.prepare_mut(query, &types)?;
        self.select(&statement, limit, args)
    }
}

/// A write pg_worlds' bookkeeping can't do without: its SPI-level failure is an internal error (XX000, with
/// what was being written), never dropped. (A Postgres ERROR inside the statement is raised as it is.)
pub fn written<T>(r: SpiResult<T>, what: &str) -> T {
    r.unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {what}: {e}")))
}
