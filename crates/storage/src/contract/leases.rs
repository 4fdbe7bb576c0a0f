//! The `Leases` contract.

use super::*;

/// Advances time in small steps until `cond` holds, for at most 10 s of real time.
async fn eventually<F, Fut>(time: &dyn TimeControl, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if cond().await {
            return true;
        }
        time.advance(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Waits (advancing time) until `token` acquires `name`, i.e. the previous holder expired.
async fn taken_over(
    leases: &Arc<dyn Leases>,
    time: &dyn TimeControl,
    name: &str,
    token: &LeaseToken,
) -> bool {
    eventually(time, || {
        let (leases, token) = (leases.clone(), token.clone());
        let name = name.to_owned();
        async move {
            leases
                .acquire(&name, &token, Duration::from_secs(30))
                .await
                .unwrap()
        }
    })
    .await
}

pub async fn one_of_two_contenders_wins(leases: Arc<dyn Leases>, _time: Arc<dyn TimeControl>) {
    for round in 0..20 {
        let name = format!("shard-{round}");
        let (a, b) = (LeaseToken::random(), LeaseToken::random());
        let (la, lb) = (leases.clone(), leases.clone());
        let (na, nb) = (name.clone(), name.clone());
        let ta = tokio::spawn(async move { la.acquire(&na, &a, Duration::from_secs(30)).await });
        let tb = tokio::spawn(async move { lb.acquire(&nb, &b, Duration::from_secs(30)).await });
        let (ra, rb) = (ta.await.unwrap().unwrap(), tb.await.unwrap().unwrap());
        assert!(
            ra ^ rb,
            "round {round}: exactly one contender must win ({ra}, {rb})"
        );
    }
}

pub async fn holder_renews_and_releases(leases: Arc<dyn Leases>, _time: Arc<dyn TimeControl>) {
    let (holder, other) = (LeaseToken::random(), LeaseToken::random());
    let ttl = Duration::from_secs(30);
    assert!(leases.acquire("l", &holder, ttl).await.unwrap());
    assert!(
        !leases.acquire("l", &holder, ttl).await.unwrap(),
        "holders renew, not re-acquire"
    );
    assert!(!leases.acquire("l", &other, ttl).await.unwrap());
    assert!(leases.renew("l", &holder, ttl).await.unwrap());
    assert!(!leases.renew("l", &other, ttl).await.unwrap());
    assert!(!leases.release("l", &other).await.unwrap());
    assert!(leases.release("l", &holder).await.unwrap());
    assert!(!leases.release("l", &holder).await.unwrap());
    assert!(leases.acquire("l", &other, ttl).await.unwrap());
    // Leases are independent by name.
    assert!(leases.acquire("m", &holder, ttl).await.unwrap());
}

pub async fn expired_lease_goes_to_a_new_token(
    leases: Arc<dyn Leases>,
    time: Arc<dyn TimeControl>,
) {
    let (old, new) = (LeaseToken::random(), LeaseToken::random());
    assert!(
        leases
            .acquire("l", &old, Duration::from_millis(200))
            .await
            .unwrap()
    );
    let taken = taken_over(&leases, &*time, "l", &new).await;
    assert!(taken, "an expired lease must be acquirable");
}

pub async fn stale_token_can_neither_renew_nor_release(
    leases: Arc<dyn Leases>,
    time: Arc<dyn TimeControl>,
) {
    let (old, new) = (LeaseToken::random(), LeaseToken::random());
    assert!(
        leases
            .acquire("l", &old, Duration::from_millis(200))
            .await
            .unwrap()
    );
    let taken = taken_over(&leases, &*time, "l", &new).await;
    assert!(taken);
    assert!(
        !leases
            .renew("l", &old, Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert!(!leases.release("l", &old).await.unwrap());
    assert!(
        leases
            .renew("l", &new, Duration::from_secs(30))
            .await
            .unwrap(),
        "the new holder is unaffected"
    );
    assert!(
        !leases
            .acquire("l", &LeaseToken::random(), Duration::from_secs(30))
            .await
            .unwrap()
    );
}
