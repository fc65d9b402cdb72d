//! What routing asks of a user's view and of row-level security: a view expanded in place, whether it reads
//! tracked tables, its write actions; the row-level security a command gets in main, applied to the overlay.
use super::*;

/// Marks the WITH CHECK options that are a table's row-level security policies (run as a view's checks).
pub(crate) const RLS_CHECK: &std::ffi::CStr = c"pg_worlds: row-level security";


/// The row-level security a role's command on a table gets in main: (security quals, WITH CHECK options,
/// whether the quals have sub-links). Asked of Postgres before the entry is swapped.
pub(crate) struct RowSecurity(*mut pg_sys::List, *mut pg_sys::List, bool);

pub(crate) unsafe fn row_security_of(query: *mut pg_sys::Query, rte: *mut pg_sys::RangeTblEntry, rt_index: i32) -> RowSecurity {
    unsafe {
        let mut quals: *mut pg_sys::List = std::ptr::null_mut();
        let mut checks: *mut pg_sys::List = std::ptr::null_mut();
        let mut has_row_security = false;
        let mut has_sublinks = false;
        pg_sys::get_row_security_policies(query, rte, rt_index, &mut quals, &mut checks, &mut has_row_security, &mut has_sublinks);
        RowSecurity(quals, checks, has_sublinks)
    }
}

/// The policies on the overlay's entry. USING quals: a read becomes a security-barrier sub-query of the
/// overlay filtered by them, so they run before any of the query's own conditions, as on the table (the
/// planner would drop security quals on a view entry it flattens); for UPDATE and DELETE they join the
/// statement's WHERE. WITH CHECK: Postgres checks a view with an INSTEAD OF trigger only for WITH CHECK
/// OPTION, so the policies' checks run as such, marked, and executor_run words a violation as Postgres
/// does for the table (42501).
pub(crate) unsafe fn apply_row_security(query: *mut pg_sys::Query, rte: *mut pg_sys::RangeTblEntry, rt_index: i32, is_result: bool, policies: RowSecurity) {
    unsafe {
        let RowSecurity(quals, checks, has_sublinks) = policies;
        if !quals.is_null() {
            if is_result {
                let qual = pg_sys::make_ands_explicit(quals) as *mut pg_sys::Node;
                (*(*query).jointree).quals = pg_sys::make_and_qual((*(*query).jointree).quals, qual);
            } else {
                filter_with_barrier(rte, quals, rt_index, has_sublinks);
            }
        }
        if !checks.is_null() {
            for k in 0..(*checks).length {
                let wco = crate::fast_ffi::list_nth(checks, k) as *mut pg_sys::WithCheckOption;
                (*wco).kind = pg_sys::WCOKind::WCO_VIEW_CHECK;
                (*wco).polname = pg_sys::pstrdup(RLS_CHECK.as_ptr());
            }
            (*query).withCheckOptions = pg_sys::list_concat(checks, (*query).withCheckOptions);
        }
        if has_sublinks {
            (*query).hasSubLinks = true;
        }
        (*query).hasRowSecurity = true;
    }
}

/// Turns the (already swapped) entry into `(SELECT * FROM overlay WHERE quals)` as a security barrier.
pub(crate) unsafe fn filter_with_barrier(rte: *mut pg_sys::RangeTblEntry, quals: *mut pg_sys::List, rt_index: i32, has_sublinks: bool) {
    unsafe {
        let inner = pg_sys::copyObjectImpl(rte as *const std::ffi::c_void) as *mut pg_sys::RangeTblEntry;
        (*inner).inFromCl = true;
        (*inner).requiredPerms = 0;
        (*inner).securityQuals = std::ptr::null_mut();
        pg_sys::ChangeVarNodes(quals as *mut pg_sys::Node, rt_index, 1, 0);
        let sub = pg_sys::palloc0(std::mem::size_of::<pg_sys::Query>()) as *mut pg_sys::Query;
        (*sub).type_ = pg_sys::NodeTag::T_Query;
        (*sub).commandType = pg_sys::CmdType::CMD_SELECT;
        (*sub).querySource = pg_sys::QuerySource::QSRC_ORIGINAL;
        (*sub).canSetTag = true;
        (*sub).rtable = pg_sys::lappend(std::ptr::null_mut(), inner as *mut std::ffi::c_void);
        let rtr = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblRef>()) as *mut pg_sys::RangeTblRef;
        (*rtr).type_ = pg_sys::NodeTag::T_RangeTblRef;
        (*rtr).rtindex = 1;
        (*sub).jointree = pg_sys::makeFromExpr(
            pg_sys::lappend(std::ptr::null_mut(), rtr as *mut std::ffi::c_void),
            pg_sys::make_ands_explicit(quals) as *mut pg_sys::Node,
        );
        (*sub).hasSubLinks = has_sublinks;
        let rel = pg_sys::relation_open((*rte).relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        let mut tlist: *mut pg_sys::List = std::ptr::null_mut();
        for a in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(a);
            let var = pg_sys::makeVar(1, (a + 1) as i16, att.atttypid, att.atttypmod, att.attcollation, 0);
            let te = pg_sys::makeTargetEntry(var as *mut pg_sys::Expr, (a + 1) as i16, pg_sys::pstrdup(att.attname.data.as_ptr()), false);
            tlist = pg_sys::lappend(tlist, te as *mut std::ffi::c_void);
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        (*sub).targetList = tlist;
        (*rte).rtekind = pg_sys::RTEKind::RTE_SUBQUERY;
        (*rte).subquery = sub;
        (*rte).security_barrier = true;
        (*rte).relid = pg_sys::Oid::INVALID;
        (*rte).relkind = 0;
        (*rte).rellockmode = 0;
        (*rte).inh = false;
    }
}

/// The number of attributes of the tracked table (and so of its overlay): the conflict twin's action
/// column comes right after them.
pub(crate) unsafe fn overlay_width(layout: &storage::Layout) -> i16 {
    unsafe {
        let rel = pg_sys::relation_open(layout.relid, pg_sys::NoLock as i32);
        let n = (*(*rel).rd_att).natts as i16;
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        n
    }
}

/// Supplies the conflict twin's action column in an INSERT's target list.
pub(crate) unsafe fn add_action_column(query: *mut pg_sys::Query, width: i16, value: *mut pg_sys::Expr) {
    unsafe {
        let name = std::ffi::CString::new(crate::storage::upsert_wire::ACTION_COLUMN).unwrap();
        let te = pg_sys::makeTargetEntry(value, width + 1, pg_sys::pstrdup(name.as_ptr()), false);
        (*query).targetList = pg_sys::lappend((*query).targetList, te as *mut std::ffi::c_void);
    }
}

/// A write inside a world must never reach main: a table pg_worlds doesn't track (tracking failed, or it
/// was untracked) is refused, unless it is the session's own temporary table or pg_worlds' own.
pub(crate) unsafe fn refuse_untracked_write(relid: pg_sys::Oid) {
    unsafe {
        if is_own_or_system(relid) {
            return;
        }
        raise(
            "0A000",
            format!(
                "table {} is not tracked by pg_worlds, so it can't be written inside a world (the write would reach main); track it with SELECT worlds.track('{}')",
                relation_name(relid),
                relation_name(relid)
            ),
        );
    }
}

pub(crate) unsafe fn relation_name(relid: pg_sys::Oid) -> String {
    unsafe {
        let name = pg_sys::get_rel_name(relid);
        if name.is_null() { relid.to_u32().to_string() } else { std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned() }
    }
}

pub(crate) unsafe fn view_owner(view: pg_sys::Oid) -> pg_sys::Oid {
    unsafe {
        let rel = pg_sys::relation_open(view, pg_sys::NoLock as i32);
        let owner = (*(*rel).rd_rel).relowner;
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        owner
    }
}

/// Can the statement touch a table at all? (`SELECT 1`, `SELECT worlds.switch_world('main')` can't: they
/// need no world resolved, so they still run when the session's world is gone or never existed.)
pub(crate) unsafe fn reads_relations(query: *mut pg_sys::Query) -> bool {
    unsafe {
        if (*query).hasSubLinks || !(*query).cteList.is_null() || (*query).resultRelation != 0 {
            return true;
        }
        let rtable = (*query).rtable;
        (0..if rtable.is_null() { 0 } else { (*rtable).length }).any(|i| {
            let rte = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            matches!((*rte).rtekind, pg_sys::RTEKind::RTE_RELATION | pg_sys::RTEKind::RTE_SUBQUERY | pg_sys::RTEKind::RTE_JOIN)
        })
    }
}

/// Does the statement (its sub-queries and CTEs included) name a relation outside pg_worlds' own schemas,
/// the system catalogs and temporary tables? Those alone are never routed, so a statement over them needs
/// no world resolved: a session whose world doesn't exist (a mistyped `options=-c worlds.world=...`) can
/// still run SWITCH WORLD, whose functions read only the catalog.
pub(crate) unsafe fn reads_user_relations(query: *mut pg_sys::Query) -> bool {
    unsafe fn names_user_relation(q: *mut pg_sys::Query) -> bool {
        unsafe {
            let rtable = (*q).rtable;
            (0..if rtable.is_null() { 0 } else { (*rtable).length }).any(|i| {
                let rte = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
                (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION
                    // a temporary view may read tracked tables (the views of a session in the past do)
                    && ((*rte).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char
                        // (a tracked table is a user's: no catalog lookup for it)
                        || storage::is_tracked((*rte).relid)
                        || !is_own_or_system((*rte).relid))
            })
        }
    }
    unsafe { any_query_level(query, names_user_relation) }
}

/// A relation of pg_worlds' own schemas, of the system catalogs, or a temporary one.
pub(crate) unsafe fn is_own_or_system(relid: pg_sys::Oid) -> bool {
    unsafe {
        if pg_sys::get_rel_persistence(relid) == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char {
            return true;
        }
        let ns = pg_sys::get_rel_namespace(relid);
        if ns == pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE) {
            return true;
        }
        let name = pg_sys::get_namespace_name(ns);
        if name.is_null() {
            return false;
        }
        let name = std::ffi::CStr::from_ptr(name);
        if matches!(name.to_bytes(), b"worlds" | b"worlds_data") {
            return true;
        }
        // the world's own tables (its namespaces: route/world_ddl.rs) are written as they are
        let own = crate::storage::search_path::world_of_namespace(&name.to_string_lossy());
        own.is_some() && own == crate::storage::overlay::resolved_routing_world().map(|w| w.num)
    }
}

/// For a write of this kind to a relation: does it have an INSTEAD OF row trigger, and rules (other than a
/// view's own SELECT rule)?
pub(crate) unsafe fn write_actions(relid: pg_sys::Oid, cmd: pg_sys::CmdType::Type) -> (bool, bool) {
    unsafe {
        let rel = pg_sys::relation_open(relid, pg_sys::NoLock as i32);
        let td = (*rel).trigdesc;
        let instead_of = !td.is_null()
            && match cmd {
                pg_sys::CmdType::CMD_INSERT => (*td).trig_insert_instead_row,
                pg_sys::CmdType::CMD_UPDATE => (*td).trig_update_instead_row,
                pg_sys::CmdType::CMD_DELETE => (*td).trig_delete_instead_row,
                _ => false,
            };
        let locks = (*rel).rd_rules;
        let rules = !locks.is_null()
            && (0..(*locks).numLocks as usize).any(|i| {
                let r = *(*locks).rules.add(i);
                (*r).event == cmd && (*r).enabled as u8 != b'D'
            });
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        (instead_of, rules)
    }
}

pub(crate) fn command_word(cmd: pg_sys::CmdType::Type) -> &'static str {
    match cmd {
        pg_sys::CmdType::CMD_INSERT => "INSERT",
        pg_sys::CmdType::CMD_UPDATE => "UPDATE",
        pg_sys::CmdType::CMD_DELETE => "DELETE",
        _ => "MERGE",
    }
}

/// Does a view (through other views) read a tracked table?
pub(crate) unsafe fn view_reads_tracked(view: pg_sys::Oid, ctx: &RouteContext) -> bool {
    unsafe {
        let rel = pg_sys::relation_open(view, pg_sys::AccessShareLock as i32);
        let body = pg_sys::get_view_query(rel);
        let rtable = (*body).rtable;
        let n = if rtable.is_null() { 0 } else { (*rtable).length };
        let mut found = false;
        for i in 0..n {
            let r = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            if (*r).rtekind == pg_sys::RTEKind::RTE_RELATION
                && (ctx.tracked.contains_key(&(*r).relid)
                    || ((*r).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char && (*r).relid != view && view_reads_tracked((*r).relid, ctx)))
            {
                found = true;
            }
        }
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        found
    }
}

