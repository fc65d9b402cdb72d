//! Governance: what a world must submit to before anything reaches main. One module per gate:
//! - `agents`: agents (restricted LOGIN roles) and their rights and quotas; worlds that belong to
//!   someone. The catalog and the management statements are SQL (agents.sql); the gates a statement
//!   meets inside the executor (a write of main, a write of a world) are here.
//! - `policies`: merge policies' rules judged on the merge's plan (worlds_core::rules); `reviews`: the
//!   queue of worlds waiting for a person, and its notifications; `outbox`: a world's NOTIFYs, kept
//!   until it lands; `checks`: merge checks, queries that must find nothing in the merged result.
use crate::merge::Planned;
use crate::world::WorldRow;
use pgrx::prelude::*;

pub mod agents;
pub mod checks;
pub mod policies;
pub mod reads;
pub mod outbox;
pub mod reviews;
pub mod scope;

extension_sql_file!("agents.sql", name = "agents", requires = ["lifecycle", "time"]);
extension_sql_file!("policies.sql", name = "policies", requires = ["agents"]);
extension_sql_file!("outbox.sql", name = "outbox", requires = ["policies"]);
extension_sql_file!("checks.sql", name = "checks", requires = ["policies"]);

/// What holds a merge besides a policy's rules: a stale read (40001), a breach of the declared scope
/// (42501). A person meets `message`; an agent keeping to a merge policy meets it as a broken rule
/// (`rule`), and its world is queued.
pub struct Hold {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
    pub rule: String,
}

/// The holds on this plan, stale reads first.
pub fn holds(plan: &[Planned], world: &WorldRow) -> Vec<Hold> {
    reads::held(world, "merging").into_iter().chain(scope::held(plan, world)).collect()
}

/// Every gate's refusals of this plan (a merge of `world`, into main or not) under the merge policy that
/// judges it, as reasons a person reads: the merge raises them, its DRY RUN shows them in its blocked
/// row, SHOW REVIEWS lists them. The policy's rules, then the holds (declared scope, stale reads) as
/// broken rules. Merge checks run after the apply (`checks`).
pub fn refusals(plan: &[Planned], world: &WorldRow, into_main: bool) -> Vec<String> {
    if policies::judged_by(world).is_none() {
        return Vec::new();
    }
    let mut why = policies::refusals(plan, world, into_main);
    why.extend(holds(plan, world).into_iter().map(|h| h.rule));
    why
}

/// The holds a person meets (no policy judges the merge), each as the refusal the merge raises.
pub fn person_holds(plan: &[Planned], world: &WorldRow) -> Vec<Hold> {
    if policies::judged_by(world).is_some() {
        return Vec::new();
    }
    holds(plan, world)
}

/// The merge's gate step, before anything is applied: a person confirms a policy's deletes (55000); an
/// agent's merge that any gate refuses waits for a person (42501, queued); a person's merge that a hold
/// refuses is refused (its code: 40001 for a stale read, 42501 for the scope).
pub fn gate(plan: &[Planned], world: &WorldRow, into_main: bool, confirm_deletes: Option<i64>) {
    policies::confirm_deletes(plan, world, confirm_deletes);
    let why = refusals(plan, world, into_main);
    if !why.is_empty() {
        policies::refuse(world, &why);
    }
    if let Some(h) = person_holds(plan, world).into_iter().next() {
        crate::api::raise_with(h.code, h.message, None, h.hint);
    }
}
