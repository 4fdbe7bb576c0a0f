//! beside-burst: every-second timers while a burst drains. A burst is a backlog for as long
//! as it drains; the every-second timers due meanwhile should keep their second (issue 23:
//! "the every-1s timers' p99 unaffected"). A minute's run of a few seconds, where the
//! population scenario takes an hour to show the same.

use super::*;

pub(super) async fn beside_burst(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("beside-burst");
    let (rate, seconds, n) = (args.beside_rate, args.beside_duration, args.burst);
    let d = Deployment::start(args, "bench-beside", &[]).await?;
    let every_path = "/beside-every";
    let burst_path = "/beside-burst";
    // Time to create them all, with room: about 2,500 creates/s on this machine.
    let lead_ms = 3_000 + ((rate + n) as i64) * 1_000 / 2_500;
    let (mut specs, start) = every_second(
        rate,
        seconds,
        &d.sink.url(every_path),
        lead_ms,
        Counted::of(args),
    );
    // A third of the way in: the every-second timers are on time before it, and there are
    // seconds left after it drains.
    let burst_at = start + seconds as i64 * 1_000 / 3;
    let burst_url = d.sink.url(burst_path);
    specs.extend((0..n).map(|i| {
        spec(
            format!("burst-{i}"),
            &burst_url,
            pb::schedule::Kind::At(pb_time(burst_at)),
        )
    }));
    let created = create_all(&d, specs).await?;
    ensure!(
        now_ms() < start - 500,
        "creating {} timers took {created:?}, past the first firing",
        rate + n
    );
    let expected_every = rate * seconds as usize;
    let end = start + seconds as i64 * 1_000;
    until(end).await;
    collect(
        &d,
        expected_every + n,
        Instant::now() + Duration::from_secs(60 + n as u64 / 1_000),
        Duration::from_secs(3),
    )
    .await;
    // Where keys waited or went back, for reading the lateness below.
    let counts = Deployment::hand_off_line(&d.hand_off_counts().await);
    let received = d.sink.received();
    d.stop().await;
    let of_path = |path: &str| {
        let r: Vec<_> = received
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect();
        deliveries(&r)
    };
    let (every, burst) = (of_path(every_path), of_path(burst_path));
    let all: Vec<Delivery> = every.iter().chain(&burst).cloned().collect();
    dump(args, "beside-burst", &all)?;
    let (delivered, duplicates) =
        report_delivery(&mut o, rate + n, created, expected_every + n, &all);

    let (burst_delivered, _) = distinct_and_duplicates(&burst);
    let drain = drain_per_second(&burst, burst_at, burst_delivered);
    let drained_at = burst.iter().map(|d| d.at_ms).max().unwrap_or(burst_at);
    // The every-second firings due after the burst's instant until it has drained. One
    // due at the instant itself (at 1,000 a second, one timer's phase falls on it) is one
    // of the burst's keys to Chime and drains with it: it has a row of its own.
    let during: Vec<Delivery> = every
        .iter()
        .filter(|d| d.scheduled_ms > burst_at && d.scheduled_ms <= drained_at)
        .cloned()
        .collect();
    let (at_burst, beside): (Vec<Delivery>, Vec<Delivery>) = every
        .iter()
        .cloned()
        .partition(|d| d.scheduled_ms == burst_at);
    let before: Vec<Delivery> = every
        .iter()
        .filter(|d| d.scheduled_ms < burst_at)
        .cloned()
        .collect();
    let (l_during, l_before) = (Lateness::of(&during), Lateness::of(&before));
    let late_by_a_second = beside.iter().filter(|d| d.lateness_ms() >= 1_000).count();
    let (every_delivered, _) = distinct_and_duplicates(&every);
    let missed = expected_every.saturating_sub(every_delivered) + late_by_a_second;

    o.row(
        "burst drain",
        format!(
            "{drain:.0} firings/s, drained {:.1} s after due",
            (drained_at - burst_at) as f64 / 1_000.0
        ),
        "",
    );
    lateness_row(&mut o, "burst lateness", &Lateness::of(&burst), "");
    o.row("keys refused, waiting, handed back", counts, "");
    lateness_row(&mut o, "every second, before the burst", &l_before, "");
    lateness_row(
        &mut o,
        "every second, while it drains",
        &l_during,
        "p99 ≤ 20 ms",
    );
    lateness_row(
        &mut o,
        "every second, due at the burst's instant",
        &Lateness::of(&at_burst),
        "",
    );
    o.row(
        "every second, seconds missed",
        format!("{missed} (arrived ≥ 1 s late or not at all, beside the burst's instant)"),
        "0",
    );
    o.target(
        l_during.p99_ms <= 20,
        format!(
            "every-second timers while the burst drained: p99 {} ms (target ≤ 20 ms)",
            l_during.p99_ms
        ),
    );
    o.target(
        missed == 0,
        format!("{missed} every-second firings ≥ 1 s late or missing (target 0)"),
    );
    o.figures = json!({
        "every_second_timers": rate,
        "seconds": seconds,
        "burst": n,
        "delivered": delivered,
        "duplicates": duplicates,
        "burst_drain_per_second": drain,
        "burst_lateness": Lateness::of(&burst),
        "every_second_before": l_before,
        "every_second_while_draining": l_during,
        "every_second_at_burst_instant": Lateness::of(&at_burst),
        "every_second_missed": missed,
    });
    Ok(o)
}
