//! Readers (spec, DIFF ... READERS): what reads each column a diff changes.
//! - `clients`: the columns clients' statements were seen reading (recorded at ExecutorStart), and
//!   `clients_shmem`, where they are kept (shared memory, saved to a file).
pub mod clients;
pub mod clients_shmem;
