//! materialize: one migrator writing a million occurrences.

use super::*;

/// Timers written straight to PostgreSQL (no gateway, so nothing is materialized early),
/// then one migrator process's first step, timed from its start to the step's end as its
/// metrics report it.
pub(super) async fn materialize(args: &Args) -> anyhow::Result<Outcome> {
    const PER_TIMER: usize = 100;
    let mut o = Outcome::new("materialize");
    let timers = args.materialize.div_ceil(PER_TIMER);
    let total = timers * PER_TIMER;
    let db = testkit::pg().await;
    let redis = testkit::redis().await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let buckets = BucketCount::new(args.buckets).map_err(|e| anyhow::anyhow!("{e}"))?;
    let store = PgStore::from_pool(db.store.pool().clone(), clock, buckets);
    // Each timer fires every second for exactly PER_TIMER seconds, inside the step's window.
    let now = Timestamp::from_millis(now_ms());
    let start = now.add_millis(60_000);
    let end = start.add_millis(PER_TIMER as i64 * 1000 - 1);
    let made = Instant::now();
    for chunk in (0..timers).collect::<Vec<_>>().chunks(1_000) {
        let batch = chunk
            .iter()
            .map(|i| -> anyhow::Result<CreateTimer> {
                let schedule = ScheduleInput {
                    every: Some("1s".into()),
                    ..Default::default()
                }
                .resolve(now, Some(start), Some(end))?;
                Ok(CreateTimer {
                    timer: NewTimer {
                        spec: TimerSpec {
                            app: AppName::parse("bench")?,
                            name: TimerName::parse(format!("m-{i}"))?,
                            schedule,
                            callback: CallbackInput {
                                url: Some("http://127.0.0.1:9/unused".into()),
                                ..Default::default()
                            }
                            .parse()?,
                            retry: Default::default(),
                            misfire: Default::default(),
                            delivery: Default::default(),
                            labels: Default::default(),
                            on_complete: Default::default(),
                            catch_up_window: None,
                            overlap: Default::default(),
                            window: None,
                            exclude_calendars: Vec::new(),
                            then: Default::default(),
                        },
                        enabled: true,
                        runs_unwritten: false,
                    },
                    idempotency: None,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        store.create_timers(batch, Horizon::DEFAULT).await?;
    }
    // Creates write each timer's first occurrence; take them back, so the migrator writes
    // the whole million, as it does for timers it has never materialized.
    sqlx::query("DELETE FROM occurrences")
        .execute(db.store.pool())
        .await?;
    sqlx::query("UPDATE timers SET materialized_until = 0")
        .execute(db.store.pool())
        .await?;
    eprintln!(
        "  {timers} timers written in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let dir = log_dir("bench-materialize");
    let admin = format!("127.0.0.1:{}", free_port());
    let mut env: Vec<(&str, String)> = vec![
        ("CHIME_DATABASE_URL", db.url()),
        ("CHIME_REDIS_URL", testkit::redis_url()),
        ("CHIME_REDIS_PREFIX", redis.backend.prefix().to_owned()),
        ("CHIME_ADMIN_ADDR", admin.clone()),
        ("CHIME_BUCKETS", args.buckets.to_string()),
        ("CHIME_LOG", "info".into()),
        // A lead past the whole window above, and room for all of its rows.
        ("CHIME_MIGRATOR__LEAD", "300s".into()),
        ("CHIME_MIGRATOR__MAX_AHEAD", PER_TIMER.to_string()),
    ];
    env.extend(args.env.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let metrics = chime_runtime::http_client().build()?;
    let started = Instant::now();
    let mut migrator = Service::start("migrator", "chime-migrator", &[], &env, &dir);
    let cpu0 = CpuSample::take(&[("migrator".into(), migrator.pid())]);
    let deadline = started + Duration::from_secs(120);
    let (_, indexed) = loop {
        let text = match metrics.get(format!("http://{admin}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let written = counter(&text, "chime_migrator_occurrences_written_total");
        if written >= total as f64 {
            break (
                written,
                counter(&text, "chime_migrator_occurrences_indexed_total"),
            );
        }
        if !migrator.running() || Instant::now() > deadline {
            bail!(
                "the migrator wrote {written} of {total} occurrences:\n{}",
                migrator.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wall = started.elapsed().as_secs_f64();
    let cpu1 = CpuSample::take(&[("migrator".into(), migrator.pid())]);
    migrator.stop().await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM occurrences")
        .fetch_one(db.store.pool())
        .await?;
    if rows != total as i64 || indexed < total as f64 {
        o.failed.push(format!(
            "{rows} rows and {indexed} hot-index members for {total} occurrences"
        ));
    }
    let rate = total as f64 / wall;
    o.target(
        wall <= 20.0,
        format!("{total} occurrences took {wall:.1} s (target ≤ 20 s)"),
    );
    o.row(
        "occurrences",
        format!("{total} ({timers} timers × {PER_TIMER})"),
        "",
    );
    o.row("wall time", format!("{wall:.2} s"), "1,000,000 in ≤ 20 s");
    o.row("rate", format!("{rate:.0} rows/s"), "");
    o.figures = json!({
        "occurrences": total,
        "timers": timers,
        "rows": rows,
        "indexed": indexed,
        "wall_seconds": wall,
        "rows_per_second": rate,
        "cpu_seconds_per_1000": cpu0.per_thousand(&cpu1, total),
    });
    Ok(o)
}

/// The sum of a Prometheus counter's samples in `text`.
pub(super) fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        // From +0: a float `sum` of nothing is -0, printed "-0".
        .fold(0.0, |a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::counter;

    #[test]
    fn a_counter_sums_its_series_and_reads_zero_when_absent() {
        let text = "# HELP x\nchime_a_total{reason=\"full\"} 3\nchime_a_total{reason=\"gone\"} 4\nchime_b_total 9\n";
        assert_eq!(counter(text, "chime_a_total"), 7.0);
        // Printed as a report prints it: an absent counter is "0", never "-0".
        assert_eq!(format!("{:.0}", counter(text, "chime_c_total")), "0");
    }
}
