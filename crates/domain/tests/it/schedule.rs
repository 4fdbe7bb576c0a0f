//! The fire-time math the migrator relies on: DST, month ends, leap days, bounds, and the
//! algebraic properties that make windowed materialization safe.

// Test helpers outside #[test] functions panic on purpose: a bad fixture is a test bug.
#![allow(clippy::unwrap_used)]

use chime_domain::{DateRange, Exclusions, Schedule, ScheduleInput, Timestamp};
use proptest::prelude::*;

mod policies;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn cron(expr: &str, tz: &str) -> Schedule {
    ScheduleInput {
        cron: Some(expr.into()),
        time_zone: Some(tz.into()),
        ..Default::default()
    }
    .resolve(ts("2020-01-01T00:00:00Z"), None, None)
    .unwrap()
}

fn cron_dst(expr: &str, tz: &str, gap: &str, repeat: &str) -> Schedule {
    let dst: chime_domain::DstPolicy =
        serde_json::from_value(serde_json::json!({"gap": gap, "repeat": repeat})).unwrap();
    ScheduleInput {
        cron: Some(expr.into()),
        time_zone: Some(tz.into()),
        dst: Some(dst),
        ..Default::default()
    }
    .resolve(ts("2020-01-01T00:00:00Z"), None, None)
    .unwrap()
}

const GAPS: &[&str] = &["next_instant", "shift", "skip"];
const REPEATS: &[&str] = &["first", "both"];

fn between(s: &Schedule, from: &str, to: &str) -> Vec<String> {
    s.occurrences_between(ts(from), ts(to))
        .map(|t| t.to_rfc3339())
        .collect()
}

#[test]
fn daily_0230_new_york_fires_once_on_spring_forward_day() {
    // 2026-03-08: clocks jump 02:00 EST → 03:00 EDT, so 02:30 does not exist that day.
    let s = cron("0 30 2 * * *", "America/New_York");
    assert_eq!(
        between(&s, "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"),
        vec![
            "2026-03-07T07:30:00.000Z", // 02:30 EST
            "2026-03-08T07:00:00.000Z", // 03:00 EDT, first instant after the gap
            "2026-03-09T06:30:00.000Z", // 02:30 EDT
        ]
    );
}

#[test]
fn daily_0230_new_york_fires_once_on_fall_back_day() {
    // 2026-11-01: clocks go 02:00 EDT → 01:00 EST; 02:30 happens once (EST).
    let s = cron("0 30 2 * * *", "America/New_York");
    assert_eq!(
        between(&s, "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z"),
        vec![
            "2026-10-31T06:30:00.000Z",
            "2026-11-01T07:30:00.000Z",
            "2026-11-02T07:30:00.000Z",
        ]
    );
}

#[test]
fn ambiguous_local_time_fires_once_at_its_first_instance() {
    // 01:30 occurs twice on 2026-11-01 in New York; a daily job fires at the first (EDT).
    let s = cron("30 1 * * *", "America/New_York");
    assert_eq!(
        between(&s, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"),
        vec!["2026-11-01T05:30:00.000Z"]
    );
}

#[test]
fn hourly_job_covers_both_halves_of_the_repeated_hour() {
    // An interval-style job runs in real time: the repeated hour yields two firings.
    let s = cron("0 * * * *", "Europe/Berlin");
    let fired = between(&s, "2026-10-25T00:00:00Z", "2026-10-25T03:00:00Z");
    assert_eq!(
        fired,
        vec![
            "2026-10-25T00:00:00.000Z", // 02:00 CEST
            "2026-10-25T01:00:00.000Z", // 02:00 CET
            "2026-10-25T02:00:00.000Z", // 03:00 CET
        ]
    );
}

#[test]
fn a_window_split_exactly_at_spring_forward_keeps_the_shifted_run() {
    // The 02:30 run is moved to 03:00 EDT = 07:00Z, the very instant the window splits at: the
    // second half must still find it although its search starts after the gap.
    let s = cron("0 30 2 * * *", "America/New_York");
    let b = "2026-03-08T07:00:00Z";
    let mut split = between(&s, "2026-03-07T07:00:00Z", b);
    split.extend(between(&s, b, "2026-03-09T07:00:00Z"));
    assert_eq!(
        split,
        between(&s, "2026-03-07T07:00:00Z", "2026-03-09T07:00:00Z")
    );
    assert_eq!(split.len(), 3);
}

#[test]
fn month_ends_and_leap_days() {
    let s = cron("0 0 31 * *", "UTC");
    assert_eq!(
        between(&s, "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"),
        vec![
            "2026-01-31T00:00:00.000Z",
            "2026-03-31T00:00:00.000Z",
            "2026-05-31T00:00:00.000Z"
        ]
    );
    let last = cron("0 12 L * *", "UTC");
    assert_eq!(
        between(&last, "2028-02-01T00:00:00Z", "2028-04-01T00:00:00Z"),
        vec!["2028-02-29T12:00:00.000Z", "2028-03-31T12:00:00.000Z"]
    );
    let leap = cron("0 0 29 2 *", "UTC");
    assert_eq!(
        between(&leap, "2025-01-01T00:00:00Z", "2033-01-01T00:00:00Z"),
        vec!["2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z"]
    );
}

#[test]
fn seconds_field_and_time_zone_are_honoured() {
    let s = cron("*/20 * * * * *", "Asia/Kolkata");
    assert_eq!(
        between(&s, "2026-01-01T00:00:05Z", "2026-01-01T00:01:00Z"),
        vec!["2026-01-01T00:00:20.000Z", "2026-01-01T00:00:40.000Z"]
    );
    // 02:00 Berlin (winter) is 01:00 UTC.
    let berlin = cron("0 0 2 * * *", "Europe/Berlin");
    assert_eq!(
        between(&berlin, "2026-11-21T00:00:00Z", "2026-11-22T00:00:00Z"),
        vec!["2026-11-21T01:00:00.000Z"]
    );
}

#[test]
fn start_and_end_bounds_are_inclusive() {
    let now = ts("2026-01-01T00:00:00Z");
    let s = ScheduleInput {
        every: Some("10s".into()),
        ..Default::default()
    }
    .resolve(
        now,
        Some(ts("2026-01-01T00:01:00Z")),
        Some(ts("2026-01-01T00:01:30Z")),
    )
    .unwrap();
    assert_eq!(
        between(&s, "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),
        vec![
            "2026-01-01T00:01:00.000Z",
            "2026-01-01T00:01:10.000Z",
            "2026-01-01T00:01:20.000Z",
            "2026-01-01T00:01:30.000Z",
        ]
    );
    let c = ScheduleInput {
        cron: Some("0 * * * *".into()),
        ..Default::default()
    }
    .resolve(
        now,
        Some(ts("2026-01-01T02:30:00Z")),
        Some(ts("2026-01-01T04:00:00Z")),
    )
    .unwrap();
    assert_eq!(
        between(&c, "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),
        vec!["2026-01-01T03:00:00.000Z", "2026-01-01T04:00:00.000Z"]
    );
}

#[test]
fn every_starts_one_interval_after_creation_and_one_shots_fire_once() {
    let now = ts("2026-01-01T00:00:00.250Z");
    let every = ScheduleInput {
        every: Some("30s".into()),
        ..Default::default()
    }
    .resolve(now, None, None)
    .unwrap();
    assert_eq!(
        every
            .next_runs(now, 3)
            .iter()
            .map(|t| t.to_rfc3339())
            .collect::<Vec<_>>(),
        vec![
            "2026-01-01T00:00:30.250Z",
            "2026-01-01T00:01:00.250Z",
            "2026-01-01T00:01:30.250Z"
        ]
    );
    let after = ScheduleInput {
        after: Some("90s".into()),
        ..Default::default()
    }
    .resolve(now, None, None)
    .unwrap();
    assert_eq!(
        after.next_runs(now, 5),
        vec![ts("2026-01-01T00:01:30.250Z")]
    );
    let at = ScheduleInput {
        at: Some("2026-11-22T10:00:00Z".into()),
        ..Default::default()
    }
    .resolve(now, None, None)
    .unwrap();
    assert_eq!(at.next_runs(now, 5), vec![ts("2026-11-22T10:00:00Z")]);
    assert!(at.is_one_shot() && after.is_one_shot() && !every.is_one_shot());
}

#[test]
fn invalid_schedules_name_their_field() {
    let now = ts("2026-06-01T00:00:00Z");
    let cases: [(ScheduleInput, &str); 9] = [
        (
            ScheduleInput {
                cron: Some("61 * * * *".into()),
                ..Default::default()
            },
            "schedule.cron",
        ),
        (
            ScheduleInput {
                cron: Some("* * *".into()),
                ..Default::default()
            },
            "schedule.cron",
        ),
        (
            ScheduleInput {
                cron: Some("0 0 30 2 *".into()),
                ..Default::default()
            },
            "schedule.cron",
        ),
        (
            ScheduleInput {
                cron: Some("0 * * * *".into()),
                time_zone: Some("Mars/Olympus".into()),
                ..Default::default()
            },
            "schedule.time_zone",
        ),
        (
            ScheduleInput {
                every: Some("500ms".into()),
                ..Default::default()
            },
            "schedule.every",
        ),
        (
            ScheduleInput {
                at: Some("2026-05-31T23:58:00Z".into()),
                ..Default::default()
            },
            "schedule.at",
        ),
        (
            ScheduleInput {
                at: Some("tomorrow".into()),
                ..Default::default()
            },
            "schedule.at",
        ),
        (
            ScheduleInput {
                after: Some("-5s".into()),
                ..Default::default()
            },
            "schedule.after",
        ),
        (
            ScheduleInput {
                every: Some("1s".into()),
                at: Some("2026-06-01T00:00:00Z".into()),
                ..Default::default()
            },
            "schedule",
        ),
    ];
    for (input, field) in cases {
        let err = input.resolve(now, None, None).unwrap_err();
        assert_eq!(err.field, field, "{input:?}: {err}");
    }
    assert_eq!(
        ScheduleInput::default()
            .resolve(now, None, None)
            .unwrap_err()
            .field,
        "schedule"
    );
    let backwards = ScheduleInput {
        every: Some("1s".into()),
        ..Default::default()
    }
    .resolve(
        now,
        Some(ts("2026-07-01T00:00:00Z")),
        Some(ts("2026-06-01T00:00:00Z")),
    );
    assert_eq!(backwards.unwrap_err().field, "end_at");
}

#[test]
fn stored_form_round_trips() {
    let now = ts("2026-06-01T00:00:00Z");
    for input in [
        ScheduleInput {
            cron: Some("0 0 2 * * *".into()),
            time_zone: Some("Europe/Berlin".into()),
            ..Default::default()
        },
        ScheduleInput {
            every: Some("1m30s".into()),
            ..Default::default()
        },
        ScheduleInput {
            at: Some("2026-06-02T00:00:00Z".into()),
            ..Default::default()
        },
        ScheduleInput {
            after: Some("90s".into()),
            ..Default::default()
        },
    ] {
        let s = input
            .resolve(now, Some(now), Some(ts("2027-01-01T00:00:00Z")))
            .unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            serde_json::from_str::<Schedule>(&json).unwrap(),
            s,
            "{json}"
        );
    }
    assert!(serde_json::from_str::<Schedule>(r#"{"cron":"nope"}"#).is_err());
    assert!(serde_json::from_str::<Schedule>(r#"{"every_ms":10,"at_ms":0}"#).is_err());
}

// ---- properties -------------------------------------------------------------------------

const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe", // 30-minute DST shift
    "Asia/Kolkata",        // half-hour offset, no DST
    "America/Santiago",    // DST change at local midnight
    "Pacific/Chatham",     // +12:45 / +13:45
];

const CRONS: &[&str] = &[
    "0 30 2 * * *",
    "30 1 * * *",
    "*/15 * * * *",
    "0 0 * * *",
    "0 */7 * * * *",
    "*/13 * 1-3 * * *",
    "0 0 L * *",
    "0 0 29 2 *",
    "0 0 12 * * MON-FRI",
    "15,45 * * * *",
];

/// DST transitions (UTC) of the zones above in 2026, where splitting a window is most fragile.
const TRANSITIONS: &[&str] = &[
    "2026-03-08T07:00:00Z",
    "2026-11-01T06:00:00Z",
    "2026-03-29T01:00:00Z",
    "2026-10-25T01:00:00Z",
    "2026-04-04T15:00:00Z",
    "2026-10-03T15:30:00Z",
    "2026-04-05T03:00:00Z",
    "2026-09-06T04:00:00Z",
    "2026-04-04T14:00:00Z",
    "2026-09-26T14:00:00Z",
];

fn schedule_strategy() -> impl Strategy<Value = Schedule> {
    let now = ts("2026-01-01T00:00:00Z");
    prop_oneof![
        (0..CRONS.len(), 0..ZONES.len()).prop_map(move |(c, z)| cron(CRONS[c], ZONES[z])),
        (
            0..CRONS.len(),
            0..ZONES.len(),
            0..GAPS.len(),
            0..REPEATS.len()
        )
            .prop_map(move |(c, z, g, r)| cron_dst(CRONS[c], ZONES[z], GAPS[g], REPEATS[r])),
        (1_000i64..7_200_000, 0i64..86_400_000).prop_map(move |(every, offset)| {
            ScheduleInput {
                every: Some(format!("{every}ms")),
                ..Default::default()
            }
            .resolve(now, Some(now.add_millis(offset)), None)
            .unwrap()
        }),
        (0i64..40 * 86_400_000).prop_map(move |offset| {
            ScheduleInput {
                at: Some(now.add_millis(offset).to_rfc3339()),
                ..Default::default()
            }
            .resolve(now, None, None)
            .unwrap()
        }),
    ]
}

/// Three instants a ≤ b ≤ c, often straddling a DST transition.
fn window_strategy() -> impl Strategy<Value = (Timestamp, Timestamp, Timestamp)> {
    let base = prop_oneof![
        (0i64..365 * 86_400_000).prop_map(|o| ts("2026-01-01T00:00:00Z").add_millis(o)),
        (0..TRANSITIONS.len(), -4 * 3_600_000i64..4 * 3_600_000)
            .prop_map(|(i, o)| ts(TRANSITIONS[i]).add_millis(o)),
    ];
    (base, 0i64..6 * 3_600_000, 0i64..2 * 86_400_000)
        .prop_map(|(b, before, after)| (b.add_millis(-before), b, b.add_millis(after)))
}

/// Zones with their 2026 transitions (UTC), for windows that split right at or inside them.
const ZONE_TRANSITIONS: &[(&str, &[&str])] = &[
    (
        "America/New_York",
        &["2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"],
    ),
    (
        "Europe/Berlin",
        &["2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"],
    ),
    (
        "Australia/Lord_Howe",
        &["2026-04-04T15:00:00Z", "2026-10-03T15:30:00Z"],
    ),
    (
        "America/Santiago",
        &["2026-04-05T03:00:00Z", "2026-09-06T04:00:00Z"],
    ),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn splitting_at_or_inside_a_dst_transition_changes_nothing(
        zone in 0..ZONE_TRANSITIONS.len(),
        which in 0usize..2,
        c in 0..CRONS.len(),
        split_min in prop_oneof![Just(0i64), Just(30), Just(-60), -180i64..180],
        g in 0..GAPS.len(),
        r in 0..REPEATS.len(),
    ) {
        let (name, transitions) = ZONE_TRANSITIONS[zone];
        let s = cron_dst(CRONS[c], name, GAPS[g], REPEATS[r]);
        let b = ts(transitions[which]).add_millis(split_min * 60_000);
        let (a, c) = (b.add_millis(-86_400_000), b.add_millis(86_400_000));
        let whole: Vec<_> = s.occurrences_between(a, c).collect();
        let mut split: Vec<_> = s.occurrences_between(a, b).collect();
        split.extend(s.occurrences_between(b, c));
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn occurrences_strictly_increase_and_stay_in_window(s in schedule_strategy(), (a, _b, c) in window_strategy()) {
        let got: Vec<_> = s.occurrences_between(a, c).collect();
        for w in got.windows(2) {
            prop_assert!(w[0] < w[1], "not increasing: {w:?}");
        }
        for t in &got {
            prop_assert!(a <= *t && *t < c, "{t} outside [{a}, {c})");
        }
    }

    #[test]
    fn splitting_a_window_changes_nothing(s in schedule_strategy(), (a, b, c) in window_strategy()) {
        let whole: Vec<_> = s.occurrences_between(a, c).collect();
        let mut split: Vec<_> = s.occurrences_between(a, b).collect();
        split.extend(s.occurrences_between(b, c));
        prop_assert_eq!(whole, split);
    }
}

/// What the migrator writes for a timer from `from` on, pass after pass as time moves by
/// `step`, until `until`: every run of every plan.
fn materialized(s: &Schedule, from: Timestamp, until: Timestamp, step: i64) -> Vec<Timestamp> {
    let horizon = chime_domain::Horizon::new(std::time::Duration::from_secs(600), 100);
    let mut runs = Vec::new();
    let mut watermark = from;
    let mut now = from;
    // Time keeps moving until the watermark passes `until`, as the migrator keeps running:
    // stopping when `now` reaches `until` would leave the last horizon unwritten.
    let give_up = until.add_millis(86_400_000);
    while watermark < until && now < give_up {
        let plan = s.plan(watermark, now, horizon);
        runs.extend(plan.runs.into_iter().filter(|r| *r < until));
        watermark = plan.watermark;
        now = now.add_millis(step);
    }
    runs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// The preview (`next_runs`) is exactly what materialization writes, limits included,
    /// across DST transitions.
    #[test]
    fn the_preview_is_what_materialization_writes(
        s in schedule_strategy(),
        (a, _b, _c) in window_strategy(),
        limit in prop_oneof![Just(None), (1u32..50).prop_map(Some)],
        step in 30_000i64..900_000,
        excluded in prop::collection::vec((-1i64..3, 0u64..2), 0..3),
    ) {
        // Exclusion calendars' dates around the window, in the schedule's zone.
        let zone = s.time_zone().tz();
        let day = chrono::DateTime::from_timestamp_millis(a.as_millis())
            .unwrap()
            .with_timezone(&zone)
            .date_naive();
        let ranges: Vec<DateRange> = excluded
            .iter()
            .map(|(offset, len)| {
                let first = day.checked_add_signed(chrono::Duration::days(*offset)).unwrap();
                DateRange { first, last: first.checked_add_days(chrono::Days::new(*len)).unwrap() }
            })
            .collect();
        let s = s.with_exclusions(Exclusions::new(ranges.clone()));
        let s = match limit {
            Some(n) if !s.is_one_shot() => s.limited(n, a).unwrap(),
            _ => s,
        };
        let until = a.add_millis(2 * 86_400_000);
        let preview: Vec<_> = s
            .next_runs(a, 200_000)
            .into_iter()
            .take_while(|r| *r < until)
            .collect();
        for run in &preview {
            let local = chrono::DateTime::from_timestamp_millis(run.as_millis())
                .unwrap()
                .with_timezone(&zone)
                .date_naive();
            prop_assert!(
                !ranges.iter().any(|r| r.first <= local && local <= r.last),
                "{} falls on an excluded date", run.to_rfc3339()
            );
        }
        prop_assert_eq!(materialized(&s, a, until, step), preview);
    }
}
