//! Cancel keys: each client gets a BackendKeyData of the proxy's own (the backend's real process number,
//! so pg_backend_pid() and notifications' senders still match it, with a random key of the proxy's); a
//! CancelRequest carrying them is sent on to the server with the real backend's key.
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

fn registry() -> &'static Mutex<HashMap<(i32, i32), (i32, i32)>> {
    static R: OnceLock<Mutex<HashMap<(i32, i32), (i32, i32)>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// A random 32-bit key (std's SipHash, keyed from the OS's randomness).
fn random_key(salt: i32) -> i32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i32(salt);
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() as i32
}

/// The proxy's key for a backend's; the entry goes when the guard does.
pub struct Registered {
    pub key: (i32, i32),
}

pub fn register(real: (i32, i32)) -> Registered {
    static SALT: AtomicI32 = AtomicI32::new(0);
    loop {
        let key = (real.0, random_key(SALT.fetch_add(1, Ordering::Relaxed)));
        let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let std::collections::hash_map::Entry::Vacant(v) = r.entry(key) {
            v.insert(real);
            return Registered { key };
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        registry().lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
    }
}

/// The real backend's (pid, key) for the proxy's.
pub fn lookup(key: (i32, i32)) -> Option<(i32, i32)> {
    registry().lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_backends_while_registered() {
        let a = register((100, 7));
        let b = register((101, 8));
        assert_ne!(a.key, b.key);
        // the process number is the backend's; the key is the proxy's
        assert_eq!(a.key.0, 100);
        assert_ne!(a.key.1, 7);
        assert_eq!(lookup(a.key), Some((100, 7)));
        assert_eq!(lookup(b.key), Some((101, 8)));
        assert_eq!(lookup((a.key.0, a.key.1.wrapping_add(1))), None);
        let k = a.key;
        drop(a);
        assert_eq!(lookup(k), None);
        assert_eq!(lookup(b.key), Some((101, 8)));
    }
}
