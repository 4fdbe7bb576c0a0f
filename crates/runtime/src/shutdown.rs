use std::future::Future;

use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or SIGINT. Services stop taking work when it fires,
/// then drain within their grace period.
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    cancel_on_signal(token.clone(), wait_for_signal());
    token
}

/// Cancels `token` when `signal` completes; split out so the wiring is testable.
pub fn cancel_on_signal<F>(token: CancellationToken, signal: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        tokio::select! {
            () = signal => {
                tracing::info!("shutdown signal received");
                token.cancel();
            }
            () = token.cancelled() => {}
        }
    });
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                tracing::warn!("cannot install signal handlers; falling back to ctrl-c");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
