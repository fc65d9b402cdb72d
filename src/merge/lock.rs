//! The merge's lock step (resolve → **lock** → gather → decide → apply → record): what a merge or a
//! rebase holds before it reads the rows it decides on, so what it decides on is what it applies to.
//!
//! The order every pg_worlds statement takes its locks in (docs/architecture.md, "Concurrency"):
//!   1. `worlds._lock_worlds()`: CREATE / DROP WORLD only (a merge or rebase never waits for it);
//!   2. worlds' write locks (advisory (2092147, num)), several in world-number order;
//!   3. main's rows, by the protocol below (a merge into main) — never waiting while holding one;
//!   4. rows of `worlds.world` (a world's version, its end).
//!
//! Main's rows: the rows the world changed, locked in one statement per table (relid order) with SKIP
//! LOCKED inside a subtransaction. When a row is held by someone else, the subtransaction is rolled back
//! (every row lock of this round goes), the merge waits for that one row alone, lets it go, and starts
//! over. So a merge never waits for a row while it holds one: it can't close a cycle with main's writers
//! or with other merges, and holding the rows it then reads them on a snapshot taken after the locks.
//! Keys the world adds that main doesn't have are taken as advisory locks on (table, key) by the same
//! protocol, so two merges adding one key queue and the second sees the first's row (a conflict).
use super::key_text_expr;
use crate::storage::Layout;
use pgrx::prelude::*;
use std::collections::HashSet;
use std::rc::Rc;

/// The first key of worlds' write locks (storage/writes.rs takes the same).
pub const WORLD_LOCK: i32 = 2092147;
/// The first key of the advisory locks on keys a merge adds to main.
const KEY_LOCK: i32 = 2092148;

/// Takes the write locks of these worlds (main, 0, has none) in world-number order.
pub fn worlds(nums: &[i32]) {
    let mut nums: Vec<i32> = nums.iter().copied().filter(|n| *n != 0).collect();
    nums.sort_unstable();
    nums.dedup();
    for n in nums {
        Spi::run_with_args("SELECT pg_advisory_xact_lock($1, $2)", &[WORLD_LOCK.into(), n.into()])
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
    }
}

/// How strongly main's rows are held.
#[derive(Clone, Copy, PartialEq)]
pub enum Hold {
    /// a merge writes them: FOR NO KEY UPDATE, and FOR UPDATE for rows the world deleted
    Write,
    /// a rebase reads them into the world's new fork point: FOR SHARE (main can't change them until it commits)
    Read,
}

/// Locks, in main, the rows `world` changed in these tables (keyed tables; keys it added as advisory
/// locks), by the protocol in this module's header. Returns once all are held.
pub fn main_rows(layouts: &[Rc<Layout>], world: i32, hold: Hold) {
    let mut layouts: Vec<&Rc<Layout>> = layouts.iter().filter(|l| l.key_kind != b'r').collect();
    layouts.sort_by_key(|l| l.relid.to_u32());
    if layouts.is_empty() {
        return;
    }
    let rounds = layouts.iter().map(|l| Round::new(l, world, hold)).collect::<Vec<_>>();
    loop {
        let blocked = super::in_subtransaction_keep(|| {
            for r in &rounds {
                if let Some(b) = r.try_lock() {
                    return Some(b);
                }
            }
            None
        }, |blocked| blocked.is_none());
        match blocked {
            None => return,
            // wait for that one alone (nothing else held), let it go, and start over
            Some(b) => super::in_subtransaction_keep(|| b.wait(), |_| false),
        }
    }
}

struct Round {
    /// rows the world changed that main has, locked without waiting; what they return
    lock_sql: Vec<String>,
    /// the keys the world changed that main has now, and all the keys it changed
    present_sql: String,
    all_sql: String,
    /// the table's number (advisory locks on keys added) and the table, for waiting on one row
    relid: u32,
    layout: Rc<Layout>,
    world: i32,
    hold: Hold,
}

/// What a round found held by someone else.
enum Blocked {
    Row { sql: String, key: String },
    Key { relid: u32, key: String },
}

impl Blocked {
    fn wait(&self) {
        match self {
            Blocked::Row { sql, key } => Spi::connect_mut(|c| c.update(sql, None, &[key.as_str().into()]).map(|_| ())),
            Blocked::Key { relid, key } => Spi::run_with_args(
                "SELECT pg_advisory_xact_lock($1, hashtext($3::text || '/' || $2))",
                &[KEY_LOCK.into(), key.as_str().into(), (*relid as i64).into()],
            ),
        }
        .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
    }
}

impl Round {
    fn new(l: &Rc<Layout>, world: i32, hold: Hold) -> Round {
        let kcols = |alias: &str| l.key_columns.iter().map(|c| format!("{alias}.{}", crate::storage::overlay::quote_ident(c))).collect::<Vec<_>>().join(", ");
        let (table, delta) = (&l.table_name, &l.delta_name);
        // the world's keys, each with whether its last version deletes the row
        let keys = format!(
            "SELECT DISTINCT ON ({dk}) {dk}, d._w_del FROM {delta} d WHERE d._w_world = $1 ORDER BY {dk}, d._w_dseq DESC",
            dk = kcols("d")
        );
        let tk = kcols("t");
        let ok = kcols("o");
        let ttext = key_text_expr(l, "t");
        let lock = |del: bool, mode: &str| {
            format!(
                "WITH o AS ({keys}) SELECT {ttext} FROM {table} t WHERE ({tk}) IN (SELECT {ok} FROM o WHERE o._w_del = {del}) ORDER BY {tk} FOR {mode} OF t SKIP LOCKED"
            )
        };
        let lock_sql = match hold {
            Hold::Write => vec![lock(false, "NO KEY UPDATE"), lock(true, "UPDATE")],
            Hold::Read => vec![format!(
                "WITH o AS ({keys}) SELECT {ttext} FROM {table} t WHERE ({tk}) IN (SELECT {ok} FROM o) ORDER BY {tk} FOR SHARE OF t SKIP LOCKED"
            )],
        };
        let present_sql = format!("WITH o AS ({keys}) SELECT {ttext} FROM {table} t WHERE ({tk}) IN (SELECT {ok} FROM o)");
        let all_sql = format!("SELECT DISTINCT {} FROM {delta} d WHERE d._w_world = $1", key_text_expr(l, "d"));
        Round { lock_sql, present_sql, all_sql, relid: l.relid.to_u32(), layout: l.clone(), world, hold }
    }

    fn texts(sql: &str, world: i32) -> Vec<String> {
        Spi::connect_mut(|c| {
            c.update(sql, None, &[world.into()])
                .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
                .filter_map(|r| r.get::<String>(1).ok().flatten())
                .collect()
        })
    }

    /// Locks what it can without waiting; the first thing it couldn't, if any.
    fn try_lock(&self) -> Option<Blocked> {
        let mut locked: HashSet<String> = HashSet::new();
        for sql in &self.lock_sql {
            locked.extend(Self::texts(sql, self.world));
        }
        // (a fresh snapshot: rows committed since the lock statement's are seen, and waited for like held ones)
        let present: Vec<String> = Self::texts(&self.present_sql, self.world);
        if let Some(k) = present.iter().find(|k| !locked.contains(*k)) {
            let table = &self.layout.table_name;
            let mode = if self.hold == Hold::Read { "SHARE" } else { "UPDATE" };
            let sql = format!("SELECT 1 FROM {table} t WHERE {} = $1 FOR {mode} OF t", key_text_expr(&self.layout, "t"));
            return Some(Blocked::Row { sql, key: k.clone() });
        }
        if self.hold == Hold::Write {
            let present: HashSet<String> = present.into_iter().collect();
            for k in Self::texts(&self.all_sql, self.world).into_iter().filter(|k| !present.contains(k)) {
                let got = Spi::get_one_with_args::<bool>(
                    "SELECT pg_try_advisory_xact_lock($1, hashtext($3::text || '/' || $2))",
                    &[KEY_LOCK.into(), k.as_str().into(), (self.relid as i64).into()],
                )
                .ok()
                .flatten()
                .unwrap_or(false);
                if !got {
                    return Some(Blocked::Key { relid: self.relid, key: k });
                }
            }
        }
        None
    }
}

/// A keyless table's rows have no identity to lock by: the table is locked against writers while the
/// merge runs (SHARE ROW EXCLUSIVE), before any row (relid order).
pub fn keyless_tables(layouts: &[Rc<Layout>]) {
    let mut ls: Vec<&Rc<Layout>> = layouts.iter().filter(|l| l.key_kind == b'r').collect();
    ls.sort_by_key(|l| l.relid.to_u32());
    for l in ls {
        Spi::run(&format!("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE", l.table_name))
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
    }
}
