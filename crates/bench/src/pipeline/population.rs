//! population: ten million timers held at once. 99 % daily cron timers over many time zones,
//! 1 % every minute, a thousand every second; created by batch while the fast ones fire. It
//! reports what holding them costs (database and Redis size, the migrator's upkeep per
//! hour, every process's memory against a deployment holding 1 % of them) and whether the
//! every-second timers keep their tail while the migrator works.

use super::*;

/// Zones the daily timers are spread over: both hemispheres, half-hour and 45-minute
/// offsets, zones with and without DST.
const ZONES: [&str; 24] = [
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "Europe/Moscow",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "America/St_Johns",
    "America/Mexico_City",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Asia/Dubai",
    "Asia/Singapore",
    "Australia/Sydney",
    "Australia/Adelaide",
    "Pacific/Auckland",
    "Pacific/Chatham",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Atlantic/Azores",
];

/// The every-second timers' 10-s window p99 while the migrator works.
const SECONDS_P99_MS: i64 = 20;

/// A process "does not grow with the count of timers" when, holding all of them, it stays
/// within this factor (plus [`RSS_SLACK_MIB`]) of what it used holding 1 %.
const RSS_FACTOR: f64 = 1.5;
const RSS_SLACK_MIB: f64 = 32.0;

/// How the population splits: (every second, every minute, daily cron).
fn mix(population: usize) -> (usize, usize, usize) {
    let seconds = (population / 10_000).clamp(10, 1_000);
    let minutes = population / 100;
    (
        seconds,
        minutes,
        population.saturating_sub(seconds + minutes),
    )
}

/// The `i`-th daily timer: its minute, hour and zone walk through every combination.
fn daily(i: usize, url: &str) -> pb::TimerSpec {
    let (minute, hour) = (i % 60, (i / 60) % 24);
    let zone = ZONES[(i / 1_440) % ZONES.len()];
    spec(
        format!("daily-{i}"),
        url,
        pb::schedule::Kind::Cron(pb::CronSchedule {
            expression: format!("{minute} {hour} * * *"),
            time_zone: zone.to_owned(),
            dst: None,
        }),
    )
}

/// The `i`-th timer of `prefix` firing `every`, from its create on: its phase falls where
/// its create did, as a user's does.
fn periodic_spec(prefix: &str, i: usize, every: &str, url: &str) -> pb::TimerSpec {
    spec(
        format!("{prefix}-{i}"),
        url,
        pb::schedule::Kind::Every(every.into()),
    )
}

/// The every-second timers' callbacks, scheduled within `[from, to)`, and every other
/// callback's lateness (the minute and daily timers) in the same span.
struct Phase {
    seconds: Vec<Delivery>,
    others: Vec<Delivery>,
}

impl Phase {
    fn of(received: &[chime_test_support::sink::Received], from: i64, to: i64) -> Self {
        let (mut seconds, mut others) = (Vec::new(), Vec::new());
        for r in received {
            let Some(d) = deliveries(std::slice::from_ref(r)).pop() else {
                continue;
            };
            if d.scheduled_ms < from || d.scheduled_ms >= to {
                continue;
            }
            if r.path == "/second" {
                seconds.push(d);
            } else {
                others.push(d);
            }
        }
        Self { seconds, others }
    }
}

/// Resident MiB of each process now.
fn rss_now(processes: &[(String, u32)]) -> BTreeMap<String, f64> {
    let mut trace = RssTrace::default();
    trace.sample(processes);
    trace
        .mib
        .into_iter()
        .filter_map(|(p, v)| Some((p, *v.last()?)))
        .collect()
}

/// Redis' `used_memory`, in bytes (through `redis-cli`, which comes with the server).
fn redis_used_memory() -> anyhow::Result<u64> {
    let out = std::process::Command::new("redis-cli")
        .args(["-u", &testkit::redis_url(), "info", "memory"])
        .output()
        .context("redis-cli")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("used_memory in INFO memory")
}

/// Waits until the every-second callbacks of a second arrive, typically, less than a second
/// late (the sink read every second, its log emptied as it goes), at most `limit`. How long
/// it took.
async fn settle(sink: &chime_test_support::sink::Sink, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let last_second = Lateness::of(&Phase::of(&sink.take(), i64::MIN, i64::MAX).seconds);
        if last_second.count > 0 && last_second.p50_ms < 1_000 {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}

pub(super) async fn population(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("population");
    let (n_seconds, n_minutes, n_daily) = mix(args.population);
    let redis_before = redis_used_memory()?;
    let d = Deployment::start(args, "bench-population", &[]).await?;
    let mut processes = d.processes();
    processes.extend(
        pids_named("redis-server")
            .into_iter()
            .map(|p| ("redis-server".to_owned(), p)),
    );

    // 1 %: the fast timers, as users create them: the every-second ones a REST call each,
    // the every-minute ones by batch, none with a start or an end, so each fires from its
    // create on and the minute's creates fall together.
    let (second_url, minute_url, daily_url) = (
        d.sink.url("/second"),
        d.sink.url("/minute"),
        d.sink.url("/daily"),
    );
    create_every(
        &d.cluster.rest,
        n_seconds,
        "1s",
        &second_url,
        "second",
        Counted::of(args),
    )
    .await?;
    create_streamed(
        &d,
        n_minutes,
        |i| periodic_spec("minute", i, "1m", &minute_url),
        |_| {},
    )
    .await?;
    let start = now_ms();

    // Baseline: the every-second timers beside 1 % of the population.
    let baseline = (args.population_window / 5).clamp(10, 60) as i64;
    let base_from = start + 2_000;
    let base_to = base_from + baseline * 1_000;
    until(base_to + 1_000).await;
    let base = Phase::of(&d.sink.take(), base_from, base_to);
    let rss_small = rss_now(&processes);

    // The other 99 %, by batch, while the fast timers fire. Callbacks are read as they come
    // so the sink's log stays small; the every-second timers' lateness while creating is
    // kept.
    let creating_from = now_ms();
    let stop = tokio_util::sync::CancellationToken::new();
    let read = async {
        let mut seconds = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            let stopping = stop.is_cancelled();
            seconds.extend(Phase::of(&d.sink.take(), creating_from, i64::MAX).seconds);
            if stopping {
                break seconds;
            }
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => {}
            }
        }
    };
    let step = (n_daily / 10).max(1);
    let mut next_report = step;
    let bulk_started = Instant::now();
    let create = async {
        let made = create_streamed(
            &d,
            n_daily,
            |i| daily(i, &daily_url),
            |done| {
                if done >= next_report {
                    next_report += step;
                    eprintln!(
                        "  {done} of {n_daily} daily timers created ({:.0}/s)",
                        done as f64 / bulk_started.elapsed().as_secs_f64()
                    );
                }
            },
        )
        .await;
        stop.cancel();
        made
    };
    let (bulk, creating_seconds) = tokio::join!(create, read);
    let bulk = bulk?;
    let while_creating = Lateness::of(&creating_seconds);
    drop(creating_seconds);
    let rss_full = rss_now(&processes);

    // What holding them takes.
    let pool = d._db.pg()?.store.pool().clone();
    let timers: i64 = sqlx::query_scalar("SELECT count(*) FROM timers")
        .fetch_one(&pool)
        .await?;
    let size = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<i64>>(sql)
                .fetch_one(&pool)
                .await
                .map(|b| b.unwrap_or(0) as f64 / (1u64 << 20) as f64)
        }
    };
    let timers_mib = size("SELECT pg_total_relation_size('timers')::bigint").await?;
    let occurrences_mib = size(
        "SELECT sum(pg_total_relation_size(inhrelid))::bigint FROM pg_inherits \
         WHERE inhparent = 'occurrences'::regclass",
    )
    .await?;
    let schema_mib = size(
        "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')",
    )
    .await?;
    let redis_mib = redis_used_memory()?.saturating_sub(redis_before) as f64 / (1u64 << 20) as f64;

    // Creating at full speed on a small machine leaves firings behind; the window measures
    // holding the timers, so it starts once the every-second timers arrive on time again.
    let settled = settle(&d.sink, Duration::from_secs(args.population_settle)).await;

    // The window: every-second timers' tail and the migrator's upkeep, all timers held.
    let window = args.population_window as i64;
    let win_from = now_ms() + 1_000;
    let win_to = win_from + window * 1_000;
    // What arrived before is dropped half a second ahead of the window, when none of its
    // firings can have arrived yet. Dropped at its start, a firing due in its first
    // milliseconds and delivered before this task woke was dropped with them and counted
    // missing (1 of 300,000 in one 10 M run, in the first window).
    until(win_from - 500).await;
    d.sink.take();
    until(win_from).await;
    let written0 = d
        .cluster
        .migrator
        .counter("chime_migrator_occurrences_written_total")
        .await;
    let cpu0 = CpuSample::take(&d.processes());
    let mut trace = RssTrace {
        period_ms: 5_000,
        ..Default::default()
    };
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut seen = Vec::new();
    while now_ms() < win_to {
        tick.tick().await;
        trace.sample(&processes);
        seen.extend(d.sink.take());
    }
    let cpu1 = CpuSample::take(&d.processes());
    let written = d
        .cluster
        .migrator
        .counter("chime_migrator_occurrences_written_total")
        .await
        - written0;
    until(win_to + 2_000).await;
    seen.extend(d.sink.take());
    d.stop().await;
    let win = Phase::of(&seen, win_from, win_to);

    // Report.
    o.row(
        "timers held",
        format!("{timers} ({n_daily} daily cron over {} zones, {n_minutes} every 1m, {n_seconds} every 1s)", ZONES.len()),
        &format!("{}", args.population),
    );
    if timers < args.population as i64 {
        o.failed
            .push(format!("{timers} timers held of {}", args.population));
    }
    let rate = n_daily as f64 / bulk.as_secs_f64();
    o.row(
        "created by batch",
        format!("{n_daily} in {:.0} s ({rate:.0}/s)", bulk.as_secs_f64()),
        "",
    );
    o.row(
        "database",
        format!("{schema_mib:.0} MiB (timers {timers_mib:.0}, occurrences {occurrences_mib:.0})"),
        "",
    );
    o.row("redis used_memory", format!("+{redis_mib:.0} MiB"), "");
    let settled_row = match settled {
        Some(t) => format!("{:.0} s after the last create", t.as_secs_f64()),
        None => format!("not within {} s: measured anyway", args.population_settle),
    };
    o.row("every 1s on time again", settled_row, "");
    if settled.is_none() {
        o.missed.push(format!(
            "the every-second timers were not on time again within {} s of the last create",
            args.population_settle
        ));
    }
    let used = cpu0.used(&cpu1);
    let per_hour = |p: &str| used.get(p).copied().unwrap_or(0.0) * 3_600.0 / window as f64;
    let written_per_hour = written * 3_600.0 / window as f64;
    o.row(
        "migrator upkeep per hour",
        format!(
            "{written_per_hour:.0} occurrences, migrator cpu {:.0} s",
            per_hour("migrator"),
        ),
        "",
    );
    let mut cpu_hour = BTreeMap::new();
    for p in used.keys() {
        cpu_hour.insert(p.clone(), (per_hour(p) * 10.0).round() / 10.0);
    }
    // PostgreSQL's share is the firing's and the upkeep's together.
    o.row(
        "cpu per hour, window",
        cpu_hour
            .iter()
            .filter(|(_, s)| **s >= 1.0)
            .map(|(p, s)| format!("{p} {s:.0} s"))
            .collect::<Vec<_>>()
            .join(", "),
        "",
    );
    let windows_10s = windows(&win.seconds, win_from, 10_000);
    let worst = windows_10s.iter().map(|(_, l)| l.p99_ms).max().unwrap_or(0);
    let base_l = Lateness::of(&base.seconds);
    let win_l = Lateness::of(&win.seconds);
    lateness_row(&mut o, "every 1s, beside 1 % (baseline)", &base_l, "");
    lateness_row(&mut o, "every 1s, while creating", &while_creating, "");
    lateness_row(
        &mut o,
        "every 1s, all held",
        &win_l,
        &format!("every 10 s window p99 ≤ {SECONDS_P99_MS} ms"),
    );
    o.row(
        "every 1s, worst 10 s window p99",
        format!("{worst} ms"),
        &format!("≤ {SECONDS_P99_MS} ms"),
    );
    o.target(
        worst <= SECONDS_P99_MS,
        format!("every-second timers' worst 10-s window p99 {worst} ms with all timers held (target ≤ {SECONDS_P99_MS} ms)"),
    );
    let expected = n_seconds * window as usize;
    let (got, duplicates) = distinct_and_duplicates(&win.seconds);
    o.row(
        "every 1s, firings in the window",
        format!("{got} of {expected}, {duplicates} duplicates"),
        "all, once",
    );
    if got < expected {
        o.failed.push(format!(
            "{} of {expected} every-second firings in the window missing",
            expected - got
        ));
    }
    lateness_row(
        &mut o,
        "minute and daily timers",
        &Lateness::of(&win.others),
        "",
    );
    let mut growth = Vec::new();
    for (p, full) in &rss_full {
        let small = rss_small.get(p).copied().unwrap_or(0.0);
        let high = trace
            .mib
            .get(p)
            .and_then(|v| v.iter().copied().reduce(f64::max))
            .unwrap_or(*full)
            .max(*full);
        let bounded = high <= small * RSS_FACTOR + RSS_SLACK_MIB;
        o.row(
            &format!("rss {p}"),
            format!("{small:.0} MiB at 1 %, {full:.0} at 100 %, high {high:.0}"),
            "≤ 1.5× + 32 MiB of 1 %",
        );
        // Redis holds the hot window, the database the rest; Chime's processes hold neither.
        if p != "redis-server" {
            o.target(
                bounded,
                format!("{p} grew from {small:.0} MiB at 1 % of the timers to {high:.0} MiB"),
            );
        }
        growth.push(json!({"process": p, "mib_at_1_percent": small, "mib_at_all": full, "mib_high": high, "bounded": bounded}));
    }
    o.figures = json!({
        "population": args.population,
        "timers": timers,
        "daily": n_daily,
        "every_minute": n_minutes,
        "every_second": n_seconds,
        "create_seconds": bulk.as_secs_f64(),
        "creates_per_second": rate,
        "database_mib": schema_mib,
        "timers_mib": timers_mib,
        "occurrences_mib": occurrences_mib,
        "redis_used_memory_mib": redis_mib,
        "window_seconds": window,
        "settled_seconds": settled.map(|t| t.as_secs_f64()),
        "occurrences_written_per_hour": written_per_hour,
        "cpu_seconds_per_hour": cpu_hour,
        "every_second": {
            "baseline": base_l,
            "while_creating": while_creating,
            "all_held": win_l,
            "worst_window_p99_ms": worst,
            "windows": windows_10s.iter().map(|(from_second, l)| json!({"from_second": from_second, "lateness": l})).collect::<Vec<_>>(),
            "expected": expected,
            "delivered": got,
            "duplicates": duplicates,
        },
        "others": Lateness::of(&win.others),
        "rss": {"growth": growth, "trace": trace},
    });
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_million_split_as_the_issue_asks() {
        assert_eq!(mix(10_000_000), (1_000, 100_000, 9_899_000));
        let (s, m, d) = mix(3_000);
        assert_eq!(s + m + d, 3_000);
        assert!(s >= 10 && m >= 1);
    }

    #[test]
    fn daily_timers_cover_every_minute_of_the_day_in_every_zone() {
        let cron = |i| match daily(i, "http://x/").schedule.and_then(|s| s.kind) {
            Some(pb::schedule::Kind::Cron(c)) => (c.expression, c.time_zone),
            _ => panic!("not cron"),
        };
        assert_eq!(cron(0), ("0 0 * * *".into(), "UTC".into()));
        assert_eq!(cron(61), ("1 1 * * *".into(), "UTC".into()));
        assert_eq!(cron(1_440), ("0 0 * * *".into(), "Europe/Berlin".into()));
        let distinct: std::collections::HashSet<_> = (0..1_440 * ZONES.len()).map(cron).collect();
        assert_eq!(distinct.len(), 1_440 * ZONES.len());
    }
}
