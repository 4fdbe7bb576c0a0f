//! A real SIGTERM delivered to this test process cancels the shutdown token (and, because the
//! handler is installed, does not kill the process).

use std::time::Duration;

#[tokio::test]
async fn sigterm_cancels_the_shutdown_token() {
    let token = chime_runtime::shutdown_token();
    // Let the spawned watcher install its handlers before the signal is sent.
    let installed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            tokio::task::yield_now().await;
            let status = std::process::Command::new("kill")
                .args(["-TERM", &std::process::id().to_string()])
                .status()
                .expect("run kill");
            assert!(status.success());
            if tokio::time::timeout(Duration::from_millis(200), token.cancelled())
                .await
                .is_ok()
            {
                break;
            }
        }
    })
    .await;
    assert!(installed.is_ok(), "token was not cancelled by SIGTERM");
}

#[tokio::test]
async fn any_future_can_trigger_cancellation() {
    let token = tokio_util::sync::CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    chime_runtime::cancel_on_signal(token.clone(), async move {
        let _ = rx.await;
    });
    assert!(!token.is_cancelled());
    tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("cancelled");
}
