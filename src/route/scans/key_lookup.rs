//! Key lookups: how a statement read through a table's overlay view (every write in a world) reaches the
//! world's rows of the one key it names, without reading everything else.
//!
//! - **History.** The overlay view's history branch keeps the before-images the world sees by their tids
//!   (`ctid = ANY(worlds._history_tids(tabno))`): history has no index on the key (capture would pay for
//!   it on every write of main), so that branch cost O(main's changes to the table since the fork) for
//!   every statement, and an old world over a busy main slowed down as main worked. Here the overlay
//!   cache gives that key's before-images (`ScanCache::history_rows_in`, the same tids filtered by key),
//!   fetched by tid: O(1) in main's changes.
//! - **Delta.** The delta branch reads a key's versions through the delta's key index and keeps the one
//!   the cache picked (`_delta_visible`): O(versions of the key), so a row the world updated thousands of
//!   times slowed every statement on it. Here the cache names the key's winning version, read through the
//!   delta's (key, version) index: one row.
//!
//! For tables with one integer key column, or one text, varchar or uuid key column (a type whose text is
//! its identity, the key as the cache keeps it), when the statement compares the key to a constant or
//! parameter (`WHERE id = 7`, `= $1`), or to a list or array of them (`IN (1, 2)`, `= ANY($1)`: each key
//! once), with the type's own equality (and a deterministic collation). For an integer key, bounds too
//! (`BETWEEN $1 AND $2`, `id > 7`): the history branch takes the before-images in that range from the
//! cache's key order (the delta branch's key index serves a range as it is). The branch's own quals (the
//! world's visibility test among them) still run on what is fetched.
use crate::route::scans::methods::{exec_methods, int_at, narrow, path_methods, scan_methods, Methods};
use crate::datum::{array_elements, integer_of};
use crate::storage::{self, overlay};
use pgrx::pg_sys;
use pgrx::prelude::*;
use crate::route::scans::keys::{find_version_index, version_index, DELTA, HISTORY, KEY_LIST, KEY_RANGE, ONE_KEY};

static PATH_METHODS: Methods<pg_sys::CustomPathMethods> = Methods(path_methods(crate::route::scans::methods::KEY_LOOKUP, plan_path));

static SCAN_METHODS: Methods<pg_sys::CustomScanMethods> = Methods(scan_methods(crate::route::scans::methods::KEY_LOOKUP, create_state));

static EXEC_METHODS: Methods<pg_sys::CustomExecMethods> = Methods(exec_methods(crate::route::scans::methods::KEY_LOOKUP, begin, exec, end, rescan));



// ---------------------------------------------------------------------------------------------- planning

/// The tracked table (tabno) and branch whose storage `relid` is, for a table with one integer key column.
unsafe fn storage_of(relid: pg_sys::Oid) -> Option<(i32, i32)> {
    unsafe {
        let data = crate::storage::storage_namespace();
        if data == pg_sys::Oid::INVALID || pg_sys::get_rel_namespace(relid) != data {
            return None;
        }
    }
    storage::routed_tables().values().copied().find_map(|tabno| {
        let l = storage::relation_layout(tabno);
        if !crate::route::scans::keys::supports(&l) && !overlay::text_keyed(&l) {
            return None;
        }
        if l.history == relid {
            Some((tabno, HISTORY))
        } else if l.delta == relid {
            Some((tabno, DELTA))
        } else {
            None
        }
    })
}

/// The storage relation's attribute holding the table's key column.
fn key_attno_in(layout: &storage::Layout, branch: i32) -> Option<i16> {
    if branch == HISTORY {
        let key = layout.key_attnos[0];
        return layout.history_map.iter().position(|a| *a == Some(key)).map(|i| (storage::capture::H_FIXED + i + 1) as i16);
    }
    let name = std::ffi::CString::new(layout.key_columns[0].as_str()).ok()?;
    let attno = unsafe { pg_sys::get_attnum(layout.delta, name.as_ptr()) };
    (attno > 0).then_some(attno)
}

/// In a relation's restriction clauses: what marks it as an overlay view's branch (history: its
/// `ctid = ANY(...)` filter, which the lookup replaces; delta: its `_delta_visible` test), and the
/// expression the key column is compared equal to.
struct Clauses {
    tid_filters: Vec<*mut pg_sys::RestrictInfo>,
    key_value: *mut pg_sys::Expr,
    /// `key = ANY(key_value)` (an IN list, or an array): key_value is an array of keys
    any: bool,
    /// history of an integer key, no equality named: the key's bounds (`id BETWEEN $1 AND $2`, `id > 7`),
    /// each with its btree strategy as read with the key on the left
    bounds: Vec<(*mut pg_sys::Expr, u16)>,
}




unsafe fn is_delta_visible(n: *mut pg_sys::Node) -> bool {
    unsafe {
        if (*n).type_ != pg_sys::NodeTag::T_FuncExpr {
            return false;
        }
        let f = (*(n as *mut pg_sys::FuncExpr)).funcid;
        let name = pg_sys::get_func_name(f);
        !name.is_null()
            && std::ffi::CStr::from_ptr(name) == c"_delta_visible"
            && pg_sys::get_func_namespace(f) == pg_sys::get_namespace_oid(c"worlds".as_ptr(), true)
    }
}

/// Is `opno` the key's equality: an integer comparison for an integer key, else the text key type's own
/// `=` under a deterministic collation (so equal keys have equal text)?
unsafe fn key_equality(opno: pg_sys::Oid, collation: pg_sys::Oid, text_key_type: pg_sys::Oid) -> bool {
    unsafe {
        if text_key_type == pg_sys::Oid::INVALID {
            return pg_sys::op_in_opfamily(opno, pg_sys::INTEGER_BTREE_FAM_OID)
                && pg_sys::get_op_opfamily_strategy(opno, pg_sys::INTEGER_BTREE_FAM_OID) == pg_sys::BTEqualStrategyNumber as i32;
        }
        let tc = pg_sys::lookup_type_cache(text_key_type, pg_sys::TYPECACHE_EQ_OPR as i32);
        !tc.is_null()
            && (*tc).eq_opr == opno
            && (collation == pg_sys::Oid::INVALID || pg_sys::get_collation_isdeterministic(collation))
    }
}

unsafe fn clauses_of(list: *mut pg_sys::List, relid: pg_sys::Index, key_attno: i16, branch: i32, text_key_type: pg_sys::Oid) -> Option<Clauses> {
    unsafe {
        let is_var = |n: *mut pg_sys::Node, attno: i16| {
            // (a varchar key compared as text: under a relabelling)
            let n = if !n.is_null() && (*n).type_ == pg_sys::NodeTag::T_RelabelType { (*(n as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node } else { n };
            !n.is_null()
                && (*n).type_ == pg_sys::NodeTag::T_Var
                && (*(n as *mut pg_sys::Var)).varno as u32 == relid
                && (*(n as *mut pg_sys::Var)).varattno == attno
                && (*(n as *mut pg_sys::Var)).varlevelsup == 0
        };
        let mut marked = false;
        let mut tid_filters = Vec::new();
        let mut key_value: *mut pg_sys::Expr = std::ptr::null_mut();
        let mut any = false;
        let mut bounds = Vec::new();
        // a constant, a parameter or an expression of them: evaluated once, at the scan's start
        let fixed = |n: *mut pg_sys::Node| !pg_sys::contain_var_clause(n) && !pg_sys::contain_volatile_functions(n);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let ri = crate::fast_ffi::list_nth(list, i) as *mut pg_sys::RestrictInfo;
            let clause = (*ri).clause as *mut pg_sys::Node;
            match (*clause).type_ {
                pg_sys::NodeTag::T_ScalarArrayOpExpr => {
                    let sa = clause as *mut pg_sys::ScalarArrayOpExpr;
                    let (a, b) = (crate::fast_ffi::list_nth((*sa).args, 0) as *mut pg_sys::Node, crate::fast_ffi::list_nth((*sa).args, 1) as *mut pg_sys::Node);
                    if branch == HISTORY && (*sa).useOr && is_var(a, pg_sys::SelfItemPointerAttributeNumber as i16) {
                        tid_filters.push(ri);
                        marked = true;
                    } else if key_value.is_null()
                        && (*sa).useOr
                        && is_var(a, key_attno)
                        && key_equality((*sa).opno, (*sa).inputcollid, text_key_type)
                        && fixed(b)
                    {
                        // key IN (...), key = ANY($1)
                        key_value = b as *mut pg_sys::Expr;
                        any = true;
                    }
                }
                pg_sys::NodeTag::T_FuncExpr if branch == DELTA => {
                    marked |= is_delta_visible(clause);
                }
                pg_sys::NodeTag::T_OpExpr => {
                    let op = clause as *mut pg_sys::OpExpr;
                    if (*(*op).args).length != 2 {
                        continue;
                    }
                    let (a, b) = (crate::fast_ffi::list_nth((*op).args, 0) as *mut pg_sys::Node, crate::fast_ffi::list_nth((*op).args, 1) as *mut pg_sys::Node);
                    let (other, key_left) = if is_var(a, key_attno) {
                        (b, true)
                    } else if is_var(b, key_attno) {
                        (a, false)
                    } else {
                        continue;
                    };
                    if !fixed(other) {
                        continue;
                    }
                    if key_equality((*op).opno, (*op).inputcollid, text_key_type) {
                        if key_value.is_null() {
                            key_value = other as *mut pg_sys::Expr;
                        }
                    } else if branch == HISTORY
                        && text_key_type == pg_sys::Oid::INVALID
                        && pg_sys::op_in_opfamily((*op).opno, pg_sys::INTEGER_BTREE_FAM_OID)
                    {
                        // a bound of an integer key: the cache keeps before-images in key order
                        let strategy = pg_sys::get_op_opfamily_strategy((*op).opno, pg_sys::INTEGER_BTREE_FAM_OID) as u32;
                        let strategy = match (strategy, key_left) {
                            (pg_sys::BTLessStrategyNumber, false) => pg_sys::BTGreaterStrategyNumber,
                            (pg_sys::BTLessEqualStrategyNumber, false) => pg_sys::BTGreaterEqualStrategyNumber,
                            (pg_sys::BTGreaterEqualStrategyNumber, false) => pg_sys::BTLessEqualStrategyNumber,
                            (pg_sys::BTGreaterStrategyNumber, false) => pg_sys::BTLessStrategyNumber,
                            (s, _) => s,
                        };
                        if strategy != pg_sys::BTEqualStrategyNumber {
                            bounds.push((other as *mut pg_sys::Expr, strategy as u16));
                        }
                    }
                }
                _ => {}
            }
        }
        (marked && (!key_value.is_null() || !bounds.is_empty())).then_some(Clauses { tid_filters, key_value, any, bounds })
    }
}

/// Called from the planner hook for every relation it plans: adds the lookup path for an overlay view's
/// history or delta branch whose statement names the key.
///
/// # Safety
/// The hook's arguments, as Postgres passes them.
pub unsafe fn add_path(rel: *mut pg_sys::RelOptInfo, rte: *mut pg_sys::RangeTblEntry) {
    unsafe {
        // main's own planning pays nothing here: overlay views are read only in worlds (the session's, or
        // one a merge or diff reads on purpose)
        if (crate::guc::in_main() && !overlay::override_active())
            || (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION
            || !matches!((*rel).reloptkind, pg_sys::RelOptKind::RELOPT_BASEREL | pg_sys::RelOptKind::RELOPT_OTHER_MEMBER_REL)
            || (*rel).baserestrictinfo.is_null()
            || pg_sys::is_dummy_rel(rel)
        {
            return;
        }
        let Some((tabno, branch)) = storage_of((*rte).relid) else { return };
        let layout = storage::relation_layout(tabno);
        let Some(key_attno) = key_attno_in(&layout, branch) else { return };
        let text_key_type = text_key_type(&layout);
        if clauses_of((*rel).baserestrictinfo, (*rel).relid, key_attno, branch, text_key_type).is_none() {
            return;
        }
        if branch == DELTA {
            // a delta made before the (key, version) index existed is read as before
            let delta = pg_sys::RelationIdGetRelation((*rte).relid);
            let index = find_version_index(delta, key_attno);
            pg_sys::RelationClose(delta);
            if index.is_null() {
                return;
            }
            pg_sys::index_close(index, pg_sys::AccessShareLock as i32);
        }
        let cp = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomPath>()) as *mut pg_sys::CustomPath;
        (*cp).path.type_ = pg_sys::NodeTag::T_CustomPath;
        (*cp).path.pathtype = pg_sys::NodeTag::T_CustomScan;
        (*cp).path.parent = rel;
        (*cp).path.pathtarget = (*rel).reltarget;
        // a key has a before-image or two, and one winning version: a few fetches
        (*cp).path.rows = 1.0;
        (*cp).path.startup_cost = 0.0;
        (*cp).path.total_cost = 1.0;
        let mut private = pg_sys::lappend(std::ptr::null_mut(), pg_sys::makeInteger(tabno) as *mut std::ffi::c_void);
        private = pg_sys::lappend(private, pg_sys::makeInteger(key_attno as i32) as *mut std::ffi::c_void);
        private = pg_sys::lappend(private, pg_sys::makeInteger(branch) as *mut std::ffi::c_void);
        private = pg_sys::lappend(private, pg_sys::makeInteger(text_key_type.to_u32() as i32) as *mut std::ffi::c_void);
        (*cp).custom_private = private;
        (*cp).methods = &PATH_METHODS.0;
        pg_sys::add_path(rel, cp as *mut pg_sys::Path);
    }
}

/// The key column's type for a text-keyed table, InvalidOid for an integer key.
fn text_key_type(layout: &storage::Layout) -> pg_sys::Oid {
    if layout.key_kind == b'i' {
        return pg_sys::Oid::INVALID;
    }
    unsafe { pg_sys::get_atttype(layout.relid, layout.key_attnos[0] as i16) }
}

#[pg_guard]
unsafe extern "C-unwind" fn plan_path(
    _root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    best_path: *mut pg_sys::CustomPath,
    tlist: *mut pg_sys::List,
    clauses: *mut pg_sys::List,
    _custom_plans: *mut pg_sys::List,
) -> *mut pg_sys::Plan {
    unsafe {
        let private = (*best_path).custom_private;
        let (key_attno, branch) = (int_at(private, 1) as i16, int_at(private, 2));
        let text_key_type = pg_sys::Oid::from(int_at(private, 3) as u32);
        let found = clauses_of(clauses, (*rel).relid, key_attno, branch, text_key_type).expect("the clauses the path was made for");
        // history's tid filter is what the lookup does; every other clause is checked on the rows it fetches
        let mut kept: *mut pg_sys::List = std::ptr::null_mut();
        for i in 0..(*clauses).length {
            let ri = crate::fast_ffi::list_nth(clauses, i) as *mut pg_sys::RestrictInfo;
            if !found.tid_filters.contains(&ri) {
                kept = pg_sys::lappend(kept, ri as *mut std::ffi::c_void);
            }
        }
        let cscan = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomScan>()) as *mut pg_sys::CustomScan;
        (*cscan).scan.plan.type_ = pg_sys::NodeTag::T_CustomScan;
        (*cscan).scan.plan.targetlist = tlist;
        (*cscan).scan.plan.qual = pg_sys::extract_actual_clauses(kept, false);
        (*cscan).scan.scanrelid = (*rel).relid;
        // custom_exprs: the key (an array of keys), or the bounds; custom_private: the path's, how the keys
        // are named, then each bound's strategy
        let mut private = pg_sys::list_copy((*best_path).custom_private);
        let mut exprs: *mut pg_sys::List = std::ptr::null_mut();
        if !found.key_value.is_null() {
            exprs = pg_sys::lappend(exprs, found.key_value as *mut std::ffi::c_void);
            private = pg_sys::lappend(private, pg_sys::makeInteger(if found.any { KEY_LIST } else { ONE_KEY }) as *mut std::ffi::c_void);
        } else {
            private = pg_sys::lappend(private, pg_sys::makeInteger(KEY_RANGE) as *mut std::ffi::c_void);
            for &(bound, strategy) in &found.bounds {
                exprs = pg_sys::lappend(exprs, bound as *mut std::ffi::c_void);
                private = pg_sys::lappend(private, pg_sys::makeInteger(strategy as i32) as *mut std::ffi::c_void);
            }
        }
        (*cscan).custom_exprs = exprs;
        (*cscan).custom_private = private;
        (*cscan).methods = &SCAN_METHODS.0;
        cscan as *mut pg_sys::Plan
    }
}

// --------------------------------------------------------------------------------------------- execution

#[repr(C)]
struct LookupNode {
    css: pg_sys::CustomScanState,
    tabno: i32,
    branch: i32,
    key: *mut pg_sys::ExprState,
    key_type: pg_sys::Oid,
    /// how the keys are named: ONE_KEY, KEY_LIST (`key` is an array of keys) or KEY_RANGE (`bounds`)
    mode: i32,
    /// KEY_RANGE: each bound, and its strategy with the key on the left
    bounds: Option<Vec<(*mut pg_sys::ExprState, u16)>>,
    /// the keys the statement names, each once, as the cache keeps them and as datums (in the query's
    /// memory); None until the first row is asked for
    keys: Option<Vec<(overlay::Key, pg_sys::Datum)>>,
    /// delta: the next of them to look up
    next_key: usize,
    /// the storage's tuples as fetched (the node's scan slot is a virtual one: they are copied there)
    fetched: *mut pg_sys::TupleTableSlot,
    /// delta: its (key, version) index, and the scan of it for the current key
    index: pg_sys::Relation,
    index_scan: *mut pg_sys::IndexScanDescData,
    /// the index scan is at the current key's winning version
    scanning: bool,
    /// the world part a cursor started with (none held for other statements: see overlay::site_world)
    cache: overlay::ScanCache,
    /// history: the key's before-images still to fetch (tids as `pack_tid` packs them); None until the
    /// first row is asked for (delta: whether the index scan has been started)
    pending: Option<Vec<u64>>,
}

#[pg_guard]
unsafe extern "C-unwind" fn create_state(cscan: *mut pg_sys::CustomScan) -> *mut pg_sys::Node {
    unsafe {
        let node = pg_sys::palloc0(std::mem::size_of::<LookupNode>()) as *mut LookupNode;
        (*node).css.ss.ps.type_ = pg_sys::NodeTag::T_CustomScanState;
        (*node).css.methods = &EXEC_METHODS.0;
        (*node).tabno = int_at((*cscan).custom_private, 0);
        (*node).branch = int_at((*cscan).custom_private, 2);
        (*node).mode = int_at((*cscan).custom_private, 4);
        std::ptr::write(std::ptr::addr_of_mut!((*node).bounds), None);
        std::ptr::write(std::ptr::addr_of_mut!((*node).pending), None);
        std::ptr::write(std::ptr::addr_of_mut!((*node).keys), None);
        std::ptr::write(std::ptr::addr_of_mut!((*node).cache), overlay::ScanCache::none());
        node as *mut pg_sys::Node
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn begin(node: *mut pg_sys::CustomScanState, estate: *mut pg_sys::EState, _eflags: std::ffi::c_int) {
    unsafe {
        let n = node as *mut LookupNode;
        let cscan = (*node).ss.ps.plan as *mut pg_sys::CustomScan;
        let expr = crate::fast_ffi::list_nth((*cscan).custom_exprs, 0) as *mut pg_sys::Expr;
        if (*n).mode == KEY_RANGE {
            let bounds = (0..(*(*cscan).custom_exprs).length)
                .map(|i| {
                    let bound = crate::fast_ffi::list_nth((*cscan).custom_exprs, i) as *mut pg_sys::Expr;
                    (pg_sys::ExecInitExpr(bound, node as *mut pg_sys::PlanState), int_at((*cscan).custom_private, 5 + i) as u16)
                })
                .collect();
            (*n).bounds = Some(bounds);
        }
        (*n).key_type = pg_sys::exprType(expr as *mut pg_sys::Node);
        (*n).key = pg_sys::ExecInitExpr(expr, node as *mut pg_sys::PlanState);
        let rel = (*node).ss.ss_currentRelation;
        (*n).fetched = pg_sys::ExecInitExtraTupleSlot(estate, (*rel).rd_att, &pg_sys::TTSOpsBufferHeapTuple);
        if (*n).branch == DELTA {
            (*n).index = version_index(rel, int_at((*cscan).custom_private, 1) as i16);
            (*n).cache = overlay::ScanCache::for_portal((*n).tabno);
        }
    }
}

/// The keys the statement names, each once (as the cache keeps them, and as datums of the key's type in
/// the query's memory); NULLs match nothing.
unsafe fn keys_named(n: *mut LookupNode) -> Vec<(overlay::Key, pg_sys::Datum)> {
    unsafe {
        let mut isnull = false;
        let d = pg_sys::ExecEvalExprSwitchContext((*n).key, (*n).css.ss.ps.ps_ExprContext, &mut isnull);
        if isnull {
            return Vec::new();
        }
        if (*n).mode == ONE_KEY {
            return vec![key_of((*n).key_type, d, n)];
        }
        let (elem, elements) = array_elements(d);
        // an IN list may name a key twice: its rows are returned once
        let mut seen = std::collections::HashSet::with_capacity(elements.len());
        let mut keys: Vec<(overlay::Key, pg_sys::Datum)> = Vec::with_capacity(elements.len());
        for element in elements {
            let key = key_of(elem, element, n);
            if seen.insert(key.0.clone()) {
                keys.push(key);
            }
        }
        keys
    }
}

/// One key of type `typ`, as the cache keeps it and as a datum copied into the query's memory (the index
/// scan reads it past this row's).
unsafe fn key_of(typ: pg_sys::Oid, d: pg_sys::Datum, n: *mut LookupNode) -> (overlay::Key, pg_sys::Datum) {
    unsafe {
        if let Some(k) = integer_of(typ, d) {
            return (overlay::Key::I(k), d);
        }
        let (mut output, mut varlena) = (pg_sys::Oid::INVALID, false);
        pg_sys::getTypeOutputInfo(typ, &mut output, &mut varlena);
        let text = std::ffi::CStr::from_ptr(pg_sys::OidOutputFunctionCall(output, d)).to_string_lossy().into_owned();
        let old = pg_sys::MemoryContextSwitchTo((*(*n).css.ss.ps.state).es_query_cxt);
        let (mut len, mut by_val) = (0i16, false);
        pg_sys::get_typlenbyval(typ, &mut len, &mut by_val);
        let copy = storage::datum_copy(d, by_val, len as i32);
        pg_sys::MemoryContextSwitchTo(old);
        (overlay::Key::T(text), copy)
    }
}

/// The integer keys the bounds leave, lo..=hi (None: none, a bound is NULL or they exclude each other).
unsafe fn key_range(n: *mut LookupNode) -> Option<(i64, i64)> {
    unsafe {
        let mut range = (i64::MIN, i64::MAX);
        for &(bound, strategy) in (*n).bounds.as_deref().unwrap_or_default() {
            let mut isnull = false;
            let d = pg_sys::ExecEvalExprSwitchContext(bound, (*n).css.ss.ps.ps_ExprContext, &mut isnull);
            if isnull {
                return None;
            }
            // (a bound of an integer comparison: of an integer type)
            let v = integer_of(pg_sys::exprType((*bound).expr as *mut pg_sys::Node), d)?;
            if !narrow(&mut range, strategy as u32, v)? {
                return None;
            }
        }
        (range.0 <= range.1).then_some(range)
    }
}

/// The keys' before-images, from the overlay cache (in history's order per key, popped from the end).
unsafe fn before_images(n: *mut LookupNode) -> Vec<u64> {
    unsafe {
        if (*n).mode == KEY_RANGE {
            let mut tids = key_range(n).map(|(lo, hi)| overlay::ScanCache::none().history_rows_in((*n).tabno, lo, hi)).unwrap_or_default();
            tids.reverse();
            return tids;
        }
        let mut tids = Vec::new();
        for (key, _) in keys_named(n) {
            tids.extend(match key {
                overlay::Key::I(k) => overlay::ScanCache::none().history_rows_in((*n).tabno, k, k),
                overlay::Key::T(t) => overlay::ScanCache::none().history_rows_of((*n).tabno, &t),
            });
        }
        tids.reverse();
        tids
    }
}

/// Starts the delta's index scan at the key's winning version (none when the chain has no live one).
unsafe fn start_version_scan(n: *mut LookupNode, key: overlay::Key, datum: pg_sys::Datum) {
    unsafe {
        (*n).scanning = false;
        let Some((dseq, false)) = (*n).cache.winner_of((*n).tabno, key.clone()) else { return };
        let index = (*n).index;
        let key_type = (*(*index).rd_att).attrs.as_ptr().read().atttypid;
        let mut keys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        match key {
            overlay::Key::I(k) => {
                let (eq, datum) = match key_type {
                    pg_sys::INT2OID => (pg_sys::F_INT2EQ, pg_sys::Datum::from(k as i16)),
                    pg_sys::INT4OID => (pg_sys::F_INT4EQ, pg_sys::Datum::from(k as i32)),
                    _ => (pg_sys::F_INT8EQ, pg_sys::Datum::from(k)),
                };
                pg_sys::ScanKeyInit(&mut keys[0], 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(eq), datum);
            }
            overlay::Key::T(_) => {
                // the index's own equality, under its collation (the value is of the key's type, or binary
                // coercible to it: text for varchar)
                let family = *(*index).rd_opfamily;
                let intype = *(*index).rd_opcintype;
                let eq = pg_sys::get_opfamily_member(family, intype, intype, pg_sys::BTEqualStrategyNumber as i16);
                pg_sys::ScanKeyEntryInitialize(
                    &mut keys[0],
                    0,
                    1,
                    pg_sys::BTEqualStrategyNumber as u16,
                    pg_sys::Oid::INVALID,
                    *(*index).rd_indcollation,
                    pg_sys::get_opcode(eq),
                    datum,
                );
            }
        }
        pg_sys::ScanKeyInit(&mut keys[1], 2, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(pg_sys::F_INT8EQ), pg_sys::Datum::from(dseq));
        let rel = (*n).css.ss.ss_currentRelation;
        let snapshot = (*(*n).css.ss.ps.state).es_snapshot;
        if (*n).index_scan.is_null() {
            (*n).index_scan = pg_sys::index_beginscan(rel, index, snapshot, 2, 0);
        }
        pg_sys::index_rescan((*n).index_scan, keys.as_mut_ptr(), 2, std::ptr::null_mut(), 0);
        (*n).scanning = true;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn next(ss: *mut pg_sys::ScanState) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        let n = ss as *mut LookupNode;
        let slot = (*ss).ss_ScanTupleSlot;
        if (*n).branch == DELTA {
            if (*n).pending.is_none() {
                (*n).pending = Some(Vec::new());
                (*n).keys = Some(keys_named(n));
                (*n).next_key = 0;
                (*n).scanning = false;
            }
            loop {
                if (*n).scanning && pg_sys::index_getnext_slot((*n).index_scan, pg_sys::ScanDirection::ForwardScanDirection, (*n).fetched) {
                    pg_sys::ExecCopySlot(slot, (*n).fetched);
                    return slot;
                }
                // the next key's winning version
                let Some((key, datum)) = (*n).keys.as_ref().and_then(|k| k.get((*n).next_key)).cloned() else {
                    return pg_sys::ExecClearTuple(slot);
                };
                (*n).next_key += 1;
                start_version_scan(n, key, datum);
            }
        }
        if (*n).pending.is_none() {
            (*n).pending = Some(before_images(n));
        }
        let snapshot = (*(*ss).ps.state).es_snapshot;
        while let Some(place) = (*n).pending.as_mut().and_then(|p| p.pop()) {
            let mut tid = overlay::unpack_tid(place);
            if pg_sys::table_tuple_fetch_row_version((*ss).ss_currentRelation, &mut tid, snapshot, (*n).fetched) {
                pg_sys::ExecCopySlot(slot, (*n).fetched);
                return slot;
            }
        }
        pg_sys::ExecClearTuple(slot)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn recheck(_ss: *mut pg_sys::ScanState, _slot: *mut pg_sys::TupleTableSlot) -> bool {
    true // storage rows never change
}

#[pg_guard]
unsafe extern "C-unwind" fn exec(node: *mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot {
    unsafe { pg_sys::ExecScan(&mut (*node).ss, Some(next), Some(recheck)) }
}

#[pg_guard]
unsafe extern "C-unwind" fn rescan(node: *mut pg_sys::CustomScanState) {
    unsafe {
        let n = node as *mut LookupNode;
        (*n).pending = None;
        pg_sys::ExecScanReScan(&mut (*node).ss);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn end(node: *mut pg_sys::CustomScanState) {
    unsafe {
        let n = node as *mut LookupNode;
        if !(*n).index_scan.is_null() {
            pg_sys::index_endscan((*n).index_scan);
            (*n).index_scan = std::ptr::null_mut();
        }
        if !(*n).index.is_null() {
            pg_sys::index_close((*n).index, pg_sys::AccessShareLock as i32);
            (*n).index = std::ptr::null_mut();
        }
        // the node's memory is the query's; only the Rust side needs dropping
        std::ptr::drop_in_place(std::ptr::addr_of_mut!((*n).pending));
        std::ptr::write(std::ptr::addr_of_mut!((*n).pending), None);
        std::ptr::drop_in_place(std::ptr::addr_of_mut!((*n).keys));
        std::ptr::write(std::ptr::addr_of_mut!((*n).keys), None);
        std::ptr::drop_in_place(std::ptr::addr_of_mut!((*n).bounds));
        std::ptr::write(std::ptr::addr_of_mut!((*n).bounds), None);
        std::ptr::drop_in_place(std::ptr::addr_of_mut!((*n).cache));
        std::ptr::write(std::ptr::addr_of_mut!((*n).cache), overlay::ScanCache::none());
    }
}

/// Registers the scan's methods by name (as a plan read back needs them).
pub fn install() {
    unsafe { pg_sys::RegisterCustomScanMethods(&SCAN_METHODS.0) };
}
