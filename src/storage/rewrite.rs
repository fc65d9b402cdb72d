//! Physical reorganization of a tracked table: VACUUM FULL, CLUSTER, a rewriting ALTER TABLE, TRUNCATE
//! and pg_repack (which swaps the table's file for a rebuilt copy in its own catalog update, with no
//! utility statement to see). Each gives the table a new relfilenode and its rows new positions, and
//! history and worlds' rows point at main's rows by position.
//!
//! Found the same way for all of them: a relcache invalidation names the table; at the end of the
//! transaction (PRE_COMMIT, before anything is visible to others) its relfilenode is compared with the
//! one `worlds.tables.filenode` recorded. When the transaction moved the rows, `worlds._after_rewrite`
//! follows every position to where the row is now, in the same transaction (tracking.sql). A table
//! without a key is refused there (0A000) while worlds live: the rewrite rolls back, nothing is lost.
use crate::spi_calls::Fresh;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use crate::backend_local::BackendLocal;

/// relations invalidated since the last check (None inside: every relation)
static CANDIDATES: BackendLocal<RefCell<Option<Vec<pg_sys::Oid>>>> = BackendLocal::new(RefCell::new(Some(Vec::new())));
static CHECKING: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));
thread_local! {
    /// tracked table -> the relfilenode worlds.tables recorded for it, as last read
    static RECORDED: RefCell<HashMap<pg_sys::Oid, u32>> = RefCell::new(HashMap::new());
}

/// From the relcache callback: no catalog access here.
pub fn on_relcache_invalidation(relid: pg_sys::Oid) {
    CANDIDATES.with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            match (&mut *c, relid == pg_sys::Oid::INVALID) {
                (_, true) => *c = None,
                (Some(v), false) => {
                    if !v.contains(&relid) && v.len() < 4096 {
                        v.push(relid);
                    } else if v.len() >= 4096 {
                        *c = None;
                    }
                }
                (None, false) => {}
            }
        }
    });
}

fn relfilenode(relid: pg_sys::Oid) -> Option<u32> {
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return None;
        }
        let file = (*rel).rd_node.relNode.to_u32();
        pg_sys::RelationClose(rel);
        Some(file)
    }
}

/// Did this transaction (or one of its subtransactions) write the relation's pg_class row? A rewrite does;
/// what another session's transaction did is its own to follow, and is never redone here (under REPEATABLE
/// READ this transaction's snapshot doesn't even see that session's worlds.tables row).
fn changed_here(relid: pg_sys::Oid) -> bool {
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid));
        if tuple.is_null() {
            return false;
        }
        let xmin = (*(*tuple).t_data).t_choice.t_heap.t_xmin;
        pg_sys::ReleaseSysCache(tuple);
        pg_sys::TransactionIdIsCurrentTransactionId(xmin)
    }
}

/// At PRE_COMMIT: follow the rows of every tracked table this transaction moved.
pub fn on_xact(event: pg_sys::XactEvent::Type) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PARALLEL_PRE_COMMIT => {}
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            // (what an aborted transaction moved is moved back; what others moved is checked at the next commit)
            return;
        }
        _ => return,
    }
    if event == XACT_EVENT_PARALLEL_PRE_COMMIT || CHECKING.with(|c| c.get()) {
        return;
    }
    let empty = CANDIDATES.with(|c| c.borrow().as_ref().is_some_and(|v| v.is_empty()));
    if empty {
        return;
    }
    // a transaction that wrote nothing moved nothing (a rewrite assigns a transaction id)
    if unsafe { crate::fast_ffi::GetCurrentTransactionIdIfAny() } == pg_sys::InvalidTransactionId || !super::extension_installed() {
        CANDIDATES.with(|c| *c.borrow_mut() = Some(Vec::new()));
        return;
    }
    let candidates = CANDIDATES.with(|c| c.replace(Some(Vec::new())));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CHECKING.with(|c| c.set(false));
        }
    }
    CHECKING.with(|c| c.set(true));
    let _reset = Reset;
    // (the statement's snapshot is gone by the end of the transaction: queries here need one of their own)
    struct Snap(bool);
    impl Drop for Snap {
        fn drop(&mut self) {
            if self.0 {
                unsafe { pg_sys::PopActiveSnapshot() };
            }
        }
    }
    let pushed = unsafe { !crate::fast_ffi::ActiveSnapshotSet() };
    if pushed {
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    }
    let _snap = Snap(pushed);
    // (a relation this transaction didn't change isn't its to follow; of the others, moved_of reads the
    // recorded file of each: not the whole list of tracked tables, which each DDL invalidates)
    let candidates: Vec<pg_sys::Oid> = match candidates {
        // every relation was invalidated (DDL elsewhere, a full sinval queue): every tracked table
        None => super::tracked_tables().keys().copied().collect(),
        Some(v) => v,
    };
    let moved = moved_of(candidates.into_iter().filter(|r| changed_here(*r)).collect());
    for r in moved {
        super::as_internal(|| {
            crate::spi_calls::run_with_args("SELECT worlds._after_rewrite($1::oid::regclass)", &[r.into()])
                .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
        });
        if let Some(now) = relfilenode(r) {
            RECORDED.with(|m| m.borrow_mut().insert(r, now));
        }
    }
}

/// Of these invalidated relations, the tracked tables whose file isn't the one recorded.
fn moved_of(relids: Vec<pg_sys::Oid>) -> Vec<pg_sys::Oid> {
    if relids.is_empty() {
        return relids;
    }
    if RECORDED.with(|m| m.borrow().is_empty()) {
        // first use in this backend: every table's recorded file in one query
        let all: Vec<(pg_sys::Oid, u32)> = super::as_internal(|| {
            Spi::connect(|c| {
                c.fresh("SELECT relid::oid, filenode FROM worlds.tables WHERE filenode IS NOT NULL", None, &[])
                    .map(|rows| {
                        rows.filter_map(|r| Some((r.get::<pg_sys::Oid>(1).ok().flatten()?, r.get::<pg_sys::Oid>(2).ok().flatten()?.to_u32())))
                            .collect()
                    })
                    .unwrap_or_default()
            })
        });
        RECORDED.with(|m| m.borrow_mut().extend(all));
    }
    relids
        .into_iter()
        .filter(|r| {
            let Some(now) = relfilenode(*r) else { return false };
            let known = RECORDED.with(|m| m.borrow().get(r).copied());
            if known == Some(now) {
                return false;
            }
            // (read again: another session's transaction may have followed it already)
            let recorded = super::as_internal(|| {
                crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT filenode FROM worlds.tables WHERE relid = $1::oid::regclass", &[(*r).into()])
            })
            .ok()
            .flatten()
            .map(|o| o.to_u32());
            // (none recorded: the table has no storage yet, nothing holds a position of its rows)
            let Some(f) = recorded else { return false };
            RECORDED.with(|m| m.borrow_mut().insert(*r, f));
            f != now
        })
        .collect()
}
