//! The integration tests of this crate, one binary: each file below is a module (one link
//! instead of one per file). `support` holds their shared fixtures.

// Tests and their fixtures panic on purpose: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod activity;
mod backfill;
mod binary;
mod calendars;
mod callbacks;
mod chains;
mod compat;
mod console;
mod dead_letters;
mod grpc;
mod indexing;
mod notifications;
mod quotas;
mod rest;
mod schedules;
mod scope;
mod support;
mod tenancy;
mod tls;
