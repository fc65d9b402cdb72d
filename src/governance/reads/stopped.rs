//! A scan that stops early reads up to where it stopped. A statement whose plan is a LIMIT (and OFFSET)
//! over an index scan of a tracked table's single-column key (in a world: the world scan over it) reads,
//! of main's rows, those its conditions match up to the last key the scan fetched, not every row they
//! match: `SELECT ... FROM leads WHERE owner = 'ana' ORDER BY id LIMIT 10` isn't held by a change to one
//! of ana's leads past the tenth.
//!
//! The read is kept back at ExecutorStart (`hold`) and sent when the statement finishes (the
//! ExecutorFinish hook, `finish`): the scan's slot then holds the last row it fetched, and the read gains
//! `key <= that key` (`>=` scanning backward). A scan that ran to its end (an empty slot) sends its read
//! as it was. Only a LIMIT at the top of the plan (under a Sort or Result at most), never rescanned, and
//! never for a scrollable cursor. A statement that never finishes (an error, a portal dropped) sends the
//! read as it was when its memory goes: never less than was read.
use super::nodes::{planstates, text_of};
use super::sent::{send, Read};
use pgrx::pg_sys;
use std::cell::RefCell;
use worlds_core::reads::{Columns, Conjunct, Test};
use crate::backend_local::BackendLocal;

/// An index scan whose read waits for where it stopped.
pub(super) struct Held {
    estate: *mut pg_sys::EState,
    plan: *mut pg_sys::Plan,
    world: i32,
    relid: u32,
    read: Read,
    cols: Columns,
    key_attno: i16,
    key_type: pg_sys::Oid,
    /// `<=` (forward) or `>=` (backward) of the key's type
    opno: pg_sys::Oid,
}

static HELD: BackendLocal<RefCell<Vec<Held>>> = BackendLocal::new(RefCell::new(Vec::new()));

/// The index scan under the statement's top LIMIT, if its index is the table's single-column key of a
/// non-collatable type: (the scan, the key's attno, its type, the bound's operator).
pub(super) unsafe fn stopping_scan(stmt: *mut pg_sys::PlannedStmt, eflags: std::ffi::c_int, key_attno: impl Fn(u32) -> Option<i16>) -> Option<(*mut pg_sys::Plan, i16, pg_sys::Oid, pg_sys::Oid)> {
    unsafe {
        if eflags & pg_sys::EXEC_FLAG_BACKWARD as std::ffi::c_int != 0 || !(*stmt).subplans.is_null() && (*(*stmt).subplans).length > 0 {
            return None;
        }
        let tag = |p: *mut pg_sys::Plan| (*(p as *mut pg_sys::Node)).type_;
        let mut p = (*stmt).planTree;
        while !p.is_null() && matches!(tag(p), pg_sys::NodeTag::T_Result | pg_sys::NodeTag::T_Sort | pg_sys::NodeTag::T_IncrementalSort) {
            p = (*p).lefttree;
        }
        if p.is_null() || tag(p) != pg_sys::NodeTag::T_Limit {
            return None;
        }
        let mut q = (*p).lefttree;
        if !q.is_null() && tag(q) == pg_sys::NodeTag::T_CustomScan {
            let children = (*(q as *mut pg_sys::CustomScan)).custom_plans;
            if children.is_null() || (*children).length != 1 {
                return None;
            }
            q = crate::fast_ffi::list_nth(children, 0) as *mut pg_sys::Plan;
        }
        if q.is_null() || tag(q) != pg_sys::NodeTag::T_IndexScan {
            return None;
        }
        let scan = q as *mut pg_sys::IndexScan;
        let rtable = (*stmt).rtable;
        let scanrelid = (*scan).scan.scanrelid;
        if rtable.is_null() || scanrelid == 0 || scanrelid as i32 > (*rtable).length {
            return None;
        }
        let rte = crate::fast_ffi::list_nth(rtable, scanrelid as i32 - 1) as *mut pg_sys::RangeTblEntry;
        let key = key_attno((*rte).relid.to_u32())?;
        let index = pg_sys::RelationIdGetRelation((*scan).indexid);
        if index.is_null() {
            return None;
        }
        let form = (*index).rd_index;
        let on_key = (*form).indnkeyatts == 1 && *(*form).indkey.values.as_ptr() == key && (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID;
        let (family, intype) = (*(*index).rd_opfamily, *(*index).rd_opcintype);
        pg_sys::RelationClose(index);
        let key_type = pg_sys::get_atttype((*rte).relid, key);
        if !on_key || key_type != intype || pg_sys::type_is_collatable(key_type) {
            return None;
        }
        let strategy = if (*scan).indexorderdir == pg_sys::ScanDirection::BackwardScanDirection { pg_sys::BTGreaterEqualStrategyNumber } else { pg_sys::BTLessEqualStrategyNumber };
        let opno = pg_sys::get_opfamily_member(family, intype, intype, strategy as i16);
        (opno != pg_sys::Oid::INVALID).then_some((q, key, key_type, opno))
    }
}

/// Keeps the scan's read back until the statement finishes.
pub(super) unsafe fn hold(estate: *mut pg_sys::EState, plan: *mut pg_sys::Plan, world: i32, relid: u32, read: Read, cols: Columns, key: (i16, pg_sys::Oid, pg_sys::Oid)) {
    unsafe {
        let first = HELD.with(|h| !h.borrow().iter().any(|x| x.estate == estate));
        HELD.with(|h| h.borrow_mut().push(Held { estate, plan, world, relid, read, cols, key_attno: key.0, key_type: key.1, opno: key.2 }));
        if first {
            // a statement that never finishes sends what it held when its memory goes
            let cb = pg_sys::MemoryContextAlloc((*estate).es_query_cxt, std::mem::size_of::<pg_sys::MemoryContextCallback>()) as *mut pg_sys::MemoryContextCallback;
            (*cb).func = Some(gone);
            (*cb).arg = estate as *mut std::ffi::c_void;
            pg_sys::MemoryContextRegisterResetCallback((*estate).es_query_cxt, cb);
        }
    }
}

fn take(estate: *mut pg_sys::EState) -> Vec<Held> {
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        let (mine, rest): (Vec<Held>, Vec<Held>) = std::mem::take(&mut *h).into_iter().partition(|x| x.estate == estate);
        *h = rest;
        mine
    })
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn gone(arg: *mut std::ffi::c_void) {
    for held in take(arg as *mut pg_sys::EState) {
        send(held.world, held.relid, held.read, held.cols);
    }
}

/// ExecutorFinish: each held read, bounded by where its scan stopped.
pub unsafe fn finish(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        let estate = (*query_desc).estate;
        if estate.is_null() || HELD.with(|h| h.borrow().is_empty()) {
            return;
        }
        for held in take(estate) {
            let mut states = Vec::new();
            planstates((*query_desc).planstate, &mut states);
            let ps = states.into_iter().find(|ps| (**ps).plan == held.plan).unwrap_or(std::ptr::null_mut());
            let slot = if ps.is_null() { std::ptr::null_mut() } else { (*(ps as *mut pg_sys::ScanState)).ss_ScanTupleSlot };
            let stopped_at = if slot.is_null() || (*slot).tts_flags & pg_sys::TTS_FLAG_EMPTY as u16 != 0 {
                None
            } else {
                let mut isnull = false;
                let d = crate::fast_ffi::slot_getattr(slot, held.key_attno as i32, &mut isnull);
                (!isnull).then(|| text_of(held.key_type, d))
            };
            let read = match (stopped_at, held.read) {
                (Some(value), Read::Scan(mut conjs)) => {
                    conjs.push(Conjunct { attno: held.key_attno, test: Test::Op, opno: held.opno.to_u32(), typ: held.key_type.to_u32(), value });
                    Read::Scan(conjs)
                }
                (Some(value), Read::Whole) => {
                    Read::Scan(vec![Conjunct { attno: held.key_attno, test: Test::Op, opno: held.opno.to_u32(), typ: held.key_type.to_u32(), value }])
                }
                (_, read) => read,
            };
            send(held.world, held.relid, read, held.cols);
        }
    }
}
