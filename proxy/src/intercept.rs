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
    /// a simple Query: a rule per statement (none: all SQL), and which statement's result comes next
    Query { rules: Vec<Option<Rule>>, at: usize },
    Describe(Option<Rule>),
    Execute(Option<Rule>),
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

/// A query's text as the server gets it, and a rule per statement; None when it goes as written.
pub fn plan_query(text: &str) -> Option<(String, Vec<Option<Rule>>)> {
    // the common case: one statement of SQL, no AS OF (checked without splitting)
    let lower_has_as_of = || {
        let l = text.to_ascii_lowercase();
        l.contains(" of") && (l.contains("as") || l.contains("system_time"))
    };
    let words = recognise::leading_words(text, 4);
    if !recognise::is_spec(&words) && !text.contains(';') && !lower_has_as_of() {
        return None;
    }
    let pieces = recognise::split_statements(text);
    let mut changed = false;
    let mut rules = Vec::with_capacity(pieces.len());
    let mut out: Vec<String> = Vec::with_capacity(pieces.len());
    for piece in &pieces {
        match recognise::recognise(piece) {
            Recognised::Sql => {
                rules.push(None);
                out.push(piece.to_string());
            }
            Recognised::AsOf(q) => {
                changed = true;
                rules.push(None);
                out.push(q);
            }
            Recognised::Spec(parsed) => {
                changed = true;
                rules.push(rule_of(&parsed));
                out.push(recognise::typed_query(piece.trim(), &parsed));
            }
        }
    }
    // (a newline first, so a piece ending in a -- comment doesn't swallow the ;)
    changed.then(|| (out.join("\n;"), rules))
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
                        self.pending.push_back(Pending::Query { rules: Vec::new(), at: 0 });
                        Out::Same
                    }
                    Some((query, rules)) => {
                        self.pending.push_back(Pending::Query { rules, at: 0 });
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
                        if !self.statements.is_empty() {
                            self.statements.remove(name);
                        }
                        Out::Same
                    }
                    Recognised::AsOf(q) => {
                        self.statements.remove(name);
                        Out::Replace(wire::parse_message(name, &q, rest))
                    }
                    Recognised::Spec(parsed) => {
                        match rule_of(&parsed) {
                            Some(rule) => self.statements.insert(name.to_vec(), rule),
                            None => self.statements.remove(name),
                        };
                        Out::Replace(wire::parse_message(name, &recognise::typed_query(text.trim(), &parsed), rest))
                    }
                }
            }
            b'B' => {
                if !self.statements.is_empty() || !self.portals.is_empty() {
                    if let Some((portal, rest)) = wire::cstr(body) {
                        let statement = wire::cstr(rest).map(|(s, _)| s).unwrap_or_default();
                        match self.statements.get(statement) {
                            Some(&rule) => self.portals.insert(portal.to_vec(), rule),
                            None => self.portals.remove(portal),
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
                self.pending.push_back(Pending::Execute(rule));
                Out::Same
            }
            b'C' => {
                match body.split_first() {
                    Some((b'S', name)) => self.statements.remove(wire::cstr(name).map(|(n, _)| n).unwrap_or_default()),
                    Some((b'P', name)) => self.portals.remove(wire::cstr(name).map(|(n, _)| n).unwrap_or_default()),
                    _ => None,
                };
                Out::Same
            }
            b'S' => {
                self.pending.push_back(Pending::Sync);
                Out::Same
            }
            b'F' => {
                self.pending.push_back(Pending::Query { rules: Vec::new(), at: 0 });
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
            _ => false,
        }
    }

    /// The rule of the result the server sends next.
    fn current_rule(&self) -> Option<Rule> {
        match self.pending.front()? {
            Pending::Query { rules, at } => rules.get(*at).copied().flatten(),
            Pending::Describe(r) | Pending::Execute(r) => *r,
            Pending::Sync => None,
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
                    Some(Pending::Execute(_)) => {
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
                if let Some(Pending::Execute(_)) = self.pending.front() {
                    self.pending.pop_front();
                }
                Out::Same
            }
            b'E' => {
                if matches!(self.pending.front(), Some(Pending::Describe(_) | Pending::Execute(_))) {
                    // the server skips the rest until Sync
                    while matches!(self.pending.front(), Some(p) if *p != Pending::Sync) {
                        self.pending.pop_front();
                    }
                }
                self.tag = None;
                Out::Same
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
