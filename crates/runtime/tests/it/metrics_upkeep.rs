//! The Prometheus recorder keeps every histogram sample until its upkeep folds them into
//! buckets: a service nobody scrapes must not grow with each firing it measures.

use std::time::{Duration, Instant};

/// Resident bytes of this process (each test runs in its own process under nextest, and
/// this file is a test binary of its own).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("linux /proc");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has a resident field");
    pages * 4096
}

#[test]
fn histogram_samples_do_not_pile_up_between_scrapes() {
    let (recorder, _handle) = chime_runtime::prometheus_recorder(Duration::from_millis(10));
    // 32 million samples: held until upkeep, they grew this process by ~500 MiB. The bound
    // below is a quarter of that: on a loaded machine (the whole suite on two cores) the upkeep
    // thread may not run for a few hundred milliseconds while this loop records millions
    // (8 million samples with a 24-MiB bound grew 33 MiB once under `make test`).
    const SAMPLES: u64 = 32_000_000;
    let record = |n: u64| {
        metrics::with_local_recorder(&recorder, || {
            let h = metrics::histogram!("chime_test_lateness_seconds");
            for i in 0..n {
                h.record((i % 1000) as f64 / 1000.0);
            }
        })
    };
    // Warm up the allocator's arenas and the recorder's structures.
    record(200_000);
    let before = resident_bytes();
    let started = Instant::now();
    for _ in 0..(SAMPLES / 100_000) {
        record(100_000);
    }
    let grown = resident_bytes().saturating_sub(before);
    let mib = grown as f64 / (1 << 20) as f64;
    println!(
        "{SAMPLES} samples in {:?}: resident grew {mib:.1} MiB",
        started.elapsed()
    );
    assert!(
        mib < 128.0,
        "resident memory grew {mib:.1} MiB over {SAMPLES} histogram samples: upkeep is not draining them"
    );
}
