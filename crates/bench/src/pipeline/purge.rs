//! purge: every-second timers and creates on a database full of old rows, once with
//! retention keeping them and once with the janitor removing them.

use super::*;

/// The same firing and creating load twice, on a database holding `purge_rows` finished
/// occurrences eight days old: once with retention keeping them (3650 days), once with the
/// janitor removing them (the default 7 days, run every second). Retention must leave the
/// firing and create tails as they were.
pub(super) async fn purge(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("purge");
    let creates = (args.purge_rate / 4).max(100);
    let mut runs = Vec::new();
    for (label, env) in [
        ("kept", vec![("CHIME_RETENTION__HISTORY", "3650d")]),
        ("purged", vec![("CHIME_RETENTION__INTERVAL", "1s")]),
    ] {
        let run = periodic(
            args,
            "purge",
            args.purge_rate,
            args.purge_duration,
            Extra {
                shape: Shape::Bounded,
                env,
                seed_rows: args.purge_rows,
                creates,
            },
        )
        .await?;
        o.failed
            .extend(run.o.failed.iter().map(|f| format!("{label}: {f}")));
        runs.push((label, run));
    }
    let worst = |r: &Periodic| {
        windows(&r.ds, r.start, 10_000)
            .iter()
            .map(|(_, l)| l.p99_ms)
            .max()
            .unwrap_or(0)
    };
    let create_p99 = |r: &Periodic| {
        r.api
            .iter()
            .filter(|a| a.name.ends_with("single"))
            .map(|a| a.p99_ms)
            .fold(0.0, f64::max)
    };
    let mut figures = serde_json::Map::new();
    for (label, r) in &runs {
        let l = Lateness::of(&r.ds);
        lateness_row(&mut o, &format!("{label}: lateness, all"), &l, "");
        o.row(
            &format!("{label}: worst 10 s window p99"),
            format!("{} ms", worst(r)),
            "within 20 ms or 1.5× of kept",
        );
        o.row(
            &format!("{label}: single create p99"),
            format!("{:.1} ms", create_p99(r)),
            "within 20 ms or 1.5× of kept",
        );
        o.row(
            &format!("{label}: occurrences purged"),
            format!("{:.0}", r.purged),
            "",
        );
        figures.insert(
            (*label).to_owned(),
            json!({
                "lateness": l,
                "worst_window_p99_ms": worst(r),
                "single_create_p99_ms": create_p99(r),
                "purged": r.purged,
                "creates": r.api,
            }),
        );
    }
    let (kept, purged) = (&runs[0].1, &runs[1].1);
    o.target(
        purged.purged >= args.purge_rows as f64,
        format!(
            "the janitor removed {:.0} of {} old rows during the run",
            purged.purged, args.purge_rows
        ),
    );
    // "Unchanged" on a noisy two-core machine: within 20 ms or 1.5× of the run without it.
    let same = |with: f64, without: f64| with <= (without * 1.5).max(without + 20.0);
    o.target(
        same(worst(purged) as f64, worst(kept) as f64),
        format!(
            "worst firing window p99 {} ms while purging, {} ms without",
            worst(purged),
            worst(kept)
        ),
    );
    o.target(
        same(create_p99(purged), create_p99(kept)),
        format!(
            "single create p99 {:.1} ms while purging, {:.1} ms without",
            create_p99(purged),
            create_p99(kept)
        ),
    );
    o.figures = serde_json::Value::Object(figures);
    Ok(o)
}

/// `rows` succeeded occurrences of made-up timers, due eight days ago and before, in their
/// days' partitions: what a week of history leaves for the janitor.
pub(super) async fn seed_finished(
    pool: &sqlx::PgPool,
    pause: &mut chime_storage::postgres::RotationPause,
    rows: usize,
) -> anyhow::Result<()> {
    let base = now_ms() - 8 * 86_400_000;
    // Their days' partitions, as the janitor would have made them a week ago.
    pause
        .add_days(
            Timestamp::from_millis(base - rows as i64),
            Timestamp::from_millis(base),
        )
        .await?;
    for chunk_start in (0..rows).step_by(500_000) {
        let n = (rows - chunk_start).min(500_000) as i64;
        sqlx::query(
            "INSERT INTO occurrences (timer_id, run_at, timer_version, bucket, status, attempt, \
               fired_at, lateness_ms, http_status) \
             SELECT 1000000000 + g % 100000, $1 - g, 1, 0, 'succeeded', 1, $1 - g, 1, 200 \
             FROM generate_series($2::bigint, $3::bigint) g",
        )
        .bind(base)
        .bind(chunk_start as i64 + 1)
        .bind(chunk_start as i64 + n)
        .execute(pool)
        .await?;
    }
    // As a week of history would be by then: vacuumed, and the checkpoint its writes caused
    // behind it, so neither run pays for the seeding.
    sqlx::query("VACUUM ANALYZE occurrences")
        .execute(pool)
        .await?;
    sqlx::query("CHECKPOINT").execute(pool).await?;
    Ok(())
}
