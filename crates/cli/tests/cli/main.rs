//! The `chime` binary against a running `chime dev`: every subcommand, error exits
//! included, one module per area.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod chains;
mod dev_config;
mod notifications;
mod options;
mod support;
mod timers;
mod worker;
