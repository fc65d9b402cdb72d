//! Declared scope (spec, "Declared scope"): what a world said at its fork it would change, and the
//! judgement of a merge against it. Pure: the extension resolves names and hands the rows over.
//!
//! A scope, as stored (JSON, the extension's canonical form):
//! `{"may_change": [{"schema": "public", "table": "leads", "column": "status"}, ...] | null,
//!   "tenant": {"column": "org_id", "value": 42} | null, "max_rows": n | null, "max_deletes": n | null,
//!   "intent": text | null, "run": text | null}`.
use crate::rules::{identifiers, split_list, TableName};
use serde_json::{json, Map, Value};

/// The keys a world's scope is declared with.
pub const KEYS: [&str; 6] = ["may_change", "tenant", "max_rows", "max_deletes", "intent", "run"];

/// `may_change`'s items as dotted names (1 to 3 parts each), to be resolved as SQL reads them.
pub fn may_change_names(text: &str) -> Result<Vec<Vec<String>>, String> {
    let items = split_list(text);
    if items.is_empty() {
        return Err("may_change names no table".into());
    }
    items
        .iter()
        .map(|item| {
            let parts = identifiers(item)?;
            if parts.len() > 3 {
                return Err(format!("{item} is not a table or column (schema.table.column at most)"));
            }
            Ok(parts)
        })
        .collect()
}

/// `tenant = 'column = value'`: the column (read as SQL reads a name) and the value: a number, true or
/// false, or text in single quotes ('eu', with '' for a quote).
pub fn parse_tenant(text: &str) -> Result<(String, Value), String> {
    let bad = || format!("tenant {text:?} is not column = value (a number, true/false, or text in single quotes)");
    let (col, value) = split_outside_quotes(text).ok_or_else(bad)?;
    let mut cols = identifiers(col.trim()).map_err(|_| bad())?;
    if cols.len() != 1 {
        return Err(bad());
    }
    let v = value.trim();
    let value = if let Some(inner) = v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        if v.len() < 2 || inner.replace("''", "").contains('\'') {
            return Err(bad());
        }
        Value::String(inner.replace("''", "'"))
    } else if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
        Value::Bool(v.eq_ignore_ascii_case("true"))
    } else if is_number(v) {
        serde_json::from_str::<Value>(v).map_err(|_| bad())?
    } else {
        return Err(bad());
    };
    Ok((cols.remove(0), value))
}

/// `{"org_id": 42}` (META's form): one column, a number, boolean or string.
pub fn tenant_from_json(v: &Value) -> Result<(String, Value), String> {
    match v {
        Value::String(s) => parse_tenant(s),
        Value::Object(m) if m.len() == 1 => {
            let (k, v) = m.iter().next().unwrap();
            match v {
                Value::Number(_) | Value::Bool(_) | Value::String(_) => Ok((k.clone(), v.clone())),
                _ => Err(format!("tenant {{\"{k}\": {v}}}: the value must be a number, true/false or text")),
            }
        }
        _ => Err("tenant must be 'column = value', or one {\"column\": value} in META".into()),
    }
}

/// `max_rows` / `max_deletes`: a whole number, or one as text; not negative.
pub fn parse_count(key: &str, v: &Value) -> Result<i64, String> {
    let n = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(format!("{key} must be a whole number, not {v}")),
    }
}

fn is_number(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.chars().filter(|c| *c == '.').count() <= 1
        && s.chars().next().is_some_and(|c| c.is_ascii_digit())
        && s.chars().last().is_some_and(|c| c.is_ascii_digit())
}

/// `a = b` split at the first `=` outside quotes.
fn split_outside_quotes(text: &str) -> Option<(&str, &str)> {
    let (mut single, mut double) = (false, false);
    for (i, c) in text.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '=' if !single && !double => return Some((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    None
}

/// A table or column the scope allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Allowed {
    pub schema: String,
    pub table: String,
    pub column: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    pub may_change: Option<Vec<Allowed>>,
    pub tenant: Option<(String, Value)>,
    pub max_rows: Option<i64>,
    pub max_deletes: Option<i64>,
    pub intent: Option<String>,
    pub run: Option<String>,
}

fn shown_table(schema: &str, table: &str) -> String {
    TableName { schema: (schema != "public").then(|| schema.to_string()), name: table.to_string() }.to_string()
}

fn shown_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        other => other.to_string(),
    }
}

impl Scope {
    /// Declares anything to judge (intent and run alone are only shown).
    pub fn declares(&self) -> bool {
        self.may_change.is_some() || self.tenant.is_some() || self.max_rows.is_some() || self.max_deletes.is_some()
    }

    /// Declares what it changes (may_change or tenant: what require_scope asks for).
    pub fn declares_what(&self) -> bool {
        self.may_change.is_some() || self.tenant.is_some()
    }

    /// The stored form (None: no scope key given).
    pub fn to_json(&self) -> Value {
        json!({
            "may_change": self.may_change.as_ref().map(|l| l.iter().map(|a| json!({"schema": a.schema, "table": a.table, "column": a.column})).collect::<Vec<_>>()),
            "tenant": self.tenant.as_ref().map(|(c, v)| json!({"column": c, "value": v})),
            "max_rows": self.max_rows, "max_deletes": self.max_deletes, "intent": self.intent, "run": self.run,
        })
    }

    /// SHOW WORLDS' and SHOW REVIEWS' `scope`: as stored, tables named as a person reads them.
    pub fn shown(&self) -> Value {
        let mut v = self.to_json();
        if let Some(l) = &self.may_change {
            v["may_change"] = Value::Array(l.iter().map(|a| json!({"table": shown_table(&a.schema, &a.table), "column": a.column})).collect());
        }
        v
    }

    pub fn from_json(v: &Value) -> Option<Scope> {
        let o = v.as_object()?;
        let text = |k: &str| o.get(k).and_then(|x| x.as_str()).map(str::to_string);
        Some(Scope {
            may_change: o.get("may_change").and_then(|l| l.as_array()).map(|l| {
                l.iter()
                    .filter_map(|a| {
                        Some(Allowed {
                            schema: a.get("schema")?.as_str()?.to_string(),
                            table: a.get("table")?.as_str()?.to_string(),
                            column: a.get("column").and_then(|c| c.as_str()).map(str::to_string),
                        })
                    })
                    .collect()
            }),
            tenant: o.get("tenant").and_then(|t| Some((t.get("column")?.as_str()?.to_string(), t.get("value")?.clone()))),
            max_rows: o.get("max_rows").and_then(|n| n.as_i64()),
            max_deletes: o.get("max_deletes").and_then(|n| n.as_i64()),
            intent: text("intent"),
            run: text("run"),
        })
    }

    /// "may change leads.status, lists; tenant org_id = 42; max_rows 250; max_deletes 0"
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(l) = &self.may_change {
            let items: Vec<String> = l
                .iter()
                .map(|a| match &a.column {
                    Some(c) => format!("{}.{}", shown_table(&a.schema, &a.table), TableName { schema: None, name: c.clone() }),
                    None => shown_table(&a.schema, &a.table),
                })
                .collect();
            parts.push(format!("may change {}", items.join(", ")));
        }
        if let Some((c, v)) = &self.tenant {
            parts.push(format!("tenant {} = {}", TableName { schema: None, name: c.clone() }, shown_value(v)));
        }
        // the counts say themselves in their breaches ("changes 1204 rows (it declared at most 250)"): the
        // scope is shown by them only when nothing else was declared
        if parts.is_empty() {
            if let Some(n) = self.max_rows {
                parts.push(format!("max_rows {n}"));
            }
            if let Some(n) = self.max_deletes {
                parts.push(format!("max_deletes {n}"));
            }
        }
        parts.join("; ")
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Insert,
    Update,
    Delete,
}

/// One row a merge applies of the world's own changes: the world's before (None: it inserted the row)
/// and after (None: it deleted it), and the columns it changed (an update's).
#[derive(Debug, Clone)]
pub struct RowChange {
    pub schema: String,
    pub table: String,
    pub key: String,
    pub before: Option<Map<String, Value>>,
    pub after: Option<Map<String, Value>>,
    pub columns: Vec<String>,
    /// the table has the tenant's column
    pub has_tenant_column: bool,
}

impl RowChange {
    pub fn kind(&self) -> Kind {
        match (&self.before, &self.after) {
            (None, _) => Kind::Insert,
            (_, None) => Kind::Delete,
            _ => Kind::Update,
        }
    }
}

/// Two values equal as a tenant compares them: numbers by value, everything else by its text.
fn same_value(a: &Value, b: &Value) -> bool {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let num = |v: &Value| text(v).parse::<f64>().ok();
    match (num(a), num(b)) {
        (Some(x), Some(y)) if matches!(a, Value::Number(_)) || matches!(b, Value::Number(_)) => x == y,
        _ => text(a) == text(b),
    }
}

/// "leads/7, leads/8" (10 at most, then how many more).
fn row_list(rows: &[String]) -> String {
    let shown = rows.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if rows.len() > 10 {
        format!("{shown}, and {} more", rows.len() - 10)
    } else {
        shown
    }
}

/// Every breach of the scope, in the spec's order (what it changes outside may_change, then outside the
/// tenant, then the counts), each as "changes leads.owner: leads/7". Empty: the merge keeps to it.
pub fn breaches(scope: &Scope, rows: &[RowChange]) -> Vec<String> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |what: String, row: String| match out.iter_mut().find(|(w, _)| *w == what) {
        Some((_, l)) => l.push(row),
        None => out.push((what, vec![row])),
    };
    let mut tenant_rows: Vec<(String, Vec<String>)> = Vec::new();
    for r in rows {
        let name = shown_table(&r.schema, &r.table);
        let row = format!("{}/{}", r.table, r.key);
        if let Some(allowed) = &scope.may_change {
            let mine: Vec<&Allowed> = allowed.iter().filter(|a| a.schema == r.schema && a.table == r.table).collect();
            let whole = mine.iter().any(|a| a.column.is_none());
            if mine.is_empty() {
                add(format!("changes {name}"), row.clone());
            } else if !whole {
                match r.kind() {
                    Kind::Insert => add(format!("inserts into {name}"), row.clone()),
                    Kind::Delete => add(format!("deletes from {name}"), row.clone()),
                    Kind::Update => {
                        for c in &r.columns {
                            if !mine.iter().any(|a| a.column.as_deref() == Some(c.as_str())) {
                                add(format!("changes {name}.{}", TableName { schema: None, name: c.clone() }), row.clone());
                            }
                        }
                    }
                }
            }
        }
        if let Some((col, value)) = &scope.tenant {
            let holds = |side: &Option<Map<String, Value>>| side.as_ref().is_none_or(|m| m.get(col).is_some_and(|v| same_value(v, value)));
            if !r.has_tenant_column || !holds(&r.before) || !holds(&r.after) {
                match tenant_rows.iter_mut().find(|(t, _)| *t == name) {
                    Some((_, l)) => l.push(row.clone()),
                    None => tenant_rows.push((name.clone(), vec![row.clone()])),
                }
            }
        }
    }
    let mut why: Vec<String> = out.into_iter().map(|(w, l)| format!("{w}: {}", row_list(&l))).collect();
    if let Some((col, value)) = &scope.tenant {
        for (t, l) in tenant_rows {
            why.push(format!("changes {t} rows outside tenant {} = {}: {}", TableName { schema: None, name: col.clone() }, shown_value(value), row_list(&l)));
        }
    }
    let n = rows.len() as i64;
    let deletes = rows.iter().filter(|r| r.kind() == Kind::Delete).count() as i64;
    let rows = |n: i64| if n == 1 { "1 row".to_string() } else { format!("{n} rows") };
    if let Some(m) = scope.max_rows.filter(|m| n > *m) {
        why.push(format!("changes {} (it declared at most {m})", rows(n)));
    }
    if let Some(m) = scope.max_deletes.filter(|m| deletes > *m) {
        why.push(format!("deletes {} (it declared at most {m})", rows(deletes)));
    }
    why
}

/// The refusal a person meets: "merging close_stale changes leads.owner: leads/7; it changes leads rows
/// outside tenant org_id = 42: leads/9, outside the scope it was forked with (may change leads.status,
/// lists; tenant org_id = 42); nothing was merged".
pub fn refusal(world: &str, scope: &Scope, why: &[String]) -> String {
    format!(
        "merging {world} {}, outside the scope it was forked with ({}); nothing was merged: redo the work within its scope in a new world, or have a person widen it",
        why.join("; it "),
        scope.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Option<Map<String, Value>> {
        v.as_object().cloned()
    }

    fn close_stale() -> Scope {
        Scope {
            may_change: Some(vec![
                Allowed { schema: "public".into(), table: "leads".into(), column: Some("status".into()) },
                Allowed { schema: "public".into(), table: "lists".into(), column: None },
            ]),
            tenant: Some(("org_id".into(), json!(42))),
            max_rows: Some(250),
            max_deletes: Some(0),
            intent: Some("close leads idle 90 days".into()),
            run: Some("planner/3".into()),
        }
    }

    fn upd(table: &str, key: &str, before: Value, after: Value, cols: &[&str]) -> RowChange {
        RowChange {
            schema: "public".into(),
            table: table.into(),
            key: key.into(),
            before: map(before),
            after: map(after),
            columns: cols.iter().map(|c| c.to_string()).collect(),
            has_tenant_column: true,
        }
    }

    #[test]
    fn spec_close_stale() {
        let s = close_stale();
        let rows = vec![
            upd("leads", "7", json!({"id": 7, "org_id": 42, "owner": "a"}), json!({"id": 7, "org_id": 42, "owner": "b"}), &["owner"]),
            upd("leads", "9", json!({"id": 9, "org_id": 43, "status": "open"}), json!({"id": 9, "org_id": 43, "status": "closed"}), &["status"]),
            upd("leads", "10", json!({"id": 10, "org_id": 42, "status": "open"}), json!({"id": 10, "org_id": 42, "status": "closed"}), &["status"]),
        ];
        let why = breaches(&s, &rows);
        assert_eq!(why, vec!["changes leads.owner: leads/7".to_string(), "changes leads rows outside tenant org_id = 42: leads/9".to_string()]);
        assert_eq!(
            refusal("close_stale", &s, &why),
            "merging close_stale changes leads.owner: leads/7; it changes leads rows outside tenant org_id = 42: leads/9, outside the scope it was forked with (may change leads.status, lists; tenant org_id = 42); nothing was merged: redo the work within its scope in a new world, or have a person widen it"
        );
    }

    #[test]
    fn column_tables_refuse_inserts_and_deletes_and_tenant_moves() {
        let s = Scope { tenant: None, max_rows: None, max_deletes: None, ..close_stale() };
        let ins = RowChange { before: None, ..upd("leads", "1", json!({}), json!({"id": 1, "org_id": 42}), &[]) };
        let del = RowChange { after: None, ..upd("leads", "2", json!({"id": 2}), json!({}), &[]) };
        let other = upd("orders", "3", json!({"id": 3}), json!({"id": 3, "x": 1}), &["x"]);
        let list_del = RowChange { after: None, ..upd("lists", "4", json!({"id": 4}), json!({}), &[]) };
        assert_eq!(breaches(&s, &[ins, del, other, list_del]), vec!["inserts into leads: leads/1", "deletes from leads: leads/2", "changes orders: orders/3"]);
        // moving a row out of the tenant is outside it, as is a table without its column
        let t = Scope { tenant: Some(("org_id".into(), json!(42))), ..Scope::default() };
        let moved = upd("leads", "5", json!({"org_id": 42}), json!({"org_id": 41}), &["org_id"]);
        let no_col = RowChange { has_tenant_column: false, ..upd("lists", "6", json!({"id": 6}), json!({"id": 6, "n": 2}), &["n"]) };
        let kept = upd("leads", "8", json!({"org_id": "42"}), json!({"org_id": 42}), &["status"]);
        assert_eq!(breaches(&t, &[moved, no_col, kept]), vec!["changes leads rows outside tenant org_id = 42: leads/5", "changes lists rows outside tenant org_id = 42: lists/6"]);
    }

    #[test]
    fn counts_and_rows_named_ten_at_most() {
        let s = Scope { max_rows: Some(3), max_deletes: Some(0), ..Scope::default() };
        let mut rows: Vec<RowChange> = (1..=12).map(|i| upd("t", &i.to_string(), json!({"a": 1}), json!({"a": 2}), &["a"])).collect();
        rows.push(RowChange { after: None, ..upd("t", "13", json!({"a": 1}), json!({}), &[]) });
        assert_eq!(breaches(&s, &rows), vec!["changes 13 rows (it declared at most 3)", "deletes 1 row (it declared at most 0)"]);
        let only = Scope { may_change: Some(vec![]), ..Scope::default() };
        let why = breaches(&only, &rows[..12]);
        assert_eq!(why, vec!["changes t: t/1, t/2, t/3, t/4, t/5, t/6, t/7, t/8, t/9, t/10, and 2 more"]);
        assert!(breaches(&Scope::default(), &rows).is_empty());
    }

    #[test]
    fn parsing() {
        assert_eq!(parse_tenant("org_id = 42").unwrap(), ("org_id".into(), json!(42)));
        assert_eq!(parse_tenant("region = 'e''u'").unwrap(), ("region".into(), json!("e'u")));
        assert_eq!(parse_tenant("\"Org\"=true").unwrap(), ("Org".into(), json!(true)));
        assert_eq!(parse_tenant("x = -1.5").unwrap(), ("x".into(), serde_json::from_str::<Value>("-1.5").unwrap()));
        for bad in ["org_id", "org_id = ", "a.b = 1", "x = eu", "x = 'eu", "= 3", "x = 1e5"] {
            assert!(parse_tenant(bad).is_err(), "{bad}");
        }
        assert_eq!(tenant_from_json(&json!({"org_id": 42})).unwrap(), ("org_id".into(), json!(42)));
        assert!(tenant_from_json(&json!({"a": 1, "b": 2})).is_err());
        assert_eq!(may_change_names("leads.status, lists, \"Sales\".\"Leads\".\"Status\"").unwrap(), vec![
            vec!["leads".to_string(), "status".into()],
            vec!["lists".into()],
            vec!["Sales".into(), "Leads".into(), "Status".into()]
        ]);
        assert!(may_change_names(" , ").is_err());
        assert!(may_change_names("a.b.c.d").is_err());
        assert_eq!(parse_count("max_rows", &json!(250)).unwrap(), 250);
        assert_eq!(parse_count("max_rows", &json!("250")).unwrap(), 250);
        assert!(parse_count("max_rows", &json!(-1)).is_err());
        assert!(parse_count("max_rows", &json!(2.5)).is_err());
        let s = close_stale();
        assert_eq!(Scope::from_json(&s.to_json()).unwrap(), s);
        assert_eq!(s.shown()["may_change"][0], json!({"table": "leads", "column": "status"}));
    }
}
