//! Delivery to registered workers: the occurrence goes over the `Connect` stream of a worker
//! of the timer's app and group connected to this executor, with the headers an HTTP callback
//! carries (idempotency key, attempt, signature, trace context), and the worker's ack or nack
//! is the attempt's outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chime_domain::{
    AppName, ClaimedOccurrence, Clock, Route, Target, Timer, TimerId, format_duration,
};
use chime_proto::v1 as pb;
use chime_runtime::fleet::Replica;

use super::{Attempt, DeliveryTarget, OUTPUT_CAP, Signer, prepare};
use crate::workers::peers::Peers;
use crate::workers::routing::{self, Member};
use crate::workers::{Reply, Unanswered, Workers};

pub struct WorkerTarget {
    pub(super) workers: Arc<Workers>,
    signer: Option<Arc<Signer>>,
    /// Other executors, asked when no worker of the group is connected here.
    pub(super) peers: Option<Peers>,
    /// Round-robin turns taken so far, per app and group.
    turns: Mutex<HashMap<(AppName, String), u64>>,
    /// Where broadcast runs keep their shards.
    pub(super) shards: Option<Arc<dyn chime_storage::Shards>>,
}

impl WorkerTarget {
    pub fn new(workers: Arc<Workers>) -> Self {
        Self {
            workers,
            signer: None,
            peers: None,
            turns: Mutex::default(),
            shards: None,
        }
    }

    /// Keeps broadcast runs' shards in `store` (without one, a broadcast run fails).
    pub fn with_shards(mut self, store: Arc<dyn chime_storage::Shards>) -> Self {
        self.shards = Some(store);
        self
    }

    /// Any worker of the group: the least busy here, else another executor's.
    pub(super) async fn least_busy(
        &self,
        app: &AppName,
        group: &str,
        make: impl Fn(String) -> pb::Delivery,
        deadline: tokio::time::Instant,
    ) -> Result<(Reply, String), Unanswered> {
        match self.workers.deliver(app, group, &make, deadline).await {
            Err(Unanswered::NoWorker) => match &self.peers {
                Some(peers) => {
                    peers
                        .forward(app, group, make(String::new()), deadline)
                        .await
                }
                None => Err(Unanswered::NoWorker),
            },
            other => other,
        }
    }

    /// The group's workers on every executor, each with the executor it is on (`None`:
    /// this one), sorted by who they are.
    pub(super) async fn fleet_roster(
        &self,
        app: &AppName,
        group: &str,
    ) -> Vec<(Member, Option<Replica>)> {
        let mut members: Vec<(Member, Option<Replica>)> = self
            .workers
            .roster(app, group)
            .into_iter()
            .map(|m| (m, None))
            .collect();
        if let Some(peers) = &self.peers {
            // The fleet may list this executor too: its workers are listed once.
            let mine = self.workers.instance();
            members.extend(
                peers
                    .roster(app, group)
                    .await
                    .iter()
                    .filter(|(m, _)| m.instance != mine)
                    .map(|(m, r)| (m.clone(), Some(r.clone()))),
            );
        }
        members.sort_by(|(a, _), (b, _)| routing::order(a, b));
        members
    }

    /// Delivers to member `chosen` of the fleet roster; `NoWorker` when it is gone.
    pub(super) async fn deliver_to_member(
        &self,
        chosen: &(Member, Option<Replica>),
        app: &AppName,
        group: &str,
        make: impl Fn(String) -> pb::Delivery,
        deadline: tokio::time::Instant,
    ) -> Result<(Reply, String), Unanswered> {
        match (chosen, &self.peers) {
            ((m, None), _) => {
                self.workers
                    .deliver_to(app, group, &m.id, &make, deadline)
                    .await
            }
            ((m, Some(replica)), Some(peers)) => {
                peers
                    .forward_to(replica, app, group, &m.id, make(String::new()), deadline)
                    .await
            }
            ((_, Some(_)), None) => Err(Unanswered::NoWorker),
        }
    }

    /// The worker `route` picks among the group's workers on every executor. If it went
    /// since the executors were asked, any worker takes the run (as `least_busy`).
    async fn routed(
        &self,
        route: Route,
        timer: TimerId,
        app: &AppName,
        group: &str,
        make: impl Fn(String) -> pb::Delivery,
        deadline: tokio::time::Instant,
    ) -> Result<(Reply, String), Unanswered> {
        let members = self.fleet_roster(app, group).await;
        let list: Vec<Member> = members.iter().map(|(m, _)| m.clone()).collect();
        // Only round-robin runs take turns: a group's other routes leave its count alone.
        let turn = if route == Route::RoundRobin {
            let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            let turn = turns.entry((app.clone(), group.to_owned())).or_default();
            *turn = turn.wrapping_add(1);
            *turn - 1
        } else {
            0
        };
        let chosen = routing::choose(route, &list, timer, turn)
            .and_then(|c| members.iter().find(|(m, _)| m == c));
        let delivered = match chosen {
            None => Err(Unanswered::NoWorker),
            Some(member) => {
                self.deliver_to_member(member, app, group, &make, deadline)
                    .await
            }
        };
        match delivered {
            Err(Unanswered::NoWorker) => self.least_busy(app, group, make, deadline).await,
            other => other,
        }
    }

    /// Offers deliveries to `peers` when no worker of their group is connected here.
    pub fn with_peers(mut self, peers: Peers) -> Self {
        self.peers = Some(peers);
        self
    }

    /// Signs each delivery with its app's secret, as HTTP callbacks are.
    pub fn with_signer(mut self, signer: Arc<Signer>) -> Self {
        self.signer = Some(signer);
        self
    }
}

#[async_trait]
impl DeliveryTarget for WorkerTarget {
    async fn deliver(
        &self,
        timer: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt {
        let cb = &timer.spec.callback;
        let Target::Worker(target) = &cb.target else {
            return Attempt::failed(&occurrence, clock, "not a worker callback".into(), false);
        };
        let key = occurrence.key;
        let (body, headers, fired_at) =
            match prepare(self.signer.as_ref(), timer, &occurrence, clock).await {
                Ok(prepared) => prepared,
                Err(attempt) => return *attempt,
            };
        let headers: std::collections::HashMap<String, String> = headers.into_iter().collect();
        let timeout = cb.timeout.get();
        let deadline = tokio::time::Instant::now() + timeout;
        let make = |delivery_id: String| pb::Delivery {
            delivery_id,
            idempotency_key: key.to_string(),
            timer_id: key.timer_id.get(),
            app: timer.spec.app.to_string(),
            timer_name: timer.spec.name.to_string(),
            scheduled_at: key.run_at.to_rfc3339(),
            attempt: occurrence.attempt,
            body: body.as_bytes().to_vec(),
            headers: headers.clone(),
            ack_timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            omit_output: !cb.keep_output,
            shard_index: 0,
            shard_total: 0,
        };
        let group = &target.group;
        let within = format_duration(timeout);
        let failed = |error: String, retryable: bool| {
            Attempt::failed_at(&occurrence, fired_at, error, retryable)
        };
        let app = &timer.spec.app;
        if target.broadcast {
            return self
                .broadcast(&occurrence, app, group, &make, fired_at, deadline)
                .await;
        }
        let delivered = if target.route.is_least_busy() {
            self.least_busy(app, group, make, deadline).await
        } else {
            self.routed(target.route, key.timer_id, app, group, make, deadline)
                .await
        };
        let mut attempt = match delivered {
            Ok((Reply::Ack { output }, _)) => {
                Attempt::succeeded(&occurrence, fired_at).with_output(output)
            }
            Ok((
                Reply::Nack {
                    retryable,
                    error,
                    output,
                },
                worker,
            )) => failed(format!("worker {worker} refused it: {error}"), retryable)
                .with_output(output),
            Err(Unanswered::NoWorker) => {
                failed(format!("no worker of group {group} is connected"), true)
            }
            Err(Unanswered::Busy) => failed(
                format!("every worker of group {group} stayed busy for {within}"),
                true,
            ),
            Err(Unanswered::Timeout { worker }) => failed(
                format!("worker {worker} did not answer within {within}"),
                true,
            ),
        };
        attempt.outcome.output = attempt.outcome.output.map(|o| tail(o, OUTPUT_CAP));
        attempt
    }
}

/// The last `cap` bytes of `output`, from a character boundary: a command's last lines say
/// most about how it ended.
pub(super) fn tail(output: String, cap: usize) -> String {
    if output.len() <= cap {
        return output;
    }
    let mut from = output.len() - cap;
    while !output.is_char_boundary(from) {
        from += 1;
    }
    output[from..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_to_its_tail_on_a_character_boundary() {
        assert_eq!(tail("short".into(), 10), "short");
        assert_eq!(tail("0123456789".into(), 4), "6789");
        // "é" is two bytes: a cut inside it starts after it.
        assert_eq!(tail("aéb".into(), 2), "b");
    }
}
