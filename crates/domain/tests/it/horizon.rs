//! The materialization horizon: bounded by time and by count, never empty while the schedule
//! has a future, and a watermark that names exactly the first fire time not written.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chime_domain::{EXHAUSTED, Horizon, Schedule, ScheduleInput, Timestamp};
use proptest::prelude::*;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn resolve(input: ScheduleInput, now: Timestamp) -> Schedule {
    input.resolve(now, None, None).unwrap()
}

fn every(s: &str, now: Timestamp) -> Schedule {
    resolve(
        ScheduleInput {
            every: Some(s.into()),
            ..Default::default()
        },
        now,
    )
}

const MINUTE: Horizon = Horizon {
    lead: Duration::from_secs(60),
    max_rows: 100,
    spread: Duration::ZERO,
};

#[test]
fn an_every_second_timer_holds_one_lead_of_rows() {
    let now = ts("2026-01-01T00:00:00Z");
    let plan = every("1s", now).plan(now, now, MINUTE);
    assert_eq!(plan.runs.len(), 59, "t+1s .. t+59s");
    assert_eq!(plan.runs[0], ts("2026-01-01T00:00:01Z"));
    assert_eq!(plan.watermark, ts("2026-01-01T00:01:00Z"));
}

#[test]
fn the_count_bound_wins_over_a_long_lead() {
    let now = ts("2026-01-01T00:00:00Z");
    let long = Horizon {
        lead: Duration::from_secs(3600),
        max_rows: 10,
        spread: Duration::ZERO,
    };
    let plan = every("1s", now).plan(now, now, long);
    assert_eq!(plan.runs.len(), 10);
    assert_eq!(plan.watermark, ts("2026-01-01T00:00:11Z"));
}

#[test]
fn a_daily_timer_holds_its_next_run_however_far() {
    let now = ts("2026-01-01T15:00:00Z");
    let daily = resolve(
        ScheduleInput {
            cron: Some("0 0 2 * * *".into()),
            time_zone: Some("Europe/Berlin".into()),
            ..Default::default()
        },
        now,
    );
    let plan = daily.plan(now, now, MINUTE);
    assert_eq!(plan.runs, vec![ts("2026-01-02T01:00:00Z")]);
    assert_eq!(plan.watermark, ts("2026-01-03T01:00:00Z"));
    // Extending from the watermark once it comes near adds exactly the following run.
    let later = ts("2026-01-03T00:59:40Z");
    let next = daily.plan(plan.watermark, later, MINUTE);
    assert_eq!(next.runs, vec![ts("2026-01-03T01:00:00Z")]);
    assert_eq!(next.watermark, ts("2026-01-04T01:00:00Z"));
}

#[test]
fn a_one_shot_is_written_whole_and_exhausts_its_schedule() {
    let now = ts("2026-01-01T00:00:00Z");
    let next_year = resolve(
        ScheduleInput {
            at: Some("2027-01-01T00:00:00Z".into()),
            ..Default::default()
        },
        now,
    );
    let plan = next_year.plan(now, now, MINUTE);
    assert_eq!(plan.runs, vec![ts("2027-01-01T00:00:00Z")]);
    assert_eq!(plan.watermark, EXHAUSTED);
    let again = next_year.plan(plan.watermark, now, MINUTE);
    assert!(again.runs.is_empty());
    assert_eq!(again.watermark, EXHAUSTED);
}

#[test]
fn rows_already_ahead_count_against_the_bound() {
    let now = ts("2026-01-01T00:00:00Z");
    let ten = Horizon {
        lead: Duration::from_secs(3600),
        max_rows: 10,
        spread: Duration::ZERO,
    };
    let schedule = every("1s", now);
    let first = schedule.plan(now, now, ten);
    // At t+4s, t+4s .. t+10s (seven) are still ahead: three more may be written.
    let later = now.saturating_add(Duration::from_secs(4));
    let next = schedule.plan(first.watermark, later, ten);
    assert_eq!(next.runs.len(), 3);
    assert_eq!(next.watermark, ts("2026-01-01T00:00:14Z"));
}

#[test]
fn refill_starts_at_half_the_lead() {
    let now = ts("2026-01-01T00:00:00Z");
    assert_eq!(MINUTE.refill_before(now), ts("2026-01-01T00:00:30Z"));
}

proptest! {
    /// Extending plan after plan from each watermark writes every fire time exactly once,
    /// in order, whatever the lead, the count bound and the pace of the extensions.
    #[test]
    fn successive_plans_cover_the_schedule_without_gaps_or_repeats(
        interval_s in 1u64..120,
        lead_s in 1u64..600,
        max_rows in 1usize..50,
        pace_s in 1u64..300,
    ) {
        let start = ts("2026-03-29T00:00:00Z");
        let schedule = every(&format!("{interval_s}s"), start);
        let horizon = Horizon {
            lead: Duration::from_secs(lead_s),
            max_rows,
            spread: Duration::ZERO,
        };
        let end = start.saturating_add(Duration::from_secs(3600));
        let mut written = Vec::new();
        let mut now = start;
        let mut from = start;
        while now < end {
            let plan = schedule.plan(from, now, horizon);
            prop_assert!(plan.runs.iter().all(|r| *r >= from && *r < plan.watermark));
            written.extend(plan.runs);
            let ahead = written.iter().filter(|r| **r >= now).count();
            prop_assert!(ahead <= max_rows, "{ahead} rows ahead, bound {max_rows}");
            from = plan.watermark;
            now = now.saturating_add(Duration::from_secs(pace_s));
        }
        let expected: Vec<Timestamp> = schedule.occurrences_between(start, from).collect();
        prop_assert_eq!(written, expected);
    }
}

/// Timers created together get their own leads, spread over the last quarter, so the
/// migrator extends them over many passes rather than in one; each timer's is fixed.
#[test]
fn timers_created_together_get_leads_spread_over_a_quarter() {
    let leads: Vec<Duration> = (1..=1_000)
        .map(|i| {
            Horizon::new(Duration::from_secs(60), 100)
                .of_timer(chime_domain::TimerId::new(i).unwrap())
                .lead
        })
        .collect();
    let (min, max) = (leads.iter().min().unwrap(), leads.iter().max().unwrap());
    assert!(*min >= Duration::from_secs(45) && *max <= Duration::from_secs(60));
    assert!(*max - *min >= Duration::from_secs(14), "{min:?}..{max:?}");
    // Consecutive ids are not neighbours: a quarter of them in each quarter of the range.
    for q in 0..4u64 {
        let lo = Duration::from_millis(45_000 + q * 3_750);
        let hi = lo + Duration::from_millis(3_750);
        let n = leads.iter().filter(|l| **l >= lo && **l < hi).count();
        assert!((150..350).contains(&n), "quarter {q}: {n}");
    }
    let id = chime_domain::TimerId::new(7).unwrap();
    assert_eq!(Horizon::DEFAULT.of_timer(id), Horizon::DEFAULT.of_timer(id));
    assert_eq!(Horizon::DEFAULT.of_timer(id).max_rows, 100);
    assert_eq!(MINUTE.of_timer(id), MINUTE, "no spread, no change");
}
