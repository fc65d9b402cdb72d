//! `worlds.sql(text)`: runs a statement of the spec written exactly as there. The grammar is
//! `worlds_core::grammar`; each statement maps to the named-argument function in schema `worlds` that
//! does the work, called with its values as parameters (never spliced into SQL).
//! Returns one JSON object per result row with the spec's column names, or {"tag": "<command tag>"}.
use crate::spi_calls::Fresh;
use crate::api::{raise, raise_with};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use crate::governance::readers::registry;
use crate::merge::{self, DiffRequest, MergeRequest, RebaseRequest};
use worlds_core::grammar::{self, AlterAction, Meta, MetaValue, Resolution, RestoreTarget, Side, Statement};
use worlds_core::merge::Pick;

extension_sql_file!("simulate.sql", name = "simulate", requires = ["lifecycle"]);

mod disk;
mod readers;
mod simulate;
mod simulate_worker;
mod simulate_world;
pub use simulate_worker::on_abort as simulate_on_abort;
use crate::backend_local::BackendLocal;

#[pg_extern(name = "sql")]
fn sql_statement(statement: &str) -> SetOfIterator<'static, JsonB> {
    // worlds a restored dump brought are made by the first worlds statement after the restore (by the
    // primary: a standby has them when it replays that)
    if !crate::spi_calls::in_recovery() {
        crate::catalog::dump::restore_pending();
    }
    // a SELECT reading tables AS OF a moment: each reference becomes a sub-query reading the table as it
    // was (its columns as they were then; a table dropped since from its history), run as the caller
    match worlds_core::as_of::rewrite_as_of_with(statement, as_of_reference) {
        Ok(Some(query)) => {
            let _timer = crate::metrics::time(crate::metrics::Timed::AsOf);
            let query = query.trim_end().trim_end_matches(';').to_string();
            let first = query.split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
            if first == "select" || first == "with" {
                return SetOfIterator::new(select_rows(&query).into_iter().map(JsonB));
            }
            // INSERT ... SELECT, UPDATE ... FROM, DELETE ... USING, CREATE TABLE ... AS reading the past:
            // run as the caller (routed like any statement), its command tag back
            let n = Spi::connect_mut(|c| c.update(&query, None, &[]).map(|t| t.len()).unwrap_or_else(|e| raise("XX000", format!("{e}"))));
            let command = match first.as_str() {
                "insert" => format!("INSERT 0 {n}"),
                "update" => format!("UPDATE {n}"),
                "delete" => format!("DELETE {n}"),
                _ => format!("SELECT {n}"),
            };
            return SetOfIterator::new(tag(command).into_iter().map(JsonB));
        }
        Ok(None) => {}
        Err(e) => raise_with(e.sqlstate, e.message, Some(format!("at character {} of the statement", e.position)), None),
    }
    let parsed = match grammar::parse(statement) {
        Ok(s) => s,
        Err(e) => raise_with(
            e.sqlstate,
            e.message,
            Some(format!("at character {} of the statement", e.position)),
            None,
        ),
    };
    // a SIMULATE script stays in its world (0A000)
    if crate::governance::read_only::confined() {
        if let Some(command) = parsed.writes().or(match &parsed {
            Statement::Switch { tag, .. } => Some(*tag),
            _ => None,
        }) {
            crate::governance::read_only::refuse_leaving(&format!("run {command}"));
        }
    }
    // a standby, or SET TRANSACTION READ ONLY: as Postgres refuses an INSERT there (25006)
    if let Some(command) = parsed.writes() {
        if unsafe { pg_sys::XactReadOnly } {
            raise("25006", format!("cannot execute {command} in a read-only transaction"));
        }
    }
    SetOfIterator::new(run(parsed).into_iter().map(JsonB))
}

/// `table AS OF when alias` as a sub-query: the moment is evaluated first (22P02 / 22023 as AS OF says),
/// then worlds._as_of_query builds the read for the schema of that moment.
fn as_of_reference(table: &str, when: &str, alias: &str) -> String {
    crate::governance::agents::require("read", None);
    if let Some(world) = crate::storage::overlay::session_world() {
        if world.num > 0 && !world.read_only {
            return world_as_of_reference(&world.name, table, when, alias);
        }
        if world.read_only && world.num != -1 {
            // a session in a world's past ('ww@when'): AS OF reads that world as it was then, not main
            let name = world.name.split('@').next().unwrap_or_default().to_string();
            return world_as_of_reference(&name, table, when, alias);
        }
    }
    // `when` is an expression of the caller's own statement (a literal, a cast, a sub-query...): it is
    // evaluated as SQL, as the caller, as the statement itself would be; the table name is a parameter
    if fixed_time(when) {
        // a time written out: read from (or kept in) the cache of that moment. The moment is the caller's own
        // expression, evaluated as the caller; the role must may read the table now (42501), checked as the
        // caller; the cache itself is pg_worlds' own (its copies are read through views that check the
        // reader's rights on the table again)
        let at = crate::spi_calls::get_one::<String>(&format!("SELECT worlds.moment({when})::text")).ok().flatten();
        crate::spi_calls::run_with_args("SELECT worlds._require_select(to_regclass($1))", &[table.into()])
            .unwrap_or_else(|e| raise("XX000", format!("{e}")));
        let cached = at.and_then(|at| {
            crate::storage::as_internal(|| {
                let rel = crate::storage::in_session_search_path(|| {
                    crate::spi_calls::get_one_with_args::<pg_sys::Oid>("SELECT to_regclass($1)::oid", &[table.into()])
                })
                .ok()
                .flatten();
                crate::spi_calls::get_one_with_args::<String>(
                    "SELECT c::text FROM worlds._as_of_cached($1::oid::regclass, $2::timestamptz) c",
                    &[rel.into(), at.into()],
                )
            })
            .ok()
            .flatten()
        });
        if let Some(copy) = cached {
            return format!("(SELECT * FROM {copy}) AS {alias}");
        }
    }
    crate::spi_calls::run_with_args("SELECT worlds._require_select(to_regclass($1))", &[table.into()]).unwrap_or_else(|e| raise("XX000", format!("{e}")));
    let query = crate::spi_calls::rows(&format!("SELECT worlds._as_of_query($1, worlds.moment({when}), false)"), None, &[table.into()], |mut t| {
        t.next().and_then(|r| r.get::<String>(1).ok().flatten())
    })
    .unwrap_or_else(|e| raise("XX000", format!("{e}")))
    .unwrap_or_default();
    format!("({query}) AS {alias}")
}

fn tag(t: impl Into<String>) -> Vec<serde_json::Value> {
    vec![serde_json::json!({ "tag": t.into() })]
}

/// Runs a query returning rows; each becomes a JSON object (to_jsonb of the row, so column names are
/// the function's output columns: the spec's).
fn rows(sql: &str, args: &[DatumWithOid]) -> Vec<serde_json::Value> {
    let wrapped = format!("SELECT to_jsonb(r.*) FROM ({sql}) r");
    // (its values as JSON read the same whatever the session set: DateStyle, IntervalStyle, ...)
    crate::storage::with_fixed_output(|| {
        crate::spi_calls::jsonb_rows(&wrapped, args).unwrap_or_else(|e| raise("XX000", format!("{e}")))
    })
}

/// Is the moment a time written out as a string ('2026-09-20 10:00')? Relative ones (now, '-1 hour') name
/// a new moment each time: caching those would only churn.
fn fixed_time(when: &str) -> bool {
    let w = when.trim();
    if w.len() < 2 || !w.starts_with('\'') || !w.ends_with('\'') {
        return false;
    }
    let inner = w[1..w.len() - 1].replace("''", "'");
    let inner = inner.trim().to_ascii_lowercase();
    // (a cached moment is keyed by the time it resolved to, so this decides only what is worth keeping)
    !inner.is_empty() && !inner.starts_with(['-', '+']) && !["now", "today", "tomorrow", "yesterday"].iter().any(|w| inner.contains(w))
}

/// AS OF inside a world reads the world as it was ('name@when': its own writes up to then, on what it
/// stood on): the table is read once through that moment of the world into a temporary table (dropped at
/// commit), with the table's columns (a world's schema is main's). O(table); 22023 before the world
/// existed, 55000 before its last rebase.
fn world_as_of_reference(world: &str, table: &str, when: &str, alias: &str) -> String {
    // `when` is the caller's own expression, evaluated as the caller (see as_of_reference)
    let at = crate::spi_calls::get_one::<String>(&format!("SELECT worlds.moment({when})::text")).ok().flatten().unwrap_or_default();
    let past = crate::storage::overlay::past_of(world, &at);
    let n = AS_OF_COPIES.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let copy = format!("_worlds_as_of_{n}");
    let Some(relation) = crate::spi_calls::get_one_with_args::<String>("SELECT to_regclass($1)::text", &[table.into()]).ok().flatten() else {
        raise("42P01", format!("relation \"{table}\" does not exist"));
    };
    // read as the caller, routed to the world's moment
    crate::storage::overlay::with_world(Some(past), || {
        crate::spi_calls::run(&format!("CREATE TEMP TABLE {copy} ON COMMIT DROP AS SELECT * FROM {relation}"))
    })
    .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    format!("(SELECT * FROM pg_temp.{copy}) AS {alias}")
}

/// Numbers the temporary copies AS OF makes inside a world.
static AS_OF_COPIES: BackendLocal<std::cell::Cell<u64>> = BackendLocal::new(std::cell::Cell::new(0));

/// A user's SELECT as JSON objects, keyed by its result column names; a name that repeats (`now.status,
/// old.status`) gets a suffix (`status_1`), as a JSON object keeps one value per key.
fn select_rows(sql: &str) -> Vec<serde_json::Value> {
    let names: Vec<String> = Spi::connect(|c| {
        let t = c.fresh(&format!("SELECT * FROM ({sql}) r LIMIT 0"), None, &[]).unwrap_or_else(|e| raise("XX000", format!("{e}")));
        (1..=t.columns().unwrap_or(0)).map(|i| t.column_name(i).unwrap_or_default()).collect()
    });
    let unique = worlds_core::names::unique_column_names(&names);
    if unique == names {
        return rows(sql, &[]);
    }
    let aliases = crate::sql_text::column_list(&unique);
    rows(&format!("SELECT * FROM ({sql}) r({aliases})"), &[])
}

/// Runs a function returning a tag (text) and returns it as {"tag": ...}.
fn call_tag(sql: &str, args: &[DatumWithOid]) -> Vec<serde_json::Value> {
    let t: Option<String> = Spi::connect_mut(|c| {
        c.update(sql, None, args)
            .unwrap_or_else(|e| raise("XX000", format!("{e}")))
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
        Statement::Simulate(sim) => simulate::simulate(*sim),
        Statement::Replay { world, keep_as } => simulate::replay(&world, keep_as),
        Statement::CreateWorld { name, source, meta, .. } => call_tag(
            "SELECT worlds.create_world(name => $1, source => $2, meta => $3::jsonb)",
            &[name.into(), source.into(), meta_json(meta).into()],
        ),
        Statement::Switch { name, tag: t } => {
            call_tag("SELECT worlds.switch_world(name => $1)", &[name.into()]);
            // a session in the past gets its tables' views at once (see time/past_schema.rs)
            crate::route::sync_past_schema();
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
        Statement::Diff { from, to, readers: true, .. } => readers::diff_readers(from, to),
        Statement::Diff { from, to: Some(to), as_sql, limit, .. } => {
            let from = from.unwrap_or_else(|| crate::guc::current_world_setting().to_string_lossy().into_owned());
            merge::diff_to(&from, &to, as_sql, limit)
        }
        Statement::Diff { from, to: None, as_sql, limit, .. } => merge::diff(DiffRequest { world: from, as_sql, limit }),
        Statement::Merge { name, clauses: c, .. } => merge::merge(MergeRequest {
            world: name,
            into: c.into,
            only_tables: c.only_tables,
            only_keys: c.only_keys,
            using_ours: c.using.map(|s| s == Side::Ours),
            by_columns: c.by_columns,
            resolve: picks(c.resolve),
            confirm: c.confirm,
            confirm_deletes: c.confirm_deletes,
            target: c.target,
            at_version: c.at_version,
            dry_run: c.dry_run,
        }),
        Statement::Rebase { name, using, by_columns, resolve, at_version } => merge::rebase(RebaseRequest {
            world: name,
            using_ours: using.map(|s| s == Side::Ours),
            by_columns,
            resolve: picks(resolve),
            at_version,
        }),
        Statement::ShowHistory { name, limit } => rows(
            "SELECT * FROM worlds.show_history(world => $1, \"limit\" => $2)",
            &[name.into(), limit.unwrap_or(100).into()],
        ),
        Statement::Checkpoint { name, label } => {
            call_tag("SELECT worlds.checkpoint_world(name => $1, label => $2)", &[name.into(), label.into()])
        }
        Statement::Restore { name, to } => {
            let (when, checkpoint) = match to {
                RestoreTarget::When(text) => (Some(moment_text(&text)), None),
                RestoreTarget::Expr(expr) => (Some(moment_expr(&expr)), None),
                RestoreTarget::Checkpoint(label) => (None, Some(label)),
            };
            tag(crate::time::restore(&name, when, checkpoint))
        }
        Statement::UndoMerge { name, skip_changed } => tag(crate::time::undo_merge(&name, skip_changed)),
        Statement::SetHistoryRetention { value } => {
            call_tag("SELECT worlds.set_history_retention(value => $1)", &[value.into()])
        }
        Statement::ShowHistoryRetention => rows("SELECT worlds.history_retention() AS history_retention", &[]),
        Statement::CreateAgent { name, settings } => rows(
            "SELECT * FROM worlds.create_agent(agent_name => $1, settings => $2::jsonb)",
            &[name.into(), pairs_json(&settings).to_string().into()],
        ),
        Statement::AlterAgent { name, settings } => rows(
            "SELECT * FROM worlds.alter_agent(name => $1, settings => $2::jsonb)",
            &[name.into(), pairs_json(&settings).to_string().into()],
        ),
        Statement::DropAgent { name } => call_tag("SELECT worlds.drop_agent(name => $1)", &[name.into()]),
        Statement::ShowAgents => rows("SELECT * FROM worlds.show_agents()", &[]),
        Statement::CreatePolicy { name, settings } => rows(
            "SELECT * FROM worlds.create_merge_policy(policy_name => $1, settings => $2::jsonb)",
            &[name.into(), pairs_json(&settings).to_string().into()],
        ),
        Statement::AlterPolicy { name, settings } => rows(
            "SELECT * FROM worlds.alter_merge_policy(policy_name => $1, settings => $2::jsonb)",
            &[name.into(), pairs_json(&settings).to_string().into()],
        ),
        Statement::DropPolicy { name, cascade } => {
            call_tag("SELECT worlds.drop_merge_policy(policy_name => $1, \"cascade\" => $2)", &[name.into(), cascade.into()])
        }
        Statement::ShowPolicies => rows("SELECT * FROM worlds.show_merge_policies()", &[]),
        Statement::CreateCheck { name, replace, tables, settings, query } => call_tag(
            "SELECT worlds.create_merge_check(check_name => $1, replace => $2, tables => $3, settings => $4::jsonb, query => $5)",
            &[name.into(), replace.into(), tables.into(), pairs_json(&settings).to_string().into(), query.into()],
        ),
        Statement::DropCheck { name } => call_tag("SELECT worlds.drop_merge_check(check_name => $1)", &[name.into()]),
        Statement::ShowChecks => rows("SELECT * FROM worlds.show_merge_checks()", &[]),
        Statement::ShowReviews => rows("SELECT * FROM worlds.show_reviews()", &[]),
        Statement::ShowReaders => rows("SELECT * FROM worlds.show_readers()", &[]),
        Statement::ShowCheckpoints { world } => rows("SELECT * FROM worlds.show_checkpoints($1)", &[world.into()]),
        Statement::ShowMetrics => rows("SELECT * FROM worlds.show_metrics()", &[]),
        Statement::ShowStorage { world } => rows("SELECT * FROM worlds.show_storage($1)", &[world.into()]),
        Statement::ShowDisk => rows("SELECT * FROM worlds.show_disk()", &[]),
        Statement::RegisterReader { name, table, columns } => registry::register(&name, &table, &columns),
        Statement::UnregisterReader { name, table } => registry::unregister(&name, table.as_deref()),
        Statement::MarkReader { name } => registry::mark(&name),
        Statement::UnmarkReader { name } => registry::unmark(&name),
        Statement::UndoAgent { name, since, skip_changed, run_id } => {
            let when = match since {
                RestoreTarget::When(text) => moment_text(&text),
                RestoreTarget::Expr(expr) => moment_expr(&expr),
                RestoreTarget::Checkpoint(_) => raise("42601", "UNDO AGENT ... SINCE takes a time"),
            };
            tag(crate::time::undo_agent(&name, when, skip_changed, run_id))
        }
        Statement::CheckReads { world } => rows("SELECT * FROM worlds.check_reads($1)", &[world.into()]),
        Statement::ShowAudit { agent, limit } => rows(
            "SELECT * FROM worlds.show_audit(agent_name => $1, \"limit\" => $2)",
            &[agent.into(), limit.unwrap_or(100).into()],
        ),
    }
}

fn picks(resolve: Vec<(String, Resolution)>) -> Vec<(String, Pick)> {
    resolve
        .into_iter()
        .map(|(k, r)| {
            let p = match r {
                Resolution::Ours => Pick::Ours,
                Resolution::Theirs => Pick::Theirs,
                Resolution::Delete => Pick::Delete,
                Resolution::Row(json) => Pick::Row(
                    serde_json::from_str(&json).unwrap_or_else(|e| raise("22P02", format!("RESOLVE row for '{k}' isn't JSON: {e}"))),
                ),
            };
            (k, p)
        })
        .collect()
}

fn side(using: Option<&str>) -> Option<bool> {
    match using.map(|s| s.to_ascii_lowercase()) {
        None => None,
        Some(s) if s == "ours" => Some(true),
        Some(s) if s == "theirs" => Some(false),
        Some(s) => raise("22023", format!("using must be ours or theirs, not {s}")),
    }
}

/// RESOLVE as a JSON object: {"t/1": "ours" | "theirs" | "delete" | {row}}.
fn resolve_json(resolve: Option<crate::api::JsonArg>) -> Vec<(String, Pick)> {
    let Some(crate::api::JsonArg(serde_json::Value::Object(m))) = resolve else { return Vec::new() };
    m.into_iter()
        .map(|(k, v)| {
            let p = match &v {
                serde_json::Value::String(s) if s.eq_ignore_ascii_case("ours") => Pick::Ours,
                serde_json::Value::String(s) if s.eq_ignore_ascii_case("theirs") => Pick::Theirs,
                serde_json::Value::String(s) if s.eq_ignore_ascii_case("delete") => Pick::Delete,
                serde_json::Value::Object(_) => Pick::Row(v.clone()),
                _ => raise("22023", format!("RESOLVE for '{k}' must be ours, theirs, delete or a row as a JSON object")),
            };
            (k, p)
        })
        .collect()
}

/// DIFF as rows of JSON objects (the typed function worlds.diff wraps this).
#[pg_extern]
fn _diff(world: Option<&str>, as_sql: Option<bool>, lim: Option<i64>) -> SetOfIterator<'static, JsonB> {
    let as_sql = as_sql.unwrap_or(false);
    SetOfIterator::new(merge::diff(DiffRequest { world: world.map(str::to_string), as_sql, limit: lim }).into_iter().map(JsonB))
}

/// DIFF WORLD a TO b [AS SQL] [LIMIT n] (`worlds.diff_to`, `worlds.diff_to_as_sql`).
#[pg_extern]
fn _diff_to(from: Option<&str>, to: Option<&str>, as_sql: Option<bool>, lim: Option<i64>) -> SetOfIterator<'static, JsonB> {
    let to = to.unwrap_or_else(|| raise("22004", "DIFF ... TO needs a world to compare with: \"to\" must not be null"));
    let from = from.map(str::to_string).unwrap_or_else(|| crate::guc::current_world_setting().to_string_lossy().into_owned());
    SetOfIterator::new(merge::diff_to(&from, to, as_sql.unwrap_or(false), lim).into_iter().map(JsonB))
}

/// DIFF [WORLD a [TO b]] READERS (`worlds.diff_readers`).
#[pg_extern]
fn _diff_readers(world: Option<&str>, to: Option<&str>) -> SetOfIterator<'static, JsonB> {
    SetOfIterator::new(readers::diff_readers(world.map(str::to_string), to.map(str::to_string)).into_iter().map(JsonB))
}

/// UNDO AGENT name SINCE when [SKIP CHANGED] [WHERE run_id = 'id'] (`worlds.undo_agent`): its tag.
#[pg_extern]
fn undo_agent(
    agent: Option<&str>,
    since: Option<pgrx::datum::TimestampWithTimeZone>,
    skip_changed: default!(Option<bool>, false),
    run_id: default!(Option<&str>, "NULL"),
) -> String {
    let agent = agent.unwrap_or_else(|| raise("22004", "UNDO AGENT needs an agent: agent must not be null"));
    let since = since.unwrap_or_else(|| raise("22004", "UNDO AGENT needs a time: since must not be null"));
    let skip_changed = skip_changed.unwrap_or(false);
    let when = crate::spi_calls::get_one_with_args::<String>("SELECT worlds.moment($1)::text", &[since.into()]).ok().flatten().unwrap_or_default();
    crate::time::undo_agent(agent, when, skip_changed, run_id.map(str::to_string))
}

#[allow(clippy::too_many_arguments)]
#[pg_extern]
fn _merge(
    world: Option<&str>,
    into: Option<&str>,
    only_tables: Option<Vec<Option<String>>>,
    only_keys: Option<Vec<Option<String>>>,
    using: Option<&str>,
    by_columns: Option<bool>,
    resolve: Option<crate::api::JsonArg>,
    confirm: Option<bool>,
    confirm_deletes: Option<i64>,
    target: Option<i64>,
    at_version: Option<i64>,
    dry_run: Option<bool>,
) -> SetOfIterator<'static, JsonB> {
    let dry_run = dry_run.unwrap_or(false);
    SetOfIterator::new(
        merge::merge(MergeRequest {
            world: world.map(str::to_string),
            into: into.map(str::to_string),
            only_tables: no_nulls(only_tables, "ONLY TABLES"),
            only_keys: no_nulls(only_keys, "ONLY KEYS"),
            using_ours: side(using),
            by_columns: by_columns.unwrap_or(false),
            resolve: resolve_json(resolve),
            confirm: confirm.unwrap_or(false),
            confirm_deletes,
            target,
            at_version,
            dry_run,
        })
        .into_iter()
        .map(JsonB),
    )
}

/// A list argument's elements: a null one is bad input (22004), as a NULL in a NOT NULL column.
fn no_nulls(list: Option<Vec<Option<String>>>, clause: &str) -> Option<Vec<String>> {
    list.map(|l| {
        l.into_iter()
            .map(|e| e.unwrap_or_else(|| raise("22004", format!("{clause}: an element of the list is null"))))
            .collect()
    })
}

#[pg_extern]
fn _rebase(world: Option<&str>, using: Option<&str>, by_columns: Option<bool>, resolve: Option<crate::api::JsonArg>, at_version: Option<i64>) -> String {
    let out = merge::rebase(RebaseRequest {
        world: world.map(str::to_string),
        using_ours: side(using),
        by_columns: by_columns.unwrap_or(false),
        resolve: resolve_json(resolve),
        at_version,
    });
    out.first().and_then(|v| v["tag"].as_str().map(str::to_string)).unwrap_or_default()
}

pgrx::extension_sql!(
    r#"
-- DIFF [WORLD world] [AS SQL] [LIMIT n], with the spec's columns.
CREATE FUNCTION worlds.diff(world text DEFAULT NULL, "limit" bigint DEFAULT NULL)
RETURNS TABLE ("table" text, id text, change text, before jsonb, after jsonb, columns jsonb)
LANGUAGE sql AS $$
    SELECT r."table", r.id, r.change, r.before, r.after, r.columns
    FROM worlds._diff(world, false, "limit") j,
         jsonb_to_record(j) AS r("table" text, id text, change text, before jsonb, after jsonb, columns jsonb)
$$;
CREATE FUNCTION worlds.diff_as_sql(world text DEFAULT NULL, "limit" bigint DEFAULT NULL) RETURNS TABLE (sql text)
LANGUAGE sql AS $$ SELECT j ->> 'sql' FROM worlds._diff(world, true, "limit") j $$;

-- DIFF WORLD a TO b [AS SQL] [LIMIT n]: what turns a into b (a null: the session's world).
CREATE FUNCTION worlds.diff_to("from" text, "to" text, "limit" bigint DEFAULT NULL)
RETURNS TABLE ("table" text, id text, change text, before jsonb, after jsonb, columns jsonb)
LANGUAGE sql AS $$
    SELECT r."table", r.id, r.change, r.before, r.after, r.columns
    FROM worlds._diff_to("from", "to", false, "limit") j,
         jsonb_to_record(j) AS r("table" text, id text, change text, before jsonb, after jsonb, columns jsonb)
$$;
CREATE FUNCTION worlds.diff_to_as_sql("from" text, "to" text, "limit" bigint DEFAULT NULL) RETURNS TABLE (sql text)
LANGUAGE sql AS $$ SELECT j ->> 'sql' FROM worlds._diff_to("from", "to", true, "limit") j $$;

-- DIFF [WORLD a [TO b]] READERS, with the spec's columns.
CREATE FUNCTION worlds.diff_readers(world text DEFAULT NULL, "to" text DEFAULT NULL)
RETURNS TABLE ("table" text, columns text, kind text, reader text, detail text, critical boolean)
LANGUAGE sql AS $$
    SELECT r."table", r.columns, r.kind, r.reader, r.detail, r.critical
    FROM worlds._diff_readers(world, "to") j,
         jsonb_to_record(j) AS r("table" text, columns text, kind text, reader text, detail text, critical boolean)
$$;

-- MERGE WORLD [world] [clauses]: returns its tag, MERGE n.
CREATE FUNCTION worlds.merge(world text DEFAULT NULL, "into" text DEFAULT NULL, only_tables text[] DEFAULT NULL,
                             only_keys text[] DEFAULT NULL, "using" text DEFAULT NULL, by_columns boolean DEFAULT false,
                             resolve jsonb DEFAULT NULL, confirm boolean DEFAULT false, confirm_deletes bigint DEFAULT NULL,
                             target bigint DEFAULT NULL, at_version bigint DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$
    SELECT j ->> 'tag' FROM worlds._merge(world, "into", only_tables, only_keys, "using", by_columns, resolve, confirm,
                                          confirm_deletes, target, at_version, false) j
$$;

-- MERGE WORLD ... DRY RUN, with the spec's columns.
CREATE FUNCTION worlds.merge_dry_run(world text DEFAULT NULL, "into" text DEFAULT NULL, only_tables text[] DEFAULT NULL,
                                     only_keys text[] DEFAULT NULL, "using" text DEFAULT NULL, by_columns boolean DEFAULT false,
                                     resolve jsonb DEFAULT NULL)
RETURNS TABLE ("table" text, id text, outcome text, detail text, base jsonb, ours jsonb, theirs jsonb, result jsonb, postgres jsonb)
LANGUAGE sql AS $$
    SELECT r.* FROM worlds._merge(world, "into", only_tables, only_keys, "using", by_columns, resolve, false, NULL, NULL, NULL, true) j,
         jsonb_to_record(j) AS r("table" text, id text, outcome text, detail text, base jsonb, ours jsonb, theirs jsonb, result jsonb, postgres jsonb)
$$;

-- REBASE WORLD [world] [USING OURS|THEIRS] [BY COLUMNS] [RESOLVE (...)] [AT VERSION n]: returns REBASE n.
CREATE FUNCTION worlds.rebase(world text DEFAULT NULL, "using" text DEFAULT NULL, by_columns boolean DEFAULT false,
                              resolve jsonb DEFAULT NULL, at_version bigint DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$ SELECT worlds._rebase(world, "using", by_columns, resolve, at_version) $$;
"#,
    name = "merge_functions",
    requires = [_diff, _diff_to, _diff_readers, _merge, _rebase],
);

/// A moment written as a string: its time (22P02 when it isn't one, 22023 outside the history window).
fn moment_text(text: &str) -> String {
    crate::spi_calls::get_one_with_args::<String>("SELECT worlds.moment($1::text)::text", &[text.into()])
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// A moment written as an expression (a timestamp, timestamptz or date value): evaluated with the
/// caller's rights. The grammar guarantees balanced parentheses and no `;`.
fn moment_expr(expr: &str) -> String {
    let sql = format!("SELECT worlds.moment(({expr}))::text");
    match crate::spi_calls::get_one::<String>(&sql) {
        Ok(Some(t)) => t,
        _ => raise("22P02", format!("AS OF needs a time: {expr} is not one")),
    }
}

#[pg_extern]
fn restore_world(name: Option<&str>, to_moment: Option<pgrx::datum::TimestampWithTimeZone>, to_checkpoint: Option<&str>) -> String {
    let name = name.unwrap_or_else(|| raise("22004", "RESTORE needs a world: name must not be null"));
    let when = to_moment.map(|t| {
        crate::spi_calls::get_one_with_args::<String>("SELECT worlds.moment($1)::text", &[t.into()]).ok().flatten().unwrap_or_default()
    });
    crate::time::restore(name, when, to_checkpoint.map(str::to_string))
}

#[pg_extern]
fn undo_merge(name: &str, skip_changed: default!(bool, false)) -> String {
    crate::time::undo_merge(name, skip_changed)
}
