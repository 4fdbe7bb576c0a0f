//! Worker deliveries between executors: an occurrence claimed here for a group with no worker
//! connected here is offered to the other executors (`ExecutorService/Forward`), which deliver
//! it to a worker of theirs. A forwarded delivery is never forwarded again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::AppName;
use chime_proto::v1 as pb;
use chime_proto::v1::executor_service_client::ExecutorServiceClient;
use chime_proto::v1::forward_response::Result as Forwarded;
use chime_runtime::fleet::{Fleet, Replica};
use tokio::time::Instant;

use super::routing::Member;
use super::{Reply, Unanswered, Workers};
use crate::targets::Signer;

/// How long a fleet roster of one group is used before the executors are asked again.
const ROSTER_TTL: Duration = Duration::from_secs(1);
/// Longest a peer is waited for when listing its workers.
const LIST_TIMEOUT: Duration = Duration::from_millis(500);

/// Fleet rosters kept for [`ROSTER_TTL`]: (app, group) → when read, the peers' workers.
type Rosters = HashMap<(AppName, String), (Instant, Arc<Vec<(Member, Replica)>>)>;

/// The other executors (`CHIME_EXECUTOR_ENDPOINTS`; this one may be among them and then
/// answers "no worker", having none).
pub struct Peers {
    fleet: Arc<Fleet>,
    rosters: Mutex<Rosters>,
}

impl Peers {
    pub fn new(fleet: Arc<Fleet>) -> Self {
        Self {
            fleet,
            rosters: Mutex::default(),
        }
    }

    /// The workers of `app`'s `group` connected to the other executors, each with the
    /// executor it is on; read from them at most once a [`ROSTER_TTL`]. An executor that
    /// does not answer in time is left out.
    pub async fn roster(&self, app: &AppName, group: &str) -> Arc<Vec<(Member, Replica)>> {
        let key = (app.clone(), group.to_owned());
        if let Some((at, roster)) = self.lock().get(&key)
            && at.elapsed() < ROSTER_TTL
        {
            return roster.clone();
        }
        let replicas = self.fleet.replicas().await;
        let lists = replicas.iter().map(|replica| async move {
            let mut request = tonic::Request::new(pb::ListWorkersRequest {
                app: app.to_string(),
                group: group.to_owned(),
            });
            request.set_timeout(LIST_TIMEOUT);
            match ExecutorServiceClient::new(replica.channel.clone())
                .list_workers(request)
                .await
            {
                Ok(r) => r
                    .into_inner()
                    .workers
                    .into_iter()
                    .map(|w| {
                        let member = Member {
                            instance: w.instance,
                            id: w.id,
                            name: w.name,
                            registered_at_ms: w.registered_at_ms,
                        };
                        (member, replica.clone())
                    })
                    .collect(),
                Err(status) => {
                    tracing::debug!(executor = %replica.target, %status, "cannot list its workers");
                    Vec::new()
                }
            }
        });
        let roster: Vec<(Member, Replica)> = futures::future::join_all(lists)
            .await
            .into_iter()
            .flatten()
            .collect();
        let roster = Arc::new(roster);
        let mut rosters = self.lock();
        rosters.retain(|_, (at, _)| at.elapsed() < ROSTER_TTL);
        rosters.insert(key, (Instant::now(), roster.clone()));
        roster
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Rosters> {
        self.rosters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Offers `delivery` to each executor in turn until one has a worker of the group.
    pub async fn forward(
        &self,
        app: &AppName,
        group: &str,
        delivery: pb::Delivery,
        deadline: Instant,
    ) -> Result<(Reply, String), Unanswered> {
        let mut outcome = Err(Unanswered::NoWorker);
        for replica in self.fleet.replicas().await.iter() {
            match offer(replica, app, group, "", delivery.clone(), deadline).await {
                Some(Err(Unanswered::NoWorker)) | None => {}
                Some(Err(Unanswered::Busy)) => outcome = Err(Unanswered::Busy),
                Some(answered) => return answered,
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        outcome
    }

    /// Delivers to worker `worker` of `replica` only (a routed delivery).
    pub async fn forward_to(
        &self,
        replica: &Replica,
        app: &AppName,
        group: &str,
        worker: &str,
        delivery: pb::Delivery,
        deadline: Instant,
    ) -> Result<(Reply, String), Unanswered> {
        offer(replica, app, group, worker, delivery, deadline)
            .await
            .unwrap_or(Err(Unanswered::NoWorker))
    }
}

/// Offers `delivery` to `replica`'s workers of the group (to `worker` only, unless empty);
/// `None` when the call failed or the deadline passed.
async fn offer(
    replica: &Replica,
    app: &AppName,
    group: &str,
    worker: &str,
    mut delivery: pb::Delivery,
    deadline: Instant,
) -> Option<Result<(Reply, String), Unanswered>> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return None;
    }
    delivery.ack_timeout_ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX);
    let mut request = tonic::Request::new(pb::ForwardRequest {
        app: app.to_string(),
        group: group.to_owned(),
        delivery: Some(delivery),
        worker: worker.to_owned(),
    });
    // The peer waits up to `left` for its worker; a little more for the answer.
    request.set_timeout(left + Duration::from_millis(500));
    let answer = match ExecutorServiceClient::new(replica.channel.clone())
        .forward(request)
        .await
    {
        Ok(a) => a.into_inner(),
        Err(status) => {
            tracing::debug!(executor = %replica.target, %status, "forward failed");
            return None;
        }
    };
    if !matches!(
        answer.result(),
        Forwarded::NoWorker | Forwarded::Unspecified
    ) {
        metrics::counter!("chime_executor_worker_forwards_total").increment(1);
    }
    Some(match answer.result() {
        Forwarded::Acked => Ok((
            Reply::Ack {
                output: answer.output,
            },
            answer.worker,
        )),
        Forwarded::Nacked => Ok((
            Reply::Nack {
                retryable: answer.retryable,
                error: answer.error,
                output: answer.output,
            },
            answer.worker,
        )),
        Forwarded::Timeout => Err(Unanswered::Timeout {
            worker: answer.worker,
        }),
        Forwarded::Busy => Err(Unanswered::Busy),
        Forwarded::NoWorker | Forwarded::Unspecified => Err(Unanswered::NoWorker),
    })
}

/// Serves a peer's `ListWorkers`: the group's workers connected here.
pub fn serve_list_workers(
    workers: &Workers,
    request: pb::ListWorkersRequest,
) -> pb::ListWorkersResponse {
    let Ok(app) = AppName::parse(request.app) else {
        return pb::ListWorkersResponse::default();
    };
    pb::ListWorkersResponse {
        workers: workers
            .roster(&app, &request.group)
            .into_iter()
            .map(|m| pb::ConnectedWorker {
                instance: m.instance,
                id: m.id,
                name: m.name,
                registered_at_ms: m.registered_at_ms,
            })
            .collect(),
    }
}

/// Serves a peer's `Forward`: delivers to a worker connected here, or says there is none.
/// With a `signer`, only a delivery signed with its app's secret (as Chime signs every
/// delivery) is taken: a caller that is not an executor cannot make one for another app.
pub async fn serve_forward(
    workers: &Workers,
    signer: Option<&Arc<Signer>>,
    request: pb::ForwardRequest,
) -> Result<pb::ForwardResponse, tonic::Status> {
    let mut response = pb::ForwardResponse::default();
    let (Ok(app), Some(template)) = (AppName::parse(request.app), request.delivery) else {
        return Err(tonic::Status::invalid_argument(
            "a forward names an app and a delivery",
        ));
    };
    if let Some(signer) = signer {
        let header = |name: &str| template.headers.get(name).map(String::as_str);
        let timestamp: i64 = header("webhook-timestamp")
            .and_then(|t| t.parse().ok())
            .unwrap_or_default();
        let signed = header("webhook-id") == Some(template.idempotency_key.as_str())
            && signer
                .verify(
                    &app,
                    &template.idempotency_key,
                    timestamp,
                    &template.body,
                    header("webhook-signature").unwrap_or_default(),
                )
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        if !signed {
            return Err(tonic::Status::permission_denied(
                "a forwarded delivery must carry its app's current signature",
            ));
        }
    }
    let deadline = Instant::now() + Duration::from_millis(u64::from(template.ack_timeout_ms));
    let make = |delivery_id: String| pb::Delivery {
        delivery_id,
        ..template.clone()
    };
    let delivered = if request.worker.is_empty() {
        workers.deliver(&app, &request.group, make, deadline).await
    } else {
        workers
            .deliver_to(&app, &request.group, &request.worker, make, deadline)
            .await
    };
    let result = match delivered {
        Ok((Reply::Ack { output }, worker)) => {
            response.worker = worker;
            response.output = output;
            Forwarded::Acked
        }
        Ok((
            Reply::Nack {
                retryable,
                error,
                output,
            },
            worker,
        )) => {
            response.worker = worker;
            response.output = output;
            response.retryable = retryable;
            response.error = error;
            Forwarded::Nacked
        }
        Err(Unanswered::NoWorker) => Forwarded::NoWorker,
        Err(Unanswered::Busy) => Forwarded::Busy,
        Err(Unanswered::Timeout { worker }) => {
            response.worker = worker;
            Forwarded::Timeout
        }
    };
    response.set_result(result);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn a_forwarded_answer_carries_the_workers_output() {
        let workers = Workers::new();
        let (tx, mut rx) = mpsc::channel(8);
        let app = AppName::parse("billing").unwrap();
        let conn = workers.register(app.clone(), "g".into(), 1, "w", tx);
        let answering = {
            let workers = workers.clone();
            tokio::spawn(async move {
                let Some(Ok(pb::ExecutorMessage {
                    kind: Some(pb::executor_message::Kind::Delivery(d)),
                })) = rx.recv().await
                else {
                    panic!("no delivery");
                };
                let reply = Reply::Nack {
                    retryable: true,
                    error: "exit 4".into(),
                    output: "half done".into(),
                };
                workers.answer(&conn, &d.delivery_id, reply);
            })
        };
        let request = pb::ForwardRequest {
            app: app.to_string(),
            group: "g".into(),
            delivery: Some(pb::Delivery {
                idempotency_key: "1:1".into(),
                ack_timeout_ms: 5_000,
                ..Default::default()
            }),
            worker: String::new(),
        };
        let response = serve_forward(&workers, None, request).await.unwrap();
        answering.await.unwrap();
        assert_eq!(response.result(), Forwarded::Nacked);
        assert_eq!(
            (response.output.as_str(), response.error.as_str()),
            ("half done", "exit 4")
        );
    }
}
