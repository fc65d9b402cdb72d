//! The spec's MCP safe mode: "refuses every statement above except the SHOWs, DIFF, MERGE ... DRY RUN and
//! AS OF reads". The MCP server (`mcp/`) asks this before it sends a statement of the spec; the database
//! then runs it in a read-only transaction with `worlds.read_only` on, so what this lets through can still
//! only read.
use crate::grammar::{self, Statement};

/// Why safe mode refuses a statement: the SQLSTATE and a message naming the command.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub sqlstate: &'static str,
    pub message: String,
}

/// Ok when safe mode lets the statement (text of the spec, as `worlds.sql` takes it) through.
pub fn allows(text: &str) -> Result<(), Refusal> {
    // a SELECT (or WITH ... SELECT) reading tables AS OF a moment is a read; INSERT ... SELECT, UPDATE ...
    // FROM, CREATE TABLE ... AS reading the past are not
    match crate::as_of::rewrite_as_of(text) {
        Ok(Some(_)) => {
            let first = first_word(text);
            return if first == "select" || first == "with" {
                Ok(())
            } else {
                Err(refused(&first.to_ascii_uppercase()))
            };
        }
        Ok(None) => {}
        Err(e) => return Err(Refusal { sqlstate: e.sqlstate, message: e.message }),
    }
    let statement = grammar::parse(text).map_err(|e| Refusal { sqlstate: e.sqlstate, message: e.message })?;
    match &statement {
        Statement::ShowWorlds
        | Statement::ShowBranches
        | Statement::ShowHistory { .. }
        | Statement::ShowHistoryRetention
        | Statement::ShowAgents
        | Statement::ShowAudit { .. }
        | Statement::ShowPolicies
        | Statement::ShowReviews
        | Statement::ShowChecks
        | Statement::ShowReaders
        | Statement::ShowCheckpoints { .. }
        | Statement::ShowMetrics
        | Statement::ShowStorage { .. }
        | Statement::ShowDisk
        | Statement::Diff { .. }
        | Statement::CheckReads { .. } => Ok(()),
        Statement::Merge { clauses, .. } if clauses.dry_run => Ok(()),
        Statement::Switch { tag, .. } => Err(refused(tag)),
        other => Err(refused(other.writes().unwrap_or("this statement"))),
    }
}

fn first_word(text: &str) -> String {
    text.trim_start().split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or_default().to_ascii_lowercase()
}

fn refused(command: &str) -> Refusal {
    Refusal {
        sqlstate: "25006",
        message: format!("cannot execute {command} in MCP safe mode: it allows only the SHOWs, DIFF, MERGE ... DRY RUN, CHECK READS and AS OF reads"),
    }
}

#[cfg(test)]
mod tests {
    use super::allows;

    #[test]
    fn reads_pass() {
        for s in [
            "show worlds",
            "SHOW BRANCHES;",
            "show history for world w limit 5",
            "show reviews",
            "show metrics",
            "show merge checks",
            "show merge policies",
            "show agents",
            "show audit",
            "show history_retention",
            "diff",
            "diff world a to b as sql limit 10",
            "merge world w dry run",
            "MERGE WORLD w BY COLUMNS DRY RUN",
            "check reads of world w",
            "show storage",
            "show storage for world w",
            "show disk",
            "select * from orders as of '-1 hour'",
            "with o as (select * from orders as of '-1 hour') select count(*) from o",
        ] {
            assert_eq!(allows(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn writes_refused() {
        for (s, word) in [
            ("merge world w", "MERGE WORLD"),
            ("create world x", "CREATE WORLD"),
            ("fork world main as x", "CREATE WORLD"),
            ("drop world w", "DROP WORLD"),
            ("rebase world w", "REBASE WORLD"),
            ("restore world w to '-1 hour'", "RESTORE WORLD"),
            ("undo merge w", "UNDO MERGE"),
            ("checkpoint world w as 'x'", "CHECKPOINT WORLD"),
            ("switch world w", "SWITCH WORLD"),
            ("use w", "SWITCH WORLD"),
            ("alter world w set pinned", "ALTER WORLD"),
            ("create agent a", "CREATE AGENT"),
            ("alter system set history_retention = '1 day'", "ALTER SYSTEM"),
            ("insert into t select * from orders as of '-1 hour'", "INSERT"),
            ("create table t as select * from orders as of '-1 hour'", "CREATE"),
        ] {
            let e = allows(s).unwrap_err();
            assert_eq!(e.sqlstate, "25006", "{s}");
            assert!(e.message.contains(word), "{s}: {}", e.message);
        }
    }

    #[test]
    fn garbage_is_a_syntax_error_not_a_pass() {
        let e = allows("merge world w; drop world x").unwrap_err();
        assert_eq!(e.sqlstate, "42601");
        assert!(allows("").is_err());
        assert!(allows("select 1").is_err());
    }
}
