//! What a client's statement is, for a wire proxy in front of the server (worlds-proxy): a statement of
//! the spec (by its leading keywords, then parsed by `grammar::parse`, the extension's own parser), a
//! SELECT reading tables `AS OF` a moment, or SQL to pass through untouched. Also the query the proxy sends
//! upstream for a spec statement: `worlds.sql(text)`'s JSON rows cast to the spec's columns and types, so
//! Postgres encodes the values itself (text or binary, as the client's Bind asks).
use crate::grammar::{self, ParseError, Statement};

/// What one statement is.
#[derive(Debug, Clone, PartialEq)]
pub enum Recognised {
    /// SQL: sent as written
    Sql,
    /// a statement of the spec (its leading keywords say so), parsed; an Err is the grammar's error, which
    /// `worlds.sql` raises the same way
    Spec(Result<Statement, ParseError>),
    /// a statement reading tables AS OF a moment, rewritten to read them through `worlds.as_of`
    AsOf(String),
}

/// The leading words of a statement, lower case, up to `n`: comments and white space skipped; a word
/// followed by `.` (a qualified name, `worlds.world`) or anything that isn't a bare word stops the list.
pub fn leading_words(text: &str, n: usize) -> Vec<String> {
    let b = text.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while words.len() < n {
        i = skip_blank(b, i);
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if start == i || b[start].is_ascii_digit() {
            break;
        }
        words.push(text[start..i].to_ascii_lowercase());
        if b.get(i) == Some(&b'.') {
            words.pop();
            break;
        }
    }
    words
}

/// True when the leading words start a statement of the spec, not SQL: `MERGE WORLD` (not `MERGE INTO`),
/// `CHECKPOINT WORLD` (not `CHECKPOINT`), `SHOW WORLDS` (not `SHOW worlds.world` or `SHOW search_path`), ...
pub fn is_spec(words: &[String]) -> bool {
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let world = |i: usize| matches!(w(i), "world" | "branch");
    match w(0) {
        // (none of these starts a statement of Postgres's SQL)
        "use" | "diff" | "rebase" | "undo" | "restore" | "simulate" | "replay" | "fork" | "switch" => true,
        "register" | "unregister" | "mark" | "unmark" => w(1) == "reader",
        "check" => w(1) == "reads",
        "checkpoint" => w(1) == "world",
        "merge" => world(1),
        "delete" => w(1) == "world",
        "create" => {
            world(1)
                || w(1) == "agent"
                || (w(1) == "merge" && matches!(w(2), "policy" | "check"))
                || (w(1) == "or" && w(2) == "replace" && w(3) == "merge")
        }
        "alter" => world(1) || w(1) == "agent" || (w(1) == "merge" && w(2) == "policy") || (w(1) == "system" && w(2) == "set" && w(3) == "history_retention"),
        "drop" => world(1) || w(1) == "agent" || (w(1) == "merge" && matches!(w(2), "policy" | "check")),
        "show" => matches!(
            w(1),
            "worlds" | "branches" | "history" | "history_retention" | "agents" | "audit" | "reviews" | "readers" | "checkpoints" | "metrics" | "storage" | "disk"
        ) || (w(1) == "merge" && matches!(w(2), "policies" | "checks")),
        _ => false,
    }
}

/// What one statement (no `;` between statements) is.
pub fn recognise(text: &str) -> Recognised {
    if is_spec(&leading_words(text, 4)) {
        return Recognised::Spec(grammar::parse(text));
    }
    // (a cheap look first: most SQL says neither)
    let lower = text.to_ascii_lowercase();
    if lower.contains(" of") && (lower.contains("as") || lower.contains("system_time")) {
        if let Ok(Some(query)) = crate::as_of::rewrite_as_of(text) {
            return Recognised::AsOf(query);
        }
    }
    Recognised::Sql
}

/// The text split into its statements at the `;` that end them (not those in strings, quoted names, dollar
/// quotes, comments or parentheses): each piece without its `;`; pieces of only white space and comments
/// are left out, as Postgres skips them.
pub fn split_statements(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i, mut depth) = (0, 0, 0i32);
    while i < b.len() {
        match b[i] {
            b'\'' => {
                // E'...': backslashes escape (an e that ends a longer word doesn't start one)
                let e = i >= 1 && matches!(b[i - 1], b'e' | b'E') && (i < 2 || !is_ident(b[i - 2]));
                i = skip_quoted(b, i, b'\'', e);
            }
            b'"' => i = skip_quoted(b, i, b'"', false),
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_block_comment(b, i),
            b'$' if i == 0 || !is_ident(b[i - 1]) => match dollar_tag(b, i) {
                Some(len) => {
                    let tag = &b[i..i + len];
                    let body = i + len;
                    i = find(b, body, tag).map(|e| e + len).unwrap_or(b.len());
                }
                None => i += 1,
            },
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth -= 1;
                i += 1;
            }
            b';' if depth <= 0 => {
                let piece = &text[start..i];
                if !blank(piece) {
                    out.push(piece);
                }
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    let piece = &text[start..];
    if !blank(piece) {
        out.push(piece);
    }
    out
}

/// How a spec statement's result is shaped.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// no rows: the command tag `worlds.sql` returns (`MERGE 3`, `CREATE WORLD`)
    Tag,
    /// rows of these columns (name, SQL type), then `tag` (with the row count when `counted`)
    Rows { columns: &'static [(&'static str, &'static str)], tag: &'static str, counted: bool },
}

const WORLD_ROW: &[(&str, &str)] = &[
    ("name", "text"),
    ("id", "text"),
    ("parent", "text"),
    ("depth", "integer"),
    ("created", "timestamptz"),
    ("version", "bigint"),
    ("meta", "jsonb"),
    ("owner", "text"),
    ("expires", "timestamptz"),
    ("active", "timestamptz"),
    ("pinned", "boolean"),
    ("scope", "jsonb"),
];
const BRANCHES: &[(&str, &str)] = &[("name", "text"), ("parent", "text"), ("changes", "bigint")];
const DIFF: &[(&str, &str)] =
    &[("table", "text"), ("id", "text"), ("change", "text"), ("before", "jsonb"), ("after", "jsonb"), ("columns", "jsonb")];
const DIFF_SQL: &[(&str, &str)] = &[("sql", "text")];
const DIFF_READERS: &[(&str, &str)] =
    &[("table", "text"), ("columns", "text"), ("kind", "text"), ("reader", "text"), ("detail", "text"), ("critical", "boolean")];
const DRY_RUN: &[(&str, &str)] = &[
    ("table", "text"),
    ("id", "text"),
    ("outcome", "text"),
    ("detail", "text"),
    ("base", "jsonb"),
    ("ours", "jsonb"),
    ("theirs", "jsonb"),
    ("result", "jsonb"),
    ("postgres", "jsonb"),
];
const HISTORY: &[(&str, &str)] = &[("at", "timestamptz"), ("world", "text"), ("event", "text"), ("rows", "bigint")];
const RETENTION: &[(&str, &str)] = &[("history_retention", "interval")];
const NEW_AGENT: &[(&str, &str)] = &[("name", "text"), ("id", "text"), ("token", "text")];
const AGENT_ROW: &[(&str, &str)] = &[
    ("name", "text"),
    ("id", "text"),
    ("can", "text"),
    ("max_worlds", "integer"),
    ("writes_per_minute", "integer"),
    ("max_changes", "bigint"),
    ("world_ttl", "bigint"),
    ("created", "timestamptz"),
    ("disabled", "boolean"),
    ("max_query_ms", "bigint"),
    ("max_concurrent", "integer"),
    ("max_memory_mb", "integer"),
    ("policy", "text"),
    ("max_idle_ms", "bigint"),
];
const AUDIT: &[(&str, &str)] =
    &[("at", "timestamptz"), ("agent", "text"), ("world", "text"), ("action", "text"), ("rows", "bigint"), ("run", "jsonb")];
const POLICY: &[(&str, &str)] = &[
    ("name", "text"),
    ("max_rows", "bigint"),
    ("max_deletes", "bigint"),
    ("tables", "text"),
    ("review_tables", "text"),
    ("review_columns", "text"),
    ("schema", "boolean"),
    ("overwrite", "boolean"),
    ("critical", "boolean"),
    ("check_reads", "boolean"),
    ("require_scope", "boolean"),
    ("rows_per_hour", "bigint"),
    ("deletes_per_hour", "bigint"),
    ("max_age", "bigint"),
    ("created", "timestamptz"),
    ("max_effects", "bigint"),
    ("effects_per_hour", "bigint"),
    ("review_channels", "text"),
    ("confirm_deletes_over", "bigint"),
];
const REVIEWS: &[(&str, &str)] = &[
    ("world", "text"),
    ("owner", "text"),
    ("policy", "text"),
    ("reasons", "text[]"),
    ("asked", "timestamptz"),
    ("version", "bigint"),
    ("changed_since", "boolean"),
    ("scope", "jsonb"),
    ("changes", "jsonb"),
    ("effects", "jsonb"),
    ("run", "jsonb"),
];
const CHECK_READS: &[(&str, &str)] = &[("checked_against", "text"), ("changed", "text")];
const CHECKS: &[(&str, &str)] = &[("name", "text"), ("tables", "text"), ("timeout_ms", "integer"), ("query", "text"), ("created", "timestamptz")];
const READERS: &[(&str, &str)] = &[
    ("reader", "text"),
    ("kind", "text"),
    ("table", "text"),
    ("columns", "text"),
    ("last_read", "timestamptz"),
    ("critical", "boolean"),
    ("marked_by", "text"),
    ("marked_at", "timestamptz"),
];
const CHECKPOINTS: &[(&str, &str)] = &[("world", "text"), ("label", "text"), ("at", "timestamptz")];
const METRICS: &[(&str, &str)] = &[
    ("metric", "text"),
    ("count", "bigint"),
    ("total_ms", "double precision"),
    ("p50_ms", "double precision"),
    ("p95_ms", "double precision"),
    ("p99_ms", "double precision"),
    ("max_ms", "double precision"),
];
const STORAGE: &[(&str, &str)] = &[("world", "text"), ("rows_changed", "bigint"), ("pages", "bigint"), ("bytes", "bigint")];
const DISK: &[(&str, &str)] = &[("what", "text"), ("bytes", "bigint")];
const SIMULATE: &[(&str, &str)] = &[
    ("world", "text"),
    ("id", "text"),
    ("index", "bigint"),
    ("seed", "bigint"),
    ("score", "double precision"),
    ("error", "text"),
    ("kept", "boolean"),
];
const REPLAY: &[(&str, &str)] = &[
    ("world", "text"),
    ("replay", "text"),
    ("identical", "boolean"),
    ("rows_differing", "bigint"),
    ("score", "double precision"),
    ("recorded_score", "double precision"),
    ("error", "text"),
];

/// The spec's result for a statement: its columns and types (the output columns of the function the
/// statement maps to in the extension) and its command tag.
pub fn shape(statement: &Statement) -> Shape {
    use Statement as S;
    let rows = |columns, tag| Shape::Rows { columns, tag, counted: false };
    let counted = |columns, tag| Shape::Rows { columns, tag, counted: true };
    match statement {
        S::ShowWorlds => rows(WORLD_ROW, "SHOW"),
        S::ShowBranches => rows(BRANCHES, "SHOW"),
        S::AlterWorld { .. } => rows(WORLD_ROW, "ALTER WORLD"),
        S::Diff { readers: true, .. } => counted(DIFF_READERS, "SELECT"),
        S::Diff { as_sql: true, .. } => counted(DIFF_SQL, "SELECT"),
        S::Diff { .. } => counted(DIFF, "SELECT"),
        S::Merge { clauses, .. } if clauses.dry_run => counted(DRY_RUN, "SELECT"),
        S::ShowHistory { .. } => rows(HISTORY, "SHOW"),
        S::ShowHistoryRetention => rows(RETENTION, "SHOW"),
        S::CreateAgent { .. } => rows(NEW_AGENT, "CREATE AGENT"),
        S::AlterAgent { .. } => rows(AGENT_ROW, "ALTER AGENT"),
        S::ShowAgents => rows(AGENT_ROW, "SHOW"),
        S::ShowAudit { .. } => rows(AUDIT, "SHOW"),
        S::CreatePolicy { .. } => rows(POLICY, "CREATE MERGE POLICY"),
        S::AlterPolicy { .. } => rows(POLICY, "ALTER MERGE POLICY"),
        S::ShowPolicies => rows(POLICY, "SHOW"),
        S::ShowReviews => rows(REVIEWS, "SHOW"),
        S::CheckReads { .. } => counted(CHECK_READS, "SELECT"),
        S::ShowChecks => rows(CHECKS, "SHOW"),
        S::ShowReaders => rows(READERS, "SHOW"),
        S::ShowCheckpoints { .. } => rows(CHECKPOINTS, "SHOW"),
        S::ShowMetrics => rows(METRICS, "SHOW"),
        S::ShowStorage { .. } => rows(STORAGE, "SHOW"),
        S::ShowDisk => rows(DISK, "SHOW"),
        S::Simulate(_) => counted(SIMULATE, "SIMULATE"),
        S::Replay { .. } => rows(REPLAY, "REPLAY"),
        _ => Shape::Tag,
    }
}

/// The query a proxy sends upstream for a spec statement written `text`: one typed SELECT over
/// `worlds.sql(text)` (the statement a dollar-quoted literal, so it needs no parameter the client's Bind
/// would have to give). A statement that doesn't parse is sent as `worlds.sql(text)`, which raises the
/// grammar's error as the extension raises it.
pub fn typed_query(text: &str, parsed: &Result<Statement, ParseError>) -> String {
    let literal = dollar_quote(text);
    match parsed.as_ref().map(shape) {
        Err(_) => format!("select j from worlds.sql({literal}) j"),
        Ok(Shape::Tag) => format!("select j->>'tag' as tag from worlds.sql({literal}) j"),
        Ok(Shape::Rows { columns, .. }) => {
            let list: Vec<String> = columns.iter().map(|(name, ty)| column_expr(name, ty)).collect();
            format!("select {} from worlds.sql({literal}) j", list.join(", "))
        }
    }
}

/// One column of a typed query: the JSON value cast to its type, named as the spec names it.
fn column_expr(name: &str, ty: &str) -> String {
    let q = format!("\"{}\"", name.replace('"', "\"\""));
    let key = format!("'{}'", name.replace('\'', "''"));
    if ty == "jsonb" {
        // (JSON's null is the function's SQL NULL)
        format!("nullif(j->{key}, 'null') as {q}")
    } else if let Some(element) = ty.strip_suffix("[]") {
        format!(
            "case when jsonb_typeof(j->{key}) = 'array' then array(select e::{element} from jsonb_array_elements_text(j->{key}) e) end as {q}"
        )
    } else {
        format!("(j->>{key})::{ty} as {q}")
    }
}

/// A dollar-quoted literal of the text, with a tag that doesn't occur in it.
pub fn dollar_quote(text: &str) -> String {
    let mut n = 0u32;
    loop {
        let tag = if n == 0 { "$worlds$".to_string() } else { format!("$worlds{n}$") };
        // (nor may the text's end and the closing tag make the tag early: `a$worlds` + `$worlds$`)
        let quoted = format!("{tag}{text}{tag}");
        if quoted[tag.len()..].find(&tag) == Some(text.len()) {
            return quoted;
        }
        n += 1;
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

fn blank(piece: &str) -> bool {
    let b = piece.as_bytes();
    skip_blank(b, 0) >= b.len()
}

/// Past white space and comments (`--` to the end of the line, `/* */` nested).
fn skip_blank(b: &[u8], mut i: usize) -> usize {
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) == Some(&b'-') && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b.get(i) == Some(&b'/') && b.get(i + 1) == Some(&b'*') {
            i = skip_block_comment(b, i);
        } else {
            return i;
        }
    }
}

fn skip_block_comment(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// Past a quoted string or name starting at `i` (a doubled quote stays inside; in an E'' string a
/// backslash escapes the next byte).
fn skip_quoted(b: &[u8], mut i: usize, quote: u8, backslashes: bool) -> usize {
    i += 1;
    while i < b.len() {
        if backslashes && b[i] == b'\\' {
            i += 2;
        } else if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// The length of a dollar quote's tag at `i` ($$ or $tag$), if one starts there.
fn dollar_tag(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
        if j == i + 1 && b[j].is_ascii_digit() {
            return None; // $1: a parameter
        }
        j += 1;
    }
    (b.get(j) == Some(&b'$')).then_some(j + 1 - i)
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    (from..=b.len().saturating_sub(needle.len())).find(|&k| &b[k..k + needle.len()] == needle)
}

#[cfg(test)]
mod tests;
