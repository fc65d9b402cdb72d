//! pg_worlds' Custom Scans: the world scan (a world's SELECT of a table with one integer key: main's scan
//! as planned, the world's rows added) and the key lookup (a key's before-images and its winning version,
//! in the overlay view's branches), the way TimescaleDB and ParadeDB split theirs: a folder per scan,
//! a file per phase, and what they share beside them (`methods.rs`: their method tables; `keys.rs`: the
//! keys a statement names).
pub mod key_lookup;
pub mod keys;
pub mod methods;
pub mod world_scan;
