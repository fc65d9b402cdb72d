//! The query rewrite that routes a statement into the session's world: every level of it (sub-queries,
//! CTEs, sub-links), a tracked table swapped for its overlay view or marked for the world scan, user views
//! expanded (`views.rs`, route/view_inline.rs), row-level security applied, writes checked. Called by
//! the post_parse_analyze hook (route/hooks/analyze.rs) and by SQL MERGE's join (route/merge_command.rs).
use crate::api::raise;
use crate::storage::{self, overlay};
use crate::guc;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;

mod views;
pub(crate) use views::*;
use crate::route::view_inline::inline_view;
use crate::backend_local::BackendLocal;

pub(crate) struct RouteContext {
    pub(crate) tracked: std::rc::Rc<HashMap<pg_sys::Oid, i32>>,
    /// a plain SELECT (no row locks, no writes in WITH): the tables it reads can be left as they are,
    /// for the world scan to read (see route/scans/world_scan/)
    pub(crate) world_scan: bool,
    /// the overlay views themselves (already routed; never inlined again)
    pub(crate) overlays: std::rc::Rc<std::collections::HashMap<pg_sys::Oid, i32>>,
    /// the statement itself: the planner hook sees its target (a write in WITH or a sub-query is a level
    /// below, never given the write twin)
    pub(crate) top: *mut pg_sys::Query,
    /// the oid `pg_notify()` calls are pointed at, once looked up (`keep_notify`)
    pub(crate) notify: Option<pg_sys::Oid>,
    /// main's tables the world changed the shape of -> their twins (storage/world_twins.rs)
    pub(crate) twins: std::rc::Rc<HashMap<pg_sys::Oid, pg_sys::Oid>>,
}

/// Set while a query is being routed: the catalog lookups routing makes are never routed themselves.
pub(crate) static ROUTING: BackendLocal<std::cell::Cell<bool>> = BackendLocal::new(std::cell::Cell::new(false));

/// The analysed query a utility statement runs: DECLARE CURSOR's, CREATE TABLE AS's (also under EXPLAIN).
pub(crate) unsafe fn utility_query(stmt: *mut pg_sys::Node) -> Option<*mut pg_sys::Query> {
    unsafe {
        if stmt.is_null() {
            return None;
        }
        let inner = match (*stmt).type_ {
            pg_sys::NodeTag::T_DeclareCursorStmt => (*(stmt as *mut pg_sys::DeclareCursorStmt)).query,
            pg_sys::NodeTag::T_CreateTableAsStmt => (*(stmt as *mut pg_sys::CreateTableAsStmt)).query,
            pg_sys::NodeTag::T_ExplainStmt => {
                let q = (*(stmt as *mut pg_sys::ExplainStmt)).query;
                // EXPLAIN of a plain query is routed when it is planned; EXPLAIN CREATE TABLE AS is not
                if !q.is_null() && (*q).type_ == pg_sys::NodeTag::T_Query {
                    let q = q as *mut pg_sys::Query;
                    if (*q).commandType == pg_sys::CmdType::CMD_UTILITY {
                        return utility_query((*q).utilityStmt);
                    }
                }
                return None;
            }
            _ => return None,
        };
        (!inner.is_null() && (*inner).type_ == pg_sys::NodeTag::T_Query).then_some(inner as *mut pg_sys::Query)
    }
}

pub(crate) unsafe fn merge_into_tracked(query: *mut pg_sys::Query) -> bool {
    unsafe {
        let rte = crate::fast_ffi::list_nth((*query).rtable, (*query).resultRelation - 1) as *mut pg_sys::RangeTblEntry;
        storage::routed_tables().contains_key(&(*rte).relid)
    }
}

/// Routes a query pg_worlds built itself (MERGE's join).
pub(crate) unsafe fn route_select(query: *mut pg_sys::Query) {
    unsafe {
        route_query(query);
    }
}

/// Routes every level of the query; true when its walk reached every node of it (its `pg_notify()` calls
/// were kept on the way: no separate walk for them).
pub(crate) unsafe fn route_query(query: *mut pg_sys::Query) -> bool {
    if ROUTING.with(|r| r.replace(true)) {
        return false;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ROUTING.with(|r| r.set(false));
        }
    }
    let _reset = Reset;
    let tracked = storage::routed_tables();
    if tracked.is_empty() {
        return false;
    }
    let overlays = storage::overlay_relations();
    // (one walk to tell whether any level locks rows; most statements don't, and skip the rewrite's walk)
    let locking = unsafe { locks_rows(query) };
    // FOR UPDATE / SHARE of a world's rows: key locks (row_locks.rs), read through the overlay views (whose
    // key lookups name the keys a statement locks before it reads)
    let row_locks = match overlay::routing_world().filter(|w| locking && w.num > 0 && !w.read_only) {
        Some(w) => unsafe { crate::route::row_locks::rewrite(query, &tracked, w.num) },
        None => false,
    };
    // (a rewrite that moved no clause leaves the levels' row marks as they were)
    let world_scan = guc::WORLD_SCAN.get()
        && !row_locks
        && !locking
        && unsafe { (*query).commandType == pg_sys::CmdType::CMD_SELECT && !(*query).hasModifyingCTE };
    let twins = overlay::routing_world()
        .filter(|w| w.num > 0 && !w.read_only)
        .map(|w| storage::world_twins::twins_of(w.num))
        .unwrap_or_default();
    let mut ctx = RouteContext { tracked, world_scan, overlays, top: query, notify: None, twins };
    unsafe {
        // called directly, not through the guarded walker: an error must unwind through this frame (so
        // the ROUTING flag resets), not longjmp over it
        route_node(query as *mut pg_sys::Node, &mut ctx as *mut RouteContext as *mut std::ffi::c_void);
    }
    true
}

/// Does the query (or any sub-query) lock rows (FOR UPDATE / SHARE)? The planner then marks every table of
/// that level, which the world scan doesn't support.
pub(crate) unsafe fn locks_rows(query: *mut pg_sys::Query) -> bool {
    unsafe { any_query_level(query, |q| !(*q).rowMarks.is_null()) }
}

/// Does any level of the statement (itself, its sub-queries, CTEs and sub-links) pass `test`?
pub(crate) unsafe fn any_query_level(query: *mut pg_sys::Query, test: unsafe fn(*mut pg_sys::Query) -> bool) -> bool {
    // a statement of one level (no sub-links, CTEs or sub-queries in FROM: most are) is tested without a
    // walk of its expressions
    if unsafe { single_level(query) } {
        return unsafe { test(query) };
    }
    #[pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            if (*node).type_ == pg_sys::NodeTag::T_Query {
                let q = node as *mut pg_sys::Query;
                let test = *(context as *const unsafe fn(*mut pg_sys::Query) -> bool);
                return test(q) || pg_sys::query_tree_walker(q, Some(walker), context, 0);
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    unsafe { walker(query as *mut pg_sys::Node, &test as *const _ as *mut std::ffi::c_void) }
}

/// Has the query no level below it: no sub-link in any expression, no CTE, no sub-query in its range
/// table (a set operation's branches and a view expanded here are such sub-queries)?
pub(crate) unsafe fn single_level(query: *mut pg_sys::Query) -> bool {
    unsafe {
        if (*query).hasSubLinks || !(*query).cteList.is_null() || !(*query).setOperations.is_null() {
            return false;
        }
        let rtable = (*query).rtable;
        (0..if rtable.is_null() { 0 } else { (*rtable).length }).all(|i| {
            let rte = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            (*rte).rtekind != pg_sys::RTEKind::RTE_SUBQUERY && (*rte).subquery.is_null()
        })
    }
}

#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn route_walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    unsafe { route_node(node, context) }
}

pub(crate) unsafe fn route_node(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        if (*node).type_ == pg_sys::NodeTag::T_Query {
            let query = node as *mut pg_sys::Query;
            let ctx = &mut *(context as *mut RouteContext);
            route_range_table(query, ctx);
            return pg_sys::query_tree_walker(query, Some(route_walker), context, 0);
        }
        // pg_notify() in a world: kept in its outbox (the calls of a view inlined here too)
        keep_notify(node, &mut (*(context as *mut RouteContext)).notify);
        pg_sys::expression_tree_walker(node, Some(route_walker), context)
    }
}

pub(crate) unsafe fn route_range_table(query: *mut pg_sys::Query, ctx: &mut RouteContext) {
    unsafe {
        let rtable = (*query).rtable;
        let n = if rtable.is_null() { 0 } else { (*rtable).length };
        let mut perm_copies: Vec<*mut pg_sys::RangeTblEntry> = Vec::new();
        for i in 0..n {
            let rte = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            if (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION {
                continue;
            }
            let is_result = (*query).resultRelation == i + 1;
            // main's table the world changed the shape of, reached by a qualified name or main's view: its
            // twin, the world's own table, read and written as it is
            if let Some(&twin) = ctx.twins.get(&(*rte).relid) {
                crate::route::twin_reads::swap(rte, twin);
                continue;
            }
            // user views in FROM (not a view body's own OLD/NEW entries, nor our permission copies)
            if (*rte).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char && !ctx.overlays.contains_key(&(*rte).relid) {
                if is_result {
                    // the views a session in the past reads its tables through (time/past_schema.rs) too
                    refuse_write_in_past();
                    if view_reads_tracked((*rte).relid, ctx) {
                        let (instead_of, rules) = write_actions((*rte).relid, (*query).commandType);
                        if instead_of && (*query).commandType == pg_sys::CmdType::CMD_INSERT {
                            // the view's INSTEAD OF trigger runs as in main: its own statements are routed
                            continue;
                        }
                        if instead_of || rules {
                            raise(
                                "0A000",
                                format!(
                                    "{} through view {} inside a world is not supported yet: it has {}; write its tables directly",
                                    command_word((*query).commandType),
                                    relation_name((*rte).relid),
                                    if instead_of { "an INSTEAD OF trigger" } else { "rules" }
                                ),
                            );
                        }
                        if !(*query).onConflict.is_null() {
                            raise("0A000", "INSERT ... ON CONFLICT through a view inside a world is not supported yet; write the table itself");
                        }
                        // the write goes to the view's world twin; rights are checked as Postgres would: the
                        // role's on the view, the view owner's on the table
                        let (twin, bases) = crate::route::view_writes::world_twin((*rte).relid, &ctx.tracked);
                        let copy = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
                        (*copy).inFromCl = false;
                        perm_copies.push(copy);
                        let owner = view_owner((*rte).relid);
                        for base in bases {
                            let b = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
                            (*b).inFromCl = false;
                            (*b).relid = base;
                            (*b).relkind = pg_sys::RELKIND_RELATION as std::ffi::c_char;
                            (*b).checkAsUser = owner;
                            (*b).selectedCols = std::ptr::null_mut();
                            (*b).insertedCols = std::ptr::null_mut();
                            (*b).updatedCols = std::ptr::null_mut();
                            perm_copies.push(b);
                        }
                        (*rte).relid = twin;
                        (*rte).requiredPerms = 0;
                        pg_sys::LockRelationOid(twin, (*rte).rellockmode);
                    }
                } else if (*rte).inFromCl {
                    inline_view(rte);
                }
                continue;
            }
            // AS OF reads main's table itself (as `_w_main`, see worlds._as_of_query); never a write
            if !is_result && !(*rte).eref.is_null() && std::ffi::CStr::from_ptr((*(*rte).eref).aliasname).to_bytes() == b"_w_main" {
                continue;
            }
            let tracked = ctx.tracked.get(&(*rte).relid).copied();
            if is_result && tracked.is_some() {
                // a moment is read only, whether or not the statement would touch a row
                refuse_write_in_past();
            }
            if tracked.is_none() && is_result {
                refuse_untracked_write((*rte).relid);
            }
            if is_result && write_actions((*rte).relid, (*query).commandType).1 {
                // rules rewrite the statement against the table itself, which a world's write doesn't reach
                raise(
                    "0A000",
                    format!(
                        "{} into table {} inside a world is not supported: it has rules for it",
                        command_word((*query).commandType),
                        relation_name((*rte).relid)
                    ),
                );
            }
            if tracked.is_none() && (*rte).relkind == pg_sys::RELKIND_PARTITIONED_TABLE as std::ffi::c_char {
                raise("0A000", format!("partitioned table {} can't be used inside a world yet", relation_name((*rte).relid)));
            }
            if let Some(tabno) = tracked {
                let layout = storage::relation_layout(tabno);
                if (*query).commandType == pg_sys::CmdType::CMD_MERGE && is_result {
                    // Postgres can't MERGE into the overlay view: ExecutorRun runs it (merge_command)
                    check_target(&layout);
                    continue;
                }
                if let Some(why) = &layout.unsupported {
                    raise("0A000", why.clone());
                }
                if is_result && layout.delta == pg_sys::Oid::INVALID {
                    // (every tracked table has one once the database has a world: storage/world_storage.rs)
                    raise("55000", format!("table {} has no storage for worlds' rows", relation_name((*rte).relid)));
                }
                if is_result && matches!((*query).commandType, pg_sys::CmdType::CMD_INSERT | pg_sys::CmdType::CMD_UPDATE) {
                    refuse_generated_values(query, (*rte).relid);
                }
                // the overlay reads the table with its owner's rights: the role's row-level security
                // policies for this command, as Postgres would apply them to the table, go onto the
                // swapped entry (see apply_row_security)
                let row_security = if pg_sys::check_enable_rls((*rte).relid, pg_sys::Oid::INVALID, true)
                    == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
                {
                    if is_result && !(*query).onConflict.is_null() {
                        raise("0A000", "INSERT ... ON CONFLICT into a table with row-level security is not supported inside a world yet");
                    }
                    Some(row_security_of(query, rte, i + 1))
                } else {
                    None
                };
                if ctx.world_scan
                    && !is_result
                    && row_security.is_none()
                    && (*query).commandType == pg_sys::CmdType::CMD_SELECT
                    && crate::route::scans::keys::supports(&layout)
                {
                    // read in place by the world scan: the entry stays the table's (its rights included)
                    refuse_system_columns(query, i + 1);
                    crate::route::scans::world_scan::mark(rte);
                    continue;
                }
                let write_or_delete = is_result
                    && layout.overlay_rows != pg_sys::Oid::INVALID
                    && matches!((*query).commandType, pg_sys::CmdType::CMD_UPDATE | pg_sys::CmdType::CMD_DELETE);
                // UPDATE / DELETE of a table with an integer key whose rows the world scan can read in place:
                // the entry stays the table's (its rights and Postgres's rewrite of a write to it included),
                // marked, and the planner hook makes the write twin the target and this entry the world scan
                // that feeds it (hooks/planner.rs), with no view for the rewriter to expand
                if write_or_delete
                    && layout.key_kind == b'i'
                    && query == ctx.top
                    && guc::WORLD_SCAN.get()
                    && !storage::internal()
                    && row_security.is_none()
                    && !has_row_security(layout.relid)
                    && in_place_target(&layout)
                    && !has_current_of(query)
                {
                    refuse_system_columns(query, i + 1);
                    crate::route::scans::world_scan::mark(rte);
                    continue;
                }
                // UPDATE / DELETE of a table without a key: the rows twin, which tells the trigger which
                // physical row each row is
                let mut overlay = if write_or_delete && layout.key_kind == b'r' { layout.overlay_rows } else { layout.overlay };
                if is_result && !(*query).onConflict.is_null() {
                    crate::route::upsert::check_constraint_has_index((*query).onConflict);
                    if (*(*query).onConflict).action == pg_sys::OnConflictAction::ONCONFLICT_UPDATE {
                        // DO UPDATE: its action travels to the twin's trigger in the twin's extra column
                        let action = crate::route::upsert::action_sql(query, i + 1, &layout);
                        add_action_column(query, overlay_width(&layout), crate::route::upsert::action_value(&action));
                    }
                    // the conflict twin of the overlay: its trigger skips (DO NOTHING) or updates (DO
                    // UPDATE) a row whose key the world already has
                    overlay = layout.overlay_nothing;
                    (*query).onConflict = std::ptr::null_mut();
                }
                refuse_system_columns(query, i + 1);
                if !(*rte).tablesample.is_null() {
                    // the overlay is a view: the sample would be dropped and every row read
                    raise(
                        "0A000",
                        format!(
                            "TABLESAMPLE of table {} is not supported inside a world: only tables with one integer key column are sampled there",
                            layout.table_name
                        ),
                    );
                }
                // the permission check stays on the real table: a copy of the entry, outside the join tree
                let copy = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
                (*copy).inFromCl = false;
                (*copy).inh = false;
                perm_copies.push(copy);
                (*rte).relid = overlay;
                (*rte).relkind = pg_sys::RELKIND_VIEW as std::ffi::c_char;
                (*rte).inh = false;
                (*rte).requiredPerms = 0;
                (*rte).tablesample = std::ptr::null_mut();

                // the rewriter expands the view without locking it: lock it as the table was
                pg_sys::LockRelationOid(overlay, (*rte).rellockmode);
                if let Some(policies) = row_security {
                    apply_row_security(query, rte, i + 1, is_result, policies);
                }
            }
        }
        for copy in perm_copies {
            (*query).rtable = pg_sys::lappend((*query).rtable, copy as *mut std::ffi::c_void);
        }
    }
}

/// 25006 in a session in 'name@when' (a moment of the past is read only).
pub(crate) fn refuse_write_in_past() {
    if let Some(past) = overlay::routing_world().filter(|w| w.read_only) {
        raise("25006", format!("{} is a moment of the past: it can be read, not written", past.name));
    }
}

/// Postgres refuses a value for a generated column, and for an identity column GENERATED ALWAYS (unless
/// INSERT ... OVERRIDING SYSTEM VALUE), when it rewrites the statement; a write in a world targets the
/// overlay, which has neither kind of column, so the same check is made here (428C9, Postgres's words).
pub(crate) unsafe fn refuse_generated_values(query: *mut pg_sys::Query, relid: pg_sys::Oid) {
    unsafe {
        let insert = (*query).commandType == pg_sys::CmdType::CMD_INSERT;
        let rel = pg_sys::relation_open(relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        if insert && (*query).override_ == pg_sys::OverridingKind::OVERRIDING_USER_VALUE {
            // the values given for identity columns are ignored: the columns get their defaults, as the
            // rewriter does for the table itself (which no longer is the target once routed)
            let tlist = (*query).targetList;
            let mut kept: *mut pg_sys::List = std::ptr::null_mut();
            for i in 0..if tlist.is_null() { 0 } else { (*tlist).length } {
                let tle = crate::fast_ffi::list_nth(tlist, i) as *mut pg_sys::TargetEntry;
                let attno = (*tle).resno as i32;
                let identity = !(*tle).resjunk
                    && attno > 0
                    && attno <= (*desc).natts
                    && (*(*desc).attrs.as_ptr().add(attno as usize - 1)).attidentity != 0;
                if !identity {
                    kept = pg_sys::lappend(kept, tle as *mut std::ffi::c_void);
                }
            }
            (*query).targetList = kept;
        }
        let tlist = (*query).targetList;
        let mut refused: Option<(String, bool)> = None;
        for i in 0..if tlist.is_null() { 0 } else { (*tlist).length } {
            let tle = crate::fast_ffi::list_nth(tlist, i) as *mut pg_sys::TargetEntry;
            let attno = (*tle).resno as i32;
            if (*tle).resjunk || attno <= 0 || attno > (*desc).natts {
                continue;
            }
            let att = &*(*desc).attrs.as_ptr().add(attno as usize - 1);
            let generated = att.attgenerated != 0;
            let always = att.attidentity == pg_sys::ATTRIBUTE_IDENTITY_ALWAYS as std::ffi::c_char;
            // neither kind, or an identity column an INSERT ... OVERRIDING SYSTEM VALUE may set
            if !generated && (!always || (insert && (*query).override_ == pg_sys::OverridingKind::OVERRIDING_SYSTEM_VALUE)) {
                continue;
            }
            if !is_default(query, (*tle).expr as *mut pg_sys::Node) {
                refused = Some((std::ffi::CStr::from_ptr(att.attname.data.as_ptr()).to_string_lossy().into_owned(), generated));
                break;
            }
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        if let Some((name, generated)) = refused {
            let detail = if generated {
                format!("Column \"{name}\" is a generated column.")
            } else {
                format!("Column \"{name}\" is an identity column defined as GENERATED ALWAYS.")
            };
            if insert {
                let hint = (!generated).then(|| "Use OVERRIDING SYSTEM VALUE to override.".to_string());
                crate::api::raise_with("428C9", format!("cannot insert a non-DEFAULT value into column \"{name}\""), Some(detail), hint);
            }
            crate::api::raise_with("428C9", format!("column \"{name}\" can only be updated to DEFAULT"), Some(detail), None);
        }
    }
}

/// Is this target value DEFAULT (also in every row of a multi-row VALUES)?
pub(crate) unsafe fn is_default(query: *mut pg_sys::Query, expr: *mut pg_sys::Node) -> bool {
    unsafe {
        if expr.is_null() {
            return false;
        }
        match (*expr).type_ {
            pg_sys::NodeTag::T_SetToDefault => true,
            pg_sys::NodeTag::T_Var => {
                let var = expr as *mut pg_sys::Var;
                let rte = crate::fast_ffi::list_nth((*query).rtable, (*var).varno - 1) as *mut pg_sys::RangeTblEntry;
                if (*var).varlevelsup != 0 || (*rte).rtekind != pg_sys::RTEKind::RTE_VALUES {
                    return false;
                }
                let rows = (*rte).values_lists;
                (0..(*rows).length).all(|r| {
                    let row = crate::fast_ffi::list_nth(rows, r) as *mut pg_sys::List;
                    let v = crate::fast_ffi::list_nth(row, (*var).varattno as i32 - 1) as *mut pg_sys::Node;
                    !v.is_null() && (*v).type_ == pg_sys::NodeTag::T_SetToDefault
                })
            }
            _ => false,
        }
    }
}

/// A world's rows are not heap tuples of the table: `ctid`, `xmin` and the other system columns of a
/// tracked table have no meaning there (0A000, rather than the planner's internal error).
pub(crate) unsafe fn refuse_system_columns(query: *mut pg_sys::Query, rt_index: i32) {
    unsafe {
        let mut attnos: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        for node in [(*query).targetList as *mut pg_sys::Node, (*query).jointree as *mut pg_sys::Node, (*query).returningList as *mut pg_sys::Node] {
            pg_sys::pull_varattnos(node, rt_index as pg_sys::Index, &mut attnos);
        }
        let mut member = -1;
        loop {
            member = crate::fast_ffi::bms_next_member(attnos, member);
            if member < 0 {
                break;
            }
            if member + pg_sys::FirstLowInvalidHeapAttributeNumber < 0 {
                raise("0A000", "system columns (ctid, xmin, ...) of a tracked table can't be used inside a world: a world's rows are not the table's heap tuples");
            }
        }
    }
}


/// Refusals made when the statement is analysed (before anything runs).
/// MERGE into a tracked table, refused when the statement is analysed (before anything runs).
pub(crate) unsafe fn check_target(layout: &storage::Layout) {
    if let Some(why) = &layout.unsupported {
        raise("0A000", why.clone());
    }
    if layout.key_attnos.is_empty() {
        raise(
            "0A000",
            format!(
                "MERGE into {} inside a world needs the table to have a primary key; use INSERT, UPDATE or DELETE",
                layout.table_name
            ),
        );
    }
}

/// Points every `pg_notify()` call of the query (and its sub-queries) at worlds._world_notify, which keeps
/// the effect in the session's world's outbox (governance/outbox.rs).
pub(crate) unsafe fn keep_notifies(query: *mut pg_sys::Query) {
    #[pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            if (*node).type_ == pg_sys::NodeTag::T_Query {
                return pg_sys::query_tree_walker(node as *mut pg_sys::Query, Some(walker), context, 0);
            }
            keep_notify(node, &mut *(context as *mut Option<pg_sys::Oid>));
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    let mut keep: Option<pg_sys::Oid> = None;
    unsafe { walker(query as *mut pg_sys::Node, &mut keep as *mut Option<pg_sys::Oid> as *mut std::ffi::c_void) };
}

/// A `pg_notify()` call pointed at worlds._world_notify when the session is in a world that can write;
/// `keep` caches that function's oid for the statement (INVALID: leave the calls as they are).
#[inline]
unsafe fn keep_notify(node: *mut pg_sys::Node, keep: &mut Option<pg_sys::Oid>) {
    unsafe {
        if (*node).type_ == pg_sys::NodeTag::T_FuncExpr && (*(node as *mut pg_sys::FuncExpr)).funcid == pg_sys::Oid::from(pg_sys::F_PG_NOTIFY) {
            // (the session's world is looked up only for a query that notifies: one in a world that
            // is gone fails here, as its other statements do)
            let oid = *keep.get_or_insert_with(|| {
                if overlay::routing_world().is_some_and(|w| w.num > 0 && !w.read_only) {
                    crate::governance::outbox::world_notify_oid()
                } else {
                    pg_sys::Oid::INVALID
                }
            });
            if oid != pg_sys::Oid::INVALID {
                (*(node as *mut pg_sys::FuncExpr)).funcid = oid;
            }
        }
    }
}

/// Can a world's UPDATE / DELETE of this table read its rows in place (the world scan reads the table for a
/// SELECT, and the table has no inheritance children and no dropped column)? The router asks before it
/// chooses the write twin (and that the table has no row-level security), this hook again before it converts.
pub(crate) fn in_place_target(layout: &storage::Layout) -> bool {
    if layout.unsupported.is_some() || !crate::route::scans::keys::supports(layout) {
        return false;
    }
    // a dropped column: the view's row has a NULL placeholder there, and OLD, the whole row the trigger
    // gets, is typed as the view's row, which Postgres checks column by column against the scanned row
    unsafe { table_shape(layout.relid).is_some_and(|(dropped, _)| !dropped) }
}

/// Whether the table has (a dropped column, row-level security); None when it has inheritance children
/// (the world scan reads the table alone).
pub(crate) unsafe fn table_shape(relid: pg_sys::Oid) -> Option<(bool, bool)> {
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return None;
        }
        let desc = (*rel).rd_att;
        let children = (*(*rel).rd_rel).relhassubclass;
        let rls = (*(*rel).rd_rel).relrowsecurity;
        let dropped = (0..(*desc).natts as usize).any(|i| (*(*desc).attrs.as_ptr().add(i)).attisdropped);
        pg_sys::RelationClose(rel);
        (!children).then_some((dropped, rls))
    }
}

/// Has the table row-level security enabled (for any role)?
pub(crate) fn has_row_security(relid: pg_sys::Oid) -> bool {
    unsafe { table_shape(relid).is_none_or(|(_, rls)| rls) }
}

/// `WHERE CURRENT OF cursor` in the statement's conditions (the only place the parser allows it).
pub(crate) unsafe fn has_current_of(parse: *mut pg_sys::Query) -> bool {
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            match (*node).type_ {
                pg_sys::NodeTag::T_CurrentOfExpr => true,
                // (a sub-select's own conditions are about its own tables)
                pg_sys::NodeTag::T_Query => false,
                _ => pg_sys::expression_tree_walker(node, Some(walker), context),
            }
        }
    }
    unsafe { walker((*parse).jointree as *mut pg_sys::Node, std::ptr::null_mut()) }
}
