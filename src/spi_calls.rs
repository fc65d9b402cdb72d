//! pgrx's `Spi::get_one` / `Spi::run` (and their `_with_args`) run read-write: they ask for the
//! transaction's id first, which a hot standby can't give ("cannot assign TransactionIds during
//! recovery"). pg_worlds calls these instead: the same calls on a primary, and during recovery a
//! read-only SPI query (a SELECT reads as on the primary; anything else fails with 25006 as Postgres's
//! own writes do there).
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
    if !in_recovery() {
        return Spi::get_one_with_args(query, args);
    }
    if !reads(query) {
        refuse_write(query);
    }
    Spi::connect(|c| c.select(query, Some(1), args)?.first().get_one())
}

pub fn run(query: &str) -> SpiResult<()> {
    run_with_args(query, &[])
}

pub fn run_with_args(query: &str, args: &[DatumWithOid]) -> SpiResult<()> {
    if !in_recovery() {
        return Spi::run_with_args(query, args);
    }
    if !reads(query) {
        refuse_write(query);
    }
    Spi::connect(|c| c.select(query, None, args).map(|_| ()))
}

/// A query whose rows the caller reads: read-write on a primary (as `SpiClient::update`), read-only
/// during recovery (as `select`).
pub fn rows<R>(query: &str, limit: Option<std::ffi::c_long>, args: &[DatumWithOid], f: impl FnOnce(pgrx::spi::SpiTupleTable<'_>) -> R) -> SpiResult<R> {
    if in_recovery() {
        Spi::connect(|c| c.select(query, limit, args).map(f))
    } else {
        Spi::connect_mut(|c| c.update(query, limit, args).map(f))
    }
}
