//! The migrator's metrics (janitor included), with their HELP text: registered at start-up
//! ([`chime_runtime::describe_metrics`]) so every series is there before it first moves.

use chime_runtime::MetricKind::{Counter, Gauge};
use chime_runtime::MetricSpec;

pub const METRICS: &[MetricSpec] = &[
    (
        "chime_migrator_buckets_held",
        Gauge,
        "Buckets this replica materialized in its last pass.",
    ),
    (
        "chime_migrator_watermark_lag_seconds",
        Gauge,
        "How far behind its lead the most behind timer of this replica's buckets is.",
    ),
    (
        "chime_migrator_occurrences_written_total",
        Counter,
        "Occurrence rows written ahead.",
    ),
    (
        "chime_migrator_occurrences_indexed_total",
        Counter,
        "Occurrences added to the hot index.",
    ),
    (
        "chime_migrator_shards_built_total",
        Counter,
        "Hot-index shards rebuilt from the database after Redis lost them.",
    ),
    (
        "chime_migrator_pass_failures_total",
        Counter,
        "Materialization passes that failed and were retried.",
    ),
    (
        "chime_migrator_partitions_created_total",
        Counter,
        "Day partitions of occurrences created ahead.",
    ),
    (
        "chime_migrator_partitions_analyzed_total",
        Counter,
        "Occurrence partitions analyzed again after outgrowing their statistics.",
    ),
    (
        "chime_migrator_partitions_dropped_total",
        Counter,
        "Day partitions dropped after their retention.",
    ),
    (
        "chime_migrator_purged_occurrences_total",
        Counter,
        "Finished occurrences deleted after their retention.",
    ),
    (
        "chime_migrator_purged_idempotency_keys_total",
        Counter,
        "Idempotency keys deleted after their retention.",
    ),
    (
        "chime_migrator_purged_timers_total",
        Counter,
        "Deleted timers removed for good after their retention.",
    ),
];
