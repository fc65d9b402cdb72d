//! AS OF inside a SELECT, as the spec writes it:
//!   FROM t AS OF when [alias]  |  FROM t [alias] AS OF when  |  FROM t [alias] FOR SYSTEM_TIME AS OF when
//! becomes `worlds.as_of(NULL::t, when) AS alias` (the table's own name when there is no alias), so now
//! and then join in one statement. `when` is a string, a `$n` parameter, a parenthesized expression, a
//! typed literal (`timestamp '...'`), a function call, optionally cast with `::type`, joined by + or -.
use crate::grammar::{lex, ParseError, Tok, Token};

/// Words that end a table reference or an expression in a FROM list.
const STOP: &[&str] = &[
    "where", "join", "left", "right", "inner", "full", "cross", "on", "group", "order", "limit", "union", "having", "window",
    "natural", "using", "offset", "fetch", "for", "except", "intersect", "as", "lateral", "tablesample",
];

/// The statement with its AS OF references rewritten, or None when it isn't a SELECT with AS OF.
pub fn rewrite_as_of(text: &str) -> Result<Option<String>, ParseError> {
    rewrite_as_of_with(text, |table, when, alias| format!("worlds.as_of(NULL::{table}, {when}) AS {alias}"))
}

/// As `rewrite_as_of`, each reference (table, moment expression, alias — all as written) replaced by what
/// `reference` makes of it.
pub fn rewrite_as_of_with(text: &str, mut reference: impl FnMut(&str, &str, &str) -> String) -> Result<Option<String>, ParseError> {
    let toks = lex(text)?;
    let first = match &toks[0].tok {
        Tok::Word(w) => w.as_str(),
        _ => return Ok(None),
    };
    // a query, or a statement that reads tables (INSERT ... SELECT, UPDATE ... FROM, DELETE ... USING,
    // CREATE TABLE ... AS)
    if !matches!(first, "select" | "with" | "insert" | "update" | "delete" | "create") {
        return Ok(None);
    }
    let mut out = String::new();
    let mut copied = 0; // bytes of `text` already copied to `out`
    let mut found = false;
    let mut i = 0;
    while i < toks.len() {
        let as_of_at = if word(&toks, i, "as") && word(&toks, i + 1, "of") {
            Some((i, i + 2))
        } else if word(&toks, i, "for") && word(&toks, i + 1, "system_time") && word(&toks, i + 2, "as") && word(&toks, i + 3, "of") {
            Some((i, i + 4))
        } else {
            None
        };
        let Some((clause, when_start)) = as_of_at else {
            i += 1;
            continue;
        };
        // what precedes the clause: `t`, or `t alias` (a name is one identifier, or two joined by a dot)
        let (mut table_start, mut alias) = name_before(&toks, clause).ok_or_else(|| err(text, &toks[clause]))?;
        if let Some((t, _)) = name_before(&toks, table_start) {
            if !is_from_boundary(&toks, table_start) {
                alias = Some(text[toks[table_start].start..toks[clause - 1].end].to_string());
                table_start = t;
            }
        } else if table_start >= 2 && word(&toks, table_start - 1, "as") {
            // `t AS alias AS OF when`
            if let Some((t, _)) = name_before(&toks, table_start - 1).filter(|(t, _)| is_from_boundary(&toks, *t)) {
                alias = Some(text[toks[table_start].start..toks[clause - 1].end].to_string());
                table_start = t;
            }
        }
        let table_end = if alias.is_some() { table_start_end(&toks, table_start) } else { clause };
        let table = text[toks[table_start].start..toks[table_end - 1].end].to_string();
        let when_end = expression_end(&toks, when_start).ok_or_else(|| err(text, &toks[when_start]))?;
        let mut when = text[toks[when_start].start..toks[when_end - 1].end].to_string();
        if when.eq_ignore_ascii_case("now") {
            // a bare `now`, as the spec's table of moments writes it (not a column: AS OF reads no row)
            when = "'now'".into();
        }
        let mut next = when_end;
        if alias.is_none() {
            // FROM t AS OF when [AS] alias
            if word(&toks, next, "as") && matches!(toks[next + 1].tok, Tok::Word(_) | Tok::Quoted(_)) {
                next += 1;
            }
            match &toks[next].tok {
                Tok::Word(w) if !STOP.contains(&w.as_str()) => {
                    alias = Some(text[toks[next].start..toks[next].end].to_string());
                    next += 1;
                }
                Tok::Quoted(_) => {
                    alias = Some(text[toks[next].start..toks[next].end].to_string());
                    next += 1;
                }
                _ => {}
            }
        }
        let alias = alias.unwrap_or_else(|| text[toks[table_end - 1].start..toks[table_end - 1].end].to_string());
        if toks[table_start].start < copied {
            // the table of this AS OF is part of the previous one (`t AS OF x AS OF y`, `AS OF t AS OF`)
            return Err(err(text, &toks[clause]));
        }
        out.push_str(&text[copied..toks[table_start].start]);
        out.push_str(&reference(&table, &when, &alias));
        copied = toks[next - 1].end;
        found = true;
        i = next;
    }
    if !found {
        return Ok(None);
    }
    out.push_str(&text[copied..]);
    Ok(Some(out))
}

fn word(toks: &[Token], i: usize, w: &str) -> bool {
    matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Word(x)) if x == w)
}

fn is_ident(t: &Token) -> bool {
    match &t.tok {
        Tok::Word(w) => !STOP.contains(&w.as_str()) && w != "from",
        Tok::Quoted(_) => true,
        _ => false,
    }
}

/// The name (one identifier, or `a.b`) that ends just before token `end`: (its first token, None).
fn name_before(toks: &[Token], end: usize) -> Option<(usize, Option<String>)> {
    if end == 0 || !is_ident(&toks[end - 1]) {
        return None;
    }
    let mut start = end - 1;
    if start >= 2 && toks[start - 1].tok == Tok::Sym('.') && is_ident(&toks[start - 2]) {
        start -= 2;
    }
    Some((start, None))
}

/// Is token i the first of a FROM item (after FROM, JOIN, or a comma)?
fn is_from_boundary(toks: &[Token], i: usize) -> bool {
    i == 0 || matches!(&toks[i - 1].tok, Tok::Word(w) if w == "from" || w == "join" || w == "using") || toks[i - 1].tok == Tok::Sym(',')
}

/// The end (exclusive) of the name starting at token `start`.
fn table_start_end(toks: &[Token], start: usize) -> usize {
    if toks.get(start + 1).map(|t| &t.tok) == Some(&Tok::Sym('.')) {
        start + 3
    } else {
        start + 1
    }
}

/// The end (exclusive) of the moment expression starting at token `i`.
fn expression_end(toks: &[Token], mut i: usize) -> Option<usize> {
    loop {
        i = primary_end(toks, i)?;
        // ::type casts
        while toks.get(i).map(|t| &t.tok) == Some(&Tok::Sym(':')) && toks.get(i + 1).map(|t| &t.tok) == Some(&Tok::Sym(':')) {
            i += 2;
            if !matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Word(_))) {
                return None;
            }
            i += 1;
            // `timestamp with time zone`
            while word(toks, i, "with") || word(toks, i, "without") || word(toks, i, "time") || word(toks, i, "zone") {
                i += 1;
            }
        }
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Sym('+')) | Some(Tok::Sym('-')) => i += 1,
            _ => return Some(i),
        }
    }
}

fn primary_end(toks: &[Token], i: usize) -> Option<usize> {
    match &toks.get(i)?.tok {
        Tok::Str(_) | Tok::Num(_) => Some(i + 1),
        Tok::Sym('$') => matches!(toks.get(i + 1)?.tok, Tok::Num(_)).then_some(i + 2),
        Tok::Sym('(') => group_end(toks, i),
        Tok::Word(w) if !STOP.contains(&w.as_str()) => match &toks.get(i + 1)?.tok {
            Tok::Str(_) => Some(i + 2),           // timestamp '...', interval '...'
            Tok::Sym('(') => group_end(toks, i + 1), // now(), date_trunc(...)
            _ => Some(i + 1),                     // current_timestamp, a column
        },
        _ => None,
    }
}

fn group_end(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Sym('(') => depth += 1,
            Tok::Sym(')') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            Tok::End => return None,
            _ => {}
        }
    }
    None
}

fn err(text: &str, t: &Token) -> ParseError {
    let position = text[..t.start].chars().count() + 1;
    ParseError { sqlstate: "42601", message: "syntax error in AS OF: write FROM table AS OF when [alias]".into(), position }
}

#[cfg(test)]
mod tests {
    use super::rewrite_as_of;

    fn rw(s: &str) -> String {
        rewrite_as_of(s).unwrap().unwrap()
    }

    #[test]
    fn the_spec_example_joins_now_and_then() {
        assert_eq!(
            rw("select now.id, now.status, old.status from orders now join orders as of '-1 hour' old on old.id = now.id where old.status <> now.status"),
            "select now.id, now.status, old.status from orders now join worlds.as_of(NULL::orders, '-1 hour') AS old on old.id = now.id where old.status <> now.status"
        );
    }

    #[test]
    fn every_form() {
        assert_eq!(rw("SELECT * FROM orders AS OF '-1 hour'"), "SELECT * FROM worlds.as_of(NULL::orders, '-1 hour') AS orders");
        assert_eq!(rw("select * from orders as of now"), "select * from worlds.as_of(NULL::orders, 'now') AS orders");
        assert_eq!(rw("select * from orders as of NOW o"), "select * from worlds.as_of(NULL::orders, 'now') AS o");
        assert_eq!(rw("select * from orders o as of '-1 hour'"), "select * from worlds.as_of(NULL::orders, '-1 hour') AS o");
        assert_eq!(rw("select * from orders as of '-1 hour' as o"), "select * from worlds.as_of(NULL::orders, '-1 hour') AS o");
        assert_eq!(rw("select o.id from orders as o as of '-1 hour'"), "select o.id from worlds.as_of(NULL::orders, '-1 hour') AS o");
        assert_eq!(
            rw("select o.id from app.orders AS o FOR SYSTEM_TIME AS OF '-1 hour' join t on true"),
            "select o.id from worlds.as_of(NULL::app.orders, '-1 hour') AS o join t on true"
        );
        assert_eq!(
            rw("select * from app.orders o for system_time as of $1 where o.id = 1"),
            "select * from worlds.as_of(NULL::app.orders, $1) AS o where o.id = 1"
        );
        assert_eq!(
            rw("select count(*) from orders as of now() - interval '1 hour', items"),
            "select count(*) from worlds.as_of(NULL::orders, now() - interval '1 hour') AS orders, items"
        );
        assert_eq!(
            rw("select * from \"Orders\" as of '2026-09-20 10:00'::timestamptz x"),
            "select * from worlds.as_of(NULL::\"Orders\", '2026-09-20 10:00'::timestamptz) AS x"
        );
    }

    #[test]
    fn statements_that_read_tables() {
        assert_eq!(
            rw("insert into snap select * from s as of '-1 hour'"),
            "insert into snap select * from worlds.as_of(NULL::s, '-1 hour') AS s"
        );
        assert_eq!(
            rw("create table snap as select * from s as of '-1 hour' old"),
            "create table snap as select * from worlds.as_of(NULL::s, '-1 hour') AS old"
        );
        assert_eq!(
            rw("update t set v = old.v from t as of '-1 hour' old where old.id = t.id"),
            "update t set v = old.v from worlds.as_of(NULL::t, '-1 hour') AS old where old.id = t.id"
        );
        assert_eq!(
            rw("delete from t using t as of '-1 hour' old where old.id = t.id"),
            "delete from t using worlds.as_of(NULL::t, '-1 hour') AS old where old.id = t.id"
        );
        assert_eq!(rewrite_as_of("fork world a as of").unwrap(), None);
    }

    #[test]
    fn not_a_select_with_as_of() {
        assert_eq!(rewrite_as_of("select 1 as one").unwrap(), None);
        assert_eq!(rewrite_as_of("create world x").unwrap(), None);
        assert_eq!(rewrite_as_of("select 'as of' from t").unwrap(), None);
    }

    #[test]
    fn malformed_is_42601() {
        assert_eq!(rewrite_as_of("select * from orders as of where").unwrap_err().sqlstate, "42601");
        // one AS OF's table inside the previous one's reference (found by the fuzzer: a slice out of order)
        for q in [
            "select * from orders as of from \"OrdNrs\" as of '2026-09-20 10:00'::timestamptz  x",
            "select * from \"Orders\" as of '2026-09-20 10:00' \"Orders\" as of '2026-09-20 10:00'::timestamptz ::timestamptz x",
        ] {
            assert_eq!(rewrite_as_of(q).unwrap_err().sqlstate, "42601", "{q}");
        }
    }
}
