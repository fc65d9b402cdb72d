//! `SELECT ... FOR UPDATE / FOR NO KEY UPDATE / FOR SHARE / FOR KEY SHARE`, with `SKIP LOCKED` or
//! `NOWAIT`, in a world: real row locks, on the world's rows, not on main's.
//!
//! Left alone, Postgres would lock the physical rows behind the overlay: main's own row (stalling main's
//! writers, and meaning nothing to the world's) or a version in the delta. Instead the locking clause of a
//! tracked table is taken off the query at analysis, and the rows it returns lock their keys in the
//! world's key lock space (storage/world_locks.rs), the locks the world's writers take:
//!
//! ```text
//! SELECT <columns> FROM (<the query, without the clause and its LIMIT>, and each locked row's key
//!                         OFFSET 0) _w_locked
//! WHERE worlds._lock_row(world, tabno, strength, wait policy, key...) LIMIT <its LIMIT>
//! ```
//!
//! The rows come out of the sub-query in its order and are locked one by one as the outer query reads
//! them, then the LIMIT stops it: as Postgres's LockRows node sits under the Limit. OFFSET 0 keeps the
//! planner from pulling the sub-query up, and a volatile condition is never pushed into one.
//!
//! - FOR UPDATE and FOR NO KEY UPDATE lock the key EXCLUSIVE, FOR SHARE and FOR KEY SHARE SHARED. A
//!   writer of the world takes the key EXCLUSIVE, so it waits for both, and they for it.
//! - SKIP LOCKED leaves out a row whose key another transaction holds; NOWAIT raises 55P03 as Postgres
//!   does.
//! - A row whose key the statement waited for may have been changed by the transaction it waited for.
//!   Under REPEATABLE READ that is 40001, as in Postgres. Under READ COMMITTED Postgres would re-check the
//!   new version against the WHERE; here, when the statement names its keys (`WHERE id = $1`), the keys
//!   are locked before the statement reads (route/hooks/write_locks.rs) and it reads on a snapshot taken
//!   after them, which is the same thing. A scan (a range, a queue's `ORDER BY ... LIMIT 1`) leaves such a
//!   row out instead, as if it no longer matched: the row's new version was not read.
//! - A table without a key locks the world's lock EXCLUSIVE instead of a key.
use crate::storage::{self, overlay, world_locks};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;
use crate::backend_local::BackendLocal;

/// One locking clause's table: (its range table index in the query level, tabno, strength, wait policy).
struct Locked {
    rti: u32,
    tabno: i32,
    strength: pg_sys::LockClauseStrength::Type,
    wait: pg_sys::LockWaitPolicy::Type,
    /// for a table read through a view: the columns of the view's (expanded) entry that carry its key;
    /// None for the table's own entry, whose key columns are the table's
    via_view: Option<Vec<i16>>,
}

/// Rewrites every level of `query` that locks rows of tracked tables (see the module's comment); true
/// when one did. Called before routing: the tables are still the user's.
pub(super) unsafe fn rewrite(query: *mut pg_sys::Query, tracked: &HashMap<pg_sys::Oid, i32>, world: i32) -> bool {
    struct Ctx<'a> {
        tracked: &'a HashMap<pg_sys::Oid, i32>,
        world: i32,
        done: bool,
    }
    #[pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            if (*node).type_ == pg_sys::NodeTag::T_Query {
                let q = node as *mut pg_sys::Query;
                // the inner levels first: a level's own rewrite moves it under a new one
                pg_sys::query_tree_walker(q, Some(walker), context, 0);
                let ctx = &mut *(context as *mut Ctx);
                ctx.done |= rewrite_level(q, ctx.tracked, ctx.world);
                return false;
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    let mut ctx = Ctx { tracked, world, done: false };
    unsafe { walker(query as *mut pg_sys::Node, &mut ctx as *mut Ctx as *mut std::ffi::c_void) };
    ctx.done
}

unsafe fn rewrite_level(q: *mut pg_sys::Query, tracked: &HashMap<pg_sys::Oid, i32>, world: i32) -> bool {
    unsafe {
        if (*q).rowMarks.is_null() || (*q).commandType != pg_sys::CmdType::CMD_SELECT || !(*q).setOperations.is_null() {
            return false;
        }
        let mut locked = lock_through_views(q, tracked, world);
        if (*q).rowMarks.is_null() && locked.is_empty() {
            return false;
        }
        let mut kept: *mut pg_sys::List = std::ptr::null_mut();
        let marks = (*q).rowMarks;
        for i in 0..if marks.is_null() { 0 } else { (*marks).length } {
            let rc = crate::fast_ffi::list_nth(marks, i) as *mut pg_sys::RowMarkClause;
            let rte = crate::fast_ffi::list_nth((*q).rtable, (*rc).rti as i32 - 1) as *mut pg_sys::RangeTblEntry;
            match ((*rte).rtekind == pg_sys::RTEKind::RTE_RELATION).then(|| tracked.get(&(*rte).relid)).flatten() {
                Some(&tabno) => locked.push(Locked { rti: (*rc).rti, tabno, strength: (*rc).strength, wait: (*rc).waitPolicy, via_view: None }),
                None => kept = pg_sys::lappend(kept, rc as *mut std::ffi::c_void),
            }
        }
        if locked.is_empty() {
            return false;
        }
        (*q).rowMarks = kept;
        (*q).hasForUpdate = !kept.is_null();
        wrap(q, &locked, world);
        true
    }
}

/// A view the level locks (`SELECT ... FROM v FOR UPDATE`). Postgres's rewriter would expand it after
/// this hook ran and push the locking clause into its body (markQueryForLocking), so the body's tracked
/// tables would lock main's rows. Here the view is expanded first (as route/hooks.rs expands a world's
/// views), and for each tracked table of its FROM the body returns the row's key too: the level locks
/// those keys as it reads the view's rows, where Postgres's LockRows would be (under the level's ORDER BY
/// and LIMIT, so `ORDER BY id LIMIT 1` locks one row). Its other tables get the clause pushed down as the
/// rewriter does (main's own tables lock main's rows; a view or sub-query in the body locks inside it).
/// The view's clauses leave the level; the returned entries lock for them.
unsafe fn lock_through_views(q: *mut pg_sys::Query, tracked: &HashMap<pg_sys::Oid, i32>, world: i32) -> Vec<Locked> {
    unsafe {
        let mut locked = Vec::new();
        let marks = (*q).rowMarks;
        let mut kept: *mut pg_sys::List = std::ptr::null_mut();
        for i in 0..(*marks).length {
            let rc = crate::fast_ffi::list_nth(marks, i) as *mut pg_sys::RowMarkClause;
            let rte = crate::fast_ffi::list_nth((*q).rtable, (*rc).rti as i32 - 1) as *mut pg_sys::RangeTblEntry;
            if (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION || (*rte).relkind != pg_sys::RELKIND_VIEW as std::ffi::c_char {
                kept = pg_sys::lappend(kept, rc as *mut std::ffi::c_void);
                continue;
            }
            super::view_inline::inline_view(rte);
            let body = (*rte).subquery;
            // (the errors Postgres gives a view that can't be locked: GROUP BY, DISTINCT, UNION, ...)
            pg_sys::CheckSelectLocking(body, (*rc).strength);
            let mut tables = Vec::new();
            from_items(body, (*body).jointree as *mut pg_sys::Node, &mut tables);
            for rti in tables {
                let t = crate::fast_ffi::list_nth((*body).rtable, rti - 1) as *mut pg_sys::RangeTblEntry;
                match ((*t).rtekind == pg_sys::RTEKind::RTE_RELATION).then(|| tracked.get(&(*t).relid)).flatten() {
                    Some(&tabno) => {
                        (*t).requiredPerms |= pg_sys::ACL_SELECT_FOR_UPDATE as pg_sys::AclMode;
                        let cols = expose_key(body, rte, rti, tabno);
                        locked.push(Locked { rti: (*rc).rti, tabno, strength: (*rc).strength, wait: (*rc).waitPolicy, via_view: Some(cols) });
                    }
                    None => {
                        let rtr = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblRef>()) as *mut pg_sys::RangeTblRef;
                        (*rtr).type_ = pg_sys::NodeTag::T_RangeTblRef;
                        (*rtr).rtindex = rti;
                        mark_for_locking(body, rtr as *mut pg_sys::Node, (*rc).strength, (*rc).waitPolicy);
                    }
                }
            }
            if !(*body).rowMarks.is_null() {
                // (its nested views and sub-queries, marked: every level of them)
                rewrite(body, tracked, world);
            }
        }
        (*q).rowMarks = kept;
        locked
    }
}

/// The range table indexes of a FROM item's entries (through joins, not into sub-queries).
unsafe fn from_items(q: *mut pg_sys::Query, item: *mut pg_sys::Node, out: &mut Vec<i32>) {
    unsafe {
        if item.is_null() {
            return;
        }
        match (*item).type_ {
            pg_sys::NodeTag::T_RangeTblRef => out.push((*(item as *mut pg_sys::RangeTblRef)).rtindex),
            pg_sys::NodeTag::T_FromExpr => {
                let list = (*(item as *mut pg_sys::FromExpr)).fromlist;
                for i in 0..if list.is_null() { 0 } else { (*list).length } {
                    from_items(q, crate::fast_ffi::list_nth(list, i) as *mut pg_sys::Node, out);
                }
            }
            pg_sys::NodeTag::T_JoinExpr => {
                let j = item as *mut pg_sys::JoinExpr;
                from_items(q, (*j).larg, out);
                from_items(q, (*j).rarg, out);
            }
            _ => {}
        }
    }
}

/// Adds the key columns of the body's table `rti` to the view body's output (before its junk columns, and
/// to the view's entry's column names); returns their numbers in the view's entry.
unsafe fn expose_key(body: *mut pg_sys::Query, view: *mut pg_sys::RangeTblEntry, rti: i32, tabno: i32) -> Vec<i16> {
    unsafe {
        let layout = storage::relation_layout(tabno);
        let tl = (*body).targetList;
        let entries: Vec<*mut pg_sys::TargetEntry> =
            (0..if tl.is_null() { 0 } else { (*tl).length }).map(|i| crate::fast_ffi::list_nth(tl, i) as *mut pg_sys::TargetEntry).collect();
        let mut new_tl: *mut pg_sys::List = std::ptr::null_mut();
        for &e in entries.iter().filter(|&&e| !(*e).resjunk) {
            new_tl = pg_sys::lappend(new_tl, e as *mut std::ffi::c_void);
        }
        let mut resno = entries.iter().filter(|&&e| !(*e).resjunk).count() as i16;
        let mut cols = Vec::new();
        for &attno in &layout.key_attnos {
            let (mut typ, mut typmod, mut coll) = (pg_sys::Oid::INVALID, -1, pg_sys::Oid::INVALID);
            pg_sys::get_atttypetypmodcoll(layout.relid, attno as i16, &mut typ, &mut typmod, &mut coll);
            let var = pg_sys::makeVar(rti, attno as i16, typ, typmod, coll, 0);
            resno += 1;
            new_tl = pg_sys::lappend(new_tl, pg_sys::makeTargetEntry(var as *mut pg_sys::Expr, resno, pg_sys::pstrdup(c"_w_lock_key".as_ptr()), false) as *mut std::ffi::c_void);
            (*(*view).eref).colnames = pg_sys::lappend((*(*view).eref).colnames, pg_sys::makeString(pg_sys::pstrdup(c"_w_lock_key".as_ptr())) as *mut std::ffi::c_void);
            cols.push(resno);
        }
        for &e in entries.iter().filter(|&&e| (*e).resjunk) {
            resno += 1;
            (*e).resno = resno;
            new_tl = pg_sys::lappend(new_tl, e as *mut std::ffi::c_void);
        }
        (*body).targetList = new_tl;
        cols
    }
}

/// Marks every relation of a FROM item for locking, as the rewriter's markQueryForLocking does.
unsafe fn mark_for_locking(
    q: *mut pg_sys::Query,
    item: *mut pg_sys::Node,
    strength: pg_sys::LockClauseStrength::Type,
    wait: pg_sys::LockWaitPolicy::Type,
) {
    unsafe {
        if item.is_null() {
            return;
        }
        match (*item).type_ {
            pg_sys::NodeTag::T_RangeTblRef => {
                let rti = (*(item as *mut pg_sys::RangeTblRef)).rtindex;
                let rte = crate::fast_ffi::list_nth((*q).rtable, rti - 1) as *mut pg_sys::RangeTblEntry;
                if (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION {
                    pg_sys::applyLockingClause(q, rti as pg_sys::Index, strength, wait, true);
                    (*rte).requiredPerms |= pg_sys::ACL_SELECT_FOR_UPDATE as pg_sys::AclMode;
                } else if (*rte).rtekind == pg_sys::RTEKind::RTE_SUBQUERY {
                    pg_sys::applyLockingClause(q, rti as pg_sys::Index, strength, wait, true);
                    let sub = (*rte).subquery;
                    mark_for_locking(sub, (*sub).jointree as *mut pg_sys::Node, strength, wait);
                }
            }
            pg_sys::NodeTag::T_FromExpr => {
                let list = (*(item as *mut pg_sys::FromExpr)).fromlist;
                if !list.is_null() {
                    for i in 0..(*list).length {
                        mark_for_locking(q, crate::fast_ffi::list_nth(list, i) as *mut pg_sys::Node, strength, wait);
                    }
                }
            }
            pg_sys::NodeTag::T_JoinExpr => {
                let j = item as *mut pg_sys::JoinExpr;
                mark_for_locking(q, (*j).larg, strength, wait);
                mark_for_locking(q, (*j).rarg, strength, wait);
            }
            _ => {}
        }
    }
}

/// Moves the level `q` into a sub-query of itself, which returns each locked row's key too, and locks
/// those keys as the outer level reads its rows.
unsafe fn wrap(q: *mut pg_sys::Query, locked: &[Locked], world: i32) {
    unsafe {
        let inner = pg_sys::palloc0(std::mem::size_of::<pg_sys::Query>()) as *mut pg_sys::Query;
        std::ptr::copy_nonoverlapping(q, inner, 1);
        // the target list: the visible columns, then each locked row's key columns, then the junk ones
        let tl = (*inner).targetList;
        let entries: Vec<*mut pg_sys::TargetEntry> =
            (0..if tl.is_null() { 0 } else { (*tl).length }).map(|i| crate::fast_ffi::list_nth(tl, i) as *mut pg_sys::TargetEntry).collect();
        let visible: Vec<*mut pg_sys::TargetEntry> = entries.iter().copied().filter(|&e| !(*e).resjunk).collect();
        let mut new_tl: *mut pg_sys::List = std::ptr::null_mut();
        for &e in &visible {
            new_tl = pg_sys::lappend(new_tl, e as *mut std::ffi::c_void);
        }
        let mut resno = visible.len() as i16;
        // per locked table: the outer columns its key is in
        let mut keys: Vec<Vec<*mut pg_sys::Var>> = Vec::new();
        for l in locked {
            let layout = storage::relation_layout(l.tabno);
            let mut cols = Vec::new();
            for (k, &attno) in layout.key_attnos.iter().enumerate() {
                let (mut typ, mut typmod, mut coll) = (pg_sys::Oid::INVALID, -1, pg_sys::Oid::INVALID);
                pg_sys::get_atttypetypmodcoll(layout.relid, attno as i16, &mut typ, &mut typmod, &mut coll);
                // (through a view: the view's column that carries it)
                let column = l.via_view.as_ref().map_or(attno as i16, |cols| cols[k]);
                let var = pg_sys::makeVar(l.rti as i32, column, typ, typmod, coll, 0);
                resno += 1;
                let name = pg_sys::pstrdup(c"_w_lock_key".as_ptr());
                new_tl = pg_sys::lappend(new_tl, pg_sys::makeTargetEntry(var as *mut pg_sys::Expr, resno, name, false) as *mut std::ffi::c_void);
                cols.push(pg_sys::makeVar(1, resno, typ, typmod, coll, 0));
            }
            keys.push(cols);
        }
        for &e in entries.iter().filter(|&&e| (*e).resjunk) {
            resno += 1;
            (*e).resno = resno;
            new_tl = pg_sys::lappend(new_tl, e as *mut std::ffi::c_void);
        }
        (*inner).targetList = new_tl;
        // the LIMIT goes outside, over the locking (FETCH ... WITH TIES needs its ORDER BY: it stays)
        let with_ties = (*inner).limitOption == pg_sys::LimitOption::LIMIT_OPTION_WITH_TIES;
        let (count, offset, option) = ((*inner).limitCount, (*inner).limitOffset, (*inner).limitOption);
        if !with_ties {
            (*inner).limitCount = std::ptr::null_mut();
            (*inner).limitOffset = offset_zero();
            (*inner).limitOption = pg_sys::LimitOption::LIMIT_OPTION_COUNT;
        } else if (*inner).limitOffset.is_null() {
            (*inner).limitOffset = offset_zero();
        }
        // references to outer levels are one level further now
        pg_sys::IncrementVarSublevelsUp(inner as *mut pg_sys::Node, 1, 1);

        let outer = pg_sys::palloc0(std::mem::size_of::<pg_sys::Query>()) as *mut pg_sys::Query;
        (*outer).type_ = pg_sys::NodeTag::T_Query;
        (*outer).commandType = pg_sys::CmdType::CMD_SELECT;
        (*outer).querySource = (*inner).querySource;
        (*outer).queryId = (*inner).queryId;
        (*outer).canSetTag = (*inner).canSetTag;
        (*outer).stmt_location = (*inner).stmt_location;
        (*outer).stmt_len = (*inner).stmt_len;
        let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
        let alias = pg_sys::makeAlias(c"_w_locked".as_ptr(), std::ptr::null_mut());
        let item = pg_sys::addRangeTableEntryForSubquery(pstate, inner, alias, false, true);
        (*outer).rtable = pg_sys::list_make1_impl(pg_sys::NodeTag::T_List, pg_sys::ListCell { ptr_value: (*item).p_rte as *mut std::ffi::c_void });
        let lock_fn = lock_row_function();
        let mut quals: *mut pg_sys::List = std::ptr::null_mut();
        for (l, cols) in locked.iter().zip(&keys) {
            let mut args: *mut pg_sys::List = std::ptr::null_mut();
            for v in [world, l.tabno, l.strength as i32, l.wait as i32] {
                args = pg_sys::lappend(args, int4_const(v) as *mut std::ffi::c_void);
            }
            for &c in cols {
                args = pg_sys::lappend(args, c as *mut std::ffi::c_void);
            }
            let call = pg_sys::makeFuncExpr(lock_fn, pg_sys::BOOLOID, args, pg_sys::Oid::INVALID, pg_sys::Oid::INVALID, pg_sys::CoercionForm::COERCE_EXPLICIT_CALL);
            quals = pg_sys::lappend(quals, call as *mut std::ffi::c_void);
        }
        let qual = if (*quals).length == 1 { crate::fast_ffi::list_nth(quals, 0) as *mut pg_sys::Node } else { pg_sys::makeBoolExpr(pg_sys::BoolExprType::AND_EXPR, quals, -1) as *mut pg_sys::Node };
        let rtr = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblRef>()) as *mut pg_sys::RangeTblRef;
        (*rtr).type_ = pg_sys::NodeTag::T_RangeTblRef;
        (*rtr).rtindex = 1;
        (*outer).jointree = pg_sys::makeFromExpr(pg_sys::list_make1_impl(pg_sys::NodeTag::T_List, pg_sys::ListCell { ptr_value: rtr as *mut std::ffi::c_void }), qual);
        let mut out_tl: *mut pg_sys::List = std::ptr::null_mut();
        for &e in &visible {
            let expr = (*e).expr as *mut pg_sys::Node;
            let var = pg_sys::makeVar(1, (*e).resno, pg_sys::exprType(expr), pg_sys::exprTypmod(expr), pg_sys::exprCollation(expr), 0);
            let name = if (*e).resname.is_null() { std::ptr::null_mut() } else { pg_sys::pstrdup((*e).resname) };
            out_tl = pg_sys::lappend(out_tl, pg_sys::makeTargetEntry(var as *mut pg_sys::Expr, (*e).resno, name, false) as *mut std::ffi::c_void);
        }
        (*outer).targetList = out_tl;
        if !with_ties {
            (*outer).limitCount = count;
            (*outer).limitOffset = offset;
            (*outer).limitOption = option;
            // (the limits were analysed at this level: their own references to outer levels stay as they are)
            (*outer).hasSubLinks = pg_sys::checkExprHasSubLink(count as *mut pg_sys::Node) || pg_sys::checkExprHasSubLink(offset as *mut pg_sys::Node);
        }
        std::ptr::copy_nonoverlapping(outer, q, 1);
    }
}

unsafe fn offset_zero() -> *mut pg_sys::Node {
    unsafe { pg_sys::makeConst(pg_sys::INT8OID, -1, pg_sys::Oid::INVALID, 8, pg_sys::Datum::from(0i64), false, true) as *mut pg_sys::Node }
}

unsafe fn int4_const(v: i32) -> *mut pg_sys::Const {
    unsafe { pg_sys::makeConst(pg_sys::INT4OID, -1, pg_sys::Oid::INVALID, 4, pg_sys::Datum::from(v), false, true) }
}

/// (lxid, oid of worlds._lock_row) as last looked up
static LOCK_FN: BackendLocal<std::cell::Cell<(u32, pg_sys::Oid)>> = BackendLocal::new(std::cell::Cell::new((0, pg_sys::Oid::INVALID)));

/// The oid of `worlds._lock_row(int4, int4, int4, int4, VARIADIC "any")` (looked up once per transaction:
/// the extension may be dropped and made again).
fn lock_row_function() -> pg_sys::Oid {
    let lxid = unsafe { pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0) };
    let (at, oid) = LOCK_FN.with(|f| f.get());
    if at == lxid && oid != pg_sys::Oid::INVALID {
        return oid;
    }
    let oid = unsafe {
        let names = pg_sys::list_make2_impl(
            pg_sys::NodeTag::T_List,
            pg_sys::ListCell { ptr_value: pg_sys::makeString(pg_sys::pstrdup(c"worlds".as_ptr())) as *mut std::ffi::c_void },
            pg_sys::ListCell { ptr_value: pg_sys::makeString(pg_sys::pstrdup(c"_lock_row".as_ptr())) as *mut std::ffi::c_void },
        );
        let types = [pg_sys::INT4OID, pg_sys::INT4OID, pg_sys::INT4OID, pg_sys::INT4OID, pg_sys::ANYOID];
        pg_sys::LookupFuncName(names, types.len() as i32, types.as_ptr(), false)
    };
    LOCK_FN.with(|f| f.set((lxid, oid)));
    oid
}

/// One `_lock_row` call of a plan: (tabno, strength, wait policy).
pub struct LockCall {
    pub tabno: i32,
    pub exclusive: bool,
    pub wait: world_locks::Wait,
}

/// The row locks a plan takes in a world (its `_lock_row` calls), for the ExecutorStart hook.
pub unsafe fn lock_calls(stmt: *mut pg_sys::PlannedStmt) -> Vec<LockCall> {
    unsafe {
        let mut out = Vec::new();
        let mut lock_fn = None;
        for plan in super::scans::keys::plan_nodes(stmt) {
            if (*plan).type_ != pg_sys::NodeTag::T_SubqueryScan {
                continue;
            }
            let qual = (*plan).qual;
            if qual.is_null() {
                continue;
            }
            let f = *lock_fn.get_or_insert_with(lock_row_function);
            for i in 0..(*qual).length {
                calls_in(crate::fast_ffi::list_nth(qual, i) as *mut pg_sys::Node, f, &mut out);
            }
        }
        out
    }
}

unsafe fn calls_in(node: *mut pg_sys::Node, f: pg_sys::Oid, out: &mut Vec<LockCall>) {
    unsafe {
        if node.is_null() {
            return;
        }
        if (*node).type_ == pg_sys::NodeTag::T_BoolExpr {
            let args = (*(node as *mut pg_sys::BoolExpr)).args;
            for i in 0..if args.is_null() { 0 } else { (*args).length } {
                calls_in(crate::fast_ffi::list_nth(args, i) as *mut pg_sys::Node, f, out);
            }
            return;
        }
        if (*node).type_ != pg_sys::NodeTag::T_FuncExpr || (*(node as *mut pg_sys::FuncExpr)).funcid != f {
            return;
        }
        let args = (*(node as *mut pg_sys::FuncExpr)).args;
        let int_at = |i: i32| {
            let c = crate::fast_ffi::list_nth(args, i) as *mut pg_sys::Const;
            ((*c).xpr.type_ == pg_sys::NodeTag::T_Const).then(|| (*c).constvalue.value() as i32)
        };
        if let (Some(tabno), Some(strength), Some(wait)) = (int_at(1), int_at(2), int_at(3)) {
            out.push(LockCall { tabno, exclusive: strength >= pg_sys::LockClauseStrength::LCS_FORNOKEYUPDATE as i32, wait: wait_of(wait) });
        }
    }
}

fn wait_of(w: i32) -> world_locks::Wait {
    match w {
        0 => world_locks::Wait::Block,
        1 => world_locks::Wait::Skip,
        _ => world_locks::Wait::Error,
    }
}

/// `worlds._lock_row(world, tabno, strength, wait, key...)`: locks the key of one row a locking clause
/// returns; false to leave the row out (SKIP LOCKED, or a row changed while this waited: see the module).
unsafe fn lock_row(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    unsafe {
        use world_locks::{Mode, Wait};
        let arg = |i: usize| pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, i).value() as i32;
        let (num, tabno, strength, wait) = (arg(0), arg(1), arg(2), wait_of(arg(3)));
        let Some(world) = overlay::routing_world().filter(|w| w.num == num) else {
            crate::api::raise("0A000", "rows of a world can be locked only by a statement of that world");
        };
        let layout = storage::relation_layout(tabno);
        let mode = if strength >= pg_sys::LockClauseStrength::LCS_FORNOKEYUPDATE as i32 { Mode::Exclusive } else { Mode::Shared };
        let not_available = || -> bool {
            if wait == Wait::Skip {
                return false;
            }
            crate::api::raise("55P03", format!("could not obtain lock on row in relation \"{}\"", relation_name(layout.relid)));
        };
        let nargs = (*fcinfo).nargs as usize;
        if nargs <= 4 || layout.key_attnos.is_empty() {
            // no key: the whole world (read before the statement began: route/hooks/write_locks.rs)
            return match world_locks::lock_world_with(&world, Mode::Exclusive, wait) {
                Some(_) => true,
                None => not_available(),
            };
        }
        let mut values: Vec<pgrx::datum::DatumWithOid<'static>> = Vec::new();
        for i in 4..nargs {
            let arg = (*fcinfo).args.as_ptr().add(i);
            if (*arg).isnull {
                return false; // (a key is never NULL: an outer join's missing side locks nothing)
            }
            let typ = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, i as i32);
            values.push(pgrx::datum::DatumWithOid::new((*arg).value, typ));
        }
        let key = storage::writes::lock_key_of(&layout, &values);
        let id = world_locks::key_id(world.num, tabno, &key);
        match world_locks::lock_key_with(&world, id, mode, wait) {
            None => not_available(),
            Some(true) if storage::writes::changed_since_statement(&layout, &world, &values) => {
                if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 {
                    crate::api::raise(
                        "40001",
                        format!("could not serialize access due to concurrent update of {} in world \"{}\"", layout.table_name, world.name),
                    );
                }
                false
            }
            Some(_) => true,
        }
    }
}

fn relation_name(relid: pg_sys::Oid) -> String {
    unsafe {
        let name = pg_sys::get_rel_name(relid);
        if name.is_null() { relid.to_u32().to_string() } else { std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned() }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_worlds_lock_row() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn worlds_lock_row(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe { pg_sys::Datum::from(lock_row(fcinfo)) }
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION worlds._lock_row(world int4, tabno int4, strength int4, wait int4, VARIADIC key "any") RETURNS bool
    AS 'MODULE_PATHNAME', 'worlds_lock_row' LANGUAGE c VOLATILE PARALLEL UNSAFE;
"#,
    name = "row_lock_function",
    requires = ["catalog"],
);
