//! What a statement reads through a world that checks its reads, taken from its plan when the executor
//! starts it (ExecutorStart: every statement, a plpgsql function's, a prepared one's, a sub-query's),
//! with its parameters' values.
//!
//! Every scan node of a tracked table (main's side of the world's view: the world scan's child, the
//! overlay view's base branch) is a read of that table. Its conditions (the plan's filter and index
//! conditions) are kept where they are column op constant: `=`, `<`, `<=`, `>`, `>=` (the last four
//! only on non-text or C-collated values: a text range in a collation reads the whole table), `= ANY
//! (...)` (IN), `IS NULL`, `LIKE 'prefix%'`, with a built-in operator and a constant of a built-in type
//! (a parameter's value counts as one). Other conditions are left out: the scan reads more, never less.
//! A scan with none left reads the whole table. `key = c` or `key IN (...)` on a single-column key is a
//! lookup of those keys. The columns read are the table's columns the statement uses (its range-table
//! entries' selected columns).
use super::nodes::{list, planstates, tag, text_of};
use super::sent::{sent_whole, send, Read};
use super::shmem;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;
use worlds_core::reads::{self, Columns, Conjunct, Test};
use crate::backend_local::BackendLocal;

thread_local! {
    /// Does world n check its reads? (It can only be turned off after its fork: a stale yes records
    /// reads nobody checks.)
    static CHECKS: RefCell<HashMap<i32, bool>> = RefCell::new(HashMap::new());
    /// The owner of each tracked table's overlay view (its own entry for the table isn't a user's read).
    static VIEW_OWNERS: RefCell<HashMap<u32, pg_sys::Oid>> = RefCell::new(HashMap::new());
}

/// Does world `num` check its reads (its metadata's check_reads)?
pub fn checks_reads(num: i32) -> bool {
    if let Some(b) = CHECKS.with(|c| c.borrow().get(&num).copied()) {
        return b;
    }
    // (in a SERIALIZABLE transaction without a predicate lock on the world's row: storage/catalog_scan.rs)
    let b = if crate::storage::catalog_scan::serializable() {
        crate::storage::catalog_scan::world_by_num(num, |r| r.text("meta"))
            .flatten()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(&m).ok())
            .is_some_and(|m| m.get("check_reads") == Some(&serde_json::Value::Bool(true)))
    } else { crate::storage::as_internal(|| {
        crate::spi_calls::get_one_with_args::<bool>(
            "SELECT coalesce(meta -> 'check_reads' = 'true'::jsonb, false) FROM worlds.world WHERE num = $1",
            &[num.into()],
        )
    })
    .ok()
    .flatten()
    .unwrap_or(false) };
    CHECKS.with(|c| c.borrow_mut().insert(num, b));
    b
}

/// Does world `num` check its reads, as its catalog row says now (what a merge judges by)?
pub fn checks_reads_now(num: i32) -> bool {
    forget_check(num);
    checks_reads(num)
}

/// A world's check_reads changed (ALTER WORLD): ask again.
pub fn forget_check(num: i32) {
    CHECKS.with(|c| c.borrow_mut().remove(&num));
}

unsafe fn strip(mut n: *mut pg_sys::Node) -> *mut pg_sys::Node {
    unsafe {
        while !n.is_null() && tag(n) == pg_sys::NodeTag::T_RelabelType {
            n = (*(n as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node;
        }
        n
    }
}

/// The heap attnum a Var of this scan reads (an index-only scan's Vars name index columns).
unsafe fn attno_of(n: *mut pg_sys::Node, scanrelid: u32, indextlist: *mut pg_sys::List) -> Option<i16> {
    unsafe { var_of(n, scanrelid, indextlist).map(|(a, _)| a) }
}

/// The Var's heap attnum and type.
unsafe fn var_of(n: *mut pg_sys::Node, scanrelid: u32, indextlist: *mut pg_sys::List) -> Option<(i16, pg_sys::Oid)> {
    unsafe {
        let n = strip(n);
        if n.is_null() || tag(n) != pg_sys::NodeTag::T_Var {
            return None;
        }
        let v = n as *mut pg_sys::Var;
        if (*v).varlevelsup != 0 || (*v).varattno <= 0 {
            return None;
        }
        if (*v).varno == pg_sys::INDEX_VAR && !indextlist.is_null() {
            let te = list::<pg_sys::TargetEntry>(indextlist).get((*v).varattno as usize - 1).copied()?;
            return var_of((*te).expr as *mut pg_sys::Node, scanrelid, std::ptr::null_mut());
        }
        ((*v).varno as u32 == scanrelid).then_some(((*v).varattno, (*v).vartype))
    }
}

/// Where a scan's conditions are read: its relation, an index-only scan's target list, the statement's
/// external parameters and (while it runs) its executor parameters.
struct Env {
    scanrelid: u32,
    itl: *mut pg_sys::List,
    params: pg_sys::ParamListInfo,
    key: Option<i16>,
    /// the executor's parameter values (a nested loop's outer values), null when planning
    exec: *mut pg_sys::ParamExecData,
    /// executor parameters the conditions compare with
    exec_ids: std::cell::RefCell<Vec<i32>>,
}

/// A constant's value: (type, datum, isnull) from a Const, an external parameter or (while the scan runs)
/// an executor parameter already computed.
unsafe fn value_of(n: *mut pg_sys::Node, env: &Env) -> Option<(pg_sys::Oid, pg_sys::Datum, bool)> {
    let params = env.params;
    unsafe {
        let n = strip(n);
        if n.is_null() {
            return None;
        }
        match tag(n) {
            pg_sys::NodeTag::T_Const => {
                let c = n as *mut pg_sys::Const;
                Some(((*c).consttype, (*c).constvalue, (*c).constisnull))
            }
            pg_sys::NodeTag::T_Param => {
                let p = n as *mut pg_sys::Param;
                if (*p).paramkind == pg_sys::ParamKind::PARAM_EXEC {
                    env.exec_ids.borrow_mut().push((*p).paramid);
                    if env.exec.is_null() {
                        return None;
                    }
                    let d = env.exec.add((*p).paramid as usize);
                    // (an init-plan's value not computed yet: left out)
                    if !(*d).execPlan.is_null() {
                        return None;
                    }
                    return Some(((*p).paramtype, (*d).value, (*d).isnull));
                }
                if (*p).paramkind != pg_sys::ParamKind::PARAM_EXTERN || params.is_null() || (*p).paramid <= 0 || (*p).paramid > (*params).numParams {
                    return None;
                }
                let mut workspace = pg_sys::ParamExternData::default();
                let data = match (*params).paramFetch {
                    Some(fetch) => fetch(params, (*p).paramid, false, &mut workspace),
                    None => (*params).params.as_mut_ptr().add((*p).paramid as usize - 1),
                };
                if data.is_null() || (*data).ptype != (*p).paramtype {
                    return None;
                }
                Some(((*data).ptype, (*data).value, (*data).isnull))
            }
            _ => None,
        }
    }
}

fn built_in(oid: pg_sys::Oid) -> bool {
    oid.to_u32() < pg_sys::FirstNormalObjectId
}

/// An array constant's elements as text (None: a null element, or not built-in).
unsafe fn elements_of(typ: pg_sys::Oid, d: pg_sys::Datum) -> Option<Vec<String>> {
    unsafe {
        let elem = pg_sys::get_element_type(typ);
        if elem == pg_sys::Oid::INVALID || !built_in(elem) {
            return None;
        }
        let (mut len, mut byval, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(elem, &mut len, &mut byval, &mut align);
        let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let (mut values, mut nulls, mut n) = (std::ptr::null_mut(), std::ptr::null_mut(), 0i32);
        pg_sys::deconstruct_array(arr, elem, len as i32, byval, align, &mut values, &mut nulls, &mut n);
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            if *nulls.add(i) {
                continue;
            }
            out.push(text_of(elem, *values.add(i)));
        }
        Some(out)
    }
}

/// A condition this scan keeps: the conjunct, and the keys it looks up when it is `key = c` / `key IN`.
struct Cond {
    conj: Conjunct,
    keys: Option<Vec<String>>,
    /// the constant is null: the condition matches no row
    never: bool,
}

unsafe fn opname(opno: pg_sys::Oid) -> String {
    unsafe {
        let p = pg_sys::get_opname(opno);
        if p.is_null() {
            return String::new();
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// May a comparison under this collation be tested on a row's value later? Equality under a
/// deterministic collation and LIKE 'prefix%' are bytes; ranges are only in C.
unsafe fn collation_ok(op: &str, collid: pg_sys::Oid) -> bool {
    unsafe {
        if collid == pg_sys::Oid::INVALID || collid == pg_sys::C_COLLATION_OID {
            return true;
        }
        match op {
            "=" | "~~" => pg_sys::get_collation_isdeterministic(collid),
            _ => false,
        }
    }
}

unsafe fn classify(n: *mut pg_sys::Node, env: &Env) -> Vec<Cond> {
    let (scanrelid, itl, key) = (env.scanrelid, env.itl, env.key);
    unsafe {
        if n.is_null() {
            return Vec::new();
        }
        match tag(n) {
            pg_sys::NodeTag::T_BoolExpr if (*(n as *mut pg_sys::BoolExpr)).boolop == pg_sys::BoolExprType::AND_EXPR => {
                list::<pg_sys::Node>((*(n as *mut pg_sys::BoolExpr)).args).into_iter().flat_map(|a| classify(a, env)).collect()
            }
            pg_sys::NodeTag::T_NullTest => {
                let t = n as *mut pg_sys::NullTest;
                if (*t).nulltesttype != pg_sys::NullTestType::IS_NULL || (*t).argisrow {
                    return Vec::new();
                }
                match attno_of((*t).arg as *mut pg_sys::Node, scanrelid, itl) {
                    Some(a) => vec![Cond { conj: Conjunct { attno: a, test: Test::IsNull, opno: 0, typ: 0, value: String::new() }, keys: None, never: false }],
                    None => Vec::new(),
                }
            }
            pg_sys::NodeTag::T_OpExpr => {
                let o = n as *mut pg_sys::OpExpr;
                let args = list::<pg_sys::Node>((*o).args);
                if args.len() != 2 || !built_in((*o).opno) {
                    return Vec::new();
                }
                let op = opname((*o).opno);
                if !reads::comparison(&op) || !collation_ok(&op, (*o).inputcollid) {
                    return Vec::new();
                }
                let ((attno, vartype), value, test) = match (var_of(args[0], scanrelid, itl), var_of(args[1], scanrelid, itl)) {
                    (Some(a), None) => (a, value_of(args[1], env), Test::Op),
                    (None, Some(a)) if op != "~~" => (a, value_of(args[0], env), Test::OpCommuted),
                    _ => return Vec::new(),
                };
                let Some((typ, d, isnull)) = value else { return Vec::new() };
                if isnull {
                    return vec![Cond { conj: Conjunct { attno, test, opno: (*o).opno.to_u32(), typ: typ.to_u32(), value: String::new() }, keys: None, never: true }];
                }
                if !built_in(typ) {
                    return Vec::new();
                }
                let text = text_of(typ, d);
                if op == "~~" && !reads::like_prefix(&text) {
                    return Vec::new();
                }
                // (a key by its text: only a constant of the key's own type writes it as the key does)
                let keys = (op == "=" && Some(attno) == key && typ == vartype).then(|| vec![text.clone()]);
                vec![Cond { conj: Conjunct { attno, test, opno: (*o).opno.to_u32(), typ: typ.to_u32(), value: text }, keys, never: false }]
            }
            pg_sys::NodeTag::T_ScalarArrayOpExpr => {
                let o = n as *mut pg_sys::ScalarArrayOpExpr;
                let args = list::<pg_sys::Node>((*o).args);
                if !(*o).useOr || args.len() != 2 || !built_in((*o).opno) || opname((*o).opno) != "=" || !collation_ok("=", (*o).inputcollid) {
                    return Vec::new();
                }
                let Some((attno, vartype)) = var_of(args[0], scanrelid, itl) else { return Vec::new() };
                let Some((typ, d, isnull)) = value_of(args[1], env) else { return Vec::new() };
                if isnull {
                    return vec![Cond { conj: Conjunct { attno, test: Test::AnyEq, opno: (*o).opno.to_u32(), typ: typ.to_u32(), value: String::new() }, keys: None, never: true }];
                }
                if !built_in(typ) {
                    return Vec::new();
                }
                let elem = pg_sys::get_element_type(typ);
                let keys = if Some(attno) == key && elem == vartype { elements_of(typ, d) } else { None };
                vec![Cond { conj: Conjunct { attno, test: Test::AnyEq, opno: (*o).opno.to_u32(), typ: elem.to_u32(), value: text_of(typ, d) }, keys, never: false }]
            }
            _ => Vec::new(),
        }
    }
}

/// The plan nodes under `plan` (itself included).
unsafe fn plans(plan: *mut pg_sys::Plan, out: &mut Vec<*mut pg_sys::Plan>) {
    unsafe {
        if plan.is_null() {
            return;
        }
        out.push(plan);
        plans((*plan).lefttree, out);
        plans((*plan).righttree, out);
        let children: Vec<*mut pg_sys::Plan> = match tag(plan) {
            pg_sys::NodeTag::T_Append => list((*(plan as *mut pg_sys::Append)).appendplans),
            pg_sys::NodeTag::T_MergeAppend => list((*(plan as *mut pg_sys::MergeAppend)).mergeplans),
            pg_sys::NodeTag::T_BitmapAnd => list((*(plan as *mut pg_sys::BitmapAnd)).bitmapplans),
            pg_sys::NodeTag::T_BitmapOr => list((*(plan as *mut pg_sys::BitmapOr)).bitmapplans),
            pg_sys::NodeTag::T_SubqueryScan => vec![(*(plan as *mut pg_sys::SubqueryScan)).subplan],
            pg_sys::NodeTag::T_CustomScan => list((*(plan as *mut pg_sys::CustomScan)).custom_plans),
            _ => Vec::new(),
        };
        for c in children {
            plans(c, out);
        }
    }
}

/// The scan's relation and its conditions (filter and index conditions), or None for a node that
/// scans no relation (or a custom scan: its child is main's scan).
unsafe fn scan_of(plan: *mut pg_sys::Plan) -> Option<(u32, Vec<*mut pg_sys::Node>, *mut pg_sys::List)> {
    unsafe {
        let scan = plan as *mut pg_sys::Scan;
        let mut quals: Vec<*mut pg_sys::Node> = list((*plan).qual);
        let mut itl = std::ptr::null_mut();
        match tag(plan) {
            pg_sys::NodeTag::T_SeqScan | pg_sys::NodeTag::T_SampleScan | pg_sys::NodeTag::T_TidScan | pg_sys::NodeTag::T_TidRangeScan => {}
            pg_sys::NodeTag::T_IndexScan => quals.extend(list::<pg_sys::Node>((*(plan as *mut pg_sys::IndexScan)).indexqualorig)),
            pg_sys::NodeTag::T_IndexOnlyScan => {
                let s = plan as *mut pg_sys::IndexOnlyScan;
                quals.extend(list::<pg_sys::Node>((*s).indexqual));
                itl = (*s).indextlist;
            }
            pg_sys::NodeTag::T_BitmapHeapScan => quals.extend(list::<pg_sys::Node>((*(plan as *mut pg_sys::BitmapHeapScan)).bitmapqualorig)),
            _ => return None,
        }
        Some(((*scan).scanrelid, quals, itl))
    }
}

/// The owner of a tracked table's overlay view (its entry inside the expanded view reads every column).
pub(crate) fn view_owner(tabno: i32, relid: u32) -> pg_sys::Oid {
    if let Some(o) = VIEW_OWNERS.with(|v| v.borrow().get(&relid).copied()) {
        return o;
    }
    let l = crate::storage::relation_layout(tabno);
    let owner = unsafe {
        let rel = pg_sys::RelationIdGetRelation(l.overlay);
        if rel.is_null() {
            pg_sys::Oid::INVALID
        } else {
            let o = (*(*rel).rd_rel).relowner;
            pg_sys::RelationClose(rel);
            o
        }
    };
    VIEW_OWNERS.with(|v| v.borrow_mut().insert(relid, owner));
    owner
}

/// The columns the statement uses of each tracked table it reads.
unsafe fn columns(stmt: *mut pg_sys::PlannedStmt, tracked: &HashMap<pg_sys::Oid, i32>) -> HashMap<u32, Columns> {
    unsafe {
        let mut out: HashMap<u32, Columns> = HashMap::new();
        let mut seen: HashMap<u32, bool> = HashMap::new();
        for rte in list::<pg_sys::RangeTblEntry>((*stmt).rtable) {
            if (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION {
                continue;
            }
            let Some(&tabno) = tracked.get(&(*rte).relid) else { continue };
            let relid = (*rte).relid.to_u32();
            seen.entry(relid).or_insert(false);
            if (*rte).requiredPerms & pg_sys::ACL_SELECT as u32 == 0 {
                continue;
            }
            if (*rte).checkAsUser != pg_sys::Oid::INVALID && (*rte).checkAsUser == view_owner(tabno, relid) {
                continue;
            }
            seen.insert(relid, true);
            let c = out.entry(relid).or_default();
            let mut m = -1;
            loop {
                m = crate::fast_ffi::bms_next_member((*rte).selectedCols, m);
                if m < 0 {
                    break;
                }
                c.add(m + pg_sys::FirstLowInvalidHeapAttributeNumber);
            }
        }
        // a table read only through entries that aren't the user's own (a user's view of the same owner):
        // every column counts
        for (relid, own) in seen {
            if !own {
                out.insert(relid, Columns::ALL);
            }
        }
        out
    }
}

/// ExecutorStart, after Postgres's: records what the statement reads when the session's world checks
/// its reads. Nothing for pg_worlds' own statements, EXPLAIN without ANALYZE, or a world that doesn't.
pub unsafe fn record(query_desc: *mut pg_sys::QueryDesc, eflags: std::ffi::c_int) {
    unsafe {
        if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as std::ffi::c_int != 0 || crate::storage::internal() || crate::storage::overlay::override_active() {
            return;
        }
        // (the leader records a parallel plan's scans: workers run the same plan)
        if crate::guc::in_main() || !shmem::available() || pg_sys::ParallelWorkerNumber >= 0 {
            return;
        }
        // (as resolved for this statement's routing: a statement that read a tracked table through the
        // world resolved it; never an error here for a setting that names no world)
        let Some(world) = crate::storage::overlay::resolved_routing_world() else { return };
        if world.num <= 0 || world.read_only || !checks_reads(world.num) {
            return;
        }
        let stmt = (*query_desc).plannedstmt;
        let tracked = crate::storage::tracked_tables();
        let mut all: Vec<*mut pg_sys::Plan> = Vec::new();
        plans((*stmt).planTree, &mut all);
        for sp in list::<pg_sys::Plan>((*stmt).subplans) {
            plans(sp, &mut all);
        }
        let mut found: Vec<(u32, Read)> = Vec::new();
        // the index scan under the statement's LIMIT: its read waits for where it stopped (stopped.rs)
        let stopping = super::stopped::stopping_scan(stmt, eflags, |relid| {
            let &tabno = tracked.get(&pg_sys::Oid::from(relid))?;
            let layout = crate::storage::relation_layout(tabno);
            (layout.key_attnos.len() == 1).then(|| layout.key_attnos[0] as i16)
        });
        let mut held: Option<(u32, Read)> = None;
        // scans whose conditions compare with a value the executor supplies as it runs (a nested loop's
        // inner lookup by the outer row): recorded as they run, each new value a read
        let mut running: Vec<(*mut pg_sys::Plan, u32, Vec<*mut pg_sys::Node>, *mut pg_sys::List, Option<i16>, Vec<i32>)> = Vec::new();
        for plan in all {
            let Some((scanrelid, quals, itl)) = scan_of(plan) else { continue };
            if scanrelid == 0 {
                continue;
            }
            let rtable = (*stmt).rtable;
            if rtable.is_null() || scanrelid as i32 > (*rtable).length {
                continue;
            }
            let rte = crate::fast_ffi::list_nth(rtable, scanrelid as i32 - 1) as *mut pg_sys::RangeTblEntry;
            let Some(&tabno) = tracked.get(&(*rte).relid) else { continue };
            // (read whole already: nothing this scan says adds to it)
            if sent_whole(world.num, (*rte).relid.to_u32()) {
                continue;
            }
            let layout = crate::storage::relation_layout(tabno);
            let key = (layout.key_attnos.len() == 1).then(|| layout.key_attnos[0] as i16);
            let env = Env { scanrelid, itl, params: (*query_desc).params, key, exec: std::ptr::null_mut(), exec_ids: Default::default() };
            let conds: Vec<Cond> = quals.iter().flat_map(|q| classify(*q, &env)).collect();
            // (a parallel plan's workers run their own rescans: there the lookup is left out, reading more)
            if !env.exec_ids.borrow().is_empty() && !(*stmt).parallelModeNeeded {
                let mut ids = env.exec_ids.borrow().clone();
                ids.sort();
                ids.dedup();
                running.push((plan, (*rte).relid.to_u32(), quals, itl, key, ids));
                continue;
            }
            if let Some(read) = read_of(conds) {
                match stopping {
                    Some((p, ..)) if p == plan && !matches!(read, Read::Keys(_)) => held = Some(((*rte).relid.to_u32(), read)),
                    _ => found.push(((*rte).relid.to_u32(), read)),
                }
            }
        }
        if found.is_empty() && running.is_empty() && held.is_none() {
            return;
        }
        let cols = columns(stmt, &tracked);
        if let (Some((relid, read)), Some((plan, key, key_type, opno))) = (held, stopping) {
            let c = cols.get(&relid).copied().unwrap_or(Columns::ALL);
            super::stopped::hold((*query_desc).estate, plan, world.num, relid, read, c, (key, key_type, opno));
        }
        for (relid, read) in found {
            send(world.num, relid, read, cols.get(&relid).copied().unwrap_or(Columns::ALL));
        }
        if !running.is_empty() {
            let mut states = Vec::new();
            planstates((*query_desc).planstate, &mut states);
            let estate = (*query_desc).estate;
            for sp in list::<pg_sys::PlanState>((*estate).es_subplanstates) {
                planstates(sp, &mut states);
            }
            for (plan, relid, quals, itl, key, ids) in running {
                let Some(&ps) = states.iter().find(|ps| (***ps).plan == plan) else {
                    // (no state for it: pruned, never run)
                    continue;
                };
                let ids: Vec<(i32, bool)> = ids.iter().map(|&id| (id, pg_sys::get_typbyval(param_type(&quals, id)))).collect();
                watch(ps, Watched {
                    ids,
                    estate,
                    world: world.num,
                    relid,
                    quals,
                    itl,
                    key,
                    scanrelid: (*(plan as *mut pg_sys::Scan)).scanrelid,
                    params: (*query_desc).params,
                    cols: cols.get(&relid).copied().unwrap_or(Columns::ALL),
                    last: Vec::new(),
                    next: None,
                });
            }
        }
    }
}

/// The read a scan's conditions make (None: a condition with a null constant matches no row).
fn read_of(conds: Vec<Cond>) -> Option<Read> {
    if conds.iter().any(|c| c.never) {
        return None;
    }
    Some(match conds.iter().find_map(|c| c.keys.clone()) {
        Some(keys) => Read::Keys(keys),
        None if conds.is_empty() => Read::Whole,
        None => Read::Scan(conds.into_iter().map(|c| c.conj).collect()),
    })
}

/// A scan recorded as it runs.
struct Watched {
    /// the executor parameters its conditions compare with, and whether each is passed by value
    ids: Vec<(i32, bool)>,
    estate: *mut pg_sys::EState,
    world: i32,
    relid: u32,
    quals: Vec<*mut pg_sys::Node>,
    itl: *mut pg_sys::List,
    key: Option<i16>,
    scanrelid: u32,
    params: pg_sys::ParamListInfo,
    cols: Columns,
    /// the executor parameters' values last recorded (by-value ones; by-reference ones always again)
    last: Vec<(pg_sys::Datum, bool)>,
    /// the node's function before this one
    next: pg_sys::ExecProcNodeMtd,
}

/// run_watched's address as stored in a node
static INSTALLED: BackendLocal<std::cell::Cell<usize>> = BackendLocal::new(std::cell::Cell::new(0));
thread_local! {
    static WATCHED: RefCell<HashMap<usize, Watched>> = RefCell::new(HashMap::new());
}

unsafe fn watch(ps: *mut pg_sys::PlanState, mut w: Watched) {
    unsafe {
        let first = WATCHED.with(|m| !m.borrow().values().any(|x| x.estate == w.estate));
        w.next = (*ps).ExecProcNode;
        (*ps).ExecProcNode = Some(run_watched);
        // (the address as written, to know it again)
        INSTALLED.with(|i| i.set((*ps).ExecProcNode.map(|f| f as usize).unwrap_or(0)));
        WATCHED.with(|m| m.borrow_mut().insert(ps as usize, w));
        if first {
            // forgotten with the statement's memory
            let cb = pg_sys::MemoryContextAlloc((*w_estate(ps)).es_query_cxt, std::mem::size_of::<pg_sys::MemoryContextCallback>()) as *mut pg_sys::MemoryContextCallback;
            (*cb).func = Some(unwatch);
            (*cb).arg = w_estate(ps) as *mut std::ffi::c_void;
            pg_sys::MemoryContextRegisterResetCallback((*w_estate(ps)).es_query_cxt, cb);
        }
    }
}

unsafe fn w_estate(ps: *mut pg_sys::PlanState) -> *mut pg_sys::EState {
    unsafe { (*ps).state }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn unwatch(arg: *mut std::ffi::c_void) {
    let estate = arg as *mut pg_sys::EState;
    WATCHED.with(|m| m.borrow_mut().retain(|_, w| w.estate != estate));
}

/// The watched scan's node function: records the lookup its executor parameters make now, then runs
/// the scan (through whatever function the node had: Postgres's first-call one sets the real one, or the
/// instrumented one, which this keeps after).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn run_watched(ps: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
    unsafe {
        let step = WATCHED.with(|m| {
            let mut m = m.borrow_mut();
            let w = m.get_mut(&(ps as usize))?;
            let exec = (*w.estate).es_param_exec_vals;
            let env = Env { scanrelid: w.scanrelid, itl: w.itl, params: w.params, key: w.key, exec, exec_ids: Default::default() };
            // are the values it compares with new?
            let now: Vec<(pg_sys::Datum, bool, bool)> = w
                .ids
                .iter()
                .map(|&(id, byval)| {
                    let d = exec.add(id as usize);
                    ((*d).value, (*d).isnull, byval)
                })
                .collect();
            let same = now.len() == w.last.len() && now.iter().zip(&w.last).all(|((v, n, byval), (lv, ln))| *byval && v == lv && n == ln);
            let read = if same {
                None
            } else {
                w.last = now.iter().map(|(v, n, _)| (*v, *n)).collect();
                read_of(w.quals.iter().flat_map(|q| classify(*q, &env)).collect())
            };
            Some((w.next, read.map(|r| (w.world, w.relid, r, w.cols))))
        });
        let Some((next, read)) = step else { return std::ptr::null_mut() };
        if let Some((world, relid, r, cols)) = read {
            send(world, relid, r, cols);
        }
        let mine = INSTALLED.with(|i| i.get());
        let addr = |f: pg_sys::ExecProcNodeMtd| f.map(|f| f as usize).unwrap_or(0);
        let out = match next {
            // (never itself: that would recurse; then the node's real function)
            Some(f) if addr(next) != mine => f(ps),
            _ => match (*ps).ExecProcNodeReal {
                Some(f) => f(ps),
                None => std::ptr::null_mut(),
            },
        };
        // (Postgres's first call put its real function in place: keep it as the next, stay in front)
        if addr((*ps).ExecProcNode) != mine {
            let now = (*ps).ExecProcNode;
            WATCHED.with(|m| {
                if let Some(w) = m.borrow_mut().get_mut(&(ps as usize)) {
                    w.next = now;
                }
            });
            (*ps).ExecProcNode = Some(run_watched);
        }
        out
    }
}

/// The type of executor parameter `id` as these conditions use it.
unsafe fn param_type(quals: &[*mut pg_sys::Node], id: i32) -> pg_sys::Oid {
    {
        fn find(n: *mut pg_sys::Node, id: i32) -> Option<pg_sys::Oid> {
            unsafe {
                if n.is_null() {
                    return None;
                }
                match (*n).type_ {
                    pg_sys::NodeTag::T_Param => {
                        let p = n as *mut pg_sys::Param;
                        ((*p).paramkind == pg_sys::ParamKind::PARAM_EXEC && (*p).paramid == id).then_some((*p).paramtype)
                    }
                    pg_sys::NodeTag::T_RelabelType => find((*(n as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node, id),
                    pg_sys::NodeTag::T_OpExpr => list::<pg_sys::Node>((*(n as *mut pg_sys::OpExpr)).args).into_iter().find_map(|a| find(a, id)),
                    pg_sys::NodeTag::T_ScalarArrayOpExpr => list::<pg_sys::Node>((*(n as *mut pg_sys::ScalarArrayOpExpr)).args).into_iter().find_map(|a| find(a, id)),
                    pg_sys::NodeTag::T_BoolExpr => list::<pg_sys::Node>((*(n as *mut pg_sys::BoolExpr)).args).into_iter().find_map(|a| find(a, id)),
                    _ => None,
                }
            }
        }
        quals.iter().find_map(|q| find(*q, id)).unwrap_or(pg_sys::Oid::INVALID)
    }
}
