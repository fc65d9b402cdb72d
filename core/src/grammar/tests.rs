//! The grammar's tests: every statement form, its errors and their positions.
use super::*;

fn ok(text: &str) -> Statement {
    parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

fn err(text: &str) -> ParseError {
    match parse(text) {
        Ok(s) => panic!("{text}: parsed as {s:?}"),
        Err(e) => e,
    }
}

/// The error's SQLSTATE, message and position.
fn fails(text: &str) -> (&'static str, String, usize) {
    let e = err(text);
    (e.sqlstate, e.message, e.position)
}

fn syntax_at(text: &str, near: &str, position: usize) {
    assert_eq!(fails(text), ("42601", format!("syntax error at or near \"{near}\""), position), "{text}");
}

fn merge(text: &str) -> (Option<WorldRef>, MergeClauses) {
    match ok(text) {
        Statement::Merge { name, clauses, tag } => {
            assert_eq!(tag, "MERGE");
            (name, clauses)
        }
        s => panic!("{text}: {s:?}"),
    }
}

fn create(name: &str, source: Option<&str>, meta: Option<Meta>) -> Statement {
    Statement::CreateWorld { name: name.into(), source: source.map(Into::into), meta, branch: false, fork: false }
}

fn with(pairs: &[(&str, MetaValue)]) -> Option<Meta> {
    Some(Meta::With(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()))
}

fn text(s: &str) -> MetaValue {
    MetaValue::Text(s.into())
}

fn num(s: &str) -> MetaValue {
    MetaValue::Number(s.into())
}

fn switch(name: &str, tag: &'static str) -> Statement {
    Statement::Switch { name: name.into(), tag }
}

fn diff(from: Option<&str>, to: Option<&str>, as_sql: bool, limit: Option<i64>) -> Statement {
    Statement::Diff { from: from.map(Into::into), to: to.map(Into::into), as_sql, limit, readers: false }
}

// ---- the spec's examples, verbatim ----

#[test]
fn with_numbers_as_sql_writes_them() {
    assert_eq!(ok("create world a with (n = .5)"), create("a", None, with(&[("n", num("0.5"))])));
    assert_eq!(ok("create world a with (n = 5.)"), create("a", None, with(&[("n", num("5"))])));
    assert_eq!(ok("create world a with (n = +5)"), create("a", None, with(&[("n", num("5"))])));
    assert_eq!(ok("create world a with (n = -.5e2)"), create("a", None, with(&[("n", num("-0.5e2"))])));
    assert!(parse("create world a with (n = +x)").is_err());
}

#[test]
fn with_numbers_take_exponents() {
    assert_eq!(ok("create world a with (n = 1e3)"), create("a", None, with(&[("n", num("1e3"))])));
    assert_eq!(ok("create world a with (n = 2.5E-4)"), create("a", None, with(&[("n", num("2.5E-4"))])));
}

#[test]
fn spec_opening_example() {
    assert_eq!(ok("create world agent_7 with (task = 42);"), create("agent_7", None, with(&[("task", num("42"))])));
    assert_eq!(ok("switch world agent_7;"), switch("agent_7", "SWITCH WORLD"));
    assert_eq!(ok("diff;                       -- what agent_7 changed"), diff(None, None, false, None));
    assert_eq!(
        merge("merge world agent_7;        -- into main; the session moves back to main"),
        (Some("agent_7".into()), MergeClauses::default())
    );
}

#[test]
fn spec_names_and_moments() {
    assert_eq!(ok("switch world '<id>'"), switch("<id>", "SWITCH WORLD"));
    assert_eq!(
        ok("fork world '<id>' as b"),
        Statement::CreateWorld {
            name: "b".into(),
            source: Some("<id>".into()),
            meta: None,
            branch: false,
            fork: true
        }
    );
    assert_eq!(fails("create world task-1"), ("42601", "world names with a dash need quotes".into(), 14));
    assert_eq!(merge("MERGE WORLD ours").0, None);
    assert_eq!(merge("MERGE WORLD ours").1.using, Some(Side::Ours));
    assert_eq!(merge("MERGE WORLD \"ours\"").0, Some("ours".into()));
}

#[test]
fn spec_create_world() {
    assert_eq!(
        ok("create world agent_7 from main with (owner = 'claude', task = 42);"),
        create("agent_7", Some("main"), with(&[("owner", text("claude")), ("task", num("42"))]))
    );
    assert_eq!(
        ok("create world run_r42 with (run_id = 'r42', prompt_version = 'triage-v9', model = 'claude-opus-5-5', tool_schema = 'crm-tools-3');"),
        create(
            "run_r42",
            None,
            with(&[
                ("run_id", text("r42")),
                ("prompt_version", text("triage-v9")),
                ("model", text("claude-opus-5-5")),
                ("tool_schema", text("crm-tools-3")),
            ])
        )
    );
    assert_eq!(ok("create world check_it from 'main@-1 hour';"), create("check_it", Some("main@-1 hour"), None));
}

#[test]
fn spec_fork_world() {
    assert_eq!(
        ok(r#"fork world agent_7 as agent_7b meta '{"tags": ["retry"]}';"#),
        Statement::CreateWorld {
            name: "agent_7b".into(),
            source: Some("agent_7".into()),
            meta: Some(Meta::Json(r#"{"tags": ["retry"]}"#.into())),
            branch: false,
            fork: true
        }
    );
    assert_eq!(
        ok("fork world 'main@2026-09-20 10:00' as before_the_deploy;"),
        Statement::CreateWorld {
            name: "before_the_deploy".into(),
            source: Some("main@2026-09-20 10:00".into()),
            meta: None,
            branch: false,
            fork: true
        }
    );
}

#[test]
fn spec_switch_world() {
    assert_eq!(ok("switch world agent_7;"), switch("agent_7", "SWITCH WORLD"));
    assert_eq!(ok("use world '<its id>';   -- by ID, from SHOW WORLDS"), switch("<its id>", "SWITCH WORLD"));
}

#[test]
fn spec_alter_world() {
    assert_eq!(
        ok("alter world agent_7 set (task = null, reviewer = 'ada');"),
        Statement::AlterWorld {
            name: "agent_7".into(),
            action: AlterAction::Set(vec![("task".into(), MetaValue::Null), ("reviewer".into(), text("ada"))])
        }
    );
    assert_eq!(
        ok("alter world agent_7 set ttl '1 day';"),
        Statement::AlterWorld { name: "agent_7".into(), action: AlterAction::SetTtl("1 day".into()) }
    );
}

#[test]
fn spec_drop_world() {
    assert_eq!(
        ok("drop world agent_7 cascade;"),
        Statement::DropWorld { name: "agent_7".into(), if_exists: false, cascade: true, tag: "DROP WORLD" }
    );
}

#[test]
fn spec_diff() {
    assert_eq!(ok("diff world agent_7;"), diff(Some("agent_7"), None, false, None));
    assert_eq!(
        ok("diff world 'main@-1 hour' to main as sql;"),
        diff(Some("main@-1 hour"), Some("main"), true, None)
    );
    assert_eq!(fails("diff world cleanup readers as sql;"), ("42601", "DIFF ... READERS has no AS SQL".into(), 28));
}

#[test]
fn spec_merge() {
    let (name, c) = merge(
        r#"merge world agent_7 by columns resolve ('orders/7' = theirs, 'orders/9' = '{"id": 9, "status": "paid"}');"#,
    );
    assert_eq!(name.as_deref(), Some("agent_7"));
    assert_eq!(
        c,
        MergeClauses {
            by_columns: true,
            resolve: vec![
                ("orders/7".into(), Resolution::Theirs),
                ("orders/9".into(), Resolution::Row(r#"{"id": 9, "status": "paid"}"#.into())),
            ],
            ..Default::default()
        }
    );
    assert_eq!(
        merge("merge world agent_7 only tables (orders);"),
        (Some("agent_7".into()), MergeClauses { only_tables: Some(vec!["orders".into()]), ..Default::default() })
    );
    assert_eq!(
        merge("merge world agent_7b into agent_7;"),
        (Some("agent_7b".into()), MergeClauses { into: Some("agent_7".into()), ..Default::default() })
    );
    assert_eq!(
        merge("MERGE WORLD bot_world;   -- a person approves"),
        (Some("bot_world".into()), MergeClauses::default())
    );
    assert_eq!(merge("MERGE WORLD x CONFIRM DELETES 4812").1.confirm_deletes, Some(4812));
    assert_eq!(merge("merge world payout;").0.as_deref(), Some("payout"));
    assert_eq!(merge("merge world close_stale;").0.as_deref(), Some("close_stale"));
    assert_eq!(merge("MERGE WORLD cleanup;").0.as_deref(), Some("cleanup"));
}

#[test]
fn spec_stale_reads_and_scope() {
    assert_eq!(
        ok("create world payout with (check_reads = true);   -- only when forking: what it read before isn't known later"),
        create("payout", None, with(&[("check_reads", MetaValue::Bool(true))]))
    );
    assert_eq!(
        ok("alter world payout set (check_reads = false);    -- a person's way past it"),
        Statement::AlterWorld {
            name: "payout".into(),
            action: AlterAction::Set(vec![("check_reads".into(), MetaValue::Bool(false))])
        }
    );
    assert_eq!(ok("check reads of world payout;"), Statement::CheckReads { world: Some(WorldRef::from("payout")) });
    assert_eq!(ok("CHECK READS"), Statement::CheckReads { world: None });
    assert!(parse("check reads of payout").is_err());
    let close_stale = "create world close_stale with (
  may_change = 'leads.status, lists',  -- whole tables, or single columns
  tenant     = 'org_id = 42',          -- every row changed has org_id = 42, before and after
  max_rows   = 250,                    -- rows this run changes, across every table
  max_deletes = 0,                     -- and how many of them it may delete
  intent     = 'close leads idle 90 days',
  run        = 'planner/3'             -- your own id for the run (a subagent's, a job's)
);";
    assert_eq!(
        ok(close_stale),
        create(
            "close_stale",
            None,
            with(&[
                ("may_change", text("leads.status, lists")),
                ("tenant", text("org_id = 42")),
                ("max_rows", num("250")),
                ("max_deletes", num("0")),
                ("intent", text("close leads idle 90 days")),
                ("run", text("planner/3")),
            ])
        )
    );
    assert_eq!(
        ok("ALTER WORLD w SET (may_change = 'leads')"),
        Statement::AlterWorld {
            name: "w".into(),
            action: AlterAction::Set(vec![("may_change".into(), text("leads"))])
        }
    );
}

#[test]
fn spec_rebase() {
    assert_eq!(
        ok("rebase world agent_7;                         -- conflicts refuse it (40001), naming them"),
        Statement::Rebase {
            name: Some("agent_7".into()),
            using: None,
            by_columns: false,
            resolve: vec![],
            at_version: None
        }
    );
    assert_eq!(
        ok("rebase world agent_7 by columns using theirs;"),
        Statement::Rebase {
            name: Some("agent_7".into()),
            using: Some(Side::Theirs),
            by_columns: true,
            resolve: vec![],
            at_version: None
        }
    );
}

#[test]
fn spec_undo_merge() {
    assert_eq!(
        ok("undo merge of world agent_7 skip changed;"),
        Statement::UndoMerge { name: "agent_7".into(), skip_changed: true }
    );
}

#[test]
fn spec_restore_and_checkpoint() {
    assert_eq!(
        ok("restore world main to '-10 minutes';"),
        Statement::Restore { name: "main".into(), to: RestoreTarget::When("-10 minutes".into()) }
    );
    assert_eq!(
        ok("restore world bot_task to checkpoint 'before';"),
        Statement::Restore { name: "bot_task".into(), to: RestoreTarget::Checkpoint("before".into()) }
    );
    assert_eq!(
        ok("CHECKPOINT WORLD bot_task AS 'before'"),
        Statement::Checkpoint { name: "bot_task".into(), label: "before".into() }
    );
}

#[test]
fn spec_history_retention() {
    assert_eq!(
        ok("ALTER SYSTEM SET history_retention = '2 days'"),
        Statement::SetHistoryRetention { value: "2 days".into() }
    );
    assert_eq!(
        ok("ALTER SYSTEM SET history_retention TO '0'"),
        Statement::SetHistoryRetention { value: "0".into() }
    );
    assert_eq!(ok("SHOW history_retention"), Statement::ShowHistoryRetention);
}

// ---- every form ----

#[test]
fn create_forms() {
    assert_eq!(
        ok("CREATE BRANCH b FROM a META '{}'"),
        Statement::CreateWorld {
            name: "b".into(),
            source: Some("a".into()),
            meta: Some(Meta::Json("{}".into())),
            branch: true,
            fork: false
        }
    );
    assert_eq!(
        ok("create world w with (a = -1.5, b = 2.25, c = false, \"Key\" = 'x', d = null)"),
        create(
            "w",
            None,
            with(&[
                ("a", num("-1.5")),
                ("b", num("2.25")),
                ("c", MetaValue::Bool(false)),
                ("Key", text("x")),
                ("d", MetaValue::Null)
            ])
        )
    );
    assert_eq!(ok("create world w meta $${\"a\": 1}$$"), create("w", None, Some(Meta::Json("{\"a\": 1}".into()))));
    syntax_at("create world w with ()", ")", 22);
    syntax_at("create world w with (a = b)", "b", 26);
    syntax_at("create world w with (a = 1,)", ")", 28);
    syntax_at("create world w with ('a' = 1)", "'a'", 22);
    syntax_at("create world w with (a = -'x')", "'x'", 27);
    syntax_at("create world w with (a = 1) from main", "from", 29);
    syntax_at("create world w meta (a = 1)", "(", 21);
    syntax_at("create world w with (a = 1) meta '{}'", "meta", 29);
    syntax_at("create worlds w", "worlds", 8);
    assert_eq!(fails("create world"), ("42601", "syntax error at end of input".into(), 13));
}

#[test]
fn fork_forms() {
    let forked = |name: &str, source: &str, meta| Statement::CreateWorld {
        name: name.into(),
        source: Some(source.into()),
        meta,
        branch: false,
        fork: true,
    };
    assert_eq!(ok("fork world a b"), forked("b", "a", None));
    assert_eq!(ok("FORK WORLD \"A\" AS \"B-2\" WITH (x = 1)"), forked("B-2", "A", with(&[("x", num("1"))])));
    assert_eq!(ok("fork world 'main@-15 minutes' as 'then'"), forked("then", "main@-15 minutes", None));
    syntax_at("fork branch a as b", "branch", 6);
    assert_eq!(fails("fork world a as"), ("42601", "syntax error at end of input".into(), 16));
}

#[test]
fn switch_forms_and_tags() {
    assert_eq!(ok("SWITCH WORLD a"), switch("a", "SWITCH WORLD"));
    assert_eq!(ok("SWITCH BRANCH a"), switch("a", "USE BRANCH"));
    assert_eq!(ok("USE WORLD a"), switch("a", "SWITCH WORLD"));
    assert_eq!(ok("USE BRANCH a"), switch("a", "USE BRANCH"));
    assert_eq!(ok("USE a"), switch("a", "SWITCH WORLD"));
    assert_eq!(ok("use \"World\""), switch("World", "SWITCH WORLD"));
    assert_eq!(ok("switch world ours"), switch("ours", "SWITCH WORLD"));
    assert_eq!(fails("use"), ("42601", "syntax error at end of input".into(), 4));
    syntax_at("switch a", "a", 8);
    syntax_at("switch world a b", "b", 16);
}

#[test]
fn show_forms() {
    assert_eq!(ok("SHOW WORLDS"), Statement::ShowWorlds);
    assert_eq!(ok("show branches;"), Statement::ShowBranches);
    assert_eq!(ok("SHOW HISTORY"), Statement::ShowHistory { name: None, limit: None });
    assert_eq!(ok("show history for a"), Statement::ShowHistory { name: Some("a".into()), limit: None });
    assert_eq!(
        ok("show history for world \"A\" limit 5"),
        Statement::ShowHistory { name: Some("A".into()), limit: Some(5) }
    );
    assert_eq!(ok("show history limit 10"), Statement::ShowHistory { name: None, limit: Some(10) });
    assert_eq!(ok("SHOW HISTORY_RETENTION;"), Statement::ShowHistoryRetention);
    syntax_at("show history limit 10 for a", "for", 23);
    syntax_at("show storagex", "storagex", 6);
    assert_eq!(fails("show history limit"), ("42601", "syntax error at end of input".into(), 19));
}

#[test]
fn alter_forms() {
    let alter = |text: &str| match ok(text) {
        Statement::AlterWorld { name, action } => (name, action),
        s => panic!("{s:?}"),
    };
    assert_eq!(alter("ALTER WORLD a RESET TTL"), ("a".into(), AlterAction::ResetTtl));
    assert_eq!(alter("alter world a set pinned"), ("a".into(), AlterAction::SetPinned));
    assert_eq!(alter("alter world a reset pinned;"), ("a".into(), AlterAction::ResetPinned));
    assert_eq!(alter("alter world 'a' set ttl $$2 hours$$"), ("a".into(), AlterAction::SetTtl("2 hours".into())));
    let (state, message, position) = fails("alter world a set ttl = '1 day'");
    assert_eq!((state, position), ("42601", 23));
    assert!(message.contains("no ="), "{message}");
    syntax_at("alter world a set ttl 5", "5", 23);
    syntax_at("alter world a set foo", "foo", 19);
    syntax_at("alter world a reset foo", "foo", 21);
    syntax_at("alter world a drop", "drop", 15);
    assert!(matches!(ok("alter agent a set (x = 1)"), Statement::AlterAgent { .. }));
}

#[test]
fn alter_system_forms() {
    assert_eq!(ok("alter system set history_retention to 0"), Statement::SetHistoryRetention { value: "0".into() });
    assert_eq!(
        ok("ALTER SYSTEM SET HISTORY_RETENTION = '1 hour';"),
        Statement::SetHistoryRetention { value: "1 hour".into() }
    );
    syntax_at("alter system set work_mem = '1MB'", "work_mem", 18);
    syntax_at("alter system set history_retention '1 hour'", "'1 hour'", 36);
    syntax_at("alter system set history_retention = forever", "forever", 38);
}

#[test]
fn drop_forms() {
    let dropped =
        |name: &str, if_exists, cascade, tag| Statement::DropWorld { name: name.into(), if_exists, cascade, tag };
    assert_eq!(ok("DROP WORLD a"), dropped("a", false, false, "DROP WORLD"));
    assert_eq!(ok("drop world if exists a cascade"), dropped("a", true, true, "DROP WORLD"));
    assert_eq!(ok("DELETE WORLD IF EXISTS a"), dropped("a", true, false, "DROP WORLD"));
    assert_eq!(ok("delete world a cascade;"), dropped("a", false, true, "DROP WORLD"));
    assert_eq!(ok("DROP BRANCH IF EXISTS \"b\" CASCADE"), dropped("b", true, true, "DROP BRANCH"));
    // `if` alone is a name
    assert_eq!(ok("drop world if"), dropped("if", false, false, "DROP WORLD"));
    syntax_at("drop world a restrict", "restrict", 14);
    syntax_at("delete branch a", "branch", 8);
}

#[test]
fn diff_forms_and_clause_order() {
    assert_eq!(ok("DIFF"), diff(None, None, false, None));
    assert_eq!(ok("diff a"), diff(Some("a"), None, false, None));
    assert_eq!(ok("diff branch a"), diff(Some("a"), None, false, None));
    assert_eq!(ok("diff a to b"), diff(Some("a"), Some("b"), false, None));
    assert_eq!(ok("diff as sql"), diff(None, None, true, None));
    assert_eq!(ok("diff limit 50"), diff(None, None, false, Some(50)));
    assert_eq!(ok("diff world a to 'b@now' as sql limit 3"), diff(Some("a"), Some("b@now"), true, Some(3)));
    assert_eq!(ok("diff world a to b limit 3 as sql"), diff(Some("a"), Some("b"), true, Some(3)));
    assert_eq!(ok("diff \"as\""), diff(Some("as"), None, false, None));
    assert_eq!(fails("diff readers limit 3"), ("42601", "DIFF ... READERS has no LIMIT".into(), 14));
    assert_eq!(fails("diff a as sql as sql"), ("42601", "AS SQL is given twice".into(), 15));
    assert_eq!(fails("diff limit 1 limit 2"), ("42601", "LIMIT is given twice".into(), 14));
    syntax_at("diff to b", "to", 6);
    syntax_at("diff a as json", "json", 11);
    syntax_at("diff a b", "b", 8);
    assert_eq!(fails("diff world"), ("42601", "syntax error at end of input".into(), 11));
}

#[test]
fn merge_every_clause() {
    let (name, c) = merge(
        "MERGE BRANCH a INTO b ONLY TABLES (orders, app.items, \"Orders\", app.\"Line\"\"Items\") \
         ONLY KEYS ('orders/1', 't/(1,abc)') USING OURS BY COLUMNS \
         RESOLVE ('t/1' = ours, 't/2' = DELETE, 't/3' = $j${\"id\": 3}$j$) \
         CONFIRM CONFIRM DELETES 0 TARGET 17 DRY RUN",
    );
    assert_eq!(name.as_deref(), Some("a"));
    assert_eq!(
        c,
        MergeClauses {
            into: Some("b".into()),
            only_tables: Some(vec![
                "orders".into(),
                "app.items".into(),
                "\"Orders\"".into(),
                "app.\"Line\"\"Items\"".into()
            ]),
            only_keys: Some(vec!["orders/1".into(), "t/(1,abc)".into()]),
            using: Some(Side::Ours),
            by_columns: true,
            resolve: vec![
                ("t/1".into(), Resolution::Ours),
                ("t/2".into(), Resolution::Delete),
                ("t/3".into(), Resolution::Row("{\"id\": 3}".into())),
            ],
            confirm: true,
            confirm_deletes: Some(0),
            target: Some(17),
            at_version: None,
            dry_run: true,
        }
    );
    assert_eq!(merge("merge world a at version 12").1.at_version, Some(12));
    assert_eq!(merge("merge world a theirs").1.using, Some(Side::Theirs));
    assert_eq!(merge("merge world a using theirs").1.using, Some(Side::Theirs));
    assert_eq!(merge("merge world a only tables ('App.Orders')").1.only_tables, Some(vec!["App.Orders".into()]));
    assert_eq!(merge("merge world a only tables (Orders)").1.only_tables, Some(vec!["orders".into()]));
}

#[test]
fn merge_names_and_merge_words() {
    let end = Token { tok: Tok::End, start: 0, end: 0 };
    for word in crate::names::MERGE_WORDS {
        assert!(Clause::starting(word, &end).is_some(), "{word}");
    }
    assert_eq!(merge("MERGE WORLD"), (None, MergeClauses::default()));
    assert_eq!(merge("merge branch;"), (None, MergeClauses::default()));
    assert_eq!(merge("merge world dry run"), (None, MergeClauses { dry_run: true, ..Default::default() }));
    assert_eq!(merge("merge world into b").1.into.as_deref(), Some("b"));
    assert_eq!(merge("merge world at version 3").1.at_version, Some(3));
    assert_eq!(merge("merge world target 3").1.target, Some(3));
    assert!(merge("merge world confirm").1.confirm);
    assert_eq!(
        merge("merge world 'ours' ours"),
        (Some("ours".into()), MergeClauses { using: Some(Side::Ours), ..Default::default() })
    );
    assert_eq!(merge("merge world \"Theirs\"").0.as_deref(), Some("Theirs"));
    assert_eq!(merge("merge world 'agent-7@-1 hour'").0.as_deref(), Some("agent-7@-1 hour"));
    assert_eq!(fails("merge world target"), ("42601", "syntax error at end of input".into(), 19));
    syntax_at("merge world a b", "b", 15);
    syntax_at("merge a", "a", 7);
}

#[test]
fn merge_clause_order_does_not_matter() {
    let clauses = [
        "into b",
        "only tables (t)",
        "only keys ('t/1')",
        "using ours",
        "by columns",
        "resolve ('t/2' = theirs)",
        "target 4",
        "dry run",
    ];
    let expected = merge(&format!("merge world a {}", clauses.join(" "))).1;
    let mut reversed = clauses;
    reversed.reverse();
    let rotated: Vec<&str> = clauses[3..].iter().chain(&clauses[..3]).copied().collect();
    for order in [reversed.to_vec(), rotated] {
        assert_eq!(merge(&format!("merge world a {}", order.join(" "))).1, expected, "{order:?}");
    }
    assert_eq!(
        merge("merge world a dry run confirm deletes 5 confirm").1,
        merge("merge world a confirm confirm deletes 5 dry run").1
    );
}

#[test]
fn merge_clause_given_twice() {
    // at the second one, the last `word` in the text
    let twice = |text: &str, clause: &str, word: &str| {
        let position = text.rfind(word).unwrap() + 1;
        assert_eq!(fails(text), ("42601", format!("{clause} is given twice"), position), "{text}");
    };
    twice("merge world a into b into c", "INTO", "into");
    twice("merge world a ours theirs", "USING", "theirs");
    twice("merge world a using ours using ours", "USING", "using");
    twice("merge world a only tables (t) only tables (u)", "ONLY TABLES", "only");
    twice("merge world a only keys ('t/1') only keys ('t/1')", "ONLY KEYS", "only");
    twice("merge world a by columns by columns", "BY COLUMNS", "by");
    twice("merge world a resolve ('t/1' = ours) resolve ('t/2' = ours)", "RESOLVE", "resolve");
    twice("merge world a confirm confirm", "CONFIRM", "confirm");
    twice("merge world a confirm deletes 1 confirm deletes 1", "CONFIRM DELETES", "confirm");
    twice("merge world a target 1 target 1", "TARGET", "target");
    twice("merge world a at version 1 at version 1", "AT VERSION", "at");
    twice("merge world a dry run dry run", "DRY RUN", "dry");
}

#[test]
fn merge_confirm_and_at_version_conflict() {
    for (text, position) in [("merge world a confirm at version 3", 23), ("merge world a at version 3 confirm", 28)]
    {
        let (state, message, at) = fails(text);
        assert_eq!((state, at), ("42601", position), "{text}");
        assert!(message.contains("CONFIRM") && message.contains("AT VERSION"), "{message}");
    }
    // CONFIRM DELETES is another clause, and goes with AT VERSION
    let c = merge("merge world a confirm deletes 3 at version 4").1;
    assert_eq!((c.confirm, c.confirm_deletes, c.at_version), (false, Some(3), Some(4)));
}

#[test]
fn merge_malformed_clauses() {
    assert_eq!(fails("merge world a using"), ("42601", "syntax error at end of input".into(), 20));
    syntax_at("merge world a using both", "both", 21);
    syntax_at("merge world a only (t)", "(", 20);
    syntax_at("merge world a only tables ()", ")", 28);
    syntax_at("merge world a only keys (t)", "t", 26);
    syntax_at("merge world a by rows", "rows", 18);
    syntax_at("merge world a resolve ('t/1' = mine)", "mine", 32);
    syntax_at("merge world a resolve (t = ours)", "t", 24);
    syntax_at("merge world a dry rum", "rum", 19);
    syntax_at("merge world a target x", "x", 22);
    syntax_at("merge world a at 3", "3", 18);
    syntax_at("merge world a confirm deletes 1.5", "1.5", 31);
    syntax_at("merge world a only tables (app.)", ")", 32);
    assert_eq!(fails("merge world a target 9223372036854775808").0, "22003");
    assert_eq!(merge("merge world a target -9223372036854775808").1.target, Some(i64::MIN));
}

#[test]
fn rebase_forms() {
    assert_eq!(
        ok("REBASE WORLD"),
        Statement::Rebase { name: None, using: None, by_columns: false, resolve: vec![], at_version: None }
    );
    assert_eq!(
        ok("rebase world using ours resolve ('t/1' = ours) at version 7"),
        Statement::Rebase {
            name: None,
            using: Some(Side::Ours),
            by_columns: false,
            resolve: vec![("t/1".into(), Resolution::Ours)],
            at_version: Some(7)
        }
    );
    assert_eq!(
        ok("rebase world \"a\" at version 2 theirs by columns;"),
        Statement::Rebase {
            name: Some("a".into()),
            using: Some(Side::Theirs),
            by_columns: true,
            resolve: vec![],
            at_version: Some(2)
        }
    );
    for (text, clause, position) in [
        ("rebase world a into b", "INTO", 16),
        ("rebase world a only tables (t)", "ONLY", 16),
        ("rebase world confirm", "CONFIRM", 14),
        ("rebase world a confirm deletes 3", "CONFIRM", 16),
        ("rebase world a target 3", "TARGET", 16),
        ("rebase world a dry run", "DRY RUN", 16),
    ] {
        let (state, message, at) = fails(text);
        assert_eq!((state, at), ("42601", position), "{text}");
        assert!(message.starts_with(&format!("REBASE WORLD doesn't take {clause}:")), "{message}");
    }
    syntax_at("rebase branch a", "branch", 8);
    assert_eq!(fails("rebase world a by columns by columns").1, "BY COLUMNS is given twice");
}

#[test]
fn undo_merge_forms() {
    let undo = |name: &str, skip_changed| Statement::UndoMerge { name: name.into(), skip_changed };
    assert_eq!(ok("UNDO MERGE a"), undo("a", false));
    assert_eq!(ok("undo merge of a"), undo("a", false));
    assert_eq!(ok("undo merge branch a skip changed"), undo("a", true));
    assert_eq!(ok("undo merge of branch 'a'"), undo("a", false));
    assert_eq!(fails("undo merge a skip"), ("42601", "syntax error at end of input".into(), 18));
    assert_eq!(fails("undo merge of world"), ("42601", "syntax error at end of input".into(), 20));
}

#[test]
fn restore_expressions() {
    let restore = |text: &str| match ok(text) {
        Statement::Restore { to, .. } => to,
        s => panic!("{s:?}"),
    };
    assert_eq!(
        restore("restore world main to now() - interval '1 hour';"),
        RestoreTarget::Expr("now() - interval '1 hour'".into())
    );
    assert_eq!(restore("restore world main to $1"), RestoreTarget::Expr("$1".into()));
    assert_eq!(restore("restore world main to now"), RestoreTarget::When("now".into()));
    assert_eq!(restore("restore world main to NOW;"), RestoreTarget::When("now".into()));
    assert_eq!(restore("restore world main to now() -- then\n;"), RestoreTarget::Expr("now()".into()));
    assert_eq!(
        restore("restore world main to '2026-09-20'::date ;  "),
        RestoreTarget::Expr("'2026-09-20'::date".into())
    );
    assert_eq!(restore("restore world main to (now())"), RestoreTarget::Expr("(now())".into()));
    assert_eq!(restore("restore world main to E'-1\\x20hour'"), RestoreTarget::When("-1 hour".into()));
    assert_eq!(
        restore("restore world main to $$2026-09-20 10:00:00+02$$"),
        RestoreTarget::When("2026-09-20 10:00:00+02".into())
    );
    assert_eq!(restore("RESTORE WORLD main TO CHECKPOINT $$x$$"), RestoreTarget::Checkpoint("x".into()));
    syntax_at("restore world main to now(); drop table t", ";", 28);
    syntax_at("restore world main to now())", ")", 28);
    assert_eq!(fails("restore world main to (now()"), ("42601", "syntax error at end of input".into(), 29));
    assert_eq!(fails("restore world main to ;"), ("42601", "syntax error at or near \";\"".into(), 23));
    assert_eq!(fails("restore world main to"), ("42601", "syntax error at end of input".into(), 22));
    syntax_at("restore world main to checkpoint before", "before", 34);
    syntax_at("restore world main '-1 hour'", "'-1 hour'", 20);
}

#[test]
fn checkpoint_forms() {
    assert_eq!(
        ok("checkpoint world \"A\" as $$x y$$;"),
        Statement::Checkpoint { name: "A".into(), label: "x y".into() }
    );
    syntax_at("checkpoint world a as before", "before", 23);
    syntax_at("checkpoint world a 'x'", "'x'", 20);
    syntax_at("checkpoint;", ";", 11);
}

// ---- tokens ----

#[test]
fn keywords_are_case_insensitive_and_bare_names_fold() {
    assert_eq!(ok("CrEaTe WoRlD Agent_7 FrOm MAIN"), create("agent_7", Some("main"), None));
    assert_eq!(
        merge("MERGE WORLD A USING THEIRS BY COLUMNS DRY RUN").1,
        merge("merge world a using theirs by columns dry run").1
    );
    assert_eq!(ok("Show Worlds"), Statement::ShowWorlds);
    assert_eq!(
        ok("create world w with (Task = TRUE)"),
        create("w", None, with(&[("task", MetaValue::Bool(true))]))
    );
}

#[test]
fn quoted_names_and_strings_are_kept_as_written() {
    assert_eq!(ok("create world \"Agent \"\"7\"\"\""), create("Agent \"7\"", None, None));
    assert_eq!(ok("create world 'it''s'"), create("it's", None, None));
    assert_eq!(ok("create world 'agent-7'"), create("agent-7", None, None));
    assert_eq!(ok("create world \"agent-7\""), create("agent-7", None, None));
    assert_eq!(ok("create world \"wörld\""), create("wörld", None, None));
    assert_eq!(ok("create world Wörld"), create("wörld", None, None));
    assert_eq!(ok("create world a$b"), create("a$b", None, None));
}

#[test]
fn escape_strings() {
    let meta = |text: &str| match ok(text) {
        Statement::CreateWorld { meta: Some(Meta::Json(j)), .. } => j,
        s => panic!("{s:?}"),
    };
    assert_eq!(meta(r"create world w meta E'a\nb\t\\\'c'''"), "a\nb\t\\'c'");
    assert_eq!(meta(r"create world w meta e'\x41\101\u00e9\U0001F600\q'"), "AAé😀q");
    assert_eq!(meta(r"create world w meta E'\xc3\xa9'"), "é");
    assert_eq!(fails(r"create world w meta E'\u00'").0, "22025");
    assert_eq!(fails(r"create world w meta E'\0'").0, "22021");
    assert_eq!(fails(r"create world w meta E'\xff'").0, "22021");
    assert_eq!(fails(r"create world w meta E'abc\'").1, r#"unterminated quoted string at or near "E'abc\'""#);
}

#[test]
fn dollar_quotes() {
    let meta = |text: &str| match ok(text) {
        Statement::CreateWorld { meta: Some(Meta::Json(j)), .. } => j,
        s => panic!("{s:?}"),
    };
    assert_eq!(meta("create world w meta $${\"a\": \"it's\"}$$"), "{\"a\": \"it's\"}");
    assert_eq!(meta("create world w meta $tag${\"a\": \"$$\"}$tag$"), "{\"a\": \"$$\"}");
    assert_eq!(meta("create world w meta $_1$$_1$"), "");
    assert_eq!(meta("create world w meta $ü$x$ü$"), "x");
    assert_eq!(
        fails("create world w meta $t$ {} $$"),
        ("42601", "unterminated dollar-quoted string at or near \"$t$ {} $$\"".into(), 21)
    );
}

#[test]
fn semicolons_whitespace_and_comments() {
    for text in [
        "show worlds",
        "show worlds;",
        "  show worlds ;  ",
        "\n\tshow\n worlds;\n",
        "show worlds; -- trailing",
        "-- leading\nshow worlds",
        "show /* inside /* nested */ still */ worlds",
        "show worlds /* after */ ;",
    ] {
        assert_eq!(ok(text), Statement::ShowWorlds, "{text:?}");
    }
    syntax_at("show worlds;;", ";", 13);
    syntax_at("show worlds; show branches", "show", 14);
    assert_eq!(
        fails("show /* open worlds"),
        ("42601", "unterminated /* comment at or near \"/* open worlds\"".into(), 6)
    );
}

#[test]
fn empty_input_is_a_syntax_error() {
    for text in ["", "   ", "-- nothing"] {
        let e = err(text);
        assert_eq!((e.sqlstate, e.message.as_str()), ("42601", "syntax error at end of input"), "{text:?}");
        assert_eq!(e.position, text.chars().count() + 1);
    }
    syntax_at(";", ";", 1);
}

#[test]
fn error_positions_count_characters() {
    syntax_at("create world \"wörld\" garbage", "garbage", 22);
    syntax_at("select 1", "select", 1);
    syntax_at("  frobnicate", "frobnicate", 3);
    syntax_at("create world 42", "42", 14);
    assert_eq!(
        fails("create world 'wörld"),
        ("42601", "unterminated quoted string at or near \"'wörld\"".into(), 14)
    );
    assert_eq!(
        fails("switch world \"ab"),
        ("42601", "unterminated quoted identifier at or near \"\"ab\"".into(), 14)
    );
    assert_eq!(fails("ünï dröp"), ("42601", "syntax error at or near \"ünï\"".into(), 1));
    syntax_at("drop world ü x", "x", 14);
}

// ---- names ----

#[test]
fn a_bare_name_with_a_dash_needs_quotes() {
    let dash = ("42601", "world names with a dash need quotes".to_string());
    for (text, position) in [
        ("create world task-1", 14),
        ("CREATE BRANCH agent-seven", 15),
        ("create world a from task-1", 21),
        ("fork world task-1 as b", 12),
        ("fork world a as b-2", 17),
        ("switch world task-1", 14),
        ("use task-1;", 5),
        ("drop world if exists task-1", 22),
        ("diff world a to task-1", 17),
        ("merge world task-1", 13),
        ("merge world ours-1", 13),
        ("rebase world at-home", 14),
        ("merge world a into task-1", 20),
        ("rebase world task-1", 14),
        ("undo merge task-1", 12),
        ("restore world task-1 to '-1 hour'", 15),
        ("checkpoint world task-1 as 'x'", 18),
        ("show history for task-1", 18),
        ("alter world task-1 set pinned", 13),
        ("create world task - 1", 14),
    ] {
        let (state, message, at) = fails(text);
        assert_eq!(((state, message), at), (dash.clone(), position), "{text}");
    }
    assert_eq!(ok("create world \"task-1\""), create("task-1", None, None));
    assert_eq!(ok("create world 'task-1'"), create("task-1", None, None));
}

#[test]
fn new_names_follow_the_name_rules() {
    for (text, state, position) in [
        ("create world ours", "42939", 14),
        ("create world \"Ours\"", "42939", 14),
        ("CREATE WORLD USING", "42939", 14),
        ("create branch 'dry'", "42939", 15),
        ("fork world a as into", "42939", 17),
        ("fork world a only", "42939", 14),
        ("create world _tx_1", "42939", 14),
        ("create world ''", "42602", 14),
        ("create world \"\"", "42602", 14),
        ("create world 'a@b'", "42602", 14),
        ("fork world main 'main@now'", "42602", 17),
    ] {
        let e = err(text);
        assert_eq!((e.sqlstate, e.position), (state, position), "{text}: {e:?}");
    }
    assert_eq!(fails("create world ours").1, "world name \"ours\" is reserved: it is one of MERGE's own words");
    // Only new names: references to such worlds and moments parse.
    assert_eq!(ok("create world a from 'main@-1 hour'"), create("a", Some("main@-1 hour"), None));
    assert_eq!(
        ok("drop world ours"),
        Statement::DropWorld { name: "ours".into(), if_exists: false, cascade: false, tag: "DROP WORLD" }
    );
    assert_eq!(ok("diff world \"_tx_1\" to 'x@now'"), diff(Some("_tx_1"), Some("x@now"), false, None));
    assert_eq!(ok("create world target"), create("target", None, None));
}

#[test]
fn which_statements_write() {
    for (text, writes) in [
        ("show worlds", None),
        ("diff world w", None),
        ("merge world w dry run", None),
        ("switch world w", None),
        ("show history for world w", None),
        ("merge world w", Some("MERGE WORLD")),
        ("create world w", Some("CREATE WORLD")),
        ("drop world w", Some("DROP WORLD")),
        ("rebase world w", Some("REBASE WORLD")),
        ("undo merge w", Some("UNDO MERGE")),
    ] {
        assert_eq!(parse(text).unwrap().writes(), writes, "{text}");
    }
}

#[test]
fn show_metrics() {
    assert_eq!(ok("show metrics"), Statement::ShowMetrics);
    assert_eq!(ok("SHOW METRICS;"), Statement::ShowMetrics);
    assert_eq!(ok("show metrics").writes(), None);
    assert_eq!(parse("show metrics for world w").unwrap_err().sqlstate, "42601");
}

#[test]
fn show_storage_and_disk() {
    assert_eq!(ok("show storage"), Statement::ShowStorage { world: None });
    assert_eq!(ok("SHOW STORAGE FOR WORLD agent_7;"), Statement::ShowStorage { world: Some("agent_7".into()) });
    assert_eq!(ok("show storage for \"A b\""), Statement::ShowStorage { world: Some("A b".into()) });
    assert_eq!(ok("show storage for main"), Statement::ShowStorage { world: Some("main".into()) });
    assert_eq!(ok("Show Disk"), Statement::ShowDisk);
    assert_eq!(parse("show storage").unwrap().writes(), None);
    assert_eq!(parse("show disk").unwrap().writes(), None);
    // FOR needs a name; nothing comes after either
    assert_eq!(fails("show storage for"), ("42601", "syntax error at end of input".into(), 17));
    assert_eq!(fails("show storage for world"), ("42601", "syntax error at end of input".into(), 23));
    syntax_at("show storage limit 5", "limit", 14);
    syntax_at("show disk for world a", "for", 11);
    syntax_at("show disks", "disks", 6);
}
