//! The declared-scope gate (spec, "Declared scope"): what a world said at its fork it would change
//! (may_change, tenant, max_rows, max_deletes), resolved once at the fork and kept in its metadata
//! (`_worlds_scope`, hidden from SHOW WORLDS' meta, shown as its `scope` column), and the merge held
//! to it: a function over the merge's plan returning its breaches (`worlds_core::scope::breaches`), so
//! the merge (42501), its DRY RUN's blocked row and SHOW REVIEWS give the same reasons.
//!
//! Also the fork's and ALTER WORLD's rules for it and for check_reads: an agent's policy with
//! check_reads turns it on (the agent can't turn it off), require_scope refuses a fork declaring neither
//! may_change nor tenant, an agent declares at most its policy's max_rows / max_deletes, and only people
//! change a scope.
use crate::api::raise;
use crate::plan::Planned;
use crate::world::World;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{Map, Value};
use worlds_core::merge::Outcome;
use worlds_core::scope::{self, Allowed, RowChange, Scope};

/// The metadata key the resolved scope is kept under.
pub const KEY: &str = "_worlds_scope";

/// A table of main by its dotted name as SQL reads it (the session's search_path): (schema, name, oid).
fn table_named(parts: &[String]) -> Option<(String, String, pg_sys::Oid)> {
    let text = parts.iter().map(|p| crate::sql_text::quote_ident(p).to_string()).collect::<Vec<_>>().join(".");
    crate::storage::in_caller_search_path(|| crate::spi_calls::rows(
        "SELECT n.nspname::text, c.relname::text, c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE c.oid = pg_catalog.to_regclass($1) AND c.relkind IN ('r', 'p')",
        None,
        &[text.as_str().into()],
        |mut t| t.next().and_then(|r| Some((r.get::<String>(1).ok()??, r.get::<String>(2).ok()??, r.get::<pg_sys::Oid>(3).ok()??))),
    ))
    .ok()
    .flatten()
}

fn has_column(relid: pg_sys::Oid, column: &str) -> bool {
    crate::spi_calls::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped)",
        &[relid.into(), column.into()],
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The scope the metadata declares, names resolved (None: it declares none). 42P01 for a name that is
/// no table or column of main, 42703 for a may_change table without the tenant's column, 22023 for a
/// value that isn't one.
pub fn resolve(meta: &Map<String, Value>) -> Option<Scope> {
    if !scope::KEYS.iter().any(|k| meta.get(*k).is_some_and(|v| !v.is_null())) {
        return None;
    }
    let mut s = Scope::default();
    let mut tables: Vec<(String, pg_sys::Oid)> = Vec::new();
    if let Some(v) = meta.get("may_change").filter(|v| !v.is_null()) {
        let text = match v {
            Value::Array(items) => items.iter().map(text_of).collect::<Vec<_>>().join(", "),
            other => text_of(other),
        };
        let names = scope::may_change_names(&text).unwrap_or_else(|e| raise("22023", format!("may_change: {e}")));
        let mut allowed = Vec::new();
        for parts in names {
            let shown = parts.join(".");
            let missing = || -> ! { raise("42P01", format!("may_change names {shown}, which is no table or column of main")) };
            let found = match parts.len() {
                1 => table_named(&parts).map(|(sc, t, r)| (sc, t, r, None)),
                2 => match table_named(&parts[..1]).filter(|(_, _, r)| has_column(*r, &parts[1])) {
                    Some((sc, t, r)) => Some((sc, t, r, Some(parts[1].clone()))),
                    None => table_named(&parts).map(|(sc, t, r)| (sc, t, r, None)),
                },
                _ => table_named(&parts[..2]).filter(|(_, _, r)| has_column(*r, &parts[2])).map(|(sc, t, r)| (sc, t, r, Some(parts[2].clone()))),
            };
            let (schema, table, relid, column) = found.unwrap_or_else(|| missing());
            tables.push((worlds_core::rules::TableName { schema: (schema != "public").then(|| schema.clone()), name: table.clone() }.to_string(), relid));
            let a = Allowed { schema, table, column };
            if !allowed.contains(&a) {
                allowed.push(a);
            }
        }
        s.may_change = Some(allowed);
    }
    if let Some(v) = meta.get("tenant").filter(|v| !v.is_null()) {
        let (col, value) = scope::tenant_from_json(v).unwrap_or_else(|e| raise("22023", e));
        for (name, relid) in &tables {
            if !has_column(*relid, &col) {
                raise(
                    "42703",
                    format!("tenant {col} is not a column of {name}, which may_change names: its rows can't be inside the tenant"),
                );
            }
        }
        s.tenant = Some((col, value));
    }
    for (key, slot) in [("max_rows", &mut s.max_rows), ("max_deletes", &mut s.max_deletes)] {
        if let Some(v) = meta.get(key).filter(|v| !v.is_null()) {
            *slot = Some(scope::parse_count(key, v).unwrap_or_else(|e| raise("22023", e)));
        }
    }
    s.intent = meta.get("intent").filter(|v| !v.is_null()).map(text_of);
    s.run = meta.get("run").filter(|v| !v.is_null()).map(text_of);
    Some(s)
}

/// The world's scope as kept in its metadata.
pub fn of_meta(meta: &Value) -> Option<Scope> {
    meta.get(KEY).and_then(Scope::from_json)
}

/// The merge-policy settings the fork rules read: (check_reads, require_scope, max_rows, max_deletes).
fn policy_fork_rules(policy: &str) -> (bool, bool, Option<i64>, Option<i64>) {
    crate::storage::as_internal(|| {
        crate::spi_calls::rows(
            "SELECT check_reads, require_scope, max_rows, max_deletes FROM worlds.merge_policy WHERE name = $1",
            None,
            &[policy.into()],
            |mut t| {
                t.next().map(|r| {
                    (
                        r.get::<bool>(1).ok().flatten().unwrap_or(false),
                        r.get::<bool>(2).ok().flatten().unwrap_or(false),
                        r.get::<i64>(3).ok().flatten(),
                        r.get::<i64>(4).ok().flatten(),
                    )
                })
            },
        )
        .ok()
        .flatten()
        .unwrap_or((false, false, None, None))
    })
}

/// check_reads as given: true or false (or their text).
fn bool_setting(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) if ["true", "on"].contains(&s.to_lowercase().as_str()) => true,
        Value::String(s) if ["false", "off"].contains(&s.to_lowercase().as_str()) => false,
        other => raise("22023", format!("check_reads must be true or false, not {other}")),
    }
}

fn with_scope(mut meta: Map<String, Value>) -> Map<String, Value> {
    match resolve(&meta) {
        Some(s) => meta.insert(KEY.into(), s.to_json()),
        None => meta.remove(KEY),
    };
    meta
}

/// `worlds._fork_meta(meta)`: CREATE WORLD's metadata as stored: the scope resolved, check_reads as the
/// forking agent's policy makes it. 42501 for a fork its policy refuses.
#[pg_extern(volatile, parallel_unsafe)]
fn _fork_meta(meta: crate::api::JsonArg) -> JsonB {
    let Value::Object(mut m) = meta.0 else { return JsonB(meta.0) };
    if let Some(v) = m.get("check_reads").cloned() {
        m.insert("check_reads".into(), Value::Bool(bool_setting(&v)));
    }
    let m = with_scope(m);
    let declared = m.get(KEY).and_then(Scope::from_json).unwrap_or_default();
    let mut m = m;
    if let Some(agent) = crate::governance::agents::session_agent() {
        if let Some(policy) = &agent.policy {
            let (check_reads, require_scope, max_rows, max_deletes) = policy_fork_rules(policy);
            let refuse = |why: String, hint: &str| -> ! {
                crate::api::raise_with(
                    "42501",
                    format!("permission denied: agent \"{}\" keeps to merge policy {policy}, which {why}", agent.name),
                    None,
                    Some(hint.into()),
                )
            };
            if require_scope && !declared.declares_what() {
                refuse("requires its forks to declare may_change or tenant (require_scope)".into(), "Fork again declaring what the world will change (may_change, tenant).");
            }
            for (key, mine, theirs) in [("max_rows", declared.max_rows, max_rows), ("max_deletes", declared.max_deletes, max_deletes)] {
                if let (Some(a), Some(b)) = (mine, theirs) {
                    if a > b {
                        refuse(format!("allows {key} {b}: the fork declares {key} {a}, more than that"), &format!("Fork again declaring {key} {b} or less."));
                    }
                }
            }
            if check_reads {
                m.insert("check_reads".into(), Value::Bool(true));
            }
        }
    }
    JsonB(Value::Object(m))
}

/// `worlds._alter_meta(world, old, new)`: ALTER WORLD's metadata as stored. check_reads is only turned
/// off (55000 otherwise: what the world read before isn't known), and not by an agent its policy holds
/// to it (42501); a scope is changed by people only (42501 for an agent).
#[pg_extern(volatile, parallel_unsafe)]
fn _alter_meta(world: &str, old: crate::api::JsonArg, new: crate::api::JsonArg) -> JsonB {
    let (Value::Object(o), Value::Object(mut n)) = (old.0, new.0) else { raise("22023", "world metadata must be a JSON object") };
    let was = o.get("check_reads").map(bool_setting).unwrap_or(false);
    if let Some(v) = n.get("check_reads").cloned().filter(|v| !v.is_null()) {
        n.insert("check_reads".into(), Value::Bool(bool_setting(&v)));
    }
    let now = n.get("check_reads").map(|v| !v.is_null() && bool_setting(v)).unwrap_or(false);
    let agent = crate::governance::agents::session_agent();
    if now && !was {
        crate::api::raise_with(
            "55000",
            format!("world {world} doesn't check its reads, and can't start now: what it read before isn't known"),
            None,
            Some("Fork a new world WITH (check_reads = true).".into()),
        );
    }
    if was && !now {
        if let Some(a) = &agent {
            if let Some(p) = a.policy.as_ref().filter(|p| policy_fork_rules(p).0) {
                raise("42501", format!("permission denied: agent \"{}\" keeps to merge policy {p}, whose worlds check their reads (check_reads)", a.name));
            }
        }
    }
    let changed = scope::KEYS.iter().any(|k| o.get(*k) != n.get(*k));
    if changed {
        if let Some(a) = &agent {
            raise("42501", format!("permission denied: only people change world {world}'s declared scope, not agent \"{}\"", a.name));
        }
        n = with_scope(n);
    } else if let Some(s) = o.get(KEY) {
        n.insert(KEY.into(), s.clone());
    }
    JsonB(Value::Object(n))
}

/// `worlds._scope_shown(meta)`: SHOW WORLDS' and SHOW REVIEWS' `scope` (null: none declared).
#[pg_extern(immutable, parallel_safe)]
fn _scope_shown(meta: crate::api::JsonArg) -> Option<JsonB> {
    of_meta(&meta.0).map(|s| JsonB(s.shown()))
}

/// The world's own changes the plan applies, as the scope judges them (before: the row at the fork,
/// after: the world's row; an update's columns: those the world changed).
fn row_changes(plan: &[Planned], tenant: Option<&str>) -> Vec<RowChange> {
    let mut has_col: Vec<(pg_sys::Oid, bool)> = Vec::new();
    let mut out = Vec::new();
    for p in plan {
        if matches!(p.decision.outcome, Outcome::Conflict(_)) || p.decision.result == p.row.theirs || p.row.ours == p.row.base {
            continue;
        }
        let obj = |v: &Option<Value>| v.as_ref().and_then(|v| v.as_object()).cloned();
        let (before, after) = (obj(&p.row.base), obj(&p.row.ours));
        let columns = match (&before, &after) {
            (Some(b), Some(a)) => a.iter().filter(|(k, v)| b.get(*k) != Some(*v)).map(|(k, _)| k.clone()).collect(),
            _ => Vec::new(),
        };
        let has_tenant_column = match tenant {
            None => true,
            Some(col) => match has_col.iter().find(|(r, _)| *r == p.layout.relid) {
                Some((_, h)) => *h,
                None => {
                    let h = has_column(p.layout.relid, col);
                    has_col.push((p.layout.relid, h));
                    h
                }
            },
        };
        let (schema, table) = crate::governance::policies::split_name(p.layout.table_name.as_str());
        out.push(RowChange { schema, table, key: p.row.key.clone(), before, after, columns, has_tenant_column });
    }
    out
}

/// The scope's breaches by this plan, and the world's scope (None: it keeps to it, or declares none).
pub fn breaches(plan: &[Planned], world: &World) -> Option<(Scope, Vec<String>)> {
    let meta = crate::spi_calls::get_one_with_args::<JsonB>("SELECT meta FROM worlds.world WHERE num = $1", &[world.num.into()]).ok().flatten()?;
    let s = of_meta(&meta.0).filter(|s| s.declares())?;
    let why = scope::breaches(&s, &row_changes(plan, s.tenant.as_ref().map(|(c, _)| c.as_str())));
    (!why.is_empty()).then_some((s, why))
}

/// Does the world declare a scope (may_change, tenant, max_rows, max_deletes)?
pub fn declared(world: &World) -> bool {
    crate::spi_calls::get_one_with_args::<JsonB>("SELECT meta FROM worlds.world WHERE num = $1", &[world.num.into()])
        .ok()
        .flatten()
        .and_then(|meta| of_meta(&meta.0))
        .is_some_and(|s| s.declares())
}

/// The gate's hold: the person's refusal (42501) and the same as a broken rule ("..., outside its
/// declared scope").
pub fn held(plan: &[Planned], world: &World) -> Option<crate::plan::Refusal> {
    let (s, why) = breaches(plan, world)?;
    Some(crate::plan::Refusal {
        code: "42501",
        message: scope::refusal(&world.name, &s, &why),
        hint: Some(format!(
            "Redo the work within its scope in a new world, or a person widens it: ALTER WORLD {} SET (may_change = ...).",
            world.name
        )),
        rule: format!("{}, outside its declared scope", why.join("; it ")),
    })
}
