//! Registered workers: the connections open on this executor ([`Workers`]), and how one
//! delivery finds a worker with room, waits for its answer, and goes to another worker when
//! the connection drops. The gRPC stream that feeds it is [`stream`]; the delivery target
//! that uses it is `targets/worker.rs`.

pub mod peers;
pub mod routing;
pub mod stream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use chime_domain::AppName;
use chime_proto::v1 as pb;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

/// The most deliveries one connection takes at once, whatever credits it grants.
pub const MAX_CREDITS: u32 = 1024;

/// A worker's answer to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// With what the work printed ("" for none), as the run's output.
    Ack { output: String },
    Nack {
        retryable: bool,
        error: String,
        output: String,
    },
}

/// Why a delivery got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// No worker of the group is connected here.
    NoWorker,
    /// Workers are connected, but none had a free credit before the deadline.
    Busy,
    /// The worker took it and did not answer in time.
    Timeout { worker: String },
}

/// The open connections of each app's group.
type Groups = HashMap<(AppName, String), Vec<Arc<Conn>>>;

type Outbound = mpsc::Sender<Result<pb::ExecutorMessage, tonic::Status>>;

/// One open `Connect` stream.
pub struct Conn {
    pub id: String,
    /// The name the worker gave ("" for none).
    name: String,
    /// When it connected, Unix ms.
    registered_at_ms: i64,
    app: AppName,
    group: String,
    tx: Outbound,
    state: Mutex<ConnState>,
}

#[derive(Default)]
struct ConnState {
    window: u32,
    in_flight: u32,
    /// Deliveries that timed out since its last answer: such a worker is chosen last.
    stuck: u32,
    pending: HashMap<String, oneshot::Sender<Reply>>,
    closed: bool,
}

impl Conn {
    fn state(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Workers {
    /// This executor's instance, random at start: tells its workers from other executors'.
    instance: String,
    groups: Mutex<Groups>,
    /// Woken when a credit frees up or a worker comes or goes.
    changed: Notify,
    next_conn: AtomicU64,
    next_delivery: AtomicU64,
}

impl Workers {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            instance: format!("{:016x}", rand::random::<u64>()),
            groups: Mutex::default(),
            changed: Notify::new(),
            next_conn: AtomicU64::new(0),
            next_delivery: AtomicU64::new(0),
        })
    }

    /// The workers of `app`'s `group` connected here, as routed deliveries see them.
    pub fn roster(&self, app: &AppName, group: &str) -> Vec<routing::Member> {
        let groups = self.groups();
        groups
            .get(&(app.clone(), group.to_owned()))
            .map(|list| {
                list.iter()
                    .filter(|c| !c.state().closed)
                    .map(|c| routing::Member {
                        instance: self.instance.clone(),
                        id: c.id.clone(),
                        name: c.name.clone(),
                        registered_at_ms: c.registered_at_ms,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// This executor's instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn groups(&self) -> MutexGuard<'_, Groups> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a connection of `app`'s `group` taking `credits` deliveries at once.
    pub fn register(
        &self,
        app: AppName,
        group: String,
        credits: u32,
        name: &str,
        tx: Outbound,
    ) -> Arc<Conn> {
        let n = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let id = if name.is_empty() {
            format!("w{n}")
        } else {
            format!("w{n}-{name}")
        };
        let conn = Arc::new(Conn {
            id,
            name: name.to_owned(),
            registered_at_ms: chime_domain::Clock::now(&chime_domain::SystemClock).as_millis(),
            app: app.clone(),
            group: group.clone(),
            tx,
            state: Mutex::new(ConnState {
                window: credits.clamp(1, MAX_CREDITS),
                ..ConnState::default()
            }),
        });
        self.groups()
            .entry((app, group))
            .or_default()
            .push(conn.clone());
        self.gauge();
        self.changed.notify_waiters();
        conn
    }

    /// Removes a closed connection; deliveries it held go to other workers.
    pub fn unregister(&self, conn: &Arc<Conn>) {
        {
            let mut groups = self.groups();
            let key = (conn.app.clone(), conn.group.clone());
            if let Some(list) = groups.get_mut(&key) {
                list.retain(|c| !Arc::ptr_eq(c, conn));
                if list.is_empty() {
                    groups.remove(&key);
                }
            }
        }
        let mut state = conn.state();
        state.closed = true;
        // Dropping the senders wakes each waiting delivery with "gone".
        state.pending.clear();
        state.in_flight = 0;
        drop(state);
        self.gauge();
        self.changed.notify_waiters();
    }

    /// A worker's ack or nack of `delivery_id`; unknown ids (answered twice) are ignored.
    pub fn answer(&self, conn: &Conn, delivery_id: &str, reply: Reply) {
        let mut state = conn.state();
        let Some(waiting) = state.pending.remove(delivery_id) else {
            return;
        };
        state.in_flight = state.in_flight.saturating_sub(1);
        // An answer after the deadline (nobody listens any more) does not clear the
        // worker's record of being slow: its next delivery still prefers another worker.
        if waiting.send(reply).is_ok() {
            state.stuck = 0;
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// A worker's new credit window.
    pub fn set_credits(&self, conn: &Conn, credits: u32) {
        conn.state().window = credits.clamp(1, MAX_CREDITS);
        self.changed.notify_waiters();
    }

    /// Connections open now.
    pub fn connected(&self) -> usize {
        self.groups().values().map(Vec::len).sum()
    }

    fn gauge(&self) {
        metrics::gauge!("chime_executor_workers_connected").set(self.connected() as f64);
    }

    /// Sends one delivery (`make` fills in its id) to a worker of `app`'s `group` with a free
    /// credit, and waits for the answer until `deadline`. A connection that closes first
    /// hands it to another worker.
    pub async fn deliver(
        &self,
        app: &AppName,
        group: &str,
        make: impl Fn(String) -> pb::Delivery,
        deadline: Instant,
    ) -> Result<(Reply, String), Unanswered> {
        self.deliver_on(app, group, None, make, deadline).await
    }

    /// [`Workers::deliver`] to connection `only` of the group (a routed delivery): waits for
    /// its credit; `NoWorker` when it is not connected here, or goes before it answers.
    pub async fn deliver_to(
        &self,
        app: &AppName,
        group: &str,
        only: &str,
        make: impl Fn(String) -> pb::Delivery,
        deadline: Instant,
    ) -> Result<(Reply, String), Unanswered> {
        self.deliver_on(app, group, Some(only), make, deadline)
            .await
    }

    async fn deliver_on(
        &self,
        app: &AppName,
        group: &str,
        only: Option<&str>,
        make: impl Fn(String) -> pb::Delivery,
        deadline: Instant,
    ) -> Result<(Reply, String), Unanswered> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.pick(app, group, only) {
                Pick::NoWorker => return Err(Unanswered::NoWorker),
                Pick::Busy => {
                    if tokio::time::timeout_at(deadline, changed).await.is_err() {
                        return Err(Unanswered::Busy);
                    }
                    continue;
                }
                Pick::Conn(conn, id, answer) => {
                    let id_sent = id.clone();
                    let message = pb::ExecutorMessage {
                        kind: Some(pb::executor_message::Kind::Delivery(make(id))),
                    };
                    if conn.tx.try_send(Ok(message)).is_err() {
                        // Closed, or so far behind that its queue is full although credits
                        // bound it: drop it (its deliveries move on) and try another.
                        tracing::warn!(worker = %conn.id, delivery = %id_sent, "worker not reading; dropping it");
                        self.unregister(&conn);
                        continue;
                    }
                    match tokio::time::timeout_at(deadline, answer).await {
                        Ok(Ok(reply)) => return Ok((reply, conn.id.clone())),
                        // The connection closed before answering: another worker.
                        Ok(Err(_)) => continue,
                        Err(_) => {
                            // Its credit stays taken until it answers or goes: a worker
                            // that never answers stops getting work.
                            conn.state().stuck += 1;
                            return Err(Unanswered::Timeout {
                                worker: conn.id.clone(),
                            });
                        }
                    }
                }
            }
        }
    }

    /// The connection with a free credit that has the fewest unanswered timeouts, then the
    /// fewest deliveries in flight, then whose turn it is; its credit is taken.
    fn pick(&self, app: &AppName, group: &str, only: Option<&str>) -> Pick {
        let groups = self.groups();
        let Some(list) = groups.get(&(app.clone(), group.to_owned())) else {
            return Pick::NoWorker;
        };
        if let Some(only) = only {
            let Some(conn) = list.iter().find(|c| c.id == only) else {
                return Pick::NoWorker;
            };
            {
                let s = conn.state();
                if s.closed {
                    return Pick::NoWorker;
                }
                if s.in_flight >= s.window {
                    return Pick::Busy;
                }
            }
            let conn = conn.clone();
            drop(groups);
            return self.take(conn);
        }
        // Ties go round the list, so idle workers share the work.
        let turn = self.next_delivery.load(Ordering::Relaxed) as usize;
        let best = list
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let s = c.state();
                let rank = (
                    s.stuck,
                    s.in_flight,
                    (i + list.len() - turn % list.len()) % list.len(),
                );
                (!s.closed && s.in_flight < s.window).then_some((rank, c))
            })
            .min_by_key(|(rank, _)| *rank)
            .map(|(_, c)| c.clone());
        drop(groups);
        let Some(conn) = best else {
            return Pick::Busy;
        };
        self.take(conn)
    }

    /// Takes one of `conn`'s credits for a new delivery.
    fn take(&self, conn: Arc<Conn>) -> Pick {
        let id = format!("d{}", self.next_delivery.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        let mut state = conn.state();
        state.in_flight += 1;
        state.pending.insert(id.clone(), tx);
        drop(state);
        Pick::Conn(conn, id, rx)
    }
}

enum Pick {
    NoWorker,
    Busy,
    Conn(Arc<Conn>, String, oneshot::Receiver<Reply>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn delivery(id: String) -> pb::Delivery {
        pb::Delivery {
            delivery_id: id,
            ..Default::default()
        }
    }

    fn app() -> AppName {
        AppName::parse("billing").unwrap()
    }

    async fn next_id(
        rx: &mut mpsc::Receiver<Result<pb::ExecutorMessage, tonic::Status>>,
    ) -> String {
        match rx.recv().await.unwrap().unwrap().kind {
            Some(pb::executor_message::Kind::Delivery(d)) => d.delivery_id,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn deliveries_go_to_a_worker_with_credit_and_move_on_when_it_goes() {
        let workers = Workers::new();
        let soon = || Instant::now() + Duration::from_secs(5);
        assert_eq!(
            workers.deliver(&app(), "g", delivery, soon()).await,
            Err(Unanswered::NoWorker)
        );
        let (tx_a, mut rx_a) = mpsc::channel(8);
        let a = workers.register(app(), "g".into(), 1, "a", tx_a);
        let (tx_b, mut rx_b) = mpsc::channel(8);
        let b = workers.register(app(), "g".into(), 1, "b", tx_b);

        // One credit each: two deliveries in flight take both workers.
        let w = workers.clone();
        let first = tokio::spawn(async move { w.deliver(&app(), "g", delivery, soon()).await });
        let w = workers.clone();
        let second = tokio::spawn(async move { w.deliver(&app(), "g", delivery, soon()).await });
        let on_a = next_id(&mut rx_a).await;
        let on_b = next_id(&mut rx_b).await;
        let done = Reply::Ack {
            output: "done".into(),
        };
        workers.answer(&a, &on_a, done.clone());
        assert_eq!(first.await.unwrap().map(|r| r.0).ok(), Some(done));
        // b goes away without answering: its delivery goes to a.
        workers.unregister(&b);
        let moved = next_id(&mut rx_a).await;
        workers.answer(
            &a,
            &moved,
            Reply::Nack {
                retryable: true,
                error: "later".into(),
                output: String::new(),
            },
        );
        let (reply, by) = second.await.unwrap().unwrap();
        assert!(matches!(
            reply,
            Reply::Nack {
                retryable: true,
                ..
            }
        ));
        assert_eq!(by, a.id);
        drop(on_b);
    }

    #[tokio::test]
    async fn a_worker_that_never_answers_is_chosen_last() {
        let workers = Workers::new();
        let (tx_a, mut rx_a) = mpsc::channel(8);
        let a = workers.register(app(), "g".into(), 4, "a", tx_a);
        let quick = Instant::now() + Duration::from_millis(50);
        let timed_out = workers.deliver(&app(), "g", delivery, quick).await;
        assert_eq!(
            timed_out,
            Err(Unanswered::Timeout {
                worker: a.id.clone()
            })
        );
        let _ = next_id(&mut rx_a).await;
        let (tx_b, mut rx_b) = mpsc::channel(8);
        let b = workers.register(app(), "g".into(), 4, "b", tx_b);
        let w = workers.clone();
        let retry = tokio::spawn(async move {
            w.deliver(
                &app(),
                "g",
                delivery,
                Instant::now() + Duration::from_secs(5),
            )
            .await
        });
        let id = next_id(&mut rx_b).await;
        workers.answer(&b, &id, Reply::Ack { output: "".into() });
        assert_eq!(retry.await.unwrap().unwrap().1, b.id);
    }
}
