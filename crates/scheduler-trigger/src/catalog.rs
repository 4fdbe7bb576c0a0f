//! The scheduler's metrics (sweeper included), with their HELP text: registered at start-up
//! ([`chime_runtime::describe_metrics`]) so every series is there before it first moves.

use chime_runtime::MetricKind::{Counter, Gauge, Histogram, LabelledCounter};
use chime_runtime::MetricSpec;

pub const METRICS: &[MetricSpec] = &[
    (
        "chime_scheduler_handed_off_total",
        Counter,
        "Task keys executors accepted from this scheduler.",
    ),
    (
        "chime_scheduler_handoff_lateness_seconds",
        Histogram,
        "Hand-off to an executor minus due time, 0 when handed off ahead.",
    ),
    (
        "chime_scheduler_handoff_deferred_total",
        Counter,
        "Task keys no executor accepted, kept in their shard and offered again.",
    ),
    (
        "chime_scheduler_handoff_refused_total",
        LabelledCounter,
        "Hand-offs executors refused, by reason.",
    ),
    (
        "chime_scheduler_skipped_total",
        Counter,
        "Runs of a lagging shard marked skipped before their hand-off: their timer stopped, or its next run was due already (those also in chime_scheduler_misfired_total).",
    ),
    (
        "chime_scheduler_misfired_total",
        Counter,
        "Runs of a lagging shard skipped before their hand-off because their timer's next run was due already (the default misfire policy).",
    ),
    (
        "chime_scheduler_shard_fallbacks_total",
        Counter,
        "Shards read from the database because Redis did not have them.",
    ),
    (
        "chime_scheduler_shards_held",
        Gauge,
        "Shard leases this replica holds and works.",
    ),
    (
        "chime_scheduler_members",
        Gauge,
        "Live scheduler replicas as this replica sees them.",
    ),
    (
        "chime_scheduler_lag_seconds",
        Gauge,
        "How late the oldest due key of this replica's shards not yet handed off is: 0 while keys go out on time, growing while executors cannot take what is due.",
    ),
    (
        "chime_sweeper_handed_off_total",
        Counter,
        "Overdue or abandoned occurrences, and unwritten runs found lost, that the sweeper handed to executors.",
    ),
    (
        "chime_sweeper_skipped_total",
        Counter,
        "Overdue occurrences, and unwritten runs found lost, that the sweeper skipped by their misfire policy.",
    ),
    (
        "chime_sweeper_unwritten_checked_total",
        Counter,
        "Fire times of timers whose runs are unwritten that the sweeper looked for rows of, once each as they passed sweep_after.",
    ),
    (
        "chime_sweeper_abandoned_total",
        Counter,
        "At-most-once occurrences whose executor died after claiming, marked failed.",
    ),
];
