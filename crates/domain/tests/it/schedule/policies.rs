//! Cron's last-day, nearest-weekday and nth-weekday forms, and what each DST policy makes of
//! a local time in a gap or repeated.

use super::*;

#[test]
fn cron_last_weekday_nearest_and_nth_forms() {
    let at = |expr: &str, from: &str, n: usize| -> Vec<String> {
        cron(expr, "UTC")
            .next_runs(ts(from), n)
            .into_iter()
            .map(|t| t.to_rfc3339())
            .collect()
    };
    // L: the month's last day.
    assert_eq!(
        at("0 0 L * *", "2026-01-15T00:00:00Z", 3),
        [
            "2026-01-31T00:00:00.000Z",
            "2026-02-28T00:00:00.000Z",
            "2026-03-31T00:00:00.000Z"
        ]
    );
    // 15W: the weekday nearest the 15th (2026-02-15 is a Sunday: Monday the 16th).
    assert_eq!(
        at("0 0 15W * *", "2026-02-01T00:00:00Z", 1),
        ["2026-02-16T00:00:00.000Z"]
    );
    // 5#3: the third Friday; 5L: the last Friday.
    assert_eq!(
        at("0 0 * * 5#3", "2026-01-01T00:00:00Z", 1),
        ["2026-01-16T00:00:00.000Z"]
    );
    assert_eq!(
        at("0 0 * * 5L", "2026-01-01T00:00:00Z", 1),
        ["2026-01-30T00:00:00.000Z"]
    );
}

fn runs(s: &Schedule, from: &str, n: usize) -> Vec<String> {
    s.next_runs(ts(from), n)
        .into_iter()
        .map(|t| t.to_rfc3339())
        .collect()
}

#[test]
fn a_local_time_in_a_gap_fires_after_it_shifted_or_not_at_all() {
    // Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST.
    let from = "2026-03-28T12:00:00Z";
    let of = |gap| {
        runs(
            &cron_dst("30 2 * * *", "Europe/Berlin", gap, "first"),
            from,
            2,
        )
    };
    assert_eq!(
        of("next_instant"),
        ["2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"]
    );
    assert_eq!(
        of("shift"),
        ["2026-03-29T01:30:00.000Z", "2026-03-30T00:30:00.000Z"]
    );
    assert_eq!(
        of("skip"),
        ["2026-03-30T00:30:00.000Z", "2026-03-31T00:30:00.000Z"]
    );
    // Australia/Lord_Howe, 2026-10-04: 02:00 (+10:30) becomes 02:30 (+11): a 30-minute gap.
    let from = "2026-10-03T12:00:00Z";
    let lh = |gap| {
        runs(
            &cron_dst("15 2 * * *", "Australia/Lord_Howe", gap, "first"),
            from,
            1,
        )
    };
    assert_eq!(lh("next_instant"), ["2026-10-03T15:30:00.000Z"]);
    assert_eq!(lh("shift"), ["2026-10-03T15:45:00.000Z"]);
    // America/New_York, every 15 minutes: the gap's four slots shifted an hour on, beside
    // the hour's own runs, each once.
    let every15 = cron_dst("*/15 * * * *", "America/New_York", "shift", "first");
    assert_eq!(
        runs(&every15, "2026-03-08T06:50:00Z", 7),
        [
            "2026-03-08T07:00:00.000Z", // 03:00 EDT, and the shifted 02:00
            "2026-03-08T07:15:00.000Z",
            "2026-03-08T07:30:00.000Z",
            "2026-03-08T07:45:00.000Z",
            "2026-03-08T08:00:00.000Z",
            "2026-03-08T08:15:00.000Z",
            "2026-03-08T08:30:00.000Z",
        ]
    );
}

#[test]
fn a_repeated_local_time_fires_once_or_at_both_instances() {
    // Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    let from = "2026-10-24T12:00:00Z";
    let of = |repeat| {
        runs(
            &cron_dst("30 2 * * *", "Europe/Berlin", "next_instant", repeat),
            from,
            2,
        )
    };
    assert_eq!(
        of("first"),
        ["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"]
    );
    assert_eq!(
        of("both"),
        ["2026-10-25T00:30:00.000Z", "2026-10-25T01:30:00.000Z"]
    );
    // America/Santiago falls back at local midnight (00:00 -03 → 23:00 -04 the day before).
    let santiago = cron_dst("30 23 * * *", "America/Santiago", "next_instant", "both");
    assert_eq!(
        runs(&santiago, "2026-04-04T12:00:00Z", 2),
        ["2026-04-05T02:30:00.000Z", "2026-04-05T03:30:00.000Z"]
    );
    // A dst policy needs a cron schedule.
    let bad = ScheduleInput {
        every: Some("1m".into()),
        dst: Some(Default::default()),
        ..Default::default()
    };
    assert_eq!(
        bad.resolve(ts("2026-01-01T00:00:00Z"), None, None)
            .unwrap_err()
            .field,
        "schedule.dst"
    );
}
