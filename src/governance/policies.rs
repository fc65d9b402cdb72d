//! The merge-policy gate: a function over the merge's plan that returns the rules it breaks
//! (`worlds_core::rules`), so the merge, its DRY RUN and SHOW REVIEWS give the same reasons.
//!
//! - An agent keeping to a policy whose merge breaks a rule is refused (42501, every broken rule in the
//!   message) and its world is queued for a person (`reviews::queue`: a background worker writes the
//!   queue row in a transaction of its own, since the refused merge's is rolled back).
//! - A person merging a world owned by an agent under a policy with confirm_deletes_over must give the
//!   real count (CONFIRM DELETES n; 55000 with the count otherwise), before anything is written.
//! - Rules count the rows the merge applies: a row whose result is what the target has (USING THEIRS, a
//!   change both sides made) changes nothing.
use crate::api::{raise, raise_with};
use crate::plan::{Planned, Refusal};
use crate::world::World;
use pgrx::prelude::*;
use serde_json::Value;
use worlds_core::merge::Outcome;
use worlds_core::rules::{self, MergeFacts, Policy, TableChange};
use crate::backend_local::BackendLocal;

/// A policy's rules, read from worlds.merge_policy (None when there is no such policy).
pub fn load(name: &str) -> Option<Policy> {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT max_rows, max_deletes, rows_per_hour, deletes_per_hour, confirm_deletes_over, max_age, tables, review_tables,
                    review_columns, schema, overwrite, max_effects, effects_per_hour, review_channels, critical
             FROM worlds.merge_policy WHERE name = $1",
            None,
            &[name.into()],
            |mut t| {
                t.next().map(|r| {
                    let text = |i: usize| r.get::<String>(i).ok().flatten();
                    let list = |i: usize| text(i).map(|s| rules::table_list(&s).unwrap_or_default());
                    Policy {
                        max_rows: r.get::<i64>(1).ok().flatten(),
                        max_deletes: r.get::<i64>(2).ok().flatten(),
                        rows_per_hour: r.get::<i64>(3).ok().flatten(),
                        deletes_per_hour: r.get::<i64>(4).ok().flatten(),
                        confirm_deletes_over: r.get::<i64>(5).ok().flatten(),
                        max_age_ms: r.get::<i64>(6).ok().flatten(),
                        tables: list(7),
                        review_tables: list(8).unwrap_or_default(),
                        review_columns: text(9).map(|s| rules::column_list(&s).unwrap_or_default()).unwrap_or_default(),
                        schema: r.get::<bool>(10).ok().flatten().unwrap_or(false),
                        overwrite: r.get::<bool>(11).ok().flatten().unwrap_or(false),
                        max_effects: r.get::<i64>(12).ok().flatten(),
                        effects_per_hour: r.get::<i64>(13).ok().flatten(),
                        review_channels: text(14).map(|s| rules::name_list(&s).unwrap_or_default()).unwrap_or_default(),
                        critical: r.get::<bool>(15).ok().flatten().unwrap_or(false),
                    }
                })
            },
        )
        .ok()
        .flatten()
    })
}

/// The world's owner (an agent's name) and the policy it keeps to, if any.
pub fn owner_policy(world_num: i32) -> Option<(String, String)> {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT a.name, a.policy FROM worlds.world w JOIN worlds.agent a ON a.name = w.owner WHERE w.num = $1 AND a.policy IS NOT NULL",
            None,
            &[world_num.into()],
            |mut t| t.next().and_then(|r| Some((r.get::<String>(1).ok().flatten()?, r.get::<String>(2).ok().flatten()?))),
        )
        .ok()
        .flatten()
    })
}

/// Does this planned row change the target? (Its result differs from what the target has now.)
fn changes(p: &Planned) -> bool {
    !matches!(p.decision.outcome, Outcome::Conflict(_)) && p.decision.result != p.row.theirs
}

/// The columns a changed row changes: an update's changed columns, an insert's given (non-null) ones, a
/// delete's non-null ones.
fn changed_columns(p: &Planned) -> Vec<String> {
    let empty = serde_json::Map::new();
    let obj = |v: &Option<Value>| v.as_ref().and_then(|v| v.as_object()).cloned();
    match (obj(&p.row.theirs), obj(&p.decision.result)) {
        (Some(before), Some(after)) => after.iter().filter(|(k, v)| before.get(*k) != Some(*v)).map(|(k, _)| k.clone()).collect(),
        (None, Some(after)) | (Some(after), None) => after.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.clone()).collect(),
        (None, None) => empty.keys().cloned().collect(),
    }
}

/// What the plan would apply, as the rules count it.
pub fn facts(plan: &[Planned], schema_changes: usize, world: &World, into_main: bool, agent: &str) -> MergeFacts {
    let mut f = MergeFacts { into_main, schema_changes: schema_changes as i64, ..Default::default() };
    for p in plan.iter().filter(|p| changes(p)) {
        f.rows += 1;
        if p.decision.result.is_none() {
            f.deletes += 1;
        }
        // its own row over one its parent changed since the fork (USING OURS, RESOLVE ... = ours); rows
        // combined BY COLUMNS are neither side's alone
        if matches!(p.decision.outcome, Outcome::KeptOurs | Outcome::PickedOurs) && p.row.theirs != p.row.base {
            f.overwrites += 1;
        }
        let (schema, name) = split_name(p.layout.table_name.as_str());
        let columns = changed_columns(p);
        match f.tables.iter_mut().find(|t| t.schema == schema && t.name == name) {
            Some(t) => {
                for c in columns {
                    if !t.columns.contains(&c) {
                        t.columns.push(c);
                    }
                }
            }
            None => f.tables.push(TableChange { schema, name, columns }),
        }
    }
    let (hour_rows, hour_deletes, hour_effects, age_ms) = crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT coalesce(sum(rows) FILTER (WHERE target = 'main'), 0)::int8, coalesce(sum(deletes) FILTER (WHERE target = 'main'), 0)::int8,
                    coalesce(sum(effects) FILTER (WHERE target = 'main'), 0)::int8,
                    (SELECT (extract(epoch FROM clock_timestamp() - coalesce(w.rebased, w.created)) * 1000)::int8 FROM worlds.world w WHERE w.num = $2)
             FROM worlds.audit WHERE agent = $1 AND action = 'merge' AND at > clock_timestamp() - interval '1 hour'",
            None,
            &[agent.into(), world.num.into()],
            |mut t| {
                t.next()
                    .map(|r| {
                        let n = |i: usize| r.get::<i64>(i).ok().flatten().unwrap_or(0);
                        (n(1), n(2), n(3), n(4))
                    })
                    .unwrap_or((0, 0, 0, 0))
            },
        )
        .unwrap_or((0, 0, 0, 0))
    });
    f.hour_rows = hour_rows;
    f.hour_deletes = hour_deletes;
    f.hour_effects = hour_effects;
    f.age_ms = age_ms;
    let (effects, channels) = crate::governance::outbox::effects(world.num);
    f.effects = effects;
    f.channels = channels;
    // what critical readers read of it (governance/readers): the marks the world and main have
    f.critical_reads = crate::governance::readers::blast::critical_reads(plan, world, None);
    f
}

/// `"schema"."table"` (as layouts name tables) → (schema, table).
pub(crate) fn split_name(qualified: &str) -> (String, String) {
    let parts = rules::table_list(qualified).ok().and_then(|mut l| l.pop());
    match parts {
        Some(t) => (t.schema.unwrap_or_else(|| "public".into()), t.name),
        None => ("public".into(), qualified.to_string()),
    }
}

/// The policy a merge of `world` is judged by, with the agent it counts for: the merging agent's own,
/// or (for SHOW REVIEWS and check_merge_policy) the one named.
pub fn judged_by(world: &World) -> Option<(String, String)> {
    if let Some(named) = CHECKING.with(|c| c.borrow().clone()) {
        let owner = owner_policy(world.num).map(|(a, _)| a).unwrap_or_default();
        return Some((owner, named));
    }
    let agent = crate::governance::agents::session_agent()?;
    agent.policy.clone().map(|p| (agent.name.clone(), p))
}

/// Is a policy judging a dry run for SHOW REVIEWS or check_merge_policy?
pub fn checking() -> bool {
    CHECKING.with(|c| c.borrow().is_some())
}

/// A policy to judge a dry run by, whoever runs it (SHOW REVIEWS, check_merge_policy).
static CHECKING: BackendLocal<std::cell::RefCell<Option<String>>> = BackendLocal::new(std::cell::RefCell::new(None));

/// The rules the plan breaks under the policy that judges it (empty: none, or no policy).
pub fn refusals(plan: &[Planned], schema_changes: usize, world: &World, into_main: bool) -> Vec<String> {
    let Some((agent, name)) = judged_by(world) else { return Vec::new() };
    let Some(policy) = load(&name) else { return vec![format!("its merge policy {name} no longer exists")] };
    rules::broken_rules(&policy, &facts(plan, schema_changes, world, into_main, &agent))
}

/// An agent keeping to a policy with overwrite = false, rebasing with its rows kept over `n` rows its parent
/// changed since the fork: the broken rule ("would keep ... (overwrite false)"); None when allowed (a
/// person, no policy, overwrite = true).
pub fn refuses_overwrite(n: i64) -> Option<String> {
    let agent = crate::governance::agents::session_agent()?;
    let name = agent.policy.clone()?;
    let policy = load(&name)?;
    (!policy.overwrite).then(|| {
        let rows = if n == 1 { "1 row".to_string() } else { format!("{n} rows") };
        format!("would keep its own rows over {rows} its parent changed since the fork, which agent {}'s merge policy {name} doesn't allow (overwrite false)", agent.name)
    })
}

/// A person merging a world of an agent under a policy with confirm_deletes_over must give the count, and
/// the right one (55000 with the real count), before anything is written: the refusal when not.
pub fn unconfirmed_deletes(plan: &[Planned], world: &World, given: Option<i64>) -> Option<Refusal> {
    if crate::governance::agents::session_agent().is_some() {
        return None;
    }
    let (_, name) = owner_policy(world.num)?;
    let over = load(&name).and_then(|p| p.confirm_deletes_over)?;
    let deletes = plan.iter().filter(|p| changes(p) && p.decision.result.is_none()).count() as i64;
    if deletes <= over {
        return None;
    }
    let rule = format!("deletes {deletes} rows, which a person confirms (CONFIRM DELETES {deletes})");
    match given {
        Some(n) if n == deletes => None,
        Some(n) => Some(Refusal {
            code: "55000",
            message: format!("merging {} deletes {deletes} rows, not {n}; nothing was merged", world.name),
            hint: Some(format!("Check what it deletes (MERGE WORLD {} DRY RUN), then confirm with CONFIRM DELETES {deletes}.", world.name)),
            rule,
        }),
        None => Some(Refusal {
            code: "55000",
            message: format!(
                "merging {} deletes {deletes} rows: its merge policy {name} (confirm_deletes_over {over}) asks the person approving it to confirm the count; nothing was merged",
                world.name
            ),
            hint: Some(format!("MERGE WORLD {} CONFIRM DELETES {deletes}", world.name)),
            rule,
        }),
    }
}

/// The refusal of an agent's merge that breaks its policy: the world is queued, then 42501.
pub fn refuse(world: &World, reasons: &[String]) -> ! {
    let policy = judged_by(world).map(|(_, p)| p).unwrap_or_default();
    crate::governance::reviews::queue(world.num, world.version, &policy);
    raise_with(
        "42501",
        format!("merging {} needs a person: it {}; it waits in SHOW REVIEWS", world.name, reasons.join("; it ")),
        None,
        Some(format!("A person merges it (MERGE WORLD {}) or drops it.", world.name)),
    )
}

/// Runs f with `policy` judging the merges it plans, whoever runs them (SHOW REVIEWS, check_merge_policy:
/// merge/review.rs).
pub fn checking_as<R>(policy: &str, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CHECKING.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(CHECKING.with(|c| c.replace(Some(policy.to_string()))));
    f()
}

/// `worlds._check_policy_list(key, value)`: a list setting read as SQL reads names (22023 otherwise).
#[pg_extern(immutable, parallel_safe)]
fn _check_policy_list(key: Option<&str>, value: Option<&str>) {
    let Some(v) = value else { return };
    let key = key.unwrap_or_else(|| crate::api::raise("22004", "a merge policy setting's name must not be null"));
    let r = match key {
        "review_columns" => rules::column_list(v).map(|_| ()),
        "review_channels" => rules::name_list(v).map(|_| ()),
        _ => rules::table_list(v).map(|_| ()),
    };
    if let Err(e) = r {
        raise("22023", format!("{key}: {e}"));
    }
}
