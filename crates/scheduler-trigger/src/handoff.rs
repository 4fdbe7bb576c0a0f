//! Handing due task keys to executors: the [`Handoff`] trait, and its gRPC implementation
//! that balances over the executor fleet.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chime_domain::TaskKey;
use chime_proto::v1::executor_service_client::ExecutorServiceClient;
use chime_proto::v1::{ExecuteRequest, Task};
use chime_runtime::fleet::Fleet;
pub use chime_runtime::fleet::{Endpoints, EndpointsError};
use tonic::transport::ClientTlsConfig;

/// Where due keys go. Implemented over gRPC by [`GrpcExecutors`], and in-process by
/// `chime dev`.
#[async_trait]
pub trait Handoff: Send + Sync + 'static {
    /// Hands over `keys`; returns how many, from the front, some executor accepted. The rest
    /// were refused (every executor full or unreachable) and stay with the caller.
    async fn hand_off(&self, keys: &[TaskKey]) -> usize;

    /// [`Handoff::hand_off`] of keys whose first `on_time` are on time and the rest a
    /// backlog ([`chime_domain::BACKLOG_AFTER`]). Where offers are merged, the keys on time
    /// of every offer go before any backlog.
    async fn hand_off_ordered(&self, keys: &[TaskKey], on_time: usize) -> usize {
        let _ = on_time;
        self.hand_off(keys).await
    }
}

/// The executor fleet over gRPC. Each batch starts at the next replica in turn; what one
/// replica does not take (full, stopping, unreachable) goes to the next. Channels are
/// lazy and reconnect by themselves.
pub struct GrpcExecutors {
    fleet: Arc<Fleet>,
    next: AtomicUsize,
    /// Rounds over every replica before giving a batch back to the caller.
    rounds: u32,
}

impl GrpcExecutors {
    /// Starts with the endpoints resolved now (see [`Fleet::new`]).
    pub async fn new(endpoints: Endpoints) -> Arc<Self> {
        Self::with_tls(endpoints, None).await
    }

    /// [`Self::new`], calling executors over TLS with `tls` (`https://` URLs, or every
    /// address of a DNS name, whose host name the certificates must name).
    pub async fn with_tls(endpoints: Endpoints, tls: Option<ClientTlsConfig>) -> Arc<Self> {
        Arc::new(Self {
            fleet: Fleet::new(endpoints, tls, Duration::from_secs(2)).await,
            next: AtomicUsize::new(0),
            rounds: 3,
        })
    }

    /// Re-resolves a DNS endpoint every `every` until `stop`.
    pub fn keep_resolving(&self, every: Duration, stop: tokio_util::sync::CancellationToken) {
        self.fleet.keep_resolving(every, stop);
    }

    /// Balances over the executors announced in the membership roster instead, read every
    /// `every` until `stop` (see [`Fleet::follow_roster`]).
    pub fn follow_roster(
        &self,
        membership: Arc<dyn chime_storage::Membership>,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let group = chime_runtime::fleet::EXECUTORS_GROUP;
        self.fleet.follow_roster(membership, group, every, stop);
    }

    /// The targets currently balanced over.
    pub async fn targets(&self) -> Vec<String> {
        self.fleet.targets().await
    }
}

#[async_trait]
impl Handoff for GrpcExecutors {
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        self.send(keys, None).await
    }

    async fn hand_off_ordered(&self, keys: &[TaskKey], on_time: usize) -> usize {
        self.send(keys, Some(on_time)).await
    }
}

impl GrpcExecutors {
    /// Offers `keys` replica by replica; `on_time`, when known, says how many of them, from
    /// the front, are on time.
    async fn send(&self, keys: &[TaskKey], on_time: Option<usize>) -> usize {
        let replicas = self.fleet.replicas().await;
        if replicas.is_empty() || keys.is_empty() {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "hand_off",
            keys = keys.len(),
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        chime_runtime::record_ids(&span);
        let mut done = 0;
        let mut backoff = Duration::from_millis(10);
        for round in 0..self.rounds {
            for i in 0..replicas.len() {
                let replica = &replicas[(start + i) % replicas.len()];
                let tasks = keys[done..]
                    .iter()
                    .map(|k| Task {
                        timer_id: k.timer_id.get(),
                        run_at_ms: k.run_at.as_millis(),
                    })
                    .collect();
                let request_on_time =
                    on_time.map(|n| u32::try_from(n.saturating_sub(done)).unwrap_or(u32::MAX));
                match ExecutorServiceClient::new(replica.channel.clone())
                    .execute(traced(
                        &span,
                        ExecuteRequest {
                            tasks,
                            on_time: request_on_time,
                        },
                    ))
                    .await
                {
                    Ok(answer) => {
                        let accepted = answer.into_inner().accepted as usize;
                        done += accepted.min(keys.len() - done);
                        if done == keys.len() {
                            return done;
                        }
                        metrics::counter!("chime_scheduler_handoff_refused_total", "reason" => "full")
                            .increment(1);
                        if i + 1 == replicas.len() && on_time.is_some_and(|n| done >= n) {
                            // Only a backlog was refused, by every replica: its share of
                            // room is taken. The shard offers it again after its own
                            // back-off; rounds here would hold up the replies of the keys
                            // on time merged into this call.
                            return done;
                        }
                    }
                    Err(status) => {
                        metrics::counter!("chime_scheduler_handoff_refused_total", "reason" => "error")
                            .increment(1);
                        tracing::debug!(executor = %replica.target, %status, "executor refused a batch");
                    }
                }
            }
            if round + 1 < self.rounds {
                tokio::time::sleep(backoff).await;
                backoff *= 4;
            }
        }
        done
    }
}

/// A request carrying `span`'s context (`traceparent`) in its metadata.
fn traced<T>(span: &tracing::Span, message: T) -> tonic::Request<T> {
    let mut headers = http::HeaderMap::new();
    chime_runtime::inject_context(span, &mut headers);
    let mut request = tonic::Request::new(message);
    for (name, value) in &headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(name.as_str().as_bytes()),
            value.to_str().map(tonic::metadata::MetadataValue::try_from),
        ) && let Ok(v) = v
        {
            request.metadata_mut().insert(k, v);
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_executors_take_nothing() {
        let missing = GrpcExecutors::new(Endpoints::Dns {
            host: "no-such-host.invalid".into(),
            port: 1,
        })
        .await;
        assert_eq!(missing.hand_off(&[]).await, 0);
    }
}

/// Hand-offs made at the same moment by several shards of one replica, merged into one call.
/// Shards hand off on a shared grid (`dispatch`), so at a steady rate each replica's shards
/// offer their keys on the same timer tick: one call carries them all, instead of one gRPC
/// call (and one claim round trip at the executor) per shard. Calls still run concurrently:
/// offers arriving while one is in flight go in the next, never waiting for it.
pub(crate) struct Merged {
    inner: Arc<dyn Handoff>,
    /// Keys per merged call, at most; one offer larger than this goes alone.
    max_keys: usize,
    queue: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Offer>>,
}

/// How long a merged call waits for the offers of the other shards of its tick.
const MERGE_WINDOW: Duration = Duration::from_millis(1);

struct Offer {
    keys: Vec<TaskKey>,
    /// The first `on_time` keys are on time, the rest a backlog.
    on_time: usize,
    reply: tokio::sync::oneshot::Sender<usize>,
}

impl Merged {
    pub(crate) fn new(inner: Arc<dyn Handoff>, max_keys: usize) -> Self {
        Self {
            inner,
            max_keys: max_keys.max(1),
            queue: std::sync::OnceLock::new(),
        }
    }

    /// The merging task, started on first use (on the caller's runtime).
    fn queue(&self) -> &tokio::sync::mpsc::UnboundedSender<Offer> {
        self.queue.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(merge(self.inner.clone(), rx, self.max_keys));
            tx
        })
    }
}

#[async_trait]
impl Handoff for Merged {
    /// Keys offered without saying which are on time are the sweeper's, all overdue: a
    /// backlog.
    async fn hand_off(&self, keys: &[TaskKey]) -> usize {
        self.hand_off_ordered(keys, 0).await
    }

    async fn hand_off_ordered(&self, keys: &[TaskKey], on_time: usize) -> usize {
        if keys.is_empty() {
            return 0;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let offer = Offer {
            keys: keys.to_vec(),
            on_time: on_time.min(keys.len()),
            reply,
        };
        if self.queue().send(offer).is_err() {
            return 0;
        }
        // Dropped unanswered (the runtime is stopping): nothing was taken.
        answer.await.unwrap_or(0)
    }
}

async fn merge(
    inner: Arc<dyn Handoff>,
    mut offers: tokio::sync::mpsc::UnboundedReceiver<Offer>,
    max_keys: usize,
) {
    let mut carried: Option<Offer> = None;
    loop {
        let first = match carried.take() {
            Some(o) => o,
            None => match offers.recv().await {
                Some(o) => o,
                None => return,
            },
        };
        // Shards woken by the same tick offer within a moment of each other (each removes its
        // keys from Redis first): a millisecond gathers them into this call. Their keys are
        // handed off well ahead of due, so it costs no lateness.
        let until = tokio::time::Instant::now() + MERGE_WINDOW;
        let mut batch = vec![first];
        let mut keys = batch[0].keys.len();
        while let Ok(Some(o)) = tokio::time::timeout_at(until, offers.recv()).await {
            if keys + o.keys.len() > max_keys {
                carried = Some(o);
                break;
            }
            keys += o.keys.len();
            batch.push(o);
        }
        let inner = inner.clone();
        tokio::spawn(async move {
            // Every offer's keys on time, then every offer's backlog: executors take from the
            // front, so a backlog never takes the room another shard's keys on time need.
            let on_time: usize = batch.iter().map(|o| o.on_time).sum();
            let all: Vec<TaskKey> = batch
                .iter()
                .flat_map(|o| &o.keys[..o.on_time])
                .chain(batch.iter().flat_map(|o| &o.keys[o.on_time..]))
                .copied()
                .collect();
            let taken = inner.hand_off_ordered(&all, on_time).await;
            // What each offer had taken, from its front: its keys on time in offer order,
            // then its backlog in offer order (a backlog is reached only once every key on
            // time was taken).
            let (mut timely_left, mut backlog_left) =
                (taken.min(on_time), taken.saturating_sub(on_time));
            for o in batch {
                let t = o.on_time.min(timely_left);
                timely_left -= t;
                let b = (o.keys.len() - o.on_time).min(backlog_left);
                backlog_left -= b;
                let _ = o.reply.send(t + b);
            }
        });
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use chime_domain::{TimerId, Timestamp};
    use std::sync::Mutex;

    /// Takes at most `room` keys a call, and notes each call's size.
    struct Limited {
        room: usize,
        calls: Mutex<Vec<usize>>,
    }

    #[async_trait]
    impl Handoff for Limited {
        async fn hand_off(&self, keys: &[TaskKey]) -> usize {
            self.calls.lock().unwrap().push(keys.len());
            keys.len().min(self.room)
        }
    }

    fn keys(from: i64, n: i64) -> Vec<TaskKey> {
        (from..from + n)
            .map(|i| TaskKey::new(TimerId::new(i).unwrap(), Timestamp::from_millis(i)))
            .collect()
    }

    #[tokio::test]
    async fn offers_made_together_go_in_one_call_and_refusals_fall_on_the_last() {
        let limited = Arc::new(Limited {
            room: 25,
            calls: Mutex::new(Vec::new()),
        });
        let merged = Arc::new(Merged::new(limited.clone(), 1_000));
        let offers = (0..4).map(|i| {
            let merged = merged.clone();
            async move { merged.hand_off(&keys(1 + i * 10, 10)).await }
        });
        let taken = futures::future::join_all(offers).await;
        assert_eq!(*limited.calls.lock().unwrap(), vec![40]);
        assert_eq!(taken, vec![10, 10, 5, 0]);
    }

    #[tokio::test]
    async fn a_merged_call_holds_at_most_max_keys() {
        let limited = Arc::new(Limited {
            room: usize::MAX,
            calls: Mutex::new(Vec::new()),
        });
        let merged = Arc::new(Merged::new(limited.clone(), 25));
        let offers = (0..4).map(|i| {
            let merged = merged.clone();
            async move { merged.hand_off(&keys(1 + i * 10, 10)).await }
        });
        assert_eq!(futures::future::join_all(offers).await, vec![10; 4]);
        let calls = limited.calls.lock().unwrap().clone();
        assert!(calls.iter().all(|&n| n <= 25), "{calls:?}");
        assert_eq!(calls.iter().sum::<usize>(), 40);
    }

    /// Takes at most `room` keys a call, and notes the keys of each call.
    struct Noting {
        room: usize,
        calls: Mutex<Vec<Vec<TaskKey>>>,
    }

    #[async_trait]
    impl Handoff for Noting {
        async fn hand_off(&self, keys: &[TaskKey]) -> usize {
            self.calls.lock().unwrap().push(keys.to_vec());
            keys.len().min(self.room)
        }
    }

    #[tokio::test]
    async fn keys_on_time_of_every_offer_go_before_any_backlog() {
        let noting = Arc::new(Noting {
            room: 15,
            calls: Mutex::new(Vec::new()),
        });
        let merged = Arc::new(Merged::new(noting.clone(), 1_000));
        // A: 2 keys on time, then 8 of a backlog; B: 10 on time.
        let (a, b) = (keys(1, 10), keys(101, 10));
        let (taken_a, taken_b) = tokio::join!(
            merged.hand_off_ordered(&a, 2),
            merged.hand_off_ordered(&b, 10)
        );
        let calls = noting.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "one merged call");
        let expected: Vec<TaskKey> = a[..2].iter().chain(&b).chain(&a[2..]).copied().collect();
        assert_eq!(
            calls[0], expected,
            "A's on time, B's on time, then A's backlog"
        );
        // 15 taken: the 12 on time and the first 3 of A's backlog, a prefix of each offer.
        assert_eq!((taken_a, taken_b), (5, 10));
    }
}
