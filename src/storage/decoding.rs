//! pg_worlds' own tables and logical replication (see docs/architecture.md, "Logical replication").
//!
//! PostgreSQL 15 puts every permanent table in a `FOR ALL TABLES` publication, pg_worlds' too, and can't
//! leave one out. Two marks on each of its tables (those of schemas `worlds` and `worlds_data`, and their
//! TOAST tables) keep a publication from changing what pg_worlds does, and its tables out of every
//! decoded stream:
//! - **Never decoded.** `pg_class.relrewrite` names the table itself. Logical decoding passes over every
//!   change of a relation whose `relrewrite` is set (reorderbuffer.c, ReorderBufferProcessTXN: the
//!   transient heap of a table rewrite, which no output plugin is shown unless it asks for rewrites), before
//!   any output plugin sees it: pgoutput, test_decoding, wal2json alike. A world's writes, its events and
//!   the worlds' catalog never reach a subscriber or a CDC consumer; a merge reaches them as the changes to
//!   the user's tables it makes. Nothing else in PostgreSQL 15 reads `relrewrite` (it is reset only on the
//!   transient heap a rewrite makes); a self-reference keeps the catalog's foreign keys (oidjoins) true.
//! - **A replica identity.** A table without a primary key gets `REPLICA IDENTITY FULL`, so an UPDATE or
//!   DELETE of it (a merge clearing a world's delta) never fails with "does not have a replica identity
//!   and publishes deletes". FULL costs WAL only when `wal_level = logical`.
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The schemas whose tables are pg_worlds' own.
const SCHEMAS: [&std::ffi::CStr; 2] = [c"worlds", c"worlds_data"];

/// Is `relid` a table of pg_worlds' own schemas?
unsafe fn is_internal(relid: pg_sys::Oid) -> bool {
    unsafe {
        let ns = pg_sys::get_rel_namespace(relid);
        ns != pg_sys::Oid::INVALID && SCHEMAS.iter().any(|s| pg_sys::get_namespace_oid(s.as_ptr(), true) == ns)
    }
}

/// Marks one relation (see the module's doc); nothing when it is marked already or isn't a permanent table.
unsafe fn mark(relid: pg_sys::Oid, has_key: bool) {
    unsafe {
        let pg_class = pg_sys::table_open(pg_sys::RelationRelationId, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        let tuple = pg_sys::SearchSysCacheCopy(
            pg_sys::SysCacheIdentifier::RELOID as i32,
            pg_sys::Datum::from(relid),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        );
        if !tuple.is_null() {
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tuple);
            let permanent = (*form).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char;
            let table = (*form).relkind == pg_sys::RELKIND_RELATION as std::ffi::c_char || (*form).relkind == pg_sys::RELKIND_TOASTVALUE as std::ffi::c_char;
            let identity_needed = (*form).relkind == pg_sys::RELKIND_RELATION as std::ffi::c_char
                && !has_key
                && (*form).relreplident == pg_sys::REPLICA_IDENTITY_DEFAULT as std::ffi::c_char;
            if permanent && table && ((*form).relrewrite != relid || identity_needed) {
                (*form).relrewrite = relid;
                if identity_needed {
                    (*form).relreplident = pg_sys::REPLICA_IDENTITY_FULL as std::ffi::c_char;
                }
                pg_sys::CatalogTupleUpdate(pg_class, &mut (*tuple).t_self, tuple);
            }
            pg_sys::heap_freetuple(tuple);
        }
        pg_sys::table_close(pg_class, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    }
}

/// Marks a table of pg_worlds' own schemas and its TOAST table (see the module's doc); nothing for another
/// relation. Called after each CREATE TABLE and ALTER TABLE (route/hooks/utility.rs): an added column may
/// give a table its TOAST table.
///
/// # Safety
/// In a transaction.
pub unsafe fn keep_out_of_decoding(relid: pg_sys::Oid) {
    unsafe {
        if relid == pg_sys::Oid::INVALID || !is_internal(relid) || pg_sys::get_rel_relkind(relid) != pg_sys::RELKIND_RELATION as std::ffi::c_char {
            return;
        }
        let rel = pg_sys::RelationIdGetRelation(relid);
        if rel.is_null() {
            return;
        }
        let has_key = pg_sys::RelationGetReplicaIndex(rel) != pg_sys::Oid::INVALID;
        let toast = (*(*rel).rd_rel).reltoastrelid;
        pg_sys::RelationClose(rel);
        mark(relid, has_key);
        if toast != pg_sys::Oid::INVALID {
            mark(toast, true);
        }
        pg_sys::CommandCounterIncrement();
    }
}

/// Marks every table of pg_worlds' own schemas (see the module's doc): at CREATE EXTENSION's end, and for a
/// database whose tables were made by an earlier build. Returns how many tables it looked at.
#[pg_extern]
fn _keep_internal_out_of_decoding() -> i64 {
    let tables: Vec<pg_sys::Oid> = Spi::connect(|c| {
        c.select(
            "SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname IN ('worlds', 'worlds_data') AND c.relkind = 'r' AND c.relpersistence = 'p' ORDER BY c.oid",
            None,
            &[],
        )
        .map(|rows| rows.filter_map(|r| r.get::<pg_sys::Oid>(1).ok().flatten()).collect())
        .unwrap_or_default()
    });
    for &t in &tables {
        unsafe { keep_out_of_decoding(t) };
    }
    tables.len() as i64
}

/// A subscriber's view of a publication leaves pg_worlds' own tables out. A subscriber learns which tables
/// a publication has from `pg_catalog.pg_publication_tables`, queried over its replication connection
/// (CREATE SUBSCRIPTION, ALTER SUBSCRIPTION ... REFRESH PUBLICATION); a `FOR ALL TABLES` publication lists
/// pg_worlds' tables there, and a subscriber without them fails (`relation "worlds.world" does not
/// exist`), one with them would copy another database's worlds into its own. In a walsender only, the
/// view's entry of such a query reads `worlds._publication_tables` instead: the same columns, without the
/// tables of schemas `worlds` and `worlds_data` (whose changes are never decoded anyway). Every other
/// session reads the catalog's view as stock.
///
/// # Safety
/// `query` is an analysed query.
pub unsafe fn publication_tables_for_subscriber(query: *mut pg_sys::Query) {
    unsafe {
        if !pg_sys::am_walsender || !crate::fast_ffi::IsTransactionState() {
            return;
        }
        let catalog_view = pg_sys::get_relname_relid(c"pg_publication_tables".as_ptr(), pg_sys::PG_CATALOG_NAMESPACE.into());
        let ns = pg_sys::get_namespace_oid(c"worlds".as_ptr(), true);
        if catalog_view == pg_sys::Oid::INVALID || ns == pg_sys::Oid::INVALID {
            return;
        }
        let ours = pg_sys::get_relname_relid(c"_publication_tables".as_ptr(), ns);
        if ours != pg_sys::Oid::INVALID {
            swap_view(query, catalog_view, ours);
        }
    }
}

unsafe fn swap_view(query: *mut pg_sys::Query, from: pg_sys::Oid, to: pg_sys::Oid) {
    unsafe {
        let rtable = (*query).rtable;
        if rtable.is_null() {
            return;
        }
        for i in 0..(*rtable).length {
            let rte = crate::fast_ffi::list_nth(rtable, i) as *mut pg_sys::RangeTblEntry;
            match (*rte).rtekind {
                pg_sys::RTEKind::RTE_RELATION if (*rte).relid == from => (*rte).relid = to,
                pg_sys::RTEKind::RTE_SUBQUERY if !(*rte).subquery.is_null() => swap_view((*rte).subquery, from, to),
                _ => {}
            }
        }
        let ctes = (*query).cteList;
        if !ctes.is_null() {
            for i in 0..(*ctes).length {
                let cte = crate::fast_ffi::list_nth(ctes, i) as *mut pg_sys::CommonTableExpr;
                let q = (*cte).ctequery as *mut pg_sys::Node;
                if !q.is_null() && (*q).type_ == pg_sys::NodeTag::T_Query {
                    swap_view(q as *mut pg_sys::Query, from, to);
                }
            }
        }
    }
}
