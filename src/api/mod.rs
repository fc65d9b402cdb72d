//! Small SQL-callable helpers shared by the catalog's plpgsql and the statements, and the error helper
//! every user-facing failure goes through.
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use crate::backend_local::BackendLocal;

/// Raises an ERROR with the given SQLSTATE (five characters, as in the spec).
pub fn raise(sqlstate: &str, message: impl Into<String>) -> ! {
    raise_with(sqlstate, message, None, None)
}

pub fn raise_with(sqlstate: &str, message: impl Into<String>, detail: Option<String>, hint: Option<String>) -> ! {
    report(PgLogLevel::ERROR, sqlstate, message, detail, hint)
}

/// Reports at `level` (ERROR, or FATAL for a connection that can't go on), which doesn't return.
pub fn report(level: PgLogLevel, sqlstate: &str, message: impl Into<String>, detail: Option<String>, hint: Option<String>) -> ! {
    let mut r = ErrorReport::new(code_of(sqlstate), message.into(), "pg_worlds");
    if let Some(d) = detail {
        r = r.set_detail(d);
    }
    if let Some(h) = hint {
        r = r.set_hint(h);
    }
    r.report(level);
    unreachable!("ERROR and FATAL do not return")
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
fn _json_size(meta: JsonArg) -> i64 {
    serde_json::to_string(&meta.0).map(|s| s.len() as i64).unwrap_or(0)
}

/// CREATE/FORK/DROP/SWITCH/MERGE/REBASE/ALTER WORLD ... are not allowed between BEGIN and COMMIT (25001).
pub fn refuse_in_transaction(statement: &str) {
    // an explicit BEGIN (seen by the utility hook), or an implicit multi-statement block; a plpgsql
    // exception block's subtransaction alone doesn't count
    let in_block = crate::api::explicit_transaction_block()
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
            // (a relation that doesn't exist has nothing to invalidate)
            Some(oid) if pg_sys::get_rel_relkind(oid) != 0 => pg_sys::CacheInvalidateRelcacheByRelid(oid),
            Some(_) => {}
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

/// A jsonb argument, as pgrx's `JsonB`, but a value Rust can't take (nested past serde_json's 128 levels)
/// is a clear 22023, not an internal error (pgrx's `JsonB` panics: XX000).
pub struct JsonArg(pub serde_json::Value);

impl pgrx::FromDatum for JsonArg {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, typoid: pg_sys::Oid) -> Option<JsonArg> {
        if is_null {
            return None;
        }
        unsafe {
            let detoasted = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            let cstr = pgrx::direct_function_call::<&std::ffi::CStr>(pg_sys::jsonb_out, &[Some(pg_sys::Datum::from(detoasted))])
                .expect("jsonb_out returned NULL");
            let parsed = serde_json::from_str::<serde_json::Value>(cstr.to_str().unwrap_or_default());
            let _ = typoid;
            match parsed {
                Ok(v) => Some(JsonArg(v)),
                Err(e) => raise(
                    "22023",
                    format!("JSON value not accepted: {e} (pg_worlds takes JSON nested at most 128 levels deep)"),
                ),
            }
        }
    }
}

unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for JsonArg {
    unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| raise("22004", format!("argument {} must not be null", index + 1))) }
    }
    unsafe fn unbox_nullable_arg(arg: pgrx::callconv::Arg<'_, 'fcx>) -> pgrx::nullable::Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum().into() }
    }
}

pgrx::impl_sql_translatable!(JsonArg, "jsonb");

/// Set by BEGIN / START TRANSACTION (the utility hook), cleared when the top-level transaction ends.
static IN_BLOCK: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// BEGIN / START TRANSACTION ran: the statements that follow are one transaction block.
pub fn note_transaction_block() {
    IN_BLOCK.with(|b| b.set(true));
}

/// Inside a transaction block the session began (not a function's or a single statement's transaction).
pub fn explicit_transaction_block() -> bool {
    IN_BLOCK.with(|b| b.get()) && unsafe { pg_sys::IsTransactionBlock() }
}

/// The top-level transaction ended (storage's transaction callback).
pub fn transaction_block_ended() {
    IN_BLOCK.with(|b| b.set(false));
}
