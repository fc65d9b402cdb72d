//! Governance: what a world must submit to before anything reaches main. One module per gate:
//! - `agents`: agents (restricted LOGIN roles) and their rights and quotas; worlds that belong to
//!   someone. The catalog and the management statements are SQL (agents.sql); the gates a statement
//!   meets inside the executor (a write of main, a write of a world) are here.
//! - `policies`: merge policies' rules judged on the merge's plan (worlds_core::rules); `reviews`: the
//!   queue of worlds waiting for a person, and its notifications; `outbox`: a world's NOTIFYs, kept
//!   until it lands; `checks`: merge checks, queries that must find nothing in the merged result.
use crate::merge::{Planned, WorldRow};
use pgrx::prelude::*;

pub mod agents;
pub mod checks;
pub mod policies;
pub mod outbox;
pub mod reviews;

extension_sql_file!("agents.sql", name = "agents", requires = ["lifecycle", "time"]);
extension_sql_file!("policies.sql", name = "policies", requires = ["agents"]);
extension_sql_file!("outbox.sql", name = "outbox", requires = ["policies"]);
extension_sql_file!("checks.sql", name = "checks", requires = ["policies"]);

/// Every gate's refusals of this plan (a merge of `world`, into main or not), as reasons a person reads:
/// the merge raises them, its DRY RUN shows them in its blocked row, SHOW REVIEWS lists them. Today the
/// merge policy's rules; merge checks, declared scope and stale reads join here.
pub fn refusals(plan: &[Planned], world: &WorldRow, into_main: bool) -> Vec<String> {
    policies::refusals(plan, world, into_main)
}

/// The merge's gate step, before anything is applied: a person confirms a policy's deletes (55000); an
/// agent's merge that any gate refuses waits for a person (42501, queued).
pub fn gate(plan: &[Planned], world: &WorldRow, into_main: bool, confirm_deletes: Option<i64>) {
    policies::confirm_deletes(plan, world, confirm_deletes);
    let why = refusals(plan, world, into_main);
    if !why.is_empty() {
        policies::refuse(world, &why);
    }
}
