//! What the fault and durability tests share: creating timers over REST, and reading what
//! the loopback sink received ("lost" and "duplicated" come from the sink, never from
//! Chime's tables).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chime_domain::{Clock, SystemClock, Timestamp};
use chime_test_support::sink::{Received, Sink};
use futures::StreamExt;
use serde_json::{Value, json};

pub fn now() -> i64 {
    SystemClock.now().as_millis()
}

pub fn ms(rfc3339: &str) -> i64 {
    Timestamp::parse_rfc3339(rfc3339).unwrap().as_millis()
}

/// A client carrying the deployment's admin token.
pub fn client() -> reqwest::Client {
    chime_test_support::deploy::api_client().build().unwrap()
}

/// The gateway's gRPC timer API at `url`, with the deployment's admin token.
pub async fn grpc(url: &str) -> chime_proto::AuthedTimerClient {
    let channel = tonic::transport::Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    chime_proto::v1::timer_service_client::TimerServiceClient::with_interceptor(
        channel,
        chime_test_support::deploy::bearer(),
    )
}

pub async fn get_json(url: String) -> Value {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Creates one-shot timers calling `url`, due at each of `at` (unix ms), 100 per batch, four
/// batches at a time. Returns the expected task keys.
pub async fn one_shots(rest: &str, url: &str, at: &[i64]) -> HashSet<String> {
    one_shots_named(rest, url, "once", at).await
}

/// [`one_shots`] named `{prefix}-{i}`, so one test can create several sets.
pub async fn one_shots_named(rest: &str, url: &str, prefix: &str, at: &[i64]) -> HashSet<String> {
    one_shots_to(rest, json!({ "callback": { "url": url } }), prefix, at).await
}

/// [`one_shots_named`] with the fields of `extra` (at least `callback`: a URL, a worker
/// group, a broker; perhaps `retry`).
pub async fn one_shots_to(rest: &str, extra: Value, prefix: &str, at: &[i64]) -> HashSet<String> {
    let c = client();
    let batches: Vec<Vec<(usize, i64)>> = at
        .iter()
        .copied()
        .enumerate()
        .collect::<Vec<_>>()
        .chunks(100)
        .map(<[_]>::to_vec)
        .collect();
    let created: Vec<Vec<String>> = futures::stream::iter(batches)
        .map(|batch| {
            let (c, rest, extra) = (c.clone(), rest.to_owned(), extra.clone());
            let requests: Vec<Value> = batch
                .iter()
                .map(|(i, due)| {
                    let mut timer = json!({ "app": "faults", "name": format!("{prefix}-{i}"),
                        "schedule": { "at": Timestamp::from_millis(*due).to_rfc3339() } });
                    for (k, v) in extra.as_object().expect("an object") {
                        timer[k] = v.clone();
                    }
                    json!({ "timer": timer })
                })
                .collect();
            async move {
                let r = c
                    .post(format!("{rest}/v1/timers:batchCreate"))
                    .json(&json!({ "requests": requests }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
                let body: Value = r.json().await.unwrap();
                body["timers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| {
                        format!(
                            "{}:{}",
                            t["id"].as_i64().unwrap(),
                            ms(t["schedule"]["at"].as_str().unwrap())
                        )
                    })
                    .collect()
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    created.into_iter().flatten().collect()
}

pub async fn create(rest: &str, body: Value) -> Value {
    let r = client()
        .post(format!("{rest}/v1/timers"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    r.json().await.unwrap()
}

/// Deliveries per Idempotency-Key.
pub fn deliveries(sink: &Sink) -> HashMap<String, Vec<Received>> {
    let mut by_key: HashMap<String, Vec<Received>> = HashMap::new();
    for r in sink.received() {
        let key = r.header("idempotency-key").unwrap().to_owned();
        by_key.entry(key).or_default().push(r);
    }
    by_key
}

/// Waits until every expected key was delivered, or fails naming how many were lost.
pub async fn wait_delivered(sink: &Sink, expected: &HashSet<String>, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let lost = sink.missing(expected);
        if lost == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{lost} of {} occurrences lost",
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Duplicates (second and later deliveries of a key); each necessarily shares the key.
/// Prints a few, with their attempt numbers and arrival times, to tell retries from
/// double hand-offs.
pub fn duplicates(sink: &Sink) -> usize {
    let all = deliveries(sink);
    let twice: Vec<_> = all.iter().filter(|(_, v)| v.len() > 1).collect();
    for (key, v) in twice.iter().take(5) {
        let seen: Vec<String> = v
            .iter()
            .map(|r| {
                format!(
                    "attempt {} at {}",
                    r.header("x-chime-attempt").unwrap_or("?"),
                    r.at_ms
                )
            })
            .collect();
        eprintln!("duplicate {key}: {}", seen.join(", "));
    }
    all.values().map(|v| v.len() - 1).sum()
}

pub fn due_over(from_ms: i64, span_ms: i64, n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| from_ms + span_ms * i as i64 / n as i64)
        .collect()
}

/// Polls `cond` until it holds, or fails with `what` after `within`.
pub async fn until<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + within;
    while !cond().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the sink received on `path`.
pub fn on(sink: &Sink, path: &str) -> Vec<Received> {
    sink.received()
        .into_iter()
        .filter(|r| r.path == path)
        .collect()
}

/// The idempotency keys of `got`.
pub fn keys(got: &[Received]) -> HashSet<String> {
    got.iter()
        .map(|r| r.header("idempotency-key").unwrap().to_owned())
        .collect()
}

/// A recurring timer the fault tests count tick by tick.
#[derive(Debug, Clone, Copy)]
pub struct Ticker {
    pub id: i64,
    /// Its first fire time, and the time between fire times (unix ms).
    pub first: i64,
    pub every_ms: i64,
}

impl Ticker {
    /// Its fire times in `[from, to]`.
    pub fn ticks(&self, from: i64, to: i64) -> Vec<i64> {
        (0..)
            .map(|k| self.first + k * self.every_ms)
            .skip_while(|at| *at < from)
            .take_while(|at| *at <= to)
            .collect()
    }
}

/// `n` timers every `every_s` seconds calling `url` (perhaps a `/delay/…` path) with
/// callback timeout `timeout`, at every default policy: their runs unwritten, when the
/// deployment leaves such timers' runs so (`migrator.unwritten_runs`, on by default).
pub async fn unwritten_tickers(
    rest: &str,
    url: &str,
    prefix: &str,
    n: usize,
    every_s: i64,
    timeout: &str,
) -> Vec<Ticker> {
    let mut out = Vec::new();
    for i in 0..n {
        let t = create(
            rest,
            json!({ "app": "faults", "name": format!("{prefix}-{i}"),
                    "schedule": { "every": format!("{every_s}s") },
                    "callback": { "url": url, "timeout": timeout } }),
        )
        .await;
        out.push(Ticker {
            id: t["id"].as_i64().unwrap(),
            first: ms(t["next_runs"][0]["utc"].as_str().unwrap()),
            every_ms: every_s * 1_000,
        });
    }
    // Their runs are not written ahead: the run ten ticks on has no row yet.
    let t = out[0];
    let ahead = format!("{rest}/v1/runs/{}:{}", t.id, t.first + 10 * t.every_ms);
    let r = client().get(ahead).send().await.unwrap();
    assert_eq!(r.status(), 404, "unwritten runs have no rows ahead");
    out
}

/// The ticks of `tickers` in `[from, to]` the sink did not receive, each with its run's
/// status (`None`: no row at all, a run lost without trace).
pub async fn ticks_not_received(
    rest: &str,
    sink: &Sink,
    tickers: &[Ticker],
    from: i64,
    to: i64,
) -> Vec<(String, Option<String>)> {
    let got: HashSet<String> = deliveries(sink).into_keys().collect();
    let mut out = Vec::new();
    for t in tickers {
        for at in t.ticks(from, to) {
            let key = format!("{}:{at}", t.id);
            if got.contains(&key) {
                continue;
            }
            let r = client()
                .get(format!("{rest}/v1/runs/{key}"))
                .send()
                .await
                .unwrap();
            let status = if r.status() == 404 {
                None
            } else {
                let run: Value = r.json().await.unwrap();
                run["status"].as_str().map(str::to_owned)
            };
            out.push((key, status));
        }
    }
    out
}

/// Asserts every tick of `tickers` in `[from, to]` was delivered or recorded `skipped` (a
/// run its next one overtook while a fault held it up, by design); returns how many were
/// skipped.
pub async fn assert_ticks_accounted(
    rest: &str,
    sink: &Sink,
    tickers: &[Ticker],
    from: i64,
    to: i64,
) -> usize {
    let not_received = ticks_not_received(rest, sink, tickers, from, to).await;
    let unaccounted: Vec<&(String, Option<String>)> = not_received
        .iter()
        .filter(|(_, status)| status.as_deref() != Some("skipped"))
        .collect();
    assert!(
        unaccounted.is_empty(),
        "{} ticks neither delivered nor skipped: {:?}",
        unaccounted.len(),
        &unaccounted[..unaccounted.len().min(10)]
    );
    not_received.len()
}
