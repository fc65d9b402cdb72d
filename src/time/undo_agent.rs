//! UNDO AGENT name SINCE when [SKIP CHANGED] [WHERE run_id = 'id']: in the session's world, puts back every
//! row the agent changed since `when` — its direct writes and its merges — as ordinary writes.
//!
//! The agent's changes are found by transaction: each statement of an agent that wrote or merged has an
//! audit row with its xid (governance/agents.sql), and history (main) and deltas (worlds) carry the xid of
//! every change. A row changed after the agent's last change by anyone else (another run, with WHERE
//! run_id) refuses the undo with 40001, naming up to 10, unless SKIP CHANGED leaves it.
use super::{key_text_of, planned, world_changes_since};
use crate::api::{raise, raise_with};
use crate::sql_text::json_object_expr;
use crate::merge::{apply_plan, short_name};
use super::plan_keyed_tables;
use crate::storage::as_internal;
use crate::storage::overlay::{with_world, world_by_num};
use pgrx::prelude::*;

pub fn undo_agent(name: &str, since: String, skip_changed: bool, run_id: Option<String>) -> String {
    crate::api::refuse_in_transaction("UNDO AGENT");
    let _timer = crate::metrics::time(crate::metrics::Timed::Undo);
    let session = crate::storage::overlay::session_world();
    if session.as_ref().is_some_and(|w| w.read_only) {
        raise("25006", "cannot execute UNDO AGENT in a read-only moment of the past");
    }
    let world = session.map(|w| w.num).unwrap_or(0);
    as_internal(|| {
        crate::governance::agents::require("undo", None);
        // inside the history window (22023)
        crate::spi_calls::get_one_with_args::<String>("SELECT worlds._in_window($1::timestamptz)::text", &[since.clone().into()]).ok();
        let known = crate::spi_calls::get_one_with_args::<bool>(
            "SELECT EXISTS (SELECT 1 FROM worlds.agent WHERE name = $1) OR EXISTS (SELECT 1 FROM worlds.audit WHERE agent = $1)",
            &[name.into()],
        )
        .ok()
        .flatten()
        .unwrap_or(false);
        if !known {
            raise("42704", format!("agent \"{name}\" does not exist"));
        }
        let xids: Vec<String> = crate::spi_calls::rows(
            "SELECT DISTINCT xid::text FROM worlds.audit
             WHERE agent = $1 AND at >= $2::timestamptz AND action IN ('write', 'merge', 'rebase', 'restore', 'undo merge', 'undo agent')
               AND ($3::text IS NULL OR run ->> 'run_id' = $3)",
            None,
            &[name.into(), since.clone().into(), run_id.clone().into()],
            |t| t.filter_map(|r| r.get::<String>(1).ok().flatten()).collect(),
        )
        .unwrap_or_else(|e| raise("XX000", format!("{e}")));
        let mut plan = Vec::new();
        let mut changed_since = Vec::new();
        if !xids.is_empty() {
            // (each table's locks kept only when the plan has rows of it)
            plan_keyed_tables(&mut plan, |l, plan| {
                let rows = if world == 0 { main_rows(l, &xids, &since) } else { world_rows(l, world, &xids, &since) };
                for (k, then, now, again) in rows {
                    let key = key_text_of(&k, &l.key_columns);
                    if again {
                        changed_since.push(format!("{}/{}", short_name(&l.table_name), key));
                        continue;
                    }
                    if then != now {
                        plan.push(planned(l, key, k, now, then));
                    }
                }
            });
        }
        if !skip_changed && !changed_since.is_empty() {
            let shown = changed_since.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
            raise_with(
                "40001",
                format!(
                    "undoing agent {name}: rows changed by others since: {shown}{}; nothing was undone",
                    if changed_since.len() > 10 { ", and more" } else { "" }
                ),
                None,
                Some("UNDO AGENT ... SKIP CHANGED leaves those rows and undoes the rest.".into()),
            );
        }
        let n = if world == 0 { apply_plan(&plan, None) } else { with_world(world_by_num(world), || apply_plan(&plan, None)) };
        let world_name = if world == 0 { "main".to_string() } else { crate::guc::current_world_setting().to_string_lossy().into_owned() };
        crate::governance::agents::audit("undo agent", &world_name, Some(n as i64));
        format!("UNDO AGENT {n}")
    })
}

type KeyRow = (serde_json::Value, Option<serde_json::Value>, Option<serde_json::Value>, bool);

/// Main: each key the agent's transactions changed since `since` — the row before its first change, the
/// row now, and whether someone else changed it after its last.
fn main_rows(l: &crate::storage::Layout, xids: &[String], since: &str) -> Vec<KeyRow> {
    super::undo_rows(l, "h._w_xid = ANY ($1::text[]::xid8[]) AND h._w_at >= $2::timestamptz", &[xids.to_vec().into(), since.into()])
}

/// A world: each key the agent's transactions wrote in it since `since` — the row the world saw then,
/// the row now, and whether anyone else wrote the key there since (then is not the agent's alone to
/// put back).
fn world_rows(l: &std::rc::Rc<crate::storage::Layout>, num: i32, xids: &[String], since: &str) -> Vec<KeyRow> {
    if l.delta == pg_sys::Oid::INVALID {
        return Vec::new();
    }
    let kobj = json_object_expr("d", &l.key_columns);
    let sql = format!(
        "SELECT {kobj}, bool_or(NOT (d._w_xid = ANY ($2::text[]::xid8[]))), bool_or(d._w_xid = ANY ($2::text[]::xid8[]))
         FROM {delta} d WHERE d._w_world = $1 AND d._w_at >= $3::timestamptz GROUP BY 1",
        delta = l.delta_name,
    );
    let keys: std::collections::HashMap<String, (bool, bool)> = crate::spi_calls::rows(&sql, None, &[num.into(), xids.to_vec().into(), since.into()], |t| {
        t.filter_map(|r| {
            Some((r.get::<pgrx::JsonB>(1).ok().flatten()?.0.to_string(), (r.get::<bool>(2).ok().flatten().unwrap_or(false), r.get::<bool>(3).ok().flatten().unwrap_or(false))))
        })
        .collect()
    })
    .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    world_changes_since(l, num, since)
        .into_iter()
        .filter_map(|(k, then, now)| {
            let (others, agents) = keys.get(&k.to_string()).copied()?;
            agents.then_some((k, then, now, others))
        })
        .collect()
}
