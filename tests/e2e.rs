//! The end-to-end tests, one binary: each file below is a module (one link instead of one
//! per file). Their shared fixtures are this package's library, `support/`.

// Tests and their fixtures panic on purpose: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod broadcast;
mod brokers;
mod chains;
mod durability;
mod faults;
mod notifications;
mod observability;
mod overlap;
mod pipeline;
mod policies;
mod routing;
mod security;
mod semantics;
mod workers;
