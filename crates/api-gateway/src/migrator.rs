//! Asking the migrator to materialize one timer at once (`MigrateTimer`).

use std::time::Duration;

use async_trait::async_trait;
use chime_domain::{TimerId, Timestamp};
use chime_proto::v1::migrator_service_client::MigratorServiceClient;
use chime_proto::v1::{MigrateTimerRequest, MigrateTimersRequest};
use tonic::transport::{Channel, Endpoint};

#[async_trait]
pub trait MigrateNotifier: Send + Sync + 'static {
    /// Materializes the timer's near future, and indexes the occurrence a trigger inserted
    /// at `triggered` if given. Returns how many occurrences were materialized, or why the
    /// call failed.
    async fn migrate_timer(&self, id: TimerId, triggered: Option<Timestamp>)
    -> Result<u64, String>;

    /// The same for several timers in one call (a batch create), without triggers.
    async fn migrate_timers(&self, ids: &[TimerId]) -> Result<u64, String>;
}

/// No migrator configured: the periodic step is the only materializer.
pub struct NoMigrator;

#[async_trait]
impl MigrateNotifier for NoMigrator {
    async fn migrate_timer(
        &self,
        _id: TimerId,
        _triggered: Option<Timestamp>,
    ) -> Result<u64, String> {
        Ok(0)
    }

    async fn migrate_timers(&self, _ids: &[TimerId]) -> Result<u64, String> {
        Ok(0)
    }
}

/// The migrator over gRPC. The channel connects lazily and reconnects by itself; each call
/// is bounded so a slow migrator cannot stall API requests.
pub struct GrpcMigrator {
    client: MigratorServiceClient<Channel>,
}

impl GrpcMigrator {
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Self, String> {
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| format!("invalid migrator endpoint {endpoint:?}: {e}"))?
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect_lazy();
        Ok(Self {
            client: MigratorServiceClient::new(channel),
        })
    }
}

#[async_trait]
impl MigrateNotifier for GrpcMigrator {
    async fn migrate_timer(
        &self,
        id: TimerId,
        triggered: Option<Timestamp>,
    ) -> Result<u64, String> {
        let mut client = self.client.clone();
        client
            .migrate_timer(MigrateTimerRequest {
                timer_id: id.get(),
                triggered_run_at_ms: triggered.map(Timestamp::as_millis),
            })
            .await
            .map(|r| r.into_inner().materialized)
            .map_err(|s| format!("{}: {}", s.code(), s.message()))
    }

    async fn migrate_timers(&self, ids: &[TimerId]) -> Result<u64, String> {
        let mut client = self.client.clone();
        client
            .migrate_timers(MigrateTimersRequest {
                timer_ids: ids.iter().map(|id| id.get()).collect(),
            })
            .await
            .map(|r| r.into_inner().materialized)
            .map_err(|s| format!("{}: {}", s.code(), s.message()))
    }
}
