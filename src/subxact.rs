//! Subtransactions of the merge: the lock step's rounds (kept or rolled back), a partial merge's apply
//! (its error examined before anything is raised), and the DRY RUN's trial (always rolled back).
use pgrx::prelude::*;

/// Runs f in a subtransaction: kept when it succeeds, rolled back (and the error returned, not raised)
/// when it fails, so the caller may still query before it decides what to raise.
pub(crate) fn in_subtransaction<R>(f: impl FnOnce() -> R) -> Result<R, Box<pgrx::pg_sys::panic::CaughtError>> {
    subtransaction(f, |_| true)
}

/// Runs f in a subtransaction, kept (its locks with it) when `keep` says so of what it returned, else
/// rolled back; an error rolls it back and is raised again.
pub(crate) fn in_subtransaction_keep<R>(f: impl FnOnce() -> R, keep: impl FnOnce(&R) -> bool) -> R {
    subtransaction(f, keep).unwrap_or_else(|e| e.rethrow())
}

/// Runs f in a subtransaction that is always rolled back, returning what it returned or its error's
/// message (SHOW REVIEWS judging a queued world's merge as a dry run).
pub(crate) fn rolled_back<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    subtransaction(f, |_| false).map_err(|e| match *e {
        pgrx::pg_sys::panic::CaughtError::PostgresError(r) | pgrx::pg_sys::panic::CaughtError::ErrorReport(r) => r.message().to_string(),
        other => format!("{other:?}"),
    })
}

/// `rolled_back`, with the error's SQLSTATE (a merge check past its timeout is 57014).
pub(crate) fn rolled_back_with_state<R>(f: impl FnOnce() -> R) -> Result<R, (String, String)> {
    subtransaction(f, |_| false).map_err(|e| state_and_message(&e))
}

/// A caught error's SQLSTATE and message (XX000 and its description for a Rust panic).
pub(crate) fn state_and_message(e: &pgrx::pg_sys::panic::CaughtError) -> (String, String) {
    match e {
        pgrx::pg_sys::panic::CaughtError::PostgresError(r) | pgrx::pg_sys::panic::CaughtError::ErrorReport(r) => {
            (sqlstate_text(r.sql_error_code() as i32), r.message().to_string())
        }
        other => ("XX000".to_string(), format!("{other:?}")),
    }
}

/// The subtransaction both run f in: released when f returns and `keep` agrees, rolled back otherwise;
/// f's error (pg_worlds' own reports as Postgres errors) returned.
fn subtransaction<R>(f: impl FnOnce() -> R, keep: impl FnOnce(&R) -> bool) -> Result<R, Box<pgrx::pg_sys::panic::CaughtError>> {
    use pgrx::pg_sys::panic::CaughtError;
    unsafe {
        let cxt = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = pgrx::PgTryBuilder::new(move || Ok(f())).catch_others(|e| Err(Box::new(e))).execute();
        let kept = matches!(&outcome, Ok(r) if keep(r));
        if kept {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(cxt);
        pg_sys::CurrentResourceOwner = owner;
        outcome.map_err(|e| {
            Box::new(match *e {
                CaughtError::ErrorReport(r) => CaughtError::PostgresError(r),
                other => other,
            })
        })
    }
}

/// Runs f in a subtransaction that is always rolled back: None when it succeeds, the reason when the
/// data refuses it (a constraint, class 23, or the app's trigger raising). Errors that are not about the
/// merge's rows (cancel, resources, serialization, internal) are raised as they are.
pub(super) fn trial(f: impl FnOnce()) -> Option<String> {
    unsafe {
        let cxt = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = pgrx::PgTryBuilder::new(move || {
            f();
            Ok(())
        })
        .catch_others(|e| Err(Box::new(e)))
        .execute();
        pg_sys::RollbackAndReleaseCurrentSubTransaction();
        pg_sys::MemoryContextSwitchTo(cxt);
        pg_sys::CurrentResourceOwner = owner;
        use pgrx::pg_sys::panic::CaughtError;
        // (an error pg_worlds raised itself, such as a merge into a world breaking a foreign key, comes back
        // as an ErrorReport; Postgres's own as a PostgresError)
        let outcome = outcome.map_err(|e| match *e {
            CaughtError::ErrorReport(r) => CaughtError::PostgresError(r),
            other => other,
        });
        match outcome {
            Ok(()) => None,
            Err(pgrx::pg_sys::panic::CaughtError::PostgresError(r)) if is_constraint(&r) => {
                Some(match r.detail() {
                    Some(d) => format!("{} ({d})", r.message()),
                    None => r.message().to_string(),
                })
            }
            Err(pgrx::pg_sys::panic::CaughtError::PostgresError(r)) if refuses_rows(&r) => {
                Some(format!("the merge would fail: {} (SQLSTATE {})", r.message(), sqlstate_text(r.sql_error_code() as i32)))
            }
            Err(e) => e.rethrow(),
        }
    }
}

/// An error of class 23 (integrity constraint violation).
fn is_constraint(r: &pgrx::pg_sys::panic::ErrorReportWithLevel) -> bool {
    use PgSqlErrorCode::*;
    matches!(
        r.sql_error_code(),
        ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION
            | ERRCODE_RESTRICT_VIOLATION
            | ERRCODE_NOT_NULL_VIOLATION
            | ERRCODE_FOREIGN_KEY_VIOLATION
            | ERRCODE_UNIQUE_VIOLATION
            | ERRCODE_CHECK_VIOLATION
            | ERRCODE_EXCLUSION_VIOLATION
    )
}

/// An error a merge's rows can meet besides a constraint (an app trigger's RAISE, a bad value): not one of
/// cancel or shutdown (57), resources (53, 54), transaction rollback (40), internal (XX) or system (58).
fn refuses_rows(r: &pgrx::pg_sys::panic::ErrorReportWithLevel) -> bool {
    let class = &sqlstate_text(r.sql_error_code() as i32)[..2];
    !matches!(class, "57" | "53" | "54" | "40" | "XX" | "58")
}

/// A SQLSTATE as its five characters (Postgres packs them six bits each).
fn sqlstate_text(code: i32) -> String {
    (0..5).map(|i| (((code >> (6 * i)) & 0x3f) as u8 + b'0') as char).collect()
}
