//! The app's own BEFORE ROW triggers on a tracked table, fired on a world's rows.
//!
//! A world's writes go to the overlay view's INSTEAD OF trigger, not to the table, so Postgres would not
//! fire the table's triggers for them. The BEFORE ROW ones (an `updated_at`, a slug, a normalised email)
//! shape the row that is stored, so pg_worlds fires them here, through Postgres's own ExecBR*Triggers
//! over a small executor state for the table: enabled triggers only, WHEN clauses, in name order, a NULL
//! return skipping the row. An UPDATE counts every column as updated (the view's trigger doesn't see the
//! statement's SET list), so `UPDATE OF` triggers fire on any update in a world. AFTER and statement
//! triggers are not fired in a world; they fire on main's rows when the world merges.
use pgrx::pg_sys;

/// Which row event.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Insert,
    Update,
    Delete,
}

/// Does the table have BEFORE ROW triggers for this event? (A quick test, before any work.)
pub fn any(relid: pg_sys::Oid, event: Event) -> bool {
    unsafe {
        let rel = pg_sys::relation_open(relid, pg_sys::AccessShareLock as i32);
        let td = (*rel).trigdesc;
        let yes = !td.is_null()
            && match event {
                Event::Insert => (*td).trig_insert_before_row,
                Event::Update => (*td).trig_update_before_row,
                Event::Delete => (*td).trig_delete_before_row,
            };
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        yes
    }
}

/// Fires the table's BEFORE ROW triggers for one row of the world. `view_desc` describes the overlay's
/// rows (the table's attnums, maybe with trailing columns of its own); `old` is the row as the world has
/// it (UPDATE, DELETE), `new` the proposed one (INSERT, UPDATE). Returns the row to write, in the view's
/// shape (for DELETE: `old` itself), or None when a trigger skipped it.
///
/// # Safety
/// `view_desc` describes `old` and `new`, which are valid heap tuples (or null where the event has none).
pub unsafe fn fire_before(
    relid: pg_sys::Oid,
    event: Event,
    view_desc: pg_sys::TupleDesc,
    old: pg_sys::HeapTuple,
    new: pg_sys::HeapTuple,
) -> Option<pg_sys::HeapTuple> {
    unsafe {
        let caller = pg_sys::CurrentMemoryContext;
        // (the table itself is only read: its triggers and their functions)
        let rel = pg_sys::relation_open(relid, pg_sys::AccessShareLock as i32);
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let estate = pg_sys::CreateExecutorState();
        // a range table of the one table, every column counted as updated (UPDATE OF triggers)
        let rte = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblEntry>()) as *mut pg_sys::RangeTblEntry;
        (*rte).type_ = pg_sys::NodeTag::T_RangeTblEntry;
        (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
        (*rte).relid = relid;
        (*rte).relkind = pg_sys::RELKIND_RELATION as std::ffi::c_char;
        (*rte).rellockmode = pg_sys::AccessShareLock as i32;
        for a in 1..=natts as i32 {
            (*rte).updatedCols = pg_sys::bms_add_member((*rte).updatedCols, a - pg_sys::FirstLowInvalidHeapAttributeNumber);
        }
        pg_sys::ExecInitRangeTable(estate, pg_sys::lappend(std::ptr::null_mut(), rte as *mut std::ffi::c_void));
        let rri = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>()) as *mut pg_sys::ResultRelInfo;
        (*rri).type_ = pg_sys::NodeTag::T_ResultRelInfo;
        pg_sys::InitResultRelInfo(rri, rel, 1, std::ptr::null_mut(), 0);

        let view_natts = (*view_desc).natts as usize;
        let deform = |t: pg_sys::HeapTuple| {
            let mut values = vec![pg_sys::Datum::from(0usize); view_natts];
            let mut nulls = vec![true; view_natts];
            if !t.is_null() {
                pg_sys::heap_deform_tuple(t, view_desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            }
            (values, nulls)
        };
        // the world's row as a tuple of the table (a dropped column of the table is null)
        let as_table_tuple = |values: &[pg_sys::Datum], nulls: &[bool]| {
            let mut v = values[..natts].to_vec();
            let mut n = nulls[..natts].to_vec();
            for a in 0..natts {
                if (*(*desc).attrs.as_ptr().add(a)).attisdropped {
                    n[a] = true;
                    v[a] = pg_sys::Datum::from(0usize);
                }
            }
            pg_sys::heap_form_tuple(desc, v.as_mut_ptr(), n.as_mut_ptr())
        };
        let (old_values, old_nulls) = deform(old);
        let (new_values, new_nulls) = deform(new);
        let slot = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
        let keep = match event {
            Event::Insert => {
                pg_sys::ExecForceStoreHeapTuple(as_table_tuple(&new_values, &new_nulls), slot, false);
                pg_sys::ExecBRInsertTriggers(estate, rri, slot)
            }
            Event::Update => {
                pg_sys::ExecForceStoreHeapTuple(as_table_tuple(&new_values, &new_nulls), slot, false);
                let old_tuple = as_table_tuple(&old_values, &old_nulls);
                pg_sys::ExecBRUpdateTriggers(estate, std::ptr::null_mut(), rri, std::ptr::null_mut(), old_tuple, slot, std::ptr::null_mut())
            }
            Event::Delete => {
                let old_tuple = as_table_tuple(&old_values, &old_nulls);
                pg_sys::ExecBRDeleteTriggers(estate, std::ptr::null_mut(), rri, std::ptr::null_mut(), old_tuple, std::ptr::null_mut())
            }
        };
        let result = if !keep {
            None
        } else if event == Event::Delete {
            Some(old)
        } else {
            // the row the triggers left, back in the view's shape (its own trailing columns as they were)
            pg_sys::slot_getallattrs(slot);
            let (mut values, mut nulls) = (new_values, new_nulls);
            for a in 0..natts {
                if !(*(*desc).attrs.as_ptr().add(a)).attisdropped {
                    values[a] = *(*slot).tts_values.add(a);
                    nulls[a] = *(*slot).tts_isnull.add(a);
                }
            }
            let previous = pg_sys::MemoryContextSwitchTo(caller);
            let t = pg_sys::heap_form_tuple(view_desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            pg_sys::MemoryContextSwitchTo(previous);
            Some(t)
        };
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::ExecResetTupleTable((*estate).es_tupleTable, false);
        pg_sys::FreeExecutorState(estate);
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        result
    }
}
