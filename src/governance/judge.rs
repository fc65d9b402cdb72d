//! The one judge of a merge's plan (src/plan.rs): every gate a world submits to before anything reaches
//! its parent, as a function of the plan and the phase. MERGE enforces its verdict, its DRY RUN shows it
//! (blocked rows), SHOW REVIEWS and check_merge_policy list its reasons: the same verdict, by
//! construction.
//!
//! - Before the apply: a person confirms the deletes of an agent's world under a policy with
//!   confirm_deletes_over (55000: the merge only; a dry run shows the count); the merge policy that judges
//!   an agent's merge (its rules: policies.rs), with the holds as broken rules; for a person, the holds:
//!   a stale read (40001), a breach of the declared scope (42501).
//! - After the apply, before the merge commits: the reads judged again on the latest snapshot (a read row
//!   its parent changed while the merge ran: 40001, whoever merges), and the merge checks on the result
//!   (checks.rs: 23514, 57014; for an agent under a policy, broken rules).
//!
//! An agent's merge that the policy refuses waits for a person: the verdict says to queue it (42501).
use crate::api::raise_with;
use crate::plan::{MergePlan, Phase, Planned, Refusal, Stale};
use crate::world::World;

/// The judge's verdict on a plan in one phase.
#[derive(Default)]
pub struct Verdict {
    /// A policy judges the merge and it breaks rules: the world waits for a person (42501), with these
    /// reasons (SHOW REVIEWS lists them).
    pub queue: Option<Vec<String>>,
    /// Refusals a person meets, in the order they are raised (the merge raises the first).
    pub refusals: Vec<Refusal>,
}

impl Verdict {
    pub fn passes(&self) -> bool {
        self.queue.is_none() && self.refusals.is_empty()
    }
}

/// The judge: the plan's verdict in `phase`. `confirm_deletes` is what a person merging gave (CONFIRM
/// DELETES n; None for a dry run, which doesn't confirm); `target` the world merged INTO, if not main.
pub fn judge(plan: &MergePlan, phase: Phase, confirm_deletes: Option<Option<i64>>, target: Option<&World>) -> Verdict {
    let world = &plan.world;
    let policy = super::policies::judged_by(world).is_some();
    let mut v = Verdict::default();
    match phase {
        Phase::BeforeApply => {
            if let Some(given) = confirm_deletes {
                v.refusals.extend(super::policies::unconfirmed_deletes(&plan.rows, world, given));
            }
            let holds: Vec<Refusal> = plan.stale.iter().map(|s| stale_refusal(world, s, "merging")).chain(super::scope::held(&plan.rows, world)).collect();
            if policy {
                let mut why = super::policies::refusals(&plan.rows, plan.tables.len(), world, plan.into_main);
                why.extend(holds.into_iter().map(|h| h.rule));
                if !why.is_empty() {
                    v.queue = Some(why);
                }
            } else {
                v.refusals.extend(holds);
            }
        }
        Phase::AfterApply => {
            if let Some(s) = &plan.stale {
                // (the race is lost, not a rule broken: whoever merges; the checks don't run)
                v.refusals.push(stale_refusal(world, s, "merging"));
                return v;
            }
            let broken = super::checks::broken_for(changed_tables(plan), target);
            if !broken.is_empty() {
                let reasons: Vec<String> = broken.iter().map(|(_, r)| r.clone()).collect();
                if policy {
                    v.queue = Some(reasons);
                } else {
                    v.refusals.push(Refusal {
                        code: broken[0].0,
                        message: format!("merging {} {}; nothing was merged", world.name, reasons.join("; it ")),
                        hint: None,
                        rule: reasons.join("; "),
                    });
                }
            }
        }
    }
    v
}

/// The merge enforces a verdict: an agent's refused merge is queued (42501), else the first refusal is
/// raised with its SQLSTATE.
pub fn enforce(world: &World, verdict: Verdict) {
    if let Some(why) = verdict.queue {
        crate::metrics::count(crate::metrics::Counter::RefusedPolicyQueued);
        super::policies::refuse(world, &why);
    }
    if let Some(r) = verdict.refusals.into_iter().next() {
        // (SHOW METRICS: counted by its gate, worlds_core::metrics::Counter::of_refusal)
        crate::metrics::refused(r.code);
        raise_with(r.code, r.message, None, r.hint);
    }
}

/// Does the judge read a plan's rows for this world's merge? (No: a merge may go fast-forward, with no
/// plan of rows, judged after the apply only.) An agent merging, a policy over the world, a declared
/// scope: each judges the rows.
pub fn needs_rows(world: &World) -> bool {
    super::agents::session_agent().is_some()
        || super::policies::judged_by(world).is_some()
        || super::policies::owner_policy(world.num).is_some()
        || super::scope::declared(world)
}

/// The refusal a stale read puts on a merge (or a rebase: `verb`) of `world`.
pub fn stale_refusal(world: &World, s: &Stale, verb: &str) -> Refusal {
    let what = s.what();
    Refusal {
        code: "40001",
        message: worlds_core::reads::refusal(verb, &world.name, &what),
        hint: Some(format!("Or, having checked, a person turns the check off: ALTER WORLD {} SET (check_reads = false).", world.name)),
        rule: what,
    }
}

/// The tables the plan's merge changes (a fast-forward merge: those its apply changed).
fn changed_tables(plan: &MergePlan) -> Vec<pgrx::pg_sys::Oid> {
    if let Some(t) = &plan.applied_tables {
        return t.clone();
    }
    let mut v: Vec<pgrx::pg_sys::Oid> = plan.rows.iter().filter(|p| p.changes()).map(|p: &Planned| p.layout.relid).collect();
    v.dedup();
    v
}
