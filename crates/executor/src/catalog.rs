//! The executor's metrics, with their HELP text: registered at start-up
//! ([`chime_runtime::describe_metrics`]) so every series is there before it first moves.

use chime_runtime::MetricKind::{Counter, Gauge, Histogram, LabelledCounter};
use chime_runtime::MetricSpec;

pub const METRICS: &[MetricSpec] = &[
    (
        "chime_executor_host_waits_total",
        Counter,
        "Task keys that waited, unclaimed, because their callback host had executor.max_per_host callbacks running.",
    ),
    (
        "chime_executor_deferred_total",
        Counter,
        "Task keys handed back to the hot index for later: no room to wait for their host, or no slot when their turn came.",
    ),
    (
        "chime_executor_workers_connected",
        Gauge,
        "Registered workers (WorkerService/Connect streams) connected to this executor.",
    ),
    (
        "chime_executor_worker_forwards_total",
        Counter,
        "Worker deliveries this executor handed to another executor's worker (none of the group connected here).",
    ),
    (
        "chime_executor_accepted_total",
        Counter,
        "Task keys accepted from schedulers.",
    ),
    (
        "chime_executor_rejected_full_total",
        Counter,
        "Task keys refused because every callback slot was taken.",
    ),
    (
        "chime_executor_not_claimed_total",
        Counter,
        "Accepted keys this executor could not claim (claimed elsewhere or no longer due).",
    ),
    (
        "chime_executor_skipped_total",
        Counter,
        "Occurrences skipped at fire time: timer disabled, deleted or changed, older than its catch_up_window, or misfired.",
    ),
    (
        "chime_executor_misfired_total",
        Counter,
        "Recurring runs skipped at fire time because their timer's next run was due already (misfire policy fire_once or skip).",
    ),
    (
        "chime_executor_overlap_skipped_total",
        Counter,
        "Occurrences skipped by their timer's overlap policy (skip, buffer_one) beside one in flight.",
    ),
    (
        "chime_executor_overlap_waiting_total",
        Counter,
        "Offers of an overlap: buffer_one occurrence left waiting for the one in flight to end.",
    ),
    (
        "chime_executor_overlap_cancelled_total",
        Counter,
        "Callbacks this executor aborted because a newer occurrence of their overlap: cancel_other timer started.",
    ),
    (
        "chime_executor_outcomes_total",
        LabelledCounter,
        "Outcomes recorded, by status.",
    ),
    (
        "chime_executor_notifications_total",
        LabelledCounter,
        "Failure notifications, by type (run.dead, timer.failing, timer.recovered) and result (delivered, failed after their retries, dropped while the notifier was behind).",
    ),
    (
        "chime_executor_lateness_seconds",
        Histogram,
        "Callback start minus the occurrence's due time.",
    ),
    (
        "chime_executor_claim_seconds",
        Histogram,
        "Time one claim round took, from a batch of accepted keys to their callbacks started or waiting for their due time; rounds run one after another, so a long one holds the keys behind it.",
    ),
    (
        "chime_executor_in_flight",
        Gauge,
        "Accepted task keys not finished yet (at most executor.max_in_flight).",
    ),
];
