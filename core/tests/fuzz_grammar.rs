//! A fuzz of worlds_core's parse entry points: inputs generated from the spec's vocabulary
//! (../shared/spec/worlds-sql.txt), mutations of valid statements, and random text, fed to every public
//! function that reads text (or JSON, or bytes) a user can give. Each call must return, Ok or Err: a panic
//! (caught with catch_unwind) fails the test, listing the input.
//!
//!   cargo test -p worlds_core --test fuzz_grammar                      # FUZZ_INPUTS=200000 by default
//!   FUZZ_INPUTS=2000000 FUZZ_SEED=7 cargo test -p worlds_core --test fuzz_grammar
//! (a debug build also catches integer overflow; --release runs about 5x faster without that).
//!
//! The summary goes to stderr whether or not the test harness captures output: inputs by class and the time
//! they took, how many parsed, errors by SQLSTATE, notes (an error position past the end of the text, a NUL
//! in a message: odd, not failures), and every panic grouped by where it was raised, with up to three
//! inputs each and each input shrunk to what still panics there. No dependencies: a xorshift PRNG.
use serde_json::{json, Map, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};

use worlds_core::{as_of, grammar, merge, names, reads, rules, scope, snapshot};

// ---------------------------------------------------------------------------------------------------
// PRNG

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// xorshift64*
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ---------------------------------------------------------------------------------------------------
// Vocabulary (the spec's)

const KEYWORDS: &[&str] = &[
    "create", "fork", "switch", "use", "show", "alter", "drop", "delete", "world", "worlds", "branch", "branches", "diff",
    "merge", "rebase", "undo", "restore", "checkpoint", "as", "of", "to", "from", "with", "meta", "set", "reset", "ttl",
    "pinned", "if", "exists", "cascade", "sql", "limit", "into", "only", "tables", "keys", "using", "ours", "theirs", "by",
    "columns", "resolve", "confirm", "deletes", "target", "at", "version", "dry", "run", "skip", "changed", "history",
    "for", "system", "history_retention", "agent", "agents", "audit", "since", "where", "run_id", "policy", "policies",
    "reviews", "check", "checks", "reads", "on", "timeout", "or", "replace", "select", "readers", "now", "null", "true",
    "false", "main", "simulate", "replay", "keep", "seed", "threads", "score", "storage", "disk", "metrics", "register",
    "unregister", "reader", "mark", "unmark", "critical", "system_time", "join", "interval", "timestamp", "timestamptz",
    "date", "e", "world_ttl", "max_worlds", "can", "max_rows", "max_deletes", "review_tables", "review_columns",
    "check_reads", "require_scope", "may_change", "tenant", "intent", "overwrite", "schema", "rows_per_hour",
    "deletes_per_hour", "confirm_deletes_over", "max_age", "max_effects", "effects_per_hour", "review_channels",
    "disabled", "max_query_ms", "max_concurrent", "max_memory_mb", "max_idle_ms", "writes_per_minute", "max_changes",
    "task", "owner", "prompt_version", "model", "tool_schema", "USING", "OURS", "Theirs", "DRY", "RUN", "CrEaTe", "WORLD",
];

const NAMES: &[&str] = &[
    "agent_7", "a", "b", "w", "w1", "main", "orders", "items", "payout", "bot", "small", "cleanup", "x", "_tx_1", "_TX_9",
    "ours", "using", "dry", "into", "only", "target", "at", "Wörld", "世界", "a$b", "task", "t1", "agent_7b", "check_it",
    "w000001-0123456789", "wabcdef-0123456789", "guest", "system", "public", "app",
];

const QUOTED: &[&str] = &[
    "\"agent-7\"", "\"it\"\"s\"", "\"\"", "\" \"", "\"ours\"", "\"a@b\"", "\"Orders\"", "\"a,b\"", "\"_tx_x\"", "\"ü ü\"",
    "\"x\"\"\"\"y\"", "\"w000001-0123456789\"", "\"main\"", "\"a\"\"\"", "\"\"\"\"", "\"semi;colon\"", "\"paren(\"",
];

const STRINGS: &[&str] = &[
    "'agent-7'", "'it''s'", "''", "' '", "'main@-1 hour'", "'a@now'", "'w@2026-09-20 10:00'", "'main@2026-09-20 10:00:00+02'",
    "'main@-15 minutes'", "'@'", "'@@'", "'a@'", "'@now'", "'main@garbage'", "'-1 day'", "'-2 hours'", "'now'",
    "'2026-09-20 10:00'", "'1 day'", "'0'", "'forever'", "'-1 hour'", "'t/1'", "'orders/7'", "'orders/(1,abc)'", "'t/'",
    "'/'", "'{}'", "'{\"a\": 1}'", "'{\"tags\": [\"retry\"]}'", "'[1,2]'", "'null'", "'{'", "'{\"_sonos\": 1}'",
    "'{\"_worlds\": 1}'", "'{\"id\": 9, \"status\": \"paid\"}'", "'read,fork,write_own'", "'read,fork,write_own,merge_own'",
    "'org_id = 42'", "'region = ''eu'''", "'leads.status, lists'", "'payments'", "'users.email,accounts.owner'", "'2s'",
    "'30 minutes'", "'1h'", "E'\\x41\\u00e9'", "E'\\xff'", "E'\\0'", "E'\\u00'", "E'\\U0001F600'", "E'a\\nb'", "E'\\''",
    "E'\\\\'", "e'\\101'", "E'\\777'", "E'\\uD800'", "E'\\U00110000'", "$$x$$", "$$$$", "$t$a$$b$t$", "$ü$x$ü$",
    "$$2 hours$$", "$${\"a\":1}$$", "$_1$$_1$", "'ü'", "'世界@now'", "'\u{FEFF}'", "'\\'",
];

const NUMBERS: &[&str] = &[
    "0", "1", "42", "-1", "+5", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "99999999999999999999999999999", "1e308", "1e999", "-1e-999", ".5", "5.", "2.5E-4", "1e",
    "1e+", "0x10", "00001", "1.2.3", "4812", "1048577", "-0", "1_000", "3.14159265358979323846264338327950288",
];

const PUNCT: &[&str] = &[
    "(", ")", ",", ";", "=", ".", "*", ":", "::", "+", "-", "/", "@", "[", "]", "{", "}", "'", "\"", "$", "\\", "--", "/*",
    "*/", "$1", "$0", "$99999999999", "<>", "!", "%", "^", "&", "|", "~", "?", "#", "`", "()", "(((", ")))", ";;",
];

const UNICODE: &[&str] = &[
    "ü", "é", "世界", "😀", "e\u{301}", "\u{200B}", "\u{FEFF}", "\u{2028}", "\u{202E}", "Ω", "ß", "İ", "ﬁ", "𝔘",
    "\u{10FFFF}", "\u{FFFD}", "\u{7F}", "\u{1}", "\t", "\n", "\r\n", "\u{A0}", "\u{3000}",
];

/// Valid statements (or close to), from the spec and the grammar's tests: the seeds of mutations.
const VALID: &[&str] = &[
    "create world agent_7 with (task = 42)",
    "create world agent_7 from main with (owner = 'claude', task = 42);",
    "create world run_r42 with (run_id = 'r42', prompt_version = 'triage-v9', model = 'claude-opus-5-5', tool_schema = 'crm-tools-3');",
    "create world check_it from 'main@-1 hour';",
    "CREATE BRANCH b FROM a META '{}'",
    "create world w meta $${\"a\": [1, 2]}$$",
    "create world a with (n = -.5e2, b = true, c = null, d = 'x')",
    "fork world agent_7 as agent_7b meta '{\"tags\": [\"retry\"]}';",
    "fork world 'main@2026-09-20 10:00' as before_the_deploy;",
    "fork world a b",
    "switch world agent_7",
    "switch branch a",
    "use world 'w000001-0123456789'",
    "use branch a",
    "use main",
    "show worlds",
    "show branches",
    "show history",
    "show history for world a limit 5",
    "show history_retention",
    "show agents",
    "show audit for agent bot limit 10",
    "show merge policies",
    "show reviews",
    "show merge checks",
    "alter world agent_7 set (task = null, reviewer = 'ada');",
    "alter world agent_7 set ttl '1 day';",
    "alter world a reset ttl",
    "alter world a set pinned",
    "alter world a reset pinned",
    "alter world w set (may_change = 'leads')",
    "alter world payout set (check_reads = false)",
    "drop world agent_7 cascade;",
    "drop world if exists a",
    "delete world if exists a cascade",
    "drop branch b",
    "diff",
    "diff world agent_7;",
    "diff world 'main@-1 hour' to main as sql;",
    "diff world a to 'b@now' as sql limit 3",
    "diff branch a limit 50",
    "diff world cleanup readers",
    "merge world agent_7",
    "merge world agent_7 by columns resolve ('orders/7' = theirs, 'orders/9' = '{\"id\": 9, \"status\": \"paid\"}');",
    "merge world agent_7 only tables (orders, app.items, \"Orders\");",
    "merge world agent_7 only keys ('orders/1', 'orders/(1,abc)')",
    "merge world agent_7b into agent_7;",
    "MERGE WORLD A USING THEIRS BY COLUMNS DRY RUN",
    "merge world x confirm deletes 4812",
    "merge world x confirm",
    "merge world x target 3 using ours",
    "merge world x at version 12",
    "merge branch a into b dry run",
    "merge world",
    "merge world \"ours\"",
    "rebase world agent_7;",
    "rebase world agent_7 by columns using theirs;",
    "rebase world a resolve ('t/1' = delete) at version 7",
    "undo merge of world agent_7 skip changed;",
    "undo merge a",
    "undo merge of branch b",
    "restore world main to '-10 minutes';",
    "restore world bot_task to checkpoint 'before';",
    "restore world a to now() - interval '1 hour'",
    "restore world a to $1",
    "restore world a to '2026-09-20'::date",
    "restore world a to now",
    "checkpoint world bot_task as 'before'",
    "alter system set history_retention = '2 days'",
    "alter system set history_retention to '0'",
    "create agent bot with (can = 'read,fork,write_own,merge_own', policy = 'small')",
    "create agent bot",
    "alter agent bot set (can = 'read,fork,write_own,write_main,merge_own', policy = 'small')",
    "alter agent bot set (policy = null, max_worlds = 3, world_ttl = '1 day', disabled = true)",
    "drop agent bot",
    "undo agent bot since '-2 hours' skip changed",
    "undo agent bot since '-1 day' where run_id = 'r42'",
    "undo agent bot since now() - interval '1 hour' skip changed where run_id = 'r1'",
    "create merge policy small with (max_rows = 500, max_deletes = 0, review_tables = 'payments')",
    "alter merge policy small set (max_rows = 10, tables = 'orders,items')",
    "drop merge policy small cascade",
    "check reads",
    "check reads of world payout;",
    "create merge check lists_keep_leads on tables (leads, lists) as select id from lists where id not in (select list from leads)",
    "create or replace merge check c with (timeout = '2s') as select 1 where false",
    "drop merge check c",
    "select * from orders as of '-1 hour'",
    "select now.id, now.status, old.status from orders now join orders as of '-1 hour' old on old.id = now.id where old.status <> now.status",
    "select o.id from app.orders AS o FOR SYSTEM_TIME AS OF '-1 hour' join t on true",
    "select count(*) from orders as of now() - interval '1 hour', items",
    "select * from \"Orders\" as of '2026-09-20 10:00'::timestamptz x",
    "insert into snap select * from s as of '-1 hour'",
    "update t set v = old.v from t as of '-1 hour' old where old.id = t.id",
    "delete from t using t as of $1 old where old.id = t.id",
    "with x as (select * from t as of now) select * from x",
    "create table snap as select * from s as of '-1 hour' old",
];

// ---------------------------------------------------------------------------------------------------
// Generators

/// A random character: mostly ASCII, some from the unicode list, some any scalar value (never NUL).
fn random_char(r: &mut Rng) -> char {
    match r.below(10) {
        0..=5 => (0x20 + r.below(0x5F) as u8) as char,
        6 => *r.pick(&['\'', '"', '$', '(', ')', ';', '\\', '@', '-', '/', '*', '.', ',', '=', ':', 'E', 'e', '\n', '\t']),
        7 => r.pick(UNICODE).chars().next().unwrap_or('x'),
        _ => loop {
            let c = char::from_u32(1 + r.below(0x10FFFF) as u32);
            if let Some(c) = c {
                break c;
            }
        },
    }
}

fn random_text(r: &mut Rng, max: usize) -> String {
    let n = r.below(max + 1);
    (0..n).map(|_| random_char(r)).collect()
}

fn name(r: &mut Rng) -> String {
    match r.below(12) {
        0..=4 => r.pick(NAMES).to_string(),
        5 | 6 => r.pick(QUOTED).to_string(),
        7 | 8 => r.pick(STRINGS).to_string(),
        9 => {
            // a long name, around MAX_NAME_BYTES
            let n = names::MAX_NAME_BYTES - 2 + r.below(5);
            let c = *r.pick(&['a', 'ü', '"', '\'']);
            let body: String = std::iter::repeat_n(c, n / c.len_utf8()).collect();
            match c {
                '"' => format!("\"{}\"", body.replace('"', "\"\"")),
                '\'' => format!("'{}'", body.replace('\'', "''")),
                _ => body,
            }
        }
        10 => {
            // 'name@when', generated
            let when = *r.pick(&["-1 hour", "now", "2026-09-20 10:00", "-15 minutes", "x", "", "@", "-9999999 years", "1e9 days"]);
            format!("'{}@{}'", r.pick(NAMES), when)
        }
        _ => {
            // a "quoted" name with embedded quotes and random characters
            let body = random_text(r, 8);
            format!("\"{}\"", body.replace('"', "\"\""))
        }
    }
}

fn number(r: &mut Rng) -> String {
    match r.below(4) {
        0 => r.pick(NUMBERS).to_string(),
        1 => (r.next() as i64).to_string(),
        2 => format!("{}", r.below(1000)),
        _ => {
            let digits = 1 + r.below(40);
            let mut s: String = (0..digits).map(|_| (b'0' + r.below(10) as u8) as char).collect();
            if r.chance(30) {
                s.insert(0, '-');
            }
            if r.chance(20) {
                s.push('.');
                s.push_str(&r.below(100).to_string());
            }
            s
        }
    }
}

fn string_literal(r: &mut Rng) -> String {
    match r.below(6) {
        0..=2 => r.pick(STRINGS).to_string(),
        3 => format!("'{}'", random_text(r, 12).replace('\'', "''")),
        4 => {
            let tag = *r.pick(&["", "t", "tag", "ü", "_1", "a1"]);
            let body = random_text(r, 12);
            if r.chance(80) {
                format!("${tag}${body}${tag}$")
            } else {
                format!("${tag}${body}")
            }
        }
        _ => {
            let esc = *r.pick(&["\\x", "\\u", "\\U", "\\", "\\0", "\\7", "\\n", "''", "\\'"]);
            format!("E'{}{}{}'", random_text(r, 3), esc, random_text(r, 4).replace('\'', ""))
        }
    }
}

fn token(r: &mut Rng) -> String {
    match r.below(20) {
        0..=7 => r.pick(KEYWORDS).to_string(),
        8..=10 => name(r),
        11 | 12 => string_literal(r),
        13 | 14 => number(r),
        15..=17 => r.pick(PUNCT).to_string(),
        18 => r.pick(UNICODE).to_string(),
        _ => random_text(r, 6),
    }
}

fn value(r: &mut Rng) -> String {
    match r.below(6) {
        0 => number(r),
        1 => string_literal(r),
        2 => r.pick(&["true", "false", "null", "TRUE", "Null"]).to_string(),
        3 => name(r),
        4 => format!("-{}", token(r)),
        _ => token(r),
    }
}

fn key(r: &mut Rng) -> String {
    match r.below(4) {
        0 | 1 => r.pick(KEYWORDS).to_string(),
        2 => name(r),
        _ => token(r),
    }
}

fn settings(r: &mut Rng) -> String {
    let n = r.below(5);
    let items: Vec<String> = (0..n).map(|_| format!("{} = {}", key(r), value(r))).collect();
    format!("({})", items.join(", "))
}

fn key_ref(r: &mut Rng) -> String {
    match r.below(5) {
        0 => format!("'{}/{}'", r.pick(NAMES), number(r)),
        1 => format!("'{}/({},{})'", r.pick(NAMES), number(r), r.pick(NAMES)),
        2 => format!("'{}'", random_text(r, 8).replace('\'', "''")),
        3 => string_literal(r),
        _ => token(r),
    }
}

fn list(r: &mut Rng, item: fn(&mut Rng) -> String) -> String {
    let n = r.below(5);
    let items: Vec<String> = (0..n).map(|_| item(r)).collect();
    format!("({})", items.join(", "))
}

fn moment(r: &mut Rng) -> String {
    match r.below(6) {
        0 | 1 => string_literal(r),
        2 => "now".into(),
        3 => format!("now() - interval {}", string_literal(r)),
        4 => format!("${}", number(r)),
        _ => (0..1 + r.below(5)).map(|_| token(r)).collect::<Vec<_>>().join(" "),
    }
}

fn merge_clause(r: &mut Rng) -> String {
    match r.below(12) {
        0 => format!("into {}", name(r)),
        1 => format!("only tables {}", list(r, name)),
        2 => format!("only keys {}", list(r, key_ref)),
        3 => format!("{}{}", if r.chance(50) { "using " } else { "" }, r.pick(&["ours", "theirs", "OURS", "delete"])),
        4 => "by columns".into(),
        5 => {
            let n = r.below(4);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    let v = match r.below(4) {
                        0 => "ours".to_string(),
                        1 => "theirs".to_string(),
                        2 => "delete".to_string(),
                        _ => string_literal(r),
                    };
                    format!("{} = {}", key_ref(r), v)
                })
                .collect();
            format!("resolve ({})", items.join(", "))
        }
        6 => "confirm".into(),
        7 => format!("confirm deletes {}", number(r)),
        8 => format!("target {}", number(r)),
        9 => format!("at version {}", number(r)),
        10 => "dry run".into(),
        _ => token(r),
    }
}

fn meta(r: &mut Rng) -> String {
    match r.below(4) {
        0 => String::new(),
        1 => format!(" with {}", settings(r)),
        2 => format!(" meta {}", string_literal(r)),
        _ => format!(" meta '{}'", json_text(r, 3).replace('\'', "''")),
    }
}

/// A statement built from the grammar's shapes with generated parts: mostly valid, sometimes not.
fn grammar_statement(r: &mut Rng) -> String {
    let w = |r: &mut Rng| if r.chance(50) { "world" } else { *r.pick(&["branch", "WORLD", "worlds", ""]) };
    match r.below(26) {
        0 => format!("create {} {}{}{}", w(r), name(r), if r.chance(40) { format!(" from {}", name(r)) } else { String::new() }, meta(r)),
        1 => format!("fork world {} {}{}{}", name(r), if r.chance(50) { "as " } else { "" }, name(r), meta(r)),
        2 => format!("{} {} {}", r.pick(&["switch", "use"]), w(r), name(r)),
        3 => format!("show {}", r.pick(&["worlds", "branches", "history", "history_retention", "agents", "reviews", "merge policies", "merge checks", "audit", "storage", "disk", "metrics", "readers"])),
        4 => format!("show history{}{}", if r.chance(50) { format!(" for {}{}", if r.chance(50) { "world " } else { "" }, name(r)) } else { String::new() }, if r.chance(50) { format!(" limit {}", number(r)) } else { String::new() }),
        5 => {
            let action = match r.below(6) {
                0 => format!("set {}", settings(r)),
                1 => format!("set ttl {}", string_literal(r)),
                2 => "reset ttl".into(),
                3 => "set pinned".into(),
                4 => "reset pinned".into(),
                _ => token(r),
            };
            format!("alter world {} {}", name(r), action)
        }
        6 => format!("{} {} {}{}{}", r.pick(&["drop", "delete"]), w(r), if r.chance(30) { "if exists " } else { "" }, name(r), if r.chance(30) { " cascade" } else { "" }),
        7 => {
            let mut s = "diff".to_string();
            if r.chance(70) {
                s += &format!(" {} {}", w(r), name(r));
                if r.chance(50) {
                    s += &format!(" to {}", name(r));
                }
            }
            if r.chance(30) {
                s += " as sql";
            }
            if r.chance(30) {
                s += &format!(" limit {}", number(r));
            }
            if r.chance(10) {
                s += " readers";
            }
            s
        }
        8 | 9 => {
            let n = r.below(5);
            let clauses: Vec<String> = (0..n).map(|_| merge_clause(r)).collect();
            format!("merge {} {} {}", w(r), if r.chance(80) { name(r) } else { String::new() }, clauses.join(" "))
        }
        10 => {
            let n = r.below(4);
            let clauses: Vec<String> = (0..n).map(|_| merge_clause(r)).collect();
            format!("rebase world {} {}", if r.chance(80) { name(r) } else { String::new() }, clauses.join(" "))
        }
        11 => format!("undo merge {}{} {}{}", if r.chance(50) { "of " } else { "" }, w(r), name(r), if r.chance(40) { " skip changed" } else { "" }),
        12 => format!("restore world {} to {}", name(r), if r.chance(30) { format!("checkpoint {}", string_literal(r)) } else { moment(r) }),
        13 => format!("checkpoint world {} as {}", name(r), string_literal(r)),
        14 => format!("alter system set history_retention {} {}", r.pick(&["=", "to", "", "=="]), value(r)),
        15 => format!("create agent {}{}", name(r), if r.chance(70) { format!(" with {}", settings(r)) } else { String::new() }),
        16 => format!("alter agent {} set {}", name(r), settings(r)),
        17 => format!("drop agent {}", name(r)),
        18 => format!(
            "undo agent {} since {}{}{}",
            name(r),
            moment(r),
            if r.chance(40) { " skip changed" } else { "" },
            if r.chance(40) { format!(" where run_id = {}", string_literal(r)) } else { String::new() }
        ),
        19 => format!("create merge policy {}{}", name(r), if r.chance(70) { format!(" with {}", settings(r)) } else { String::new() }),
        20 => format!("alter merge policy {} set {}", name(r), settings(r)),
        21 => format!("drop merge {} {}{}", r.pick(&["policy", "check"]), name(r), if r.chance(30) { " cascade" } else { "" }),
        22 => format!("check reads{}", if r.chance(60) { format!(" of {} {}", w(r), name(r)) } else { String::new() }),
        23 => format!(
            "create {}merge check {}{}{} as {}",
            if r.chance(30) { "or replace " } else { "" },
            name(r),
            if r.chance(50) { format!(" on tables {}", list(r, name)) } else { String::new() },
            if r.chance(30) { format!(" with {}", settings(r)) } else { String::new() },
            (0..r.below(8)).map(|_| token(r)).collect::<Vec<_>>().join(" ")
        ),
        24 => {
            // AS OF in a SELECT
            let form = match r.below(4) {
                0 => format!("{} as of {}", name(r), moment(r)),
                1 => format!("{} {} as of {}", name(r), name(r), moment(r)),
                2 => format!("{} for system_time as of {}", name(r), moment(r)),
                _ => format!("{} as {} as of {} {}", name(r), name(r), moment(r), token(r)),
            };
            format!("{} * from {}{}", r.pick(&["select", "with x as (select", "insert into t select", "update t set a = 1 from", "delete from t using", "create table x as select"]), form, if r.chance(40) { format!(" {} {}", r.pick(&["where", "join", "on", ",", "limit", "as", "for"]), token(r)) } else { String::new() })
        }
        _ => format!("simulate {} worlds from {} as {} run {} score {} keep {}", number(r), name(r), name(r), string_literal(r), string_literal(r), number(r)),
    }
}

/// A statement as a soup of the vocabulary's tokens.
fn token_soup(r: &mut Rng) -> String {
    let n = 1 + r.below(16);
    let sep = *r.pick(&[" ", " ", " ", "", "\n", "\t", "  /* c */ ", " -- x\n"]);
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push_str(sep);
        }
        s.push_str(&token(r));
    }
    s
}

/// Splits a statement into rough tokens for mutation: words, quoted runs, single symbols, spaces.
fn rough_tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                i += 1;
            }
        } else if c == '\'' || c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += 1;
            }
            i = (i + 1).min(chars.len());
        } else if c.is_whitespace() {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
        } else {
            i += 1;
        }
        out.push(chars[start..i].iter().collect());
    }
    out
}

fn mutate(r: &mut Rng, s: &str) -> String {
    let mut toks = rough_tokens(s);
    let rounds = 1 + r.below(4);
    for _ in 0..rounds {
        let n = toks.len();
        match r.below(11) {
            0 if n > 0 => {
                toks.remove(r.below(n));
            }
            1 if n > 0 => {
                let i = r.below(n);
                let t = toks[i].clone();
                toks.insert(i, t);
            }
            2 if n > 1 => {
                let (i, j) = (r.below(n), r.below(n));
                toks.swap(i, j);
            }
            3 if n > 0 => {
                let i = r.below(n);
                toks[i] = token(r);
            }
            4 => {
                let i = r.below(n + 1);
                toks.insert(i, format!(" {} ", token(r)));
            }
            5 if n > 0 => {
                // truncate
                toks.truncate(r.below(n));
            }
            6 if n > 0 => {
                // a character inside a token
                let i = r.below(n);
                let mut cs: Vec<char> = toks[i].chars().collect();
                let at = r.below(cs.len() + 1);
                match r.below(3) {
                    0 if !cs.is_empty() => {
                        cs.remove(at.min(cs.len() - 1));
                    }
                    1 if !cs.is_empty() => {
                        let k = at.min(cs.len() - 1);
                        cs[k] = random_char(r);
                    }
                    _ => cs.insert(at, random_char(r)),
                }
                toks[i] = cs.into_iter().collect();
            }
            7 if n > 0 => {
                let i = r.below(n);
                toks[i] = if r.chance(50) { toks[i].to_uppercase() } else { toks[i].to_lowercase() };
            }
            8 => {
                // splice in part of another valid statement
                let other = rough_tokens(*r.pick(VALID));
                let from = r.below(other.len());
                let to = from + r.below(other.len() - from + 1);
                let at = r.below(n + 1);
                for (k, t) in other[from..to].iter().enumerate() {
                    toks.insert(at + k, t.clone());
                }
            }
            9 if n > 0 => {
                // remove the whitespace between tokens / add a statement separator
                let i = r.below(n);
                if toks[i].trim().is_empty() {
                    toks[i] = if r.chance(50) { String::new() } else { ";".into() };
                }
            }
            _ => {
                let i = r.below(n + 1);
                toks.insert(i, r.pick(PUNCT).to_string());
            }
        }
    }
    toks.concat()
}

/// Text with deep nesting, long runs or huge sizes: the shapes that find recursion and quadratic paths.
fn extreme(r: &mut Rng) -> String {
    let max = if r.chance(10) { 50_000 } else { 2_000 };
    let n = 1 + r.below(max);
    match r.below(10) {
        0 => format!("restore world a to {}now(){}", "(".repeat(n), ")".repeat(n)),
        1 => format!("select * from t as of {}'-1 hour'{}", "(".repeat(n), ")".repeat(n)),
        2 => format!("merge world a only tables ({})", vec!["t"; n.min(5000)].join(", ")),
        3 => format!("create world a with ({})", (0..n.min(3000)).map(|i| format!("k{i} = {i}")).collect::<Vec<_>>().join(", ")),
        4 => format!("create world {}", "a".repeat(n)),
        5 => format!("diff world a /*{}", "/*".repeat(n.min(5000))),
        6 => "select * from t as of ".repeat(n.min(2000)),
        7 => format!("restore world a to {}", "- ".repeat(n)),
        8 => format!("select * from t as of $1{}", "::int".repeat(n.min(5000))),
        _ => format!("create world \"{}\"", "\"\"".repeat(n.min(5000))),
    }
}

fn json_value(r: &mut Rng, depth: usize) -> Value {
    match r.below(if depth == 0 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(r.chance(50)),
        2 => json!(r.next() as i64),
        3 => json!(r.below(1000) as f64 / 7.0),
        4 => Value::String(random_text(r, 8)),
        5 => Value::String(r.pick(&["org_id = 42", "region = 'eu'", "42", "-1", " 7 ", "x", "", "9223372036854775808"]).to_string()),
        6 => Value::Array((0..r.below(4)).map(|_| json_value(r, depth - 1)).collect()),
        _ => {
            let mut m = Map::new();
            for _ in 0..r.below(5) {
                let k = if r.chance(60) { r.pick(&scope::KEYS).to_string() } else { r.pick(KEYWORDS).to_string() };
                m.insert(k, json_value(r, depth - 1));
            }
            Value::Object(m)
        }
    }
}

fn json_text(r: &mut Rng, depth: usize) -> String {
    json_value(r, depth).to_string()
}

// ---------------------------------------------------------------------------------------------------
// The run

thread_local! {
    /// the last panic's message and where it was raised (file:line), set by the test's panic hook
    static LAST_PANIC: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

#[derive(Default)]
struct Stats {
    inputs: u64,
    calls: u64,
    parsed_ok: u64,
    parsed_err: u64,
    as_of_rewritten: u64,
    by_state: BTreeMap<String, u64>,
    by_class: BTreeMap<&'static str, (u64, f64)>,
    /// panics by entry point and place: how many, the first message, up to 3 inputs
    panics: BTreeMap<(String, String), (u64, String, Vec<String>)>,
    panic_count: u64,
    notes: BTreeMap<String, (u64, String)>,
}

impl Stats {
    /// Something odd but not a panic, counted by kind with its first example.
    fn note(&mut self, what: String, example: String) {
        let e = self.notes.entry(what).or_insert((0, example));
        e.0 += 1;
    }
}

/// Calls `f` and records a panic (with the entry point and the input) instead of unwinding.
fn guard<T>(stats: &mut Stats, entry: &str, input: &str, f: impl FnOnce() -> T) -> Option<T> {
    stats.calls += 1;
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(_) => {
            let (msg, at) = LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default();
            stats.panic_count += 1;
            let e = stats.panics.entry((entry.to_string(), at)).or_insert((0, msg, Vec::new()));
            e.0 += 1;
            if e.2.len() < 3 {
                e.2.push(input.to_string());
            }
            None
        }
    }
}

fn short(s: &str) -> String {
    s.chars().take(200).collect()
}

/// A ParseError must be one a client can be given: a 5-character SQLSTATE and a position within the text.
fn check_error(stats: &mut Stats, entry: &str, input: &str, e: &grammar::ParseError) {
    *stats.by_state.entry(e.sqlstate.to_string()).or_default() += 1;
    if e.sqlstate.len() != 5 || !e.sqlstate.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()) {
        stats.note(format!("{entry}: SQLSTATE {:?} is not 5 characters", e.sqlstate), format!("{:?}", short(input)));
    }
    let chars = input.chars().count();
    if e.position == 0 || e.position > chars + 1 {
        stats.note(format!("{entry}: error position past the end of the text (1-based characters) for \"{}\"", e.message.chars().take(60).collect::<String>()), format!("{:?}: position {} of {} characters", short(input), e.position, chars));
    }
    if e.message.contains('\0') {
        stats.note(format!("{entry}: message with NUL"), format!("{:?}", short(input)));
    }
}

fn feed_statement(stats: &mut Stats, s: &str) {
    if let Some(res) = guard(stats, "grammar::parse", s, || grammar::parse(s)) {
        match res {
            Ok(st) => {
                stats.parsed_ok += 1;
                let _ = guard(stats, "Statement::writes", s, || st.writes());
                if let grammar::Statement::CreateWorld { name, .. } = &st {
                    // what the parser accepted as a new world's name passes the name rules
                    if names::check_world_name(name).is_err() {
                        stats.note("parse accepted a new world name check_world_name refuses".into(), format!("{:?}", short(s)));
                    }
                }
                if format!("{st:?}").contains('\0') {
                    stats.note("a parsed statement holds a NUL".into(), format!("{:?}", short(s)));
                }
            }
            Err(e) => {
                stats.parsed_err += 1;
                check_error(stats, "grammar::parse", s, &e);
            }
        }
    }
    if let Some(res) = guard(stats, "as_of::rewrite_as_of", s, || as_of::rewrite_as_of(s)) {
        match res {
            Ok(Some(_)) => stats.as_of_rewritten += 1,
            Ok(None) => {}
            Err(e) => check_error(stats, "as_of::rewrite_as_of", s, &e),
        }
    }
}

/// Pieces of text given to the name and list functions (a world or agent name, a table list, may_change,
/// tenant, a snapshot, a LIKE pattern).
fn feed_fragment(stats: &mut Stats, s: &str) {
    let _ = guard(stats, "names::check_world_name", s, || names::check_world_name(s));
    let _ = guard(stats, "names::check_agent_name", s, || names::check_agent_name(s));
    let _ = guard(stats, "rules::identifiers", s, || rules::identifiers(s));
    let _ = guard(stats, "rules::split_list", s, || rules::split_list(s));
    if let Some(Ok(l)) = guard(stats, "rules::table_list", s, || rules::table_list(s)) {
        let _ = guard(stats, "TableName::to_string", s, || l.iter().map(|t| (t.to_string(), t.names("public", "t"))).count());
    }
    let _ = guard(stats, "rules::column_list", s, || rules::column_list(s));
    let _ = guard(stats, "rules::name_list", s, || rules::name_list(s));
    let _ = guard(stats, "scope::may_change_names", s, || scope::may_change_names(s));
    let _ = guard(stats, "scope::parse_tenant", s, || scope::parse_tenant(s));
    let _ = guard(stats, "scope::tenant_from_json(string)", s, || scope::tenant_from_json(&Value::String(s.to_string())));
    let _ = guard(stats, "scope::parse_count(string)", s, || scope::parse_count("max_rows", &Value::String(s.to_string())));
    let _ = guard(stats, "snapshot::Snapshot::parse", s, || snapshot::Snapshot::parse(s).map(|x| x.visible(x.xmin ^ x.xmax)));
    let _ = guard(stats, "snapshot::xmin_of", s, || snapshot::xmin_of(s));
    let _ = guard(stats, "reads::like_prefix", s, || reads::like_prefix(s));
    let _ = guard(stats, "reads::comparison", s, || reads::comparison(s));
    let parts: Vec<String> = s.split(',').map(str::to_string).collect();
    let _ = guard(stats, "names::unique_column_names", s, || names::unique_column_names(&parts));
}

/// JSON given to the scope and merge functions.
fn feed_json(stats: &mut Stats, r: &mut Rng) {
    let v = json_value(r, 3);
    let text = v.to_string();
    let _ = guard(stats, "scope::tenant_from_json", &text, || scope::tenant_from_json(&v));
    let _ = guard(stats, "scope::parse_count", &text, || scope::parse_count("max_deletes", &v));
    if let Some(Some(sc)) = guard(stats, "scope::Scope::from_json", &text, || scope::Scope::from_json(&v)) {
        let _ = guard(stats, "Scope::describe/to_json/shown", &text, || (sc.describe(), sc.to_json(), sc.shown(), sc.declares(), sc.declares_what()));
        // a scope judged against random row changes
        let rows: Vec<scope::RowChange> = (0..r.below(4))
            .map(|_| {
                let obj = |r: &mut Rng| match json_value(r, 2) {
                    Value::Object(m) => Some(m),
                    _ => None,
                };
                scope::RowChange {
                    schema: r.pick(&["public", "app"]).to_string(),
                    table: r.pick(NAMES).to_string(),
                    key: random_text(r, 4),
                    before: obj(r),
                    after: obj(r),
                    columns: (0..r.below(3)).map(|_| r.pick(KEYWORDS).to_string()).collect(),
                    has_tenant_column: r.chance(70),
                }
            })
            .collect();
        let _ = guard(stats, "scope::breaches", &text, || {
            let why = scope::breaches(&sc, &rows);
            scope::refusal("w", &sc, &why)
        });
    }
    // rows are JSON objects of a table's columns, or absent (decide's contract: the extension hands it
    // to_jsonb of rows); a RESOLVE row may be any JSON
    let row = |r: &mut Rng| -> Option<Value> {
        if r.chance(20) {
            return None;
        }
        let mut m = Map::new();
        for _ in 0..r.below(4) {
            m.insert(r.pick(&["id", "status", "v", "owner", "org_id"]).to_string(), json_value(r, 1));
        }
        Some(Value::Object(m))
    };
    let (base, ours, theirs) = (row(r), row(r), row(r));
    let settle = merge::Settle {
        resolve: match r.below(6) {
            0 => Some(merge::Pick::Ours),
            1 => Some(merge::Pick::Theirs),
            2 => Some(merge::Pick::Delete),
            3 => Some(merge::Pick::Row(json_value(r, 2))),
            _ => None,
        },
        by_columns: r.chance(50),
        using_ours: match r.below(3) {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        },
    };
    let _ = guard(stats, "merge::decide", &text, || {
        let d = merge::decide(base.as_ref(), ours.as_ref(), theirs.as_ref(), &settle);
        (d.outcome.label(), merge::changed_columns(base.as_ref(), ours.as_ref()))
    });
}

/// Bytes given to reads::decode (shared memory's form of a scan's conditions).
fn feed_bytes(stats: &mut Stats, r: &mut Rng) {
    let mut b: Vec<u8> = (0..r.below(64)).map(|_| r.next() as u8).collect();
    if r.chance(50) {
        // a valid encoding, then mutated
        let cs: Vec<reads::Conjunct> = (0..1 + r.below(4))
            .map(|_| reads::Conjunct {
                attno: r.next() as i16,
                test: *r.pick(&[reads::Test::Op, reads::Test::OpCommuted, reads::Test::AnyEq, reads::Test::IsNull]),
                opno: r.next() as u32,
                typ: r.next() as u32,
                value: random_text(r, 80),
            })
            .collect();
        if let Some(Some(enc)) = guard(stats, "reads::encode", "(conjuncts)", || reads::encode(&cs)) {
            b = enc;
            for _ in 0..r.below(3) {
                if !b.is_empty() {
                    let i = r.below(b.len());
                    b[i] = r.next() as u8;
                }
            }
            if r.chance(30) {
                b.truncate(r.below(b.len() + 1));
            }
        }
    }
    let shown = format!("{b:?}");
    let _ = guard(stats, "reads::decode", &shown, || reads::decode(&b).map(|d| reads::encode(&d)));
    let _ = guard(stats, "reads::hash", &shown, || reads::hash(&b));
}

/// Runs a text entry point on `s`: where it panicked, if it did (None also for entry points that don't
/// take text).
fn panics_at(entry: &str, s: &str) -> Option<String> {
    let f: Box<dyn Fn()> = match entry {
        "grammar::parse" => Box::new(|| drop(grammar::parse(s))),
        "as_of::rewrite_as_of" => Box::new(|| drop(as_of::rewrite_as_of(s))),
        "names::check_world_name" => Box::new(|| drop(names::check_world_name(s))),
        "names::check_agent_name" => Box::new(|| drop(names::check_agent_name(s))),
        "rules::identifiers" => Box::new(|| drop(rules::identifiers(s))),
        "rules::table_list" => Box::new(|| drop(rules::table_list(s))),
        "rules::column_list" => Box::new(|| drop(rules::column_list(s))),
        "rules::name_list" => Box::new(|| drop(rules::name_list(s))),
        "scope::may_change_names" => Box::new(|| drop(scope::may_change_names(s))),
        "scope::parse_tenant" => Box::new(|| drop(scope::parse_tenant(s))),
        "snapshot::Snapshot::parse" => Box::new(|| drop(snapshot::Snapshot::parse(s))),
        _ => return None,
    };
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => None,
        Err(_) => LAST_PANIC.with(|p| p.borrow_mut().take()).map(|(_, at)| at),
    }
}

/// The input made smaller while it still panics at the same place: rough tokens dropped one at a time,
/// then characters, until nothing more can go.
fn shrink(entry: &str, at: &str, input: &str) -> Option<String> {
    panics_at(entry, input)?;
    let same = |s: &str| panics_at(entry, s).as_deref() == Some(at);
    let mut cur = input.to_string();
    loop {
        let before = cur.len();
        let toks = rough_tokens(&cur);
        for i in (0..toks.len()).rev() {
            let mut t = rough_tokens(&cur);
            if i >= t.len() {
                continue;
            }
            if t[i].trim().is_empty() {
                continue;
            }
            // the token (spaces alone stay: they keep words apart), and a space it leaves doubled
            t.remove(i);
            let blank = |x: &String| x.trim().is_empty();
            if i < t.len() && blank(&t[i]) && (i == 0 || blank(&t[i - 1])) {
                t.remove(i);
            }
            let cand = t.concat();
            if same(&cand) {
                cur = cand;
            }
        }
        // collapse runs of spaces
        let squeezed = cur.split_whitespace().collect::<Vec<_>>().join(" ");
        if squeezed != cur && same(&squeezed) {
            cur = squeezed;
        }
        if cur.len() == before {
            return Some(cur);
        }
    }
}

#[test]
fn fuzz_grammar_and_parsers() {
    let inputs: u64 = std::env::var("FUZZ_INPUTS").ok().and_then(|s| s.replace('_', "").parse().ok()).unwrap_or(200_000);
    let seed: u64 = std::env::var("FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026);
    let mut r = Rng::new(seed);
    let mut stats = Stats::default();

    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some((msg, at)));
    }));

    let started = std::time::Instant::now();
    // every valid seed as written, first
    for s in VALID {
        stats.inputs += 1;
        stats.by_class.entry("valid").or_default().0 += 1;
        feed_statement(&mut stats, s);
    }
    while stats.inputs < inputs {
        stats.inputs += 1;
        let class: &'static str = match r.below(100) {
            0..=24 => "grammar",
            25..=49 => "mutation",
            50..=64 => "soup",
            65..=69 => "random",
            70 => "extreme",
            71..=86 => "fragment",
            87..=95 => "json",
            _ => "bytes",
        };
        let t0 = std::time::Instant::now();
        match class {
            "grammar" => {
                let s = grammar_statement(&mut r);
                let s = if r.chance(20) { mutate(&mut r, &s) } else { s };
                feed_statement(&mut stats, &s);
            }
            "mutation" => {
                let seed_statement = VALID[r.below(VALID.len())];
                let s = mutate(&mut r, seed_statement);
                feed_statement(&mut stats, &s);
            }
            "soup" => {
                let s = token_soup(&mut r);
                feed_statement(&mut stats, &s);
            }
            "random" => {
                let s = random_text(&mut r, 60);
                feed_statement(&mut stats, &s);
            }
            "extreme" => {
                let s = extreme(&mut r);
                feed_statement(&mut stats, &s);
            }
            "fragment" => {
                let s = match r.below(6) {
                    0 => name(&mut r),
                    1 => token_soup(&mut r),
                    2 => (0..1 + r.below(4)).map(|_| name(&mut r)).collect::<Vec<_>>().join(*r.pick(&[",", ", ", ".", " . ", ",,"])),
                    3 => format!("{} = {}", name(&mut r), value(&mut r)),
                    4 => format!("{}:{}:{}", number(&mut r), number(&mut r), (0..r.below(4)).map(|_| number(&mut r)).collect::<Vec<_>>().join(",")),
                    _ => random_text(&mut r, 24),
                };
                feed_fragment(&mut stats, &s);
            }
            "json" => feed_json(&mut stats, &mut r),
            _ => feed_bytes(&mut stats, &mut r),
        }
        let e = stats.by_class.entry(class).or_default();
        e.0 += 1;
        e.1 += t0.elapsed().as_secs_f64();
    }
    let elapsed = started.elapsed();

    let mut out = String::new();
    out += &format!(
        "fuzz_grammar: seed {seed}: {} inputs ({} calls) in {:.1} s; grammar::parse {} ok, {} err; AS OF rewritten {}; panics {}\n",
        stats.inputs,
        stats.calls,
        elapsed.as_secs_f64(),
        stats.parsed_ok,
        stats.parsed_err,
        stats.as_of_rewritten,
        stats.panic_count
    );
    out += "  inputs by class (count, seconds):";
    for (class, (n, secs)) in &stats.by_class {
        out += &format!(" {class} {n} {secs:.1}s;");
    }
    out += "\n";
    out += &format!("  errors by SQLSTATE: {:?}\n", stats.by_state);
    for (what, (n, example)) in &stats.notes {
        out += &format!("  note ({n}x): {what}; e.g. {example}\n");
    }
    for ((entry, at), (n, msg, inputs)) in &stats.panics {
        out += &format!("  PANIC ({n}x) in {entry} at {at}: {}\n", short(msg));
        for input in inputs {
            out += &format!("    input: {:?}\n", short(input));
            if let Some(small) = shrink(entry, at, input) {
                out += &format!("    shrunk: {small:?}\n");
            }
        }
    }
    panic::set_hook(default_hook);
    let _ = std::io::stderr().write_all(out.as_bytes());
    assert!(stats.panics.is_empty(), "{} panics in {} places (listed above)", stats.panic_count, stats.panics.len());
}
