//! INSERT / UPDATE / DELETE through a user's view inside a world.
//!
//! Postgres writes through a simple view by rewriting the write onto the view's base table, after our
//! router has run — it would write main. So the router gives the write a **world twin** of the view:
//! `worlds_data.<view name>`, the view's own query (deparsed by Postgres) with every tracked table
//! replaced by its overlay. The twin is as updatable as the view (same query, same options); Postgres's
//! rewriter then turns the write into one on the overlay, whose trigger writes the world. The twin is made
//! on first use and remade when the view's definition changes (a fingerprint in its comment).
use crate::spi_calls::Fresh;
use crate::api::raise;
use crate::sql_text::quote_ident;
use crate::storage;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;

/// The world twin of `view` (made or refreshed now if needed), and the tracked tables the view reads.
/// Refused (0A000) when the view reads another view: only one level of views is rewritten.
pub unsafe fn world_twin(view: pg_sys::Oid, tracked: &HashMap<pg_sys::Oid, i32>) -> (pg_sys::Oid, Vec<pg_sys::Oid>) {
    unsafe {
        let rel = pg_sys::relation_open(view, pg_sys::AccessShareLock as i32);
        let body = pg_sys::copyObjectImpl(pg_sys::get_view_query(rel) as *const std::ffi::c_void) as *mut pg_sys::Query;
        let view_name = std::ffi::CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
        let rtable = (*body).rtable;
        let mut bases = Vec::new();
        for i in 0..(*rtable).length {
            let r = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            if (*r).rtekind != pg_sys::RTEKind::RTE_RELATION || (*r).relid == view {
                continue; // the rule's OLD and NEW entries name the view itself
            }
            if let Some(&tabno) = tracked.get(&(*r).relid) {
                bases.push((*r).relid);
                (*r).relid = storage::relation_layout(tabno).overlay;
                (*r).relkind = pg_sys::RELKIND_VIEW as std::ffi::c_char;
            } else if (*r).relkind == pg_sys::RELKIND_VIEW as std::ffi::c_char {
                raise(
                    "0A000",
                    format!("writing through view {view_name} inside a world is not supported: it reads another view; write the table, or a view over the table itself"),
                );
            }
        }
        let query = std::ffi::CStr::from_ptr(pg_sys::pg_get_querydef(body, false)).to_string_lossy().into_owned();
        let oid = storage::as_internal(|| {
            Spi::connect_mut(|c| {
                // named as the view (Postgres's messages, e.g. WITH CHECK OPTION's, name it), unless another
                // view of that name has its twin already; found again by the view's OID in its comment
                let tag = format!("{}|", view.to_u32());
                let existing: Option<String> = c
                    .fresh(
                        "SELECT relname::text FROM pg_class WHERE relnamespace = 'worlds_data'::regnamespace AND relkind = 'v'
                           AND starts_with(coalesce(obj_description(oid, 'pg_class'), ''), $1)",
                        None,
                        &[tag.as_str().into()],
                    )
                    .ok()
                    .and_then(|mut r| r.next().and_then(|r| r.get::<String>(1).ok().flatten()));
                let name = existing.unwrap_or_else(|| {
                    let taken = c
                        .fresh("SELECT to_regclass($1) IS NOT NULL", None, &[format!("worlds_data.{}", quote_ident(&view_name)).as_str().into()])
                        .ok()
                        .and_then(|mut r| r.next().and_then(|r| r.get::<bool>(1).ok().flatten()))
                        .unwrap_or(true);
                    if taken { format!("{view_name}_{}", view.to_u32()) } else { view_name.clone() }
                });
                let twin = format!("worlds_data.{}", quote_ident(&name));
                let options: String = c
                    .fresh("SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class WHERE oid = $1", None, &[view.into()])
                    .ok()
                    .and_then(|mut r| r.next().and_then(|r| r.get::<String>(1).ok().flatten()))
                    .unwrap_or_default();
                let defaults: Vec<(String, String)> = c
                    .fresh(
                        "SELECT a.attname::text, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
                         JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = $1",
                        None,
                        &[view.into()],
                    )
                    .map(|rows| {
                        rows.filter_map(|r| Some((r.get::<String>(1).ok().flatten()?, r.get::<String>(2).ok().flatten()?))).collect()
                    })
                    .unwrap_or_default();
                let fingerprint = format!("{tag}{options}|{query}|{defaults:?}");
                let current: Option<String> = c
                    .fresh("SELECT obj_description(to_regclass($1), 'pg_class')", None, &[twin.as_str().into()])
                    .ok()
                    .and_then(|mut r| r.next().and_then(|r| r.get::<String>(1).ok().flatten()));
                if current.as_deref() != Some(fingerprint.as_str()) {
                    let with = if options.is_empty() { String::new() } else { format!(" WITH ({options})") };
                    if current.is_some() {
                        c.update("SELECT worlds._drop_relation(to_regclass($1))", None, &[twin.as_str().into()])
                            .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
                    }
                    let mut ddl = vec![format!("CREATE VIEW {twin}{with} AS {query}")];
                    for (col, expr) in &defaults {
                        ddl.push(format!("ALTER VIEW {twin} ALTER COLUMN {} SET DEFAULT {expr}", quote_ident(col)));
                    }
                    for stmt in ddl {
                        c.update(&stmt, None, &[]).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: making the world twin of view {view_name}: {e}")));
                    }
                    c.update(&format!("COMMENT ON VIEW {twin} IS {}", crate::sql_text::quote_literal(&fingerprint)), None, &[])
                        .unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
                    c.update("SELECT worlds._own_storage()", None, &[]).unwrap_or_else(|e| raise("XX000", format!("pg_worlds: {e}")));
                }
                c.fresh("SELECT to_regclass($1)::oid", None, &[twin.as_str().into()])
                    .ok()
                    .and_then(|mut r| r.next().and_then(|r| r.get::<pg_sys::Oid>(1).ok().flatten()))
                    .unwrap_or_else(|| raise("XX000", "pg_worlds: the world twin of a view is missing"))
            })
        });
        (oid, bases)
    }
}
