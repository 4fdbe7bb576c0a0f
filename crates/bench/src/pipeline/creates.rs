//! api: create throughput over REST and gRPC at several client counts.

use super::*;

/// Single creates from 32 clients: timers/s and p99 per call (ms); batches: timers/s.
pub(super) const API_SINGLE_RATE: f64 = 10_000.0;
pub(super) const API_SINGLE_P99_MS: f64 = 20.0;
pub(super) const API_BATCH_RATE: f64 = 50_000.0;
pub(super) const API_TARGET_CLIENTS: usize = 32;

pub(super) async fn api(args: &Args) -> anyhow::Result<Outcome> {
    let mut o = Outcome::new("api");
    // The whole deployment runs, migrator included: creates must not depend on it, and must
    // be fast beside it.
    let d = Deployment::start(args, "bench-api", &[]).await?;
    let processes = d.processes();
    let mut all = Vec::new();
    for (round, clients) in args.api_concurrency.iter().copied().enumerate() {
        let reports = crate::api::measure(
            &d.cluster.rest,
            &d.cluster.grpc,
            &format!("c{round}"),
            args.api_requests,
            clients,
            &processes,
        )
        .await;
        let reports = match reports {
            Ok(r) => r,
            Err(e) => {
                d.stop().await;
                return Err(e);
            }
        };
        for r in &reports {
            let single = r.name.ends_with("single");
            let target = match (clients == API_TARGET_CLIENTS, single) {
                (false, _) => String::new(),
                (true, true) => {
                    format!("≥ {API_SINGLE_RATE:.0}/s, p99 ≤ {API_SINGLE_P99_MS:.0} ms")
                }
                (true, false) => format!("≥ {API_BATCH_RATE:.0}/s"),
            };
            o.row(
                &format!("{} × {clients} clients", r.name),
                format!(
                    "{:.0} timers/s; per call p50 {:.1} / p99 {:.1} ms",
                    r.timers_per_second, r.p50_ms, r.p99_ms
                ),
                &target,
            );
            if clients == API_TARGET_CLIENTS {
                o.row(
                    &format!("{} × {clients} clients: CPU per timer", r.name),
                    cpu_breakdown(&r.cpu_us_per_timer),
                    "",
                );
                if single {
                    o.target(
                        r.timers_per_second >= API_SINGLE_RATE && r.p99_ms <= API_SINGLE_P99_MS,
                        format!(
                            "{} at {clients} clients: {:.0}/s, p99 {:.1} ms",
                            r.name, r.timers_per_second, r.p99_ms
                        ),
                    );
                } else {
                    o.target(
                        r.timers_per_second >= API_BATCH_RATE,
                        format!(
                            "{} at {clients} clients: {:.0}/s",
                            r.name, r.timers_per_second
                        ),
                    );
                }
            }
        }
        all.push(json!({ "clients": clients, "measurements": reports }));
    }
    d.stop().await;
    o.figures = json!({ "rounds": all });
    Ok(o)
}

/// "gateway 60, postgres 80, … = 190 µs": the busiest first, then the total.
fn cpu_breakdown(us: &BTreeMap<String, f64>) -> String {
    let mut parts: Vec<(&String, &f64)> = us.iter().filter(|(_, v)| **v > 0.0).collect();
    parts.sort_by(|a, b| b.1.total_cmp(a.1));
    let total: f64 = us.values().sum();
    let listed: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
    format!("{} = {total:.0} µs", listed.join(", "))
}
