//! The migrator service as a process: the periodic step beside the admin endpoints.

use std::sync::Arc;

use chime_runtime::admin::Readiness;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Migrator;

/// Runs the periodic step and the admin endpoints (`/healthz`, `/readyz`, `/metrics`) until
/// `shutdown`. The migrator takes no requests: the gateway writes a timer's first
/// occurrences itself, so nothing needs to ask for a timer's materialization.
pub async fn serve(
    migrator: Arc<Migrator>,
    admin: Option<TcpListener>,
    readiness: Arc<dyn Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    chime_runtime::describe_metrics(crate::METRICS);
    let admin = chime_runtime::admin::serve_admin(admin, readiness, shutdown.clone());
    let (a, ()) = tokio::join!(admin, migrator.run(shutdown.clone()));
    a?;
    tracing::info!("migrator stopped");
    Ok(())
}
