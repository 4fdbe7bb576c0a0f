//! Routing for worker groups (issue 42 item 3) with real processes: three `chime worker`s of
//! one group on two executors, registered one after another. `consistent_hash` keeps each
//! timer on one worker, and when a worker leaves only its timers move; `failover` sends
//! every run to the earliest-registered worker, then to the next once it is gone;
//! `round_robin` uses every worker. Counted from the workers' receipt file.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chime_e2e::timers::{create, until};
use chime_e2e::workers::{RECORD, ThreeWorkers, connected, receipts};
use serde_json::json;

/// The workers each timer's runs went to, in run order, by timer id.
fn by_timer(file: &std::path::Path) -> HashMap<i64, Vec<(i64, String)>> {
    let mut out: HashMap<i64, Vec<(i64, String)>> = HashMap::new();
    for (key, got) in receipts(file) {
        let (id, run_at) = key.split_once(':').unwrap();
        out.entry(id.parse().unwrap())
            .or_default()
            .push((run_at.parse().unwrap(), got[0].1.clone()));
    }
    for runs in out.values_mut() {
        runs.sort();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_pick_workers_across_executors() {
    let ThreeWorkers {
        cluster,
        pool,
        mut workers,
        fixtures: _fixtures,
    } = ThreeWorkers::start("routing", "routed", 4, RECORD).await;
    let file = pool.receipts.clone();

    let timer = |name: String, route: &str| {
        json!({"app": "faults", "name": name, "schedule": {"every": "1s"},
               "callback": {"worker": {"group": "routed", "route": route}}})
    };
    let mut hashed = Vec::new();
    for i in 0..6 {
        let t = create(&cluster.rest, timer(format!("hash-{i}"), "consistent_hash")).await;
        hashed.push(t["id"].as_i64().unwrap());
    }
    let failover = create(&cluster.rest, timer("first".into(), "failover")).await;
    let failover = failover["id"].as_i64().unwrap();
    let turns = create(&cluster.rest, timer("turns".into(), "round_robin")).await;
    let turns = turns["id"].as_i64().unwrap();
    assert_eq!(
        create(&cluster.rest, timer("shown".into(), "failover")).await["callback"]["worker"]["route"],
        "failover"
    );
    let enough = |n: usize| {
        let file = file.clone();
        let all: Vec<i64> = hashed.iter().copied().chain([failover, turns]).collect();
        move || {
            let got = by_timer(&file);
            let done = all
                .iter()
                .all(|id| got.get(id).is_some_and(|runs| runs.len() >= n));
            async move { done }
        }
    };
    until("six runs of each timer", Duration::from_secs(60), enough(6)).await;

    let got = by_timer(&file);
    let owner: HashMap<i64, String> = hashed
        .iter()
        .map(|id| {
            let workers: HashSet<&String> = got[id].iter().map(|(_, w)| w).collect();
            assert_eq!(workers.len(), 1, "timer {id} ran on {workers:?}");
            (*id, got[id][0].1.clone())
        })
        .collect();
    assert!(
        got[&failover].iter().all(|(_, w)| w == "worker-a"),
        "{:?}",
        got[&failover]
    );
    let used: HashSet<&String> = got[&turns].iter().map(|(_, w)| w).collect();
    assert_eq!(used.len(), 3, "round robin used {used:?}");

    // worker-a leaves: failover moves to worker-b; the hashed timers a did not hold stay.
    let before = by_timer(&file);
    workers[0].kill9();
    until("worker-a gone", Duration::from_secs(30), || async {
        connected(&cluster).await == 2.0
    })
    .await;
    let seen = |id: i64| before.get(&id).map_or(0, Vec::len);
    let counts: Vec<(i64, usize)> = hashed
        .iter()
        .chain([&failover])
        .map(|id| (*id, seen(*id)))
        .collect();
    until("four more runs of each", Duration::from_secs(60), || {
        let got = by_timer(&file);
        let done = counts
            .iter()
            .all(|(id, n)| got.get(id).is_some_and(|runs| runs.len() >= n + 4));
        async move { done }
    })
    .await;
    let after = by_timer(&file);
    // The last runs, after the roster changed (a run or two in between may have gone to
    // worker-a as it died, and been retried elsewhere).
    let last = |id: i64| after[&id].iter().rev().take(2).map(|(_, w)| w.clone());
    assert!(
        last(failover).all(|w| w == "worker-b"),
        "{:?}",
        after[&failover]
    );
    for id in &hashed {
        if owner[id] != "worker-a" {
            assert!(
                last(*id).all(|w| w == owner[id]),
                "timer {id} moved: {:?}",
                after[id]
            );
        } else {
            assert!(last(*id).all(|w| w != "worker-a"), "{:?}", after[id]);
        }
    }
}
