//! Broadcast runs (`"broadcast": true`): each run goes to every worker of the group connected
//! at its first attempt, on any executor, as one shard each (`shard_index` of `shard_total`).
//! The plan is kept in the database (`Shards`), so a retry delivers only the shards that did
//! not succeed, each with its own index, to any worker of the group. A worker that goes
//! while it holds its shard hands it to another worker within the same attempt.

use chime_domain::{AppName, ClaimedOccurrence, Shard, ShardStatus, Timestamp};
use chime_proto::v1 as pb;

use super::worker::{WorkerTarget, tail};
use super::{Attempt, OUTPUT_CAP};
use crate::workers::{Reply, Unanswered};

impl WorkerTarget {
    pub(super) async fn broadcast(
        &self,
        occurrence: &ClaimedOccurrence,
        app: &AppName,
        group: &str,
        make: &(dyn Fn(String) -> pb::Delivery + Sync),
        fired_at: Timestamp,
        deadline: tokio::time::Instant,
    ) -> Attempt {
        let failed = |error: String, retryable: bool| {
            Attempt::failed_at(occurrence, fired_at, error, retryable)
        };
        let Some(store) = &self.shards else {
            return failed("broadcast runs need the database's shards".into(), false);
        };
        let key = occurrence.key;
        let mut shards = match store.shards_of(key).await {
            Ok(s) => s,
            Err(e) => return failed(format!("cannot read the run's shards: {e}"), true),
        };
        // The roster places a plan's first deliveries; a retry of delivered shards (any
        // worker takes them) needs no round of the executors.
        let members = if shards.iter().any(|s| s.attempt == 0) || shards.is_empty() {
            self.fleet_roster(app, group).await
        } else {
            Vec::new()
        };
        if shards.is_empty() {
            if members.is_empty() {
                return failed(format!("no worker of group {group} is connected"), true);
            }
            let total = u32::try_from(members.len()).unwrap_or(u32::MAX);
            shards = match store.plan_shards(key, total).await {
                Ok(s) => s,
                Err(e) => return failed(format!("cannot plan the run's shards: {e}"), true),
            };
        }
        let todo: Vec<&Shard> = shards
            .iter()
            .filter(|s| s.status != ShardStatus::Succeeded)
            .collect();
        let deliveries = todo.iter().map(|s| {
            let members = &members;
            async move {
                let shard_make = |id: String| pb::Delivery {
                    shard_index: s.index,
                    shard_total: s.total,
                    ..make(id)
                };
                // A shard's first delivery goes to the worker at its index; a retried one
                // (or one whose worker is gone) to any worker of the group.
                let chosen = members.get(s.index as usize).filter(|_| s.attempt == 0);
                let delivered = match chosen {
                    Some(member) => {
                        self.deliver_to_member(member, app, group, &shard_make, deadline)
                            .await
                    }
                    None => Err(Unanswered::NoWorker),
                };
                match delivered {
                    Err(Unanswered::NoWorker) => {
                        self.least_busy(app, group, &shard_make, deadline).await
                    }
                    other => other,
                }
            }
        });
        let results = futures::future::join_all(deliveries).await;
        let mut outputs = Vec::new();
        let mut errors = Vec::new();
        let mut retryable = true;
        let updates: Vec<Shard> = todo
            .iter()
            .zip(results)
            .map(|(s, delivered)| {
                let mut shard = Shard {
                    attempt: occurrence.attempt,
                    status: ShardStatus::Failed,
                    ..(*s).clone()
                };
                match delivered {
                    Ok((Reply::Ack { output }, worker)) => {
                        shard.status = ShardStatus::Succeeded;
                        shard.worker = Some(worker);
                        shard.error = None;
                        if !output.is_empty() {
                            outputs.push(format!("[shard {}] {output}", s.index));
                        }
                    }
                    Ok((
                        Reply::Nack {
                            retryable: again,
                            error,
                            output,
                        },
                        worker,
                    )) => {
                        retryable &= again;
                        shard.error = Some(format!("worker {worker} refused it: {error}"));
                        shard.worker = Some(worker);
                        if !output.is_empty() {
                            outputs.push(format!("[shard {}] {output}", s.index));
                        }
                    }
                    Err(Unanswered::NoWorker) => {
                        shard.error = Some(format!("no worker of group {group} is connected"));
                    }
                    Err(Unanswered::Busy) => {
                        shard.error = Some(format!("every worker of group {group} stayed busy"));
                    }
                    Err(Unanswered::Timeout { worker }) => {
                        shard.error = Some(format!("worker {worker} did not answer in time"));
                        shard.worker = Some(worker);
                    }
                }
                if let Some(e) = &shard.error {
                    errors.push(format!("shard {}: {e}", s.index));
                }
                shard
            })
            .collect();
        // Recorded before the outcome: a retry must know which shards are done.
        if let Err(e) = store.record_shards(key, &updates).await {
            return failed(format!("cannot record the run's shards: {e}"), true);
        }
        let total = shards.len();
        let output = (!outputs.is_empty()).then(|| tail(outputs.join("\n"), OUTPUT_CAP));
        if errors.is_empty() {
            let mut attempt = Attempt::succeeded(occurrence, fired_at);
            attempt.outcome.output = output;
            return attempt;
        }
        let mut attempt = failed(
            format!(
                "{} of {total} shards failed: {}",
                errors.len(),
                errors.join("; ")
            ),
            retryable,
        );
        attempt.outcome.output = output;
        attempt
    }
}
