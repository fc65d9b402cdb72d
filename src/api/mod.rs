//! Small SQL-callable helpers shared by the catalog's plpgsql and the statements, and the error helper
//! every user-facing failure goes through.
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// Raises an ERROR with the given SQLSTATE (five characters, as in the spec).
pub fn raise(sqlstate: &str, message: impl Into<String>) -> ! {
    raise_with(sqlstate, message, None, None)
}

pub fn raise_with(sqlstate: &str, message: impl Into<String>, detail: Option<String>, hint: Option<String>) -> ! {
    let mut r = ErrorReport::new(code_of(sqlstate), message.into(), "pg_worlds");
    if let Some(d) = detail {
        r = r.set_detail(d);
    }
    if let Some(h) = hint {
        r = r.set_hint(h);
    }
    r.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// The PgSqlErrorCode of a five-character SQLSTATE.
pub fn code_of(sqlstate: &str) -> PgSqlErrorCode {
    let b = sqlstate.as_bytes();
    let six = |c: u8| ((c - b'0') & 0x3f) as i32;
    let code = if b.len() == 5 {
        six(b[0]) | (six(b[1]) << 6) | (six(b[2]) << 12) | (six(b[3]) << 18) | (six(b[4]) << 24)
    } else {
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR as i32
    };
    PgSqlErrorCode::from(code)
}

/// The spec's rules for a new world's name (42602 / 42939).
#[pg_extern]
fn _check_world_name(name: &str) {
    if let Err((state, message)) = worlds_core::names::check_world_name(name) {
        raise(state, message);
    }
}

/// The size of metadata as compact JSON (as a user writes it, without the spaces jsonb's text output puts
/// after every `:` and `,`): what the 64 KB limit counts.
#[pg_extern(immutable, parallel_safe)]
fn _json_size(meta: pgrx::JsonB) -> i64 {
    serde_json::to_string(&meta.0).map(|s| s.len() as i64).unwrap_or(0)
}

/// CREATE/FORK/DROP/SWITCH/MERGE/REBASE/ALTER WORLD ... are not allowed between BEGIN and COMMIT (25001).
pub fn refuse_in_transaction(statement: &str) {
    // an explicit BEGIN (seen by the utility hook), or an implicit multi-statement block; a plpgsql
    // exception block's subtransaction alone doesn't count
    let in_block = crate::route::explicit_transaction_block()
        || unsafe { pg_sys::IsTransactionBlock() && !pg_sys::IsSubTransaction() };
    if in_block {
        raise("25001", format!("{statement} cannot run inside a transaction block"));
    }
}

#[pg_extern]
fn _refuse_in_transaction(statement: &str) {
    refuse_in_transaction(statement)
}

/// Tells every backend's router that the set of tracked tables changed (a relcache invalidation of the
/// table, which the router listens for).
#[pg_extern]
fn _tracking_changed(rel: Option<pg_sys::Oid>) {
    unsafe {
        match rel {
            Some(oid) => pg_sys::CacheInvalidateRelcacheByRelid(oid),
            None => pg_sys::CacheInvalidateRelcacheAll(),
        }
    }
}

/// Does the type have an equality operator, as Postgres finds one for DISTINCT and GROUP BY (its default
/// btree or hash operator class, through binary coercion: varchar uses text's)?
#[pg_extern(stable, parallel_safe)]
fn _has_equality(typ: pg_sys::Oid) -> bool {
    unsafe {
        let entry = pg_sys::lookup_type_cache(typ, pg_sys::TYPECACHE_EQ_OPR as i32);
        !entry.is_null() && (*entry).eq_opr != pg_sys::Oid::INVALID
    }
}
