//! Governance: what a world must submit to before anything reaches main. One module per gate:
//! - `agents`: agents (restricted LOGIN roles) and their rights and quotas; worlds that belong to
//!   someone. The catalog and the management statements are SQL (agents.sql); the gates a statement
//!   meets inside the executor (a write of main, a write of a world) are here.
//! - `judge`: the one judge of a merge's plan (src/plan.rs), every gate below as a function of the plan
//!   and the phase (before the apply, after it).
//! - `policies`: merge policies' rules judged on the merge's plan (worlds_core::rules); `reviews`: the
//!   queue of worlds waiting for a person, and its notifications; `outbox`: a world's NOTIFYs, kept
//!   until it lands; `checks`: merge checks, queries that must find nothing in the merged result.
//! - `readers`: what reads each column (DIFF ... READERS): `clients`, the columns clients were seen reading.
//! - `read_only`: `worlds.read_only`, a transaction that can only read (MCP safe mode).
use pgrx::prelude::*;

pub mod agents;
pub mod checks;
pub mod judge;
pub mod policies;
pub mod reads;
pub mod readers;
pub mod read_only;
pub mod outbox;
pub mod reviews;
pub mod scope;

extension_sql_file!("agents.sql", name = "agents", requires = ["lifecycle", "time"]);
extension_sql_file!("policies.sql", name = "policies", requires = ["agents"]);
extension_sql_file!("outbox.sql", name = "outbox", requires = ["policies"]);
extension_sql_file!("checks.sql", name = "checks", requires = ["policies"]);
