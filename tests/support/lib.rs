//! Running Chime's binaries as processes for end-to-end tests. The helpers live in
//! `chime_test_support::deploy`, shared with the pipeline benchmark.

// Setup failures end the test with a message, by design.
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

pub mod servers;
pub mod timers;

pub use chime_test_support::deploy::{Service, bin, bin_dir, cluster, free_port, log_dir};
