use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use tracing_subscriber::{EnvFilter, Layer};

use crate::{LogConfig, LogFormat};

/// Installs the global subscriber: text for people, JSON for log pipelines. `RUST_LOG`, when
/// set, wins over the configured filter. Calling it twice keeps the first.
pub fn init_tracing(config: &LogConfig) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match config.format {
        LogFormat::Text => fmt.boxed(),
        // The current span's fields (trace and span ids among them) go with each event.
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(crate::traces::otlp_layer())
        .try_init();
}

/// Seconds, from 1 ms to 60 s: every latency histogram's buckets.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// What a metric is, for [`describe_metrics`].
#[derive(Debug, Clone, Copy)]
pub enum MetricKind {
    Counter,
    /// A counter whose series carry labels: described, not registered (a series without
    /// its labels would show up beside them).
    LabelledCounter,
    Gauge,
    Histogram,
}

/// A service's metric: its name, kind and HELP text.
pub type MetricSpec = (&'static str, MetricKind, &'static str);

/// Gives each of a service's metrics its HELP text and registers the unlabelled counters and
/// gauges at zero, so `/metrics` lists them before they first move (dashboards and alerts
/// then find every series, and `promtool check metrics` finds every HELP).
pub fn describe_metrics(metrics: &[MetricSpec]) {
    let _ = prometheus();
    for &(name, kind, help) in metrics {
        match kind {
            MetricKind::Counter => {
                metrics::describe_counter!(name, help);
                metrics::counter!(name).increment(0);
            }
            MetricKind::LabelledCounter => metrics::describe_counter!(name, help),
            MetricKind::Gauge => {
                metrics::describe_gauge!(name, help);
                metrics::gauge!(name).increment(0.0);
            }
            MetricKind::Histogram => {
                metrics::describe_histogram!(name, metrics::Unit::Seconds, help)
            }
        }
    }
}

/// How often recorded histogram samples are folded into their buckets. The recorder keeps
/// each sample until then (or until a scrape renders it): without upkeep, a process that
/// nobody scrapes grows by every sample it records.
pub const METRICS_UPKEEP: std::time::Duration = std::time::Duration::from_secs(5);

/// The process's Prometheus recorder, installed on first use; `/metrics` renders it. One per
/// process because `metrics` has one global recorder (several servers in one test process
/// share it).
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let (recorder, handle) = prometheus_recorder(METRICS_UPKEEP);
            // Fails only if another recorder was installed first; metrics then go there.
            let _ = metrics::set_global_recorder(recorder);
            // Which build answers, for dashboards that compare versions during a rollout.
            let build = crate::BuildInfo::current();
            metrics::describe_gauge!(
                "chime_build_info",
                "1, labelled with the version and git commit this process was built from"
            );
            metrics::gauge!("chime_build_info", "version" => build.version, "commit" => build.commit)
                .set(1.0);
            handle
        })
        .clone()
}

/// A Prometheus recorder with Chime's latency buckets, not installed, and a thread that runs
/// its upkeep every `upkeep_every` for the rest of the process.
pub fn prometheus_recorder(
    upkeep_every: std::time::Duration,
) -> (PrometheusRecorder, PrometheusHandle) {
    // Histograms, not summaries: the fleet's p99 is `histogram_quantile` over the
    // replicas' buckets summed, which summaries cannot give.
    let recorder = PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS)
        .expect("the latency buckets are not empty")
        .build_recorder();
    let handle = recorder.handle();
    let upkeep = handle.clone();
    // A thread, not a task: the recorder outlives any one runtime (tests start several).
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(upkeep_every);
                upkeep.run_upkeep();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the metrics upkeep thread; histograms grow until scraped");
    }
    (recorder, handle)
}
