//! The visibility functions the overlay views call per row (raw V1 functions: the hot path), and the
//! parts of the cache a query freezes for them.
use super::*;
use crate::backend_local::BackendLocal;


pub(super) unsafe fn arg_key(fcinfo: pg_sys::FunctionCallInfo, n: usize, int_key: bool) -> Option<Key> {
    unsafe {
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, n) {
            return None;
        }
        let d = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n);
        if int_key {
            // int2, int4 and int8 datums all hold the value sign-extended
            Some(Key::I(d.value() as i64))
        } else {
            String::from_datum(d, false).map(Key::T)
        }
    }
}

thread_local! {
    /// The world parts a query of one SELECT (a cursor, a plpgsql FOR loop's query) reads, taken when it
    /// started: by its executor memory (where its call sites live), then table. A cursor's first row may
    /// come after later statements of its transaction wrote the world, and it must read the world as of
    /// its start.
    pub(super) static QUERY_PARTS: RefCell<HashMap<usize, PartsByTable>> = RefCell::new(HashMap::new());
}

pub(super) type PartsByTable = HashMap<i32, Rc<WorldPart>>;

/// The active portal, when it runs one SELECT.
pub(super) fn select_portal() -> Option<*mut pg_sys::PortalData> {
    unsafe {
        let portal = pg_sys::ActivePortal;
        (!portal.is_null() && (*portal).strategy == pg_sys::PortalStrategy::PORTAL_ONE_SELECT).then_some(portal)
    }
}

/// Is the query being started the active portal's own one SELECT (not a query run inside it)?
pub fn starting_portal_select() -> bool {
    select_portal().is_some_and(|p| unsafe { (*p).queryDesc.is_null() })
}

/// After ExecutorStart of a portal's own SELECT in a world: the world parts of the tables it reads, kept
/// for its life (dropped with its executor memory).
///
/// # Safety
/// `query_cxt` is the started query's `es_query_cxt`.
pub unsafe fn freeze_for_query(query_cxt: pg_sys::MemoryContext, tabnos: &[i32]) {
    static FREEZING: BackendLocal<Cell<bool>> = BackendLocal::new(Cell::new(false));
    // making a cache current may run queries of one SELECT itself (a moment's world, AS OF): not again
    if FREEZING.with(|f| f.replace(true)) {
        return;
    }
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            FREEZING.with(|f| f.set(false));
        }
    }
    let _done = Done;
    let parts: PartsByTable = tabnos.iter().map(|&t| (t, with_cache(t, |c| c.world.clone()))).collect();
    QUERY_PARTS.with(|p| p.borrow_mut().insert(query_cxt as usize, parts));
    unsafe {
        let cb = pg_sys::MemoryContextAlloc(query_cxt, std::mem::size_of::<pg_sys::MemoryContextCallback>()) as *mut pg_sys::MemoryContextCallback;
        (*cb).func = Some(forget_query_parts);
        (*cb).arg = query_cxt as *mut std::ffi::c_void;
        pg_sys::MemoryContextRegisterResetCallback(query_cxt, cb);
    }
}

pub(super) unsafe extern "C-unwind" fn forget_query_parts(arg: *mut std::ffi::c_void) {
    QUERY_PARTS.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            p.remove(&(arg as usize));
        }
    });
}

/// The part the query owning `query_cxt` started with, if it was kept.
pub(super) fn query_part(query_cxt: pg_sys::MemoryContext, tabno: i32) -> Option<Rc<WorldPart>> {
    QUERY_PARTS.with(|p| p.borrow().get(&(query_cxt as usize)).and_then(|m| m.get(&tabno).cloned()))
}

/// What one call site of the visibility functions keeps in its `fn_extra` for the query's life: the world
/// part it reads (None: the cache's current one).
pub(super) struct CallSite {
    world_num: i32,
    part: Option<Rc<WorldPart>>,
}

/// The world part a call site reads. A query read through a portal of one SELECT (a cursor, a plpgsql FOR
/// loop's query, a plain SELECT) keeps the part current at its first row for its life, as the world scan
/// does: a cursor reads the world as of its start while later statements write it (a write copies the part
/// first while a query holds it). Other statements (an UPDATE reading its rows) read the current part:
/// holding it would make each of their writes copy it.
pub(super) unsafe fn site_world(fcinfo: pg_sys::FunctionCallInfo, c: &TableCache, tabno: i32) -> &WorldPart {
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        if flinfo.is_null() {
            return &c.world;
        }
        if (*flinfo).fn_extra.is_null() {
            // (the part its query started with, else the one current at its first row)
            let part = select_portal().map(|_| query_part((*flinfo).fn_mcxt, tabno).unwrap_or_else(|| c.world.clone()));
            let site = CallSite { world_num: c.world_num, part };
            let mem = pg_sys::MemoryContextAlloc((*flinfo).fn_mcxt, std::mem::size_of::<CallSite>()) as *mut CallSite;
            std::ptr::write(mem, site);
            // the part is let go when the query's memory is (its Rc must not outlive it)
            let cb = pg_sys::MemoryContextAlloc((*flinfo).fn_mcxt, std::mem::size_of::<pg_sys::MemoryContextCallback>())
                as *mut pg_sys::MemoryContextCallback;
            (*cb).func = Some(drop_call_site);
            (*cb).arg = mem as *mut std::ffi::c_void;
            pg_sys::MemoryContextRegisterResetCallback((*flinfo).fn_mcxt, cb);
            (*flinfo).fn_extra = mem as *mut std::ffi::c_void;
        }
        let site = &*((*flinfo).fn_extra as *const CallSite);
        match &site.part {
            // (the same world: a session that switched since reads its new world)
            Some(part) if site.world_num == c.world_num => &*Rc::as_ptr(part),
            _ => &c.world,
        }
    }
}

pub(super) unsafe extern "C-unwind" fn drop_call_site(arg: *mut std::ffi::c_void) {
    unsafe { std::ptr::drop_in_place(arg as *mut CallSite) }
}

pub(super) unsafe fn base_visible(fcinfo: pg_sys::FunctionCallInfo, int_key: bool) -> pg_sys::Datum {
    unsafe {
        // (the overlay views pass a table's number and a row's ctid, never NULL; a role calling it by hand
        // may: no row of a NULL position is visible, rather than a read through a null pointer)
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, 0) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 1) {
            return pg_sys::Datum::from(false);
        }
        let tabno = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i32;
        let visible = with_cache(tabno, |c| {
            sees_base(&c.created_tids, site_world(fcinfo, c, tabno), || tid_of_datum(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1)), || arg_key(fcinfo, 2, int_key))
        });
        pg_sys::Datum::from(visible)
    }
}

v1!(pg_finfo_worlds_base_visible_i);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_base_visible_i(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { base_visible(fcinfo, true) }
}

v1!(pg_finfo_worlds_base_visible_t);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_base_visible_t(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { base_visible(fcinfo, false) }
}

v1!(pg_finfo_worlds_delta_visible);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_delta_visible(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let tabno = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i32;
        let dseq = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2).value() as i64;
        pg_sys::Datum::from(with_cache(tabno, |c| site_world(fcinfo, c, tabno).delta_pick.contains(&dseq)))
    }
}

pub(super) unsafe fn history_visible(fcinfo: pg_sys::FunctionCallInfo, int_key: bool) -> pg_sys::Datum {
    unsafe {
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, 0) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 1) {
            return pg_sys::Datum::from(false);
        }
        let tabno = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i32;
        let hseq = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1).value() as i64;
        let visible = with_cache(tabno, |c| {
            if !c.hist_pick.contains(&hseq) {
                return false;
            }
            let world = site_world(fcinfo, c, tabno);
            if !world.hidden_tids.is_empty() {
                // a table without a key passes the physical row's tid as its key
                if let Some(Key::T(tid)) = arg_key(fcinfo, 2, int_key) {
                    return !world.hidden_tids.contains(&parse_tid(&tid));
                }
            }
            sees_history(&c.hist_pick, world, hseq, || arg_key(fcinfo, 2, int_key))
        });
        pg_sys::Datum::from(visible)
    }
}

v1!(pg_finfo_worlds_history_visible_i);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_history_visible_i(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { history_visible(fcinfo, true) }
}

v1!(pg_finfo_worlds_history_visible_t);
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_history_visible_t(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { history_visible(fcinfo, false) }
}

/// Where main's before-images the session's world may see are in the table's history (the overlay view's
/// history branch reads them by tid: history has no index on the key).
#[pg_extern(stable, parallel_restricted)]
pub(super) fn _history_tids(tabno: i32) -> Vec<pg_sys::ItemPointerData> {
    with_cache(tabno, |c| c.hist_rows.iter().map(|&t| unpack_tid(t)).collect())
}

pub fn unpack_tid(t: u64) -> pg_sys::ItemPointerData {
    let block = (t >> 16) as u32;
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData { bi_hi: (block >> 16) as u16, bi_lo: (block & 0xffff) as u16 },
        ip_posid: (t & 0xffff) as u16,
    }
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k int8) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k int4) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k int2) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._base_visible(tabno int4, row_tid tid, k text) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_base_visible_t' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._delta_visible(tabno int4, world int4, dseq int8) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_delta_visible' LANGUAGE c STABLE STRICT PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k int8) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k int4) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k int2) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_i' LANGUAGE c STABLE PARALLEL SAFE COST 1;
CREATE FUNCTION worlds._history_visible(tabno int4, hseq int8, k text) RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_history_visible_t' LANGUAGE c STABLE PARALLEL SAFE COST 1;
"#,
    name = "visibility_functions",
    requires = ["catalog", _history_tids],
);
