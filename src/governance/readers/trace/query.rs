//! Which columns of which relations a query reads, column by column, through Postgres's own analysed
//! query trees (a view's stored `_RETURN` rule, a merge check's text after parse analysis).
//!
//! Precision: an output column of a sub-query, a CTE, a join or a view is followed to the expression
//! that computes it, so a query reading only `v.a` reaches what `v.a` is made of plus what `v` itself reads
//! to decide its rows (WHERE, JOIN ON, GROUP BY, HAVING, ORDER BY, DISTINCT, LIMIT, window frames, its
//! sub-queries), never `v.b`'s columns. Views read by a query are inlined (their rule read from the
//! relcache), materialized views are not (they hold rows of their own: a view on one reads the
//! materialized view, not its tables). A whole-row Var of a table counts as every column; of a sub-query
//! or a view, as each of its outputs. UNION ALL passes each output to the same output of every branch;
//! UNION, INTERSECT and EXCEPT compare every output, so every output of every branch is read.
//!
//! The only unsafe parts are the walker, which collects the Vars, sub-queries and range-table
//! references of one expression without descending into sub-queries, and the small readers of Postgres's
//! lists and range table; the following is plain Rust over what they return.
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::{BTreeSet, HashMap, HashSet};

/// What a query reads of one relation.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct RelReads {
    /// its columns read by name (attnums > 0)
    pub columns: BTreeSet<i16>,
    /// a whole-row reference: every column
    pub whole_row: bool,
    /// its rows are read at all (a count(*) reads no column but every row)
    pub scanned: bool,
    /// read by the query itself, not only through a view it reads
    pub direct: bool,
    /// the views (of the query itself) through which it is read
    pub through: BTreeSet<String>,
}

/// Relation -> what is read of it.
pub type Reads = HashMap<pg_sys::Oid, RelReads>;

/// Which outputs of a query are read.
#[derive(Clone, Debug)]
enum Needed {
    /// none: only what decides its rows
    Rows,
    All,
    Some(BTreeSet<i16>),
}

fn needed_of(attno: i16) -> Needed {
    if attno == 0 { Needed::All } else { Needed::Some(BTreeSet::from([attno])) }
}

/// What the walker finds in one expression (sub-queries not entered).
enum Found {
    Var { up: u32, varno: i32, attno: i16 },
    Sub { query: *mut pg_sys::Query, outputs: bool },
    RangeRef(i32),
}

#[pg_guard]
unsafe extern "C-unwind" fn collect_walker(node: *mut pg_sys::Node, cx: *mut std::ffi::c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        let found = &mut *(cx as *mut Vec<Found>);
        match (*node).type_ {
            pg_sys::NodeTag::T_Var => {
                let v = node as *mut pg_sys::Var;
                found.push(Found::Var { up: (*v).varlevelsup, varno: (*v).varno, attno: (*v).varattno });
                return false;
            }
            pg_sys::NodeTag::T_RangeTblRef => {
                found.push(Found::RangeRef((*(node as *mut pg_sys::RangeTblRef)).rtindex));
                return false;
            }
            pg_sys::NodeTag::T_SubLink => {
                let s = node as *mut pg_sys::SubLink;
                let outputs = (*s).subLinkType != pg_sys::SubLinkType::EXISTS_SUBLINK;
                found.push(Found::Sub { query: (*s).subselect as *mut pg_sys::Query, outputs });
                return collect_walker((*s).testexpr, cx);
            }
            pg_sys::NodeTag::T_Query => {
                found.push(Found::Sub { query: node as *mut pg_sys::Query, outputs: true });
                return false;
            }
            _ => {}
        }
        pg_sys::expression_tree_walker(node, Some(collect_walker), cx)
    }
}

unsafe fn collect(node: *mut pg_sys::Node) -> Vec<Found> {
    let mut found = Vec::new();
    if !node.is_null() {
        unsafe { collect_walker(node, &mut found as *mut Vec<Found> as *mut std::ffi::c_void) };
    }
    found
}

unsafe fn list<T>(l: *mut pg_sys::List) -> Vec<*mut T> {
    unsafe {
        if l.is_null() {
            return Vec::new();
        }
        (0..(*l).length).map(|i| crate::fast_ffi::list_nth(l, i) as *mut T).collect()
    }
}

unsafe fn rte_of(q: *mut pg_sys::Query, rtindex: i32) -> Option<*mut pg_sys::RangeTblEntry> {
    unsafe {
        let rtable = (*q).rtable;
        if rtindex < 1 || rtable.is_null() || rtindex > (*rtable).length {
            return None;
        }
        let rte = crate::fast_ffi::list_nth(rtable, rtindex - 1) as *mut pg_sys::RangeTblEntry;
        (!rte.is_null()).then_some(rte)
    }
}

unsafe fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() { String::new() } else { unsafe { std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned() } }
}

/// The query of a view's (or materialized view's) `_RETURN` rule, copied; None when it has none (or the
/// relation is gone).
unsafe fn rule_query(relid: pg_sys::Oid) -> Option<*mut pg_sys::Query> {
    unsafe {
        let rel = pg_sys::try_relation_open(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if rel.is_null() {
            return None;
        }
        let mut out = None;
        let rules = (*rel).rd_rules;
        if !rules.is_null() {
            for i in 0..(*rules).numLocks.max(0) as usize {
                let rule = *(*rules).rules.add(i);
                if rule.is_null() || (*rule).event != pg_sys::CmdType::CMD_SELECT {
                    continue;
                }
                let actions = list::<pg_sys::Node>((*rule).actions);
                if let [q] = actions.as_slice() {
                    if !q.is_null() && (**q).type_ == pg_sys::NodeTag::T_Query {
                        out = Some(pg_sys::copyObjectImpl(*q as *const std::ffi::c_void) as *mut pg_sys::Query);
                    }
                }
                break;
            }
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        out
    }
}

#[derive(Default)]
struct Tracer {
    reads: Reads,
    /// the views being inlined, outermost first (relid, name)
    via: Vec<(pg_sys::Oid, String)>,
    views: HashMap<pg_sys::Oid, Option<*mut pg_sys::Query>>,
    body_done: HashSet<usize>,
    out_done: HashSet<(usize, i16)>,
    col_done: HashSet<(usize, i32, i16)>,
    scan_done: HashSet<(usize, i32)>,
}

impl Tracer {
    /// Everything `q` (the last of `stack`, its enclosing queries before it) reads to produce the outputs
    /// `needed`.
    unsafe fn query(&mut self, stack: &[*mut pg_sys::Query], needed: Needed) {
        unsafe {
            pg_sys::check_stack_depth();
            let Some(&q) = stack.last() else { return };
            if q.is_null() || (*q).type_ != pg_sys::NodeTag::T_Query {
                return;
            }
            let key = q as usize;
            let tlist = list::<pg_sys::TargetEntry>((*q).targetList);
            let setop = !(*q).setOperations.is_null();
            if self.body_done.insert(key) {
                let mut nodes: Vec<*mut pg_sys::Node> =
                    vec![(*q).jointree as *mut pg_sys::Node, (*q).havingQual, (*q).limitOffset, (*q).limitCount];
                for wc in list::<pg_sys::WindowClause>((*q).windowClause) {
                    nodes.push((*wc).startOffset);
                    nodes.push((*wc).endOffset);
                }
                if !setop {
                    // GROUP BY, ORDER BY, DISTINCT, PARTITION BY refer to these
                    nodes.extend(tlist.iter().filter(|te| (***te).ressortgroupref != 0).map(|te| (**te).expr as *mut pg_sys::Node));
                }
                self.walk(stack, &nodes);
            }
            let all: BTreeSet<i16> = tlist.iter().filter(|te| !(***te).resjunk).map(|te| (**te).resno).collect();
            if setop {
                let mut outs = match needed {
                    Needed::Rows => BTreeSet::new(),
                    Needed::All => all,
                    Needed::Some(s) => s,
                };
                outs.extend(tlist.iter().filter(|te| (***te).ressortgroupref != 0).map(|te| (**te).resno));
                let (mut leaves, mut compares) = (Vec::new(), false);
                setop_leaves((*q).setOperations, &mut leaves, &mut compares);
                let leaf_needed = if compares { Needed::All } else { Needed::Some(outs) };
                for rtindex in leaves {
                    if let Some(rte) = rte_of(q, rtindex) {
                        if (*rte).rtekind == pg_sys::RTEKind::RTE_SUBQUERY && !(*rte).subquery.is_null() {
                            let mut s = stack.to_vec();
                            s.push((*rte).subquery);
                            self.query(&s, leaf_needed.clone());
                        }
                    }
                }
                return;
            }
            let wanted: Vec<*mut pg_sys::Node> = tlist
                .iter()
                .filter(|te| {
                    let resno = (***te).resno;
                    !(***te).resjunk
                        && match &needed {
                            Needed::Rows => false,
                            Needed::All => true,
                            Needed::Some(s) => s.contains(&resno),
                        }
                })
                .filter(|te| self.out_done.insert((key, (***te).resno)))
                .map(|te| (**te).expr as *mut pg_sys::Node)
                .collect();
            self.walk(stack, &wanted);
        }
    }

    /// What the expressions `nodes` of the last query of `stack` read.
    unsafe fn walk(&mut self, stack: &[*mut pg_sys::Query], nodes: &[*mut pg_sys::Node]) {
        unsafe {
            for &node in nodes {
                for found in collect(node) {
                    match found {
                        Found::Var { up, varno, attno } => {
                            let up = up as usize;
                            if up < stack.len() {
                                self.column(&stack[..stack.len() - up], varno, attno);
                            }
                        }
                        Found::Sub { query, outputs } => {
                            if !query.is_null() {
                                let mut s = stack.to_vec();
                                s.push(query);
                                self.query(&s, if outputs { Needed::All } else { Needed::Rows });
                            }
                        }
                        Found::RangeRef(rtindex) => self.scan(stack, rtindex),
                    }
                }
            }
        }
    }

    /// Column `attno` (0: the whole row) of range-table entry `varno` of the last query of `stack`.
    unsafe fn column(&mut self, stack: &[*mut pg_sys::Query], varno: i32, attno: i16) {
        unsafe {
            let Some(&q) = stack.last() else { return };
            let Some(rte) = rte_of(q, varno) else { return };
            if !self.col_done.insert((q as usize, varno, attno)) {
                return;
            }
            match (*rte).rtekind {
                pg_sys::RTEKind::RTE_RELATION => self.relation((*rte).relid, (*rte).relkind as u8, Some(attno)),
                pg_sys::RTEKind::RTE_SUBQUERY if !(*rte).subquery.is_null() => {
                    let mut s = stack.to_vec();
                    s.push((*rte).subquery);
                    self.query(&s, needed_of(attno));
                }
                pg_sys::RTEKind::RTE_JOIN => {
                    let vars = list::<pg_sys::Node>((*rte).joinaliasvars);
                    let nodes: Vec<*mut pg_sys::Node> = if attno == 0 {
                        vars
                    } else if attno > 0 && (attno as usize) <= vars.len() {
                        vec![vars[attno as usize - 1]]
                    } else {
                        Vec::new()
                    };
                    self.walk(stack, &nodes);
                }
                pg_sys::RTEKind::RTE_CTE => {
                    if let Some(s) = cte_stack(stack, rte) {
                        self.query(&s, needed_of(attno));
                    }
                }
                _ => self.scan(stack, varno),
            }
        }
    }

    /// Range-table entry `rtindex` of the last query of `stack` is read (its rows, no column yet).
    unsafe fn scan(&mut self, stack: &[*mut pg_sys::Query], rtindex: i32) {
        unsafe {
            let Some(&q) = stack.last() else { return };
            let Some(rte) = rte_of(q, rtindex) else { return };
            if !self.scan_done.insert((q as usize, rtindex)) {
                return;
            }
            match (*rte).rtekind {
                pg_sys::RTEKind::RTE_RELATION => self.relation((*rte).relid, (*rte).relkind as u8, None),
                pg_sys::RTEKind::RTE_SUBQUERY if !(*rte).subquery.is_null() => {
                    let mut s = stack.to_vec();
                    s.push((*rte).subquery);
                    self.query(&s, Needed::Rows);
                }
                pg_sys::RTEKind::RTE_CTE => {
                    if let Some(s) = cte_stack(stack, rte) {
                        self.query(&s, Needed::Rows);
                    }
                }
                pg_sys::RTEKind::RTE_FUNCTION => self.walk(stack, &[(*rte).functions as *mut pg_sys::Node]),
                pg_sys::RTEKind::RTE_TABLEFUNC => self.walk(stack, &[(*rte).tablefunc as *mut pg_sys::Node]),
                pg_sys::RTEKind::RTE_VALUES => self.walk(stack, &[(*rte).values_lists as *mut pg_sys::Node]),
                _ => {}
            }
        }
    }

    /// A relation read: a view is inlined, anything else recorded.
    unsafe fn relation(&mut self, relid: pg_sys::Oid, relkind: u8, attno: Option<i16>) {
        unsafe {
            if relkind == pg_sys::RELKIND_VIEW {
                if self.via.iter().any(|(v, _)| *v == relid) {
                    return;
                }
                let body = *self.views.entry(relid).or_insert_with(|| rule_query(relid));
                let Some(body) = body else { return };
                let name = cstr(pg_sys::get_rel_name(relid));
                self.via.push((relid, name));
                self.query(&[body], attno.map_or(Needed::Rows, needed_of));
                self.via.pop();
                return;
            }
            let r = self.reads.entry(relid).or_default();
            r.scanned = true;
            match attno {
                Some(0) => r.whole_row = true,
                Some(a) if a > 0 => {
                    r.columns.insert(a);
                }
                _ => {}
            }
            match self.via.first() {
                None => r.direct = true,
                Some((_, name)) => {
                    r.through.insert(name.clone());
                }
            }
        }
    }
}

/// The query of the CTE an RTE_CTE entry names, with the queries enclosing the one that defines it.
unsafe fn cte_stack(stack: &[*mut pg_sys::Query], rte: *mut pg_sys::RangeTblEntry) -> Option<Vec<*mut pg_sys::Query>> {
    unsafe {
        let up = (*rte).ctelevelsup as usize;
        if up >= stack.len() {
            return None;
        }
        let owner = &stack[..stack.len() - up];
        let name = cstr((*rte).ctename);
        for cte in list::<pg_sys::CommonTableExpr>((*owner[owner.len() - 1]).cteList) {
            if cstr((*cte).ctename) == name {
                let q = (*cte).ctequery;
                if q.is_null() || (*q).type_ != pg_sys::NodeTag::T_Query {
                    return None;
                }
                let mut s = owner.to_vec();
                s.push(q as *mut pg_sys::Query);
                return Some(s);
            }
        }
        None
    }
}

/// The branches of a set operation (range-table indexes of sub-queries), and whether it compares its
/// rows (anything but UNION ALL).
unsafe fn setop_leaves(node: *mut pg_sys::Node, leaves: &mut Vec<i32>, compares: &mut bool) {
    unsafe {
        if node.is_null() {
            return;
        }
        match (*node).type_ {
            pg_sys::NodeTag::T_RangeTblRef => leaves.push((*(node as *mut pg_sys::RangeTblRef)).rtindex),
            pg_sys::NodeTag::T_SetOperationStmt => {
                let s = node as *mut pg_sys::SetOperationStmt;
                if (*s).op != pg_sys::SetOperation::SETOP_UNION || !(*s).all {
                    *compares = true;
                }
                setop_leaves((*s).larg, leaves, compares);
                setop_leaves((*s).rarg, leaves, compares);
            }
            _ => {}
        }
    }
}

/// What an analysed query reads (all its outputs).
///
/// # Safety
/// `q` is an analysed Query (or null) living at least as long as the call.
pub unsafe fn reads_of_query(q: *mut pg_sys::Query) -> Reads {
    let mut t = Tracer::default();
    unsafe { t.query(&[q], Needed::All) };
    t.reads
}

/// What a view or materialized view reads (all its outputs; the views it reads inlined). Empty when
/// `relid` has no `_RETURN` rule.
pub fn reads_of_view(relid: pg_sys::Oid) -> Reads {
    let mut t = Tracer::default();
    unsafe {
        if let Some(q) = rule_query(relid) {
            t.query(&[q], Needed::All);
        }
    }
    t.reads
}

/// What a query's text reads, parsed and analysed as a merge check is (search_path = public), in a
/// subtransaction rolled back afterwards: None when it no longer parses or analyses (a column dropped
/// since), or isn't one statement. A cancel, a lack of resources or an internal error is raised again.
pub fn reads_of_text(sql: &str) -> Option<Reads> {
    let text = std::ffi::CString::new(sql).ok()?;
    crate::subxact::rolled_back_with_state(|| unsafe {
        let level = crate::storage::push_setting(c"search_path", c"public");
        let raw = pg_sys::raw_parser(text.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        let stmts = list::<pg_sys::RawStmt>(raw);
        let out = if let [stmt] = stmts.as_slice() {
            let q = pg_sys::parse_analyze_fixedparams(*stmt, text.as_ptr(), std::ptr::null(), 0, std::ptr::null_mut());
            Some(reads_of_query(q))
        } else {
            None
        };
        crate::storage::pop_setting(level);
        out
    })
    .unwrap_or_else(|(state, message)| {
        if ["57", "53", "54", "58", "XX"].iter().any(|c| state.starts_with(c)) {
            crate::api::raise(&state, message);
        }
        None
    })
}

/// The columns an expression tree stored as text (pg_node_tree: a constraint's `conbin`, an index's
/// `indexprs` / `indpred`) reads of range-table entry 1, and whether it reads the whole row.
pub fn attnos_of_node_text(text: &str) -> (BTreeSet<i16>, bool) {
    let mut cols = BTreeSet::new();
    let mut whole = false;
    let Ok(c) = std::ffi::CString::new(text) else { return (cols, whole) };
    unsafe {
        let node = pg_sys::stringToNode(c.as_ptr()) as *mut pg_sys::Node;
        let mut bms: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        pg_sys::pull_varattnos(node, 1, &mut bms);
        let offset = pg_sys::FirstLowInvalidHeapAttributeNumber;
        let mut i = -1;
        loop {
            i = crate::fast_ffi::bms_next_member(bms, i);
            if i < 0 {
                break;
            }
            let attno = i + offset;
            if attno == 0 {
                whole = true;
            } else if attno > 0 {
                cols.insert(attno as i16);
            }
        }
    }
    (cols, whole)
}
