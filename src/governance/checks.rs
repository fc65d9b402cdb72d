//! The merge-check gate: queries that must find nothing in what a merge would make.
//!
//! - Made by CREATE MERGE CHECK after Postgres's own parser, analyzer and rewriter have read it: one
//!   SELECT (or WITH ... SELECT) that changes nothing; no nextval, setval, pg_notify or function made
//!   with CREATE FUNCTION in it or in a view it reads, views followed through the rewriter (25006). It
//!   runs once on main then, so one that can't run is refused with Postgres's error.
//! - Run by every merge whose plan changes one of its tables (every merge without ON TABLES; the others
//!   aren't even planned), after the merge applied and before it commits, on the target as the merge
//!   leaves it (a world target through its overlay), in a subtransaction rolled back afterwards, as the
//!   database's owner under SECURITY_RESTRICTED_OPERATION, with search_path = public and the check's
//!   timeout as statement_timeout. It reads at most 11 rows; a reason shows the first 10.
use crate::api::{raise, raise_with};
use crate::storage::overlay::World;
use pgrx::prelude::*;

/// Functions a check may not call though they are built in: they change something that outlives the
/// check's rolled-back subtransaction (a sequence, a notification, a session's advisory locks).
const CHANGING: &[u32] = &[
    pg_sys::F_NEXTVAL,
    pg_sys::F_SETVAL_REGCLASS_INT8,
    pg_sys::F_SETVAL_REGCLASS_INT8_BOOL,
    pg_sys::F_PG_NOTIFY,
    pg_sys::F_PG_ADVISORY_LOCK_INT8,
    pg_sys::F_PG_ADVISORY_LOCK_INT4_INT4,
    pg_sys::F_PG_ADVISORY_LOCK_SHARED_INT8,
    pg_sys::F_PG_ADVISORY_LOCK_SHARED_INT4_INT4,
    pg_sys::F_PG_TRY_ADVISORY_LOCK_INT8,
    pg_sys::F_PG_TRY_ADVISORY_LOCK_INT4_INT4,
    pg_sys::F_PG_TRY_ADVISORY_LOCK_SHARED_INT8,
    pg_sys::F_PG_TRY_ADVISORY_LOCK_SHARED_INT4_INT4,
    pg_sys::F_PG_ADVISORY_UNLOCK_INT8,
    pg_sys::F_PG_ADVISORY_UNLOCK_INT4_INT4,
    pg_sys::F_PG_ADVISORY_UNLOCK_SHARED_INT8,
    pg_sys::F_PG_ADVISORY_UNLOCK_SHARED_INT4_INT4,
    pg_sys::F_PG_ADVISORY_UNLOCK_ALL,
];

fn refuse_function(oid: pg_sys::Oid) -> ! {
    let name = crate::spi_calls::get_one_with_args::<String>("SELECT $1::regprocedure::text", &[oid.into()]).ok().flatten().unwrap_or_default();
    if oid.to_u32() >= pg_sys::FirstNormalObjectId {
        raise_with(
            "25006",
            format!("a merge check may not call {name}: a function made with CREATE FUNCTION (in the query or a view it reads)"),
            None,
            Some("Write the check with built-in functions only: it runs inside merges, as the database's owner.".into()),
        );
    }
    raise("25006", format!("a merge check changes nothing: it may not call {name}"));
}

#[pg_guard]
unsafe extern "C-unwind" fn check_walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        let f = |oid: pg_sys::Oid| oid.to_u32() >= pg_sys::FirstNormalObjectId || CHANGING.contains(&oid.to_u32());
        match (*node).type_ {
            pg_sys::NodeTag::T_Query => return pg_sys::query_tree_walker(node as *mut pg_sys::Query, Some(check_walker), context, 0),
            pg_sys::NodeTag::T_FuncExpr => {
                let oid = (*(node as *mut pg_sys::FuncExpr)).funcid;
                if f(oid) {
                    refuse_function(oid);
                }
            }
            pg_sys::NodeTag::T_Aggref => {
                let oid = (*(node as *mut pg_sys::Aggref)).aggfnoid;
                if f(oid) {
                    refuse_function(oid);
                }
            }
            pg_sys::NodeTag::T_WindowFunc => {
                let oid = (*(node as *mut pg_sys::WindowFunc)).winfnoid;
                if f(oid) {
                    refuse_function(oid);
                }
            }
            pg_sys::NodeTag::T_OpExpr | pg_sys::NodeTag::T_DistinctExpr | pg_sys::NodeTag::T_NullIfExpr => {
                let oid = pg_sys::get_opcode((*(node as *mut pg_sys::OpExpr)).opno);
                if f(oid) {
                    refuse_function(oid);
                }
            }
            pg_sys::NodeTag::T_ScalarArrayOpExpr => {
                let oid = pg_sys::get_opcode((*(node as *mut pg_sys::ScalarArrayOpExpr)).opno);
                if f(oid) {
                    refuse_function(oid);
                }
            }
            _ => {}
        }
        pg_sys::expression_tree_walker(node, Some(check_walker), context)
    }
}

/// Reads the query as Postgres does (search_path = public): one SELECT that changes nothing, views
/// expanded by the rewriter and followed. 42601 / 25006 / Postgres's own errors otherwise.
fn validate(query: &str) {
    let text = std::ffi::CString::new(query).unwrap_or_else(|_| raise("22021", "a merge check's query can't hold a NUL byte"));
    let level = crate::storage::push_setting(c"search_path", c"public");
    unsafe {
        let raw = pg_sys::raw_parser(text.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        if raw.is_null() || (*raw).length != 1 {
            raise("42601", "a merge check is one SELECT (or WITH ... SELECT)");
        }
        let raw_stmt = crate::fast_ffi::list_nth(raw, 0) as *mut pg_sys::RawStmt;
        let stmt = (*raw_stmt).stmt;
        if (*stmt).type_ != pg_sys::NodeTag::T_SelectStmt {
            raise("25006", "a merge check is one SELECT (or WITH ... SELECT) that changes nothing");
        }
        let select = stmt as *mut pg_sys::SelectStmt;
        if !(*select).intoClause.is_null() {
            raise("25006", "a merge check changes nothing: SELECT INTO makes a table");
        }
        if !(*select).lockingClause.is_null() {
            raise("25006", "a merge check changes nothing: it may not lock rows (FOR UPDATE / SHARE)");
        }
        let analysed = pg_sys::parse_analyze_fixedparams(raw_stmt, text.as_ptr(), std::ptr::null(), 0, std::ptr::null_mut());
        if (*analysed).hasModifyingCTE {
            raise("25006", "a merge check changes nothing: no INSERT, UPDATE or DELETE in its WITH");
        }
        let rewritten = pg_sys::QueryRewrite(analysed);
        for i in 0..if rewritten.is_null() { 0 } else { (*rewritten).length } {
            let q = crate::fast_ffi::list_nth(rewritten, i) as *mut pg_sys::Node;
            check_walker(q, std::ptr::null_mut());
        }
    }
    crate::storage::pop_setting(level);
}

// timeout.h (not in pgrx's bindings): the statement timeout's timer, armed for the check alone
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn enable_timeout_at(id: std::ffi::c_int, fin_time: i64);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
    fn get_timeout_active(id: std::ffi::c_int) -> bool;
    fn get_timeout_finish_time(id: std::ffi::c_int) -> i64;
}
/// TimeoutId's STATEMENT_TIMEOUT (timeout.h: the fourth reason).
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;

/// Runs `f` as the database's owner, restricted (no SET, no temp objects), with search_path = public,
/// within `timeout_ms` (Postgres's statement timeout, 57014, armed for the check and the statement's
/// own put back after it).
fn as_database_owner<R>(timeout_ms: i32, f: impl FnOnce() -> R) -> R {
    struct Guard(pg_sys::Oid, i32, i32, Option<i64>);
    impl Drop for Guard {
        fn drop(&mut self) {
            unsafe {
                disable_timeout(STATEMENT_TIMEOUT, false);
                if let Some(at) = self.3 {
                    enable_timeout_at(STATEMENT_TIMEOUT, at);
                }
            }
            crate::storage::pop_setting(self.2);
            unsafe { pg_sys::SetUserIdAndSecContext(self.0, self.1) };
        }
    }
    let owner = crate::storage::as_internal(|| {
        crate::spi_calls::get_one::<pg_sys::Oid>("SELECT datdba FROM pg_database WHERE datname = current_database()").ok().flatten()
    })
    .unwrap_or(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID));
    let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut sec) };
    let level = crate::storage::push_setting(c"search_path", c"public");
    let outer = unsafe { get_timeout_active(STATEMENT_TIMEOUT).then(|| get_timeout_finish_time(STATEMENT_TIMEOUT)) };
    unsafe {
        enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms.max(1));
        pg_sys::SetUserIdAndSecContext(owner, sec | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32 | pg_sys::SECURITY_RESTRICTED_OPERATION as i32);
    }
    let _g = Guard(user, sec, level, outer);
    f()
}

/// The lock space of merge checks' locks (an advisory lock's field4; world_locks.rs 0x7767, tracking
/// 0x7768).
const CHECK_SPACE: u16 = 0x7769;

/// Merges that run the same check take turns: each holds the check's lock (EXCLUSIVE, until it commits)
/// while it runs it, and reads on the latest snapshot, so of two merges each fine alone the second sees
/// the first's result (write skew between them is what a check is for).
fn lock_check(name: &str) {
    let hash = name.bytes().fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let tag = pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: hash,
        locktag_field3: 0,
        locktag_field4: CHECK_SPACE,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    unsafe {
        pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, false);
    }
}

/// The rows a check finds (at most 11), as `(col = value, ...)`. On main, on the latest snapshot (this
/// transaction's merge and every merge committed meanwhile).
fn found_rows(query: &str, timeout_ms: i32, target: Option<&World>) -> Result<Vec<String>, (String, String)> {
    let sql = format!("SELECT row_to_json(q)::text FROM ({query}) q LIMIT 11");
    let run = || {
        as_database_owner(timeout_ms, || {
            unsafe { pg_sys::CommandCounterIncrement() };
            match target {
                None => crate::storage::snapshot_spi::query_latest_generic(&sql, &[], &[], |r| r.get::<String>(1)).into_iter().flatten().collect(),
                Some(_) => crate::storage::overlay::with_world(target.cloned(), || {
                    crate::spi_calls::rows(&sql, None, &[], |t| t.filter_map(|r| r.get::<String>(1).ok().flatten()).collect::<Vec<_>>())
                        .unwrap_or_else(|e| raise("XX000", format!("{e}")))
                }),
            }
        })
    };
    crate::subxact::rolled_back_with_state(run).map(|rows| {
        rows.into_iter()
            .map(|j| {
                let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&j).unwrap_or_default();
                let parts: Vec<String> = obj
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        format!("{k} = {v}")
                    })
                    .collect();
                format!("({})", parts.join(", "))
            })
            .collect()
    })
}

/// The checks a merge that changes these tables must pass: those of the tables, and those without ON
/// TABLES.
fn checks_for(changed: Vec<pg_sys::Oid>) -> Vec<(String, String, i32)> {
    if changed.is_empty() {
        return Vec::new();
    }
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT name, query, timeout_ms FROM worlds.merge_check WHERE tables IS NULL OR tables::oid[] && $1::oid[] ORDER BY name",
            None,
            &[changed.into()],
            |t| {
                t.filter_map(|r| Some((r.get::<String>(1).ok().flatten()?, r.get::<String>(2).ok().flatten()?, r.get::<i32>(3).ok().flatten().unwrap_or(1000))))
                    .collect()
            },
        )
        .unwrap_or_default()
    })
}

/// Runs the checks of a merge that changed these tables on the merged result (after the merge applied, in
/// its transaction): the broken ones as (SQLSTATE, reason): 23514 for rows found, 57014 for a check past
/// its timeout. No one skips a check (the judge: judge.rs).
pub fn broken_for(changed: Vec<pg_sys::Oid>, target: Option<&World>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let checks = checks_for(changed);
    // (SHOW METRICS: the checks' run, when there are some)
    let _timer = (!checks.is_empty()).then(|| crate::metrics::time(crate::metrics::Timed::MergeChecks));
    for (name, query, timeout_ms) in checks {
        // (in name order: the order every merge takes these locks in)
        lock_check(&name);
        match found_rows(&query, timeout_ms, target) {
            Ok(rows) if rows.is_empty() => {}
            Ok(rows) => {
                let shown = rows.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
                let more = if rows.len() > 10 { ", and more" } else { "" };
                out.push(("23514", format!("breaks merge check {name}, which finds {shown}{more}")));
            }
            Err((state, message)) if state == "57014" => {
                out.push(("57014", format!("breaks merge check {name}: it did not finish within {timeout_ms} ms ({message})")));
            }
            Err((state, message)) => out.push(("23514", format!("breaks merge check {name}: it fails ({state}: {message})"))),
        }
    }
    out
}

/// CREATE [OR REPLACE] MERGE CHECK: validated, run once on main, stored. Admins only.
#[pg_extern(volatile, parallel_unsafe)]
fn create_merge_check(
    check_name: Option<&str>,
    replace: Option<bool>,
    tables: Option<Vec<Option<String>>>,
    settings: Option<crate::api::JsonArg>,
    query: Option<&str>,
) -> String {
    let check_name = check_name.unwrap_or_else(|| raise("22004", "a merge check's name must not be null"));
    let query = query.unwrap_or_else(|| raise("22004", "a merge check's query must not be null"));
    let replace = replace.unwrap_or(false);
    let tables: Option<Vec<String>> =
        tables.map(|ts| ts.into_iter().map(|t| t.unwrap_or_else(|| raise("22004", "ON TABLES: an element of the list is null"))).collect());
    crate::api::refuse_in_transaction("CREATE MERGE CHECK");
    crate::governance::agents::require("admin", None);
    let mut timeout_ms = 1000i64;
    if let Some(crate::api::JsonArg(serde_json::Value::Object(m))) = &settings {
        for (k, v) in m {
            if k != "timeout" {
                raise_with("22P02", format!("unknown merge check setting \"{k}\""), None, Some("A merge check's only setting is timeout ('2s', or ms).".into()));
            }
            timeout_ms = crate::spi_calls::get_one_with_args::<i64>("SELECT worlds._ms_setting('timeout', $1)", &[pgrx::JsonB(v.clone()).into()])
                .unwrap_or_else(|e| raise("22023", format!("{e}")))
                .unwrap_or(1000);
            if timeout_ms <= 0 {
                raise("22023", "a merge check's timeout must be more than 0 ms");
            }
        }
    }
    // ON TABLES: read as SQL reads them (the session's search_path); tables of main
    let rels: Option<Vec<pg_sys::Oid>> = tables.map(|ts| {
        ts.iter()
            .map(|t| {
                let found = crate::spi_calls::get_one_with_args::<pg_sys::Oid>(
                    "SELECT c.oid FROM pg_class c WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')",
                    &[t.as_str().into()],
                )
                .ok()
                .flatten();
                found.unwrap_or_else(|| raise("42P01", format!("relation \"{t}\" does not exist (ON TABLES names tables of main)")))
            })
            .collect()
    });
    validate(query);
    // once on main now: a check that can't run is refused with Postgres's error
    let ran = found_rows(query, timeout_ms as i32, None);
    if let Err((state, message)) = ran {
        raise(&state, message);
    }
    crate::storage::as_internal(|| {
        crate::spi_calls::run_with_args(
            "SELECT worlds._store_merge_check($1, $2, $3::oid[]::regclass[], $4, $5)",
            &[check_name.into(), replace.into(), rels.into(), (timeout_ms as i32).into(), query.into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    });
    "CREATE MERGE CHECK".into()
}
