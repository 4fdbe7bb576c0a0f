//! The migrator service: the periodic step, split across replicas by bucket leases, and
//! materializing one timer on demand.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{BucketCount, Clock, TimerId, Timestamp};
use chime_storage::{LeaseToken, Leases, StoreResult};
use tokio_util::sync::CancellationToken;

use crate::{Materialized, Materializer};

#[derive(Debug, Clone, Copy)]
pub struct StepSettings {
    /// How often occurrences are materialized; each step covers the next `2 × step`.
    pub step: Duration,
    pub buckets: BucketCount,
    /// The lease a replica holds on a bucket while it works on it, renewed every third of
    /// it; a replica that dies mid-bucket frees it within this long.
    pub work_lease: Duration,
}

impl StepSettings {
    pub fn new(step: Duration, buckets: BucketCount) -> Self {
        Self {
            step,
            buckets,
            work_lease: Duration::from_secs(3),
        }
    }

    /// `step`, `work_lease` and `buckets` of the config.
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        Self {
            work_lease: config.migrator.work_lease.get(),
            ..Self::new(config.migrator.step.get(), config.buckets)
        }
    }

    /// Each step writes this far ahead: one step of slack, so a missed step loses nothing.
    pub fn horizon(&self) -> Duration {
        self.step.saturating_mul(2)
    }

    /// How often a replica looks for buckets whose step nobody has done yet.
    fn poll(&self) -> Duration {
        (self.step / 2).clamp(Duration::from_millis(500), Duration::from_secs(5))
    }
}

/// What one pass of [`Migrator::run_step`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Buckets this replica materialized (others were done, or held by another replica).
    pub buckets: u32,
    pub materialized: Materialized,
}

pub struct Migrator {
    materializer: Materializer,
    leases: Arc<dyn Leases>,
    clock: Arc<dyn Clock>,
    settings: StepSettings,
    token: LeaseToken,
}

impl Migrator {
    pub fn new(
        materializer: Materializer,
        leases: Arc<dyn Leases>,
        clock: Arc<dyn Clock>,
        settings: StepSettings,
    ) -> Self {
        Self {
            materializer,
            leases,
            clock,
            settings,
            token: LeaseToken::random(),
        }
    }

    pub fn settings(&self) -> StepSettings {
        self.settings
    }

    /// Materializes one timer's horizon now (the gateway's `MigrateTimer`), and indexes the
    /// occurrence a trigger inserted at `triggered`.
    pub async fn migrate_timer(
        &self,
        id: TimerId,
        triggered: Option<Timestamp>,
    ) -> StoreResult<Materialized> {
        self.materializer
            .timer(id, self.settings.horizon(), triggered)
            .await
    }

    /// [`Migrator::migrate_timer`] for several timers at once, without triggers.
    pub async fn migrate_timers(&self, ids: &[TimerId]) -> StoreResult<Materialized> {
        self.materializer.timers(ids, self.settings.horizon()).await
    }

    /// Materializes every bucket whose current step no replica has done yet. A bucket is
    /// worked under a lease named by step and bucket; once done, the lease is kept until the
    /// step ends, so it doubles as the "done" mark and no replica repeats the work.
    pub async fn run_step(&self) -> StoreResult<StepReport> {
        let now = self.clock.now();
        let step_ms = i64::try_from(self.settings.step.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let index = now.as_millis() / step_ms;
        let step_end = Timestamp::from_millis((index + 1).saturating_mul(step_ms));
        let mut report = StepReport::default();
        for bucket in self.settings.buckets.all() {
            let name = format!("migrator:{index}:{}", bucket.get());
            if !self
                .leases
                .acquire(&name, &self.token, self.settings.work_lease)
                .await?
            {
                continue;
            }
            match self
                .hold_while(
                    &name,
                    self.materializer.bucket(bucket, self.settings.horizon()),
                )
                .await
            {
                Ok(done) => {
                    report.buckets += 1;
                    report.materialized += done;
                    let left = step_end.as_millis() - self.clock.now().as_millis();
                    let keep = Duration::from_millis(u64::try_from(left).unwrap_or(0).max(1_000));
                    self.leases.renew(&name, &self.token, keep).await?;
                }
                Err(e) => {
                    // Free the bucket at once so this or another replica retries it.
                    let _ = self.leases.release(&name, &self.token).await;
                    return Err(e);
                }
            }
        }
        Ok(report)
    }

    /// Runs `work` while renewing the lease `name`.
    async fn hold_while<T>(
        &self,
        name: &str,
        work: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let mut renew = tokio::time::interval(self.settings.work_lease / 3);
        renew.tick().await;
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return done,
                _ = renew.tick() => {
                    if let Err(e) = self.leases.renew(name, &self.token, self.settings.work_lease).await {
                        tracing::warn!(lease = name, error = %e, "cannot renew migrator lease");
                    }
                }
            }
        }
    }

    /// Runs steps until `shutdown`: at start, then whenever a bucket's step is not done.
    pub async fn run(&self, shutdown: CancellationToken) {
        let poll = self.settings.poll();
        loop {
            let step = tokio::select! {
                // Leases of an interrupted step expire by themselves.
                () = shutdown.cancelled() => break,
                step = self.run_step() => step,
            };
            match step {
                Ok(r) if r.buckets > 0 => {
                    metrics::counter!("chime_migrator_occurrences_written_total")
                        .increment(r.materialized.written);
                    metrics::counter!("chime_migrator_occurrences_indexed_total")
                        .increment(r.materialized.indexed);
                    tracing::info!(
                        buckets = r.buckets,
                        timers = r.materialized.timers,
                        written = r.materialized.written,
                        indexed = r.materialized.indexed,
                        "materialized step"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    metrics::counter!("chime_migrator_step_failures_total").increment(1);
                    tracing::warn!(error = %e, "materialization step failed; retrying");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(poll) => {}
            }
        }
    }
}
