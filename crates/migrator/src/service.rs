//! The migrator service: continuous passes over every bucket, split across replicas by
//! bucket leases, and materializing one timer on demand.

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{BucketCount, Horizon};
use chime_storage::{LeaseToken, Leases, StoreResult};
use tokio_util::sync::CancellationToken;

use crate::{Materialized, Materializer};

#[derive(Debug, Clone, Copy)]
pub struct MigratorSettings {
    /// How far ahead every timer is kept written.
    pub horizon: Horizon,
    /// How often a replica passes over its buckets.
    pub interval: Duration,
    pub buckets: BucketCount,
    /// The lease a replica holds on a bucket, renewed every pass and while it works on it;
    /// a replica that dies frees its buckets within this long.
    pub work_lease: Duration,
}

impl MigratorSettings {
    pub fn new(horizon: Horizon, buckets: BucketCount) -> Self {
        Self {
            horizon,
            interval: Duration::from_secs(1),
            buckets,
            work_lease: Duration::from_secs(3),
        }
    }

    /// `[migrator]` and `buckets` of the config.
    pub fn from_config(config: &chime_runtime::Config) -> Self {
        Self {
            interval: config.migrator.interval.get(),
            work_lease: config.migrator.work_lease.get(),
            ..Self::new(config.horizon(), config.buckets)
        }
    }
}

/// What one pass of [`Migrator::run_pass`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Buckets this replica worked (the others are held by other replicas).
    pub buckets: u32,
    pub materialized: Materialized,
    pub built_shards: u64,
    /// The largest watermark lag among the buckets worked.
    pub lag: Duration,
    /// Buckets that received timers moved from out-of-range buckets.
    pub rebucketed: usize,
}

/// The migrator replicas' group: they split the buckets like the schedulers.
pub const GROUP: &str = "migrator";

pub struct Migrator {
    materializer: Materializer,
    leases: Arc<dyn Leases>,
    settings: MigratorSettings,
    token: LeaseToken,
    /// Without a group (one replica, `chime dev`) it works every bucket it can lease.
    roster: std::sync::OnceLock<Arc<chime_runtime::Roster>>,
}

impl Migrator {
    pub fn new(
        materializer: Materializer,
        leases: Arc<dyn Leases>,
        settings: MigratorSettings,
    ) -> Self {
        Self {
            materializer,
            leases,
            settings,
            token: LeaseToken::random(),
            roster: std::sync::OnceLock::new(),
        }
    }

    /// This replica's lease token, which is also its member id.
    pub fn token(&self) -> &LeaseToken {
        &self.token
    }

    /// Makes this replica one of a group that splits the buckets; before [`Migrator::run`].
    /// The roster's token must be [`Migrator::token`].
    pub fn join(&self, roster: Arc<chime_runtime::Roster>) {
        let _ = self.roster.set(roster);
    }

    pub fn settings(&self) -> MigratorSettings {
        self.settings
    }

    fn lease_name(bucket: chime_domain::Bucket) -> String {
        format!("migrator:bucket:{}", bucket.get())
    }

    /// Keeps the buckets this replica holds and takes free ones (in a group, its own, and
    /// those of a replica gone from the group at once); without a group, a dead replica's
    /// buckets go to another within `work_lease`.
    async fn hold(&self, name: &str, live: Option<&[String]>) -> StoreResult<bool> {
        let ttl = self.settings.work_lease;
        if self.leases.renew(name, &self.token, ttl).await? {
            return Ok(true);
        }
        match live {
            Some(live) => self.leases.take(name, &self.token, ttl, live).await,
            None => self.leases.acquire(name, &self.token, ttl).await,
        }
    }

    /// One pass: first moves timers a larger bucket count left out of range (after
    /// `CHIME_BUCKETS` shrank), then every bucket this replica holds or can take.
    pub async fn run_pass(&self) -> StoreResult<PassReport> {
        let mut report = PassReport {
            rebucketed: self.materializer.rebucket(self.settings.buckets).await?,
            ..PassReport::default()
        };
        let view = self.roster.get().map(|r| r.ownership());
        for bucket in self.settings.buckets.all() {
            let name = Self::lease_name(bucket);
            if let Some(view) = &view
                && !view.owns(bucket)
            {
                // A peer's now: let go, so it takes over at once.
                self.leases.release(&name, &self.token).await?;
                continue;
            }
            if !self.hold(&name, view.as_ref().map(|v| v.members())).await? {
                continue;
            }
            let pass = self
                .hold_while(&name, self.materializer.bucket(bucket))
                .await?;
            report.buckets += 1;
            report.materialized += pass.materialized;
            report.built_shards += pass.built_shards;
            report.lag = report.lag.max(pass.lag);
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

    /// Frees every bucket lease this replica holds, so another replica takes over at once.
    async fn release_all(&self) {
        for bucket in self.settings.buckets.all() {
            let _ = self
                .leases
                .release(&Self::lease_name(bucket), &self.token)
                .await;
        }
    }

    /// Runs passes every `interval` until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let heartbeats = self
            .roster
            .get()
            .map(|r| tokio::spawn(r.clone().run(shutdown.clone())));
        if let Some(r) = self.roster.get() {
            // The first pass already knows the group.
            r.beat().await;
        }
        loop {
            let pass = tokio::select! {
                () = shutdown.cancelled() => break,
                pass = self.run_pass() => pass,
            };
            match pass {
                Ok(r) => {
                    metrics::gauge!("chime_migrator_buckets_held").set(f64::from(r.buckets));
                    if r.buckets > 0 {
                        metrics::gauge!("chime_migrator_watermark_lag_seconds")
                            .set(r.lag.as_secs_f64());
                    }
                    metrics::counter!("chime_migrator_occurrences_written_total")
                        .increment(r.materialized.written);
                    metrics::counter!("chime_migrator_occurrences_indexed_total")
                        .increment(r.materialized.indexed);
                    metrics::counter!("chime_migrator_shards_built_total")
                        .increment(r.built_shards);
                    if r.rebucketed > 0 {
                        tracing::info!(
                            buckets = r.rebucketed,
                            "moved timers from buckets out of range after the bucket count shrank"
                        );
                    }
                    if r.materialized.written > 0 {
                        tracing::debug!(
                            buckets = r.buckets,
                            timers = r.materialized.timers,
                            written = r.materialized.written,
                            lag_ms = r.lag.as_millis() as u64,
                            "extended timers"
                        );
                    }
                }
                Err(e) => {
                    metrics::counter!("chime_migrator_pass_failures_total").increment(1);
                    tracing::warn!(error = %e, "materialization pass failed; retrying");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.materializer.clock().sleep(self.settings.interval) => {}
            }
        }
        self.release_all().await;
        if let Some(h) = heartbeats {
            let _ = h.await;
        }
    }
}
