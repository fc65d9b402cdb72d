//! A query of a world that reaches one of main's tables the world changed the shape of (a qualified
//! name, main's view over it, a function's query): it reads the table's twin instead (storage/
//! world_twins.rs). The twin keeps main's column numbers, so the query's columns are the twin's where the
//! world left them as main has them; a column the world changed (dropped, renamed, retyped) can't be read
//! that way: 0A000 naming it, with the way that works (the name without its schema finds the twin).
use crate::api::raise_with;
use pgrx::pg_sys;
use std::ffi::CStr;

/// Points `rte` (main's table) at `twin`, after checking that every column it reads or writes is the same
/// column in both.
///
/// # Safety
/// `rte` is a relation entry of a query being analysed.
pub unsafe fn swap(rte: *mut pg_sys::RangeTblEntry, twin: pg_sys::Oid) {
    unsafe {
        let main = (*rte).relid;
        if twin == pg_sys::Oid::INVALID {
            // main's table the world dropped
            crate::storage::world_twins::dropped_in_world(main);
        }
        for set in [(*rte).selectedCols, (*rte).insertedCols, (*rte).updatedCols] {
            let mut m = -1;
            loop {
                m = pg_sys::bms_next_member(set, m);
                if m < 0 {
                    break;
                }
                let attnum = (m + pg_sys::FirstLowInvalidHeapAttributeNumber) as i16;
                if attnum < 0 {
                    continue; // a system column
                }
                if attnum == 0 {
                    // the whole row: every column the same
                    let n = live_attributes(main).max(live_attributes(twin));
                    for a in 1..=n {
                        if let Err(c) = same_column(main, twin, a) {
                            refuse(main, &c);
                        }
                    }
                } else if let Err(c) = same_column(main, twin, attnum) {
                    refuse(main, &c);
                }
            }
        }
        (*rte).relid = twin;
        pg_sys::LockRelationOid(twin, (*rte).rellockmode);
    }
}

unsafe fn live_attributes(relid: pg_sys::Oid) -> i16 {
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return 0;
        }
        let n = (*(*rel).rd_att).natts as i16;
        pg_sys::RelationClose(rel);
        n
    }
}

unsafe fn attribute(relid: pg_sys::Oid, attnum: i16) -> Option<(String, pg_sys::Oid, i32, pg_sys::Oid, bool)> {
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return None;
        }
        let desc = (*rel).rd_att;
        let out = if attnum as i32 > (*desc).natts {
            None
        } else {
            let a = (*desc).attrs.as_ptr().add(attnum as usize - 1);
            Some((CStr::from_ptr((*a).attname.data.as_ptr()).to_string_lossy().into_owned(), (*a).atttypid, (*a).atttypmod, (*a).attcollation, (*a).attisdropped))
        };
        pg_sys::RelationClose(rel);
        out
    }
}

/// Is column `attnum` the same in main's table and its twin? Err: the column's name, as main has it.
unsafe fn same_column(main: pg_sys::Oid, twin: pg_sys::Oid, attnum: i16) -> Result<(), String> {
    unsafe {
        let m = attribute(main, attnum);
        let t = attribute(twin, attnum);
        match (m, t) {
            (Some(m), Some(t)) if m.4 && t.4 => Ok(()),
            (Some(m), Some(t)) if !m.4 && !t.4 && m.0 == t.0 && m.1 == t.1 && m.2 == t.2 && m.3 == t.3 => Ok(()),
            (Some(m), _) if !m.4 => Err(m.0),
            (_, Some(t)) if !t.4 => Err(t.0),
            _ => Ok(()),
        }
    }
}

unsafe fn refuse(main: pg_sys::Oid, column: &str) -> ! {
    unsafe {
        let name = CStr::from_ptr(pg_sys::get_rel_name(main)).to_string_lossy().into_owned();
        let world = crate::storage::overlay::routing_world().map(|w| w.name.clone()).unwrap_or_default();
        raise_with(
            "0A000",
            format!("column \"{column}\" of table {name} is changed in world \"{world}\": a query that reaches main's table by its schema-qualified name, or through main's view or function, can't read the world's column yet"),
            None,
            Some(format!("Name the table without its schema inside the world ({name}): that name finds the world's table.")),
        )
    }
}
