//! `worlds.sql(text)`: runs a statement of the spec written exactly as there. The grammar is
//! `worlds_core::grammar`; each statement maps to the named-argument function in schema `worlds` that
//! does the work, called with its values as parameters (never spliced into SQL).
//! Returns one JSON object per result row with the spec's column names, or {"tag": "<command tag>"}.
use crate::api::{raise, raise_with};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use worlds_core::grammar::{self, AlterAction, Meta, MetaValue, Statement};

#[pg_extern(name = "sql")]
fn sql_statement(statement: &str) -> SetOfIterator<'static, JsonB> {
    let parsed = match grammar::parse(statement) {
        Ok(s) => s,
        Err(e) => raise_with(
            e.sqlstate,
            e.message,
            Some(format!("at character {} of the statement", e.position)),
            None,
        ),
    };
    SetOfIterator::new(run(parsed).into_iter().map(JsonB))
}

fn tag(t: impl Into<String>) -> Vec<serde_json::Value> {
    vec![serde_json::json!({ "tag": t.into() })]
}

/// Runs a query returning rows; each becomes a JSON object (to_jsonb of the row, so column names are
/// the function's output columns: the spec's).
fn rows(sql: &str, args: &[DatumWithOid]) -> Vec<serde_json::Value> {
    let wrapped = format!("SELECT to_jsonb(r) FROM ({sql}) r");
    Spi::connect_mut(|c| {
        c.update(&wrapped, None, args)
            .unwrap_or_else(|e| raise("XX000", format!("{e}")))
            .into_iter()
            .filter_map(|r| r.get::<JsonB>(1).ok().flatten().map(|j| j.0))
            .collect()
    })
}

/// Runs a function returning a tag (text) and returns it as {"tag": ...}.
fn call_tag(sql: &str, args: &[DatumWithOid]) -> Vec<serde_json::Value> {
    let t: Option<String> = Spi::connect_mut(|c| {
        c.update(sql, None, args)
            .unwrap_or_else(|e| raise("XX000", format!("{e}")))
            .into_iter()
            .next()
            .and_then(|r| r.get::<String>(1).ok().flatten())
    });
    tag(t.unwrap_or_default())
}

/// WITH (k = v, ...) as a JSON object; META '<json>' is parsed by Postgres (22P02 when it isn't JSON).
fn meta_json(meta: Option<Meta>) -> Option<String> {
    match meta? {
        Meta::Json(text) => Some(text),
        Meta::With(pairs) => Some(pairs_json(&pairs).to_string()),
    }
}

fn pairs_json(pairs: &[(String, MetaValue)]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (k, v) in pairs {
        let value = match v {
            MetaValue::Text(s) => serde_json::Value::String(s.clone()),
            MetaValue::Number(n) => serde_json::from_str(n).unwrap_or(serde_json::Value::String(n.clone())),
            MetaValue::Bool(b) => serde_json::Value::Bool(*b),
            MetaValue::Null => serde_json::Value::Null,
        };
        m.insert(k.clone(), value);
    }
    serde_json::Value::Object(m)
}

fn run(statement: Statement) -> Vec<serde_json::Value> {
    match statement {
        Statement::CreateWorld { name, source, meta, .. } => call_tag(
            "SELECT worlds.create_world(name => $1, source => $2, meta => $3::jsonb)",
            &[name.into(), source.into(), meta_json(meta).into()],
        ),
        Statement::Switch { name, tag: t } => {
            call_tag("SELECT worlds.switch_world(name => $1)", &[name.into()]);
            tag(t)
        }
        Statement::ShowWorlds => rows("SELECT * FROM worlds.show_worlds()", &[]),
        Statement::ShowBranches => rows("SELECT * FROM worlds.show_branches()", &[]),
        Statement::AlterWorld { name, action } => {
            let (set_meta, ttl, reset_ttl, pinned): (Option<String>, Option<String>, bool, Option<bool>) = match action {
                AlterAction::Set(pairs) => (Some(pairs_json(&pairs).to_string()), None, false, None),
                AlterAction::SetTtl(t) => (None, Some(t), false, None),
                AlterAction::ResetTtl => (None, None, true, None),
                AlterAction::SetPinned => (None, None, false, Some(true)),
                AlterAction::ResetPinned => (None, None, false, Some(false)),
            };
            rows(
                "SELECT * FROM worlds.alter_world(name => $1, set_meta => $2::jsonb, ttl => $3::interval, reset_ttl => $4, pinned => $5)",
                &[name.into(), set_meta.into(), ttl.into(), reset_ttl.into(), pinned.into()],
            )
        }
        Statement::DropWorld { name, if_exists, cascade, tag: t } => {
            call_tag(
                "SELECT worlds.drop_world(name => $1, if_exists => $2, cascade => $3)",
                &[name.into(), if_exists.into(), cascade.into()],
            );
            tag(t)
        }
        other => raise("0A000", format!("{} is not supported by this version of pg_worlds yet", statement_name(&other))),
    }
}

fn statement_name(s: &Statement) -> &'static str {
    match s {
        Statement::Diff { .. } => "DIFF",
        Statement::Merge { .. } => "MERGE WORLD",
        Statement::Rebase { .. } => "REBASE WORLD",
        Statement::ShowHistory { .. } => "SHOW HISTORY",
        Statement::UndoMerge { .. } => "UNDO MERGE",
        Statement::Restore { .. } => "RESTORE WORLD",
        Statement::Checkpoint { .. } => "CHECKPOINT WORLD",
        Statement::SetHistoryRetention { .. } => "ALTER SYSTEM SET history_retention",
        Statement::ShowHistoryRetention => "SHOW history_retention",
        _ => "this statement",
    }
}
