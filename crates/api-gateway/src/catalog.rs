//! The gateway's metrics, with their HELP text: registered at start-up
//! ([`chime_runtime::describe_metrics`]) so every series is there before it first moves.

use chime_runtime::MetricKind::{Counter, LabelledCounter};
use chime_runtime::MetricSpec;

pub const METRICS: &[MetricSpec] = &[
    (
        "chime_gateway_timers_created_total",
        Counter,
        "Timers created (single and batched).",
    ),
    (
        "chime_gateway_auth_failures_total",
        LabelledCounter,
        "Requests refused for a missing or invalid bearer token, by reason (missing, malformed, unknown, expired).",
    ),
    (
        "chime_gateway_index_write_failures_total",
        Counter,
        "Occurrences whose hot-index write after the commit failed; they fire through the database.",
    ),
    (
        "chime_gateway_index_writes_skipped_total",
        Counter,
        "Occurrences not indexed after a commit while Redis was failing; they fire through the database.",
    ),
];
