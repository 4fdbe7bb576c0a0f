//! The hot-index and lease contracts against a real Redis.

use chime_storage::testkit as support;

use chime_storage::storage_contract;

storage_contract!(hot_index, support::redis());
storage_contract!(leases, support::redis());
storage_contract!(membership, support::redis());
storage_contract!(run_leases, support::redis());

/// A service pointed at a dead Redis must say so at start-up, not hang in reconnect loops.
#[tokio::test]
async fn unreachable_redis_fails_fast_with_an_error() {
    let settings = chime_storage::redis::RedisSettings {
        prefix: support::unique("chime-test"),
        connect_timeout: std::time::Duration::from_millis(500),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        chime_storage::redis::RedisBackend::connect("redis://127.0.0.1:1", settings),
    )
    .await;
    let connected = result.expect("connect must not hang");
    let err = connected.expect_err("nothing listens on port 1");
    assert!(err.is_retryable(), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
