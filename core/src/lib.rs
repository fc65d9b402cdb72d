//! pg_worlds' pure logic, testable without a database: the grammar of the spec's statements, the rules
//! for world names, and the three-way merge decision.
pub mod as_of;
pub mod connect_name;
pub mod expiry;
pub mod grammar;
pub mod merge;
pub mod metrics;
pub mod names;
pub mod rules;
pub mod safe_mode;
pub mod reads;
pub mod scope;
pub mod recognise;
pub mod snapshot;
