//! Agents' rights where Postgres runs their statements. The acting agent is the session's user (a
//! SECURITY DEFINER function, SET ROLE or a trigger doesn't change it), its row read once and kept per
//! backend until worlds.agent is changed (ALTER/CREATE/DROP AGENT send a relcache invalidation of it).
//!
//! - A write of a tracked table in main (INSERT, UPDATE, DELETE, SQL MERGE, COPY FROM, TRUNCATE), at
//!   any depth (a function's statements, a trigger's), needs `write_main` (42501). pg_worlds' own
//!   writes (a merge applying, a restore) are not the agent's statements: they were checked as the
//!   statement that runs them (`worlds._require`).
//! - A write inside a world needs `write`, or `write_own` in its own world.
//! - Quotas refuse as rights do (42501: the spec's code for an agent past its max_worlds).
//! - `max_changes`: after each write statement in a world (COPY FROM and TRUNCATE too), the rows the
//!   world changed since its fork (as DIFF counts them) may not pass it; the statement fails and writes
//!   nothing.
//! - `writes_per_minute`: write statements of the agent in the last minute (its audit rows).
use crate::api::{raise, raise_with};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use crate::backend_local::BackendLocal;

/// The session user's agent, as the gates need it.
#[derive(Debug)]
pub struct Agent {
    pub name: String,
    can: Vec<String>,
    disabled: bool,
    admin: bool,
    max_changes: i64,
    writes_per_minute: i32,
    /// the merge policy it keeps to: it changes main only by merging
    pub policy: Option<String>,
    /// worlds this agent may write (checked once each)
    writable: RefCell<Vec<i32>>,
}

impl Agent {
    fn may(&self, right: &str) -> bool {
        !self.disabled && (self.admin || self.can.iter().any(|c| c == right))
    }
}

static AGENT_REL: BackendLocal<std::cell::Cell<pg_sys::Oid>> = BackendLocal::new(std::cell::Cell::new(pg_sys::Oid::INVALID));
/// (session user, its agent or None) while worlds.agent is unchanged; the relation's oid, once known.
static AGENT: BackendLocal<RefCell<Option<(pg_sys::Oid, Option<Rc<Agent>>)>>> = BackendLocal::new(RefCell::new(None));

/// From the relcache callback: worlds.agent changed (or everything did).
pub fn on_relcache_invalidation(relid: pg_sys::Oid) {
    let rel = AGENT_REL.with(|r| r.get());
    if rel != pg_sys::Oid::INVALID && (relid == pg_sys::Oid::INVALID || relid == rel) {
        AGENT.with(|a| {
            if let Ok(mut a) = a.try_borrow_mut() {
                *a = None;
            }
        });
    }
}

/// The agent the session's user is, if any (None for a person, or where pg_worlds isn't installed).
pub fn session_agent() -> Option<Rc<Agent>> {
    let user = unsafe { pg_sys::GetSessionUserId() };
    if let Some(cached) = AGENT.with(|a| a.borrow().as_ref().filter(|(u, _)| *u == user).map(|(_, g)| g.clone())) {
        return cached;
    }
    let found = if crate::storage::catalog_scan::serializable() { agent_direct(user) } else { crate::storage::as_internal(|| {
        let rel = crate::spi_calls::get_one::<pg_sys::Oid>("SELECT to_regclass('worlds.agent')::oid").ok().flatten();
        let Some(rel) = rel else { return None };
        AGENT_REL.with(|r| r.set(rel));
        crate::spi_calls::rows(
            "SELECT a.name, a.can, a.disabled, a.max_changes, a.writes_per_minute, worlds._is_admin(), a.policy
             FROM worlds.agent a WHERE a.role = $1",
            None,
            &[user.into()],
            |mut t| {
                t.next().map(|r| Agent {
                    name: r.get::<String>(1).ok().flatten().unwrap_or_default(),
                    can: r.get::<Vec<String>>(2).ok().flatten().unwrap_or_default(),
                    disabled: r.get::<bool>(3).ok().flatten().unwrap_or(false),
                    max_changes: r.get::<i64>(4).ok().flatten().unwrap_or(0),
                    writes_per_minute: r.get::<i32>(5).ok().flatten().unwrap_or(0),
                    admin: r.get::<bool>(6).ok().flatten().unwrap_or(false),
                    policy: r.get::<String>(7).ok().flatten(),
                    writable: RefCell::new(Vec::new()),
                })
            },
        )
        .ok()
        .flatten()
        .map(Rc::new)
    }) };
    AGENT.with(|a| *a.borrow_mut() = Some((user, found.clone())));
    found
}

/// `session_agent`'s lookup in a SERIALIZABLE transaction, without a predicate lock on worlds.agent
/// (storage/catalog_scan.rs); `admin` as `worlds._is_admin()` says it.
fn agent_direct(user: pg_sys::Oid) -> Option<Rc<Agent>> {
    let relid = crate::storage::catalog_scan::catalog_table(c"agent");
    if relid == pg_sys::Oid::INVALID {
        return None;
    }
    AGENT_REL.with(|r| r.set(relid));
    let mut found = None;
    unsafe {
        let mut keys = [crate::storage::catalog_scan::key_eq(pg_sys::get_attnum(relid, c"role".as_ptr()), pg_sys::F_OIDEQ, pg_sys::Datum::from(user))];
        crate::storage::catalog_scan::visible_rows(relid, pg_sys::Oid::INVALID, &mut keys, pg_sys::GetTransactionSnapshot(), |r| {
            let can = r.get("can").and_then(|d| Vec::<String>::from_datum(d, false)).unwrap_or_default();
            let disabled = r.bool("disabled").unwrap_or(false);
            let admin_role = pg_sys::get_role_oid(c"worlds_admin".as_ptr(), true);
            let admin = pg_sys::superuser_arg(user)
                || (admin_role != pg_sys::Oid::INVALID && pg_sys::is_member_of_role(user, admin_role))
                || (can.iter().any(|c| c == "admin") && !disabled);
            found = Some(Agent {
                name: r.text("name").unwrap_or_default(),
                can,
                disabled,
                max_changes: r.int8("max_changes").unwrap_or(0),
                writes_per_minute: r.int4("writes_per_minute").unwrap_or(0),
                admin,
                policy: r.text("policy"),
                writable: RefCell::new(Vec::new()),
            });
            false
        });
    }
    found.map(Rc::new)
}

/// `worlds._require(action, world)` for the session's user: 42501 when it may not (as pg_worlds, which
/// may call it; the session user is the one checked).
pub fn require(action: &str, world_num: Option<i32>) {
    crate::storage::as_internal(|| {
        let r = match world_num {
            Some(n) => crate::spi_calls::run_with_args(
                "SELECT worlds._require($1, w) FROM worlds.world w WHERE w.num = $2",
                &[action.into(), n.into()],
            ),
            None => crate::spi_calls::run_with_args("SELECT worlds._require($1)", &[action.into()]),
        };
        r.unwrap_or_else(|e| raise("XX000", format!("{e}")));
    })
}

/// An audit row for the acting agent (none for a person), in the statement's own transaction.
pub fn audit(action: &str, world: &str, rows: Option<i64>) {
    audit_merge(action, world, rows, None, None, None)
}

/// `audit` with a merge's deleted rows and target (the per-hour rules count them).
pub fn audit_merge(action: &str, world: &str, rows: Option<i64>, deletes: Option<i64>, target: Option<&str>, effects: Option<i64>) {
    if session_agent().is_none() {
        return;
    }
    crate::storage::as_internal(|| {
        crate::spi_calls::run_with_args(
            "SELECT worlds._audit($1, $2, $3, $4, $5, $6)",
            &[action.into(), world.into(), rows.into(), deletes.into(), target.into(), effects.into()],
        )
        .unwrap_or_else(|e| raise("XX000", format!("{e}")));
    })
}

fn refuse_main_write(agent: &Agent, table: pg_sys::Oid) -> ! {
    raise_with(
        "42501",
        format!("permission denied: agent \"{}\" may not write main (table {})", agent.name, table_name(table)),
        Some(format!("Agent \"{}\" has the rights {}.", agent.name, agent.can.join(","))),
        Some("It needs write_main; or fork a world, write there and merge it.".into()),
    )
}

fn table_name(relid: pg_sys::Oid) -> String {
    crate::spi_calls::get_one_with_args::<String>("SELECT $1::regclass::text", &[relid.into()]).ok().flatten().unwrap_or_default()
}

/// A statement about to write these relations of main directly: an agent needs write_main.
pub fn check_main_write(relations: &[pg_sys::Oid], statement: *const pg_sys::QueryDesc) {
    let tracked = crate::storage::tracked_tables();
    let Some(&table) = relations.iter().find(|r| tracked.contains_key(r)) else { return };
    let Some(agent) = session_agent() else { return };
    if agent.disabled || !agent.may("write_main") {
        refuse_main_write(&agent, table);
    }
    if let Some(policy) = &agent.policy {
        raise_with(
            "42501",
            format!("permission denied: agent \"{}\" keeps to merge policy {policy}: it changes main only by merging (table {})", agent.name, table_name(table)),
            None,
            Some("Fork a world, write there and merge it: the policy's rules judge the merge.".into()),
        );
    }
    note_write(&agent, "main", statement);
}

/// A statement about to write inside the session's world: an agent needs write, or write_own there.
pub fn check_world_write(world_num: i32, world_name: &str, statement: *const pg_sys::QueryDesc) {
    let Some(agent) = session_agent() else { return };
    if !agent.writable.borrow().contains(&world_num) {
        require("write", Some(world_num));
        agent.writable.borrow_mut().push(world_num);
    }
    note_write(&agent, world_name, statement);
    if agent.max_changes > 0 {
        // (counted when the outermost write statement ends: the rows a function's statements write too)
        PENDING_CHANGES_CHECK.with(|p| {
            if p.get().is_none() {
                p.set(Some((statement as usize, world_num)))
            }
        });
    }
}

/// A transaction's abort: no statement of it ends.
pub fn on_abort() {
    PENDING_CHANGES_CHECK.with(|p| p.set(None));
    PENDING_AUDIT.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            *p = None;
        }
    });
}

/// A write of a world whose agent has max_changes (the statement, the world): counted when it ends.
static PENDING_CHANGES_CHECK: BackendLocal<std::cell::Cell<Option<(usize, i32)>>> = BackendLocal::new(std::cell::Cell::new(None));
/// The world of an agent's write statement whose audit row is written when it ends.
static PENDING_AUDIT: BackendLocal<RefCell<Option<(usize, String)>>> = BackendLocal::new(RefCell::new(None));
/// The top-level statement (its start time) and world of the agent's last audited write.
static LAST_WRITE: BackendLocal<RefCell<Option<(i64, String)>>> = BackendLocal::new(RefCell::new(None));

/// At the end of a write statement: an agent's world past its max_changes fails the statement.
pub fn after_write_statement(statement: *const pg_sys::QueryDesc) {
    if crate::storage::internal() {
        return;
    }
    let pending = PENDING_AUDIT.with(|p| {
        let mut p = p.borrow_mut();
        if p.as_ref().is_some_and(|(s, _)| *s == statement as usize) { p.take().map(|(_, w)| w) } else { None }
    });
    if let Some(world) = pending {
        let rows = unsafe { statement.as_ref().and_then(|q| q.estate.as_ref()).map(|e| e.es_processed as i64) };
        audit("write", &world, rows);
    }
    let Some(num) = PENDING_CHANGES_CHECK.with(|p| match p.get() {
        Some((s, num)) if s == statement as usize => {
            p.set(None);
            Some(num)
        }
        _ => None,
    }) else {
        return;
    };
    let Some(agent) = session_agent() else { return };
    if agent.max_changes <= 0 {
        return;
    }
    let changed = crate::storage::as_internal(|| crate::spi_calls::get_one_with_args::<i64>("SELECT worlds._changes($1)", &[num.into()]))
        .ok()
        .flatten()
        .unwrap_or(0);
    if changed > agent.max_changes {
        raise_with(
            "42501",
            format!(
                "agent \"{}\" may change at most {} rows in a world (max_changes); this statement would make it {changed}; nothing was written",
                agent.name, agent.max_changes
            ),
            None,
            Some("Merge the world and fork a new one, or ask an admin to raise max_changes.".into()),
        );
    }
}

/// An agent's write statement: its audit row, and writes_per_minute (the audit of the last minute).
fn note_write(agent: &Agent, world: &str, statement: *const pg_sys::QueryDesc) {
    // one per statement the agent ran (not one per statement of a function it called)
    let started = unsafe { pg_sys::GetCurrentStatementStartTimestamp() };
    let seen = LAST_WRITE.with(|l| l.borrow().as_ref().is_some_and(|(t, w)| *t == started && w == world));
    if seen {
        return;
    }
    LAST_WRITE.with(|l| *l.borrow_mut() = Some((started, world.to_string())));
    if agent.writes_per_minute > 0 {
        let recent = crate::storage::as_internal(|| {
            crate::spi_calls::get_one_with_args::<i64>(
                "SELECT count(*) FROM worlds.audit WHERE agent = $1 AND action = 'write' AND at > clock_timestamp() - interval '1 minute'",
                &[agent.name.clone().into()],
            )
        })
        .ok()
        .flatten()
        .unwrap_or(0);
        if recent >= agent.writes_per_minute as i64 {
            raise_with(
                "42501",
                format!("agent \"{}\" may run {} write statements a minute (writes_per_minute); nothing was written", agent.name, agent.writes_per_minute),
                None,
                Some("Wait, or write more rows per statement.".into()),
            );
        }
    }
    // its row, with the rows written, when the statement ends (a failed one leaves none); COPY and
    // TRUNCATE have no executor's end: now
    if statement.is_null() {
        audit("write", world, None);
        return;
    }
    PENDING_AUDIT.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            *p = Some((statement as usize, world.to_string()));
        }
    });
}

/// The tracked relations a TRUNCATE or COPY FROM writes (others write nothing pg_worlds governs).
pub unsafe fn utility_write_targets(stmt: *mut pg_sys::Node) -> Vec<pg_sys::Oid> {
    unsafe {
        let mut rvs: Vec<*mut pg_sys::RangeVar> = Vec::new();
        match (*stmt).type_ {
            pg_sys::NodeTag::T_TruncateStmt => {
                let rels = (*(stmt as *mut pg_sys::TruncateStmt)).relations;
                for i in 0..if rels.is_null() { 0 } else { (*rels).length } {
                    rvs.push(crate::fast_ffi::list_nth(rels, i) as *mut pg_sys::RangeVar);
                }
            }
            pg_sys::NodeTag::T_CopyStmt => {
                let c = stmt as *mut pg_sys::CopyStmt;
                if (*c).is_from && !(*c).relation.is_null() {
                    rvs.push((*c).relation);
                }
            }
            _ => {}
        }
        rvs.into_iter().map(|rv| pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as _, pg_sys::RVROption::RVR_MISSING_OK as _, None, std::ptr::null_mut())).collect()
    }
}

/// `names::check_agent_name` for SQL: 22023 with its message.
#[pg_extern(immutable, parallel_safe)]
fn _check_agent_name(name: &str) {
    if let Err((state, message)) = worlds_core::names::check_agent_name(name) {
        raise(state, message);
    }
}

/// The session's user (who acts, whatever SET ROLE or a SECURITY DEFINER function made current), by
/// oid: an agent's name may hold what a role name cast (`::regrole`) would read as SQL.
#[pg_extern(stable, parallel_safe)]
fn _session_user_id() -> pg_sys::Oid {
    unsafe { pg_sys::GetSessionUserId() }
}
