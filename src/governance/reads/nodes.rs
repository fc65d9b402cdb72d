//! Plan trees and values as the read recorders walk them: a node's tag, a List's members, every plan
//! state under one, a constant's text.
use pgrx::pg_sys;

pub(super) unsafe fn list<T>(l: *mut pg_sys::List) -> Vec<*mut T> {
    unsafe {
        if l.is_null() {
            return Vec::new();
        }
        (0..(*l).length).map(|i| crate::fast_ffi::list_nth(l, i) as *mut T).collect()
    }
}

pub(super) unsafe fn tag<T>(n: *mut T) -> pg_sys::NodeTag {
    unsafe { (*(n as *mut pg_sys::Node)).type_ }
}

pub(super) unsafe fn text_of(typ: pg_sys::Oid, d: pg_sys::Datum) -> String {
    unsafe {
        let (mut out, mut varlena) = (pg_sys::Oid::INVALID, false);
        pg_sys::getTypeOutputInfo(typ, &mut out, &mut varlena);
        let s = pg_sys::OidOutputFunctionCall(out, d);
        let r = std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned();
        pg_sys::pfree(s as *mut std::ffi::c_void);
        r
    }
}

/// The plan states under `ps` (itself included).
pub(super) unsafe fn planstates(ps: *mut pg_sys::PlanState, out: &mut Vec<*mut pg_sys::PlanState>) {
    unsafe {
        if ps.is_null() {
            return;
        }
        out.push(ps);
        planstates((*ps).lefttree, out);
        planstates((*ps).righttree, out);
        let arr = |p: *mut *mut pg_sys::PlanState, n: i32| (0..n.max(0) as usize).map(|i| *p.add(i)).collect::<Vec<_>>();
        let children: Vec<*mut pg_sys::PlanState> = match tag(ps) {
            pg_sys::NodeTag::T_AppendState => arr((*(ps as *mut pg_sys::AppendState)).appendplans, (*(ps as *mut pg_sys::AppendState)).as_nplans),
            pg_sys::NodeTag::T_MergeAppendState => arr((*(ps as *mut pg_sys::MergeAppendState)).mergeplans, (*(ps as *mut pg_sys::MergeAppendState)).ms_nplans),
            pg_sys::NodeTag::T_BitmapAndState => arr((*(ps as *mut pg_sys::BitmapAndState)).bitmapplans, (*(ps as *mut pg_sys::BitmapAndState)).nplans),
            pg_sys::NodeTag::T_BitmapOrState => arr((*(ps as *mut pg_sys::BitmapOrState)).bitmapplans, (*(ps as *mut pg_sys::BitmapOrState)).nplans),
            pg_sys::NodeTag::T_SubqueryScanState => vec![(*(ps as *mut pg_sys::SubqueryScanState)).subplan],
            pg_sys::NodeTag::T_CustomScanState => list((*(ps as *mut pg_sys::CustomScanState)).custom_ps),
            _ => Vec::new(),
        };
        for c in children {
            planstates(c, out);
        }
    }
}
