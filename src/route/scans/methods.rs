//! What pg_worlds' Custom Scans (world_scan/, key_lookup.rs) share: their method tables,
//! kept as statics, reading the integers of their private lists, and reading keys out of datums.
use pgrx::pg_sys;

/// A method table Postgres keeps a pointer to.
pub struct Methods<T>(pub T);
// SAFETY: read-only tables of function pointers and a static name
unsafe impl<T> Sync for Methods<T> {}

type PlanFn = unsafe extern "C-unwind" fn(
    *mut pg_sys::PlannerInfo,
    *mut pg_sys::RelOptInfo,
    *mut pg_sys::CustomPath,
    *mut pg_sys::List,
    *mut pg_sys::List,
    *mut pg_sys::List,
) -> *mut pg_sys::Plan;

pub const fn path_methods(name: &'static std::ffi::CStr, plan: PlanFn) -> pg_sys::CustomPathMethods {
    pg_sys::CustomPathMethods { CustomName: name.as_ptr(), PlanCustomPath: Some(plan), ReparameterizeCustomPathByChild: None }
}

pub const fn scan_methods(
    name: &'static std::ffi::CStr,
    create: unsafe extern "C-unwind" fn(*mut pg_sys::CustomScan) -> *mut pg_sys::Node,
) -> pg_sys::CustomScanMethods {
    pg_sys::CustomScanMethods { CustomName: name.as_ptr(), CreateCustomScanState: Some(create) }
}

/// A scan's execution methods, without parallel ones.
pub const fn exec_methods(
    name: &'static std::ffi::CStr,
    begin: unsafe extern "C-unwind" fn(*mut pg_sys::CustomScanState, *mut pg_sys::EState, std::ffi::c_int),
    exec: unsafe extern "C-unwind" fn(*mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot,
    end: unsafe extern "C-unwind" fn(*mut pg_sys::CustomScanState),
    rescan: unsafe extern "C-unwind" fn(*mut pg_sys::CustomScanState),
) -> pg_sys::CustomExecMethods {
    pg_sys::CustomExecMethods {
        CustomName: name.as_ptr(),
        BeginCustomScan: Some(begin),
        ExecCustomScan: Some(exec),
        EndCustomScan: Some(end),
        ReScanCustomScan: Some(rescan),
        MarkPosCustomScan: None,
        RestrPosCustomScan: None,
        EstimateDSMCustomScan: None,
        InitializeDSMCustomScan: None,
        ReInitializeDSMCustomScan: None,
        InitializeWorkerCustomScan: None,
        ShutdownCustomScan: None,
        ExplainCustomScan: None,
    }
}

/// The `n`th integer of a private list.
///
/// # Safety
/// `list` is a list of Integer nodes with more than `n` members.
pub unsafe fn int_at(list: *mut pg_sys::List, n: i32) -> i32 {
    unsafe { (*(crate::fast_ffi::list_nth(list, n) as *mut pg_sys::Integer)).ival }
}

/// Narrows the integer key range `range` (lo, hi) by `key <strategy> v`, a btree strategy: false when no
/// key can satisfy it (`< i64::MIN`, `> i64::MAX`), None for a strategy that isn't a comparison.
pub fn narrow(range: &mut (i64, i64), strategy: u32, v: i64) -> Option<bool> {
    let (lo, hi) = range;
    match strategy {
        pg_sys::BTLessStrategyNumber => match v.checked_sub(1) {
            Some(v) => *hi = (*hi).min(v),
            None => return Some(false),
        },
        pg_sys::BTLessEqualStrategyNumber => *hi = (*hi).min(v),
        pg_sys::BTEqualStrategyNumber => {
            *lo = (*lo).max(v);
            *hi = (*hi).min(v);
        }
        pg_sys::BTGreaterEqualStrategyNumber => *lo = (*lo).max(v),
        pg_sys::BTGreaterStrategyNumber => match v.checked_add(1) {
            Some(v) => *lo = (*lo).max(v),
            None => return Some(false),
        },
        _ => return None,
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::narrow;
    use pgrx::pg_sys;

    #[test]
    fn narrow_combines_bounds() {
        let mut r = (i64::MIN, i64::MAX);
        assert_eq!(narrow(&mut r, pg_sys::BTGreaterStrategyNumber, 5), Some(true));
        assert_eq!(narrow(&mut r, pg_sys::BTLessEqualStrategyNumber, 9), Some(true));
        assert_eq!(r, (6, 9));
        assert_eq!(narrow(&mut r, pg_sys::BTEqualStrategyNumber, 7), Some(true));
        assert_eq!(r, (7, 7));
        assert_eq!(narrow(&mut r, pg_sys::BTLessStrategyNumber, i64::MIN), Some(false));
        assert_eq!(narrow(&mut (0, 0), pg_sys::BTGreaterStrategyNumber, i64::MAX), Some(false));
        assert_eq!(narrow(&mut (0, 0), 9, 1), None);
    }
}

/// The world scan's name (parallel workers find its methods by it; EXPLAIN shows it).
pub const WORLD_SCAN: &std::ffi::CStr = c"WorldScan";
/// The key lookup's.
pub const KEY_LOOKUP: &std::ffi::CStr = c"WorldKeyLookup";

pub(crate) unsafe fn list_items<T>(list: *mut pg_sys::List) -> Vec<*mut T> {
    unsafe {
        if list.is_null() {
            return Vec::new();
        }
        (0..(*list).length).map(|i| crate::fast_ffi::list_nth(list, i) as *mut T).collect()
    }
}
