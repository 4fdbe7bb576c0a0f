//! Registered workers end to end: `chime worker` processes connected to real executors take
//! their group's deliveries. What was delivered is read from the workers' receipt file (the
//! receiver's record), never from Chime's tables.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::time::Duration;

use chime_e2e::faults::percentile;
use chime_e2e::start_on;
use chime_e2e::timers::{create, due_over, get_json, now, one_shots_to, until};
use chime_e2e::workers::{RECORD, Workers, connected, executor_url, receipts};
use chime_storage::testkit;
use serde_json::json;

/// The task key of a one-shot timer's run, from the timer as the API answers it.
fn key_of(t: &serde_json::Value) -> String {
    format!(
        "{}:{}",
        t["id"],
        chime_e2e::timers::ms(t["schedule"]["at"].as_str().unwrap())
    )
}

/// The run-at instant (ms) in a task key `{timer_id}:{run_at_ms}`.
fn run_at(key: &str) -> i64 {
    key.rsplit(':').next().unwrap().parse().unwrap()
}

/// The executors are given no peers (`CHIME_EXECUTOR_ENDPOINTS`): once worker-c dies,
/// executor 1 reaches executor 0's workers only through the membership roster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_on_two_executors_take_each_delivery_once_and_survive_a_kill_9() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let mut cluster = start_on("workers-three", &db, &redis, 1, 2, vec![]).await;
    let pool = Workers::for_faults(&cluster, "workers-three-receipts").await;
    let file = pool.receipts.clone();
    let (e0, e1) = (
        executor_url(&cluster.executors[0]),
        executor_url(&cluster.executors[1]),
    );
    let worker = |name: &str, executor: &str| pool.start(name, executor, "jobs", 8, RECORD);
    let mut workers = vec![
        worker("worker-a", &e0),
        worker("worker-b", &e0),
        worker("worker-c", &e1),
    ];
    until(
        "three workers connected",
        Duration::from_secs(30),
        || async { connected(&cluster).await == 3.0 },
    )
    .await;

    let start = now() + 4_000;
    let due = due_over(start, 20_000, 3_000);
    let expected = one_shots_to(
        &cluster.rest,
        json!({"callback": {"worker": {"group": "jobs"}, "body": "{\"kind\":\"e2e\"}"}}),
        "w",
        &due,
    )
    .await;
    // Half-way, worker-c, executor 1's only worker, dies without a goodbye: from then on
    // executor 1 hands its deliveries to executor 0's workers.
    until("half-way", Duration::from_secs(40), || async {
        now() >= start + 10_000
    })
    .await;
    workers[2].kill9();
    until("every occurrence received", Duration::from_secs(60), || {
        let all = {
            let got = receipts(&file);
            expected.iter().all(|k| got.contains_key(k))
        };
        async move { all }
    })
    .await;

    let got = receipts(&file);
    let lost: Vec<_> = expected.iter().filter(|k| !got.contains_key(*k)).collect();
    let duplicates: usize = got.values().map(|v| v.len() - 1).sum();
    let mut lateness: Vec<i64> = got
        .iter()
        .filter(|(k, _)| expected.contains(*k))
        .map(|(k, v)| v[0].2 - run_at(k))
        .collect();
    lateness.sort_unstable();
    let by_worker = |w: &str| got.values().filter(|v| v[0].1 == w).count();
    eprintln!(
        "received {} of {}, lost {}, duplicates {duplicates}, lateness p50 {} ms p99 {} ms; \
         by worker a {} b {} c {}",
        got.len(),
        expected.len(),
        lost.len(),
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        by_worker("worker-a"),
        by_worker("worker-b"),
        by_worker("worker-c"),
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    // Only deliveries open on the killed worker (8 credits) may have run twice.
    assert!(duplicates <= 8, "{duplicates} duplicates");
    // Outcomes, not speed: a callback counts as on time within the suite's generous bound
    // (a wait for a lease or a sweep costs more); the latency target is measured by the
    // bench's `workers` scenario, since a busy 2-core machine varies between runs.
    let p99 = percentile(&lateness, 0.99);
    assert!(p99 <= chime_e2e::ON_TIME_MS, "p99 lateness {p99} ms");
    // Both executors delivered, and the killed worker had taken work before it died.
    assert!(by_worker("worker-c") > 0 && by_worker("worker-b") > 0);
    for w in &mut workers {
        if w.running() {
            w.terminate();
        }
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nacks_retry_with_backoff_silent_workers_lose_the_delivery_and_no_worker_waits() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let mut cluster = start_on("workers-retry", &db, &redis, 1, 1, vec![]).await;
    let pool = Workers::for_faults(&cluster, "workers-retry-receipts").await;
    let file = pool.receipts.clone();
    let executor = executor_url(&cluster.executors[0]);
    // Refuses the first attempt (a nack, retryable), takes the second.
    let flaky =
        format!(r#"{RECORD}; [ "$CHIME_ATTEMPT" -ge 2 ] || {{ echo not yet >&2; exit 3; }}"#);
    let silent = format!("{RECORD}; sleep 30");
    let mut workers = vec![
        pool.start("flaky", &executor, "flaky", 1, &flaky),
        pool.start("silent", &executor, "slow", 1, &silent),
    ];
    until("two workers connected", Duration::from_secs(30), || async {
        connected(&cluster).await == 2.0
    })
    .await;
    // The silent worker's retry waits 3 s: time for the prompt worker to connect.
    let timer = |name: &str, group: &str, backoff: &str| {
        json!({"app": "faults", "name": name,
            "schedule": {"after": "2s"},
            "callback": {"worker": {"group": group}, "timeout": "1s"},
            "retry": {"max_attempts": 3, "initial_backoff": backoff, "max_backoff": backoff,
                "jitter": false}})
    };
    let nacked = key_of(&create(&cluster.rest, timer("nacked", "flaky", "1s")).await);
    let slow = key_of(&create(&cluster.rest, timer("unanswered", "slow", "3s")).await);
    let nobody = create(&cluster.rest, timer("unserved", "nobody", "1s")).await;

    // The silent worker took its delivery and sits on it; a prompt one joins the group.
    until(
        "the silent worker got its delivery",
        Duration::from_secs(30),
        || {
            let got = receipts(&file);
            let slow = slow.clone();
            async move { got.contains_key(&slow) }
        },
    )
    .await;
    workers.push(pool.start("prompt", &executor, "slow", 1, RECORD));
    until(
        "the prompt worker connected",
        Duration::from_secs(30),
        || async { connected(&cluster).await == 3.0 },
    )
    .await;
    until(
        "both retried deliveries received",
        Duration::from_secs(30),
        || {
            let got = receipts(&file);
            let (nacked, slow) = (nacked.clone(), slow.clone());
            async move {
                got.get(&nacked).is_some_and(|v| v.len() == 2)
                    && got.get(&slow).is_some_and(|v| v.len() == 2)
            }
        },
    )
    .await;
    let got = receipts(&file);
    let n = &got[&nacked];
    assert_eq!((n[0].0, n[1].0), (1, 2), "{n:?}");
    // The retry waited for its backoff (1 s) after the nack.
    assert!(
        n[1].2 - n[0].2 >= 900,
        "retried after {} ms",
        n[1].2 - n[0].2
    );
    let s = &got[&slow];
    assert_eq!(
        (s[0].1.as_str(), s[1].1.as_str(), s[1].0),
        ("silent", "prompt", 2),
        "{s:?}"
    );

    // No worker of its group: the occurrence fails by its policy, and its runs say why.
    let runs_url = format!("{}/v1/timers/{}/runs", cluster.rest, nobody["id"]);
    until(
        "the unserved occurrence dead-lettered",
        Duration::from_secs(30),
        || {
            let url = runs_url.clone();
            async move {
                let runs = get_json(url).await;
                runs["runs"][0]["status"] == "dead"
            }
        },
    )
    .await;
    let runs = get_json(runs_url).await;
    let run = &runs["runs"][0];
    assert_eq!(run["attempt"], 3, "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .contains("no worker of group nobody"),
        "{run}"
    );
    // The executors' port is open to workers: a forged forward (not signed with the app's
    // secret) must not reach the app's workers.
    let channel = tonic::transport::Endpoint::from_shared(executor.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let forged = chime_proto::v1::executor_service_client::ExecutorServiceClient::new(channel)
        .forward(chime_proto::v1::ForwardRequest {
            app: "faults".into(),
            group: "slow".into(),
            delivery: Some(chime_proto::v1::Delivery {
                idempotency_key: "1:1".into(),
                body: b"forged".to_vec(),
                ack_timeout_ms: 1_000,
                ..Default::default()
            }),
            worker: String::new(),
        })
        .await
        .expect_err("an unsigned forward is refused");
    assert_eq!(forged.code(), tonic::Code::PermissionDenied, "{forged}");
    // An app's token registers workers for that app only.
    let mut other = pool.start_as("other-app", &executor, "billing", "jobs", 1, RECORD);
    let exit = other.wait_exit(Duration::from_secs(30)).await;
    assert!(!exit.success(), "a worker of another app was accepted");
    assert!(
        other.log().contains("may not act for app billing"),
        "{}",
        other.log()
    );
    let expected: HashSet<_> = [nacked, slow].into();
    assert!(expected.iter().all(|k| got.contains_key(k)));
    for w in &mut workers {
        w.terminate();
    }
    cluster.stop().await;
}

/// What a worker's command prints is each run's output, for succeeded and failed attempts
/// (deliveries the other executor claims reach the workers forwarded); `keep_output: false`
/// keeps none. Read back over REST (`runs`, `GET /v1/runs/{key}`) and with `chime timers run`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_output_is_kept_per_run_unless_turned_off() {
    let (db, redis) = (testkit::pg().await, testkit::redis().await);
    let mut cluster = start_on("workers-output", &db, &redis, 1, 2, vec![]).await;
    let pool = Workers::for_faults(&cluster, "workers-output-receipts").await;
    let file = pool.receipts.clone();
    // Only executor 0 has workers: what executor 1 claims is forwarded to them.
    let e0 = executor_url(&cluster.executors[0]);
    let talk = format!(
        r#"{RECORD}; echo "processed $CHIME_IDEMPOTENCY_KEY"; echo "warn: slow disk" >&2;
        case "$CHIME_TIMER_NAME" in fail*) exit 4;; esac"#
    );
    let mut workers = vec![
        pool.start("talker", &e0, "talk", 4, &talk),
        pool.start(
            "secretive",
            &e0,
            "secret",
            4,
            &format!("{RECORD}; echo token=s3cr3t"),
        ),
    ];
    until("two workers connected", Duration::from_secs(30), || async {
        connected(&cluster).await == 2.0
    })
    .await;
    let timer = |name: &str, callback: serde_json::Value| {
        json!({"app": "faults", "name": name, "schedule": {"after": "2s"},
            "callback": callback, "retry": {"max_attempts": 1}})
    };
    let mut talking = Vec::new();
    for i in 0..6 {
        let t = create(
            &cluster.rest,
            timer(&format!("talk-{i}"), json!({"worker": {"group": "talk"}})),
        )
        .await;
        talking.push(key_of(&t));
    }
    let failing = key_of(
        &create(
            &cluster.rest,
            timer("fail-once", json!({"worker": {"group": "talk"}})),
        )
        .await,
    );
    let quiet = create(
        &cluster.rest,
        timer(
            "secret",
            json!({"worker": {"group": "secret"}, "keep_output": false}),
        ),
    )
    .await;
    assert_eq!(quiet["callback"]["keep_output"], false, "{quiet}");
    let hushed = key_of(&quiet);
    let run_of = |key: &str| get_json(format!("{}/v1/runs/{key}", cluster.rest));
    let mut every: Vec<String> = talking.clone();
    every.extend([failing.clone(), hushed.clone()]);
    until("every run ended", Duration::from_secs(60), || {
        let every = every.clone();
        let rest = cluster.rest.clone();
        async move {
            for key in &every {
                let run = get_json(format!("{rest}/v1/runs/{key}")).await;
                if !matches!(run["status"].as_str(), Some("succeeded" | "dead")) {
                    return false;
                }
            }
            true
        }
    })
    .await;
    for key in &talking {
        let run = run_of(key).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        let output = run["output"].as_str().unwrap_or_default();
        assert!(output.contains(&format!("processed {key}")), "{run}");
        assert!(output.contains("warn: slow disk"), "{run}");
    }
    let failed = run_of(&failing).await;
    assert_eq!(failed["status"], "dead", "{failed}");
    assert!(
        failed["output"]
            .as_str()
            .is_some_and(|o| o.contains(&format!("processed {failing}"))),
        "{failed}"
    );
    let secret = run_of(&hushed).await;
    assert_eq!(secret["status"], "succeeded", "{secret}");
    assert!(secret["output"].is_null(), "{secret}");
    // The worker did run it: the receiver's record has it.
    assert!(receipts(&file).contains_key(&hushed));
    // `chime timers run KEY` prints the whole output.
    let shown = std::process::Command::new(chime_test_support::deploy::bin("chime"))
        .args(["timers", "run", &talking[0], "--server", &cluster.grpc])
        .env("CHIME_TOKEN", chime_test_support::deploy::BOOTSTRAP_TOKEN)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.contains(&format!("processed {}", talking[0])),
        "{text}"
    );
    assert!(text.contains("warn: slow disk"), "{text}");
    let missing = get_json(format!("{}/v1/runs/{}:1", cluster.rest, quiet["id"])).await;
    assert_eq!(missing["status"], 404, "{missing}");
    for w in &mut workers {
        w.terminate();
    }
    cluster.stop().await;
}
