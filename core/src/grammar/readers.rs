//! The readers' statements (spec, "DIFF ... READERS"): REGISTER READER, UNREGISTER READER, MARK READER
//! ... CRITICAL, UNMARK READER (SHOW READERS is one word after SHOW; DIFF's READERS is DIFF's).
use super::{Parsed, Parser, Statement, Tok};

/// The longest reader's name: a client's is its role and its program (`billing (nightly)`), each up to
/// 63 bytes.
pub const READER_NAME_MAX: usize = 200;

impl Parser<'_> {
    /// A reader's name: a bare name (folded), a "quoted" name or a 'string' (a client with its program:
    /// 'billing (nightly)').
    fn reader_name(&mut self) -> Parsed<String> {
        let t = self.next();
        let name = match &t.tok {
            Tok::Word(_) if self.peek().tok == Tok::Sym('-') => {
                return Err(self.error_at(&t, "42601", "reader names with a dash need quotes"));
            }
            Tok::Word(s) | Tok::Quoted(s) | Tok::Str(s) => s.clone(),
            _ => return Err(self.syntax_error(&t)),
        };
        if name.is_empty() || name.len() > READER_NAME_MAX {
            return Err(self.error_at(&t, "22023", format!("a reader's name must be 1 to {READER_NAME_MAX} bytes long")));
        }
        Ok(name)
    }

    /// A column's name: a bare name (folded) or a "quoted" one.
    fn column_name(&mut self) -> Parsed<String> {
        let t = self.next();
        match &t.tok {
            Tok::Word(s) | Tok::Quoted(s) => Ok(s.clone()),
            _ => Err(self.syntax_error(&t)),
        }
    }

    /// After REGISTER: READER name ON table [(column, ...)]
    pub(super) fn register_reader(&mut self) -> Parsed<Statement> {
        self.expect_word("reader")?;
        let name = self.reader_name()?;
        self.expect_word("on")?;
        let table = self.table_name()?;
        let mut columns = Vec::new();
        if self.eat_sym('(') {
            loop {
                let t = self.peek().clone();
                let c = self.column_name()?;
                if columns.contains(&c) {
                    return Err(self.error_at(&t, "42701", format!("column \"{c}\" is named twice")));
                }
                columns.push(c);
                if !self.eat_sym(',') {
                    break;
                }
            }
            self.expect_sym(')')?;
        }
        Ok(Statement::RegisterReader { name, table, columns })
    }

    /// After UNREGISTER: READER name [ON table]
    pub(super) fn unregister_reader(&mut self) -> Parsed<Statement> {
        self.expect_word("reader")?;
        let name = self.reader_name()?;
        let table = if self.eat_word("on") { Some(self.table_name()?) } else { None };
        Ok(Statement::UnregisterReader { name, table })
    }

    /// After MARK: READER name CRITICAL
    pub(super) fn mark_reader(&mut self) -> Parsed<Statement> {
        self.expect_word("reader")?;
        let name = self.reader_name()?;
        self.expect_word("critical")?;
        Ok(Statement::MarkReader { name })
    }

    /// After UNMARK: READER name [CRITICAL]
    pub(super) fn unmark_reader(&mut self) -> Parsed<Statement> {
        self.expect_word("reader")?;
        let name = self.reader_name()?;
        self.eat_word("critical");
        Ok(Statement::UnmarkReader { name })
    }
}

#[cfg(test)]
mod tests {
    use crate::grammar::{parse, Statement};

    #[test]
    fn register_and_unregister() {
        assert_eq!(
            parse("register reader nightly_export on public.leads (status, \"Score\");").unwrap(),
            Statement::RegisterReader { name: "nightly_export".into(), table: "public.leads".into(), columns: vec!["status".into(), "Score".into()] }
        );
        assert_eq!(
            parse("REGISTER READER sync ON leads").unwrap(),
            Statement::RegisterReader { name: "sync".into(), table: "leads".into(), columns: vec![] }
        );
        assert_eq!(parse("unregister reader sync").unwrap(), Statement::UnregisterReader { name: "sync".into(), table: None });
        assert_eq!(
            parse("unregister reader sync on leads").unwrap(),
            Statement::UnregisterReader { name: "sync".into(), table: Some("leads".into()) }
        );
        assert_eq!(parse("register reader x on t (a, a)").unwrap_err().sqlstate, "42701");
        assert_eq!(parse("register reader x on t ()").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("register reader x").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("register reader my-export on t").unwrap_err().sqlstate, "42601");
    }

    #[test]
    fn mark_and_unmark() {
        assert_eq!(parse("mark reader billing critical").unwrap(), Statement::MarkReader { name: "billing".into() });
        assert_eq!(parse("MARK READER 'billing (nightly)' CRITICAL;").unwrap(), Statement::MarkReader { name: "billing (nightly)".into() });
        assert_eq!(parse("unmark reader billing").unwrap(), Statement::UnmarkReader { name: "billing".into() });
        assert_eq!(parse("mark reader billing").unwrap_err().sqlstate, "42601");
        assert_eq!(parse(&format!("mark reader '{}' critical", "x".repeat(201))).unwrap_err().sqlstate, "22023");
    }

    #[test]
    fn show_checkpoints() {
        assert_eq!(parse("show checkpoints").unwrap(), Statement::ShowCheckpoints { world: None });
        assert_eq!(parse("SHOW CHECKPOINTS FOR WORLD bot_task;").unwrap(), Statement::ShowCheckpoints { world: Some("bot_task".into()) });
        assert_eq!(parse("show checkpoints for bot_task").unwrap(), Statement::ShowCheckpoints { world: Some("bot_task".into()) });
    }

    #[test]
    fn show_readers_and_diff_readers() {
        assert_eq!(parse("show readers").unwrap(), Statement::ShowReaders);
        assert_eq!(
            parse("diff world cleanup readers;").unwrap(),
            Statement::Diff { from: Some("cleanup".into()), to: None, as_sql: false, limit: None, readers: true }
        );
        assert!(matches!(parse("diff readers").unwrap(), Statement::Diff { from: None, readers: true, .. }));
        assert!(matches!(parse("diff world a to b readers").unwrap(), Statement::Diff { to: Some(_), readers: true, .. }));
        assert_eq!(parse("diff readers as sql").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("diff readers readers").unwrap_err().sqlstate, "42601");
    }
}
