//! CREATE / ALTER / DROP MERGE POLICY, SHOW MERGE POLICIES, SHOW REVIEWS (the last two after SHOW).
use super::{Parsed, Parser, Statement, Tok};

impl Parser<'_> {
    /// A policy's name: a bare name (folded), a "quoted" name or a 'string'; at most 63 bytes.
    fn policy_name(&mut self) -> Parsed<String> {
        let t = self.next();
        let name = match &t.tok {
            Tok::Word(_) if self.peek().tok == Tok::Sym('-') => {
                return Err(self.error_at(&t, "42601", "policy names with a dash need quotes"));
            }
            Tok::Word(s) | Tok::Quoted(s) | Tok::Str(s) => s.clone(),
            _ => return Err(self.syntax_error(&t)),
        };
        if name.is_empty() || name.len() > 63 {
            return Err(self.error_at(&t, "22023", "a merge policy's name must be 1 to 63 bytes long"));
        }
        Ok(name)
    }

    /// After CREATE MERGE: POLICY name [WITH (key = value, ...)]
    pub(super) fn create_policy(&mut self) -> Parsed<Statement> {
        self.expect_word("policy")?;
        let name = self.policy_name()?;
        let settings = if self.eat_word("with") { self.settings()? } else { Vec::new() };
        Ok(Statement::CreatePolicy { name, settings })
    }

    /// After ALTER MERGE: POLICY name SET (key = value, ...)
    pub(super) fn alter_policy(&mut self) -> Parsed<Statement> {
        self.expect_word("policy")?;
        let name = self.policy_name()?;
        self.expect_word("set")?;
        Ok(Statement::AlterPolicy { name, settings: self.settings()? })
    }

    /// After DROP MERGE: POLICY name [CASCADE]
    pub(super) fn drop_policy(&mut self) -> Parsed<Statement> {
        self.expect_word("policy")?;
        let name = self.policy_name()?;
        let cascade = self.eat_word("cascade");
        Ok(Statement::DropPolicy { name, cascade })
    }
}

#[cfg(test)]
mod tests {
    use crate::grammar::{parse, MetaValue, Statement};

    #[test]
    fn policy_statements() {
        assert_eq!(
            parse("CREATE MERGE POLICY small WITH (max_rows = 500, max_deletes = 0, review_tables = 'payments')").unwrap(),
            Statement::CreatePolicy {
                name: "small".into(),
                settings: vec![
                    ("max_rows".into(), MetaValue::Number("500".into())),
                    ("max_deletes".into(), MetaValue::Number("0".into())),
                    ("review_tables".into(), MetaValue::Text("payments".into())),
                ]
            }
        );
        assert_eq!(parse("create merge policy p").unwrap(), Statement::CreatePolicy { name: "p".into(), settings: vec![] });
        assert_eq!(
            parse("alter merge policy p set (max_rows = null)").unwrap(),
            Statement::AlterPolicy { name: "p".into(), settings: vec![("max_rows".into(), MetaValue::Null)] }
        );
        assert_eq!(parse("drop merge policy p cascade").unwrap(), Statement::DropPolicy { name: "p".into(), cascade: true });
        assert_eq!(parse("drop merge policy \"P-1\"").unwrap(), Statement::DropPolicy { name: "P-1".into(), cascade: false });
        assert_eq!(parse("show merge policies").unwrap(), Statement::ShowPolicies);
        assert_eq!(parse("show reviews").unwrap(), Statement::ShowReviews);
        assert_eq!(parse("create merge policy p").unwrap().writes(), Some("CREATE MERGE POLICY"));
        assert_eq!(parse("create merge policy p-1").unwrap_err().sqlstate, "42601");
        assert!(parse("create merge p").is_err());
        assert!(parse("alter merge policy p (x = 1)").is_err());
        assert!(parse("show merge").is_err());
    }
}
