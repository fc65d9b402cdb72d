//! DIFF, MERGE (and its DRY RUN) and REBASE of a world into main.
//!
//! One gathering step serves all three: for every row the world changed (its own delta layer, O(rows
//! changed)), read `ours` (the world's row), `theirs` (main's row now) and `base` (main's row at the fork,
//! from history: the before-image of the first change main made to it after the fork, or after the
//! world's own last partial merge of it). The decision per row is `worlds_core::merge::decide`.
//!
//! A merge into main is DML on the real tables inside the caller's transaction, in foreign-key order:
//! constraints, the app's triggers and history capture all run as for any write. The steps, a file each:
//! resolve (`resolve.rs`) → lock (`lock.rs`: the rows main's side holds, in one order, never waiting while
//! holding one) → gather (`gather.rs`: the three sides) → decide (`worlds_core::merge::decide`, pure) →
//! gate (`src/governance/`: the merge policy's rules, a function over the plan) → apply (`apply.rs`) →
//! record (the events, the world ended, the audit; at the end of `merge` here). Beside them: the DRY RUN's
//! rows (`dry_run.rs`), the SQL text the steps build (`sql.rs`), subtransactions (`subxact.rs`), DIFF
//! (`diff.rs`) and REBASE (`rebase.rs`).
use crate::api::{raise, raise_with};
use crate::storage::capture::MERGE_SOURCE;
pub(crate) use crate::sql_text::{json_object_expr, key_match, key_text_expr, quote_ident};
use crate::storage::overlay::{base_of, with_world, world_by_num};
use crate::storage::{as_internal, relation_layout, Layout};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use std::collections::HashMap;
use worlds_core::merge::{changed_columns, decide, Outcome, Pick, Settle};

mod resolve;
pub(crate) use resolve::*;
pub(crate) use crate::plan::{Changed, MergePlan, Phase, Planned};
use crate::governance::judge;
use crate::world::{merged_at_version, resolve_again, resolve_world, world_row, World};
pub mod lock;
mod gather;
mod typed;
pub use gather::*;
mod sql;
pub use sql::*;
mod decide;
use decide::*;
mod record;
use record::*;
mod dry_run;
use dry_run::*;
mod apply;
mod fast_forward;
mod diff;
pub use apply::*;
pub use diff::*;
pub(crate) use crate::subxact::{in_subtransaction_keep, rolled_back};
use crate::subxact::{in_subtransaction, trial};
mod rebase;
pub use rebase::rebase;
mod review;
mod stale_reads;
pub mod schema;
pub mod twins;

#[derive(Default, Clone)]
pub struct MergeRequest {
    pub world: Option<String>,
    pub into: Option<String>,
    pub only_tables: Option<Vec<String>>,
    pub only_keys: Option<Vec<String>>,
    pub using_ours: Option<bool>,
    pub by_columns: bool,
    pub resolve: Vec<(String, Pick)>,
    pub confirm: bool,
    pub confirm_deletes: Option<i64>,
    pub target: Option<i64>,
    pub at_version: Option<i64>,
    pub dry_run: bool,
}

pub fn merge(req: MergeRequest) -> Vec<Value> {
    if !req.dry_run {
        crate::api::refuse_in_transaction("MERGE WORLD");
    }
    if req.confirm && req.at_version.is_some() {
        raise("42601", "AT VERSION can't be given with CONFIRM");
    }
    if let Some(n) = req.confirm_deletes.filter(|n| *n < 0) {
        raise("22023", format!("CONFIRM DELETES {n}: a count of deleted rows can't be negative"));
    }
    let session_world = crate::guc::current_world_setting().to_string_lossy().into_owned();
    // (SHOW METRICS: recorded when it returns; a refusal counts where its gate refuses)
    let mut timer = crate::metrics::time(if req.dry_run { crate::metrics::Timed::DryRun } else { crate::metrics::Timed::Merge });
    as_internal(|| {
        let name = match &req.world {
            Some(n) => n.clone(),
            None if session_world == "main" || session_world.is_empty() => raise(
                "0A000",
                "MERGE WORLD names no world and the session is in main, which has no parent: name the world to merge (MERGE WORLD name), or quote a world named like one of MERGE's words (MERGE WORLD \"ours\")",
            ),
            None => session_world.clone(),
        };
        // an approval given again (AT VERSION n of a world already merged at version n) returns what the
        // first returned, applying nothing twice
        if let Some(done) = req.at_version.filter(|_| !req.dry_run).and_then(|v| merged_at_version(&name, v)) {
            return done;
        }
        let world = resolve_world(&name);
        if world.num == 0 {
            raise("0A000", "main has no parent to merge into");
        }
        // its rights (governance/agents.rs): a dry run reads; a merge needs merge (or merge_own), and
        // INTO a world writes that world
        let into = req.into.as_ref().map(|n| resolve_world(n));
        if req.dry_run {
            crate::governance::agents::require("read", Some(world.num));
        } else {
            crate::governance::agents::require("merge", Some(world.num));
            if let Some(i) = into.as_ref().filter(|i| i.num != 0) {
                crate::governance::agents::require("write", Some(i.num));
            }
        }
        if let Some(i) = &into {
            if i.num == world.num {
                raise("22023", format!("MERGE WORLD {} INTO itself", world.name));
            }
        }
        let target_num = into.as_ref().map(|i| i.num).unwrap_or(world.parent.unwrap_or(0));
        // a world target is read and written through its overlay; main through its tables and history
        let target_world = world_by_num(target_num);
        let target_name = target_world.as_ref().map(|t| t.name.clone()).unwrap_or_else(|| "main".into());
        // the write locks of this world (its rows stay as they are while it merges) and of a world merged
        // into, in world-number order (lock.rs: the order of all locks)
        // (a dry run changes nothing: it takes no lock, so it also runs in a read-only transaction)
        if !req.dry_run {
            lock::worlds(&[world.num, target_num]);
        }
        let world = match (req.at_version, world_row("id = $1", world.id.as_str().into())) {
            (_, Some(w)) => w,
            // (a concurrent approval of the same version merged it while this one waited for its lock)
            (Some(v), None) if !req.dry_run => match merged_at_version(&name, v) {
                Some(done) => return done,
                None => resolve_again(&world),
            },
            _ => resolve_again(&world),
        };
        if let Some(v) = req.at_version {
            if v != world.version {
                raise(
                    "55000",
                    format!("world {} is at version {}, not {v}: it was written to or partly merged since; nothing was merged", world.name, world.version),
                );
            }
        }
        // which tables, and lock them (fixed order: relid) before reading main
        let only_tables: Option<Vec<pg_sys::Oid>> = req.only_tables.as_ref().map(|ts| ts.iter().map(|t| regclass_of(t)).collect());
        if let Some(ts) = &only_tables {
            // (a table worlds don't track has no rows in a world: naming it is a mistake, not MERGE 0)
            let tracked = crate::storage::tracked_tables();
            if ts.is_empty() {
                raise("22023", "ONLY TABLES needs at least one table");
            }
            if let Some((name, _)) = req.only_tables.iter().flatten().zip(ts).find(|(_, r)| !tracked.contains_key(r)) {
                raise("22023", format!("ONLY TABLES ({name}): it is not a table pg_worlds tracks, so no world changes it"));
            }
        }
        let only_keys: Option<Vec<(pg_sys::Oid, String)>> = req.only_keys.as_ref().map(|ks| ks.iter().map(|k| parse_row_ref(k)).collect());
        // main's tables it changed the shape of (merge/twins.rs): locked for its statements first, before
        // any other table is (touched_layouts_where below takes ACCESS SHARE on each table the world
        // wrote, and keeps it)
        let all_twins = twins::of_world(world.num);
        if !req.dry_run && !all_twins.is_empty() {
            twins::lock(&all_twins);
        }
        let mut layouts: Vec<std::rc::Rc<Layout>> = touched_layouts_where(&world, |l| {
            only_tables.as_ref().map(|o| o.contains(&l.relid)).unwrap_or(true)
                && only_keys.as_ref().map(|o| o.iter().any(|(r, _)| *r == l.relid)).unwrap_or(true)
        });
        // main's tables it changed the shape of (merge/twins.rs): their rows come with their statements,
        // never through the row merge; whole merges only
        layouts.retain(|l| !all_twins.iter().any(|t| t.tabno == l.tabno));
        let whole = only_tables.is_none() && only_keys.is_none();
        if !whole && !all_twins.is_empty() && !req.dry_run {
            let named: Vec<&twins::Twin> = all_twins
                .iter()
                .filter(|t| only_tables.as_ref().is_some_and(|o| o.contains(&t.relid)) || only_keys.as_ref().is_some_and(|o| o.iter().any(|(r, _)| *r == t.relid)))
                .collect();
            if let Some(t) = named.first() {
                raise("0A000", format!("ONLY TABLES / ONLY KEYS can't name table {}: world {} changed its shape, which merges whole (merge the whole world)", t.shown, world.name));
            }
        }
        let twins = if whole { all_twins } else { Vec::new() };
        // main's views and functions it replaced (merge/twins.rs): whole merges only
        let replaced = if whole { twins::replaced_of(world.num) } else { Vec::new() };
        // the schema it made (merge/schema.rs): brought first, whole merges only; both sides making one
        // name is a conflict
        let objects = if whole { schema::objects(world.num) } else { Vec::new() };
        // the readers it registered and the marks it set or took away (governance/readers): whole merges
        let readers = if whole { crate::governance::readers::registry::changes_of(&world) } else { Vec::new() };
        let schema_conflicts = schema::conflicts(&objects, target_world.as_ref());
        let mut twin_conflicts = twins::conflicts(&world, &twins, target_world.is_some());
        if target_world.is_some() && !replaced.is_empty() {
            twin_conflicts.push(("0A000".into(), format!("MERGE ... INTO another world of a world that replaced main's {} {} is not supported yet", replaced[0].kind, replaced[0].shown())));
        }
        twin_conflicts.extend(twins::replaced_conflicts(&world, &replaced));
        if !req.dry_run {
            if !schema_conflicts.is_empty() || twin_conflicts.first().is_some_and(|(code, _)| code == "40001") {
                crate::metrics::count(crate::metrics::Counter::Conflicts);
            }
            schema::refuse_conflicts(&world, &objects, target_world.as_ref(), &target_name);
            twins::refuse_conflicts(&world, &twin_conflicts);
        }
        let mut absent = HashMap::new();
        let mut gathered = HashMap::new();
        // (a merge that can't go fast-forward now can't once main's rows are held: main's history only grows)
        let fast = target_world.is_none() && fast_forward::tables(&layouts, &world, &req);
        if !req.dry_run && target_world.is_none() {
            // main's rows this world changed, held until commit; what is decided on is what they hold
            // then: everything below reads on snapshots taken after they are held, and a merge that plans
            // its rows reads them as it locks them, reading again what main wrote meanwhile (lock.rs)
            lock::keyless_tables(&layouts);
            if fast {
                absent = lock::main_rows(&layouts, world.num, lock::Hold::Write);
            } else {
                (absent, gathered) = lock::main_rows_gathered(&layouts, &world);
            }
        }
        // main hasn't touched the world's tables since its fork, and nothing reads the plan's rows: the
        // world's rows as they stand, applied by typed statements, no plan (fast_forward.rs)
        if fast && fast_forward::tables(&layouts, &world, &req) {
            pgrx::debug1!("pg_worlds: merging {} fast-forward (main unchanged since its fork)", world.name);
            timer.is(crate::metrics::Timed::MergeFastForward);
            // (no rows planned: the judge reads none, needs_rows said so; the tables come from the apply)
            let mut plan = MergePlan { world: world.clone(), into_main: true, tables: table_levels(&objects, &twins, &replaced, &readers), rows: Vec::new(), stale: stale_reads::stale(world.num), applied_tables: Some(Vec::new()) };
            judge::enforce(&world, judge::judge(&plan, Phase::BeforeApply, Some(None), None));
            let brought = schema::apply(&world, &objects, None, &twins, &replaced) + bring_readers(&world, None, whole);
            let (applied, deletes, changed) = fast_forward::apply(&layouts, &world, &absent);
            schema::add_keys(world.num);
            let applied = applied + brought;
            // the reads again, the merge checks on the result as applied (as below)
            plan.applied_tables = Some(changed);
            plan.stale = stale_reads::stale(world.num);
            judge::enforce(&world, judge::judge(&plan, Phase::AfterApply, None, None));
            record(&world, target_num, &target_name, false, applied as i64, deletes);
            return vec![serde_json::json!({ "tag": format!("MERGE {applied}") })];
        }
        let resolve: HashMap<(pg_sys::Oid, String), Pick> =
            req.resolve.iter().map(|(r, p)| (parse_row_ref(r), p.clone())).collect();
        for ((relid, key), pick) in &resolve {
            if let Pick::Row(row) = pick {
                check_resolve_row(*relid, key, row);
            }
        }
        // gather the three sides and decide each row (decide.rs, worlds_core::merge::decide)
        let mut mplan = MergePlan {
            world: world.clone(),
            into_main: target_world.is_none(),
            tables: table_levels(&objects, &twins, &replaced, &readers),
            rows: plan_rows(&layouts, &world, target_world.as_ref(), &req, &resolve, only_keys.as_deref(), gathered),
            stale: stale_reads::stale(world.num),
            applied_tables: None,
        };
        let plan = &mplan.rows;
        // a table without a key has no row identity to tell a merged row from an unmerged one: once a world
        // merged into this target (in part, or whole while it stays open), its rows there would be applied again
        if let Some(p) = plan.iter().find(|p| p.layout.key_kind == b'r') {
            let before = crate::spi_calls::get_one_with_args::<bool>(
                "SELECT EXISTS (SELECT 1 FROM worlds.event WHERE world = $1 AND event IN ('merged into ' || $2, 'merged part into ' || $2))",
                &[world.num.into(), target_name.as_str().into()],
            )
            .ok()
            .flatten()
            .unwrap_or(false);
            if before {
                crate::api::raise_with(
                    "0A000",
                    format!(
                        "world {} was merged into {target_name} before, and table {} has no key: its rows would be applied there again; nothing was merged",
                        world.name,
                        short_name(&p.table)
                    ),
                    None,
                    Some("Merge the rest with ONLY TABLES leaving that table out, or make its change again in a new world.".into()),
                );
            }
        }
        if req.dry_run {
            // the plan shows whole rows: the role must may read them
            let mut checked: Vec<pg_sys::Oid> = Vec::new();
            for p in plan {
                if !checked.contains(&p.layout.relid) {
                    require_read(&p.layout);
                    checked.push(p.layout.relid);
                }
            }
        }
        // (what main has of the plan's rows, hashed: only a dry run shows it, only TARGET compares it)
        let fingerprint = if req.dry_run || req.target.is_some() { target_fingerprint(plan) } else { 0 };
        if req.dry_run {
            // (SHOW REVIEWS judging a queued world runs this dry run for its reasons: no NOTICE then)
            if !crate::governance::policies::checking() {
                pgrx::notice!(
                "{}: version {}; to merge exactly what this dry run saw, add AT VERSION {} TARGET {}",
                world.name, world.version, world.version, fingerprint
            );
                // a person merging an agent's world under confirm_deletes_over gives the count: said here
                if let Some(r) = crate::governance::policies::unconfirmed_deletes(plan, &world, None) {
                    pgrx::notice!("{}: its merge {}", world.name, r.rule);
                }
            }
            // the schema it makes first, then its rows
            // (main's tables it dropped, its own objects, main's tables it changed: the order the merge runs)
            let mut rows = twins::dry_run_rows(&twins.iter().filter(|t| t.dropped).cloned().collect::<Vec<_>>());
            rows.extend(schema::dry_run_rows(&objects));
            rows.extend(twins::dry_run_rows(&twins.iter().filter(|t| !t.dropped).cloned().collect::<Vec<_>>()));
            rows.extend(twins::replaced_dry_run_rows(&replaced));
            rows.extend(readers.iter().map(|c| c.dry_run_row()));
            rows.extend(dry_run_rows(plan));
            let blocked = |why: String| {
                serde_json::json!({
                    "table": null, "id": null, "outcome": "blocked", "detail": why,
                    "base": null, "ours": null, "theirs": null, "result": null, "postgres": null,
                })
            };
            if !schema_conflicts.is_empty() {
                rows.push(blocked(format!("both sides made {} since the fork", schema_conflicts.join(", "))));
                return rows;
            }
            if !twin_conflicts.is_empty() {
                for (_, why) in &twin_conflicts {
                    rows.push(blocked(why.clone()));
                }
                return rows;
            }
            if let Some(t) = req.target.filter(|t| *t != fingerprint) {
                // the merge itself would refuse (55000): so does the plan
                rows.push(blocked(format!("main changed since the dry run that named TARGET {t} (it is now TARGET {fingerprint})")));
                return rows;
            }
            // the judge's verdict before the apply (governance/judge.rs): the rules of the policy the merging
            // agent keeps to; what holds a person's merge (a stale read, the declared scope)
            let verdict = judge::judge(&mplan, Phase::BeforeApply, None, target_world.as_ref());
            if let Some(why) = &verdict.queue {
                rows.push(blocked(format!("needs a person: {}", why.join("; "))));
            }
            for r in verdict.refusals {
                rows.push(blocked(r.message));
            }
            // (its reads are judged: the trial below judges the result only)
            mplan.stale = None;
            // with no conflict, the merge is tried and rolled back: a constraint (or the app's trigger) that
            // would refuse it shows as a last row, blocked. A read-only transaction can't try it: the plan
            // is shown without that row
            if !plan.iter().any(|p| matches!(p.decision.outcome, Outcome::Conflict(_))) && unsafe { !pg_sys::XactReadOnly } {
                let why = trial(|| {
                    schema::apply(&world, &objects, target_world.as_ref(), &twins, &replaced);
                    bring_readers(&world, target_world.as_ref(), whole);
                    match &target_world {
                        None => apply(plan, &world),
                        Some(t) => apply_into_world(plan, &world, t),
                    };
                    if target_world.is_none() {
                        schema::add_keys(world.num);
                    }
                    // the judge after the apply, on the would-be result: the merge checks (its reads were
                    // judged with the plan, above)
                    let after = judge::judge(&mplan, Phase::AfterApply, None, target_world.as_ref());
                    let why = after.queue.unwrap_or_else(|| after.refusals.into_iter().map(|r| r.rule).collect());
                    if !why.is_empty() {
                        raise("23514", why.join("; "));
                    }
                });
                if let Some(why) = why {
                    rows.push(blocked(why));
                }
            }
            return rows;
        }
        if let Some(t) = req.target {
            if t != fingerprint {
                raise("55000", format!("main changed since the dry run that named TARGET {t} (it is now TARGET {fingerprint}); nothing was merged"));
            }
        }
        let conflicts: Vec<String> = plan
            .iter()
            .filter(|p| matches!(p.decision.outcome, Outcome::Conflict(_)))
            .map(|p| format!("{}/{}", short_name(&p.table), p.row.key))
            .collect();
        if !conflicts.is_empty() {
            crate::metrics::count(crate::metrics::Counter::Conflicts);
            let shown = conflicts.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            let more = if conflicts.len() > 10 { format!(" and {} more", conflicts.len() - 10) } else { String::new() };
            raise_with(
                "40001",
                format!("merging {} conflicts: rows changed on both sides: {shown}{more}; nothing was merged", world.name),
                None,
                Some("Settle them with RESOLVE, BY COLUMNS or USING OURS | THEIRS, or REBASE WORLD first.".into()),
            );
        }
        // step 5, the gates (src/governance/): refused here, before anything is applied
        judge::enforce(&world, judge::judge(&mplan, Phase::BeforeApply, Some(req.confirm_deletes), target_world.as_ref()));
        let deletes = plan
            .iter()
            .filter(|p| !matches!(p.decision.outcome, Outcome::Conflict(_)) && p.decision.result.is_none() && p.row.theirs.is_some())
            .count() as i64;
        let partial = only_tables.is_some() || only_keys.is_some();
        let run = || match &target_world {
            None => apply(plan, &world),
            Some(t) => apply_into_world(plan, &world, t),
        };
        let applied = if partial {
            // a reference or unique value a partial merge breaks: a row tied to one ONLY leaves out (22023)
            // when merging the whole world would not break it; else the data's own clash (23505 / 23503),
            // as for a whole merge
            match in_subtransaction(run).map_err(|e| *e) {
                Ok(n) => n,
                Err(pgrx::pg_sys::panic::CaughtError::PostgresError(r))
                    if matches!(r.sql_error_code(), PgSqlErrorCode::ERRCODE_FOREIGN_KEY_VIOLATION | PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION) =>
                {
                    // the same clash (same message) in the whole merge: the data's own; another clash elsewhere
                    // in the world says nothing of this one. The whole world's plan (no ONLY), its apply tried
                    // and rolled back, as its dry run would try it
                    let whole_blocked = {
                        let all: Vec<std::rc::Rc<Layout>> = touched_layouts(&world);
                        let whole = MergeRequest { only_tables: None, only_keys: None, ..req.clone() };
                        let tried = in_subtransaction(|| {
                            let rows = plan_rows(&all, &world, target_world.as_ref(), &whole, &resolve, None, HashMap::new());
                            if rows.iter().any(|p| p.conflicts()) {
                                return None;
                            }
                            trial(|| {
                                match &target_world {
                                    None => apply(&rows, &world),
                                    Some(t) => apply_into_world(&rows, &world, t),
                                };
                            })
                        });
                        // (the trial may raise the clash rather than return it)
                        let whole_error = match tried {
                            Ok(e) => e,
                            Err(e) => match *e {
                                pgrx::pg_sys::panic::CaughtError::PostgresError(x) => Some(x.message().to_string()),
                                _ => None,
                            },
                        };
                        whole_error.is_some_and(|d| d.starts_with(r.message()))
                    };
                    if whole_blocked {
                        pgrx::pg_sys::panic::CaughtError::PostgresError(r).rethrow();
                    }
                    raise_with(
                        "22023",
                        format!("a row merged is tied to a row ONLY leaves out: {}; nothing was merged", r.message()),
                        r.detail().map(|d| d.to_string()),
                        Some("Include the rows it is tied to in ONLY TABLES / ONLY KEYS, or merge the whole world.".into()),
                    )
                }
                Err(e) => e.rethrow(),
            }
        } else {
            // the schema it made first, then its rows
            let brought = schema::apply(&world, &objects, target_world.as_ref(), &twins, &replaced) + bring_readers(&world, target_world.as_ref(), whole);
            let n = brought + run();
            if target_world.is_none() {
                schema::add_keys(world.num);
            }
            n
        };
        // a world that checks its reads: judged again on the latest snapshot, after the apply: a read row
        // main changed while the merge ran refuses it too (governance/reads: what is guaranteed)
        mplan.stale = stale_reads::stale(world.num);
        // the merge checks, on the result as applied, before it commits (no one skips them)
        judge::enforce(&world, judge::judge(&mplan, Phase::AfterApply, None, target_world.as_ref()));
        // step 7: what happened, and the world's end
        record(&world, target_num, &target_name, partial, applied as i64, deletes);
        vec![serde_json::json!({ "tag": format!("MERGE {applied}") })]
    })
}

pub struct RebaseRequest {
    pub world: Option<String>,
    pub using_ours: Option<bool>,
    pub by_columns: bool,
    pub resolve: Vec<(String, Pick)>,
    pub at_version: Option<i64>,
}

/// The plan's table-level changes: the schema it made and changed (merge/schema.rs, twins.rs), then the
/// readers it registered and the marks it set or took away (each a schema change under a policy).
fn table_levels(objects: &[schema::WorldObject], twins: &[twins::Twin], replaced: &[twins::Replaced], readers: &[crate::governance::readers::registry::Change]) -> Vec<crate::plan::TableLevel> {
    let mut t = schema::table_levels(objects, twins, replaced);
    t.extend(readers.iter().map(|c| crate::plan::TableLevel::Reader { change: c.describe() }));
    t
}

/// Brings the world's readers and marks into the target (whole merges only): how many.
fn bring_readers(world: &World, target: Option<&World>, whole: bool) -> usize {
    if whole { crate::governance::readers::registry::apply(world, target) } else { 0 }
}
