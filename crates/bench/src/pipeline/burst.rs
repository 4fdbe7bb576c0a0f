//! burst: one-shot timers due at the same instant.

use super::*;

pub(super) async fn burst(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("burst");
    let n = args.burst;
    let d = Deployment::start(args, "bench-burst", &[]).await?;
    let url = d.sink.url("/burst");
    // Time to create them all, with room: about 2,500 creates/s on this machine.
    let lead_ms = 3_000 + (n as i64) * 1_000 / 2_500;
    let due = now_ms() + lead_ms;
    let specs = (0..n)
        .map(|i| {
            spec(
                format!("burst-{i}"),
                &url,
                pb::schedule::Kind::At(pb_time(due)),
            )
        })
        .collect();
    let created = create_all(&d, specs).await?;
    ensure!(
        now_ms() < due - 500,
        "creating {n} timers took {created:?}, past the due instant: fewer timers or a faster machine"
    );
    until(due - 200).await;
    let cpu0 = CpuSample::take(&d.processes());
    let ds = collect(
        &d,
        n,
        Instant::now() + Duration::from_secs(60 + n as u64 / 1_000),
        Duration::from_secs(3),
    )
    .await;
    let cpu1 = CpuSample::take(&d.processes());
    d.stop().await;
    dump(args, "burst", &ds)?;

    let (delivered, duplicates) = report_delivery(&mut o, n, created, n, &ds);
    let lateness = Lateness::of(&ds);
    let drain = drain_per_second(&ds, due, delivered);
    o.target(
        drain >= 25_000.0,
        format!("drain {drain:.0}/s (target ≥ 25,000/s)"),
    );
    o.target(
        lateness.p99_ms <= 1_000,
        format!("p99 {} ms (target ≤ 1,000 ms)", lateness.p99_ms),
    );
    o.row("drain", format!("{drain:.0} firings/s"), "≥ 25,000/s");
    lateness_row(&mut o, "lateness", &lateness, "p99 ≤ 1,000 ms");
    o.figures = json!({
        "timers": n,
        "create_seconds": created.as_secs_f64(),
        "delivered": delivered,
        "duplicates": duplicates,
        "drain_per_second": drain,
        "lateness": lateness,
        "cpu_seconds_per_1000": cpu0.per_thousand(&cpu1, delivered),
    });
    Ok(o)
}
