//! The locks a world's writers take, so that several sessions write one world at once and none loses
//! another's update.
//!
//! - **The world's lock** (advisory `(2092147, num)`, the one `pg_advisory_xact_lock(2092147, num)` takes):
//!   a writer holds it SHARED until it commits; a merge from or into the world, a rebase, DROP WORLD and
//!   expiry take it EXCLUSIVE, so they see the world's rows still and whole.
//! - **A lock per row key** (advisory, in a lock space of pg_worlds' own: field4 = `KEY_SPACE`, so no
//!   `pg_advisory_lock(bigint)` of the app's shares it), EXCLUSIVE until commit, taken before the row's
//!   new version is written (and, for a statement that names its keys, before the statement reads: see
//!   route/hooks.rs). Two writers of one key queue as two UPDATEs of one row do in Postgres; writers of
//!   different keys don't wait for each other. The same for the values of each unique index a written row
//!   has, so two sessions can't both add one value.
//! - Past `MAX_KEY_LOCKS` keys in one transaction the world's lock is taken EXCLUSIVE instead (a bulk
//!   write would fill the shared lock table otherwise).
//!
//! Lock order: the world's lock, then keys. A transaction takes the world's lock before any of its keys,
//! and a statement that names its keys takes them sorted.
use super::overlay::{Key, World};
use pgrx::pg_sys;
use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use crate::backend_local::BackendLocal;

/// The first key of a world's advisory lock (the second is its number).
pub const WORLD_LOCK: i32 = 2092147;
/// The lock space of key locks (an advisory lock's field4; Postgres's own functions use 1 and 2).
const KEY_SPACE: u16 = 0x7767;
/// Key locks one transaction takes in a world before it takes the world's lock EXCLUSIVE instead.
pub const MAX_KEY_LOCKS: usize = 128;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Mode {
    Shared = 1,
    Exclusive = 2,
}

/// (lxid, world, mode, the subtransaction that took it) of the world locks this transaction holds
static HELD: BackendLocal<RefCell<Vec<(u32, i32, u8, pg_sys::SubTransactionId)>>> = BackendLocal::new(RefCell::new(Vec::new()));
/// (lxid, world, the key locks this transaction took in it and their modes)
static KEYS: BackendLocal<RefCell<(u32, i32, super::overlay::FastMap<i64, Mode>)>> =
    BackendLocal::new(RefCell::new((0, 0, super::overlay::FastMap::with_hasher(super::overlay::FxBuild::new()))));

/// (lxid, statement, key lock ids): the keys the running statement's ExecutorStart locked before it
/// took the snapshot it reads on (hooks/write_locks.rs), under READ COMMITTED
static BEFORE_READING: BackendLocal<RefCell<(u32, u64, super::overlay::FastSet<i64>)>> =
    BackendLocal::new(RefCell::new((0, 0, super::overlay::FastSet::with_hasher(super::overlay::FxBuild::new()))));

/// The running statement (READ COMMITTED) locked these keys before taking the snapshot it reads on: every
/// version of them committed before it is in that snapshot, and none can commit after it.
pub fn note_locked_before_reading(ids: impl IntoIterator<Item = i64>) {
    let set = ids.into_iter().collect();
    BEFORE_READING.with(|b| *b.borrow_mut() = (lxid(), super::overlay::exec_gen(), set));
}

/// Did the running statement lock this key before taking its snapshot (`note_locked_before_reading`)?
/// Then the row it read of the key is the world's latest: a write needs no check of its own.
pub fn locked_before_reading(id: i64) -> bool {
    let (x, gen) = (lxid(), super::overlay::exec_gen());
    BEFORE_READING.with(|b| {
        let b = b.borrow();
        b.0 == x && b.1 == gen && b.2.contains(&id)
    })
}

fn lxid() -> u32 {
    unsafe { pg_sys::MyProc.as_ref().map(|p| p.lxid).unwrap_or(0) }
}

/// The world lock this transaction holds on `world`, if any.
pub fn held(world: &World) -> Option<Mode> {
    held_num(world.num)
}

fn held_num(num: i32) -> Option<Mode> {
    let x = lxid();
    HELD.with(|h| h.borrow().iter().filter(|e| e.0 == x && e.1 == num).map(|e| e.2).max()).map(|m| if m >= 2 { Mode::Exclusive } else { Mode::Shared })
}

fn note(num: i32, mode: Mode) {
    let (x, sub) = (lxid(), unsafe { crate::fast_ffi::GetCurrentSubTransactionId() });
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        h.retain(|e| e.0 == x);
        h.push((x, num, mode as u8, sub));
    });
}

/// A merge, rebase or drop took these worlds' locks EXCLUSIVE (merge/lock.rs): its own writes into them
/// need no key locks.
pub fn note_exclusive(num: i32) {
    note(num, Mode::Exclusive);
}

fn advisory_tag(field2: u32, field3: u32, field4: u16) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: field2,
        locktag_field3: field3,
        locktag_field4: field4,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// How a lock request meets a lock another transaction holds: as `SELECT ... FOR UPDATE`, plain, `SKIP
/// LOCKED` or `NOWAIT` (Postgres's LockWaitPolicy, in its order).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wait {
    Block = 0,
    Skip = 1,
    Error = 2,
}

/// Takes a transaction-level lock: Some(true) when it was not this transaction's already (newly granted,
/// perhaps after a wait), None when another transaction holds it and `wait` is not Block.
fn try_acquire(tag: &pg_sys::LOCKTAG, mode: Mode, wait: Wait) -> Option<bool> {
    let lockmode = match mode {
        Mode::Shared => pg_sys::ShareLock,
        Mode::Exclusive => pg_sys::ExclusiveLock,
    } as pg_sys::LOCKMODE;
    unsafe {
        let got = pg_sys::LockAcquire(tag, lockmode, false, true);
        if got == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            if wait != Wait::Block {
                return None;
            }
            pg_sys::LockAcquire(tag, lockmode, false, false);
            return Some(true);
        }
        Some(got != pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD)
    }
}

/// Takes the world's lock in `mode` (or keeps a stronger one held); true when newly taken. A DROP WORLD
/// holds the lock while it frees the world's rows: once it is ours, the world may be gone (0A000).
pub fn lock_world(world: &World, mode: Mode) -> bool {
    lock_world_with(world, mode, Wait::Block).unwrap_or(true)
}

/// `lock_world`, or None when another transaction holds it and `wait` says not to wait.
pub fn lock_world_with(world: &World, mode: Mode, wait: Wait) -> Option<bool> {
    if held(world).is_some_and(|m| m >= mode) {
        return Some(false);
    }
    let tag = advisory_tag(WORLD_LOCK as u32, world.num as u32, 2);
    let taken = try_acquire(&tag, mode, wait)?;
    // (read on a fresh snapshot, after the lock: the transaction's under REPEATABLE READ)
    let live = unsafe { super::overlay::world_row(world.num, pg_sys::GetTransactionSnapshot()) }.map(|r| !r.0);
    if live == Some(false) {
        crate::api::raise_with(
            "0A000",
            format!("world \"{}\" was dropped while this statement ran; nothing was written", world.name),
            None,
            Some("The session now works in the world's parent: run the statement again if it should go there.".into()),
        );
    }
    note(world.num, mode);
    Some(taken)
}

/// Takes the lock of one row key (or unique value) of the world EXCLUSIVE, after the world's lock SHARED;
/// true when newly taken (the caller's snapshot may predate a writer of it that committed since).
pub fn lock_key(world: &World, id: i64) -> bool {
    lock_key_with(world, id, Mode::Exclusive, Wait::Block).unwrap_or(true)
}

/// Takes the lock of one row key in `mode` (SHARED for `FOR SHARE`: readers that lock a row don't wait
/// for each other, a writer waits for them). None when another transaction holds it and `wait` says not
/// to wait (the caller skips the row or raises 55P03); else true when newly taken.
pub fn lock_key_with(world: &World, id: i64, mode: Mode, wait: Wait) -> Option<bool> {
    if held(world) == Some(Mode::Exclusive) {
        return Some(false);
    }
    let mut taken = lock_world(world, Mode::Shared);
    let (x, num) = (lxid(), world.num);
    let (had, count) = KEYS.with(|k| {
        let mut k = k.borrow_mut();
        if k.0 != x || k.1 != num {
            *k = (x, num, Default::default());
        }
        (k.2.get(&id).copied(), k.2.len() + 1)
    });
    if had.is_some_and(|m| m >= mode) {
        return Some(taken);
    }
    if had.is_none() && count > MAX_KEY_LOCKS {
        // a bulk write: the whole world instead of more keys
        return Some(lock_world(world, Mode::Exclusive) || taken);
    }
    taken |= try_acquire(&advisory_tag((id as u64 >> 32) as u32, id as u32, KEY_SPACE), mode, wait)?;
    KEYS.with(|k| k.borrow_mut().2.insert(id, mode));
    Some(taken)
}

/// A subtransaction aborted: the locks it took are released with it (Postgres releases them), so they
/// are taken again when next needed.
pub fn forget_aborted(sub: pg_sys::SubTransactionId) {
    HELD.with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            h.retain(|e| sub != 0 && e.3 < sub);
        }
    });
    KEYS.with(|k| {
        if let Ok(mut k) = k.try_borrow_mut() {
            *k = (0, 0, Default::default());
        }
    });
}

/// The lock id of a row key of table `tabno` in world `world`.
pub fn key_id(world: i32, tabno: i32, key: &Key) -> i64 {
    let mut h = std::hash::DefaultHasher::new();
    (world, tabno, b'k').hash(&mut h);
    match key {
        Key::I(i) => (0u8, *i).hash(&mut h),
        Key::T(t) => (1u8, t.as_str()).hash(&mut h),
    }
    h.finish() as i64
}

/// The lock id of the values a row has in the unique index on `columns` of table `tabno`.
pub fn unique_id(world: i32, tabno: i32, columns: &[String], values: &[String]) -> i64 {
    let mut h = std::hash::DefaultHasher::new();
    (world, tabno, b'u', columns, values).hash(&mut h);
    h.finish() as i64
}
