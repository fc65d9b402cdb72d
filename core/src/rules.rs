//! Merge policies' rules (spec, "Merge policies"), judged on what a merge is about to apply: pure, so a
//! merge, its DRY RUN, SHOW REVIEWS and `worlds.check_merge_policy` give the same reasons.

/// A table as a policy names it: `orders`, `"Orders"`, `sales.orders` (read as SQL reads names:
/// unquoted parts fold to lowercase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: Option<String>,
    pub name: String,
}

impl TableName {
    /// Does it name the table `schema.name`? An unqualified name names a table of that name in any schema.
    pub fn names(&self, schema: &str, name: &str) -> bool {
        self.name == name && self.schema.as_deref().is_none_or(|s| s == schema)
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let part = |s: &str| {
            if !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') && !s.starts_with(|c: char| c.is_ascii_digit()) {
                s.to_string()
            } else {
                format!("\"{}\"", s.replace('"', "\"\""))
            }
        };
        match &self.schema {
            Some(s) => write!(f, "{}.{}", part(s), part(&self.name)),
            None => write!(f, "{}", part(&self.name)),
        }
    }
}

/// The identifiers of a dotted name: `a."B".c` → a, B, c. Err with a message for an empty or unterminated part.
pub fn identifiers(text: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return Err(format!("unterminated quoted name in {text}")),
                }
            }
            if part.is_empty() {
                return Err(format!("an empty quoted name in {text}"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' || c.is_whitespace() {
                    break;
                }
                if c == '"' {
                    return Err(format!("a quote inside a name in {text}"));
                }
                part.extend(c.to_lowercase());
                chars.next();
            }
            if part.is_empty() {
                return Err(format!("an empty name in {text}"));
            }
        }
        parts.push(part);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            None => return Ok(parts),
            Some('.') => continue,
            Some(c) => return Err(format!("unexpected {c:?} in {text}")),
        }
    }
}

/// Splits a list on commas outside double quotes.
pub fn split_list(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => items.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    items.push(current);
    items.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// A list of tables ('orders,"Orders",sales.items'): Err(message) when a name isn't one.
pub fn table_list(text: &str) -> Result<Vec<TableName>, String> {
    split_list(text)
        .into_iter()
        .map(|item| {
            let mut parts = identifiers(&item)?;
            match parts.len() {
                1 => Ok(TableName { schema: None, name: parts.remove(0) }),
                2 => {
                    let name = parts.remove(1);
                    Ok(TableName { schema: Some(parts.remove(0)), name })
                }
                _ => Err(format!("{item} is not a table name (schema.table at most)")),
            }
        })
        .collect()
}

/// A list of columns ('users.email,sales.accounts.owner'): (table, column) pairs.
pub fn column_list(text: &str) -> Result<Vec<(TableName, String)>, String> {
    split_list(text)
        .into_iter()
        .map(|item| {
            let mut parts = identifiers(&item)?;
            match parts.len() {
                2 => {
                    let column = parts.remove(1);
                    Ok((TableName { schema: None, name: parts.remove(0) }, column))
                }
                3 => {
                    let column = parts.remove(2);
                    let name = parts.remove(1);
                    Ok((TableName { schema: Some(parts.remove(0)), name }, column))
                }
                _ => Err(format!("{item} is not a column (table.column or schema.table.column)")),
            }
        })
        .collect()
}

/// A plain list of names ('payments,refunds'), as channel names are read (folded unless quoted).
pub fn name_list(text: &str) -> Result<Vec<String>, String> {
    split_list(text)
        .into_iter()
        .map(|item| {
            let mut parts = identifiers(&item)?;
            if parts.len() != 1 {
                return Err(format!("{item} is not a name"));
            }
            Ok(parts.remove(0))
        })
        .collect()
}

/// A policy's rules (None: no limit).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub max_rows: Option<i64>,
    pub max_deletes: Option<i64>,
    pub rows_per_hour: Option<i64>,
    pub deletes_per_hour: Option<i64>,
    pub confirm_deletes_over: Option<i64>,
    pub max_age_ms: Option<i64>,
    pub tables: Option<Vec<TableName>>,
    pub review_tables: Vec<TableName>,
    pub review_columns: Vec<(TableName, String)>,
    pub schema: bool,
    pub overwrite: bool,
    pub max_effects: Option<i64>,
    pub effects_per_hour: Option<i64>,
    pub review_channels: Vec<String>,
    /// may change what a critical reader reads (false: such a merge waits for a person)
    pub critical: bool,
}

/// A critical reader whose columns a merge changes: "client billing" reads these columns of `table`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CriticalRead {
    /// the table as a person names it (`leads`, `sales.orders`)
    pub table: String,
    /// the changed columns it reads, in the table's order
    pub columns: Vec<String>,
    /// its kind as DIFF ... READERS names it (client, view, registered reader, ...)
    pub kind: String,
    pub reader: String,
}

/// A table a merge changes: its schema, name, and the columns it changes (an update changing one, an
/// insert giving one a value, a delete of a row with one).
#[derive(Debug, Clone, Default)]
pub struct TableChange {
    pub schema: String,
    pub name: String,
    pub columns: Vec<String>,
}

/// What a merge is about to apply, as the rules count it.
#[derive(Debug, Clone, Default)]
pub struct MergeFacts {
    pub into_main: bool,
    /// rows it applies (inserted, updated and deleted; a row settled USING THEIRS changes nothing)
    pub rows: i64,
    pub deletes: i64,
    /// the agent's other merges into main in the last hour
    pub hour_rows: i64,
    pub hour_deletes: i64,
    pub hour_effects: i64,
    /// how long ago the world forked
    pub age_ms: i64,
    pub tables: Vec<TableChange>,
    /// rows its parent changed since the fork that the merge overwrites (USING OURS, rows picked as its own)
    pub overwrites: i64,
    pub schema_changes: i64,
    pub effects: i64,
    pub channels: Vec<String>,
    /// the critical readers of what it changes (governance/readers)
    pub critical_reads: Vec<CriticalRead>,
}

/// The table as a person with the default search_path names it (public's tables unqualified).
/// "1 row", "2 rows".
fn rows(n: i64) -> String {
    if n == 1 { "1 row".into() } else { format!("{n} rows") }
}

fn qualified(t: &TableChange) -> String {
    TableName { schema: (t.schema != "public").then(|| t.schema.clone()), name: t.name.clone() }.to_string()
}

fn duration(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        _ if s < 120 => format!("{s} s"),
        _ if s < 7200 => format!("{} minutes", s / 60),
        _ if s < 172_800 => format!("{} hours", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

/// The rules the merge breaks, each as a reason a person reads ("changes 1204 rows (max_rows 500)"), in
/// the spec's order of the rules. Empty: it keeps to the policy.
pub fn broken_rules(p: &Policy, f: &MergeFacts) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(n) = p.max_rows.filter(|n| f.rows > *n) {
        why.push(format!("changes {} (max_rows {n})", rows(f.rows)));
    }
    if let Some(n) = p.max_deletes.filter(|n| f.deletes > *n) {
        why.push(format!("deletes {} (max_deletes {n})", rows(f.deletes)));
    }
    if f.into_main {
        if let Some(n) = p.rows_per_hour.filter(|n| f.rows + f.hour_rows > *n) {
            why.push(format!("changes {}, {} with its merges into main in the last hour (rows_per_hour {n})", rows(f.rows), f.rows + f.hour_rows));
        }
        if let Some(n) = p.deletes_per_hour.filter(|n| f.deletes + f.hour_deletes > *n) {
            why.push(format!(
                "deletes {}, {} with its merges into main in the last hour (deletes_per_hour {n})",
                rows(f.deletes),
                f.deletes + f.hour_deletes
            ));
        }
    }
    if let Some(n) = p.confirm_deletes_over.filter(|n| f.deletes > *n) {
        why.push(format!("deletes {} (confirm_deletes_over {n}: a person confirms the count)", rows(f.deletes)));
    }
    if let Some(n) = p.max_age_ms.filter(|n| f.age_ms > *n) {
        why.push(format!("was forked {} ago (max_age {})", duration(f.age_ms), duration(n)));
    }
    if let Some(n) = p.max_effects.filter(|n| f.effects > *n) {
        why.push(format!("queues {} effects (max_effects {n})", f.effects));
    }
    if f.into_main {
        if let Some(n) = p.effects_per_hour.filter(|n| f.effects + f.hour_effects > *n) {
            why.push(format!(
                "queues {} effects, {} with its merges into main in the last hour (effects_per_hour {n})",
                f.effects,
                f.effects + f.hour_effects
            ));
        }
    }
    for c in f.channels.iter().filter(|c| p.review_channels.contains(c)) {
        why.push(format!("queues an effect on channel {c} (review_channels)"));
    }
    if let Some(allowed) = &p.tables {
        for t in f.tables.iter().filter(|t| !allowed.iter().any(|a| a.names(&t.schema, &t.name))) {
            why.push(format!("changes table {}, which tables doesn't list", qualified(t)));
        }
    }
    for t in f.tables.iter().filter(|t| p.review_tables.iter().any(|a| a.names(&t.schema, &t.name))) {
        why.push(format!("changes table {} (review_tables)", qualified(t)));
    }
    for t in &f.tables {
        for c in &t.columns {
            if p.review_columns.iter().any(|(rt, rc)| rc == c && rt.names(&t.schema, &t.name)) {
                why.push(format!("changes column {}.{c} (review_columns)", qualified(t)));
            }
        }
    }
    if !p.schema && f.schema_changes > 0 {
        let objects = if f.schema_changes == 1 { "1 object".to_string() } else { format!("{} objects", f.schema_changes) };
        why.push(format!("changes the schema ({objects}; schema false)"));
    }
    if !p.critical {
        for c in &f.critical_reads {
            let columns = c.columns.iter().map(|col| format!("{}.{col}", c.table)).collect::<Vec<_>>().join(", ");
            why.push(format!("changes {columns}, which critical {} {} reads", c.kind, c.reader));
        }
    }
    if !p.overwrite && f.overwrites > 0 {
        why.push(format!("overwrites {} its parent changed since the fork (overwrite false)", rows(f.overwrites)));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(schema: &str, name: &str, columns: &[&str]) -> TableChange {
        TableChange { schema: schema.into(), name: name.into(), columns: columns.iter().map(|c| c.to_string()).collect() }
    }

    #[test]
    fn lists_read_names_as_sql_does() {
        let l = table_list("orders, \"Orders\", Sales.Items, \"a,b\"").unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[0], TableName { schema: None, name: "orders".into() });
        assert_eq!(l[1], TableName { schema: None, name: "Orders".into() });
        assert_eq!(l[2], TableName { schema: Some("sales".into()), name: "items".into() });
        assert_eq!(l[3].name, "a,b");
        assert_eq!(l[1].to_string(), "\"Orders\"");
        assert!(table_list("a.b.c").is_err());
        assert!(table_list("\"open").is_err());
        assert!(table_list("a b").is_err());
        assert_eq!(table_list(" , ").unwrap(), vec![]);
        let c = column_list("users.email, s.accounts.\"Owner\"").unwrap();
        assert_eq!(c[0], (TableName { schema: None, name: "users".into() }, "email".into()));
        assert_eq!(c[1], (TableName { schema: Some("s".into()), name: "accounts".into() }, "Owner".into()));
        assert!(column_list("email").is_err());
        assert_eq!(name_list("Payments,\"Refunds\"").unwrap(), vec!["payments".to_string(), "Refunds".to_string()]);
    }

    #[test]
    fn each_rule_breaks_past_its_limit_only() {
        let facts = MergeFacts {
            into_main: true,
            rows: 10,
            deletes: 2,
            hour_rows: 95,
            hour_deletes: 0,
            age_ms: 3_600_000,
            tables: vec![t("public", "orders", &["status"]), t("public", "payments", &["amount"])],
            overwrites: 1,
            ..Default::default()
        };
        assert_eq!(broken_rules(&Policy { overwrite: true, ..Default::default() }, &facts), Vec::<String>::new());
        let p = Policy {
            max_rows: Some(10),
            max_deletes: Some(2),
            rows_per_hour: Some(100),
            deletes_per_hour: Some(2),
            confirm_deletes_over: Some(2),
            max_age_ms: Some(3_600_000),
            tables: Some(table_list("orders,payments").unwrap()),
            overwrite: true,
            ..Default::default()
        };
        assert_eq!(broken_rules(&p, &facts), vec!["changes 10 rows, 105 with its merges into main in the last hour (rows_per_hour 100)".to_string()]);
        let p = Policy {
            max_rows: Some(9),
            max_deletes: Some(0),
            confirm_deletes_over: Some(1),
            max_age_ms: Some(60_000),
            tables: Some(table_list("orders").unwrap()),
            review_tables: table_list("\"Payments\",payments").unwrap(),
            review_columns: column_list("orders.status,orders.qty").unwrap(),
            ..Default::default()
        };
        let why = broken_rules(&p, &facts);
        assert_eq!(
            why,
            vec![
                "changes 10 rows (max_rows 9)",
                "deletes 2 rows (max_deletes 0)",
                "deletes 2 rows (confirm_deletes_over 1: a person confirms the count)",
                "was forked 60 minutes ago (max_age 60 s)",
                "changes table payments, which tables doesn't list",
                "changes table payments (review_tables)",
                "changes column orders.status (review_columns)",
                "overwrites 1 row its parent changed since the fork (overwrite false)",
            ]
        );
        // per-hour rules count merges into main only
        let into_world = MergeFacts { into_main: false, ..facts.clone() };
        let p = Policy { rows_per_hour: Some(1), deletes_per_hour: Some(0), overwrite: true, ..Default::default() };
        assert!(broken_rules(&p, &into_world).is_empty());
        assert_eq!(broken_rules(&p, &facts).len(), 2);
    }

    #[test]
    fn qualified_names_match_their_schema_only() {
        let p = Policy { review_tables: table_list("sales.orders").unwrap(), overwrite: true, ..Default::default() };
        let f = |schema: &str| MergeFacts { tables: vec![t(schema, "orders", &[])], ..Default::default() };
        assert!(broken_rules(&p, &f("public")).is_empty());
        assert_eq!(broken_rules(&p, &f("sales")), vec!["changes table sales.orders (review_tables)".to_string()]);
        let q = Policy { review_tables: table_list("\"Orders\"").unwrap(), overwrite: true, ..Default::default() };
        assert!(broken_rules(&q, &f("public")).is_empty());
    }

    #[test]
    fn critical_readers_hold_unless_the_policy_allows() {
        let read = CriticalRead { table: "leads".into(), columns: vec!["status".into(), "score".into()], kind: "client".into(), reader: "billing".into() };
        let f = MergeFacts { critical_reads: vec![read], ..Default::default() };
        let p = Policy { overwrite: true, ..Default::default() };
        assert_eq!(broken_rules(&p, &f), vec!["changes leads.status, leads.score, which critical client billing reads".to_string()]);
        let allowed = Policy { critical: true, ..p };
        assert!(broken_rules(&allowed, &f).is_empty());
        assert!(broken_rules(&Policy { overwrite: true, ..Default::default() }, &MergeFacts::default()).is_empty());
    }
}
