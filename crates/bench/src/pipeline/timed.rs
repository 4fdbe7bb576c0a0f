//! What steady and every-second report of a periodic run: each 10-s window's lateness
//! beside what the machine and PostgreSQL did meanwhile, the slow seconds, CPU per process,
//! and memory after the warm-up.

use super::*;

/// The shortest warm-up before memory growth counts, in seconds.
const WARM_AT_LEAST_S: u64 = 45;

/// What steady and every-second report: each 10-s window's p99 against `limit_ms`, the
/// drift of the p50, CPU per process, and each process's memory after its warm-up.
pub(super) fn timed_windows(run: Periodic, limit_ms: i64) -> Outcome {
    let Periodic {
        mut o,
        ds,
        start,
        cpu,
        rss,
        events,
        pg,
        pressure,
        ..
    } = run;
    let overall = Lateness::of(&ds);
    let per_window = windows(&ds, start, 10_000);
    let worst_window = per_window.iter().max_by_key(|(_, l)| l.p99_ms);
    let worst = worst_window.map_or(0, |(_, l)| l.p99_ms);
    let splits = split_windows(&ds, start, 10_000);
    for (from_s, l) in &per_window {
        // A slow window names what PostgreSQL did in the background meanwhile.
        let background = in_window(&events, start, *from_s, 10_000);
        let label = match background.as_str() {
            "" => format!("lateness {from_s}–{} s", from_s + 10),
            b => format!("lateness {from_s}–{} s ({b})", from_s + 10),
        };
        lateness_row(&mut o, &label, l, &format!("p99 ≤ {limit_ms} ms"));
        o.target(
            l.p99_ms <= limit_ms,
            format!(
                "window from {from_s} s: p99 {} ms (target ≤ {limit_ms} ms)",
                l.p99_ms
            ),
        );
    }
    // Drift: the typical callback of the last window against the first.
    let drift = match (per_window.first(), per_window.last()) {
        (Some((_, a)), Some((_, b))) => b.p50_ms - a.p50_ms,
        _ => 0,
    };
    o.target(
        drift <= 10,
        format!("p50 drifted {drift} ms from the first window to the last (target ≤ 10 ms)"),
    );
    lateness_row(&mut o, "lateness, all", &overall, "");
    o.row(
        "worst 10 s window p99",
        format!("{worst} ms"),
        &format!("≤ {limit_ms} ms"),
    );
    o.row(
        "drift of p50, first → last window",
        format!("{drift} ms"),
        "≤ 10 ms",
    );
    // Where the worst window's lateness arose: before the executors sent, or after.
    if let Some(split) = worst_window.and_then(|(from_s, _)| splits.get(from_s)) {
        o.row(
            "worst window p99: sent late, in transit",
            format!(
                "{} ms, {} ms",
                split.before_send.p99_ms, split.in_transit.p99_ms
            ),
            "",
        );
        o.figures["worst_window_split"] = json!(split);
    }
    // A window fails on a few slow seconds: which, and whether late before the send.
    let late = late_seconds(&ds, start, limit_ms);
    o.row(
        &format!("seconds with p99 over {limit_ms} ms"),
        describe_late(&late),
        "none",
    );
    o.figures["late_seconds"] = json!(late);
    // Which windows ran on a full machine (a task waiting for a core).
    let pressed = pressure.windows(start, 10_000);
    if !pressed.is_empty() {
        o.row(
            "cpu pressure by window (time a task waited for a core)",
            super::pressure::describe(&pressed, 10),
            "",
        );
    }
    for (process, secs) in &cpu {
        o.row(
            &format!("cpu {process}"),
            format!("{secs:.3} s / 1,000 firings"),
            "",
        );
    }
    if let Some(pg) = pg {
        o.row("postgres writes per firing", pg.describe(), "");
    }
    // Warm-up: the first fifth of the run, at most a minute, but at least the migrator's
    // first round of refills (timers created during the run are first extended half a lead,
    // 30 s, after their creates), within the run's first half.
    let seconds = o.figures["seconds"].as_u64().unwrap_or(0);
    let warm_s = (seconds.min(300) / 5).max(WARM_AT_LEAST_S.min(seconds / 2));
    let warm_samples = (warm_s * 1000 / rss.period_ms.max(1)).max(1) as usize;
    let growth = rss.growth(warm_samples);
    for g in &growth {
        o.row(
            &format!("rss {}", g.process),
            format!(
                "{:.0} MiB warm, {:.0} MiB after (last {:.0})",
                g.warm_mib, g.after_mib, g.last_mib
            ),
            "no growth after warm-up",
        );
        o.target(
            g.flat,
            format!(
                "{} grew from {:.0} MiB after warm-up to {:.0} MiB",
                g.process, g.warm_mib, g.after_mib
            ),
        );
    }
    o.figures["lateness"] = json!(overall);
    o.figures["worst_window_p99_ms"] = json!(worst);
    o.figures["drift_p50_ms"] = json!(drift);
    o.figures["windows"] = per_window
        .iter()
        .map(|(from_s, l)| {
            json!({
                "from_second": from_s,
                "lateness": l,
                "sent_split": splits.get(from_s),
                "postgres_background": in_window(&events, start, *from_s, 10_000),
                "cpu_pressure_some": pressed.iter().find(|p| p.from_second == *from_s).map(|p| p.some),
            })
        })
        .collect();
    o.figures["postgres_events"] = json!(events);
    o.figures["rss"] = json!({"growth": growth, "trace": rss});
    o
}

/// `late` as "at 3 s: p50 2 / p99 96 ms (sent late 75), …", the first ten.
fn describe_late(late: &[LateSecond]) -> String {
    if late.is_empty() {
        return "none".into();
    }
    let mut text: Vec<String> = late
        .iter()
        .take(10)
        .map(|s| {
            let sent = s
                .sent_split
                .map(|x| format!(" (sent late {})", x.before_send.p99_ms))
                .unwrap_or_default();
            format!(
                "at {} s: p50 {} / p99 {} ms{sent}",
                s.second, s.lateness.p50_ms, s.lateness.p99_ms
            )
        })
        .collect();
    if late.len() > 10 {
        text.push(format!("{} more", late.len() - 10));
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(second: i64, p99_ms: i64) -> LateSecond {
        LateSecond {
            second,
            lateness: Lateness {
                count: 10,
                p50_ms: 1,
                p90_ms: p99_ms,
                p99_ms,
                max_ms: p99_ms,
            },
            sent_split: None,
        }
    }

    #[test]
    fn slow_seconds_are_listed_ten_at_most() {
        assert_eq!(describe_late(&[]), "none");
        assert_eq!(describe_late(&[second(3, 96)]), "at 3 s: p50 1 / p99 96 ms");
        let many: Vec<LateSecond> = (0..12).map(|s| second(s, 60)).collect();
        let text = describe_late(&many);
        assert!(
            text.starts_with("at 0 s: ") && text.ends_with(", 2 more"),
            "{text}"
        );
        assert!(!text.contains("at 10 s"), "{text}");
    }
}
