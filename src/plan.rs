//! The merge's plan: what a MERGE, its DRY RUN, a REBASE and SHOW REVIEWS decide on, as one type. One planner
//! builds it (merge/mod.rs, `plan`), one judge judges it (governance/judge.rs, `judge`), one applier applies
//! it (merge/apply.rs): the merge, its dry run and SHOW REVIEWS read the same plan and the same verdicts, so
//! they can't disagree.
//!
//! A plan holds the table-level changes (create, alter, drop: the schema a world changed) before the row
//! changes: they are applied first, in that order. (Worlds can't change schema yet: issue 42 fills it.)
//!
//! It depends on the tables' layouts (storage) and the world (world.rs) only, and on worlds_core's
//! decision: governance, below the merge, judges it without importing the merge.
use crate::storage::Layout;
use crate::world::World;
use serde_json::Value;
use worlds_core::merge::{Decision, Outcome};

/// One row the world changed, with the three sides.
#[derive(Clone, Debug)]
pub struct Changed {
    pub key: String,
    /// the key's columns as a JSON object (the row itself for a table without a key)
    pub key_obj: Value,
    pub base: Option<Value>,
    pub ours: Option<Value>,
    pub theirs: Option<Value>,
}

/// One row of a plan: the three sides and what to do with it.
pub struct Planned {
    pub table: String,
    pub layout: std::rc::Rc<Layout>,
    pub merge_by_columns: bool,
    pub row: Changed,
    pub decision: Decision,
}

impl Planned {
    /// Does this row change the target? (Decided, and its result differs from what the target has now.)
    pub fn changes(&self) -> bool {
        !matches!(self.decision.outcome, Outcome::Conflict(_)) && self.decision.result != self.row.theirs
    }

    pub fn conflicts(&self) -> bool {
        matches!(self.decision.outcome, Outcome::Conflict(_))
    }
}

/// A change of a table itself, applied before the rows (the schema a world changed).
pub enum TableLevel {
    Create { table: String, definition: String },
    Alter { table: String, columns: Vec<String> },
    Drop { table: String },
    /// a registered reader or a critical mark it added or took away (governance/readers/registry.rs)
    Reader { change: String },
}

/// What the world relied on that moved, as a person reads it (the stale-read gate: governance/reads).
pub enum Stale {
    /// rows it read that changed: "accounts/1", ...
    Rows(Vec<String>),
    /// its reads were lost with a crash (shared memory reset since its fork)
    Restarted,
}

impl Stale {
    pub fn what(&self) -> String {
        match self {
            Stale::Rows(r) => format!("read rows that changed since it forked: {}", worlds_core::reads::rows_named(r)),
            Stale::Restarted => "relies on reads made before the database restarted".to_string(),
        }
    }
}

/// The whole plan of a merge of `world`.
pub struct MergePlan {
    pub world: World,
    /// into main (not INTO another world)
    pub into_main: bool,
    /// the table-level changes, applied first in this order
    pub tables: Vec<TableLevel>,
    pub rows: Vec<Planned>,
    /// what the world read that its parent changed since the fork, judged when the plan was made (None:
    /// nothing, or the world doesn't check its reads)
    pub stale: Option<Stale>,
    /// a fast-forward merge plans no rows (`rows` is empty): the tables its apply changed, once applied
    pub applied_tables: Option<Vec<pgrx::pg_sys::Oid>>,
}

/// When the judge judges a plan: before anything is applied (the merge policy, the holds), or after the
/// apply, before the merge commits (the reads again, the merge checks on the result).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    BeforeApply,
    AfterApply,
}

/// One reason the judge refuses a plan.
pub struct Refusal {
    /// the SQLSTATE a merge raises for it
    pub code: &'static str,
    /// as a person merging reads it (the merge's error, the dry run's blocked row)
    pub message: String,
    pub hint: Option<String>,
    /// as a broken rule of a merge policy ("it ..."): the reasons SHOW REVIEWS lists
    pub rule: String,
}
