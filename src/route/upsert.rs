//! INSERT ... ON CONFLICT DO UPDATE inside a world.
//!
//! The overlay is a view, and Postgres allows ON CONFLICT only on tables, so the router sends the INSERT
//! to the overlay's conflict twin (`n_<t>_<n>`, whose last column `_w_upsert` the table doesn't have)
//! and hands the DO UPDATE part to its INSTEAD OF trigger as text in that column: a SELECT, deparsed by
//! Postgres from the analysed SET and WHERE, that computes the updated row from the row the world sees
//! (`_w_x`) and the proposed one (`excluded`). The trigger completes it with the proposed row and the key
//! match, runs it for each proposed row, and writes either the new row or the update.
use crate::api::raise;
use crate::storage::Layout;
use pgrx::pg_sys;

use crate::storage::upsert_wire::{self, TARGET_ALIAS};

/// The DO UPDATE part of an INSERT, as the conflict twin's trigger gets it: the SELECT computing the
/// updated row, and the statement's parameters that SELECT uses (`$n` stays `$n` in it).
pub struct Action {
    pub sql: String,
    /// the conflict target's columns (attnums): the primary key, or a unique index's
    pub match_attnos: Vec<i16>,
    /// the type of each parameter $1..$n the SELECT uses (InvalidOid for one it doesn't)
    pub param_types: Vec<pg_sys::Oid>,
}

/// The DO UPDATE part of `query` (an INSERT into the tracked table at `result_index`) as a SELECT of the
/// whole updated row (the table's live columns in attnum order) and the WHERE's verdict, reading the
/// table as `_w_x`; Vars of the proposed row read `excluded`. Refused (0A000) where the world can't do
/// what Postgres would: a conflict target other than the primary key.
pub(crate) unsafe fn action_sql(query: *mut pg_sys::Query, result_index: i32, layout: &Layout) -> Action {
    unsafe {
        let oc = (*query).onConflict;
        let match_attnos = arbiter_columns(oc, layout);
        let mut params: Vec<(i32, pg_sys::Oid)> = Vec::new();
        collect_params((*oc).onConflictSet as *mut pg_sys::Node, &mut params, layout);
        collect_params((*oc).onConflictWhere, &mut params, layout);
        let max = params.iter().map(|p| p.0).max().unwrap_or(0).max(0) as usize;
        let mut param_types = vec![pg_sys::Oid::INVALID; max];
        for (id, ty) in params {
            param_types[id as usize - 1] = ty;
        }
        let select = pg_sys::copyObjectImpl(query as *const std::ffi::c_void) as *mut pg_sys::Query;
        (*select).commandType = pg_sys::CmdType::CMD_SELECT;
        (*select).resultRelation = 0;
        (*select).onConflict = std::ptr::null_mut();
        (*select).returningList = std::ptr::null_mut();
        (*select).cteList = std::ptr::null_mut();
        (*select).hasModifyingCTE = false;
        (*select).hasRecursive = false;
        let target = crate::fast_ffi::list_nth((*select).rtable, result_index - 1) as *mut pg_sys::RangeTblEntry;
        let alias = std::ffi::CString::new(TARGET_ALIAS).unwrap();
        (*target).alias = pg_sys::makeAlias(alias.as_ptr(), std::ptr::null_mut());
        (*target).inFromCl = true; // the deparser prints only FROM-clause entries
        (*(*target).eref).aliasname = pg_sys::pstrdup(alias.as_ptr());

        // the whole updated row: SET's expression where it assigns the column, the column as it is otherwise
        let sets = (*oc).onConflictSet;
        let set_expr = |attno: i16| -> Option<*mut pg_sys::Expr> {
            let n = if sets.is_null() { 0 } else { (*sets).length };
            (0..n).find_map(|i| {
                let te = crate::fast_ffi::list_nth(sets, i) as *mut pg_sys::TargetEntry;
                ((*te).resno == attno).then(|| pg_sys::copyObjectImpl((*te).expr as *const std::ffi::c_void) as *mut pg_sys::Expr)
            })
        };
        let rel = pg_sys::relation_open(layout.relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        let mut tlist: *mut pg_sys::List = std::ptr::null_mut();
        let mut resno: i16 = 0;
        for i in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(i);
            if att.attisdropped {
                continue;
            }
            let attno = (i + 1) as i16;
            let expr = set_expr(attno).unwrap_or_else(|| {
                pg_sys::makeVar(result_index as _, attno, att.atttypid, att.atttypmod, att.attcollation, 0) as *mut pg_sys::Expr
            });
            resno += 1;
            let te = pg_sys::makeTargetEntry(expr, resno, pg_sys::pstrdup(att.attname.data.as_ptr()), false);
            tlist = pg_sys::lappend(tlist, te as *mut std::ffi::c_void);
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        let verdict = if (*oc).onConflictWhere.is_null() {
            pg_sys::makeBoolConst(true, false) as *mut pg_sys::Expr
        } else {
            pg_sys::copyObjectImpl((*oc).onConflictWhere as *const std::ffi::c_void) as *mut pg_sys::Expr
        };
        let ok = std::ffi::CString::new("_w_ok").unwrap();
        resno += 1;
        tlist = pg_sys::lappend(tlist, pg_sys::makeTargetEntry(verdict, resno, pg_sys::pstrdup(ok.as_ptr()), false) as *mut std::ffi::c_void);
        // then the row as the world has it (its key may differ from the proposed row's when the conflict
        // target is a unique index other than the primary key)
        let rel = pg_sys::relation_open(layout.relid, pg_sys::NoLock as i32);
        let desc = (*rel).rd_att;
        for i in 0..(*desc).natts as usize {
            let att = &*(*desc).attrs.as_ptr().add(i);
            if att.attisdropped {
                continue;
            }
            let var = pg_sys::makeVar(result_index as _, (i + 1) as i16, att.atttypid, att.atttypmod, att.attcollation, 0);
            resno += 1;
            let name = std::ffi::CString::new(format!("_w_old_{resno}")).unwrap();
            tlist = pg_sys::lappend(tlist, pg_sys::makeTargetEntry(var as *mut pg_sys::Expr, resno, pg_sys::pstrdup(name.as_ptr()), false) as *mut std::ffi::c_void);
        }
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        (*select).targetList = tlist;

        let rtr = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblRef>()) as *mut pg_sys::RangeTblRef;
        (*rtr).type_ = pg_sys::NodeTag::T_RangeTblRef;
        (*rtr).rtindex = result_index;
        (*select).jointree = pg_sys::makeFromExpr(pg_sys::lappend(std::ptr::null_mut(), rtr as *mut std::ffi::c_void), std::ptr::null_mut());
        let text = pg_sys::pg_get_querydef(select, false);
        Action { sql: std::ffi::CStr::from_ptr(text).to_string_lossy().trim().to_string(), match_attnos, param_types }
    }
}

/// What the twin's action column carries: the action's SQL, the conflict target's attnums, and when it
/// uses the statement's parameters, their types and (computed as each row is inserted) their values as a
/// text array: `<length of sql>:<sql><attnums>;<type oids>;<values as text[]>` (lists comma-separated).
pub(crate) unsafe fn action_value(action: &Action) -> *mut pg_sys::Expr {
    unsafe {
        let konst = text_const(&upsert_wire::head(&action.sql, &action.match_attnos, &action.param_types));
        if action.param_types.is_empty() {
            return konst;
        }
        // ARRAY[$1::text, ...]::text, each parameter through its output function
        let mut elements: *mut pg_sys::List = std::ptr::null_mut();
        for (i, ty) in action.param_types.iter().enumerate() {
            let e = if *ty == pg_sys::Oid::INVALID {
                pg_sys::makeNullConst(pg_sys::TEXTOID, -1, pg_sys::DEFAULT_COLLATION_OID) as *mut pg_sys::Expr
            } else {
                let p = pg_sys::palloc0(std::mem::size_of::<pg_sys::Param>()) as *mut pg_sys::Param;
                (*p).xpr.type_ = pg_sys::NodeTag::T_Param;
                (*p).paramkind = pg_sys::ParamKind::PARAM_EXTERN;
                (*p).paramid = i as i32 + 1;
                (*p).paramtype = *ty;
                (*p).paramtypmod = -1;
                (*p).paramcollid = pg_sys::get_typcollation(*ty);
                (*p).location = -1;
                to_text(p as *mut pg_sys::Expr)
            };
            elements = pg_sys::lappend(elements, e as *mut std::ffi::c_void);
        }
        let array = pg_sys::palloc0(std::mem::size_of::<pg_sys::ArrayExpr>()) as *mut pg_sys::ArrayExpr;
        (*array).xpr.type_ = pg_sys::NodeTag::T_ArrayExpr;
        (*array).array_typeid = pg_sys::TEXTARRAYOID;
        (*array).array_collid = pg_sys::DEFAULT_COLLATION_OID;
        (*array).element_typeid = pg_sys::TEXTOID;
        (*array).elements = elements;
        (*array).location = -1;
        let args = pg_sys::lappend(pg_sys::lappend(std::ptr::null_mut(), konst as *mut std::ffi::c_void), to_text(array as *mut pg_sys::Expr) as *mut std::ffi::c_void);
        pg_sys::makeFuncExpr(
            TEXTCAT,
            pg_sys::TEXTOID,
            args,
            pg_sys::DEFAULT_COLLATION_OID,
            pg_sys::DEFAULT_COLLATION_OID,
            pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
        ) as *mut pg_sys::Expr
    }
}

/// textcat(text, text): a built-in function's OID is fixed (pg_proc.dat).
const TEXTCAT: pg_sys::Oid = pg_sys::Oid::from_u32(1258);

unsafe fn text_const(s: &str) -> *mut pg_sys::Expr {
    unsafe {
        let c = std::ffi::CString::new(s).unwrap_or_default();
        pg_sys::makeConst(
            pg_sys::TEXTOID,
            -1,
            pg_sys::DEFAULT_COLLATION_OID,
            -1,
            pg_sys::Datum::from(pg_sys::cstring_to_text(c.as_ptr())),
            false,
            false,
        ) as *mut pg_sys::Expr
    }
}

unsafe fn to_text(e: *mut pg_sys::Expr) -> *mut pg_sys::Expr {
    unsafe {
        let c = pg_sys::palloc0(std::mem::size_of::<pg_sys::CoerceViaIO>()) as *mut pg_sys::CoerceViaIO;
        (*c).xpr.type_ = pg_sys::NodeTag::T_CoerceViaIO;
        (*c).arg = e;
        (*c).resulttype = pg_sys::TEXTOID;
        (*c).resultcollid = pg_sys::DEFAULT_COLLATION_OID;
        (*c).coerceformat = pg_sys::CoercionForm::COERCE_EXPLICIT_CAST;
        (*c).location = -1;
        c as *mut pg_sys::Expr
    }
}

/// ON CONFLICT ON CONSTRAINT of a constraint without an index (CHECK, FOREIGN KEY): Postgres's 42809, which
/// main raises when it plans the statement and the world's twin (a view, no arbiter) would not.
///
/// # Safety
/// `oc` is an analysed ON CONFLICT clause.
pub(crate) unsafe fn check_constraint_has_index(oc: *mut pg_sys::OnConflictExpr) {
    unsafe {
        if (*oc).constraint != pg_sys::Oid::INVALID && pg_sys::get_constraint_index((*oc).constraint) == pg_sys::Oid::INVALID {
            raise("42809", "constraint in ON CONFLICT clause has no associated index");
        }
    }
}

/// The conflict target's columns (attnums): the primary key, or a plain unique index (the world checks
/// those; see Layout::uniques) — named by columns or by constraint. Anything else: 0A000.
unsafe fn arbiter_columns(oc: *mut pg_sys::OnConflictExpr, layout: &Layout) -> Vec<i16> {
    unsafe {
        let refuse = || -> ! {
            raise(
                "0A000",
                format!(
                    "INSERT ... ON CONFLICT DO UPDATE into {} inside a world needs the primary key or a plain unique index as its conflict target{}",
                    layout.table_name,
                    if layout.key_columns.is_empty() { " (the table has no primary key)".to_string() } else { format!(" (ON CONFLICT ({}))", layout.key_columns.join(", ")) }
                ),
            )
        };
        if layout.key_attnos.is_empty() {
            refuse();
        }
        let attname = |attno: i16| {
            let p = pg_sys::get_attname(layout.relid, attno, false);
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        };
        let attnum = |name: &str| {
            let c = std::ffi::CString::new(name).unwrap();
            pg_sys::get_attnum(layout.relid, c.as_ptr())
        };
        let mut names: Vec<String> = if (*oc).constraint != pg_sys::Oid::INVALID {
            let index = pg_sys::get_constraint_index((*oc).constraint);
            // ON CONSTRAINT of a constraint without an index (CHECK, FOREIGN KEY): Postgres refuses it when
            // it plans the statement; here no name to read
            let iname_ptr = if index == pg_sys::Oid::INVALID { std::ptr::null_mut() } else { pg_sys::get_rel_name(index) };
            if iname_ptr.is_null() {
                raise("42809", "constraint in ON CONFLICT clause has no associated index");
            }
            if index == primary_key_index(layout.relid) {
                layout.key_columns.clone()
            } else {
                let iname = std::ffi::CStr::from_ptr(iname_ptr).to_string_lossy().into_owned();
                match layout.uniques.iter().find(|(n, _)| *n == iname) {
                    Some((_, cols)) => cols.clone(),
                    None => refuse(),
                }
            }
        } else {
            if !(*oc).arbiterWhere.is_null() {
                refuse();
            }
            let elems = (*oc).arbiterElems;
            let n = if elems.is_null() { 0 } else { (*elems).length };
            (0..n)
                .map(|i| {
                    let el = crate::fast_ffi::list_nth(elems, i) as *mut pg_sys::InferenceElem;
                    let e = (*el).expr;
                    if e.is_null() || (*e).type_ != pg_sys::NodeTag::T_Var {
                        refuse();
                    }
                    attname((*(e as *mut pg_sys::Var)).varattno)
                })
                .collect()
        };
        names.sort();
        names.dedup();
        let same = |cols: &Vec<String>| {
            let mut c = cols.clone();
            c.sort();
            c == names
        };
        if !same(&layout.key_columns) && !layout.uniques.iter().any(|(_, cols)| same(cols)) {
            refuse();
        }
        names.iter().map(|n| attnum(n)).collect()
    }
}

unsafe fn primary_key_index(relid: pg_sys::Oid) -> pg_sys::Oid {
    unsafe {
        let rel = pg_sys::relation_open(relid, pg_sys::NoLock as i32);
        let pk = pg_sys::RelationGetPrimaryKeyIndex(rel);
        pg_sys::relation_close(rel, pg_sys::NoLock as i32);
        pk
    }
}

/// The statement's parameters an expression uses: ($n, type). Other kinds of parameter (a sub-select's
/// `SET (a, b) = (SELECT ...)`) are refused with 0A000.
unsafe fn collect_params(node: *mut pg_sys::Node, out: &mut Vec<(i32, pg_sys::Oid)>, layout: &Layout) {
    struct Ctx<'a> {
        out: &'a mut Vec<(i32, pg_sys::Oid)>,
        other: bool,
    }
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe { walk(node, context) }
    }
    // unguarded, so a call from Rust never longjmps over Rust frames (the walker callback is the guarded one)
    unsafe fn walk(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
        unsafe {
            if node.is_null() {
                return false;
            }
            let ctx = &mut *(context as *mut Ctx);
            if (*node).type_ == pg_sys::NodeTag::T_Param {
                let p = node as *mut pg_sys::Param;
                if (*p).paramkind == pg_sys::ParamKind::PARAM_EXTERN && (*p).paramid > 0 {
                    ctx.out.push(((*p).paramid, (*p).paramtype));
                } else {
                    ctx.other = true;
                }
                return false;
            }
            if (*node).type_ == pg_sys::NodeTag::T_Query {
                return pg_sys::query_tree_walker(node as *mut pg_sys::Query, Some(walker), context, 0);
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    unsafe {
        let mut ctx = Ctx { out, other: false };
        walk(node, &mut ctx as *mut Ctx as *mut std::ffi::c_void);
        if ctx.other {
            raise(
                "0A000",
                format!(
                    "INSERT ... ON CONFLICT DO UPDATE into {} inside a world can't use SET (columns) = (SELECT ...) yet; assign each column",
                    layout.table_name
                ),
            );
        }
    }
}
