//! Broadcast to a worker group (issue 42 item 1) with real processes: three `chime worker`s
//! of one group on two executors each take every firing of a broadcast timer once, as
//! shards 0, 1 and 2 of 3 (`CHIME_SHARD_INDEX`, `CHIME_SHARD_TOTAL`), whichever executor
//! claimed it. A worker killed while it holds its shard has that shard finished by another
//! worker, with the same index, and the run lists its shards. Counted from the workers'
//! receipt file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use chime_e2e::timers::{client, create, get_json, until};
use chime_e2e::workers::ThreeWorkers;
use serde_json::json;

/// Records `{key} {shard index} {shard total} {worker}`. A worker whose fail file exists
/// fails its next shard once (recorded as `FAIL-{worker}`); one whose hold file exists first
/// says which shard it holds, then holds it.
const SHARDS: &str = r#"line="$CHIME_IDEMPOTENCY_KEY $CHIME_SHARD_INDEX $CHIME_SHARD_TOTAL"
if [ -e "$RECEIPTS.fail-$WORKER" ]; then
  rm -f "$RECEIPTS.fail-$WORKER"; echo "$line FAIL-$WORKER" >> "$RECEIPTS"; exit 1; fi
if [ -e "$RECEIPTS.hold-$WORKER" ]; then
  echo "$CHIME_IDEMPOTENCY_KEY $CHIME_SHARD_INDEX" > "$RECEIPTS.held"; sleep 60; fi
echo "$line $WORKER" >> "$RECEIPTS""#;

/// Per run key: (shard index, shard total, worker) of each shard done.
fn shards(file: &Path) -> BTreeMap<String, Vec<(u32, u32, String)>> {
    let mut all = receipts(file);
    for r in all.values_mut() {
        r.retain(|(_, _, w)| !w.starts_with("FAIL-"));
    }
    all.retain(|_, r| !r.is_empty());
    all
}

/// Per run key: (shard index, shard total, worker) of each receipt, failed ones too.
fn receipts(file: &Path) -> BTreeMap<String, Vec<(u32, u32, String)>> {
    let mut out: BTreeMap<String, Vec<(u32, u32, String)>> = BTreeMap::new();
    for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [key, index, total, worker] = parts[..] {
            out.entry(key.to_owned()).or_default().push((
                index.parse().unwrap(),
                total.parse().unwrap(),
                worker.to_owned(),
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_takes_each_firing_as_a_shard_and_a_killed_ones_shard_moves() {
    let ThreeWorkers {
        cluster,
        pool,
        mut workers,
        fixtures: _fixtures,
    } = ThreeWorkers::start("broadcast", "fanout", 2, SHARDS).await;
    let file = pool.receipts.clone();
    let timer = create(
        &cluster.rest,
        json!({"app": "faults", "name": "nightly-batch", "schedule": {"every": "2s"},
               "callback": {"worker": {"group": "fanout", "broadcast": true}, "timeout": "30s"},
               "retry": {"max_attempts": 3, "initial_backoff": "1s"}}),
    )
    .await;
    assert_eq!(timer["callback"]["worker"]["broadcast"], true, "{timer}");
    let id = timer["id"].as_i64().unwrap();

    // Three firings, each taken by all three workers, as shards 0, 1, 2 of 3.
    until("three whole firings", Duration::from_secs(60), || {
        let whole = shards(&file).values().filter(|r| r.len() >= 3).count();
        async move { whole >= 3 }
    })
    .await;
    let got = shards(&file);
    for (key, receipts) in got.iter().filter(|(_, r)| r.len() >= 3) {
        let indexes: BTreeSet<u32> = receipts.iter().map(|r| r.0).collect();
        let by: BTreeSet<&str> = receipts.iter().map(|r| r.2.as_str()).collect();
        assert_eq!(receipts.len(), 3, "{key}: {receipts:?}");
        assert_eq!(indexes, BTreeSet::from([0, 1, 2]), "{key}: {receipts:?}");
        assert!(receipts.iter().all(|r| r.1 == 3), "{key}: {receipts:?}");
        assert_eq!(by.len(), 3, "{key}: each worker once: {receipts:?}");
    }

    // worker-b fails its next shard once: the retry delivers that shard alone, with its
    // index, and the run succeeds; the other shards of that run are not delivered again.
    std::fs::write(format!("{}.fail-worker-b", file.display()), "").unwrap();
    until("a failed shard retried", Duration::from_secs(60), || {
        let got = receipts(&file);
        let retried = got.values().any(|r| {
            r.iter().any(|(i, _, w)| {
                w == "FAIL-worker-b" && r.iter().any(|(j, _, v)| j == i && !v.starts_with("FAIL-"))
            })
        });
        async move { retried }
    })
    .await;
    let got = receipts(&file);
    let (failed_key, failed_run) = got
        .iter()
        .find(|(_, r)| r.iter().any(|(_, _, w)| w == "FAIL-worker-b"))
        .unwrap();
    let done = &shards(&file)[failed_key];
    let indexes: Vec<u32> = {
        let mut i: Vec<u32> = done.iter().map(|r| r.0).collect();
        i.sort_unstable();
        i
    };
    assert_eq!(
        indexes,
        vec![0, 1, 2],
        "each shard done once: {failed_run:?}"
    );
    // The worker's receipt comes before the executor records the retried shard's outcome.
    let url = format!("{}/v1/runs/{failed_key}", cluster.rest);
    until(
        "the retried shard recorded",
        Duration::from_secs(30),
        || {
            let url = url.clone();
            async move { get_json(url).await["status"] == "succeeded" }
        },
    )
    .await;
    let run = get_json(url).await;
    let listed = run["shards"].as_array().cloned().unwrap_or_default();
    let attempts: Vec<i64> = listed
        .iter()
        .map(|s| s["attempt"].as_i64().unwrap())
        .collect();
    assert_eq!(
        attempts.iter().filter(|a| **a == 2).count(),
        1,
        "only the failed shard was tried again: {run}"
    );

    // worker-c holds its next shard and is killed: another worker finishes it.
    std::fs::write(format!("{}.hold-worker-c", file.display()), "").unwrap();
    let held_file = format!("{}.held", file.display());
    // The shell creates the file before it writes the line: wait for the whole line.
    let held_line = || {
        let held = std::fs::read_to_string(&held_file).unwrap_or_default();
        let (key, index) = held.strip_suffix('\n')?.split_once(' ')?;
        Some((key.to_owned(), index.parse::<u32>().ok()?))
    };
    until("worker-c holds a shard", Duration::from_secs(30), || {
        let held = held_line().is_some();
        async move { held }
    })
    .await;
    let (key, index) = held_line().unwrap();
    let key = key.as_str();
    workers[2].kill9();
    until(
        "the held shard finished elsewhere",
        Duration::from_secs(60),
        || {
            let done = shards(&file)
                .get(key)
                .is_some_and(|r| r.iter().any(|(i, _, _)| *i == index));
            async move { done }
        },
    )
    .await;
    let receipts = &shards(&file)[key];
    let moved = receipts.iter().find(|(i, _, _)| *i == index).unwrap();
    assert_ne!(moved.2, "worker-c", "{receipts:?}");
    assert_eq!(moved.1, 3, "the same total: {receipts:?}");

    // The run lists its shards, each succeeded, the held one by another worker.
    let run = get_json(format!("{}/v1/runs/{key}", cluster.rest)).await;
    until("the run succeeded", Duration::from_secs(30), || {
        let url = format!("{}/v1/runs/{key}", cluster.rest);
        async move { get_json(url).await["status"] == "succeeded" }
    })
    .await;
    let run_now = get_json(format!("{}/v1/runs/{key}", cluster.rest)).await;
    let listed = run_now["shards"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 3, "{run} / {run_now}");
    assert!(
        listed.iter().all(|s| s["status"] == "succeeded"),
        "{run_now}"
    );
    let runs = get_json(format!("{}/v1/timers/{id}/runs?page_size=5", cluster.rest)).await;
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["shards"].as_array().is_some_and(|s| !s.is_empty())),
        "{runs}"
    );
    let stop = client()
        .delete(format!("{}/v1/timers/{id}", cluster.rest))
        .send()
        .await
        .unwrap();
    assert!(stop.status().is_success());
}
