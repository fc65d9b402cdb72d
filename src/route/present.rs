//! What a world's session is shown of where its objects live: the world's namespaces by the schema they
//! stand for, as its messages already name them (world_ddl's log hook).
//!
//! Two places print a namespace's own name, and both go through a receiver of the statement's rows:
//! - a query's `name` columns (`pg_namespace.nspname`, `pg_tables.schemaname`, psql's `\d` header and the
//!   Schema column of `\dt`): a value that is one of the session's world namespaces (`pg_w5_public`)
//!   reaches the client as the schema it stands for (`public`). Only what is sent changes: the query
//!   itself still compares and joins the catalog's real names.
//! - EXPLAIN's text (`Seq Scan on pg_w5_public.notes` under VERBOSE): every world namespace in it.
//!
//! Main, moments of the past and sessions of a world without namespaces get no receiver at all.
use pgrx::pg_sys;
use std::ffi::CStr;
use crate::backend_local::BackendLocal;

#[repr(C)]
struct Shown {
    /// (first: Postgres calls the receiver through this)
    base: pg_sys::DestReceiver,
    inner: *mut pg_sys::DestReceiver,
    /// EXPLAIN's output (every text value rewritten), or a query's rows (`name` values only)
    explain: bool,
    /// the session's world namespaces' world numbers (its chain, as deep as it is kept here)
    chain: [i32; 16],
    chain_len: usize,
    /// per column: 1 a `name`, 2 text naming objects (EXPLAIN's, or what a definition-printing function
    /// returned), 0 left alone (palloc'd: an error unwinding past the statement leaves nothing of Rust's
    /// behind)
    kinds: *mut u8,
    natts: usize,
    out: *mut pg_sys::TupleTableSlot,
    memory: pg_sys::MemoryContext,
    /// the statement's plan and range table (its output columns that print definitions), or null
    plan: *mut pg_sys::Plan,
    rtable: *mut pg_sys::List,
}

/// The receiver to give a statement of this session instead of `dest`, when it has world namespaces.
///
/// # Safety
/// `dest` is a live receiver; the returned one lives in the current memory context.
pub unsafe fn wrap(dest: *mut pg_sys::DestReceiver, explain: bool, through_store: bool, plan: *mut pg_sys::Plan, rtable: *mut pg_sys::List) -> Option<*mut pg_sys::DestReceiver> {
    unsafe {
        if dest.is_null() {
            return None;
        }
        // (what goes to the client: straight, or through the portal's store, where the rows of EXPLAIN and
        // FETCH go: `through_store`)
        let to_client = matches!((*dest).mydest, pg_sys::CommandDest::DestRemote | pg_sys::CommandDest::DestRemoteExecute | pg_sys::CommandDest::DestRemoteSimple)
            || (through_store && (*dest).mydest == pg_sys::CommandDest::DestTuplestore);
        if !to_client {
            return None;
        }
        if crate::storage::internal() {
            return None;
        }
        let chain = crate::storage::search_path::chain();
        if chain.is_empty() {
            return None;
        }
        let shown = pg_sys::palloc0(std::mem::size_of::<Shown>()) as *mut Shown;
        std::ptr::write(
            shown,
            Shown {
                base: pg_sys::DestReceiver {
                    receiveSlot: Some(receive),
                    rStartup: Some(startup),
                    rShutdown: Some(shutdown),
                    rDestroy: Some(destroy),
                    mydest: (*dest).mydest,
                },
                inner: dest,
                explain,
                chain: {
                    let mut c = [0i32; 16];
                    for (i, w) in chain.iter().take(16).enumerate() {
                        c[i] = *w;
                    }
                    c
                },
                chain_len: chain.len().min(16),
                kinds: std::ptr::null_mut(),
                natts: 0,
                out: std::ptr::null_mut(),
                memory: std::ptr::null_mut(),
                plan,
                rtable,
            },
        );
        Some(shown as *mut pg_sys::DestReceiver)
    }
}

/// information_schema.sql_identifier (a domain over `name`: information_schema's schema columns)
static SQL_IDENTIFIER: BackendLocal<std::cell::Cell<Option<pg_sys::Oid>>> = BackendLocal::new(std::cell::Cell::new(None));

/// Is a column of this type a name as the catalog holds it (`name`, information_schema's sql_identifier)?
unsafe fn is_name_type(typ: pg_sys::Oid) -> bool {
    unsafe {
        if typ == pg_sys::NAMEOID {
            return true;
        }
        if typ.to_u32() >= pg_sys::FirstNormalObjectId {
            return false;
        }
        let id = SQL_IDENTIFIER.with(|c| c.get()).unwrap_or_else(|| {
            let nsp = pg_sys::LookupNamespaceNoError(c"information_schema".as_ptr());
            let oid = if nsp == pg_sys::Oid::INVALID {
                pg_sys::Oid::INVALID
            } else {
                pg_sys::GetSysCacheOid(
                    pg_sys::SysCacheIdentifier::TYPENAMENSP as i32,
                    1, // Anum_pg_type_oid
                    pg_sys::Datum::from(c"sql_identifier".as_ptr()),
                    pg_sys::Datum::from(nsp),
                    pg_sys::Datum::from(0),
                    pg_sys::Datum::from(0),
                )
            };
            SQL_IDENTIFIER.with(|c| c.set(Some(oid)));
            oid
        });
        id != pg_sys::Oid::INVALID && typ == id
    }
}

/// Postgres's functions that print an object's definition or name, qualified where it isn't on the path
/// (a world's object then shows its namespace).
const PRINTERS: [u32; 22] = [
    1387, 2508, // pg_get_constraintdef
    1573, 2504, // pg_get_ruledef
    1640, 1641, 2505, 2506, 3159, // pg_get_viewdef
    1643, 2507, // pg_get_indexdef
    1662, 2730, // pg_get_triggerdef
    1665, // pg_get_serial_sequence
    1716, 2509, // pg_get_expr
    2098, // pg_get_functiondef
    3415, 6173, 6174, // pg_get_statisticsobjdef (and its columns, expressions)
    3537, // pg_describe_object
    2162, // pg_get_function_arguments
];

/// Per output column of `plan`: does its text come from one of the PRINTERS, or from a namespace's name
/// (`quote_ident(nspname) || '.' || ...`)? Followed down the plan: an upper node's column (a Sort's,
/// a join's) is its input's.
unsafe fn printed_columns(plan: *mut pg_sys::Plan, rtable: *mut pg_sys::List) -> Vec<bool> {
    unsafe {
        if plan.is_null() {
            return Vec::new();
        }
        let tlist = (*plan).targetlist;
        let n = if tlist.is_null() { 0 } else { (*tlist).length };
        let mut out = Vec::new();
        for i in 0..n {
            let te = crate::fast_ffi::list_nth(tlist, i) as *mut pg_sys::TargetEntry;
            if (*te).resjunk {
                continue;
            }
            let mut ctx = Walk { plan, rtable, depth: 0 };
            out.push(prints((*te).expr as *mut pg_sys::Node, &mut ctx));
        }
        out
    }
}

struct Walk {
    plan: *mut pg_sys::Plan,
    rtable: *mut pg_sys::List,
    depth: u32,
}

unsafe fn prints(node: *mut pg_sys::Node, ctx: &mut Walk) -> bool {
    unsafe { printer_walker(node, ctx as *mut Walk as *mut std::ffi::c_void) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn printer_walker(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        let ctx = &mut *(context as *mut Walk);
        match (*node).type_ {
            pg_sys::NodeTag::T_FuncExpr if PRINTERS.contains(&(*(node as *mut pg_sys::FuncExpr)).funcid.to_u32()) => return true,
            pg_sys::NodeTag::T_Var => {
                let v = node as *mut pg_sys::Var;
                let below = match (*v).varno {
                    pg_sys::OUTER_VAR => (*ctx.plan).lefttree,
                    pg_sys::INNER_VAR => (*ctx.plan).righttree,
                    pg_sys::INDEX_VAR => return false,
                    rti => {
                        // a scan's own column: pg_namespace.nspname
                        if rti < 1 || ctx.rtable.is_null() || rti > (*ctx.rtable).length {
                            return false;
                        }
                        let rte = crate::fast_ffi::list_nth(ctx.rtable, rti - 1) as *mut pg_sys::RangeTblEntry;
                        return (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION && (*rte).relid == pg_sys::NamespaceRelationId && (*v).varattno == 2;
                    }
                };
                if below.is_null() || (*below).targetlist.is_null() || (*v).varattno < 1 || (*v).varattno as i32 > (*(*below).targetlist).length || ctx.depth > 32 {
                    return false;
                }
                let te = crate::fast_ffi::list_nth((*below).targetlist, (*v).varattno as i32 - 1) as *mut pg_sys::TargetEntry;
                let mut inner = Walk { plan: below, rtable: ctx.rtable, depth: ctx.depth + 1 };
                return prints((*te).expr as *mut pg_sys::Node, &mut inner);
            }
            _ => {}
        }
        pg_sys::expression_tree_walker(node, Some(printer_walker), context)
    }
}

/// Does a query whose rows look like `desc`, by `plan`, need the receiver (a `name` column, or one that
/// prints definitions)?
///
/// # Safety
/// `desc` is a live tuple descriptor (or null), `plan` the statement's plan (or null).
pub unsafe fn needs_receiver(desc: pg_sys::TupleDesc, plan: *mut pg_sys::Plan, rtable: *mut pg_sys::List) -> bool {
    unsafe {
        if desc.is_null() {
            return false;
        }
        // (the plan is walked only for a statement that returns text)
        let text = (0..(*desc).natts as usize).any(|i| {
            let a = (*desc).attrs.as_ptr().add(i);
            !(*a).attisdropped && (*a).atttypid == pg_sys::TEXTOID
        });
        has_names(desc) || (text && printed_columns(plan, rtable).iter().any(|p| *p))
    }
}

/// Does a query whose rows look like `desc` need the receiver (a `name` column)?
///
/// # Safety
/// `desc` is a live tuple descriptor (or null).
pub unsafe fn has_names(desc: pg_sys::TupleDesc) -> bool {
    unsafe {
        if desc.is_null() {
            return false;
        }
        (0..(*desc).natts as usize).any(|i| {
            let a = (*desc).attrs.as_ptr().add(i);
            !(*a).attisdropped && is_name_type((*a).atttypid)
        })
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup(me: *mut pg_sys::DestReceiver, operation: i32, desc: pg_sys::TupleDesc) {
    unsafe {
        let s = me as *mut Shown;
        let printed = printed_columns((*s).plan, (*s).rtable);
        let kinds: Vec<u8> = (0..(*desc).natts as usize)
            .map(|i| {
                let a = (*desc).attrs.as_ptr().add(i);
                if (*a).attisdropped {
                    0
                } else if is_name_type((*a).atttypid) {
                    1
                } else if ((*s).explain || printed.get(i).copied().unwrap_or(false)) && matches!((*a).atttypid, pg_sys::TEXTOID | pg_sys::JSONOID | pg_sys::XMLOID) {
                    2
                } else {
                    0
                }
            })
            .collect();
        (*s).natts = kinds.len();
        (*s).kinds = pg_sys::palloc0(kinds.len().max(1)) as *mut u8;
        std::ptr::copy_nonoverlapping(kinds.as_ptr(), (*s).kinds, kinds.len());
        (*s).out = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
        (*s).memory = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"pg_worlds shown names".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        if let Some(f) = (*(*s).inner).rStartup {
            f((*s).inner, operation, desc);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn receive(slot: *mut pg_sys::TupleTableSlot, me: *mut pg_sys::DestReceiver) -> bool {
    unsafe {
        let s = me as *mut Shown;
        let inner = (*s).inner;
        let forward = |slot| match (*inner).receiveSlot {
            Some(f) => f(slot, inner),
            None => true,
        };
        let kinds = std::slice::from_raw_parts((*s).kinds, (*s).natts);
        if !kinds.iter().any(|k| *k != 0) {
            return forward(slot);
        }
        let n = kinds.len() as i16;
        if (*slot).tts_nvalid < n {
            pg_sys::slot_getsomeattrs_int(slot, n as i32);
        }
        pg_sys::MemoryContextReset((*s).memory);
        let old = pg_sys::MemoryContextSwitchTo((*s).memory);
        let mut changed: Vec<(usize, pg_sys::Datum)> = Vec::new();
        for (i, kind) in kinds.iter().enumerate() {
            if *kind == 0 || *(*slot).tts_isnull.add(i) {
                continue;
            }
            let value = *(*slot).tts_values.add(i);
            match kind {
                1 => {
                    let name = CStr::from_ptr(value.cast_mut_ptr::<std::ffi::c_char>()).to_string_lossy();
                    if !name.starts_with("pg_w") {
                        continue;
                    }
                    let own = crate::storage::search_path::world_of_namespace(&name).is_some_and(|w| (&(*s).chain)[..(*s).chain_len].contains(&w));
                    if let (true, Some(plain)) = (own, crate::route::world_ddl::without_world_namespaces_pub(&name)) {
                        let n = pg_sys::palloc0(pg_sys::NAMEDATALEN as usize) as *mut std::ffi::c_char;
                        let bytes = plain.as_bytes();
                        let len = bytes.len().min(pg_sys::NAMEDATALEN as usize - 1);
                        std::ptr::copy_nonoverlapping(bytes.as_ptr() as *const std::ffi::c_char, n, len);
                        changed.push((i, pg_sys::Datum::from(n)));
                    }
                }
                _ => {
                    let text = pg_sys::text_to_cstring(pg_sys::pg_detoast_datum_packed(value.cast_mut_ptr()) as *const pg_sys::text);
                    let t = CStr::from_ptr(text).to_string_lossy();
                    if let Some(plain) = crate::route::world_ddl::without_world_namespaces_pub(&t) {
                        let c = std::ffi::CString::new(plain).unwrap_or_default();
                        changed.push((i, pg_sys::Datum::from(pg_sys::cstring_to_text(c.as_ptr()))));
                    }
                }
            }
        }
        pg_sys::MemoryContextSwitchTo(old);
        if changed.is_empty() {
            return forward(slot);
        }
        let out = (*s).out;
        pg_sys::ExecClearTuple(out);
        for i in 0..kinds.len() {
            *(*out).tts_values.add(i) = *(*slot).tts_values.add(i);
            *(*out).tts_isnull.add(i) = *(*slot).tts_isnull.add(i);
        }
        for (i, d) in changed {
            *(*out).tts_values.add(i) = d;
        }
        pg_sys::ExecStoreVirtualTuple(out);
        forward(out)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn shutdown(me: *mut pg_sys::DestReceiver) {
    unsafe {
        let s = me as *mut Shown;
        if let Some(f) = (*(*s).inner).rShutdown {
            f((*s).inner);
        }
        if !(*s).out.is_null() {
            pg_sys::ExecDropSingleTupleTableSlot((*s).out);
            (*s).out = std::ptr::null_mut();
        }
        if !(*s).memory.is_null() {
            pg_sys::MemoryContextDelete((*s).memory);
            (*s).memory = std::ptr::null_mut();
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn destroy(me: *mut pg_sys::DestReceiver) {
    unsafe {
        let s = me as *mut Shown;
        if let Some(f) = (*(*s).inner).rDestroy {
            f((*s).inner);
        }
    }
}
