//! steady, every-second and sparse: timers firing every second at a rate.

use super::*;

/// `rate` timers firing every second for `seconds`, their phases spread evenly over the
/// second, starting `lead_ms` from now. Returns the specs, the first instant and the count
/// of firings expected.
pub(super) fn every_second(
    rate: usize,
    seconds: u64,
    url: &str,
    lead_ms: i64,
    misfire: Counted,
) -> (Vec<pb::TimerSpec>, i64) {
    let start = now_ms() + lead_ms;
    let end = start + seconds as i64 * 1000 - 1;
    let specs = (0..rate)
        .map(|i| {
            let phase = (i as i64) * 1000 / rate as i64;
            pb::TimerSpec {
                start_at: Some(pb_time(start + phase)),
                end_at: Some(pb_time(end)),
                misfire: misfire.pb(),
                ..spec(
                    format!("every-{i}"),
                    url,
                    pb::schedule::Kind::Every("1s".into()),
                )
            }
        })
        .collect();
    (specs, start)
}

/// How a periodic run's timers are made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// As users make them: `every 1s` without `start_at` or `end_at`, one REST create each
    /// from 16 clients while the earlier ones fire, phases where their creates fell.
    #[default]
    Unbounded,
    /// Created by batch before the first firing, phases spread evenly by `start_at`, each
    /// ending with the run (`end_at`): the `…-bounded` extras.
    Bounded,
}

/// What a periodic run does besides firing.
#[derive(Default)]
pub(super) struct Extra {
    pub(super) shape: Shape,
    /// Settings for every service.
    pub(super) env: Vec<(&'static str, &'static str)>,
    /// Finished occurrences, eight days old, written straight to PostgreSQL before the
    /// timers are created.
    pub(super) seed_rows: usize,
    /// Creates (each of REST and gRPC, single and batch, 8 clients) during the firing.
    pub(super) creates: usize,
}

/// What a periodic run measured.
pub(super) struct Periodic {
    pub(super) o: Outcome,
    pub(super) ds: Vec<Delivery>,
    pub(super) start: i64,
    pub(super) cpu: BTreeMap<String, f64>,
    /// The creates made during the firing.
    pub(super) api: Vec<crate::api::ApiReport>,
    /// Occurrences the janitor removed during the run.
    pub(super) purged: f64,
    /// Resident memory of Chime's processes and Redis, every 5 s of the firing.
    pub(super) rss: RssTrace,
    /// PostgreSQL's checkpoints and autovacuums during the firing, seen every 5 s.
    pub(super) events: Vec<PgEvent>,
    /// What PostgreSQL wrote per firing (PostgreSQL setups).
    pub(super) pg: Option<PgWork>,
    /// The machine's CPU pressure through the run, creates included.
    pub(super) pressure: super::pressure::Pressure,
}

/// RSS is sampled this often during a periodic run.
const RSS_PERIOD: Duration = Duration::from_secs(5);

/// steady, sparse and purge: the same shape at different rates.
pub(super) async fn periodic(
    args: &Args,
    name: &'static str,
    rate: usize,
    seconds: u64,
    extra: Extra,
) -> anyhow::Result<Periodic> {
    let mut o = Outcome::new(name);
    let d = Deployment::start(args, leak(&format!("bench-{name}")), &extra.env).await?;
    // Rotation waits while the history is seeded and the timers are created, so the janitor
    // drops the old day during the firing, not before it.
    let mut paused = None;
    if extra.seed_rows > 0 {
        let pg = d._db.pg()?;
        let mut pause = pg.store.pause_rotation().await?;
        let t = Instant::now();
        seed_finished(pg.store.pool(), &mut pause, extra.seed_rows).await?;
        paused = Some(pause);
        eprintln!(
            "  {} finished occurrences written in {:.1} s",
            extra.seed_rows,
            t.elapsed().as_secs_f64()
        );
    }
    let url = d.sink.url(&format!("/{name}"));
    let firing = Firing::begin(&d, extra.shape, rate, seconds, &url, Counted::of(args)).await?;
    let (start, end) = (firing.start, firing.start + seconds as i64 * 1000);
    let gather = Gather::start(d.sink.clone(), start, end);
    // From before the first firing, so the window of the creates has its figure too.
    let pressure = tokio::spawn(super::pressure::Pressure::read_until(end + 1_000));
    // CPU is measured from the last create on: creating timers is the api scenario's.
    let firing = firing.created().await?;
    let measured_from = now_ms().max(start);
    ensure!(
        measured_from < end - 1000,
        "creating {rate} timers took {:?}, past the run's end",
        firing.took()
    );
    let expected = firing.expected(start, end);
    if let Some(pause) = paused {
        pause.resume().await?;
    }
    let pg_pool = d._db.pg().ok().map(|f| f.store.pool().clone());
    let pg0 = PgCounters::take(pg_pool.as_ref()).await;
    let statements0 = PgStatements::take(pg_pool.as_ref()).await;
    let cpu0 = CpuSample::take(&d.processes());
    let mut watched = d.processes();
    watched.extend(
        pids_named("redis-server")
            .into_iter()
            .map(|p| ("redis-server".to_owned(), p)),
    );
    let watch_pool = pg_pool.clone();
    let memory = tokio::spawn(async move {
        let mut trace = RssTrace {
            period_ms: RSS_PERIOD.as_millis() as u64,
            ..Default::default()
        };
        let mut watch = match watch_pool {
            Some(pool) => Some(PgWatch::start(pool).await),
            None => None,
        };
        let mut tick = tokio::time::interval(RSS_PERIOD);
        while now_ms() < end {
            tick.tick().await;
            trace.sample(&watched);
            if let Some(w) = &mut watch {
                w.sample().await;
            }
        }
        (trace, watch.map(|w| w.events).unwrap_or_default())
    });
    let creating = (extra.creates > 0).then(|| {
        let (rest, grpc) = (d.cluster.rest.clone(), d.cluster.grpc.clone());
        tokio::spawn(async move {
            crate::api::measure(&rest, &grpc, "during", extra.creates, 8, &[]).await
        })
    });
    until(end).await;
    let cpu1 = CpuSample::take(&d.processes());
    let pg1 = PgCounters::take(pg_pool.as_ref()).await;
    let statements1 = PgStatements::take(pg_pool.as_ref()).await;
    let (rss, events) = memory.await?;
    let pressure = pressure.await?;
    let api = match creating {
        Some(task) => task.await??,
        None => Vec::new(),
    };
    let purged = d
        .cluster
        .migrator
        .counter("chime_migrator_purged_occurrences_total")
        .await;
    let ds = gather
        .finish(
            expected,
            Instant::now() + Duration::from_secs(30),
            Duration::from_secs(2),
        )
        .await;
    // Where keys waited or went back on their way, for reading the lateness.
    let hand_offs = d.hand_off_counts().await;
    d.stop().await;
    dump(args, name, &ds)?;
    let (delivered, duplicates) = report_delivery(&mut o, rate, firing.took(), expected, &ds);
    let missing = firing.missing(&ds, start, end);
    // Per firing due while CPU was measured.
    let measured = ds
        .iter()
        .filter(|d| d.scheduled_ms >= measured_from)
        .map(|d| d.key.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len();
    let cpu = cpu0.per_thousand(&cpu1, measured);
    let pg = pg0.zip(pg1).map(|(a, b)| a.per_firing(&b, measured));
    o.figures = json!({
        "shape": format!("{:?}", extra.shape).to_lowercase(),
        "postgres_per_firing": pg,
        "rate_per_second": rate,
        "seconds": seconds,
        "expected": expected,
        "delivered": delivered,
        "duplicates": duplicates,
        "missing": missing,
        "create_seconds": firing.took().as_secs_f64(),
        "measured_from_second": (measured_from - start) as f64 / 1000.0,
        "cpu_seconds_per_1000": cpu,
        "hand_off_counts": hand_offs.iter().copied().collect::<std::collections::BTreeMap<_, _>>(),
    });
    o.row(
        "hand-offs that waited or went back",
        Deployment::hand_off_line(&hand_offs),
        "",
    );
    statements_row(&mut o, statements0.zip(statements1), measured);
    Ok(Periodic {
        o,
        ds,
        start,
        cpu,
        api,
        purged,
        rss,
        events,
        pg,
        pressure,
    })
}

/// The timers of a periodic run while they are created: bounded ones are all created before
/// the first firing, unbounded ones while the earlier ones fire.
struct Firing {
    /// The first instant measured: every firing due from here to the run's end counts.
    start: i64,
    making: Making,
}

enum Making {
    Bounded(Made),
    Unbounded(tokio::task::JoinHandle<anyhow::Result<Created>>),
}

/// The timers of a periodic run once created.
enum Made {
    Bounded {
        rate: usize,
        seconds: u64,
        took: Duration,
    },
    Unbounded(Created),
}

impl Firing {
    async fn begin(
        d: &Deployment,
        shape: Shape,
        rate: usize,
        seconds: u64,
        url: &str,
        misfire: Counted,
    ) -> anyhow::Result<Self> {
        match shape {
            Shape::Bounded => {
                let lead_ms = 3_000 + (rate as i64) * 1_000 / 2_500;
                let (specs, start) = every_second(rate, seconds, url, lead_ms, misfire);
                let took = create_all(d, specs).await?;
                ensure!(
                    now_ms() < start - 500,
                    "creating {rate} timers took {took:?}, past the first firing"
                );
                until(start - 200).await;
                Ok(Self {
                    start,
                    making: Making::Bounded(Made::Bounded {
                        rate,
                        seconds,
                        took,
                    }),
                })
            }
            Shape::Unbounded => {
                // An every-1s timer created now fires first a second from now.
                let start = now_ms() + 1000;
                let (rest, url) = (d.cluster.rest.clone(), url.to_owned());
                let creating = tokio::spawn(async move {
                    create_every(&rest, rate, "1s", &url, "every", misfire).await
                });
                Ok(Self {
                    start,
                    making: Making::Unbounded(creating),
                })
            }
        }
    }

    /// Waits for the creates to finish.
    async fn created(self) -> anyhow::Result<Made> {
        Ok(match self.making {
            Making::Bounded(made) => made,
            Making::Unbounded(task) => Made::Unbounded(task.await??),
        })
    }
}

impl Made {
    fn took(&self) -> Duration {
        match self {
            Self::Bounded { took, .. } => *took,
            Self::Unbounded(c) => c.took,
        }
    }

    fn expected(&self, from: i64, to: i64) -> usize {
        match self {
            Self::Bounded { rate, seconds, .. } => rate * *seconds as usize,
            Self::Unbounded(c) => c.expected(from, to),
        }
    }

    fn missing(&self, ds: &[Delivery], from: i64, to: i64) -> Missing {
        match self {
            Self::Unbounded(c) => c.missing(ds, from, to),
            // Each bounded timer fires exactly `seconds` times.
            Self::Bounded { rate, seconds, .. } => {
                let per = per_timer(ds);
                let whole = per.values().filter(|n| **n >= *seconds as usize).count();
                let distinct = distinct_and_duplicates(ds).0;
                Missing {
                    firings: (rate * *seconds as usize).saturating_sub(distinct),
                    timers: rate.saturating_sub(whole),
                }
            }
        }
    }
}

pub(super) async fn steady(args: &Args, shape: Shape) -> anyhow::Result<Outcome> {
    let name = match shape {
        Shape::Unbounded => "steady",
        Shape::Bounded => "steady-bounded",
    };
    let extra = Extra {
        shape,
        ..Extra::default()
    };
    let run = periodic(args, name, args.rate, args.duration, extra).await?;
    let total = total_but_sink(&run.cpu);
    let mut o = timed_windows(run, 20);
    o.row(
        "cpu, all but the sink",
        format!("{total:.3} s / 1,000 firings"),
        "≤ 0.12 s",
    );
    o.target(
        total <= 0.12,
        format!("{total:.3} CPU-seconds per 1,000 firings, sink excluded (target ≤ 0.12)"),
    );
    o.figures["cpu_total_per_1000"] = json!(total);
    Ok(o)
}

/// every-second: many timers firing every second (10,000/s by default) for two minutes:
/// every 10-s window's p99 within 50 ms, and no timer misses a second (each firing arrives,
/// and within a second of its due time).
pub(super) async fn every_second_scenario(args: &Args, shape: Shape) -> anyhow::Result<Outcome> {
    let name = match shape {
        Shape::Unbounded => "every-second",
        Shape::Bounded => "every-second-bounded",
    };
    let extra = Extra {
        shape,
        ..Extra::default()
    };
    let run = periodic(args, name, args.fast_rate, args.fast_duration, extra).await?;
    let mut o = timed_windows(run, 50);
    let missing: Missing = serde_json::from_value(o.figures["missing"].clone()).unwrap_or_default();
    let max = o.figures["lateness"]["max_ms"].as_i64().unwrap_or(0);
    o.row(
        "seconds missed",
        format!(
            "{} firings of {} timers (slowest firing {max} ms)",
            missing.firings, missing.timers
        ),
        "0, every firing within 1 s",
    );
    o.target(
        missing.firings == 0 && max < 1_000,
        format!(
            "{} firings missing from {} timers, slowest {max} ms (target: none missing, all < 1 s)",
            missing.firings, missing.timers
        ),
    );
    Ok(o)
}

pub(super) async fn sparse(args: &Args) -> anyhow::Result<Outcome> {
    let Periodic { mut o, ds, .. } = periodic(
        args,
        "sparse",
        args.sparse_rate,
        args.sparse_duration,
        Extra::default(),
    )
    .await?;
    let l = Lateness::of(&ds);
    o.target(
        l.p99_ms <= 10,
        format!("p99 {} ms (target ≤ 10 ms)", l.p99_ms),
    );
    lateness_row(&mut o, "lateness", &l, "p99 ≤ 10 ms");
    o.figures["lateness"] = json!(l);
    Ok(o)
}
