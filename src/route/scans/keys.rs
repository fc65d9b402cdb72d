//! What the two scans share: which tables the world scan reads, the version index of a delta, and the keys a
//! write statement names (computed before it runs, so a world's write takes its keys' locks before it
//! reads: route/hooks/write_locks.rs).
use crate::route::scans::methods::{int_at, list_items};
use crate::datum::{array_elements, integer_of};
use crate::storage::{self, overlay};
use pgrx::pg_sys;

/// A key lookup's branch (its plan's private list, item 2): main's history, or the world's delta.
pub(crate) const HISTORY: i32 = 0;
pub(crate) const DELTA: i32 = 1;
/// How a key lookup names its keys (item 4): one key, a list of them, a range of an integer key.
pub(crate) const ONE_KEY: i32 = 0;
pub(crate) const KEY_LIST: i32 = 1;
pub(crate) const KEY_RANGE: i32 = 2;

/// Which tables the world scan can read: one integer key column (the visibility sets are probed by it).
pub fn supports(layout: &storage::Layout) -> bool {
    layout.key_kind == b'i' && layout.key_attnos.len() == 1
}

// ----------------------------------------------------------------------------------- keys a write names

/// Is this plan node a world scan?
///
/// # Safety
/// `plan` is a valid plan node.
pub unsafe fn is_world_scan(plan: *mut pg_sys::Plan) -> bool {
    unsafe { (*plan).type_ == pg_sys::NodeTag::T_CustomScan && {
        let methods = (*(plan as *mut pg_sys::CustomScan)).methods;
        !methods.is_null() && std::ffi::CStr::from_ptr((*methods).CustomName) == crate::route::scans::methods::WORLD_SCAN
    } }
}

/// The condition that names every key a world scan can return, for an UPDATE / DELETE that locks its
/// keys before it reads (hooks/write_locks.rs): `key = x` or `key = ANY (x)` among the table's conditions,
/// which main's scan checks on main's rows and the world scan on the world's, so no row of another key
/// comes out. Returns the expression x and whether it is a list (the caller checks that x can be computed
/// before the statement runs); None when no condition names the key so.
///
/// # Safety
/// `plan` is a world scan (`is_world_scan`).
pub unsafe fn key_condition(plan: *mut pg_sys::Plan) -> Option<(*mut pg_sys::Expr, bool)> {
    unsafe {
        let cscan = plan as *mut pg_sys::CustomScan;
        let key_attno = int_at((*cscan).custom_private, 2);
        let scanrelid = (*cscan).scan.scanrelid;
        // every condition on the table: main's scan checks them on main's rows (as index conditions or a
        // filter), the world scan on the world's own
        let clauses = (*cscan).custom_exprs;
        let is_key = |n: *mut pg_sys::Node| -> bool {
            let mut n = n;
            while !n.is_null() && (*n).type_ == pg_sys::NodeTag::T_RelabelType {
                n = (*(n as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node;
            }
            !n.is_null() && (*n).type_ == pg_sys::NodeTag::T_Var && {
                let v = n as *mut pg_sys::Var;
                (*v).varno as pg_sys::Index == scanrelid && (*v).varattno as i32 == key_attno && (*v).varlevelsup == 0
            }
        };
        for clause in list_items::<pg_sys::Node>(clauses) {
            match (*clause).type_ {
                pg_sys::NodeTag::T_OpExpr => {
                    let op = clause as *mut pg_sys::OpExpr;
                    if (*(*op).args).length != 2 {
                        continue;
                    }
                    let (a, b) = (crate::fast_ffi::list_nth((*op).args, 0) as *mut pg_sys::Node, crate::fast_ffi::list_nth((*op).args, 1) as *mut pg_sys::Node);
                    // an equality operator (mergejoinable), the key on either side
                    if !pg_sys::op_mergejoinable((*op).opno, pg_sys::exprType(a)) {
                        continue;
                    }
                    if is_key(a) && !is_key(b) {
                        return Some((b as *mut pg_sys::Expr, false));
                    }
                    if is_key(b) && !is_key(a) {
                        return Some((a as *mut pg_sys::Expr, false));
                    }
                }
                pg_sys::NodeTag::T_ScalarArrayOpExpr => {
                    let op = clause as *mut pg_sys::ScalarArrayOpExpr;
                    if !(*op).useOr || (*(*op).args).length != 2 {
                        continue;
                    }
                    let (a, b) = (crate::fast_ffi::list_nth((*op).args, 0) as *mut pg_sys::Node, crate::fast_ffi::list_nth((*op).args, 1) as *mut pg_sys::Node);
                    if is_key(a) && pg_sys::op_mergejoinable((*op).opno, pg_sys::exprType(a)) {
                        return Some((b as *mut pg_sys::Expr, true));
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// The delta's btree index on (key, _w_dseq), opened.
pub(crate) unsafe fn version_index(rel: pg_sys::Relation, key_attno: i16) -> pg_sys::Relation {
    unsafe {
        let index = find_version_index(rel, key_attno);
        if !index.is_null() {
            return index;
        }
        let name = std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
        crate::api::raise("XX000", format!("pg_worlds: {name} has no index on (key, _w_dseq)"))
    }
}

thread_local! {
    /// delta relid -> its (key, _w_dseq) index (InvalidOid: none), forgotten at a relcache invalidation
    static VERSION_INDEXES: std::cell::RefCell<std::collections::HashMap<pg_sys::Oid, pg_sys::Oid>> = Default::default();
}

/// A relcache invalidation of `relid` (InvalidOid: of everything).
pub fn on_relcache_invalidation(relid: pg_sys::Oid) {
    VERSION_INDEXES.with(|v| {
        if let Ok(mut v) = v.try_borrow_mut() {
            if relid == pg_sys::Oid::INVALID {
                v.clear();
            } else {
                v.retain(|&d, &mut i| d != relid && i != relid);
            }
        }
    });
}

/// The same, or null when it has none. (Which index it is is kept per delta: looking through the delta's
/// indexes for it was a fiftieth of a world's write statement.)
pub(crate) unsafe fn find_version_index(rel: pg_sys::Relation, key_attno: i16) -> pg_sys::Relation {
    unsafe {
        let known = VERSION_INDEXES.with(|v| v.borrow().get(&(*rel).rd_id).copied());
        if let Some(oid) = known {
            return if oid == pg_sys::Oid::INVALID { std::ptr::null_mut() } else { pg_sys::index_open(oid, pg_sys::AccessShareLock as i32) };
        }
        let found = search_version_index(rel, key_attno);
        let oid = if found.is_null() { pg_sys::Oid::INVALID } else { (*found).rd_id };
        VERSION_INDEXES.with(|v| v.borrow_mut().insert((*rel).rd_id, oid));
        found
    }
}

pub(crate) unsafe fn search_version_index(rel: pg_sys::Relation, key_attno: i16) -> pg_sys::Relation {
    unsafe {
        let dseq = pg_sys::get_attnum((*rel).rd_id, c"_w_dseq".as_ptr());
        let list = pg_sys::RelationGetIndexList(rel);
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let index = pg_sys::index_open(crate::fast_ffi::list_nth_oid(list, i), pg_sys::AccessShareLock as i32);
            let ix = (*index).rd_index;
            let keys = (*ix).indkey.values.as_ptr();
            if (*ix).indnkeyatts == 2 && *keys == key_attno && *keys.add(1) == dseq && (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID {
                return index;
            }
            pg_sys::index_close(index, pg_sys::AccessShareLock as i32);
        }
        std::ptr::null_mut()
    }
}

// ------------------------------------------------------------------------- the keys a write statement names

/// The keys a write statement reads its target rows by, before it runs: for each of `tabnos` (the tables
/// whose overlay the statement writes), every scan of the table's delta in the plan is a key lookup of
/// keys named by constants or parameters, so every row it can write has one of those keys. Then the
/// statement locks those keys before it reads (route/hooks.rs), as Postgres's UPDATE locks a row before it
/// changes it. None when a scan of a target's delta isn't such a lookup (a range, a join, a scan).
///
/// # Safety
/// A planned statement about to start, and its parameters.
pub unsafe fn keys_written(stmt: *mut pg_sys::PlannedStmt, params: pg_sys::ParamListInfo, tabnos: &[i32]) -> Option<Vec<(i32, overlay::Key)>> {
    unsafe {
        let deltas: Vec<(pg_sys::Oid, i32)> = tabnos.iter().map(|&t| (storage::relation_layout(t).delta, t)).collect();
        let mut found: Vec<(i32, overlay::Key)> = Vec::new();
        let mut lookups: Vec<i32> = Vec::new();
        for plan in plan_nodes(stmt) {
            let scanrelid = match (*plan).type_ {
                pg_sys::NodeTag::T_SeqScan
                | pg_sys::NodeTag::T_SampleScan
                | pg_sys::NodeTag::T_IndexScan
                | pg_sys::NodeTag::T_IndexOnlyScan
                | pg_sys::NodeTag::T_BitmapHeapScan
                | pg_sys::NodeTag::T_TidScan
                | pg_sys::NodeTag::T_TidRangeScan
                | pg_sys::NodeTag::T_CustomScan => (*(plan as *mut pg_sys::Scan)).scanrelid,
                _ => continue,
            };
            if scanrelid == 0 {
                continue;
            }
            let rte = crate::fast_ffi::list_nth((*stmt).rtable, scanrelid as i32 - 1) as *mut pg_sys::RangeTblEntry;
            if is_world_scan(plan) {
                // an UPDATE / DELETE reading its target in place (hooks/planner.rs): main's scan under it
                // must name its keys
                let Some(&tabno) = tabnos.iter().find(|&&t| storage::relation_layout(t).relid == (*rte).relid) else { continue };
                let (expr, list) = key_condition(plan)?;
                let keys = evaluate_keys(expr, params, list)?;
                lookups.push(tabno);
                found.extend(keys.into_iter().map(|k| (tabno, k)));
                continue;
            }
            let Some(&(_, tabno)) = deltas.iter().find(|(d, _)| *d == (*rte).relid) else { continue };
            // a scan of a target's delta: it must be this lookup, naming its keys
            let cscan = plan as *mut pg_sys::CustomScan;
            if (*plan).type_ != pg_sys::NodeTag::T_CustomScan
                || (*cscan).methods.is_null()
                || std::ffi::CStr::from_ptr((*(*cscan).methods).CustomName) != crate::route::scans::methods::KEY_LOOKUP
                || int_at((*cscan).custom_private, 2) != DELTA
                || int_at((*cscan).custom_private, 4) == KEY_RANGE
            {
                return None;
            }
            let expr = crate::fast_ffi::list_nth((*cscan).custom_exprs, 0) as *mut pg_sys::Expr;
            let keys = evaluate_keys(expr, params, int_at((*cscan).custom_private, 4) == KEY_LIST)?;
            lookups.push(tabno);
            found.extend(keys.into_iter().map(|k| (tabno, k)));
        }
        // every target read through a lookup (a target the plan doesn't read at all writes nothing)
        tabnos.iter().all(|t| lookups.contains(t)).then_some(found)
    }
}

/// Every plan node of the statement: its tree, its sub-plans and init plans, and what Append, MergeAppend,
/// BitmapAnd / BitmapOr, custom scans and sub-query scans hold.
pub unsafe fn plan_nodes(stmt: *mut pg_sys::PlannedStmt) -> Vec<*mut pg_sys::Plan> {
    unsafe {
        let mut out = Vec::new();
        let mut plans: Vec<*mut pg_sys::Plan> = vec![(*stmt).planTree];
        let subplans = (*stmt).subplans;
        for i in 0..if subplans.is_null() { 0 } else { (*subplans).length } {
            plans.push(crate::fast_ffi::list_nth(subplans, i) as *mut pg_sys::Plan);
        }
        while let Some(plan) = plans.pop() {
            if plan.is_null() {
                continue;
            }
            plans.push((*plan).lefttree);
            plans.push((*plan).righttree);
            let lists: Vec<*mut pg_sys::List> = match (*plan).type_ {
                pg_sys::NodeTag::T_Append => vec![(*(plan as *mut pg_sys::Append)).appendplans],
                pg_sys::NodeTag::T_MergeAppend => vec![(*(plan as *mut pg_sys::MergeAppend)).mergeplans],
                pg_sys::NodeTag::T_BitmapAnd => vec![(*(plan as *mut pg_sys::BitmapAnd)).bitmapplans],
                pg_sys::NodeTag::T_BitmapOr => vec![(*(plan as *mut pg_sys::BitmapOr)).bitmapplans],
                pg_sys::NodeTag::T_CustomScan => vec![(*(plan as *mut pg_sys::CustomScan)).custom_plans],
                _ => vec![],
            };
            for l in lists {
                for i in 0..if l.is_null() { 0 } else { (*l).length } {
                    plans.push(crate::fast_ffi::list_nth(l, i) as *mut pg_sys::Plan);
                }
            }
            if (*plan).type_ == pg_sys::NodeTag::T_SubqueryScan {
                plans.push((*(plan as *mut pg_sys::SubqueryScan)).subplan);
            }
            out.push(plan);
        }
        out
    }
}

/// Can the expression be computed before the statement runs: constants and the statement's own
/// parameters, through casts, functions and arrays of them (no sub-plan's output)?
pub(crate) unsafe fn computable(n: *mut pg_sys::Node) -> bool {
    unsafe {
        if n.is_null() {
            return true;
        }
        let all = |l: *mut pg_sys::List| (0..if l.is_null() { 0 } else { (*l).length }).all(|i| computable(crate::fast_ffi::list_nth(l, i) as *mut pg_sys::Node));
        match (*n).type_ {
            pg_sys::NodeTag::T_Const => true,
            pg_sys::NodeTag::T_Param => (*(n as *mut pg_sys::Param)).paramkind == pg_sys::ParamKind::PARAM_EXTERN,
            pg_sys::NodeTag::T_RelabelType => computable((*(n as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node),
            pg_sys::NodeTag::T_CoerceViaIO => computable((*(n as *mut pg_sys::CoerceViaIO)).arg as *mut pg_sys::Node),
            pg_sys::NodeTag::T_FuncExpr => all((*(n as *mut pg_sys::FuncExpr)).args),
            pg_sys::NodeTag::T_OpExpr => all((*(n as *mut pg_sys::OpExpr)).args),
            pg_sys::NodeTag::T_ArrayExpr => all((*(n as *mut pg_sys::ArrayExpr)).elements),
            _ => false,
        }
    }
}

/// The keys a lookup's key expression names (an array of them for a list), as the cache keeps them.
pub(crate) unsafe fn evaluate_keys(expr: *mut pg_sys::Expr, params: pg_sys::ParamListInfo, list: bool) -> Option<Vec<overlay::Key>> {
    unsafe {
        if !computable(expr as *mut pg_sys::Node) {
            return None;
        }
        // one integer constant (`WHERE id = 42` as a client sends it): no expression context to build
        if !list && !expr.is_null() && (*expr).type_ == pg_sys::NodeTag::T_Const {
            let c = expr as *mut pg_sys::Const;
            if (*c).constisnull {
                return Some(Vec::new());
            }
            if let Some(k) = integer_of((*c).consttype, (*c).constvalue) {
                return Some(vec![overlay::Key::I(k)]);
            }
        }
        let econtext = pg_sys::CreateStandaloneExprContext();
        (*econtext).ecxt_param_list_info = params;
        let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_query_memory);
        let state = pg_sys::ExecInitExpr(expr, std::ptr::null_mut());
        pg_sys::MemoryContextSwitchTo(old);
        let mut isnull = false;
        let d = pg_sys::ExecEvalExprSwitchContext(state, econtext, &mut isnull);
        let key_of = |typ: pg_sys::Oid, d: pg_sys::Datum| {
            if let Some(k) = integer_of(typ, d) {
                return overlay::Key::I(k);
            }
            let (mut output, mut varlena) = (pg_sys::Oid::INVALID, false);
            pg_sys::getTypeOutputInfo(typ, &mut output, &mut varlena);
            overlay::Key::T(std::ffi::CStr::from_ptr(pg_sys::OidOutputFunctionCall(output, d)).to_string_lossy().into_owned())
        };
        let keys = if isnull {
            Vec::new()
        } else if list {
            let (elem, elements) = array_elements(d);
            elements.into_iter().map(|e| key_of(elem, e)).collect()
        } else {
            vec![key_of(pg_sys::exprType(expr as *mut pg_sys::Node), d)]
        };
        pg_sys::FreeExprContext(econtext, true);
        Some(keys)
    }
}
