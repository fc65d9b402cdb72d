//! SHOW REVIEWS' reasons for a queued world and `check_merge_policy`: the world's merge into its parent
//! planned and judged as its DRY RUN plans and judges it (judged by the policy named), rolled back.
use super::*;
use crate::governance::policies;

/// SHOW REVIEWS' reasons and changes for a queued world: its merge into its parent judged by `policy`,
/// as a dry run (nothing written). {"reasons": [...], "changes": {table: "d deleted, u updated, i inserted"}}.
#[pg_extern(volatile, parallel_unsafe)]
fn _review_facts(world_num: i32, policy: &str) -> pgrx::JsonB {
    let name = crate::storage::as_internal(|| crate::spi_calls::get_one_with_args::<String>("SELECT name FROM worlds.world WHERE num = $1", &[world_num.into()]))
        .ok()
        .flatten()
        .unwrap_or_else(|| raise("3D000", format!("world {world_num} does not exist")));
    pgrx::JsonB(check(&name, policy))
}

/// `worlds.check_merge_policy(world, policy)`: the rules of `policy` the world's merge into its parent
/// would break now, without merging (the spec's MCP check_merge_policy).
#[pg_extern(volatile, parallel_unsafe)]
fn check_merge_policy(world: &str, policy: &str) -> Vec<String> {
    crate::governance::agents::require("read", None);
    if policies::load(policy).is_none() {
        raise("42704", format!("merge policy \"{policy}\" does not exist"));
    }
    check(world, policy)["reasons"].as_array().map(|a| a.iter().filter_map(|r| r.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn check(world: &str, policy: &str) -> Value {
    let rows = policies::checking_as(policy, || {
        rolled_back(|| {
        merge(MergeRequest {
            world: Some(world.to_string()),
            into: None,
            only_tables: None,
            only_keys: None,
            using_ours: None,
            by_columns: false,
            resolve: Vec::new(),
            confirm: false,
            confirm_deletes: None,
            target: None,
            at_version: None,
            dry_run: true,
        })
        })
    });
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => return serde_json::json!({ "reasons": [format!("its merge can't be judged: {e}")], "changes": {} }),
    };
    let prefix = "needs a person: ";
    let reasons: Vec<Value> = rows
        .iter()
        .filter(|r| r["outcome"] == "blocked")
        .filter_map(|r| r["detail"].as_str())
        // (the policy's rules, then what the trial merge found: broken merge checks, the data's refusals)
        .map(|d| d.strip_prefix(prefix).unwrap_or(d))
        .flat_map(|d| d.split("; ").map(|s| Value::String(s.to_string())).collect::<Vec<_>>())
        .collect();
    let mut changes = serde_json::Map::new();
    for r in rows.iter().filter(|r| r["outcome"] == "summary") {
        if let (Some(t), Some(d)) = (r["table"].as_str(), r["detail"].as_str()) {
            changes.insert(t.to_string(), Value::String(d.to_string()));
        }
    }
    serde_json::json!({ "reasons": reasons, "changes": changes })
}

