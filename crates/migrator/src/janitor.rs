//! Retention: one replica at a time (a lease) removes what `[retention]` no longer keeps,
//! in bounded batches with a pause between them, so writers never queue behind it.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{Clock, Timestamp};
use chime_storage::{LeaseToken, Leases, PurgeBefore, Purged, Retention, Rotated, StoreResult};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    pub history: Duration,
    pub dead_letters: Duration,
    pub idempotency_keys: Duration,
    pub interval: Duration,
    pub batch: u32,
    pub partitions_ahead: Duration,
}

impl RetentionSettings {
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        let r = &config.retention;
        Self {
            history: r.history.get(),
            dead_letters: r.dead_letters.get(),
            idempotency_keys: r.idempotency_keys.get(),
            interval: r.interval.get(),
            batch: r.batch,
            partitions_ahead: r.partitions_ahead.get(),
        }
    }
}

/// What one run removed: whole time ranges first, then batches of rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JanitorRun {
    pub rotated: Rotated,
    pub purged: Purged,
}

fn count_rotated(r: &Rotated) {
    metrics::counter!("chime_migrator_partitions_created_total").increment(r.created);
    metrics::counter!("chime_migrator_partitions_dropped_total").increment(r.dropped);
    metrics::counter!("chime_migrator_purged_occurrences_total").increment(r.occurrences);
}

/// Counts a batch as it is removed, so a long run shows its progress.
fn count(batch: &Purged) {
    metrics::counter!("chime_migrator_purged_occurrences_total").increment(batch.occurrences);
    metrics::counter!("chime_migrator_purged_idempotency_keys_total")
        .increment(batch.idempotency_keys);
    metrics::counter!("chime_migrator_purged_timers_total").increment(batch.timers);
}

/// How often the statistics round looks for partitions that outgrew their statistics.
const STATISTICS_EVERY: Duration = Duration::from_secs(1);
/// Most batches one run deletes; the next run goes on where it stopped.
const MAX_BATCHES: usize = 1_000;
/// Pause between batches: leaves the database to the hot path.
const BREATHE: Duration = Duration::from_millis(10);
const LEASE: &str = "janitor";

pub struct Janitor {
    store: Arc<dyn Retention>,
    leases: Arc<dyn Leases>,
    clock: Arc<dyn Clock>,
    settings: RetentionSettings,
    token: LeaseToken,
}

impl Janitor {
    pub fn new(
        store: Arc<dyn Retention>,
        leases: Arc<dyn Leases>,
        clock: Arc<dyn Clock>,
        settings: RetentionSettings,
    ) -> Self {
        Self {
            store,
            leases,
            clock,
            settings,
            token: LeaseToken::random(),
        }
    }

    /// What is old enough to go, as of `now`.
    fn cutoffs(&self, now: Timestamp) -> PurgeBefore {
        PurgeBefore {
            history: now.saturating_sub(self.settings.history),
            dead: now.saturating_sub(self.settings.dead_letters),
            idempotency_keys: now.saturating_sub(self.settings.idempotency_keys),
            deleted_timers: now.saturating_sub(self.settings.history),
        }
    }

    /// One run, if this replica holds the janitor lease: time ranges rotated, then batches
    /// until nothing old is left (or [`MAX_BATCHES`]). `None` when another replica holds the
    /// lease.
    pub async fn run_once(&self) -> StoreResult<Option<JanitorRun>> {
        let ttl = self.settings.interval.saturating_mul(2);
        let held = self.leases.renew(LEASE, &self.token, ttl).await?
            || self.leases.acquire(LEASE, &self.token, ttl).await?;
        if !held {
            return Ok(None);
        }
        let now = self.clock.now();
        let before = self.cutoffs(now);
        let rotated = self
            .store
            .rotate(
                now,
                now.saturating_add(self.settings.partitions_ahead),
                &before,
            )
            .await?;
        count_rotated(&rotated);
        let mut total = Purged::default();
        for _ in 0..MAX_BATCHES {
            let batch = self.store.purge(&before, self.settings.batch).await?;
            count(&batch);
            total += batch;
            let limit = u64::from(self.settings.batch);
            if batch.occurrences < limit && batch.idempotency_keys < limit && batch.timers < limit {
                break;
            }
            self.leases.renew(LEASE, &self.token, ttl).await?;
            tokio::time::sleep(BREATHE).await;
        }
        Ok(Some(JanitorRun {
            rotated,
            purged: total,
        }))
    }

    /// Runs retention every `interval`, and the statistics round every
    /// [`STATISTICS_EVERY`], until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        tokio::join!(
            self.retention_loop(shutdown.clone()),
            self.statistics_loop(shutdown)
        );
        let _ = self.leases.release(LEASE, &self.token).await;
    }

    /// One statistics round: see [`Retention::refresh_statistics`]. Any replica may run
    /// it; the store lets one at a time do the work.
    async fn refresh_statistics(&self) -> StoreResult<u64> {
        let analyzed = self.store.refresh_statistics().await?;
        metrics::counter!("chime_migrator_partitions_analyzed_total").increment(analyzed);
        if analyzed > 0 {
            tracing::info!(
                analyzed,
                "retention: analyzed day partitions that outgrew their statistics"
            );
        }
        Ok(analyzed)
    }

    /// Every second, because a day analyzed while empty is planned as empty from its first
    /// row on (see `refresh_statistics`); a failure is logged when it starts and when it ends.
    async fn statistics_loop(&self, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            match self.refresh_statistics().await {
                Ok(_) if failing => {
                    failing = false;
                    tracing::info!("statistics round works again");
                }
                Ok(_) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "statistics round failed; retrying every second");
                }
                Err(_) => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.clock.sleep(STATISTICS_EVERY) => {}
            }
        }
    }

    async fn retention_loop(&self, shutdown: CancellationToken) {
        loop {
            let run = tokio::select! {
                () = shutdown.cancelled() => break,
                run = self.run_once() => run,
            };
            match run {
                Ok(Some(JanitorRun {
                    rotated: r,
                    purged: p,
                })) => {
                    if r != Rotated::default() {
                        tracing::info!(
                            created = r.created,
                            dropped = r.dropped,
                            occurrences = r.occurrences,
                            "retention: rotated day partitions"
                        );
                    }
                    if p != Purged::default() {
                        tracing::info!(
                            occurrences = p.occurrences,
                            idempotency_keys = p.idempotency_keys,
                            timers = p.timers,
                            "retention: removed old rows"
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "retention run failed; retrying"),
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.clock.sleep(self.settings.interval) => {}
            }
        }
    }
}
