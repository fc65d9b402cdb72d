//! The ExecutorFinish hook: EXPLAIN ANALYZE (and auto_explain) report the time spent in each trigger that
//! fired. pg_worlds' history capture triggers are part of how main keeps its history, not the user's
//! triggers: once the statement's AFTER triggers have run, their counters are cleared, so EXPLAIN lists
//! only the user's triggers, as stock Postgres does (Postgres skips a trigger that never fired).
use super::*;

pub(super) static mut PREV_EXECUTOR_FINISH: pg_sys::ExecutorFinish_hook_type = None;

/// A thin frame, as the other executor hooks: an error the statement's triggers raise reaches the client
/// as Postgres raised it (pg_sys's wrappers would turn it into a panic no frame here catches).
pub(super) unsafe extern "C-unwind" fn executor_finish(query_desc: *mut pg_sys::QueryDesc) {
    unsafe {
        match PREV_EXECUTOR_FINISH {
            Some(prev) => prev(query_desc),
            None => raw::standard_ExecutorFinish(query_desc),
        }
        // (a world that checks its reads: a scan under a LIMIT read up to where it stopped)
        guarded(|| crate::governance::reads::finish(query_desc));
        // (an agent's world past its max_changes fails the statement: nothing it wrote stays)
        guarded(|| crate::governance::agents::after_write_statement(query_desc));
        let estate = (*query_desc).estate;
        if !estate.is_null() && (*estate).es_instrument != 0 {
            forget_capture_counters((*estate).es_opened_result_relations);
            forget_capture_counters((*estate).es_trig_target_relations);
            forget_capture_counters((*estate).es_tuple_routing_result_relations);
        }
    }
}

/// Clears the instrumentation of the capture triggers of these result relations (a List of ResultRelInfo).
unsafe fn forget_capture_counters(list: *mut pg_sys::List) {
    unsafe {
        if list.is_null() {
            return;
        }
        for i in 0..(*list).length {
            let rel = crate::fast_ffi::list_nth(list, i) as *mut pg_sys::ResultRelInfo;
            let (desc, instr) = ((*rel).ri_TrigDesc, (*rel).ri_TrigInstrument);
            if desc.is_null() || instr.is_null() {
                continue;
            }
            for k in 0..(*desc).numtriggers as usize {
                let trig = (*desc).triggers.add(k);
                if (*trig).tgisinternal && !(*trig).tgname.is_null() && is_capture_trigger_name(std::ffi::CStr::from_ptr((*trig).tgname).to_bytes()) {
                    *instr.add(k) = std::mem::zeroed();
                }
            }
        }
    }
}

/// The name a capture trigger was created with (pg_dump's CREATE TRIGGER, members.rs).
pub(super) fn is_capture_trigger(name: &[u8]) -> bool {
    name == b"worlds_capture" || name == b"worlds_capture_truncate"
}

/// The name it has in pg_trigger: an internal trigger's name is suffixed with its oid.
fn is_capture_trigger_name(name: &[u8]) -> bool {
    let rest = name.strip_prefix(b"worlds_capture_").map(|r| r.strip_prefix(b"truncate_").unwrap_or(r));
    rest.is_some_and(|r| !r.is_empty() && r.iter().all(u8::is_ascii_digit))
}
