//! The integration tests of this crate, one binary: each file below is a module (one link
//! instead of one per file). `support` holds their shared fixtures.

// Tests and their fixtures panic on purpose: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod brokers;
mod executor;
mod hosts;
mod http;
mod lanes;
mod leased;
mod misfire;
mod networks;
mod statements;
mod support;
mod unwritten;
