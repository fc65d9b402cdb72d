//! Postgres calls made on every statement of a world, without pgrx's guard around each.
//!
//! pgrx wraps each `pg_sys` function in `pg_guard_ffi_boundary`: a thread check and a `sigsetjmp`, so an
//! ERROR raised inside becomes a Rust panic that unwinds through Rust frames. A world's TPC-B transaction
//! made about 800 such calls, and the guard alone was a sixteenth of the backend's time (perf).
//!
//! Only functions that never raise an ERROR are here: reads of backend state, and list / slot accessors
//! written in Rust the way Postgres's inline functions are. A call that may raise (I/O, locks, memory,
//! interrupts) stays guarded: a longjmp over Rust frames would skip their destructors.
#![allow(non_snake_case)]
use pgrx::pg_sys;

mod raw {
    use pgrx::pg_sys::{Bitmapset, Snapshot, SubTransactionId, TransactionId};
    // the same symbols pgrx binds, declared without its guard; none of them can raise an ERROR
    unsafe extern "C-unwind" {
        pub fn IsTransactionState() -> bool;
        pub fn ActiveSnapshotSet() -> bool;
        pub fn GetActiveSnapshot() -> Snapshot;
        pub fn GetCurrentTransactionIdIfAny() -> TransactionId;
        pub fn GetCurrentSubTransactionId() -> SubTransactionId;
        pub fn bms_next_member(a: *const Bitmapset, prevbit: std::ffi::c_int) -> std::ffi::c_int;
        pub fn RI_FKey_trigger_type(tgfoid: pgrx::pg_sys::Oid) -> std::ffi::c_int;
        pub fn TransactionIdIsCurrentTransactionId(xid: TransactionId) -> bool;
    }
}

/// Inside a transaction, not an aborted one (xact.c: reads the transaction state).
#[inline]
pub unsafe fn IsTransactionState() -> bool {
    unsafe { raw::IsTransactionState() }
}

/// Is a snapshot active? (snapmgr.c: reads the active snapshot stack)
#[inline]
pub unsafe fn ActiveSnapshotSet() -> bool {
    unsafe { raw::ActiveSnapshotSet() }
}

/// The active snapshot (snapmgr.c; the caller knows one is set).
#[inline]
pub unsafe fn GetActiveSnapshot() -> pg_sys::Snapshot {
    unsafe { raw::GetActiveSnapshot() }
}

/// This (sub)transaction's xid, or 0 when it has none (xact.c).
#[inline]
pub unsafe fn GetCurrentTransactionIdIfAny() -> pg_sys::TransactionId {
    unsafe { raw::GetCurrentTransactionIdIfAny() }
}

/// The current subtransaction's id (xact.c).
#[inline]
pub unsafe fn GetCurrentSubTransactionId() -> pg_sys::SubTransactionId {
    unsafe { raw::GetCurrentSubTransactionId() }
}

/// The next member of a bitmapset after `prev`, -1 at its end (bitmapset.c: no error for prev >= -1).
#[inline]
pub unsafe fn bms_next_member(a: *const pg_sys::Bitmapset, prev: std::ffi::c_int) -> std::ffi::c_int {
    unsafe { raw::bms_next_member(a, prev.max(-1)) }
}

/// Which kind of foreign-key trigger function `tgfoid` is, RI_TRIGGER_NONE for any other (ri_triggers.c:
/// a switch on the oid).
#[inline]
pub unsafe fn RI_FKey_trigger_type(tgfoid: pg_sys::Oid) -> std::ffi::c_int {
    unsafe { raw::RI_FKey_trigger_type(tgfoid) }
}

/// Is `xid` this transaction's or one of its live subtransactions'? (xact.c: reads the transaction state
/// stack and its sorted child xids)
#[inline]
pub unsafe fn TransactionIdIsCurrentTransactionId(xid: pg_sys::TransactionId) -> bool {
    unsafe { raw::TransactionIdIsCurrentTransactionId(xid) }
}

/// The list's n-th pointer (pg_list.h's inline `list_nth`); the caller keeps n in 0..length.
#[inline(always)]
pub unsafe fn list_nth(list: *const pg_sys::List, n: std::ffi::c_int) -> *mut std::ffi::c_void {
    unsafe {
        debug_assert!(!list.is_null() && n >= 0 && n < (*list).length);
        (*(*list).elements.add(n as usize)).ptr_value
    }
}

/// The list's n-th oid (pg_list.h's inline `list_nth_oid`).
#[inline(always)]
pub unsafe fn list_nth_oid(list: *const pg_sys::List, n: std::ffi::c_int) -> pg_sys::Oid {
    unsafe {
        debug_assert!(!list.is_null() && n >= 0 && n < (*list).length);
        (*(*list).elements.add(n as usize)).oid_value
    }
}

/// The list's n-th integer (pg_list.h's inline `list_nth_int`).
#[inline(always)]
pub unsafe fn list_nth_int(list: *const pg_sys::List, n: std::ffi::c_int) -> std::ffi::c_int {
    unsafe {
        debug_assert!(!list.is_null() && n >= 0 && n < (*list).length);
        (*(*list).elements.add(n as usize)).int_value
    }
}

/// Column `attnum` of a slot (tuptable.h's inline `slot_getattr`): read in Rust when the slot has already
/// deformed that far, else through Postgres (which deforms, and may raise on a damaged tuple: guarded).
#[inline]
pub unsafe fn slot_getattr(slot: *mut pg_sys::TupleTableSlot, attnum: std::ffi::c_int, isnull: *mut bool) -> pg_sys::Datum {
    unsafe {
        if attnum > 0 && attnum <= (*slot).tts_nvalid as std::ffi::c_int {
            let i = attnum as usize - 1;
            *isnull = *(*slot).tts_isnull.add(i);
            return *(*slot).tts_values.add(i);
        }
        pg_sys::slot_getattr(slot, attnum, isnull)
    }
}
