//! Readers and blast radius (spec, "DIFF ... READERS"): what reads the columns a change touches.
//! - `trace`: what in the database reads them (views, materialized views and merge checks column by
//!   column, constraints, indexes, triggers, functions), from the stored query trees;
//! - `clients`: the columns clients' statements read, recorded at ExecutorStart in shared memory
//!   (`clients_shmem`: the table, its file, the worker that saves it);
//! - `registry`: registered readers and critical marks, which live in a world like a view;
//! - `blast`: the three together for one changed table (DIFF ... READERS, the policy's critical rule).
pub mod blast;
pub mod clients;
pub mod clients_shmem;
pub mod registry;
pub mod trace;
