//! CREATE [OR REPLACE] MERGE CHECK name [ON TABLES (t, ...)] [WITH (timeout = '2s')] AS SELECT ...,
//! DROP MERGE CHECK name, SHOW MERGE CHECKS (after SHOW MERGE).
//!
//! The query after AS is the database's SQL, not this grammar's: the head is parsed here, and the query is
//! kept as written for Postgres's own parser and analyzer (worlds._check_merge_check).
use super::{lex, ParseError, Parsed, Parser, Statement, Tok};

/// A CREATE MERGE CHECK statement: Some(its parse), else None (another statement).
pub(super) fn parse_create_check(text: &str) -> Option<Result<Statement, ParseError>> {
    let lower = text.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().take(5).collect();
    let is_check = matches!(words.as_slice(), ["create", "merge", "check", ..] | ["create", "or", "replace", "merge", "check", ..]);
    if !is_check {
        return None;
    }
    // the first AS outside quotes and parentheses ends the head
    let bytes = text.as_bytes();
    let (mut i, mut depth, mut at) = (0usize, 0i32, None);
    while i < bytes.len() {
        match bytes[i] {
            b'\'' | b'"' => {
                let q = bytes[i];
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ if depth == 0
                && (bytes[i] == b'a' || bytes[i] == b'A')
                && lower[i..].starts_with("as")
                && (i == 0 || !is_word(bytes[i - 1]))
                && (i + 2 >= bytes.len() || !is_word(bytes[i + 2])) =>
            {
                at = Some(i);
                break;
            }
            _ => {}
        }
        i += 1;
    }
    let Some(at) = at else {
        return Some(Err(ParseError { sqlstate: "42601", message: "CREATE MERGE CHECK needs AS SELECT ...".into(), position: text.len() + 1 }));
    };
    let query = text[at + 2..].trim().trim_end_matches(';').trim_end().to_string();
    let head = &text[..at];
    Some((|| {
        let mut p = Parser { text: head, toks: lex(head)?, i: 0 };
        p.expect_word("create")?;
        let replace = p.eat_word("or");
        if replace {
            p.expect_word("replace")?;
        }
        p.expect_word("merge")?;
        p.expect_word("check")?;
        let name = p.check_name()?;
        let tables = if p.eat_word("on") {
            p.expect_word("tables")?;
            Some(p.list(Parser::table_name)?)
        } else {
            None
        };
        let settings = if p.eat_word("with") { p.settings()? } else { Vec::new() };
        if p.peek().tok != Tok::End {
            return Err(p.syntax_error(p.peek()));
        }
        if query.is_empty() {
            return Err(ParseError { sqlstate: "42601", message: "CREATE MERGE CHECK needs a query after AS".into(), position: text.len() + 1 });
        }
        Ok(Statement::CreateCheck { name, replace, tables, settings, query: query.clone() })
    })())
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

impl Parser<'_> {
    /// A check's name: a bare name (folded), a "quoted" name or a 'string'; at most 63 bytes.
    pub(super) fn check_name(&mut self) -> Parsed<String> {
        let t = self.next();
        let name = match &t.tok {
            Tok::Word(_) if self.peek().tok == Tok::Sym('-') => {
                return Err(self.error_at(&t, "42601", "merge check names with a dash need quotes"));
            }
            Tok::Word(s) | Tok::Quoted(s) | Tok::Str(s) => s.clone(),
            _ => return Err(self.syntax_error(&t)),
        };
        if name.is_empty() || name.len() > 63 {
            return Err(self.error_at(&t, "22023", "a merge check's name must be 1 to 63 bytes long"));
        }
        Ok(name)
    }

    /// After DROP MERGE: CHECK name
    pub(super) fn drop_check(&mut self) -> Parsed<Statement> {
        Ok(Statement::DropCheck { name: self.check_name()? })
    }
}

#[cfg(test)]
mod tests {
    use crate::grammar::{parse, MetaValue, Statement};

    #[test]
    fn check_statements() {
        assert_eq!(
            parse("create merge check lists_keep_leads on tables (leads, lists) as  select id from lists where id not in (select list from leads);").unwrap(),
            Statement::CreateCheck {
                name: "lists_keep_leads".into(),
                replace: false,
                tables: Some(vec!["leads".into(), "lists".into()]),
                settings: vec![],
                query: "select id from lists where id not in (select list from leads)".into(),
            }
        );
        assert_eq!(
            parse("CREATE OR REPLACE MERGE CHECK one_primary_address ON TABLES (addresses) WITH (timeout = '2s') AS\n  SELECT customer_id FROM addresses WHERE is_primary GROUP BY customer_id HAVING count(*) > 1").unwrap(),
            Statement::CreateCheck {
                name: "one_primary_address".into(),
                replace: true,
                tables: Some(vec!["addresses".into()]),
                settings: vec![("timeout".into(), MetaValue::Text("2s".into()))],
                query: "SELECT customer_id FROM addresses WHERE is_primary GROUP BY customer_id HAVING count(*) > 1".into(),
            }
        );
        // the query is the database's SQL: casts, operators, quotes with AS inside
        match parse("create merge check c as select x::int as \"as\" from t where y <> 'as' || 'b'").unwrap() {
            Statement::CreateCheck { query, tables, .. } => {
                assert_eq!(query, "select x::int as \"as\" from t where y <> 'as' || 'b'");
                assert_eq!(tables, None);
            }
            s => panic!("{s:?}"),
        }
        match parse("create merge check \"Odd-Name\" on tables (app.\"Orders\") as select 1").unwrap() {
            Statement::CreateCheck { name, tables, .. } => {
                assert_eq!(name, "Odd-Name");
                assert_eq!(tables, Some(vec!["app.\"Orders\"".to_string()]));
            }
            s => panic!("{s:?}"),
        }
        assert_eq!(parse("drop merge check c").unwrap(), Statement::DropCheck { name: "c".into() });
        assert_eq!(parse("show merge checks").unwrap(), Statement::ShowChecks);
        assert_eq!(parse("create merge check c as select 1").unwrap().writes(), Some("CREATE MERGE CHECK"));
        assert_eq!(parse("create merge check c on tables (t)").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("create merge check c on (t) as select 1").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("create merge check c as ").unwrap_err().sqlstate, "42601");
    }
}
