//! What this backend already put in shared memory of a world's reads: the same read again costs no lock.
//! Both the reads taken when a statement starts (record.rs) and those kept back until it finishes
//! (stopped.rs) are sent here.
use super::shmem::{self, Recorded};
use std::cell::RefCell;
use std::collections::HashMap;
use worlds_core::reads::{self, Columns, Conjunct};

/// One read of a table by one scan.
pub(crate) enum Read {
    Whole,
    Keys(Vec<String>),
    Scan(Vec<Conjunct>),
}

#[derive(Default)]
struct Local {
    whole: bool,
    keys: HashMap<u64, Columns>,
    scans: HashMap<u64, Columns>,
}

thread_local! {
    /// What this backend already put in shared memory, per (world, table): the same read again costs
    /// no lock.
    static SENT: RefCell<HashMap<(i32, u32), Local>> = RefCell::new(HashMap::new());
}

/// Has this backend already sent a read of the whole table (so no narrower read of it counts)?
pub(super) fn sent_whole(world: i32, relid: u32) -> bool {
    SENT.with(|s| s.borrow().get(&(world, relid)).is_some_and(|l| l.whole))
}

/// Puts a read in shared memory, unless this backend already did.
pub(super) fn send(world: i32, relid: u32, read: Read, cols: Columns) {
    SENT.with(|s| {
        let mut s = s.borrow_mut();
        let local = s.entry((world, relid)).or_default();
        if local.whole {
            return;
        }
        let outcome = match read {
            Read::Whole => shmem::record_whole(world, relid),
            Read::Keys(keys) => {
                let hashes: Vec<u64> = keys.iter().map(|k| reads::hash(k.as_bytes())).filter(|h| !local.keys.get(h).is_some_and(|c| c.covers(&cols))).collect();
                if hashes.is_empty() {
                    return;
                }
                let r = shmem::record_keys(world, relid, &hashes, cols);
                if r == Recorded::Kept {
                    for h in hashes {
                        let c = local.keys.entry(h).or_default();
                        *c = c.union(&cols);
                    }
                }
                r
            }
            Read::Scan(conjs) => match reads::encode(&conjs) {
                None => shmem::record_whole(world, relid),
                Some(bytes) => {
                    let h = reads::hash(&bytes);
                    if local.scans.get(&h).is_some_and(|c| c.covers(&cols)) {
                        return;
                    }
                    let r = shmem::record_scan(world, relid, &bytes, cols);
                    if r == Recorded::Kept {
                        let c = local.scans.entry(h).or_default();
                        *c = c.union(&cols);
                    }
                    r
                }
            },
        };
        if outcome == Recorded::Whole {
            local.whole = true;
            local.keys.clear();
            local.scans.clear();
        }
    });
}
