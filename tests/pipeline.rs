//! The whole firing pipeline, judged from a loopback sink's own record, in both modes:
//! distributed (one gateway, one migrator, two schedulers and two executors as separate
//! processes over real PostgreSQL and Redis) and `chime dev` (one process, SQLite in memory,
//! in-memory hot index), and distributed on PostgreSQL alone (no Redis). The scenario and its
//! assertions are the same; only the distributed runs have a second executor to stop mid-run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chime_domain::{Clock, SystemClock, Timestamp};
use chime_e2e::{Service, free_port, log_dir};
use chime_storage::testkit;
use chime_test_support::sink::{Received, Sink};
use futures::StreamExt;
use serde_json::{Value, json};

const RUN: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Distributed,
    Dev,
}

/// The processes of one run, stopped in this order at the end.
struct Cluster {
    services: Vec<Service>,
    /// Executors (index into `services`) and their admin URLs; empty in dev mode.
    executors: Vec<(usize, String)>,
    rest: String,
}

async fn start_dev() -> Cluster {
    let dir = log_dir("pipeline-dev");
    eprintln!("process logs: {}", dir.display());
    let (http, grpc) = (free_port(), free_port());
    let env = vec![
        ("CHIME_HTTP_ADDR", format!("127.0.0.1:{http}")),
        ("CHIME_GRPC_ADDR", format!("127.0.0.1:{grpc}")),
        ("CHIME_SHUTDOWN_GRACE", "10s".to_owned()),
        ("CHIME_LOG", "info".to_owned()),
    ];
    let mut dev = Service::start("chime-dev", "chime", &["dev", "--memory"], &env, &dir);
    let rest = format!("http://127.0.0.1:{http}");
    dev.wait_ready(&format!("{rest}/readyz")).await;
    Cluster {
        services: vec![dev],
        executors: Vec::new(),
        rest,
    }
}

/// The distributed services; on PostgreSQL alone when `redis_prefix` is `None`.
async fn start_cluster(
    test: &'static str,
    database_url: String,
    redis_prefix: Option<&str>,
) -> Cluster {
    let c = chime_e2e::cluster::Cluster::start(chime_e2e::cluster::Spec {
        test,
        database_url,
        redis_url: redis_prefix
            .map(|_| testkit::redis_url())
            .unwrap_or_default(),
        redis_prefix: redis_prefix.unwrap_or_default().to_owned(),
        schedulers: 2,
        executors: 2,
        env: chime_e2e::test_env(Vec::new()),
    })
    .await;
    // Stop order: schedulers (no new work), executors (drain), migrator, gateway.
    let mut services = Vec::new();
    let mut executors = Vec::new();
    for s in c.schedulers {
        services.push(s.service);
    }
    for e in c.executors {
        executors.push((services.len(), e.admin));
        services.push(e.service);
    }
    services.push(c.migrator.service);
    services.push(c.gateway.service);
    Cluster {
        services,
        executors,
        rest: c.rest,
    }
}

/// What a timer is expected to have delivered.
#[derive(Debug, Clone)]
enum Expect {
    Once(i64),
    /// Every `interval` ms from `first`.
    Every {
        first: i64,
        interval: i64,
    },
    /// Cron `*/2 * * * * *`: every even second from the creation on.
    EvenSeconds {
        from: i64,
    },
}

impl Expect {
    /// Fire times in `[from, to]`.
    fn between(&self, from: i64, to: i64) -> Vec<i64> {
        match *self {
            Expect::Once(at) => (from..=to)
                .contains(&at)
                .then_some(at)
                .into_iter()
                .collect(),
            Expect::Every { first, interval } => {
                let start = first.max(from);
                let k = (start - first + interval - 1) / interval;
                (k..)
                    .map(|k| first + k * interval)
                    .take_while(|t| *t <= to)
                    .collect()
            }
            Expect::EvenSeconds { from: created } => {
                let start = created.max(from);
                let first = (start + 1_999) / 2_000 * 2_000;
                (0..)
                    .map(|k| first + k * 2_000)
                    .take_while(|t| *t <= to)
                    .collect()
            }
        }
    }
}

fn ms(rfc3339: &str) -> i64 {
    Timestamp::parse_rfc3339(rfc3339).unwrap().as_millis()
}

async fn create(client: &reqwest::Client, rest: &str, body: Value) -> Value {
    let r = client
        .post(format!("{rest}/v1/timers"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 201, "{body}");
    body
}

fn now() -> i64 {
    SystemClock.now().as_millis()
}

/// The scheduled instant and timer of a callback, checked against its headers.
fn checked(r: &Received) -> (i64, i64) {
    let key = r.header("idempotency-key").expect("Idempotency-Key");
    let timer: i64 = r.header("x-chime-timer-id").unwrap().parse().unwrap();
    let at = ms(r
        .header("x-chime-scheduled-at")
        .expect("X-Chime-Scheduled-At"));
    assert_eq!(key, format!("{timer}:{at}"), "Idempotency-Key");
    assert_eq!(r.header("x-chime-attempt"), Some("1"));
    assert!(
        r.header("traceparent").is_some_and(|t| t.len() == 55),
        "traceparent"
    );
    assert_eq!(r.header("x-test"), Some("e2e"));
    (timer, at)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_on_time_across_processes() {
    let db = testkit::pg_unmigrated().await;
    let redis = testkit::redis().await;
    let cluster = start_cluster("pipeline", db.url(), Some(redis.backend.prefix())).await;
    scenario(Mode::Distributed, cluster).await;
}

/// The same with MariaDB (`CHIME_TEST_MYSQL_URL`) as the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_on_time_on_mariadb() {
    let db = testkit::mysql().await;
    let redis = testkit::redis().await;
    let cluster = start_cluster("pipeline-mariadb", db.url(), Some(redis.backend.prefix())).await;
    scenario(Mode::Distributed, cluster).await;
}

/// The same with no Redis: hot index, leases and membership in PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_on_time_on_postgres_alone() {
    let db = testkit::pg_unmigrated().await;
    let cluster = start_cluster("pipeline-pg-only", db.url(), None).await;
    scenario(Mode::Distributed, cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_on_time_in_chime_dev() {
    scenario(Mode::Dev, start_dev().await).await;
}

async fn scenario(mode: Mode, mut cluster: Cluster) {
    // Every process runs on small pages (chime_runtime::memory): huge ones cost an
    // executor a sixth of its CPU zeroing them as a burst began.
    for s in &cluster.services {
        let off = chime_runtime::memory::huge_pages_off(s.pid());
        assert_ne!(
            off,
            Some(false),
            "{} runs with transparent huge pages",
            s.name
        );
    }
    let sink = Sink::start().await.unwrap();
    let client = chime_test_support::deploy::api_client().build().unwrap();
    let rest = cluster.rest.clone();
    let callback = json!({ "url": sink.url("/hook"), "method": "POST",
                           "headers": { "X-Test": "e2e" }, "body": "{}" });

    // 200 one-shots due 3–9 s after each is sent, 20 every-second timers and 5 cron timers
    // with a seconds field, created 16 at a time.
    let mut requests = Vec::new();
    for i in 0..200 {
        requests.push(("once", i));
    }
    for i in 0..20 {
        requests.push(("every", i));
    }
    for i in 0..5 {
        requests.push(("cron", i));
    }
    let created: Vec<(i64, Expect, &str)> = futures::stream::iter(requests)
        .map(|(kind, i)| {
            let (client, rest, callback) = (client.clone(), rest.clone(), callback.clone());
            async move {
                let schedule = match kind {
                    "once" => json!({ "at": Timestamp::from_millis(now() + 3_000 + (i * 30)).to_rfc3339() }),
                    "every" => json!({ "every": "1s" }),
                    _ => json!({ "cron": "*/2 * * * * *", "time_zone": "Europe/Berlin" }),
                };
                // Every run is expected exactly once: fire_all, so a run its next one
                // overtook on a busy machine still fires instead of being skipped.
                let t = create(
                    &client,
                    &rest,
                    json!({ "app": "e2e", "name": format!("{kind}-{i}"), "misfire": "fire_all",
                            "schedule": schedule, "callback": callback }),
                )
                .await;
                let id = t["id"].as_i64().unwrap();
                let expect = match kind {
                    "once" => Expect::Once(ms(t["schedule"]["at"].as_str().unwrap())),
                    "every" => Expect::Every {
                        first: ms(t["schedule"]["at"].as_str().unwrap()),
                        interval: 1_000,
                    },
                    _ => Expect::EvenSeconds {
                        from: ms(t["updated_at"].as_str().unwrap()),
                    },
                };
                (id, expect, kind)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let started = now();
    let end = started + RUN.as_millis() as i64;
    let mut every: Vec<i64> = created
        .iter()
        .filter(|(_, _, k)| *k == "every")
        .map(|(id, _, _)| *id)
        .collect();
    every.sort();
    let (disabled, updated) = (every[0], every[1]);

    // 6 s in: disable one every-second timer, move another to every 3 s.
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_secs(6)).await;
    let r = client
        .post(format!("{rest}/v1/timers/{disabled}/disable"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let disabled_at = now();
    let r = client
        .patch(format!("{rest}/v1/timers/{updated}"))
        .json(&json!({ "schedule": { "every": "3s" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let updated_at = now();
    let v2: Value = r.json().await.unwrap();
    let new_schedule = Expect::Every {
        first: ms(v2["schedule"]["at"].as_str().unwrap()),
        interval: 3_000,
    };

    // 9 s in: both executors have worked; stop one of them mid-run.
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_secs(3)).await;
    for (_, admin) in &cluster.executors {
        let metrics = client
            .get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let accepted: f64 = metrics
            .lines()
            .find(|l| l.starts_with("chime_executor_accepted_total"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(accepted > 0.0, "executor at {admin} received no work");
    }
    if let Some((second, _)) = cluster.executors.get(1) {
        cluster.services[*second].stop().await;
    }
    let stopped_at = now();

    // Let the rest of the run play out, then wait for every fire time due by its end.
    let wait = Duration::from_millis(u64::try_from(end - now()).unwrap_or(0));
    tokio::time::sleep(wait).await;
    let cutoff = end;
    let mut expected: HashMap<(i64, i64), ()> = HashMap::new();
    for (id, expect, _) in &created {
        let times = if *id == disabled {
            // Anything due before the disable call (and not yet claimed) may go either way.
            expect.between(0, disabled_at - 1_000)
        } else if *id == updated {
            let mut t = expect.between(0, updated_at - 1_000);
            t.extend(new_schedule.between(updated_at, cutoff));
            t
        } else {
            expect.between(0, cutoff)
        };
        for at in times {
            expected.insert((*id, at), ());
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got: BTreeSet<(i64, i64)> = sink.received().iter().map(checked).collect();
        let missing: Vec<_> = expected.keys().filter(|k| !got.contains(k)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} expected callbacks never arrived, e.g. {:?}",
            missing.len(),
            expected.len(),
            &missing[..missing.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Exactly once, on time, and nothing off-schedule.
    let received = sink.received();
    let mut seen: HashMap<(i64, i64), usize> = HashMap::new();
    let mut lateness = Vec::new();
    for r in &received {
        let (timer, at) = checked(r);
        *seen.entry((timer, at)).or_default() += 1;
        if expected.contains_key(&(timer, at)) {
            lateness.push(r.at_ms - at);
        }
        // A run claimed before the disable may still arrive; none due later does.
        if timer == disabled {
            assert!(
                at <= disabled_at + 1_000,
                "the disabled timer fired its run due {} ms after the disable call",
                at - disabled_at
            );
        }
        if timer == updated && at > updated_at {
            assert!(
                new_schedule.between(at, at).contains(&at),
                "the updated timer fired on its old schedule at {at}"
            );
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    lateness.sort_unstable();
    let (p50, p99, max) = (
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        *lateness.last().unwrap(),
    );
    eprintln!(
        "e2e {mode:?} lateness over {} callbacks: p50 {p50} ms, p99 {p99} ms, max {max} ms \
         (stopped an executor at +{} ms: {})",
        lateness.len(),
        stopped_at - started,
        mode == Mode::Distributed,
    );
    assert!(lateness[0] >= 0, "a callback arrived before its due time");
    assert!(
        p99 <= chime_e2e::ON_TIME_MS,
        "p99 lateness {p99} ms: callbacks wait for something"
    );

    // The runs API tells the same story, once the outcomes are written: an executor writes
    // one after its callback returned, so the last callbacks' runs may still be `running`.
    let listed = |id: i64| {
        let (client, rest) = (client.clone(), rest.clone());
        async move {
            let mut runs = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let mut url = format!("{rest}/v1/timers/{id}/runs?page_size=1000");
                if let Some(t) = &token {
                    url.push_str(&format!("&page_token={t}"));
                }
                let page: Value = client.get(url).send().await.unwrap().json().await.unwrap();
                runs.extend(page["runs"].as_array().unwrap().clone());
                match page["next_page_token"].as_str() {
                    Some(t) => token = Some(t.to_owned()),
                    None => break,
                }
            }
            runs
        }
    };
    for (id, _, _) in &created {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let runs = loop {
            let runs = listed(*id).await;
            let succeeded: BTreeSet<i64> = runs
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .map(|r| ms(r["run_at"].as_str().unwrap()))
                .collect();
            let all = expected
                .keys()
                .filter(|(t, _)| t == id)
                .all(|(_, at)| succeeded.contains(at));
            if all || tokio::time::Instant::now() >= deadline {
                break runs;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let by_at: HashMap<i64, &Value> = runs
            .iter()
            .map(|r| (ms(r["run_at"].as_str().unwrap()), r))
            .collect();
        for (timer, at) in expected.keys().filter(|(t, _)| t == id) {
            let run = by_at
                .get(at)
                .unwrap_or_else(|| panic!("no run {timer}:{at} listed"));
            assert_eq!(run["status"], "succeeded", "{run}");
            assert!(run["lateness_ms"].as_i64().is_some(), "{run}");
        }
    }

    for s in &mut cluster.services {
        if s.running() {
            s.stop().await;
        }
    }
}
