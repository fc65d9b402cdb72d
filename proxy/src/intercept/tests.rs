use super::*;
use crate::wire::{command_complete, message};

fn q(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    b.push(0);
    b
}

fn body(m: &Bytes) -> &[u8] {
    &m[5..]
}

fn replaced_text(out: Out) -> String {
    match out {
        Out::Replace(m) => String::from_utf8_lossy(&m[5..m.len() - 1]).into_owned(),
        other => panic!("expected a replacement, got {other:?}"),
    }
}

fn data_row(v: &str) -> Vec<u8> {
    let mut b = vec![0, 1];
    b.extend_from_slice(&(v.len() as i32).to_be_bytes());
    b.extend_from_slice(v.as_bytes());
    b
}

#[test]
fn sql_goes_as_written() {
    let mut t = Tracker::default();
    assert_eq!(t.client(b'Q', &q("select 1")), Out::Same);
    assert_eq!(t.server(b'T', b""), Out::Same);
    assert_eq!(t.server(b'D', b""), Out::Same);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Same);
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    assert!(t.pending.is_empty());
    assert_eq!(plan_query("select 1; select 2"), None);
    assert_eq!(plan_query("merge into t using s on true when matched then delete"), None);
}

#[test]
fn a_tag_statement_in_the_simple_protocol() {
    let mut t = Tracker::default();
    let text = replaced_text(t.client(b'Q', &q("merge world agent_7;")));
    assert_eq!(text, "select j->>'tag' as tag from worlds.sql($worlds$merge world agent_7$worlds$) j");
    assert_eq!(t.server(b'T', b""), Out::Drop);
    assert!(t.wants_body(b'D'));
    assert_eq!(t.server(b'D', &data_row("MERGE 3")), Out::Drop);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Replace(command_complete("MERGE 3")));
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    assert!(t.pending.is_empty());
}

#[test]
fn rows_and_sql_mixed_in_one_query() {
    let mut t = Tracker::default();
    let text = replaced_text(t.client(b'Q', &q("select 1; show branches; switch world a; diff")));
    let parts: Vec<&str> = text.split("\n;").collect();
    assert_eq!(parts.len(), 4);
    assert_eq!(parts[0], "select 1");
    assert!(parts[1].starts_with("select (j->>'name')::text"));
    // select 1
    assert_eq!(t.server(b'T', b""), Out::Same);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Same);
    // show branches: its rows, tag SHOW
    assert_eq!(t.server(b'T', b""), Out::Same);
    assert!(!t.wants_body(b'D'));
    assert_eq!(t.server(b'D', b""), Out::Same);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 2"))), Out::Replace(command_complete("SHOW")));
    // switch world a
    assert_eq!(t.server(b'T', b""), Out::Drop);
    assert_eq!(t.server(b'D', &data_row("SWITCH WORLD")), Out::Drop);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Replace(command_complete("SWITCH WORLD")));
    // diff: counted
    assert_eq!(t.server(b'T', b""), Out::Same);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 5"))), Out::Replace(command_complete("SELECT 5")));
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
}

#[test]
fn an_error_ends_the_query() {
    let mut t = Tracker::default();
    t.client(b'Q', &q("merge world a; merge world b"));
    assert_eq!(t.server(b'E', b""), Out::Same);
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    assert!(t.pending.is_empty());
    // the next query is SQL again
    t.client(b'Q', &q("select 1"));
    assert_eq!(t.server(b'T', b""), Out::Same);
}

fn parse(name: &str, text: &str) -> Vec<u8> {
    let mut b = name.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(text.as_bytes());
    b.extend_from_slice(&[0, 0, 0]);
    b
}

fn bind(portal: &str, statement: &str) -> Vec<u8> {
    let mut b = portal.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(statement.as_bytes());
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
    b
}

fn named(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    b.extend_from_slice(name.as_bytes());
    b.push(0);
    b
}

#[test]
fn the_extended_protocol() {
    let mut t = Tracker::default();
    // Parse/Bind/Describe/Execute/Sync of a tag statement (unnamed), then of a rows statement (named)
    let Out::Replace(m) = t.client(b'P', &parse("", "create world x")) else { panic!() };
    let (name, query, rest) = wire::parse_body(&m[5..]).unwrap();
    assert_eq!((name, rest), (&b""[..], &[0u8, 0][..]));
    assert!(std::str::from_utf8(query).unwrap().starts_with("select j->>'tag' as tag from worlds.sql("));
    assert_eq!(t.client(b'B', &bind("", "")), Out::Same);
    t.client(b'D', &named(b'P', ""));
    t.client(b'E', b"\0\0\0\0\0");
    t.client(b'P', &parse("s1", "show disk"));
    t.client(b'B', &bind("p1", "s1"));
    t.client(b'D', &named(b'S', "s1"));
    t.client(b'E', b"p1\0\0\0\0\0");
    t.client(b'S', b"");
    assert_eq!(t.server(b'1', b""), Out::Same);
    assert_eq!(t.server(b'2', b""), Out::Same);
    assert_eq!(t.server(b'T', b""), Out::Replace(wire::no_data()));
    assert_eq!(t.server(b'D', &data_row("CREATE WORLD")), Out::Drop);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Replace(command_complete("CREATE WORLD")));
    assert_eq!(t.server(b'1', b""), Out::Same);
    assert_eq!(t.server(b'2', b""), Out::Same);
    assert_eq!(t.server(b't', b""), Out::Same);
    assert_eq!(t.server(b'T', b""), Out::Same);
    assert_eq!(t.server(b'D', b""), Out::Same);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 6"))), Out::Replace(command_complete("SHOW")));
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    assert!(t.pending.is_empty());
    // s1 stays prepared: executed again later
    t.client(b'B', &bind("", "s1"));
    t.client(b'E', b"\0\0\0\0\0");
    t.client(b'S', b"");
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 6"))), Out::Replace(command_complete("SHOW")));
    t.server(b'Z', b"I");
    // closed, then the name reused for SQL
    t.client(b'C', &named(b'S', "s1"));
    t.client(b'P', &parse("s1", "select 1"));
    t.client(b'B', &bind("", "s1"));
    t.client(b'E', b"\0\0\0\0\0");
    t.client(b'S', b"");
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Same);
}

#[test]
fn after_an_error_the_server_skips_to_sync() {
    let mut t = Tracker::default();
    t.client(b'P', &parse("a", "select 1/0"));
    t.client(b'B', &bind("", "a"));
    t.client(b'E', b"\0\0\0\0\0");
    t.client(b'P', &parse("b", "merge world x"));
    t.client(b'B', &bind("", "b"));
    t.client(b'E', b"\0\0\0\0\0");
    t.client(b'S', b"");
    t.client(b'P', &parse("", "merge world y"));
    t.client(b'B', &bind("", ""));
    t.client(b'E', b"\0\0\0\0\0");
    t.client(b'S', b"");
    t.server(b'1', b"");
    t.server(b'2', b"");
    // the division fails: the merge of x isn't run
    assert_eq!(t.server(b'E', b""), Out::Same);
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    t.server(b'1', b"");
    t.server(b'2', b"");
    assert_eq!(t.server(b'D', &data_row("MERGE 0")), Out::Drop);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Replace(command_complete("MERGE 0")));
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    assert!(t.pending.is_empty());
}

#[test]
fn as_of_is_rewritten_in_both_protocols() {
    let mut t = Tracker::default();
    let text = replaced_text(t.client(b'Q', &q("select * from orders as of '-1 hour'")));
    assert_eq!(text, "select * from worlds.as_of(NULL::orders, '-1 hour') AS orders");
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 2"))), Out::Same);
    let Out::Replace(m) = t.client(b'P', &parse("", "select id from orders as of $1 o")) else { panic!() };
    assert_eq!(wire::parse_body(&m[5..]).unwrap().1, b"select id from worlds.as_of(NULL::orders, $1) AS o");
    let _ = message(b'Z', b"I");
}

fn error_body(detail: &str) -> Vec<u8> {
    body(&crate::wire::error_response("ERROR", "42601", "syntax error at or near \"frob\"", Some(detail))).to_vec()
}

fn fields_of(out: Out) -> Vec<(u8, String)> {
    match out {
        Out::Replace(m) => crate::wire::error_fields(&m[5..]),
        other => panic!("expected a replacement, got {other:?}"),
    }
}

#[test]
fn a_spec_statements_syntax_error_gets_its_position_in_the_clients_text() {
    // the second statement of a simple Query, after SQL: the grammar's position counts from its start
    let mut t = Tracker::default();
    t.client(b'Q', &q("select 1;  diff world a frob"));
    assert_eq!(t.server(b'T', b""), Out::Same);
    assert_eq!(t.server(b'C', body(&command_complete("SELECT 1"))), Out::Same);
    assert!(t.wants_body(b'E'));
    let f = fields_of(t.server(b'E', &error_body("at character 14 of the statement")));
    assert!(f.iter().all(|(c, _)| *c != b'D'), "the DETAIL is gone: {f:?}");
    // "select 1;  " is 11 characters: the statement's 14th is the text's 25th ("frob" at 25)
    assert_eq!(f.iter().find(|(c, _)| *c == b'P').map(|(_, v)| v.as_str()), Some("25"));
    assert_eq!(&"select 1;  diff world a frob"[24..28], "frob");
    assert_eq!(f.iter().find(|(c, _)| *c == b'C').map(|(_, v)| v.as_str()), Some("42601"));
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    // another DETAIL, or an error of SQL, passes as it came
    let mut t = Tracker::default();
    t.client(b'Q', &q("merge world nope"));
    assert_eq!(t.server(b'E', &error_body("world nope has no rows")), Out::Same);
    let mut t = Tracker::default();
    t.client(b'Q', &q("select 1 +"));
    assert!(!t.wants_body(b'E'));
    assert_eq!(t.server(b'E', &error_body("at character 3 of the statement")), Out::Same);
}

#[test]
fn a_spec_statements_syntax_error_in_the_extended_protocol() {
    let mut t = Tracker::default();
    let mut parse = b"s1\0".to_vec();
    parse.extend_from_slice(b"  create world 12abc\0\0\0");
    assert!(matches!(t.client(b'P', &parse), Out::Replace(_)));
    t.client(b'B', b"p1\0s1\0\0\0\0\0\0\0");
    t.client(b'E', b"p1\0\0\0\0\0");
    t.client(b'S', b"");
    assert_eq!(t.server(b'1', b""), Out::Same);
    assert_eq!(t.server(b'2', b""), Out::Same);
    let f = fields_of(t.server(b'E', &error_body("at character 14 of the statement")));
    // two spaces before the statement
    assert_eq!(f.iter().find(|(c, _)| *c == b'P').map(|(_, v)| v.as_str()), Some("16"));
    assert_eq!(t.server(b'Z', b"I"), Out::Same);
    assert!(t.pending.is_empty());
}
