use super::*;

fn kind(text: &str) -> &'static str {
    match recognise(text) {
        Recognised::Sql => "sql",
        Recognised::Spec(Ok(_)) => "spec",
        Recognised::Spec(Err(_)) => "spec error",
        Recognised::AsOf(_) => "as of",
    }
}

#[test]
fn spec_statements_by_their_leading_words() {
    for s in [
        "create world agent_7 with (task = 42);",
        "CREATE BRANCH b",
        "fork world agent_7 as agent_7b meta '{\"tags\": [\"retry\"]}';",
        "switch world agent_7",
        "use world '<its id>';",
        "use agent_7",
        "show worlds",
        "SHOW BRANCHES;",
        "show history for world agent_7 limit 5",
        "show history_retention",
        "show merge policies",
        "show merge checks",
        "show agents",
        "show audit for agent bot limit 3",
        "show reviews",
        "show readers",
        "show checkpoints",
        "show metrics",
        "show storage for world a",
        "show disk",
        "alter world agent_7 set (task = null, reviewer = 'ada');",
        "drop world agent_7 cascade;",
        "delete world if exists x",
        "drop branch b",
        "diff;",
        "diff world 'main@-1 hour' to main as sql;",
        "diff world cleanup readers;",
        "merge world agent_7 by columns resolve ('orders/7' = theirs);",
        "merge branch b",
        "rebase world agent_7 by columns using theirs;",
        "undo merge of world agent_7 skip changed;",
        "undo agent bot since '-2 hours' skip changed;",
        "restore world main to '-10 minutes';",
        "checkpoint world bot_task as 'before'",
        "simulate 10 worlds from main as trial run $$update t set x = 1$$ score $$select 1$$ keep 2 seed 42;",
        "replay world trial_0 as again",
        "check reads of world payout;",
        "create agent bot with (can = 'read,fork')",
        "alter agent bot set (policy = 'small')",
        "drop agent bot",
        "create merge policy small with (max_rows = 500)",
        "alter merge policy small set (max_rows = 5)",
        "drop merge policy small cascade",
        "create merge check c on tables (leads) as select id from leads where false",
        "create or replace merge check c as select 1 where false",
        "drop merge check c",
        "register reader export on leads (status)",
        "unregister reader export",
        "mark reader billing critical",
        "unmark reader billing",
        "alter system set history_retention = '2 days'",
        "  -- a comment first\n /* and /* nested */ one */ diff",
    ] {
        assert_eq!(kind(s), "spec", "{s}");
    }
}

#[test]
fn sql_passes_through() {
    for s in [
        "select 1",
        "merge into t using s on s.id = t.id when matched then delete",
        "checkpoint",
        "CHECKPOINT;",
        "show worlds.world",
        "show search_path",
        "show all",
        "delete from worlds where id = 1",
        "create table world (id int)",
        "create table worlds.x (id int)",
        "alter table t add column c int",
        "alter system set work_mem = '1MB'",
        "drop table t",
        "insert into t values (1)",
        "set worlds.world = agent_7",
        "",
        "   ",
        "-- only a comment",
        "begin",
        "copy t from stdin",
        "listen x",
        "select 'as of' from t",
    ] {
        assert_eq!(kind(s), "sql", "{s}");
    }
}

#[test]
fn a_spec_statement_that_does_not_parse_is_the_grammars_error() {
    let Recognised::Spec(Err(e)) = recognise("merge world agent_7 sideways") else { panic!() };
    assert_eq!(e.sqlstate, "42601");
    let Recognised::Spec(Err(e)) = recognise("create world task-1") else { panic!() };
    assert_eq!(e.message, "world names with a dash need quotes");
    // the same as the extension's worlds.sql parses
    assert_eq!(recognise("diff world a"), Recognised::Spec(grammar::parse("diff world a")));
}

#[test]
fn as_of_reads_become_worlds_as_of() {
    let Recognised::AsOf(q) = recognise("select * from orders as of '-1 hour'") else { panic!() };
    assert_eq!(q, "select * from worlds.as_of(NULL::orders, '-1 hour') AS orders");
    let Recognised::AsOf(q) = recognise("select now.id, old.status from orders now join orders as of '-1 hour' old on old.id = now.id")
    else {
        panic!()
    };
    assert!(q.contains("worlds.as_of(NULL::orders, '-1 hour') AS old"), "{q}");
    assert_eq!(kind("select * from orders for system_time as of $1"), "as of");
}

#[test]
fn leading_words_stop_at_qualified_names_and_symbols() {
    assert_eq!(leading_words("SHOW worlds.world", 4), vec!["show"]);
    assert_eq!(leading_words("merge world x", 2), vec!["merge", "world"]);
    assert_eq!(leading_words("(select 1)", 4), Vec::<String>::new());
    assert_eq!(leading_words("use \"x\"", 4), vec!["use"]);
    assert_eq!(leading_words("select 1", 4), vec!["select"]);
}

#[test]
fn statements_split_at_their_semicolons_only() {
    assert_eq!(split_statements("select 1; diff;"), vec!["select 1", " diff"]);
    assert_eq!(split_statements("select ';'; select \"a;b\" from t"), vec!["select ';'", " select \"a;b\" from t"]);
    assert_eq!(split_statements("select $$a;b$$; select $x$ ; $x$"), vec!["select $$a;b$$", " select $x$ ; $x$"]);
    assert_eq!(split_statements("select E'\\';'; diff"), vec!["select E'\\';'", " diff"]);
    assert_eq!(split_statements("select 'it''s;'; diff"), vec!["select 'it''s;'", " diff"]);
    assert_eq!(split_statements("create rule r as on insert to t do (insert into u values (1); insert into v values (2)); diff"),
        vec!["create rule r as on insert to t do (insert into u values (1); insert into v values (2))", " diff"]);
    assert_eq!(split_statements("select 1 -- no; split\n; /* ; */ diff"), vec!["select 1 -- no; split\n", " /* ; */ diff"]);
    assert_eq!(split_statements(";;  ; -- c\n"), Vec::<&str>::new());
    assert_eq!(split_statements("select $1; select 2"), vec!["select $1", " select 2"]);
    // unterminated things end the text, never panic
    assert_eq!(split_statements("select 'abc"), vec!["select 'abc"]);
    assert_eq!(split_statements("select $a$ x"), vec!["select $a$ x"]);
    assert_eq!(split_statements("/* x"), Vec::<&str>::new());
}

#[test]
fn shapes_follow_the_spec() {
    let shape_of = |s: &str| shape(&grammar::parse(s).unwrap());
    assert_eq!(shape_of("merge world a"), Shape::Tag);
    assert_eq!(shape_of("create world a"), Shape::Tag);
    assert_eq!(shape_of("switch world a"), Shape::Tag);
    let Shape::Rows { columns, tag, counted } = shape_of("show worlds") else { panic!() };
    assert_eq!((columns[0], columns.len(), tag, counted), (("name", "text"), 12, "SHOW", false));
    let Shape::Rows { columns, tag, counted } = shape_of("merge world a dry run") else { panic!() };
    assert_eq!((columns[2], tag, counted), (("outcome", "text"), "SELECT", true));
    let Shape::Rows { columns, .. } = shape_of("diff as sql") else { panic!() };
    assert_eq!(columns, &[("sql", "text")]);
    let Shape::Rows { columns, .. } = shape_of("diff world a readers") else { panic!() };
    assert_eq!(columns[5], ("critical", "boolean"));
    let Shape::Rows { tag, counted, .. } = shape_of("simulate 2 worlds as t run 'select 1' score 'select 1'") else { panic!() };
    assert_eq!((tag, counted), ("SIMULATE", true));
    let Shape::Rows { tag, .. } = shape_of("alter world a set ttl '1 day'") else { panic!() };
    assert_eq!(tag, "ALTER WORLD");
}

#[test]
fn typed_queries_cast_each_column() {
    let q = |s: &str| typed_query(s, &grammar::parse(s));
    assert_eq!(q("merge world a;"), "select j->>'tag' as tag from worlds.sql($worlds$merge world a;$worlds$) j");
    let show = q("show branches");
    assert_eq!(
        show,
        "select (j->>'name')::text as \"name\", (j->>'parent')::text as \"parent\", (j->>'changes')::bigint as \"changes\" from worlds.sql($worlds$show branches$worlds$) j"
    );
    assert!(q("diff").contains("nullif(j->'before', 'null') as \"before\""));
    assert!(q("show reviews").contains(
        "case when jsonb_typeof(j->'reasons') = 'array' then array(select e::text from jsonb_array_elements_text(j->'reasons') e) end as \"reasons\""
    ));
    // a statement that doesn't parse: worlds.sql raises the grammar's error
    assert_eq!(q("merge world a sideways"), "select j from worlds.sql($worlds$merge world a sideways$worlds$) j");
    // the quote can't be closed from inside
    assert_eq!(dollar_quote("a $worlds$ b"), "$worlds1$a $worlds$ b$worlds1$");
    // a text ending in the tag's start would close the quote early with the closing tag's last `$`
    assert_eq!(dollar_quote("diff world \"a$worlds"), "$worlds1$diff world \"a$worlds$worlds1$");
    assert_eq!(dollar_quote("x$worlds1"), "$worlds$x$worlds1$worlds$");
}
