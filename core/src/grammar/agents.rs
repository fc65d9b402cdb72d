//! CREATE AGENT, ALTER AGENT, DROP AGENT (SHOW AGENTS is one word after SHOW).
use super::{Parsed, Parser, RestoreTarget, Statement, Tok};

impl Parser<'_> {
    /// An agent's name: a bare name (folded), a "quoted" name or a 'string'; held to names::check_agent_name.
    fn agent_name(&mut self) -> Parsed<String> {
        let t = self.next();
        let name = match &t.tok {
            Tok::Word(_) if self.peek().tok == Tok::Sym('-') => {
                return Err(self.error_at(&t, "42601", "agent names with a dash need quotes"));
            }
            Tok::Word(s) | Tok::Quoted(s) | Tok::Str(s) => s.clone(),
            _ => return Err(self.syntax_error(&t)),
        };
        crate::names::check_agent_name(&name).map_err(|(state, message)| self.error_at(&t, state, message))?;
        Ok(name)
    }

    /// CREATE AGENT name [WITH (key = value, ...)]
    pub(super) fn create_agent(&mut self) -> Parsed<Statement> {
        let name = self.agent_name()?;
        let settings = if self.eat_word("with") { self.settings()? } else { Vec::new() };
        Ok(Statement::CreateAgent { name, settings })
    }

    /// ALTER AGENT name SET (key = value, ...)
    pub(super) fn alter_agent(&mut self) -> Parsed<Statement> {
        let name = self.agent_name()?;
        self.expect_word("set")?;
        Ok(Statement::AlterAgent { name, settings: self.settings()? })
    }

    /// SHOW AUDIT [FOR [AGENT] name] [LIMIT n] (after SHOW AUDIT)
    pub(super) fn show_audit(&mut self) -> Parsed<Statement> {
        let agent = if self.eat_word("for") {
            self.eat_word("agent");
            Some(self.agent_name()?)
        } else {
            None
        };
        let limit = if self.eat_word("limit") { Some(self.integer()?) } else { None };
        Ok(Statement::ShowAudit { agent, limit })
    }

    /// UNDO AGENT name SINCE when [SKIP CHANGED] [WHERE run_id = 'id'] (after UNDO AGENT)
    pub(super) fn undo_agent(&mut self) -> Parsed<Statement> {
        let name = self.agent_name()?;
        self.expect_word("since")?;
        let since: RestoreTarget = self.moment_until(&["skip", "where"])?;
        let skip_changed = self.eat_word("skip");
        if skip_changed {
            self.expect_word("changed")?;
        }
        let run_id = if self.eat_word("where") {
            self.expect_word("run_id")?;
            let t = self.next();
            if t.tok != Tok::Sym('=') {
                return Err(self.syntax_error(&t));
            }
            Some(self.string()?)
        } else {
            None
        };
        Ok(Statement::UndoAgent { name, since, skip_changed, run_id })
    }

    /// DROP AGENT name
    pub(super) fn drop_agent(&mut self) -> Parsed<Statement> {
        Ok(Statement::DropAgent { name: self.agent_name()? })
    }
}

#[cfg(test)]
mod tests {
    use crate::grammar::{parse, MetaValue, Statement};

    #[test]
    fn agent_statements() {
        assert_eq!(
            parse("create agent bot with (can = 'read,fork', max_worlds = 3)").unwrap(),
            Statement::CreateAgent {
                name: "bot".into(),
                settings: vec![("can".into(), MetaValue::Text("read,fork".into())), ("max_worlds".into(), MetaValue::Number("3".into()))]
            }
        );
        assert_eq!(parse("CREATE AGENT \"Bot-1\"").unwrap(), Statement::CreateAgent { name: "Bot-1".into(), settings: vec![] });
        assert_eq!(
            parse("alter agent bot set (disabled = true)").unwrap(),
            Statement::AlterAgent { name: "bot".into(), settings: vec![("disabled".into(), MetaValue::Bool(true))] }
        );
        assert_eq!(parse("drop agent 'bot-2'").unwrap(), Statement::DropAgent { name: "bot-2".into() });
        assert_eq!(parse("show agents").unwrap(), Statement::ShowAgents);
        assert_eq!(parse("show audit").unwrap(), Statement::ShowAudit { agent: None, limit: None });
        assert_eq!(parse("show audit for agent bot limit 5").unwrap(), Statement::ShowAudit { agent: Some("bot".into()), limit: Some(5) });
        assert_eq!(parse("show audit for 'bot-2'").unwrap(), Statement::ShowAudit { agent: Some("bot-2".into()), limit: None });
        assert_eq!(parse("create agent bot").unwrap().writes(), Some("CREATE AGENT"));
    }

    #[test]
    fn undo_agent_forms() {
        use crate::grammar::RestoreTarget;
        assert_eq!(
            parse("undo agent bot since '-2 hours' skip changed").unwrap(),
            Statement::UndoAgent { name: "bot".into(), since: RestoreTarget::When("-2 hours".into()), skip_changed: true, run_id: None }
        );
        assert_eq!(
            parse("undo agent bot since '-1 day' where run_id = 'r42'").unwrap(),
            Statement::UndoAgent { name: "bot".into(), since: RestoreTarget::When("-1 day".into()), skip_changed: false, run_id: Some("r42".into()) }
        );
        assert_eq!(
            parse("undo agent bot since now() - interval '1 hour' skip changed where run_id = 'x'").unwrap(),
            Statement::UndoAgent {
                name: "bot".into(),
                since: RestoreTarget::Expr("now() - interval '1 hour'".into()),
                skip_changed: true,
                run_id: Some("x".into())
            }
        );
        assert_eq!(parse("undo agent bot since '-1 day'").unwrap().writes(), Some("UNDO AGENT"));
        assert!(parse("undo agent bot").is_err());
        assert!(parse("undo agent bot since").is_err());
        assert!(parse("undo agent bot since '-1 day' where model = 'x'").is_err());
        assert!(parse("undo agent bot since '-1 day' skip").is_err());
    }

    #[test]
    fn agent_names() {
        assert_eq!(parse("create agent bot-1").unwrap_err().sqlstate, "42601");
        assert_eq!(parse("create agent guest").unwrap_err().sqlstate, "22023");
        assert_eq!(parse("create agent \"SYSTEM\"").unwrap_err().sqlstate, "22023");
        assert_eq!(parse("create agent 'a b'").unwrap_err().sqlstate, "22023");
        assert_eq!(parse("create agent ''").unwrap_err().sqlstate, "22023");
        assert!(parse("alter agent bot (x = 1)").is_err());
    }
}
