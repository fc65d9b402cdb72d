//! DIFF ... READERS: what reads a changed column. `trace`: what in the database reads it (views,
//! merge checks, constraints, indexes, triggers, functions).
pub mod trace;
