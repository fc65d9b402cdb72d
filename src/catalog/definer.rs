//! pg_worlds' plpgsql functions run with the extension owner's rights, yet none is SECURITY DEFINER.
//!
//! A DBA's cluster (and PostgreSQL's own regression suite, opr_sanity) expects no SECURITY DEFINER function
//! it did not make. So each plpgsql function of schema `worlds` is kept as its body in schema `worlds_data`
//! (named `<name>__body`, same arguments, SECURITY INVOKER, with its `SET search_path`), and `worlds.<name>` is a C
//! function with the same signature, strictness, volatility and grants, whose code is this one: it finds
//! its body once per call site (cached in `fn_extra`), switches to the body's owner exactly as
//! `fmgr_security_definer` does (`SECURITY_LOCAL_USERID_CHANGE`), and calls the body with the caller's own
//! call frame (arguments, a set-returning function's result info, a trigger's or event trigger's context).
//! The owner is given back when the body returns or fails; an error also restores it through the
//! (sub)transaction's abort, as for SECURITY DEFINER. install.sql makes the pairs.
use pgrx::pg_sys;
use pgrx::pg_sys::ffi::pg_guard_ffi_boundary;
use pgrx::prelude::*;

/// A call site's body: its FmgrInfo (lives in the call site's memory context) and its owner.
#[repr(C)]
struct Body {
    finfo: pg_sys::FmgrInfo,
    owner: pg_sys::Oid,
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_worlds_definer() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

unsafe fn form_of(tuple: pg_sys::HeapTuple) -> *mut pg_sys::FormData_pg_proc {
    unsafe { ((*tuple).t_data as *mut u8).add((*(*tuple).t_data).t_hoff as usize) as *mut pg_sys::FormData_pg_proc }
}

/// A body's name: its function's and this (two functions of one name and arguments, even in two schemas,
/// are a conflict to opr_sanity).
const BODY_SUFFIX: &str = "__body";

/// The body of the function `fn_oid`: `worlds_data.<its name>__body(<its argument types>)`.
unsafe fn find_body(flinfo: pg_sys::FmgrInfo) -> (pg_sys::Oid, pg_sys::Oid) {
    unsafe {
        let fn_oid = flinfo.fn_oid;
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::PROCOID as i32, pg_sys::Datum::from(fn_oid));
        if tuple.is_null() {
            pgrx::error!("cache lookup failed for function {}", fn_oid.to_u32());
        }
        let form = form_of(tuple);
        let data = pg_sys::get_namespace_oid(c"worlds_data".as_ptr(), false);
        let name = std::ffi::CStr::from_ptr((*form).proname.data.as_ptr()).to_string_lossy().into_owned();
        let body_name = std::ffi::CString::new(format!("{name}{BODY_SUFFIX}")).expect("a function's name");
        let mut key: pg_sys::NameData = std::mem::zeroed();
        pg_sys::namestrcpy(&mut key, body_name.as_ptr());
        let body = pg_sys::SearchSysCache3(
            pg_sys::SysCacheIdentifier::PROCNAMEARGSNSP as i32,
            pg_sys::Datum::from(&raw mut key),
            pg_sys::Datum::from(&raw mut (*form).proargtypes),
            pg_sys::Datum::from(data),
        );
        pg_sys::ReleaseSysCache(tuple);
        if body.is_null() {
            pgrx::error!("pg_worlds: the body of function worlds.{name} ({name}{BODY_SUFFIX}) is missing from schema worlds_data");
        }
        let bform = form_of(body);
        let found = ((*bform).oid, (*bform).proowner);
        pg_sys::ReleaseSysCache(body);
        found
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_definer(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        let mut body = (*flinfo).fn_extra as *mut Body;
        if body.is_null() {
            let (oid, owner) = find_body(*flinfo);
            body = pg_sys::MemoryContextAllocZero((*flinfo).fn_mcxt, std::mem::size_of::<Body>()) as *mut Body;
            pg_sys::fmgr_info_cxt(oid, &raw mut (*body).finfo, (*flinfo).fn_mcxt);
            // the call's expression: a polymorphic body resolves its argument types from it
            (*body).finfo.fn_expr = (*flinfo).fn_expr;
            (*body).owner = owner;
            (*flinfo).fn_extra = body as *mut std::ffi::c_void;
        }
        struct Restore(pg_sys::FunctionCallInfo, *mut pg_sys::FmgrInfo, pg_sys::Oid, i32);
        impl Drop for Restore {
            fn drop(&mut self) {
                unsafe {
                    (*self.0).flinfo = self.1;
                    pg_sys::SetUserIdAndSecContext(self.2, self.3);
                }
            }
        }
        let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec);
        let _restore = Restore(fcinfo, flinfo, user, sec);
        pg_sys::SetUserIdAndSecContext((*body).owner, sec | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
        (*fcinfo).flinfo = &raw mut (*body).finfo;
        let call = (*body).finfo.fn_addr.expect("a function's address");
        pg_guard_ffi_boundary(|| call(fcinfo))
    }
}
