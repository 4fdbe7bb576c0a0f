//! Retry and misfire policies under faults: real processes over real PostgreSQL and Redis,
//! a loopback sink, and callees that fail or schedulers that are gone. What the policies
//! promise is in docs/guarantees.md; "lost" is the expected set minus what the sink received.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use chime_e2e::faults::{shared, wait_until};
use chime_e2e::timers::{client, create, deliveries, get_json, ms, now};
use chime_test_support::sink::{Received, Sink};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_dead_letters_and_redrive() {
    let s = shared().await;
    let sink = Sink::start().await.unwrap();
    let mut c = s.cluster("retries", 1, 1, Vec::new()).await;
    let retry = json!({ "max_attempts": 3, "initial_backoff": "1s", "jitter": false });
    let flaky = create(&c.rest, json!({ "app": "faults", "name": "flaky",
        "schedule": { "after": "2s" }, "callback": { "url": sink.url("/flaky/2") }, "retry": retry })).await;
    let down = create(&c.rest, json!({ "app": "faults", "name": "down",
        "schedule": { "after": "2s" }, "callback": { "url": sink.url("/switch") }, "retry": retry })).await;
    let bad = create(&c.rest, json!({ "app": "faults", "name": "bad",
        "schedule": { "after": "2s" }, "callback": { "url": sink.url("/status/400") }, "retry": retry })).await;
    let key = |t: &Value| format!("{}:{}", t["id"], ms(t["schedule"]["at"].as_str().unwrap()));
    let runs = |t: &Value| {
        let url = format!("{}/v1/timers/{}/runs", c.rest, t["id"]);
        async move { get_json(url).await["runs"][0].clone() }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (a, b) = (runs(&flaky).await, runs(&down).await);
        if a["status"] == "succeeded" && b["status"] == "dead" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "flaky {a}, down {b}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 500, 500, 200: succeeded on attempt 3, ~1 s then ~2 s apart, same key each time.
    let got = deliveries(&sink);
    let tries: Vec<&Received> = got[&key(&flaky)].iter().collect();
    let attempts: Vec<&str> = tries
        .iter()
        .map(|r| r.header("x-chime-attempt").unwrap())
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    let gaps: Vec<i64> = tries.windows(2).map(|w| w[1].at_ms - w[0].at_ms).collect();
    // Never before the backoff; the upper bounds leave a busy machine a second.
    assert!(
        (900..2_400).contains(&gaps[0]) && (1_900..3_400).contains(&gaps[1]),
        "{gaps:?}"
    );
    assert_eq!(runs(&flaky).await["attempt"], 3);

    // Always 500: dead after 3 attempts, in the dead letters.
    assert_eq!(got[&key(&down)].len(), 3);
    let dead = get_json(format!("{}/v1/dead-letters?app=faults", c.rest)).await;
    let dead_keys: Vec<&str> = dead["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["task_key"].as_str().unwrap())
        .collect();
    assert_eq!(dead_keys, [key(&down).as_str()]);
    // The sink recovers; a redrive delivers.
    sink.set_healthy(true);
    let r = client()
        .post(format!("{}/v1/dead-letters/{}/redrive", c.rest, key(&down)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while runs(&down).await["status"] != "succeeded" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "redrive never delivered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(deliveries(&sink)[&key(&down)].len(), 4);

    // 400: one attempt, failed, never retried.
    let b = runs(&bad).await;
    assert_eq!(
        (b["status"].as_str(), b["attempt"].as_u64()),
        (Some("failed"), Some(1))
    );
    assert_eq!(deliveries(&sink)[&key(&bad)].len(), 1);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_policies_after_half_a_minute_without_schedulers() {
    // Long enough for each policy's count to tell them apart (30 fire times against 1 or
    // none); the thresholds below are what make them misfired, not the outage's length.
    const OUTAGE: Duration = Duration::from_secs(30);
    let s = shared().await;
    let sink = Sink::start().await.unwrap();
    let mut c = s
        .cluster(
            "misfire",
            1,
            1,
            vec![
                // Tight, so that few fire times near the restart count as merely late.
                ("CHIME_SCHEDULER__SWEEP_AFTER", "500ms".into()),
                ("CHIME_SCHEDULER__MISFIRE_THRESHOLD", "500ms".into()),
            ],
        )
        .await;
    let mut timers = BTreeMap::new();
    for policy in ["fire_once", "fire_all", "skip"] {
        let t = create(
            &c.rest,
            json!({ "app": "faults", "name": policy, "misfire": policy,
            "schedule": { "every": "1s" }, "callback": { "url": sink.url("/hook") } }),
        )
        .await;
        timers.insert(policy, t["id"].as_i64().unwrap());
    }
    // Each timer fires before the scheduler goes.
    let fired = |id: i64| {
        sink.received()
            .iter()
            .any(|r| r.header("x-chime-timer-id") == Some(id.to_string().as_str()))
    };
    wait_until("every timer fired", Duration::from_secs(20), || async {
        timers.values().all(|id| fired(*id))
    })
    .await;
    c.schedulers[0].service.stop().await;
    let down = now();
    tokio::time::sleep(OUTAGE).await;
    let up = now();
    c.schedulers[0].restart().await;
    // Until every fire time up to the restart is settled (delivered or skipped): none of
    // them is still pending, retrying or running.
    let rest = c.rest.clone();
    wait_until("the outage settled", Duration::from_secs(60), || {
        let rest = rest.clone();
        let ids: Vec<i64> = timers.values().copied().collect();
        async move {
            for id in ids {
                for status in ["pending", "retrying", "running"] {
                    let page = get_json(format!(
                        "{rest}/v1/timers/{id}/runs?status={status}&page_size=1000"
                    ))
                    .await;
                    let open = page["runs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| ms(r["run_at"].as_str().unwrap()) <= up);
                    if open {
                        return false;
                    }
                }
            }
            true
        }
    })
    .await;

    // Deliveries per policy of fire times inside the outage. The last one or two before the
    // restart are within the threshold when the scheduler gets to them: merely late, they
    // fire whatever the policy. Everything older is misfired.
    let mut in_outage: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in sink.received() {
        let id: i64 = r.header("x-chime-timer-id").unwrap().parse().unwrap();
        let at = ms(r.header("x-chime-scheduled-at").unwrap());
        if (down + 1_000..=up).contains(&at) {
            in_outage.entry(id).or_default().push(at);
        }
    }
    let of = |p: &str| in_outage.get(&timers[p]).cloned().unwrap_or_default();
    let older = |p: &str| of(p).into_iter().filter(|at| *at < up - 2_000).count();
    let gap = ((up - down) / 1_000) as usize;
    eprintln!(
        "misfire after {} s without schedulers (gap ~{gap}): fire_once delivered {:?}, \
         fire_all {}, skip {:?}",
        OUTAGE.as_secs(),
        of("fire_once").iter().map(|at| at - up).collect::<Vec<_>>(),
        of("fire_all").len(),
        of("skip").iter().map(|at| at - up).collect::<Vec<_>>(),
    );
    // fire_once: one for the gap (its latest), plus at most one merely late. On a busy
    // machine the timer's next fire time can come before that run is claimed: the executor
    // then skips it as overtaken, and the next run is the one that fires.
    assert!(of("fire_once").len() <= 2, "{:?}", of("fire_once"));
    if of("fire_once").is_empty() {
        let skipped = get_json(format!(
            "{rest}/v1/timers/{}/runs?status=skipped&page_size=1000",
            timers["fire_once"]
        ))
        .await;
        let overtaken = skipped["runs"].as_array().unwrap().iter().any(|r| {
            (down + 1_000..=up).contains(&ms(r["run_at"].as_str().unwrap()))
                && r["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("misfired: the next run"))
        });
        assert!(
            overtaken,
            "fire_once neither fired nor was overtaken: {skipped}"
        );
    }
    assert_eq!(older("fire_once"), 0, "older fire times were skipped");
    // fire_all: the whole gap.
    assert!(
        of("fire_all").len() + 1 >= gap,
        "fire_all {}",
        of("fire_all").len()
    );
    // skip: none of the gap (at most one merely late).
    assert!(of("skip").len() <= 1, "{:?}", of("skip"));
    assert_eq!(older("skip"), 0);
    c.stop().await;
}
