//! The integration tests of this crate, one binary: each file below is a module (one link
//! instead of one per file).

// Tests and their fixtures panic on purpose: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod memory;
mod mysql;
mod postgres;
mod postgres_plans;
mod redis;
mod sqlite;
