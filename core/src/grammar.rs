//! The grammar of the spec's statements (../shared/spec/worlds-sql.txt), as `worlds.sql(text)` accepts
//! them: case-insensitive keywords, bare / "quoted" / 'string' names, dollar quotes, an optional trailing
//! semicolon. One module; the backend maps each `Statement` to a SQL function call.

/// A world reference as written: a bare name (folded to lower case, as SQL does), a "quoted" name or a
/// 'string' (kept as written). 'name@when' moments are kept as written in the text.
pub type WorldRef = String;

#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    Text(String),
    Number(String),
    Bool(bool),
    Null,
}

/// Metadata given to CREATE WORLD / FORK WORLD / ALTER WORLD SET.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    /// WITH (key = value, ...), in the order written
    With(Vec<(String, MetaValue)>),
    /// META '<json object>' (the text, unparsed)
    Json(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum AlterAction {
    Set(Vec<(String, MetaValue)>),
    SetTtl(String),
    ResetTtl,
    SetPinned,
    ResetPinned,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Side {
    Ours,
    Theirs,
}

/// One entry of RESOLVE ('t/1' = OURS | THEIRS | DELETE | '<row as JSON>').
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    Ours,
    Theirs,
    Delete,
    Row(String),
}

/// MERGE's clauses; every one optional, in any order (a clause given twice is a 42601).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MergeClauses {
    pub into: Option<WorldRef>,
    pub only_tables: Option<Vec<String>>,
    pub only_keys: Option<Vec<String>>,
    pub using: Option<Side>,
    pub by_columns: bool,
    pub resolve: Vec<(String, Resolution)>,
    pub confirm: bool,
    pub confirm_deletes: Option<i64>,
    pub target: Option<i64>,
    pub at_version: Option<i64>,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// CREATE WORLD / CREATE BRANCH name [FROM source] [WITH (...) | META '...'];
    /// FORK WORLD source [AS] name [...] is the same with `source` set.
    CreateWorld { name: WorldRef, source: Option<WorldRef>, meta: Option<Meta>, branch: bool, fork: bool },
    /// SWITCH WORLD / SWITCH BRANCH / USE WORLD / USE BRANCH / USE name. `tag` is the command tag to return.
    Switch { name: WorldRef, tag: &'static str },
    ShowWorlds,
    ShowBranches,
    AlterWorld { name: WorldRef, action: AlterAction },
    /// DROP WORLD / DELETE WORLD / DROP BRANCH [IF EXISTS] name [CASCADE]
    DropWorld { name: WorldRef, if_exists: bool, cascade: bool, tag: &'static str },
    /// DIFF [WORLD|BRANCH] [a [TO b]] [AS SQL] [LIMIT n]
    Diff { from: Option<WorldRef>, to: Option<WorldRef>, as_sql: bool, limit: Option<i64> },
    /// MERGE WORLD / MERGE BRANCH [name] [clause ...]
    Merge { name: Option<WorldRef>, clauses: MergeClauses, tag: &'static str },
    /// REBASE WORLD [name] [USING OURS|THEIRS] [BY COLUMNS] [RESOLVE (...)] [AT VERSION n]
    Rebase { name: Option<WorldRef>, using: Option<Side>, by_columns: bool, resolve: Vec<(String, Resolution)>, at_version: Option<i64> },
    /// SHOW HISTORY [FOR [WORLD] name] [LIMIT n]
    ShowHistory { name: Option<WorldRef>, limit: Option<i64> },
    /// UNDO MERGE [OF] [WORLD|BRANCH] name [SKIP CHANGED]
    UndoMerge { name: WorldRef, skip_changed: bool },
    /// RESTORE WORLD name TO when | TO CHECKPOINT 'label'
    Restore { name: WorldRef, to: RestoreTarget },
    /// CHECKPOINT WORLD name AS 'label'
    Checkpoint { name: WorldRef, label: String },
    /// ALTER SYSTEM SET history_retention = '<interval>' | TO '<interval>'
    SetHistoryRetention { value: String },
    /// SHOW history_retention
    ShowHistoryRetention,
    /// CREATE AGENT name [WITH (key = value, ...)]
    CreateAgent { name: String, settings: Vec<(String, MetaValue)> },
    /// ALTER AGENT name SET (key = value, ...)
    AlterAgent { name: String, settings: Vec<(String, MetaValue)> },
    /// DROP AGENT name
    DropAgent { name: String },
    /// SHOW AGENTS
    ShowAgents,
    /// SHOW AUDIT [FOR [AGENT] name] [LIMIT n]
    ShowAudit { agent: Option<String>, limit: Option<i64> },
    /// CREATE MERGE POLICY name [WITH (key = value, ...)]
    CreatePolicy { name: String, settings: Vec<(String, MetaValue)> },
    /// ALTER MERGE POLICY name SET (key = value, ...)
    AlterPolicy { name: String, settings: Vec<(String, MetaValue)> },
    /// DROP MERGE POLICY name [CASCADE]
    DropPolicy { name: String, cascade: bool },
    /// SHOW MERGE POLICIES
    ShowPolicies,
    /// SHOW REVIEWS
    ShowReviews,
    /// CREATE [OR REPLACE] MERGE CHECK name [ON TABLES (t, ...)] [WITH (timeout = ...)] AS <query>
    CreateCheck { name: String, replace: bool, tables: Option<Vec<String>>, settings: Vec<(String, MetaValue)>, query: String },
    /// DROP MERGE CHECK name
    DropCheck { name: String },
    /// SHOW MERGE CHECKS
    ShowChecks,
    /// UNDO AGENT name SINCE when [SKIP CHANGED] [WHERE run_id = 'id']
    UndoAgent { name: String, since: RestoreTarget, skip_changed: bool, run_id: Option<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub enum RestoreTarget {
    /// a moment written as a string: its value ('-10 minutes', '2026-09-20 10:00', 'now')
    When(String),
    /// any other expression, as its source text (`now() - interval '1 hour'`, `$1`, `'…'::date`), for
    /// the database to evaluate; parentheses balanced and no `;` in it
    Expr(String),
    Checkpoint(String),
}

impl Statement {
    /// The command a statement that changes something names in a read-only transaction's 25006 ("cannot
    /// execute MERGE WORLD in a read-only transaction"); None for one that only reads (SHOW, DIFF, a DRY
    /// RUN, SWITCH, which changes only the session).
    pub fn writes(&self) -> Option<&'static str> {
        match self {
            Statement::CreateWorld { .. } => Some("CREATE WORLD"),
            Statement::AlterWorld { .. } => Some("ALTER WORLD"),
            Statement::DropWorld { .. } => Some("DROP WORLD"),
            Statement::Merge { clauses, .. } if !clauses.dry_run => Some("MERGE WORLD"),
            Statement::Rebase { .. } => Some("REBASE WORLD"),
            Statement::UndoMerge { .. } => Some("UNDO MERGE"),
            Statement::Restore { .. } => Some("RESTORE WORLD"),
            Statement::Checkpoint { .. } => Some("CHECKPOINT WORLD"),
            Statement::SetHistoryRetention { .. } => Some("ALTER SYSTEM"),
            Statement::CreateAgent { .. } => Some("CREATE AGENT"),
            Statement::AlterAgent { .. } => Some("ALTER AGENT"),
            Statement::DropAgent { .. } => Some("DROP AGENT"),
            Statement::UndoAgent { .. } => Some("UNDO AGENT"),
            Statement::CreatePolicy { .. } => Some("CREATE MERGE POLICY"),
            Statement::CreateCheck { .. } => Some("CREATE MERGE CHECK"),
            Statement::DropCheck { .. } => Some("DROP MERGE CHECK"),
            Statement::AlterPolicy { .. } => Some("ALTER MERGE POLICY"),
            Statement::DropPolicy { .. } => Some("DROP MERGE POLICY"),
            _ => None,
        }
    }
}

/// A statement that could not be parsed: SQLSTATE (42601 for syntax; names break their own rules with
/// 42602 / 42939), a message, and the 1-based character position in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub sqlstate: &'static str,
    pub message: String,
    pub position: usize,
}


/// Parses one statement of the spec, with an optional trailing semicolon.
pub fn parse(text: &str) -> Result<Statement, ParseError> {
    // (a merge check's query is the database's SQL: only its head is this grammar's)
    if let Some(check) = checks::parse_create_check(text) {
        return check;
    }
    let mut p = Parser { text, toks: lex(text)?, i: 0 };
    let statement = p.statement()?;
    p.eat_sym(';');
    match p.peek().tok {
        Tok::End => Ok(statement),
        _ => Err(p.syntax_error(p.peek())),
    }
}

/// MERGE's clauses. Each may be given once; REBASE takes only those that settle conflicts and AT VERSION.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Clause {
    Into,
    OnlyTables,
    OnlyKeys,
    Using,
    ByColumns,
    Resolve,
    Confirm,
    ConfirmDeletes,
    Target,
    AtVersion,
    DryRun,
}

impl Clause {
    /// The clause a bare word starts (the word after it tells CONFIRM from CONFIRM DELETES, and ONLY
    /// TABLES from ONLY KEYS). These words (names::MERGE_WORDS, TARGET and AT) are never read as the
    /// world's name right after MERGE WORLD / REBASE WORLD.
    fn starting(word: &str, next: &Token) -> Option<Clause> {
        Some(match word {
            "into" => Clause::Into,
            "only" if is_word(next, "tables") => Clause::OnlyTables,
            "only" => Clause::OnlyKeys,
            "using" | "ours" | "theirs" => Clause::Using,
            "by" => Clause::ByColumns,
            "resolve" => Clause::Resolve,
            "confirm" if is_word(next, "deletes") => Clause::ConfirmDeletes,
            "confirm" => Clause::Confirm,
            "target" => Clause::Target,
            "at" => Clause::AtVersion,
            "dry" => Clause::DryRun,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Clause::Into => "INTO",
            Clause::OnlyTables => "ONLY TABLES",
            Clause::OnlyKeys => "ONLY KEYS",
            Clause::Using => "USING",
            Clause::ByColumns => "BY COLUMNS",
            Clause::Resolve => "RESOLVE",
            Clause::Confirm => "CONFIRM",
            Clause::ConfirmDeletes => "CONFIRM DELETES",
            Clause::Target => "TARGET",
            Clause::AtVersion => "AT VERSION",
            Clause::DryRun => "DRY RUN",
        }
    }

    fn in_rebase(self) -> bool {
        matches!(self, Clause::Using | Clause::ByColumns | Clause::Resolve | Clause::AtVersion)
    }
}

// ---------------------------------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// a bare word, folded to lower case: a keyword or a name
    Word(String),
    /// a "quoted" identifier, as written
    Quoted(String),
    /// a 'string', E'string' or $tag$dollar-quoted$tag$ string: its value
    Str(String),
    /// digits, with decimals if written; a sign is a separate Sym('-')
    Num(String),
    /// any other character: punctuation, and the pieces of operators and $1 in RESTORE's expression
    Sym(char),
    End,
}

/// A token and where it is in the text, in bytes (`start..end` is its source text).
#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Splits the text into tokens, ending with `Tok::End`. Works on bytes: every character the grammar
/// cares about is ASCII, and a multibyte character can only be part of a word, string or comment.
pub(crate) fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    loop {
        i = skip_space_and_comments(text, i)?;
        if i == b.len() {
            toks.push(Token { tok: Tok::End, start: i, end: i });
            return Ok(toks);
        }
        let start = i;
        let tok = match b[i] {
            b'\'' => {
                let (s, end) = quoted(text, i, b'\'', "unterminated quoted string")?;
                i = end;
                Tok::Str(s)
            }
            b'"' => {
                let (s, end) = quoted(text, i, b'"', "unterminated quoted identifier")?;
                i = end;
                Tok::Quoted(s)
            }
            b'e' | b'E' if b.get(i + 1) == Some(&b'\'') => {
                let (s, end) = escape_string(text, i)?;
                i = end;
                Tok::Str(s)
            }
            b'$' => match dollar_tag(b, i) {
                Some(len) => {
                    let (s, end) = dollar_string(text, i, len)?;
                    i = end;
                    Tok::Str(s)
                }
                None => {
                    i += 1;
                    Tok::Sym('$')
                }
            },
            c if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                i = digits(b, i);
                // decimals, as SQL writes them: 1.5, .5, and 5. (a dot not followed by a name)
                if b.get(i) == Some(&b'.') && !b.get(i + 1).is_some_and(|&c| is_word_start(c)) {
                    i = digits(b, i + 1);
                }
                // an exponent, as SQL writes numbers: 1e3, 2.5E-4
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
                    if b.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
                        i = digits(b, i + 1 + sign);
                    }
                }
                Tok::Num(text[start..i].to_string())
            }
            c if is_word_start(c) => {
                while i < b.len() && (is_word_start(b[i]) || b[i].is_ascii_digit() || b[i] == b'$') {
                    i += 1;
                }
                // Postgres folds only ASCII letters in UTF-8 databases.
                Tok::Word(text[start..i].to_ascii_lowercase())
            }
            c => {
                i += 1;
                Tok::Sym(c as char)
            }
        };
        toks.push(Token { tok, start, end: i });
    }
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn digits(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

fn skip_space_and_comments(text: &str, mut i: usize) -> Result<usize, ParseError> {
    let b = text.as_bytes();
    loop {
        match (b.get(i), b.get(i + 1)) {
            (Some(c), _) if c.is_ascii_whitespace() => i += 1,
            (Some(b'-'), Some(b'-')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => {
                // Block comments nest, as in Postgres.
                let start = i;
                let mut depth = 0;
                loop {
                    match (b.get(i), b.get(i + 1)) {
                        (None, _) => return Err(lex_error(text, start, "unterminated /* comment")),
                        (Some(b'/'), Some(b'*')) => {
                            depth += 1;
                            i += 2;
                        }
                        (Some(b'*'), Some(b'/')) => {
                            depth -= 1;
                            i += 2;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => i += 1,
                    }
                }
            }
            _ => return Ok(i),
        }
    }
}

/// A string or identifier between `q`s, a doubled `q` standing for one. Returns its value and the end.
fn quoted(text: &str, start: usize, q: u8, unterminated: &str) -> Result<(String, usize), ParseError> {
    let b = text.as_bytes();
    let mut value = String::new();
    let mut from = start + 1;
    let mut i = from;
    loop {
        match b.get(i) {
            None => return Err(lex_error(text, start, unterminated)),
            Some(&c) if c == q && b.get(i + 1) == Some(&q) => {
                value.push_str(&text[from..=i]);
                i += 2;
                from = i;
            }
            Some(&c) if c == q => {
                value.push_str(&text[from..i]);
                return Ok((value, i + 1));
            }
            Some(_) => i += 1,
        }
    }
}

/// E'...': backslash escapes as in Postgres (\n \t \b \f \r, \ooo octal and \xhh hex bytes,
/// \uXXXX and \UXXXXXXXX code points, \c for any other c), and '' for a quote.
fn escape_string(text: &str, start: usize) -> Result<(String, usize), ParseError> {
    let b = text.as_bytes();
    let mut out: Vec<u8> = Vec::new();
    // Up to `max` digits of `radix` from `i`: their value and where they end.
    let number = |i: usize, radix: u32, max: usize| {
        let len = b[i..].iter().take(max).take_while(|c| (**c as char).is_digit(radix)).count();
        (u32::from_str_radix(&text[i..i + len], radix).unwrap_or(0), i + len)
    };
    let mut i = start + 2;
    loop {
        match b.get(i) {
            None => return Err(lex_error(text, start, "unterminated quoted string")),
            Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                out.push(b'\'');
                i += 2;
            }
            Some(b'\'') => break,
            Some(b'\\') => {
                let Some(&c) = b.get(i + 1) else {
                    return Err(lex_error(text, start, "unterminated quoted string"));
                };
                i += 2;
                match c {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'r' => out.push(b'\r'),
                    b'0'..=b'7' => {
                        let (v, end) = number(i - 1, 8, 3);
                        out.push(v as u8); // Postgres keeps the low byte of \777 too
                        i = end;
                    }
                    b'x' if b.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                        let (v, end) = number(i, 16, 2);
                        out.push(v as u8);
                        i = end;
                    }
                    b'u' | b'U' => {
                        let len = if c == b'u' { 4 } else { 8 };
                        let (v, end) = number(i, 16, len);
                        let ch = Some(v).filter(|_| end - i == len).and_then(char::from_u32).filter(|&ch| ch != '\0');
                        let Some(ch) = ch else {
                            return Err(error_at_byte(text, i - 2, "22025", "invalid Unicode escape value".into()));
                        };
                        out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        i = end;
                    }
                    // Anything else stands for itself (\\ and \' too); a multibyte character's other
                    // bytes follow as ordinary ones.
                    _ => out.push(c),
                }
            }
            Some(&c) => {
                out.push(c);
                i += 1;
            }
        }
    }
    // \0 and stray \x bytes can make text Postgres would refuse.
    match String::from_utf8(out) {
        Ok(s) if !s.contains('\0') => Ok((s, i + 1)),
        _ => Err(error_at_byte(text, start, "22021", "invalid byte sequence for encoding \"UTF8\"".into())),
    }
}

/// The length of the `$tag$` or `$$` starting at `i`, if one does (`$1` is a parameter, not a tag).
fn dollar_tag(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    if b.get(j).is_some_and(|&c| is_word_start(c)) {
        while b.get(j).is_some_and(|&c| is_word_start(c) || c.is_ascii_digit()) {
            j += 1;
        }
    }
    (b.get(j) == Some(&b'$')).then_some(j + 1 - i)
}

/// The string opened by the `len`-byte tag at `start`, up to the same tag: its value and the end.
fn dollar_string(text: &str, start: usize, len: usize) -> Result<(String, usize), ParseError> {
    let (tag, body) = (&text[start..start + len], start + len);
    match text[body..].find(tag) {
        Some(k) => Ok((text[body..body + k].to_string(), body + k + len)),
        None => Err(lex_error(text, start, "unterminated dollar-quoted string")),
    }
}

/// An unterminated string, identifier or comment, reported as Postgres does: with the rest of the text.
fn lex_error(text: &str, start: usize, what: &str) -> ParseError {
    error_at_byte(text, start, "42601", format!("{what} at or near \"{}\"", &text[start..]))
}

/// An error at a byte offset, given as Postgres gives positions: 1-based, in characters.
fn error_at_byte(text: &str, byte: usize, sqlstate: &'static str, message: String) -> ParseError {
    ParseError { sqlstate, message, position: text[..byte].chars().count() + 1 }
}

// ---------------------------------------------------------------------------------------------------
// The grammar

struct Parser<'a> {
    text: &'a str,
    /// never empty: the last is Tok::End, which `next` doesn't move past
    toks: Vec<Token>,
    i: usize,
}

type Parsed<T> = Result<T, ParseError>;

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.toks[self.i]
    }

    fn peek_at(&self, n: usize) -> &Token {
        &self.toks[(self.i + n).min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn at_word(&self, word: &str) -> bool {
        is_word(self.peek(), word)
    }

    fn eat_word(&mut self, word: &str) -> bool {
        let at = self.at_word(word);
        if at {
            self.next();
        }
        at
    }

    fn expect_word(&mut self, word: &str) -> Parsed<()> {
        if self.eat_word(word) {
            Ok(())
        } else {
            Err(self.syntax_error(self.peek()))
        }
    }

    fn eat_sym(&mut self, c: char) -> bool {
        let at = self.peek().tok == Tok::Sym(c);
        if at {
            self.next();
        }
        at
    }

    fn expect_sym(&mut self, c: char) -> Parsed<()> {
        if self.eat_sym(c) {
            Ok(())
        } else {
            Err(self.syntax_error(self.peek()))
        }
    }

    /// At the end of the statement: the end of the text, or a semicolon that ends it.
    fn at_end(&self) -> bool {
        match self.peek().tok {
            Tok::End => true,
            Tok::Sym(';') => self.peek_at(1).tok == Tok::End,
            _ => false,
        }
    }

    fn error_at(&self, t: &Token, sqlstate: &'static str, message: impl Into<String>) -> ParseError {
        error_at_byte(self.text, t.start, sqlstate, message.into())
    }

    fn syntax_error(&self, t: &Token) -> ParseError {
        match t.tok {
            Tok::End => self.error_at(t, "42601", "syntax error at end of input"),
            _ => self.error_at(t, "42601", format!("syntax error at or near \"{}\"", &self.text[t.start..t.end])),
        }
    }

    fn statement(&mut self) -> Parsed<Statement> {
        let t = self.next();
        let Tok::Word(verb) = &t.tok else { return Err(self.syntax_error(&t)) };
        match verb.as_str() {
            "create" if self.eat_word("agent") => self.create_agent(),
            "create" if self.eat_word("merge") => self.create_policy(),
            "create" => {
                let branch = self.world_or_branch()?;
                self.create(branch)
            }
            "fork" => {
                self.expect_word("world")?;
                self.fork()
            }
            "switch" => {
                let branch = self.world_or_branch()?;
                Ok(Statement::Switch { name: self.world_name()?, tag: switch_tag(branch) })
            }
            "use" => {
                // USE name is USE WORLD name.
                let branch = self.eat_word("branch");
                if !branch {
                    self.eat_word("world");
                }
                Ok(Statement::Switch { name: self.world_name()?, tag: switch_tag(branch) })
            }
            "show" => self.show(),
            "alter" if self.eat_word("system") => self.alter_system(),
            "alter" if self.eat_word("agent") => self.alter_agent(),
            "alter" if self.eat_word("merge") => self.alter_policy(),
            "alter" => {
                self.expect_word("world")?;
                self.alter_world()
            }
            "drop" if self.eat_word("agent") => self.drop_agent(),
            "drop" if self.eat_word("merge") => {
                if self.eat_word("check") {
                    self.drop_check()
                } else {
                    self.drop_policy()
                }
            }
            "drop" => {
                let branch = self.world_or_branch()?;
                self.drop(if branch { "DROP BRANCH" } else { "DROP WORLD" })
            }
            "delete" => {
                self.expect_word("world")?;
                self.drop("DROP WORLD")
            }
            "diff" => self.diff(),
            "merge" => {
                self.world_or_branch()?;
                let name = self.merge_name()?;
                Ok(Statement::Merge { name, clauses: self.merge_clauses(false)?, tag: "MERGE" })
            }
            "rebase" => {
                self.expect_word("world")?;
                let name = self.merge_name()?;
                let c = self.merge_clauses(true)?;
                Ok(Statement::Rebase {
                    name,
                    using: c.using,
                    by_columns: c.by_columns,
                    resolve: c.resolve,
                    at_version: c.at_version,
                })
            }
            "undo" if self.eat_word("agent") => self.undo_agent(),
            "undo" => {
                self.expect_word("merge")?;
                self.eat_word("of");
                if !self.eat_word("world") {
                    self.eat_word("branch");
                }
                let name = self.world_name()?;
                let skip_changed = self.eat_word("skip");
                if skip_changed {
                    self.expect_word("changed")?;
                }
                Ok(Statement::UndoMerge { name, skip_changed })
            }
            "restore" => {
                self.expect_word("world")?;
                let name = self.world_name()?;
                self.expect_word("to")?;
                let to = if self.eat_word("checkpoint") {
                    RestoreTarget::Checkpoint(self.string()?)
                } else {
                    self.moment()?
                };
                Ok(Statement::Restore { name, to })
            }
            "checkpoint" => {
                self.expect_word("world")?;
                let name = self.world_name()?;
                self.expect_word("as")?;
                Ok(Statement::Checkpoint { name, label: self.string()? })
            }
            _ => Err(self.syntax_error(&t)),
        }
    }

    /// WORLD or BRANCH, which mean the same; true for BRANCH.
    fn world_or_branch(&mut self) -> Parsed<bool> {
        if self.eat_word("world") {
            Ok(false)
        } else if self.eat_word("branch") {
            Ok(true)
        } else {
            Err(self.syntax_error(self.peek()))
        }
    }

    /// A world as referred to: a bare name (folded), a "quoted" name or a 'string' (a name, an ID or
    /// 'name@when'). A bare name with a dash is the common slip `task-1`, which SQL reads as a subtraction.
    fn world_name(&mut self) -> Parsed<WorldRef> {
        let t = self.next();
        match &t.tok {
            Tok::Word(_) if self.peek().tok == Tok::Sym('-') => {
                Err(self.error_at(&t, "42601", "world names with a dash need quotes"))
            }
            Tok::Word(s) | Tok::Quoted(s) | Tok::Str(s) => Ok(s.clone()),
            _ => Err(self.syntax_error(&t)),
        }
    }

    /// A name for a world being made, held to names::check_world_name.
    fn new_world_name(&mut self) -> Parsed<WorldRef> {
        let t = self.peek().clone();
        let name = self.world_name()?;
        crate::names::check_world_name(&name).map_err(|(state, message)| self.error_at(&t, state, message))?;
        Ok(name)
    }

    fn string(&mut self) -> Parsed<String> {
        let t = self.next();
        match &t.tok {
            Tok::Str(s) => Ok(s.clone()),
            _ => Err(self.syntax_error(&t)),
        }
    }

    /// An integer, possibly negative, as a bigint.
    fn integer(&mut self) -> Parsed<i64> {
        let first = self.peek().clone();
        let minus = self.eat_sym('-');
        let t = self.next();
        let Tok::Num(digits) = &t.tok else { return Err(self.syntax_error(&t)) };
        if digits.contains('.') {
            return Err(self.syntax_error(&t));
        }
        let written = if minus { format!("-{digits}") } else { digits.clone() };
        written
            .parse()
            .map_err(|_| self.error_at(&first, "22003", format!("value \"{written}\" is out of range for type bigint")))
    }

    fn create(&mut self, branch: bool) -> Parsed<Statement> {
        let name = self.new_world_name()?;
        let source = if self.eat_word("from") { Some(self.world_name()?) } else { None };
        Ok(Statement::CreateWorld { name, source, meta: self.meta()?, branch, fork: false })
    }

    fn fork(&mut self) -> Parsed<Statement> {
        let source = self.world_name()?;
        self.eat_word("as");
        let name = self.new_world_name()?;
        Ok(Statement::CreateWorld { name, source: Some(source), meta: self.meta()?, branch: false, fork: true })
    }

    /// [WITH (key = value, ...) | META '<json object>']
    fn meta(&mut self) -> Parsed<Option<Meta>> {
        if self.eat_word("with") {
            Ok(Some(Meta::With(self.settings()?)))
        } else if self.eat_word("meta") {
            Ok(Some(Meta::Json(self.string()?)))
        } else {
            Ok(None)
        }
    }

    /// (key = value, ...): keys are identifiers; values strings, numbers, true, false or null.
    fn settings(&mut self) -> Parsed<Vec<(String, MetaValue)>> {
        self.expect_sym('(')?;
        let mut settings = Vec::new();
        loop {
            let t = self.next();
            let key = match &t.tok {
                Tok::Word(k) | Tok::Quoted(k) => k.clone(),
                _ => return Err(self.syntax_error(&t)),
            };
            self.expect_sym('=')?;
            settings.push((key, self.meta_value()?));
            if !self.eat_sym(',') {
                self.expect_sym(')')?;
                return Ok(settings);
            }
        }
    }

    fn meta_value(&mut self) -> Parsed<MetaValue> {
        let minus = self.eat_sym('-');
        let plus = !minus && self.eat_sym('+');
        let t = self.next();
        match &t.tok {
            Tok::Num(n) => {
                // as JSON writes it: .5 is 0.5, 5. is 5
                let n = n.strip_suffix('.').unwrap_or(n);
                let n = if n.starts_with('.') { format!("0{n}") } else { n.to_string() };
                let n = n.replace(".e", "e").replace(".E", "E");
                Ok(MetaValue::Number(if minus { format!("-{n}") } else { n }))
            }
            _ if minus || plus => Err(self.syntax_error(&t)),
            Tok::Str(s) => Ok(MetaValue::Text(s.clone())),
            Tok::Word(w) if w == "true" => Ok(MetaValue::Bool(true)),
            Tok::Word(w) if w == "false" => Ok(MetaValue::Bool(false)),
            Tok::Word(w) if w == "null" => Ok(MetaValue::Null),
            _ => Err(self.syntax_error(&t)),
        }
    }

    fn show(&mut self) -> Parsed<Statement> {
        let t = self.next();
        match &t.tok {
            Tok::Word(w) if w == "worlds" => Ok(Statement::ShowWorlds),
            Tok::Word(w) if w == "branches" => Ok(Statement::ShowBranches),
            Tok::Word(w) if w == "history_retention" => Ok(Statement::ShowHistoryRetention),
            Tok::Word(w) if w == "agents" => Ok(Statement::ShowAgents),
            Tok::Word(w) if w == "audit" => self.show_audit(),
            Tok::Word(w) if w == "reviews" => Ok(Statement::ShowReviews),
            Tok::Word(w) if w == "merge" => {
                if self.eat_word("checks") {
                    return Ok(Statement::ShowChecks);
                }
                self.expect_word("policies")?;
                Ok(Statement::ShowPolicies)
            }
            Tok::Word(w) if w == "history" => {
                let name = if self.eat_word("for") {
                    self.eat_word("world");
                    Some(self.world_name()?)
                } else {
                    None
                };
                let limit = if self.eat_word("limit") { Some(self.integer()?) } else { None };
                Ok(Statement::ShowHistory { name, limit })
            }
            _ => Err(self.syntax_error(&t)),
        }
    }

    fn alter_world(&mut self) -> Parsed<Statement> {
        let name = self.world_name()?;
        let t = self.next();
        let action = match &t.tok {
            Tok::Word(w) if w == "set" => {
                if self.peek().tok == Tok::Sym('(') {
                    AlterAction::Set(self.settings()?)
                } else if self.eat_word("ttl") {
                    if self.peek().tok == Tok::Sym('=') {
                        return Err(self.error_at(
                            self.peek(),
                            "42601",
                            "syntax error at or near \"=\": SET TTL takes no =, as in SET TTL '2 hours'",
                        ));
                    }
                    AlterAction::SetTtl(self.string()?)
                } else {
                    self.expect_word("pinned")?;
                    AlterAction::SetPinned
                }
            }
            Tok::Word(w) if w == "reset" => {
                if self.eat_word("ttl") {
                    AlterAction::ResetTtl
                } else {
                    self.expect_word("pinned")?;
                    AlterAction::ResetPinned
                }
            }
            _ => return Err(self.syntax_error(&t)),
        };
        Ok(Statement::AlterWorld { name, action })
    }

    /// ALTER SYSTEM SET history_retention = | TO '<interval>' (a bare number, as in TO 0, is taken too).
    fn alter_system(&mut self) -> Parsed<Statement> {
        self.expect_word("set")?;
        self.expect_word("history_retention")?;
        if !self.eat_sym('=') {
            self.expect_word("to")?;
        }
        let t = self.next();
        match &t.tok {
            Tok::Str(v) | Tok::Num(v) => Ok(Statement::SetHistoryRetention { value: v.clone() }),
            _ => Err(self.syntax_error(&t)),
        }
    }

    fn drop(&mut self, tag: &'static str) -> Parsed<Statement> {
        // IF EXISTS, unless `if` is the world's name.
        let if_exists = self.at_word("if") && is_word(self.peek_at(1), "exists");
        if if_exists {
            self.next();
            self.next();
        }
        let name = self.world_name()?;
        Ok(Statement::DropWorld { name, if_exists, cascade: self.eat_word("cascade"), tag })
    }

    /// DIFF [WORLD | BRANCH] [a [TO b]], then AS SQL and LIMIT n in either order.
    fn diff(&mut self) -> Parsed<Statement> {
        let keyword = self.eat_word("world") || self.eat_word("branch");
        let named = keyword
            || match &self.peek().tok {
                Tok::Word(w) => !["as", "limit", "readers", "to"].contains(&w.as_str()),
                Tok::Quoted(_) | Tok::Str(_) => true,
                _ => false,
            };
        let from = if named { Some(self.world_name()?) } else { None };
        let to = if from.is_some() && self.eat_word("to") { Some(self.world_name()?) } else { None };
        let (mut as_sql, mut limit) = (false, None);
        loop {
            let t = self.peek().clone();
            if self.eat_word("as") {
                if as_sql {
                    return Err(self.error_at(&t, "42601", "AS SQL is given twice"));
                }
                self.expect_word("sql")?;
                as_sql = true;
            } else if self.eat_word("limit") {
                if limit.is_some() {
                    return Err(self.error_at(&t, "42601", "LIMIT is given twice"));
                }
                limit = Some(self.integer()?);
            } else if self.at_word("readers") {
                return Err(self.error_at(&t, "0A000", "DIFF ... READERS is not supported yet"));
            } else {
                return Ok(Statement::Diff { from, to, as_sql, limit });
            }
        }
    }

    /// The world after MERGE WORLD / REBASE WORLD, if one is named: a bare word that starts a clause is
    /// the clause (MERGE WORLD ours), so such a world is named quoted (MERGE WORLD "ours"). With a dash
    /// after it, it is a name after all (`ours-1`), and gets the dash rule's message.
    fn merge_name(&mut self) -> Parsed<Option<WorldRef>> {
        let after = self.peek_at(1);
        match &self.peek().tok {
            Tok::Word(w) if Clause::starting(w, after).is_some() && after.tok != Tok::Sym('-') => Ok(None),
            Tok::Word(_) | Tok::Quoted(_) | Tok::Str(_) => Ok(Some(self.world_name()?)),
            _ => Ok(None),
        }
    }

    /// MERGE's clauses in any order, each at most once. REBASE refuses the others, naming the clause.
    fn merge_clauses(&mut self, rebase: bool) -> Parsed<MergeClauses> {
        let mut c = MergeClauses::default();
        let mut seen = Vec::new();
        while !self.at_end() {
            let t = self.next();
            let Tok::Word(word) = &t.tok else { return Err(self.syntax_error(&t)) };
            let Some(clause) = Clause::starting(word, self.peek()) else { return Err(self.syntax_error(&t)) };
            if rebase && !clause.in_rebase() {
                // as the spec names them: ONLY, CONFIRM, DRY RUN
                let shown = if clause == Clause::DryRun { "DRY RUN".into() } else { word.to_ascii_uppercase() };
                let message =
                    format!("REBASE WORLD doesn't take {shown}: only USING, BY COLUMNS, RESOLVE and AT VERSION");
                return Err(self.error_at(&t, "42601", message));
            }
            if seen.contains(&clause) {
                return Err(self.error_at(&t, "42601", format!("{} is given twice", clause.name())));
            }
            let other = if clause == Clause::Confirm { Clause::AtVersion } else { Clause::Confirm };
            if matches!(clause, Clause::Confirm | Clause::AtVersion) && seen.contains(&other) {
                let message = "AT VERSION can't be given with CONFIRM: CONFIRM merges the world as it is now, \
                               AT VERSION only as it was reviewed";
                return Err(self.error_at(&t, "42601", message));
            }
            seen.push(clause);
            match clause {
                Clause::Into => c.into = Some(self.world_name()?),
                Clause::OnlyTables => {
                    self.next();
                    c.only_tables = Some(self.list(Self::table_name)?);
                }
                Clause::OnlyKeys => {
                    self.expect_word("keys")?;
                    c.only_keys = Some(self.list(Self::string)?);
                }
                Clause::Using if word == "using" => c.using = Some(self.side()?),
                Clause::Using => c.using = Some(side_of(word)),
                Clause::ByColumns => {
                    self.expect_word("columns")?;
                    c.by_columns = true;
                }
                Clause::Resolve => c.resolve = self.list(Self::resolution)?,
                Clause::Confirm => c.confirm = true,
                Clause::ConfirmDeletes => {
                    self.next();
                    c.confirm_deletes = Some(self.integer()?);
                }
                Clause::Target => c.target = Some(self.integer()?),
                Clause::AtVersion => {
                    self.expect_word("version")?;
                    c.at_version = Some(self.integer()?);
                }
                Clause::DryRun => {
                    self.expect_word("run")?;
                    c.dry_run = true;
                }
            }
        }
        Ok(c)
    }

    /// ( item, ... ): at least one.
    fn list<T>(&mut self, item: fn(&mut Self) -> Parsed<T>) -> Parsed<Vec<T>> {
        self.expect_sym('(')?;
        let mut items = vec![item(self)?];
        while self.eat_sym(',') {
            items.push(item(self)?);
        }
        self.expect_sym(')')?;
        Ok(items)
    }

    fn side(&mut self) -> Parsed<Side> {
        let t = self.next();
        match &t.tok {
            Tok::Word(w) if w == "ours" || w == "theirs" => Ok(side_of(w)),
            _ => Err(self.syntax_error(&t)),
        }
    }

    /// 't/1' = OURS | THEIRS | DELETE | '<row as JSON>'
    fn resolution(&mut self) -> Parsed<(String, Resolution)> {
        let key = self.string()?;
        self.expect_sym('=')?;
        let t = self.next();
        let resolution = match &t.tok {
            Tok::Word(w) if w == "ours" => Resolution::Ours,
            Tok::Word(w) if w == "theirs" => Resolution::Theirs,
            Tok::Word(w) if w == "delete" => Resolution::Delete,
            Tok::Str(row) => Resolution::Row(row.clone()),
            _ => return Err(self.syntax_error(&t)),
        };
        Ok((key, resolution))
    }

    /// A table as SQL text the database can cast to regclass: bare parts folded, quoted parts kept
    /// quoted (`"Orders"`, `app.orders`); a 'string' is taken as that text.
    fn table_name(&mut self) -> Parsed<String> {
        if let Tok::Str(s) = &self.peek().tok {
            let s = s.clone();
            self.next();
            return Ok(s);
        }
        let mut name = String::new();
        loop {
            let t = self.next();
            match &t.tok {
                Tok::Word(w) => name.push_str(w),
                Tok::Quoted(q) => {
                    name.push('"');
                    name.push_str(&q.replace('"', "\"\""));
                    name.push('"');
                }
                _ => return Err(self.syntax_error(&t)),
            }
            if !self.eat_sym('.') {
                return Ok(name);
            }
            name.push('.');
        }
    }

    /// RESTORE's `when`, everything up to the end: a lone string is a moment; anything else is kept as
    /// its source text for the database to evaluate, so it must be one expression (parentheses balanced,
    /// no `;`).
    pub(super) fn moment(&mut self) -> Parsed<RestoreTarget> {
        self.moment_until(&[])
    }

    /// A moment as `moment` reads it, ending before any of `stop` (words, outside parentheses).
    pub(super) fn moment_until(&mut self, stop: &[&str]) -> Parsed<RestoreTarget> {
        let first = self.peek().clone();
        let mut depth = 0usize;
        let mut last = None;
        while !self.at_end() {
            if depth == 0 && matches!(&self.peek().tok, Tok::Word(w) if stop.contains(&w.as_str())) {
                break;
            }
            let t = self.next();
            match t.tok {
                Tok::Sym('(') => depth += 1,
                Tok::Sym(')') if depth == 0 => return Err(self.syntax_error(&t)),
                Tok::Sym(')') => depth -= 1,
                Tok::Sym(';') => return Err(self.syntax_error(&t)),
                _ => {}
            }
            last = Some(t);
        }
        let Some(last) = last else { return Err(self.syntax_error(&first)) };
        if depth > 0 {
            return Err(self.syntax_error(self.peek()));
        }
        match &first.tok {
            Tok::Str(s) if first.start == last.start => Ok(RestoreTarget::When(s.clone())),
            // a bare `now`, as the spec's table of moments writes it
            Tok::Word(w) if first.start == last.start && w == "now" => Ok(RestoreTarget::When("now".into())),
            _ => Ok(RestoreTarget::Expr(self.text[first.start..last.end].to_string())),
        }
    }
}

fn is_word(t: &Token, word: &str) -> bool {
    matches!(&t.tok, Tok::Word(w) if w == word)
}

fn switch_tag(branch: bool) -> &'static str {
    if branch {
        "USE BRANCH"
    } else {
        "SWITCH WORLD"
    }
}

fn side_of(word: &str) -> Side {
    if word == "ours" {
        Side::Ours
    } else {
        Side::Theirs
    }
}

mod agents;
mod policies;
mod checks;

#[cfg(test)]
mod tests {
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
        Statement::Diff { from: from.map(Into::into), to: to.map(Into::into), as_sql, limit }
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
        assert_eq!(fails("diff world cleanup readers;"), ("0A000", "DIFF ... READERS is not supported yet".into(), 20));
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
        syntax_at("show storage", "storage", 6);
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
        assert_eq!(fails("diff readers"), ("0A000", "DIFF ... READERS is not supported yet".into(), 6));
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

}
