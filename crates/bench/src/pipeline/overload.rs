//! overload: more every-second timers than the fleet can fire, then most of them disabled.
//! During the overload the timers kept must still arrive within a few seconds (runs a whole
//! interval late are skipped by the default misfire policy, not fired late one by one), the
//! one-shots due meanwhile all fire, and once the load falls the fleet recovers by itself.

use std::collections::HashSet;

use super::*;

/// Limits of the overload scenario.
const OVERLOAD_P99_MS: i64 = 3_000;
const RECOVERED_P99_MS: i64 = 50;
/// How long after the drop the fleet may take to recover.
const RECOVERY_GRACE_S: i64 = 30;

pub(super) async fn overload(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("overload");
    let d = Deployment::start(args, "bench-overload", &[]).await?;
    let rest = d.cluster.rest.clone();
    let began = now_ms();
    let gather = Gather::start(d.sink.clone(), began, i64::MAX);
    let kept = create_every(
        &rest,
        args.overload_kept,
        "1s",
        &d.sink.url("/kept"),
        "kept",
        // The overload is judged by its skips, smoke run or not: the kept timers keep
        // the default policy, and their late runs are not counted as lost.
        Counted::Default,
    )
    .await?;
    let dropped = create_every(
        &rest,
        args.overload_dropped,
        "1s",
        &d.sink.url("/dropped"),
        "dropped",
        Counted::Default,
    )
    .await?;
    let loaded = now_ms();
    let drop_at = loaded + args.overload_duration as i64 * 1000;
    let end = drop_at + args.overload_recovery as i64 * 1000;
    // One-shots falling due through the overload, ten a second: never skipped.
    let shots_from = loaded + 5_000;
    let shot_count = ((drop_at - shots_from) / 100).max(0) as usize;
    let shot_url = d.sink.url("/shot");
    let shot_ids: HashSet<i64> = each_over_rest(shot_count, move |http, i| {
        let at = Timestamp::from_millis(shots_from + i as i64 * 100);
        http.post(format!("{rest}/v1/timers")).json(&json!({
            "app": "bench",
            "name": format!("shot-{i}"),
            "schedule": {"at": at.to_rfc3339()},
            "callback": {"url": shot_url},
        }))
    })
    .await?
    .iter()
    .filter_map(|t| t["id"].as_i64())
    .collect();
    eprintln!(
        "  {} + {} every-second timers created in {:.1} s, {shot_count} one-shots",
        args.overload_kept,
        args.overload_dropped,
        (loaded - began) as f64 / 1000.0
    );

    let lag = tokio::spawn(watch_lag(
        d.cluster
            .schedulers
            .iter()
            .map(|s| s.admin.clone())
            .collect(),
        end,
    ));
    until(drop_at).await;
    // What the database writes from the drop on: the dropped timers' rows deleted, their
    // runs due meanwhile skipped, the kept timers firing.
    let pg_pool = d._db.pg().ok().map(|f| f.store.pool().clone());
    let pg0 = PgCounters::take(pg_pool.as_ref()).await;
    let rest = d.cluster.rest.clone();
    let ids: Vec<i64> = dropped.timers.iter().map(|t| t.id).collect();
    let dropping = Instant::now();
    let mut disable_ms: Vec<i64> = timed_over_rest(ids.len(), move |http, i| {
        http.post(format!("{rest}/v1/timers/{}/disable", ids[i]))
    })
    .await?
    .iter()
    .map(|(_, took)| took.as_millis() as i64)
    .collect();
    let dropped_in = dropping.elapsed();
    disable_ms.sort_unstable();
    until(end).await;
    let pg1 = PgCounters::take(pg_pool.as_ref()).await;
    let (mut misfired, mut skipped) = (0.0, 0.0);
    for e in &d.cluster.executors {
        misfired += e.counter("chime_executor_misfired_total").await;
        skipped += e.counter("chime_executor_skipped_total").await;
    }
    // Skipped where they lay in a lagging shard, without a hand-off.
    let mut in_shards = 0.0;
    for s in &d.cluster.schedulers {
        misfired += s.counter("chime_scheduler_misfired_total").await;
        in_shards += s.counter("chime_scheduler_skipped_total").await;
    }
    skipped += in_shards;
    // Every other skip is of a stopped timer's run (or a run of an older version).
    let stopped = skipped - misfired;
    let lag = lag.await?;
    let all = gather
        .finish(0, Instant::now(), Duration::from_secs(2))
        .await;
    d.stop().await;
    dump(args, "overload", &all)?;

    let kept_ids: HashSet<i64> = kept.timers.iter().map(|t| t.id).collect();
    let of = |ids: &HashSet<i64>, from: i64, to: i64| -> Vec<Delivery> {
        all.iter()
            .filter(|d| (from..to).contains(&d.scheduled_ms))
            .filter(|d| key_id(&d.key).is_some_and(|id| ids.contains(&id)))
            .cloned()
            .collect()
    };
    // The kept timers while overloaded, and once recovered.
    let during = of(&kept_ids, loaded, drop_at);
    let l_during = Lateness::of(&during);
    let missed_during = kept.missing(&during, loaded, drop_at);
    let recovered_from = drop_at + RECOVERY_GRACE_S * 1000;
    let after = of(&kept_ids, recovered_from, end);
    let missed_after = kept.missing(&after, recovered_from, end);
    let per_window = windows(&after, recovered_from, 10_000);
    // The whole way back, from the drop on: where recovery begins.
    let from_drop = windows(&of(&kept_ids, drop_at, end), drop_at, 10_000);
    let worst_after = per_window.iter().map(|(_, l)| l.p99_ms).max().unwrap_or(0);
    let shots = of(&shot_ids, began, i64::MAX);
    let (shots_delivered, shots_repeated) = distinct_and_duplicates(&shots);
    let l_shots = Lateness::of(&shots);

    lateness_row(
        &mut o,
        "kept timers while overloaded",
        &l_during,
        &format!("p99 ≤ {OVERLOAD_P99_MS} ms"),
    );
    o.target(
        l_during.p99_ms <= OVERLOAD_P99_MS,
        format!(
            "kept timers p99 {} ms while overloaded (target ≤ {OVERLOAD_P99_MS} ms)",
            l_during.p99_ms
        ),
    );
    o.row(
        "kept firings skipped while overloaded",
        format!(
            "{} of {}",
            missed_during.firings,
            kept.expected(loaded, drop_at)
        ),
        "",
    );
    o.row(
        "runs skipped by the misfire policy",
        format!("{misfired:.0}"),
        "",
    );
    o.row(
        "runs of stopped timers skipped",
        format!("{stopped:.0}"),
        "",
    );
    o.row(
        "of the skips, in lagging shards before a hand-off",
        format!("{in_shards:.0}"),
        "",
    );
    let after_drop = pg0.zip(pg1).map(|(a, b)| {
        let firings = all.iter().filter(|d| d.at_ms >= drop_at).count();
        a.per_firing(&b, firings)
    });
    if let Some(w) = &after_drop {
        o.row(
            "postgres from the drop on, per firing delivered",
            w.describe(),
            "",
        );
    }
    o.row(
        "disabling the dropped timers",
        format!(
            "{} in {:.1} s",
            args.overload_dropped,
            dropped_in.as_secs_f64()
        ),
        "",
    );
    let disable_p = |q: f64| nearest_rank(&disable_ms, q);
    o.row(
        "one disable over REST",
        format!("p50 {} / p99 {} ms", disable_p(0.5), disable_p(0.99)),
        "",
    );
    for (from_s, l) in &per_window {
        lateness_row(
            &mut o,
            &format!("kept, {}–{} s after the drop", from_s + 30, from_s + 40),
            l,
            &format!("p99 ≤ {RECOVERED_P99_MS} ms"),
        );
        o.target(
            l.p99_ms <= RECOVERED_P99_MS,
            format!(
                "{} s after the drop: p99 {} ms (target ≤ {RECOVERED_P99_MS} ms)",
                from_s + 30,
                l.p99_ms
            ),
        );
    }
    o.row(
        "kept firings missing once recovered",
        format!("{} of {} timers", missed_after.timers, args.overload_kept),
        "0",
    );
    o.target(
        missed_after.firings == 0,
        format!(
            "{} firings of {} kept timers missing from {RECOVERY_GRACE_S} s after the drop",
            missed_after.firings, missed_after.timers
        ),
    );
    o.row(
        "one-shots",
        format!(
            "{shots_delivered} of {shot_count}, p50 {} / p99 {} ms late",
            l_shots.p50_ms, l_shots.p99_ms
        ),
        "all",
    );
    if shots_delivered < shot_count {
        o.failed.push(format!(
            "{} of {shot_count} one-shots not delivered",
            shot_count - shots_delivered
        ));
    }
    o.row(
        "scheduler lag",
        format!(
            "max {:.1} s while overloaded, {:.1} s at the end",
            lag.max_during(drop_at),
            lag.last()
        ),
        "",
    );
    o.figures = json!({
        "kept_timers": args.overload_kept,
        "dropped_timers": args.overload_dropped,
        "overload_seconds": args.overload_duration,
        "kept_while_overloaded": l_during,
        "kept_skipped_while_overloaded": missed_during,
        "misfired": misfired,
        "stopped_skipped": stopped,
        "skipped_in_shards": in_shards,
        "postgres_from_the_drop_per_firing": after_drop,
        "disable_seconds": dropped_in.as_secs_f64(),
        "disable_ms": {"p50": disable_p(0.5), "p99": disable_p(0.99)},
        "windows_from_drop": from_drop
            .iter()
            .map(|(from_s, l)| json!({"from_second_after_drop": from_s, "lateness": l}))
            .collect::<Vec<_>>(),
        "recovered_windows": per_window
            .iter()
            .map(|(from_s, l)| json!({"from_second_after_drop": from_s + 30, "lateness": l}))
            .collect::<Vec<_>>(),
        "worst_recovered_window_p99_ms": worst_after,
        "kept_missing_once_recovered": missed_after,
        "one_shots": {"expected": shot_count, "delivered": shots_delivered,
                      "duplicates": shots_repeated, "lateness": l_shots},
        "scheduler_lag_seconds": lag.samples,
    });
    Ok(o)
}

fn key_id(key: &str) -> Option<i64> {
    key.split_once(':')?.0.parse().ok()
}

/// `chime_scheduler_lag_seconds`, the largest over the schedulers, every two seconds.
#[derive(Default)]
struct LagTrace {
    samples: Vec<(i64, f64)>,
}

impl LagTrace {
    fn max_during(&self, before: i64) -> f64 {
        self.samples
            .iter()
            .filter(|(at, _)| *at < before)
            .map(|(_, s)| *s)
            .fold(0.0, f64::max)
    }

    fn last(&self) -> f64 {
        self.samples.last().map_or(0.0, |(_, s)| *s)
    }
}

async fn watch_lag(admins: Vec<String>, until_ms: i64) -> LagTrace {
    let http = chime_runtime::http_client().build().expect("client");
    let mut trace = LagTrace::default();
    while now_ms() < until_ms {
        let mut worst: f64 = 0.0;
        for admin in &admins {
            let Ok(resp) = http.get(format!("{admin}/metrics")).send().await else {
                continue;
            };
            let page = resp.text().await.unwrap_or_default();
            let lag = page
                .lines()
                .filter(|l| l.starts_with("chime_scheduler_lag_seconds"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .fold(0.0, f64::max);
            worst = worst.max(lag);
        }
        trace.samples.push((now_ms(), worst));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    trace
}
