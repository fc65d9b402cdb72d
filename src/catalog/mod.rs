//! The SQL objects CREATE EXTENSION installs: catalog tables (bootstrap), tracking and the world lifecycle
//! (plpgsql over the catalog, calling the Rust functions in `api` and `storage`), and the install step.
use pgrx::prelude::*;

pub mod dump;
pub mod definer;
pub mod members;

extension_sql_file!("catalog.sql", name = "catalog", bootstrap);
extension_sql_file!("tracking.sql", name = "tracking", requires = ["catalog"]);
extension_sql_file!("lifecycle.sql", name = "lifecycle", requires = ["catalog"]);
extension_sql_file!("time.sql", name = "time", requires = ["lifecycle"]);
extension_sql_file!("dump.sql", name = "dump", requires = ["time", dump::_portable_rows]);
extension_sql_file!("world_schema.sql", name = "world_schema", requires = ["catalog"]);
extension_sql_file!(
    "install.sql",
    name = "install",
    finalize
);

/// Refuses CREATE EXTENSION in a server that did not load pg_worlds through shared_preload_libraries:
/// without the hooks, sessions in a world would silently read and write main.
#[pg_extern]
fn _require_preloaded() {
    if !crate::preloaded() {
        crate::api::raise_with(
            "55000",
            "pg_worlds must be loaded via shared_preload_libraries",
            None,
            Some("Add pg_worlds to shared_preload_libraries in postgresql.conf (shared_preload_libraries = 'pg_worlds') and restart the server, then run CREATE EXTENSION pg_worlds again.".into()),
        );
    }
}
