//! Recurring timers as users create them: `every` without `start_at` or `end_at`, one REST
//! call each from [`CLIENTS`] clients, so each timer's phase is the moment it was created,
//! the later creates go on while the earlier timers fire, and nothing is written ahead of
//! the first firing but what a create writes itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// REST clients creating the timers, each with a keep-alive connection.
pub(super) const CLIENTS: usize = 16;

/// One created timer: its id and its first fire time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Anchored {
    pub id: i64,
    pub first_ms: i64,
}

/// The timers of one run, all firing every `every_ms`.
pub(super) struct Created {
    pub timers: Vec<Anchored>,
    pub every_ms: i64,
    /// How long the creates took, from the first call to the last answer.
    pub took: Duration,
}

impl Created {
    /// The fire times of `t` in `[from, to)`.
    fn fire_times(&self, t: &Anchored, from: i64, to: i64) -> impl Iterator<Item = i64> {
        let every = self.every_ms.max(1);
        let first = if from <= t.first_ms {
            t.first_ms
        } else {
            t.first_ms + (from - t.first_ms + every - 1) / every * every
        };
        (first..to).step_by(every as usize)
    }

    /// How many firings are due in `[from, to)`.
    pub fn expected(&self, from: i64, to: i64) -> usize {
        self.timers
            .iter()
            .map(|t| self.fire_times(t, from, to).count())
            .sum()
    }

    /// Of the firings due in `[from, to)`: how many never arrived, and how many timers
    /// missed at least one.
    pub fn missing(&self, ds: &[Delivery], from: i64, to: i64) -> Missing {
        let got: HashSet<(i64, i64)> = ds.iter().filter_map(|d| key_of(&d.key)).collect();
        let mut m = Missing::default();
        for t in &self.timers {
            let lost = self
                .fire_times(t, from, to)
                .filter(|at| !got.contains(&(t.id, *at)))
                .count();
            m.firings += lost;
            m.timers += usize::from(lost > 0);
        }
        m
    }
}

#[derive(Debug, Default, Clone, Copy, Serialize, serde::Deserialize)]
pub(super) struct Missing {
    pub firings: usize,
    pub timers: usize,
}

/// `timer_id:run_at_ms`, the idempotency key.
fn key_of(key: &str) -> Option<(i64, i64)> {
    let (id, at) = key.split_once(':')?;
    Some((id.parse().ok()?, at.parse().ok()?))
}

/// Creates `count` timers of the `bench` app firing `every` (as the API writes it) to `url`,
/// one REST call each from [`CLIENTS`] clients, named `{tag}-{i}`.
pub(super) async fn create_every(
    rest: &str,
    count: usize,
    every: &str,
    url: &str,
    tag: &str,
    misfire: Counted,
) -> anyhow::Result<Created> {
    let every_ms = chime_domain::parse_duration(every)
        .map_err(|e| anyhow::anyhow!("{every}: {e}"))?
        .as_millis() as i64;
    let started = Instant::now();
    let (endpoint, url, tag, every) = (
        format!("{rest}/v1/timers"),
        url.to_owned(),
        tag.to_owned(),
        every.to_owned(),
    );
    let timers = each_over_rest(count, move |http, i| {
        let mut body = json!({
            "app": "bench",
            "name": format!("{tag}-{i}"),
            "schedule": {"every": every},
            "callback": {"url": url},
        });
        if let Some(m) = misfire.rest() {
            body["misfire"] = m.into();
        }
        http.post(&endpoint).json(&body)
    })
    .await?
    .iter()
    .map(anchored)
    .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Created {
        timers,
        every_ms,
        took: started.elapsed(),
    })
}

/// Sends `count` REST calls, the `i`-th made by `call(client, i)`, from [`CLIENTS`] clients
/// with keep-alive connections, and returns the answers' bodies in no particular order.
/// Any answer but a success fails it.
pub(super) async fn each_over_rest(
    count: usize,
    call: impl Fn(&reqwest::Client, usize) -> reqwest::RequestBuilder + Send + Sync + 'static,
) -> anyhow::Result<Vec<Value>> {
    Ok(timed_over_rest(count, call)
        .await?
        .into_iter()
        .map(|(body, _)| body)
        .collect())
}

/// [`each_over_rest`], each answer with how long its call took.
pub(super) async fn timed_over_rest(
    count: usize,
    call: impl Fn(&reqwest::Client, usize) -> reqwest::RequestBuilder + Send + Sync + 'static,
) -> anyhow::Result<Vec<(Value, Duration)>> {
    let http = chime_test_support::deploy::api_client()
        .pool_max_idle_per_host(CLIENTS)
        .build()?;
    let (next, call) = (Arc::new(AtomicUsize::new(0)), Arc::new(call));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (http, next, call) = (http.clone(), next.clone(), call.clone());
        clients.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return anyhow::Ok(answers);
                }
                let sent = Instant::now();
                let resp = call(&http, i).send().await?;
                let status = resp.status();
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                ensure!(status.is_success(), "call {i} answered {status}: {body}");
                answers.push((body, sent.elapsed()));
            }
        }));
    }
    let mut answers = Vec::with_capacity(count);
    for c in clients {
        answers.extend(c.await??);
    }
    Ok(answers)
}

/// The id and first fire time of a created `every` timer (its `schedule.at`).
fn anchored(timer: &Value) -> anyhow::Result<Anchored> {
    let id = timer["id"].as_i64().context("a timer without an id")?;
    let at = timer["schedule"]["at"]
        .as_str()
        .context("an every timer without its first fire time")?;
    let first = Timestamp::parse_rfc3339(at).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
    Ok(Anchored {
        id,
        first_ms: first.as_millis(),
    })
}

/// Keeps what the sink receives for firings due in `[from, to)` while the run goes on,
/// taking the rest out of its log, so memory stays bounded however long the timers fire.
pub(super) struct Gather {
    kept: Arc<std::sync::Mutex<Vec<Delivery>>>,
    task: tokio::task::JoinHandle<()>,
    stop: tokio_util::sync::CancellationToken,
}

impl Gather {
    pub fn start(sink: Arc<Sink>, from: i64, to: i64) -> Self {
        let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = tokio_util::sync::CancellationToken::new();
        let (k, s) = (kept.clone(), stop.clone());
        let task = tokio::spawn(async move {
            loop {
                let done = tokio::select! {
                    _ = s.cancelled() => true,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => false,
                };
                let mut more: Vec<Delivery> = deliveries(&sink.take())
                    .into_iter()
                    .filter(|d| (from..to).contains(&d.scheduled_ms))
                    .collect();
                k.lock().expect("gather lock").append(&mut more);
                if done {
                    return;
                }
            }
        });
        Self { kept, task, stop }
    }

    /// Distinct keys gathered so far.
    pub fn distinct(&self) -> usize {
        let kept = self.kept.lock().expect("gather lock");
        kept.iter()
            .map(|d| d.key.as_str())
            .collect::<HashSet<_>>()
            .len()
    }

    /// Waits until `expected` distinct keys are in or `deadline` passes, then `quiet` more
    /// for late duplicates, and returns what was gathered.
    pub async fn finish(
        self,
        expected: usize,
        deadline: Instant,
        quiet: Duration,
    ) -> Vec<Delivery> {
        while self.distinct() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        tokio::time::sleep(quiet).await;
        self.stop.cancel();
        let _ = self.task.await;
        std::mem::take(&mut *self.kept.lock().expect("gather lock"))
    }
}

/// Per timer: how many of its firings arrived (for a look at the unlucky ones).
pub(super) fn per_timer(ds: &[Delivery]) -> HashMap<i64, usize> {
    let mut n = HashMap::new();
    for (id, _) in ds.iter().filter_map(|d| key_of(&d.key)) {
        *n.entry(id).or_insert(0) += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(first: &[i64]) -> Created {
        Created {
            timers: first
                .iter()
                .enumerate()
                .map(|(i, f)| Anchored {
                    id: i as i64 + 1,
                    first_ms: *f,
                })
                .collect(),
            every_ms: 1000,
            took: Duration::ZERO,
        }
    }

    fn delivery(id: i64, at: i64) -> Delivery {
        Delivery {
            key: format!("{id}:{at}"),
            scheduled_ms: at,
            at_ms: at,
            sent_ms: None,
        }
    }

    #[test]
    fn expected_counts_each_timers_fire_times_in_the_window() {
        // One timer starts before the window, one inside it, one after it.
        let c = created(&[500, 10_250, 20_000]);
        // [10_000, 20_000): 10_500 … 19_500 (10), 10_250 … 19_250 (10), none.
        assert_eq!(c.expected(10_000, 20_000), 20);
        assert_eq!(c.expected(0, 1_000), 1);
    }

    #[test]
    fn missing_names_the_firings_and_the_timers_that_did_not_arrive() {
        let c = created(&[0, 300]);
        let ds = vec![
            delivery(1, 0),
            delivery(1, 1000),
            delivery(1, 2000),
            delivery(2, 300),
            delivery(2, 2300),
        ];
        let m = c.missing(&ds, 0, 3000);
        assert_eq!((m.firings, m.timers), (1, 1));
        assert_eq!(per_timer(&ds)[&1], 3);
    }
}
