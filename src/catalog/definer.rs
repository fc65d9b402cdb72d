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

/// The body of this call site, found once (an error here is pg_worlds' own: raised through pgrx's guard).
unsafe fn body_of(flinfo: *mut pg_sys::FmgrInfo) -> *mut Body {
    unsafe {
        let mut body = (*flinfo).fn_extra as *mut Body;
        if body.is_null() {
            body = pgrx::pg_sys::submodules::panic::pgrx_extern_c_guard(|| {
                let (oid, owner) = find_body(*flinfo);
                let b = pg_sys::MemoryContextAllocZero((*flinfo).fn_mcxt, std::mem::size_of::<Body>()) as *mut Body;
                pg_sys::fmgr_info_cxt(oid, &raw mut (*b).finfo, (*flinfo).fn_mcxt);
                // the call's expression: a polymorphic body resolves its argument types from it
                (*b).finfo.fn_expr = (*flinfo).fn_expr;
                (*b).owner = owner;
                b
            });
            (*flinfo).fn_extra = body as *mut std::ffi::c_void;
        }
        body
    }
}

/// A thin frame, holding nothing to drop: the body is called directly, not through pgrx's guard, so an
/// error it raises reaches the caller as raised (its CONTEXT lines, position and fields), as through
/// `fmgr_security_definer`. The body gets a call frame of its own (the caller's arguments, collation,
/// result info and context): the caller's is never changed, so nothing needs restoring when the body
/// fails. The user is switched back after it returns; after an error the (sub)transaction's abort restores
/// it, as for SECURITY DEFINER.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_definer(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let body = body_of((*fcinfo).flinfo);
        let nargs = (*fcinfo).nargs as usize;
        let size = std::mem::size_of::<pg_sys::FunctionCallInfoBaseData>() + nargs * std::mem::size_of::<pg_sys::NullableDatum>();
        let callee = pg_sys::palloc0(size) as pg_sys::FunctionCallInfo;
        (*callee).flinfo = &raw mut (*body).finfo;
        (*callee).context = (*fcinfo).context;
        (*callee).resultinfo = (*fcinfo).resultinfo;
        (*callee).fncollation = (*fcinfo).fncollation;
        (*callee).nargs = (*fcinfo).nargs;
        std::ptr::copy_nonoverlapping((*fcinfo).args.as_ptr(), (*callee).args.as_mut_ptr(), nargs);
        let (mut user, mut sec) = (pg_sys::Oid::INVALID, 0i32);
        pg_sys::GetUserIdAndSecContext(&mut user, &mut sec);
        pg_sys::SetUserIdAndSecContext((*body).owner, sec | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
        let call = (*body).finfo.fn_addr.unwrap_unchecked();
        let result = call(callee);
        pg_sys::SetUserIdAndSecContext(user, sec);
        (*fcinfo).isnull = (*callee).isnull;
        pg_sys::pfree(callee as *mut std::ffi::c_void);
        result
    }
}
