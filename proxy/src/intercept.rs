//! Which statements the proxy answers itself (through a typed query upstream) and how their responses
//! are rewritten. Pure: the session feeds it each client message before sending it upstream, and each
//! server message before sending it to the client, in order.
//!
//! Responses follow requests in order, so each request whose response matters is queued: a simple Query
//! (until its ReadyForQuery), Describe (until RowDescription / NoData), Execute (until CommandComplete,
//! EmptyQueryResponse or PortalSuspended), Sync (until ReadyForQuery), FunctionCall. After an
//! ErrorResponse in the extended protocol the server skips everything until Sync; so does the queue.
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use worlds_core::recognise::{self, Recognised, Shape};

use crate::wire;

/// How a spec statement's response is rewritten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// the typed query returns one row of one column, the tag: its RowDescription becomes NoData (or
    /// nothing), its row is the CommandComplete's tag
    Tag,
    /// the rows pass; `SELECT n` becomes `tag` (`tag n` when counted)
    Rows { tag: &'static str, counted: bool },
}

#[derive(Debug, Clone, PartialEq)]
enum Pending {
    /// a simple Query: a rule per statement (none: all SQL), and which statement's result comes next;
    /// per statement, where a spec statement starts in the client's text (characters before it)
    Query { rules: Vec<Option<Rule>>, at: usize, starts: Vec<Option<usize>> },
    Describe(Option<Rule>),
    /// a portal's rule, and where its spec statement starts in the client's text
    Execute(Option<Rule>, Option<usize>),
    Sync,
}

/// What to send on for one message.
#[derive(Debug, PartialEq)]
pub enum Out {
    /// the message as it came
    Same,
    /// nothing
    Drop,
    /// this instead
    Replace(Bytes),
}

#[derive(Default)]
pub struct Tracker {
    pending: VecDeque<Pending>,
    /// prepared statements / portals that are spec statements (others aren't kept)
    statements: HashMap<Vec<u8>, Rule>,
    portals: HashMap<Vec<u8>, Rule>,
    /// prepared statements / portals that are spec statements (parsed or not): where each starts in the
    /// Parse's text, for an error's position
    spec_statements: HashMap<Vec<u8>, usize>,
    spec_portals: HashMap<Vec<u8>, usize>,
    /// the tag a Tag statement's row gave
    tag: Option<String>,
}

/// A spec statement's rule, from its parse (an unparsable one is sent as worlds.sql(text), which fails).
fn rule_of(parsed: &Result<worlds_core::grammar::Statement, worlds_core::grammar::ParseError>) -> Option<Rule> {
    match parsed.as_ref().map(recognise::shape) {
        Ok(Shape::Tag) => Some(Rule::Tag),
        Ok(Shape::Rows { tag, counted, .. }) => Some(Rule::Rows { tag, counted }),
        Err(_) => None,
    }
}

/// Characters of `text` before `piece` (a slice of it) and its leading white space: where the statement
/// starts, as Postgres counts an error's position.
fn start_of(text: &str, piece: &str) -> usize {
    let at = (piece.as_ptr() as usize).saturating_sub(text.as_ptr() as usize).min(text.len());
    let lead = piece.len() - piece.trim_start().len();
    text.get(..at + lead).map_or(0, |t| t.chars().count())
}

/// A query's text as the server gets it, a rule per statement and where each spec statement starts;
/// None when it goes as written.
pub fn plan_query(text: &str) -> Option<(String, Vec<Option<Rule>>, Vec<Option<usize>>)> {
    // the common case: one statement of SQL, no AS OF (checked without splitting)
    let lower_has_as_of = || {
        let l = text.to_ascii_lowercase();
        l.contains(" of") && (l.contains("as") || l.contains("system_time"))
    };
    let words = recognise::leading_words(text, 4);
    // (one statement: no `;` but the one that may end it)
    let one = !text.trim_end().trim_end_matches(';').contains(';');
    if !recognise::is_spec(&words) && one && !lower_has_as_of() {
        return None;
    }
    let pieces = recognise::split_statements(text);
    let mut changed = false;
    let mut rules = Vec::with_capacity(pieces.len());
    let mut starts = Vec::with_capacity(pieces.len());
    let mut out: Vec<String> = Vec::with_capacity(pieces.len());
    for piece in &pieces {
        match recognise::recognise(piece) {
            Recognised::Sql => {
                rules.push(None);
                starts.push(None);
                out.push(piece.to_string());
            }
            Recognised::AsOf(q) => {
                changed = true;
                rules.push(None);
                starts.push(None);
                out.push(q);
            }
            Recognised::Spec(parsed) => {
                changed = true;
                rules.push(rule_of(&parsed));
                starts.push(Some(start_of(text, piece)));
                out.push(recognise::typed_query(piece.trim(), &parsed));
            }
        }
    }
    // (a newline first, so a piece ending in a -- comment doesn't swallow the ;)
    changed.then(|| (out.join("\n;"), rules, starts))
}

impl Tracker {
    /// A client message (type, body) about to go upstream.
    pub fn client(&mut self, tag: u8, body: &[u8]) -> Out {
        match tag {
            b'Q' => {
                let text = wire::cstr(body).map(|(t, _)| t).unwrap_or(body);
                let planned = std::str::from_utf8(text).ok().and_then(plan_query);
                match planned {
                    None => {
                        self.pending.push_back(Pending::Query { rules: Vec::new(), at: 0, starts: Vec::new() });
                        Out::Same
                    }
                    Some((query, rules, starts)) => {
                        self.pending.push_back(Pending::Query { rules, at: 0, starts });
                        Out::Replace(wire::query_message(&query))
                    }
                }
            }
            b'P' => {
                let Some((name, query, rest)) = wire::parse_body(body) else { return Out::Same };
                let Ok(text) = std::str::from_utf8(query) else { return Out::Same };
                let recognised = if recognise::split_statements(text).len() > 1 { Recognised::Sql } else { recognise::recognise(text) };
                match recognised {
                    Recognised::Sql => {
                        if !self.statements.is_empty() || !self.spec_statements.is_empty() {
                            self.statements.remove(name);
                            self.spec_statements.remove(name);
                        }
                        Out::Same
                    }
                    Recognised::AsOf(q) => {
                        self.statements.remove(name);
                        self.spec_statements.remove(name);
                        Out::Replace(wire::parse_message(name, &q, rest))
                    }
                    Recognised::Spec(parsed) => {
                        self.spec_statements.insert(name.to_vec(), start_of(text, text));
                        match rule_of(&parsed) {
                            Some(rule) => self.statements.insert(name.to_vec(), rule),
                            None => self.statements.remove(name),
                        };
                        Out::Replace(wire::parse_message(name, &recognise::typed_query(text.trim(), &parsed), rest))
                    }
                }
            }
            b'B' => {
                if !self.statements.is_empty() || !self.portals.is_empty() || !self.spec_statements.is_empty() || !self.spec_portals.is_empty() {
                    if let Some((portal, rest)) = wire::cstr(body) {
                        let statement = wire::cstr(rest).map(|(s, _)| s).unwrap_or_default();
                        match self.statements.get(statement) {
                            Some(&rule) => self.portals.insert(portal.to_vec(), rule),
                            None => self.portals.remove(portal),
                        };
                        match self.spec_statements.get(statement) {
                            Some(&start) => self.spec_portals.insert(portal.to_vec(), start),
                            None => self.spec_portals.remove(portal),
                        };
                    }
                }
                Out::Same
            }
            b'D' => {
                let rule = match body.split_first() {
                    Some((b'S', name)) => self.statements.get(wire::cstr(name).map(|(n, _)| n).unwrap_or_default()).copied(),
                    Some((b'P', name)) => self.portals.get(wire::cstr(name).map(|(n, _)| n).unwrap_or_default()).copied(),
                    _ => None,
                };
                self.pending.push_back(Pending::Describe(rule));
                Out::Same
            }
            b'E' => {
                let portal = wire::cstr(body).map(|(n, _)| n).unwrap_or_default();
                let rule = if self.portals.is_empty() { None } else { self.portals.get(portal).copied() };
                let start = if self.spec_portals.is_empty() { None } else { self.spec_portals.get(portal).copied() };
                self.pending.push_back(Pending::Execute(rule, start));
                Out::Same
            }
            b'C' => {
                match body.split_first() {
                    Some((b'S', name)) => {
                        let name = wire::cstr(name).map(|(n, _)| n).unwrap_or_default();
                        self.spec_statements.remove(name);
                        self.statements.remove(name)
                    }
                    Some((b'P', name)) => {
                        let name = wire::cstr(name).map(|(n, _)| n).unwrap_or_default();
                        self.spec_portals.remove(name);
                        self.portals.remove(name)
                    }
                    _ => None,
                };
                Out::Same
            }
            b'S' => {
                self.pending.push_back(Pending::Sync);
                Out::Same
            }
            b'F' => {
                self.pending.push_back(Pending::Query { rules: Vec::new(), at: 0, starts: Vec::new() });
                Out::Same
            }
            _ => Out::Same,
        }
    }

    /// Must the body of a server message of this type be read whole (to rewrite it)? Others stream.
    pub fn wants_body(&self, tag: u8) -> bool {
        match tag {
            b'C' => true,
            b'D' => self.current_rule() == Some(Rule::Tag),
            b'E' => self.current_start().is_some(),
            _ => false,
        }
    }

    /// The rule of the result the server sends next.
    fn current_rule(&self) -> Option<Rule> {
        match self.pending.front()? {
            Pending::Query { rules, at, .. } => rules.get(*at).copied().flatten(),
            Pending::Describe(r) | Pending::Execute(r, _) => *r,
            Pending::Sync => None,
        }
    }

    /// Where the spec statement whose result comes next starts in the client's text (None: SQL).
    fn current_start(&self) -> Option<usize> {
        match self.pending.front()? {
            Pending::Query { starts, at, .. } => starts.get(*at).copied().flatten(),
            Pending::Execute(_, start) => *start,
            Pending::Describe(_) | Pending::Sync => None,
        }
    }

    /// A server message (type, body: empty when `wants_body` said no) about to go to the client.
    pub fn server(&mut self, tag: u8, body: &[u8]) -> Out {
        if self.pending.is_empty() {
            return Out::Same;
        }
        match tag {
            b'T' | b'n' => match self.pending.front() {
                Some(Pending::Describe(rule)) => {
                    let rule = *rule;
                    self.pending.pop_front();
                    if tag == b'T' && rule == Some(Rule::Tag) {
                        Out::Replace(wire::no_data())
                    } else {
                        Out::Same
                    }
                }
                Some(Pending::Query { .. }) if tag == b'T' && self.current_rule() == Some(Rule::Tag) => Out::Drop,
                _ => Out::Same,
            },
            b'D' => {
                if self.current_rule() == Some(Rule::Tag) {
                    if self.tag.is_none() {
                        self.tag = wire::first_column(body);
                    }
                    Out::Drop
                } else {
                    Out::Same
                }
            }
            b'C' => {
                let rule = self.current_rule();
                match self.pending.front_mut() {
                    Some(Pending::Query { at, .. }) => *at += 1,
                    Some(Pending::Execute(..)) => {
                        self.pending.pop_front();
                    }
                    _ => {}
                }
                match rule {
                    None => Out::Same,
                    Some(Rule::Tag) => match self.tag.take() {
                        Some(t) if !t.is_empty() => Out::Replace(wire::command_complete(&t)),
                        _ => Out::Same,
                    },
                    Some(Rule::Rows { tag, counted }) => {
                        let old = wire::tag_text(body);
                        let new = if counted { format!("{tag} {}", old.rsplit(' ').next().unwrap_or("0")) } else { tag.to_string() };
                        Out::Replace(wire::command_complete(&new))
                    }
                }
            }
            b'I' | b's' => {
                if let Some(Pending::Execute(..)) = self.pending.front() {
                    self.pending.pop_front();
                }
                Out::Same
            }
            b'E' => {
                // a spec statement's syntax error: the grammar's position (worlds.sql gives it in the
                // DETAIL) as the error's position in the client's text, as Postgres reports one
                let moved = self.current_start().and_then(|start| wire::with_statement_position(body, start));
                if matches!(self.pending.front(), Some(Pending::Describe(_) | Pending::Execute(..))) {
                    // the server skips the rest until Sync
                    while matches!(self.pending.front(), Some(p) if *p != Pending::Sync) {
                        self.pending.pop_front();
                    }
                }
                self.tag = None;
                moved.map_or(Out::Same, Out::Replace)
            }
            b'Z' => {
                while let Some(p) = self.pending.pop_front() {
                    if matches!(p, Pending::Sync | Pending::Query { .. }) {
                        break;
                    }
                }
                self.tag = None;
                Out::Same
            }
            _ => Out::Same,
        }
    }
}

#[cfg(test)]
mod tests;
