//! Routing: hooks that send the session's queries into its world. In main they do nothing but chain.
pub mod scans;
pub mod connect_name;
mod hooks;
mod merge_command;
mod row_locks;
pub(crate) mod rewrite;
mod twin_reads;
mod present;
mod view_inline;
pub mod upsert;
mod view_writes;
pub mod world_ddl;
pub use hooks::{install_hooks, on_xact_end, routing_aborted};

pub use hooks::sync_past_schema;
