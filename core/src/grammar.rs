//! The grammar of the spec's statements (../shared/spec/worlds-sql.txt), as `worlds.sql(text)` accepts
//! them: case-insensitive keywords, bare / "quoted" / 'string' names, dollar quotes, an optional trailing
//! semicolon. The backend maps each `Statement` to a SQL function call. Files: `lex.rs` (tokens); this one
//! (statements on worlds, merges, time); `agents.rs`, `policies.rs`, `checks.rs`; `tests.rs`.

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
    /// DIFF [WORLD|BRANCH] [a [TO b]] [AS SQL] [LIMIT n] | READERS
    Diff { from: Option<WorldRef>, to: Option<WorldRef>, as_sql: bool, limit: Option<i64>, readers: bool },
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
    /// CHECK READS [OF WORLD name]: what the world read that changed since its fork (the session's world
    /// without OF)
    CheckReads { world: Option<WorldRef> },
    /// CREATE [OR REPLACE] MERGE CHECK name [ON TABLES (t, ...)] [WITH (timeout = ...)] AS <query>
    CreateCheck { name: String, replace: bool, tables: Option<Vec<String>>, settings: Vec<(String, MetaValue)>, query: String },
    /// DROP MERGE CHECK name
    DropCheck { name: String },
    /// SHOW MERGE CHECKS
    ShowChecks,
    /// UNDO AGENT name SINCE when [SKIP CHANGED] [WHERE run_id = 'id']
    UndoAgent { name: String, since: RestoreTarget, skip_changed: bool, run_id: Option<String> },
    /// SIMULATE n WORLDS [FROM base] AS prefix RUN 'script' SCORE 'select' [ASC|DESC] [KEEP k|KEEP ALL]
    /// [SEED s] [THREADS t]
    Simulate(Box<Simulation>),
    /// REPLAY WORLD world [AS name]
    Replay { world: WorldRef, keep_as: Option<String> },
    /// REGISTER READER name ON table [(column, ...)]: no columns, every column
    RegisterReader { name: String, table: String, columns: Vec<String> },
    /// UNREGISTER READER name [ON table]
    UnregisterReader { name: String, table: Option<String> },
    /// SHOW READERS
    ShowReaders,
    /// SHOW CHECKPOINTS [FOR [WORLD] name]
    ShowCheckpoints { world: Option<WorldRef> },
    /// SHOW METRICS
    ShowMetrics,
    /// SHOW STORAGE [FOR [WORLD] name]: what each world (or one; main too) holds on its own
    ShowStorage { world: Option<WorldRef> },
    /// SHOW DISK: live, history, reclaimable, log, total, limit
    ShowDisk,
    /// MARK READER name CRITICAL
    MarkReader { name: String },
    /// UNMARK READER name
    UnmarkReader { name: String },
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
            Statement::Simulate(_) => Some("SIMULATE"),
            Statement::Replay { .. } => Some("REPLAY WORLD"),
            Statement::RegisterReader { .. } => Some("REGISTER READER"),
            Statement::UnregisterReader { .. } => Some("UNREGISTER READER"),
            Statement::MarkReader { .. } => Some("MARK READER"),
            Statement::UnmarkReader { .. } => Some("UNMARK READER"),
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

mod lex;
pub(crate) use lex::{lex, Tok, Token};
use lex::{error_at_byte};

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
            "register" => self.register_reader(),
            "unregister" => self.unregister_reader(),
            "mark" => self.mark_reader(),
            "unmark" => self.unmark_reader(),
            "simulate" => self.simulate(),
            "replay" => self.replay(),
            "check" => {
                self.expect_word("reads")?;
                let world = if self.eat_word("of") {
                    self.world_or_branch()?;
                    Some(self.world_name()?)
                } else {
                    None
                };
                Ok(Statement::CheckReads { world })
            }
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
            Tok::Word(w) if w == "readers" => Ok(Statement::ShowReaders),
            Tok::Word(w) if w == "metrics" => Ok(Statement::ShowMetrics),
            Tok::Word(w) if w == "checkpoints" => {
                let world = if self.eat_word("for") {
                    if !self.eat_word("world") {
                        self.eat_word("branch");
                    }
                    Some(self.world_name()?)
                } else {
                    None
                };
                Ok(Statement::ShowCheckpoints { world })
            }
            Tok::Word(w) if w == "storage" => {
                let world = if self.eat_word("for") {
                    self.eat_word("world");
                    Some(self.world_name()?)
                } else {
                    None
                };
                Ok(Statement::ShowStorage { world })
            }
            Tok::Word(w) if w == "disk" => Ok(Statement::ShowDisk),
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
        let (mut as_sql, mut limit, mut readers) = (false, None, false);
        loop {
            let t = self.peek().clone();
            if self.eat_word("as") {
                if as_sql || readers {
                    return Err(self.error_at(&t, "42601", if readers { "DIFF ... READERS has no AS SQL" } else { "AS SQL is given twice" }));
                }
                self.expect_word("sql")?;
                as_sql = true;
            } else if self.eat_word("limit") {
                if limit.is_some() || readers {
                    return Err(self.error_at(&t, "42601", if readers { "DIFF ... READERS has no LIMIT" } else { "LIMIT is given twice" }));
                }
                limit = Some(self.integer()?);
            } else if self.eat_word("readers") {
                if readers || as_sql || limit.is_some() {
                    return Err(self.error_at(&t, "42601", "READERS goes alone after DIFF's worlds (no AS SQL, no LIMIT, once)"));
                }
                readers = true;
            } else {
                return Ok(Statement::Diff { from, to, as_sql, limit, readers });
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
mod simulate;
mod readers;
pub use readers::READER_NAME_MAX;
pub use simulate::{better, random_seed, rank, Simulation, MAX_TEXT as SIMULATE_MAX_TEXT, MAX_WORLDS as SIMULATE_MAX_WORLDS};
mod checks;

#[cfg(test)]
mod tests;
