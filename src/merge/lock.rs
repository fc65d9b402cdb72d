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
use std::collections::HashMap;
use std::rc::Rc;
use crate::backend_local::BackendLocal;

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
        crate::spi_calls::run_with_args("SELECT pg_advisory_xact_lock($1, $2)", &[WORLD_LOCK.into(), n.into()])
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
        crate::storage::world_locks::note_exclusive(n);
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
/// locks), by the protocol in this module's header. Returns once all are held, with the keys (as key
/// text) of each table that main didn't have when they were: the world adds them.
pub fn main_rows(layouts: &[Rc<Layout>], world: i32, hold: Hold) -> HashMap<pg_sys::Oid, Vec<String>> {
    let mut layouts: Vec<&Rc<Layout>> = layouts.iter().filter(|l| l.key_kind != b'r').collect();
    layouts.sort_by_key(|l| l.relid.to_u32());
    if layouts.is_empty() {
        return HashMap::new();
    }
    let rounds = layouts.iter().map(|l| Round::new(l, world, hold)).collect::<Vec<_>>();
    loop {
        let mut absent: HashMap<pg_sys::Oid, Vec<String>> = HashMap::new();
        let blocked = super::in_subtransaction_keep(|| {
            for r in &rounds {
                if let Some(b) = r.try_lock(absent.entry(r.layout.relid).or_default()) {
                    return Some(b);
                }
            }
            None
        }, |blocked| blocked.is_none());
        match blocked {
            None => return absent,
            // wait for that one alone (nothing else held), let it go, and start over
            Some(b) => super::in_subtransaction_keep(|| b.wait(), |_| false),
        }
    }
}

struct Round {
    /// one statement: locks, without waiting, the rows the world changed that main has, and returns what it
    /// couldn't lock ('held', key) and the keys main doesn't have ('absent', key)
    sql: String,
    /// the table's number (advisory locks on keys added) and the table, for waiting on one row
    relid: u32,
    layout: Rc<Layout>,
    world: i32,
    hold: Hold,
}

/// the table of the row a round found held
static ROW_RELID: BackendLocal<std::cell::Cell<Option<pg_sys::Oid>>> = BackendLocal::new(std::cell::Cell::new(None));

/// Waits until the transactions that hold the row at `place` (its updater or lockers, read from the
/// tuple's xmax, a MultiXact's members included) have ended, by waiting on their transaction ids, as
/// Postgres's own row lock waits end in. Unlike `SELECT ... FOR UPDATE` it takes no tuple lock: the merge
/// never stands in the row's queue, so main's writers never wait for it, and it can't be part of a
/// deadlock among them (it holds no row then: see `main_rows`). The next round locks the row (or finds it
/// held again, and waits again).
unsafe fn wait_for_row_holders(relid: pg_sys::Oid, place: &str) {
    unsafe {
        let Some((block, offset)) = place.trim_matches(|c| c == '(' || c == ')').split_once(',') else { return };
        let (Ok(block), Ok(offset)) = (block.parse::<u32>(), offset.parse::<u16>()) else { return };
        let rel = pg_sys::relation_open(relid, pg_sys::AccessShareLock as i32);
        let buffer = pg_sys::ReadBuffer(rel, block);
        pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
        let page = pg_sys::BufferGetPage(buffer);
        let mut holders: Vec<pg_sys::TransactionId> = Vec::new();
        let max = pg_sys::PageGetMaxOffsetNumber(page);
        if offset >= 1 && offset <= max {
            let item = pg_sys::PageGetItemId(page, offset);
            if (*item).lp_flags() == pg_sys::LP_NORMAL {
                let tuple = pg_sys::PageGetItem(page, item) as pg_sys::HeapTupleHeader;
                let infomask = (*tuple).t_infomask as u32;
                let xmax = (*tuple).t_choice.t_heap.t_xmax;
                if infomask & pg_sys::HEAP_XMAX_INVALID == 0 && xmax != pg_sys::InvalidTransactionId {
                    if infomask & pg_sys::HEAP_XMAX_IS_MULTI != 0 {
                        let lock_only = infomask & pg_sys::HEAP_XMAX_LOCK_ONLY != 0
                            || (infomask & (pg_sys::HEAP_XMAX_IS_MULTI | pg_sys::HEAP_XMAX_EXCL_LOCK | pg_sys::HEAP_XMAX_KEYSHR_LOCK)) == pg_sys::HEAP_XMAX_EXCL_LOCK;
                        let mut members: *mut pg_sys::MultiXactMember = std::ptr::null_mut();
                        let n = pg_sys::GetMultiXactIdMembers(xmax, &mut members, false, lock_only);
                        for i in 0..n.max(0) as usize {
                            holders.push((*members.add(i)).xid);
                        }
                    } else {
                        holders.push(xmax);
                    }
                }
            }
        }
        pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_UNLOCK as i32);
        pg_sys::ReleaseBuffer(buffer);
        let mut tid: pg_sys::ItemPointerData = std::mem::zeroed();
        tid.ip_blkid.bi_hi = (block >> 16) as u16;
        tid.ip_blkid.bi_lo = block as u16;
        tid.ip_posid = offset;
        for xid in holders {
            if pg_sys::TransactionIdIsCurrentTransactionId(xid) {
                continue;
            }
            // (returns at once when it has ended; honours lock_timeout and cancels as any lock wait)
            pg_sys::XactLockTableWait(xid, rel, &mut tid, pg_sys::XLTW_Oper::XLTW_Lock);
        }
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as i32);
    }
}

/// What a round found held by someone else.
enum Blocked {
    Row { sql: String, key: String },
    Key { relid: u32, key: String },
}

impl Blocked {
    fn relid(&self) -> Option<pg_sys::Oid> {
        match self {
            Blocked::Row { .. } => ROW_RELID.with(|r| r.get()),
            Blocked::Key { .. } => None,
        }
    }

    fn wait(&self) {
        match self {
            Blocked::Row { sql, key } => {
                // the row's place now (a fresh snapshot: its latest committed version)
                let place = crate::spi_calls::get_one_with_args::<String>(sql, &[key.as_str().into()]).ok().flatten();
                if let (Some(place), Some(relid)) = (place, self.relid()) {
                    unsafe { wait_for_row_holders(relid, &place) };
                }
                Ok(())
            }
            Blocked::Key { relid, key } => crate::spi_calls::run_with_args(
                "SELECT pg_advisory_xact_lock($1, hashtext($3::text || '/' || $2))",
                &[KEY_LOCK.into(), key.as_str().into(), (*relid as i64).into()],
            ),
        }
        .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
    }
}

impl Round {
    fn new(l: &Rc<Layout>, world: i32, hold: Hold) -> Round {
        let kcols = |alias: &str| l.key_columns.iter().map(|c| format!("{alias}.{}", crate::sql_text::quote_ident(c))).collect::<Vec<_>>().join(", ");
        let (table, delta) = (&l.table_name, &l.delta_name);
        let (tk, ok) = (kcols("t"), kcols("o"));
        let (write_mode, delete_mode) = match hold {
            Hold::Write => ("NO KEY UPDATE", "UPDATE"),
            Hold::Read => ("SHARE", "SHARE"),
        };
        // the world's keys (each with whether its last version deletes the row), materialized once; the
        // rows main has read on the statement's snapshot, the locks taken on their latest versions (a row
        // changed or gone since is seen as held, and waited for: the next round reads it anew). Only the
        // keys left unlocked are looked up again: present in main, held by someone; absent, a key added.
        // (set operations, not anti joins: a plan for a generic parameter may nest a loop over a CTE; w and x
        // are read to their end first, by the one-time filter: a CTE is only run as far as it is read)
        let sql = format!(
            "WITH o AS MATERIALIZED (SELECT DISTINCT ON ({dk}) {dk}, d._w_del FROM {delta} d WHERE d._w_world = $1 ORDER BY {dk}, d._w_dseq DESC),
                  w AS MATERIALIZED (SELECT {tk} FROM {table} t WHERE ({tk}) IN (SELECT {ok} FROM o WHERE NOT o._w_del) FOR {write_mode} OF t SKIP LOCKED),
                  x AS MATERIALIZED (SELECT {tk} FROM {table} t WHERE ({tk}) IN (SELECT {ok} FROM o WHERE o._w_del) FOR {delete_mode} OF t SKIP LOCKED),
                  r AS (SELECT {ok} FROM o EXCEPT ALL (SELECT {tk} FROM w t UNION ALL SELECT {tk} FROM x t))
             SELECT CASE WHEN EXISTS (SELECT 1 FROM {table} t WHERE {mr}) THEN 'held' ELSE 'absent' END, {rtext} FROM r
              WHERE (SELECT count(*) FROM w) >= 0 AND (SELECT count(*) FROM x) >= 0",
            dk = kcols("d"),
            rtext = key_text_expr(&l.key_columns, "r"),
            mr = super::key_match(&l.key_columns, "t", "r"),
        );
        Round { sql, relid: l.relid.to_u32(), layout: l.clone(), world, hold }
    }

    /// Locks what it can without waiting; the first thing it couldn't, if any. The keys main lacks go
    /// into `absent`.
    fn try_lock(&self, absent: &mut Vec<String>) -> Option<Blocked> {
        let found: Vec<(String, String)> = Spi::connect_mut(|c| {
            c.update(&self.sql, None, &[self.world.into()])
                .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")))
                .filter_map(|r| Some((r.get::<String>(1).ok().flatten()?, r.get::<String>(2).ok().flatten()?)))
                .collect()
        });
        if let Some((_, k)) = found.iter().find(|(kind, _)| kind == "held") {
            return Some(held_row(&self.layout, k.clone()));
        }
        absent.extend(found.into_iter().filter(|(kind, _)| kind == "absent").map(|(_, k)| k));
        if self.hold == Hold::Write {
            return key_locks(self.relid, absent);
        }
        None
    }
}

/// Takes the advisory locks on the keys a merge adds (`absent`), without waiting: the first key another
/// merge holds, if any.
fn key_locks(relid: u32, absent: &[String]) -> Option<Blocked> {
    if absent.is_empty() {
        return None;
    }
    // one statement for them all, in the keys' order
    let taken = crate::spi_calls::get_one_with_args::<String>(
        "SELECT k FROM unnest($2::text[]) WITH ORDINALITY AS a(k, n)
          WHERE NOT pg_try_advisory_xact_lock($1, hashtext($3::text || '/' || a.k)) ORDER BY a.n LIMIT 1",
        &[KEY_LOCK.into(), absent.to_vec().into(), (relid as i64).into()],
    )
    .ok()
    .flatten();
    taken.map(|k| Blocked::Key { relid, key: k })
}

/// The place of the row with this key text, for waiting on it (`Blocked::Row`).
fn held_row(layout: &Rc<Layout>, key: String) -> Blocked {
    let sql = format!("SELECT t.ctid::text FROM {} t WHERE {} = $1", layout.table_name, key_text_expr(&layout.key_columns, "t"));
    ROW_RELID.with(|r| r.set(Some(layout.relid)));
    Blocked::Row { sql, key }
}

/// `main_rows` for a merge into main that plans its rows (Hold::Write), with the gather of each keyed
/// table in the statement that locks its rows (gather.rs, `gather_keyed`): one read of main's rows, not
/// a locking pass and a reading pass. By the same protocol: a row it can't lock (or changed or gone since
/// the statement's snapshot) is waited for with nothing held, and the round starts over.
///
/// The rows are read on the statement's snapshot and locked at their latest versions: a transaction of
/// main's that committed between the two (it changed a row after the snapshot, before the lock reached
/// it, or wrote history the base is read from) would leave the read behind what is locked. So, all rows
/// held, each table is asked whether main wrote it (its history or inserts) after that snapshot; if so,
/// the table is gathered again, on a snapshot taken now (everything it reads of the world's rows held
/// since). Returns the keys main lacked (as `main_rows`) and each keyed table's rows.
pub fn main_rows_gathered(layouts: &[Rc<Layout>], world: &crate::world::World) -> (HashMap<pg_sys::Oid, Vec<String>>, HashMap<pg_sys::Oid, Vec<crate::plan::Changed>>) {
    let mut layouts: Vec<&Rc<Layout>> = layouts.iter().filter(|l| l.key_kind != b'r').collect();
    layouts.sort_by_key(|l| l.relid.to_u32());
    if layouts.is_empty() {
        return (HashMap::new(), HashMap::new());
    }
    loop {
        let mut absent: HashMap<pg_sys::Oid, Vec<String>> = HashMap::new();
        let mut gathered: Vec<(&Rc<Layout>, Vec<crate::plan::Changed>, Option<String>)> = Vec::new();
        let blocked = super::in_subtransaction_keep(
            || {
                for l in &layouts {
                    let cols = super::live_columns(l.relid);
                    let k = super::gather::gather_keyed(l, world, &cols, true);
                    if let Some(key) = k.held {
                        return Some(held_row(l, key));
                    }
                    if let Some(b) = key_locks(l.relid.to_u32(), &k.absent) {
                        return Some(b);
                    }
                    absent.insert(l.relid, k.absent);
                    gathered.push((l, k.rows, k.snapshot));
                }
                None
            },
            |blocked| blocked.is_none(),
        );
        match blocked {
            None => {
                let rows = gathered
                    .into_iter()
                    .map(|(l, rows, snapshot)| {
                        let rows = match snapshot {
                            Some(s) if written_since(l, &s) => super::gather::gather_keyed(l, world, &super::live_columns(l.relid), false).rows,
                            _ => rows,
                        };
                        (l.relid, rows)
                    })
                    .collect();
                return (absent, rows);
            }
            // wait for that one alone (nothing else held), let it go, and start over
            Some(b) => super::in_subtransaction_keep(|| b.wait(), |_| false),
        }
    }
}

/// Has main written the table (history or inserts) in a transaction `snapshot` doesn't see, that has
/// committed by now? (Its `_w_xid` indexes: the entries since the snapshot's xmin.)
fn written_since(l: &Layout, snapshot: &str) -> bool {
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {} h WHERE h._w_xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(h._w_xid, $1::pg_snapshot))",
        l.history_name
    );
    crate::spi_calls::get_one_with_args::<bool>(&sql, &[snapshot.into()]).ok().flatten().unwrap_or(true)
}

/// A keyless table's rows have no identity to lock by: the table is locked against writers while the
/// merge runs (SHARE ROW EXCLUSIVE), before any row (relid order).
pub fn keyless_tables(layouts: &[Rc<Layout>]) {
    let mut ls: Vec<&Rc<Layout>> = layouts.iter().filter(|l| l.key_kind == b'r').collect();
    ls.sort_by_key(|l| l.relid.to_u32());
    for l in ls {
        crate::spi_calls::run(&format!("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE", l.table_name))
            .unwrap_or_else(|e| crate::api::raise("XX000", format!("pg_worlds: {e}")));
    }
}
