//! Governance: what a world must submit to before anything reaches main. One module per gate:
//! - `agents`: agents (restricted LOGIN roles) and their rights and quotas; worlds that belong to
//!   someone. The catalog and the management statements are SQL (agents.sql); the gates a statement
//!   meets inside the executor (a write of main, a write of a world) are here.
use pgrx::prelude::*;

pub mod agents;

extension_sql_file!("agents.sql", name = "agents", requires = ["lifecycle", "time"]);
