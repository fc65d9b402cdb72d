//! The SQL `MERGE` command on a tracked table inside a world.
//!
//! Postgres 15 can't MERGE into a view, and a world's rows live behind the overlay view. So the router
//! leaves such a MERGE unrouted, and ExecutorRun runs it here instead of running its plan:
//!
//! 1. the statement is analysed again from its text (with the caller's parameters: `$n`, a prepared
//!    statement's, or plpgsql's variables);
//! 2. its join becomes a SELECT, built as a query tree, not as text: the target's key, each action's
//!    condition and each action's values, over `target RIGHT JOIN source ON condition` (an inner join
//!    when no action is WHEN NOT MATCHED), as Postgres plans MERGE itself. That SELECT is routed like any
//!    read in the world and run to the end before anything is written;
//! 3. each joined row takes the first action whose MATCHED state and condition hold, as an ordinary
//!    routed UPDATE / DELETE (by key) or INSERT, so the world's constraints, triggers and history apply;
//! 4. the statement's row count is the number of rows those actions wrote (`MERGE n`).
//!
//! A target row that a second source row would change again is 21000, as in Postgres.
use crate::api::{raise, raise_with};
use crate::storage::{self, overlay, snapshot_spi};
use pgrx::pg_sys;
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use crate::backend_local::BackendLocal;

/// The MERGE statements analysed in a world lately, as analysed (before routing), by their text: a SQL
/// function's named parameters can't be resolved again from the text alone. Each tree lives in a memory
/// context of its own, dropped when the entry is replaced or evicted.
struct Analysed {
    text: Vec<u8>,
    /// the parser hooks' state (plpgsql: the statement's expression)
    hook_state: *mut std::ffi::c_void,
    query: *mut pg_sys::Query,
    context: pg_sys::MemoryContext,
}

static ANALYSED: BackendLocal<std::cell::RefCell<std::collections::VecDeque<Analysed>>> = BackendLocal::new(std::cell::RefCell::new(std::collections::VecDeque::new()));

/// Keeps at most this many analysed MERGE statements per backend (the oldest go first).
const ANALYSED_KEPT: usize = 64;

unsafe fn text_of(source: *const std::ffi::c_char, location: i32, len: i32) -> Vec<u8> {
    unsafe {
        let bytes = CStr::from_ptr(source).to_bytes();
        let start = (location.max(0) as usize).min(bytes.len());
        let end = if len > 0 { (start + len as usize).min(bytes.len()) } else { bytes.len() };
        bytes[start..end].to_vec()
    }
}

/// Called by the router for a MERGE into a tracked table in a world, before it touches the tree.
pub unsafe fn remember(pstate: *mut pg_sys::ParseState, query: *mut pg_sys::Query) {
    unsafe {
        if pstate.is_null() || (*pstate).p_sourcetext.is_null() {
            return;
        }
        let text = text_of((*pstate).p_sourcetext, (*query).stmt_location, (*query).stmt_len);
        let context = pg_sys::AllocSetContextCreateInternal(
            pg_sys::TopMemoryContext,
            c"pg_worlds MERGE".as_ptr(),
            0,
            8 * 1024,
            8 * 1024 * 1024,
        );
        let old = pg_sys::MemoryContextSwitchTo(context);
        let copy = pg_sys::copyObjectImpl(query as *const std::ffi::c_void) as *mut pg_sys::Query;
        pg_sys::MemoryContextSwitchTo(old);
        ANALYSED.with(|a| {
            let mut a = a.borrow_mut();
            let mut dropped: Vec<Analysed> = Vec::new();
            let hook_state = (*pstate).p_ref_hook_state;
            if let Some(i) = a.iter().position(|e| e.text == text && e.hook_state == hook_state) {
                dropped.extend(a.remove(i));
            }
            while a.len() >= ANALYSED_KEPT {
                dropped.extend(a.pop_front());
            }
            a.push_back(Analysed { text, hook_state, query: copy, context });
            for d in dropped {
                pg_sys::MemoryContextDelete(d.context);
            }
        });
    }
}

/// A copy (in the current memory context) of the tree last analysed from this text with such hook state.
unsafe fn remembered(text: &[u8], state_fits: impl Fn(*mut std::ffi::c_void) -> bool) -> Option<*mut pg_sys::Query> {
    ANALYSED.with(|a| {
        a.borrow()
            .iter()
            .rev()
            .find(|e| e.text == text && state_fits(e.hook_state))
            .map(|e| unsafe { pg_sys::copyObjectImpl(e.query as *const std::ffi::c_void) as *mut pg_sys::Query })
    })
}

/// Runs a MERGE into a tracked table in the session's world; returns the rows it wrote. None when the
/// target isn't a tracked table (a temporary table: Postgres runs it).
pub unsafe fn run_in_world(query_desc: *mut pg_sys::QueryDesc) -> Option<u64> {
    unsafe {
        let stmt = (*query_desc).plannedstmt;
        let results = (*stmt).resultRelations;
        if results.is_null() {
            return None;
        }
        let rte = crate::fast_ffi::list_nth((*stmt).rtable, crate::fast_ffi::list_nth_int(results, 0) - 1) as *mut pg_sys::RangeTblEntry;
        let tabno = *storage::routed_tables().get(&(*rte).relid)?;
        let layout = storage::relation_layout(tabno);
        super::rewrite::check_target(&layout);
        let world = overlay::session_world()?;
        if world.read_only {
            raise("25006", format!("{} is a moment of the past: it can be read, not written", world.name));
        }
        let text = statement_text(query_desc);
        let params = (*query_desc).params;
        // The tree the router saw. Parameters given as values (a prepared statement, a SQL function,
        // whose named parameters can't be resolved from the text alone) carry themselves as their parser
        // hook's argument; plpgsql's carry the statement's expression, which one text in two functions
        // doesn't share (their variables are numbered apart). Evicted: the text analysed again.
        let hook_arg = if params.is_null() { std::ptr::null_mut() } else { (*params).parserSetupArg };
        let by_value = hook_arg.is_null() || hook_arg == params as *mut std::ffi::c_void;
        let query = match remembered(text.as_bytes(), |state| by_value || state == hook_arg) {
            Some(q) => q,
            None => analyze(&text, params, (*query_desc).queryEnv),
        };
        let (select, actions) = as_select(query, &layout);
        super::rewrite::route_select(select);
        // Under READ COMMITTED, as Postgres re-reads a target row it waited for: take the world's write
        // lock first, then join on a fresh snapshot, so concurrent MERGEs of one row queue instead of one
        // losing the other's update. Under REPEATABLE READ the statement's snapshot is read, and a row
        // changed since fails its write with 40001.
        let read_committed = pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32;
        if read_committed {
            crate::storage::writes::lock_world(&world);
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let rows = collect(select, &text, params, (*query_desc).queryEnv);
        if read_committed {
            pg_sys::PopActiveSnapshot();
        }
        Some(apply(&layout, &actions, &rows))
    }
}

/// The MERGE statement's own text: the part of the source text the plan came from, without a PREPARE
/// or EXPLAIN around it.
unsafe fn statement_text(query_desc: *mut pg_sys::QueryDesc) -> CString {
    unsafe {
        let source = (*query_desc).sourceText;
        if source.is_null() {
            raise("0A000", "MERGE inside a world needs the statement's text, and this caller gave none");
        }
        let stmt = (*query_desc).plannedstmt;
        CString::new(text_of(source, (*stmt).stmt_location, (*stmt).stmt_len)).unwrap()
    }
}

/// Analyses the text again, with the parameters the statement runs with. The router leaves a MERGE into
/// a tracked table as it is, so the tree reads main's tables by name.
unsafe fn analyze(text: &CStr, params: pg_sys::ParamListInfo, env: *mut pg_sys::QueryEnvironment) -> *mut pg_sys::Query {
    unsafe {
        let list = pg_sys::raw_parser(text.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        if list.is_null() {
            raise("XX000", "pg_worlds: the MERGE statement's text is empty");
        }
        let raw = crate::fast_ffi::list_nth(list, 0) as *mut pg_sys::RawStmt;
        let mut node = (*raw).stmt;
        loop {
            node = match (*node).type_ {
                pg_sys::NodeTag::T_PrepareStmt => (*(node as *mut pg_sys::PrepareStmt)).query,
                pg_sys::NodeTag::T_ExplainStmt => (*(node as *mut pg_sys::ExplainStmt)).query,
                pg_sys::NodeTag::T_MergeStmt => break,
                _ => raise("XX000", "pg_worlds: could not find the MERGE statement in its text"),
            };
        }
        (*raw).stmt = node;
        let query = if !params.is_null() && (*params).parserSetup.is_some() {
            pg_sys::parse_analyze_withcb(raw, text.as_ptr(), (*params).parserSetup, (*params).parserSetupArg, env)
        } else {
            let mut types: Vec<pg_sys::Oid> = Vec::new();
            if !params.is_null() {
                let p = (*params).params.as_ptr();
                for i in 0..(*params).numParams as usize {
                    types.push((*p.add(i)).ptype);
                }
            }
            pg_sys::parse_analyze_fixedparams(raw, text.as_ptr(), types.as_ptr(), types.len() as i32, env)
        };
        if (*query).commandType != pg_sys::CmdType::CMD_MERGE {
            raise("XX000", "pg_worlds: the MERGE statement analysed as another command");
        }
        query
    }
}

/// What one WHEN clause does, and where its condition and values are in the SELECT's row (0-based).
struct Action {
    matched: bool,
    command: pg_sys::CmdType::Type,
    qual: Option<usize>,
    /// (column, its value's place in the row or None for DEFAULT, the value's type)
    values: Vec<(String, Option<usize>, pg_sys::Oid)>,
    overriding: pg_sys::OverridingKind::Type,
}

/// The MERGE's join as a SELECT: the target's key columns first (NULL when no target row matched), then
/// each action's condition and values.
unsafe fn as_select(merge: *mut pg_sys::Query, layout: &storage::Layout) -> (*mut pg_sys::Query, Vec<Action>) {
    unsafe {
        let q = pg_sys::copyObjectImpl(merge as *const std::ffi::c_void) as *mut pg_sys::Query;
        let target = (*q).resultRelation;
        let mut tlist: *mut pg_sys::List = std::ptr::null_mut();
        let mut add = |expr: *mut pg_sys::Expr| -> usize {
            let n = if tlist.is_null() { 0 } else { (*tlist).length as usize };
            let name = CString::new(format!("_w{}", n + 1)).unwrap();
            let te = pg_sys::makeTargetEntry(expr, (n + 1) as i16, pg_sys::pstrdup(name.as_ptr()), false);
            tlist = pg_sys::lappend(tlist, te as *mut std::ffi::c_void);
            n
        };
        let rel = pg_sys::relation_open(layout.relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        let attname = |attno: i16| -> String {
            let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
            CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned()
        };
        for &attno in &layout.key_attnos {
            let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
            let var = pg_sys::makeVar(target as _, attno as i16, att.atttypid, att.atttypmod, att.attcollation, 0);
            add(var as *mut pg_sys::Expr);
        }
        let mut actions = Vec::new();
        let list = (*q).mergeActionList;
        for i in 0..if list.is_null() { 0 } else { (*list).length } {
            let a = crate::fast_ffi::list_nth(list, i) as *mut pg_sys::MergeAction;
            let qual = (!(*a).qual.is_null()).then(|| add((*a).qual as *mut pg_sys::Expr));
            let mut values = Vec::new();
            let tl = (*a).targetList;
            for k in 0..if tl.is_null() { 0 } else { (*tl).length } {
                let te = crate::fast_ffi::list_nth(tl, k) as *mut pg_sys::TargetEntry;
                if (*te).resjunk || has_multiexpr((*te).expr as *mut pg_sys::Node) {
                    raise("0A000", "MERGE ... UPDATE SET (columns) = (SELECT ...) inside a world is not supported yet; list the values");
                }
                let name = attname((*te).resno);
                if (*(*te).expr).type_ == pg_sys::NodeTag::T_SetToDefault {
                    values.push((name, None, pg_sys::Oid::INVALID));
                } else {
                    let ty = pg_sys::exprType((*te).expr as *mut pg_sys::Node);
                    values.push((name, Some(add((*te).expr)), ty));
                }
            }
            actions.push(Action { matched: (*a).matched, command: (*a).commandType, qual, values, overriding: (*a).override_ });
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);

        // target RIGHT JOIN source ON condition (INNER when nothing is inserted), as the planner does it
        let jointype = if (*q).mergeUseOuterJoin { pg_sys::JoinType::JOIN_RIGHT } else { pg_sys::JoinType::JOIN_INNER };
        let join_rte = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblEntry>()) as *mut pg_sys::RangeTblEntry;
        (*join_rte).type_ = pg_sys::NodeTag::T_RangeTblEntry;
        (*join_rte).rtekind = pg_sys::RTEKind::RTE_JOIN;
        (*join_rte).jointype = jointype;
        (*join_rte).eref = pg_sys::makeAlias(c"*MERGE*".as_ptr(), std::ptr::null_mut());
        (*join_rte).inFromCl = true;
        (*q).rtable = pg_sys::lappend((*q).rtable, join_rte as *mut std::ffi::c_void);
        let left = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblRef>()) as *mut pg_sys::RangeTblRef;
        (*left).type_ = pg_sys::NodeTag::T_RangeTblRef;
        (*left).rtindex = target;
        let join = pg_sys::palloc0(std::mem::size_of::<pg_sys::JoinExpr>()) as *mut pg_sys::JoinExpr;
        (*join).type_ = pg_sys::NodeTag::T_JoinExpr;
        (*join).jointype = jointype;
        (*join).larg = left as *mut pg_sys::Node;
        (*join).rarg = crate::fast_ffi::list_nth((*(*q).jointree).fromlist, 0) as *mut pg_sys::Node;
        (*join).quals = (*(*q).jointree).quals;
        (*join).rtindex = (*(*q).rtable).length;
        (*(*q).jointree).fromlist = pg_sys::lappend(std::ptr::null_mut(), join as *mut std::ffi::c_void);
        (*(*q).jointree).quals = std::ptr::null_mut();

        (*q).commandType = pg_sys::CmdType::CMD_SELECT;
        (*q).resultRelation = 0;
        (*q).mergeActionList = std::ptr::null_mut();
        (*q).mergeUseOuterJoin = false;
        (*q).targetList = tlist;
        (*q).canSetTag = true;
        (q, actions)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn multiexpr_walker(node: *mut pg_sys::Node, found: *mut std::ffi::c_void) -> bool {
    unsafe { has_multiexpr_at(node, found) }
}

unsafe fn has_multiexpr_at(node: *mut pg_sys::Node, found: *mut std::ffi::c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        if (*node).type_ == pg_sys::NodeTag::T_Param
            && (*(node as *mut pg_sys::Param)).paramkind == pg_sys::ParamKind::PARAM_MULTIEXPR
        {
            *(found as *mut bool) = true;
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(multiexpr_walker), found)
    }
}

unsafe fn has_multiexpr(node: *mut pg_sys::Node) -> bool {
    let mut found = false;
    unsafe { has_multiexpr_at(node, &mut found as *mut bool as *mut std::ffi::c_void) };
    found
}

/// Collects a query's rows as heap tuples in the memory context it was created in (the executor's
/// own context goes away with the query).
#[repr(C)]
struct Collector {
    base: pg_sys::DestReceiver,
    context: pg_sys::MemoryContext,
    desc: pg_sys::TupleDesc,
    rows: Vec<pg_sys::HeapTuple>,
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn collector_startup(me: *mut pg_sys::DestReceiver, _op: std::ffi::c_int, desc: pg_sys::TupleDesc) {
    unsafe {
        let c = me as *mut Collector;
        let old = pg_sys::MemoryContextSwitchTo((*c).context);
        (*c).desc = pg_sys::CreateTupleDescCopy(desc);
        pg_sys::MemoryContextSwitchTo(old);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn collector_receive(slot: *mut pg_sys::TupleTableSlot, me: *mut pg_sys::DestReceiver) -> bool {
    unsafe {
        let c = me as *mut Collector;
        let old = pg_sys::MemoryContextSwitchTo((*c).context);
        let copy = (*(*slot).tts_ops).copy_heap_tuple.expect("slot can copy a heap tuple");
        (*c).rows.push(copy(slot));
        pg_sys::MemoryContextSwitchTo(old);
        true
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn collector_nothing(_me: *mut pg_sys::DestReceiver) {}

/// One joined row, deformed: (value, is null) per column.
type JoinedRow = Vec<(pg_sys::Datum, bool)>;

/// Plans and runs the (routed) SELECT on the statement's snapshot; all its rows, before any is written.
unsafe fn collect(select: *mut pg_sys::Query, text: &CStr, params: pg_sys::ParamListInfo, env: *mut pg_sys::QueryEnvironment) -> Vec<JoinedRow> {
    unsafe {
        let rewritten = pg_sys::QueryRewrite(select);
        if rewritten.is_null() || (*rewritten).length != 1 {
            raise("XX000", "pg_worlds: MERGE's join rewrote to more than one query");
        }
        let planned = pg_sys::pg_plan_query(crate::fast_ffi::list_nth(rewritten, 0) as *mut pg_sys::Query, text.as_ptr(), 0, params);
        let mut collector = Box::new(Collector {
            base: pg_sys::DestReceiver {
                receiveSlot: Some(collector_receive),
                rStartup: Some(collector_startup),
                rShutdown: Some(collector_nothing),
                rDestroy: Some(collector_nothing),
                mydest: pg_sys::CommandDest::DestNone,
            },
            context: pg_sys::CurrentMemoryContext,
            desc: std::ptr::null_mut(),
            rows: Vec::new(),
        });
        let dest = &mut *collector as *mut Collector as *mut pg_sys::DestReceiver;
        let qd = pg_sys::CreateQueryDesc(planned, text.as_ptr(), crate::fast_ffi::GetActiveSnapshot(), std::ptr::null_mut(), dest, params, env, 0);
        pg_sys::ExecutorStart(qd, 0);
        pg_sys::ExecutorRun(qd, pg_sys::ScanDirection::ForwardScanDirection, 0, true);
        pg_sys::ExecutorFinish(qd);
        pg_sys::ExecutorEnd(qd);
        pg_sys::FreeQueryDesc(qd);
        let desc = collector.desc;
        let width = if desc.is_null() { 0 } else { (*desc).natts as usize };
        collector
            .rows
            .iter()
            .map(|&tuple| {
                let mut values = vec![pg_sys::Datum::from(0usize); width];
                let mut nulls = vec![false; width];
                pg_sys::heap_deform_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
                values.into_iter().zip(nulls).collect()
            })
            .collect()
    }
}

/// Text of a datum, for telling target rows apart.
unsafe fn datum_text(value: pg_sys::Datum, ty: pg_sys::Oid) -> String {
    unsafe {
        let mut out = pg_sys::Oid::INVALID;
        let mut varlena = false;
        pg_sys::getTypeOutputInfo(ty, &mut out, &mut varlena);
        CStr::from_ptr(pg_sys::OidOutputFunctionCall(out, value)).to_string_lossy().into_owned()
    }
}

/// Writes each joined row's action through the world's ordinary write path; the rows written.
unsafe fn apply(layout: &storage::Layout, actions: &[Action], rows: &[JoinedRow]) -> u64 {
    unsafe {
        let key_types: Vec<pg_sys::Oid> = {
            let rel = pg_sys::relation_open(layout.relid, pg_sys::NoLock as i32);
            let desc = (*rel).rd_att;
            let t = layout.key_attnos.iter().map(|&a| (*(*desc).attrs.as_ptr().add(a as usize - 1)).atttypid).collect();
            pg_sys::relation_close(rel, pg_sys::NoLock as i32);
            t
        };
        let nkeys = key_types.len();
        let key_where = |first: usize| -> String {
            layout
                .key_columns
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{} = ${}", crate::sql_text::quote_ident(c), first + i))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        let mut touched: HashSet<Vec<String>> = HashSet::new();
        let mut written = 0u64;
        for row in rows {
            let matched = !row[0].1;
            let Some(action) = actions
                .iter()
                .find(|a| a.matched == matched && a.qual.is_none_or(|q| !row[q].1 && row[q].0.value() != 0))
            else {
                continue;
            };
            let key: Vec<Option<pg_sys::Datum>> = row[..nkeys].iter().map(|&(d, null)| (!null).then_some(d)).collect();
            if matched && action.command != pg_sys::CmdType::CMD_NOTHING {
                let text: Vec<String> = row[..nkeys].iter().zip(&key_types).map(|(&(d, _), &t)| datum_text(d, t)).collect();
                if !touched.insert(text) {
                    raise_with(
                        "21000",
                        "MERGE command cannot affect row a second time",
                        None,
                        Some("Ensure that not more than one source row matches any one target row.".into()),
                    );
                }
            }
            let value_of = |place: Option<usize>| place.and_then(|p| (!row[p].1).then_some(row[p].0));
            let (sql, types, args) = match action.command {
                pg_sys::CmdType::CMD_UPDATE => {
                    let mut sets = Vec::new();
                    let mut types = Vec::new();
                    let mut args = Vec::new();
                    for (column, place, ty) in &action.values {
                        if place.is_some() {
                            types.push(*ty);
                            args.push(value_of(*place));
                            sets.push(format!("{} = ${}", crate::sql_text::quote_ident(column), types.len()));
                        } else {
                            sets.push(format!("{} = DEFAULT", crate::sql_text::quote_ident(column)));
                        }
                    }
                    let sql = format!("UPDATE {} SET {} WHERE {}", layout.table_name, sets.join(", "), key_where(types.len() + 1));
                    types.extend(&key_types);
                    args.extend(key);
                    (sql, types, args)
                }
                pg_sys::CmdType::CMD_DELETE => (format!("DELETE FROM {} WHERE {}", layout.table_name, key_where(1)), key_types.clone(), key),
                pg_sys::CmdType::CMD_INSERT => {
                    let given: Vec<_> = action.values.iter().filter(|(_, place, _)| place.is_some()).collect();
                    let overriding = match action.overriding {
                        pg_sys::OverridingKind::OVERRIDING_SYSTEM_VALUE => " OVERRIDING SYSTEM VALUE",
                        pg_sys::OverridingKind::OVERRIDING_USER_VALUE => " OVERRIDING USER VALUE",
                        _ => "",
                    };
                    let sql = if given.is_empty() {
                        format!("INSERT INTO {} DEFAULT VALUES", layout.table_name)
                    } else {
                        format!(
                            "INSERT INTO {} ({}){overriding} VALUES ({})",
                            layout.table_name,
                            given.iter().map(|(c, _, _)| crate::sql_text::quote_ident(c).to_string()).collect::<Vec<_>>().join(", "),
                            (1..=given.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
                        )
                    };
                    (sql, given.iter().map(|(_, _, t)| *t).collect(), given.iter().map(|(_, p, _)| value_of(*p)).collect())
                }
                _ => continue, // DO NOTHING
            };
            written += snapshot_spi::execute(&sql, &types, &args);
        }
        written
    }
}
