//! The world scan: how a SELECT inside a world reads a tracked table (see docs/architecture.md, "The world
//! scan", where this departs from DESIGN.md's overlay view for reads).
//!
//! The router leaves a table a SELECT only reads as the real table and marks its range-table entry (`mark`).
//! The planner plans that relation exactly as in main (same statistics, indexes, join paths); this hook then
//! wraps each of its scan paths in a Custom Scan that
//! - runs main's scan as planned and drops the rows the world doesn't see (the overlay cache's sets: rows
//!   main created since the fork, by tid; keys the world's chain shadows), and
//! - adds the rows the world has instead: its chain's delta rows, found through the same index keys as
//!   main's scan when that scan is on the primary key (else read whole), and main's before-images, fetched
//!   by the tids the overlay cache holds for them (those in main's key range), filtered by the relation's
//!   quals. With a key-ordered scan the two streams are merged in key order.
//!
//! One relation is planned where the overlay view gave a three-branch append: planning was about half the
//! time of a point read in a world. Used for tables with one integer key column, without row-level
//! security; other reads, and all writes, go through the overlay views.
//!
//! Split as a Custom Scan's phases: `path.rs` (the planner's side: the paths it adds, the plan it makes),
//! `node.rs` (its method tables and its state node), `exec.rs` (running it), `parallel.rs` (a parallel
//! scan's shared memory).
mod exec;
mod node;
mod parallel;
mod path;
pub use path::{install, mark};
pub(crate) use path::marked;
