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
    let pg_pool = d._db.pg().ok().map(|f| f.store.pool().clone());
    let pg0 = PgCounters::take(pg_pool.as_ref()).await;
    let statements0 = PgStatements::take(pg_pool.as_ref()).await;
    let cpu0 = CpuSample::take(&d.processes());
    let ds = collect(
        &d,
        n,
        Instant::now() + Duration::from_secs(60 + n as u64 / 1_000),
        Duration::from_secs(3),
    )
    .await;
    let cpu1 = CpuSample::take(&d.processes());
    let pg1 = PgCounters::take(pg_pool.as_ref()).await;
    let statements1 = PgStatements::take(pg_pool.as_ref()).await;
    let counts = d.hand_off_counts().await;
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
    let split = SentSplit::of(&ds);
    if let Some(s) = &split {
        o.row(
            "p99: sent late, in transit",
            format!("{} ms, {} ms", s.before_send.p99_ms, s.in_transit.p99_ms),
            "",
        );
    }
    // WAL only: row counts reach the statistics up to 10 s late from a backend gone idle,
    // and the creates' connections go idle just before the burst.
    let wal = pg0
        .zip(pg1)
        .map(|(a, b)| a.per_firing(&b, delivered).wal_bytes_per_firing);
    if let Some(wal) = wal {
        o.row("postgres WAL per firing", format!("{wal:.0} B"), "");
    }
    // Draining is CPU-bound: the cores it kept busy, the sink's included, say how far a
    // faster drain needs less CPU per firing or more cores.
    let cpu = cpu0.per_thousand(&cpu1, delivered);
    let with_sink: f64 = cpu.values().sum();
    let cores = with_sink * drain / 1_000.0;
    o.row(
        "cpu while draining",
        format!(
            "{:.3} s / 1,000 firings, {with_sink:.3} with the sink: {cores:.2} cores busy",
            total_but_sink(&cpu)
        ),
        "",
    );
    o.row(
        "keys refused, waiting, handed back",
        counts
            .iter()
            .map(|(name, n)| format!("{name} {n:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        "",
    );
    o.figures = json!({
        "hand_off_counts": counts.iter().copied().collect::<std::collections::BTreeMap<_, _>>(),
        "postgres_wal_bytes_per_firing": wal,
        "cores_busy_while_draining": cores,
        "timers": n,
        "create_seconds": created.as_secs_f64(),
        "delivered": delivered,
        "duplicates": duplicates,
        "drain_per_second": drain,
        "lateness": lateness,
        "sent_split": split,
        "cpu_seconds_per_1000": cpu,
    });
    statements_row(&mut o, statements0.zip(statements1), delivered);
    Ok(o)
}
