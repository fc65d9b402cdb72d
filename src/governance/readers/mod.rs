//! Readers and blast radius (spec, "DIFF ... READERS"): what in the database reads the columns a change
//! touches.
//! - `registry`: registered readers and critical marks, which live in a world like a view;
pub mod registry;
pub mod blast;
pub mod trace;
pub mod clients;
