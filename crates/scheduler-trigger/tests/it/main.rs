//! The integration tests of this crate, one binary: each file below is a module (one link
//! instead of one per file).

// Tests and their fixtures panic on purpose: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod backlog;
mod balance;
mod clock;
mod dst;
mod handoff;
mod scheduler;
mod stale;
mod sweeper;
mod tls;
mod unwritten;
