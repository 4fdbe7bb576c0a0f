//! [`Membership`] and [`Leases::take`]: live members of a group, and leases passed on from
//! members that died.

use super::*;

const GROUP: &str = "scheduler";

fn ids(members: &[&str]) -> Vec<String> {
    members.iter().map(|m| (*m).to_owned()).collect()
}

/// Heartbeats `member` until `others` are all gone from what it sees, advancing time; the
/// members it saw last.
async fn until_gone(
    membership: &Arc<dyn Membership>,
    time: &dyn TimeControl,
    member: &str,
    others: &[&str],
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = membership
            .heartbeat(GROUP, member, Duration::from_secs(30))
            .await
            .unwrap();
        if others.iter().all(|o| !seen.iter().any(|s| s == o)) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{others:?} never lapsed: {seen:?}"
        );
        time.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn heartbeats_show_every_live_member_sorted(
    membership: Arc<dyn Membership>,
    _leases: Arc<dyn Leases>,
    _time: Arc<dyn TimeControl>,
) {
    let ttl = Duration::from_secs(30);
    assert_eq!(
        membership.heartbeat(GROUP, "b", ttl).await.unwrap(),
        ids(&["b"])
    );
    assert_eq!(
        membership.heartbeat(GROUP, "a", ttl).await.unwrap(),
        ids(&["a", "b"])
    );
    // Groups are apart; a repeated heartbeat does not add a member twice.
    assert_eq!(
        membership.heartbeat("migrator", "c", ttl).await.unwrap(),
        ids(&["c"])
    );
    assert_eq!(
        membership.heartbeat(GROUP, "b", ttl).await.unwrap(),
        ids(&["a", "b"])
    );
    membership.leave(GROUP, "a").await.unwrap();
    assert_eq!(
        membership.heartbeat(GROUP, "b", ttl).await.unwrap(),
        ids(&["b"])
    );
}

pub async fn a_member_that_stops_heartbeating_lapses(
    membership: Arc<dyn Membership>,
    _leases: Arc<dyn Leases>,
    time: Arc<dyn TimeControl>,
) {
    membership
        .heartbeat(GROUP, "short", Duration::from_millis(300))
        .await
        .unwrap();
    let seen = until_gone(&membership, &*time, "long", &["short"]).await;
    assert_eq!(seen, ids(&["long"]));
}

pub async fn members_are_read_without_joining(
    membership: Arc<dyn Membership>,
    _leases: Arc<dyn Leases>,
    time: Arc<dyn TimeControl>,
) {
    let ttl = Duration::from_secs(30);
    assert!(membership.members(GROUP).await.unwrap().is_empty());
    membership.heartbeat(GROUP, "b", ttl).await.unwrap();
    membership.heartbeat(GROUP, "a", ttl).await.unwrap();
    membership.heartbeat("migrator", "c", ttl).await.unwrap();
    assert_eq!(membership.members(GROUP).await.unwrap(), ids(&["a", "b"]));
    // The reader is no member: the members see only each other.
    assert_eq!(
        membership.heartbeat(GROUP, "a", ttl).await.unwrap(),
        ids(&["a", "b"])
    );
    membership.leave(GROUP, "b").await.unwrap();
    assert_eq!(membership.members(GROUP).await.unwrap(), ids(&["a"]));
    // A lapsed member is not read, even before anyone heartbeats it away.
    membership
        .heartbeat(GROUP, "short", Duration::from_millis(300))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while membership.members(GROUP).await.unwrap() != ids(&["a"]) {
        assert!(tokio::time::Instant::now() < deadline, "short never lapsed");
        time.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn a_lease_held_by_a_departed_member_is_taken(
    _membership: Arc<dyn Membership>,
    leases: Arc<dyn Leases>,
    _time: Arc<dyn TimeControl>,
) {
    let ttl = Duration::from_secs(30);
    let (dead, live, me) = (
        LeaseToken::random(),
        LeaseToken::random(),
        LeaseToken::random(),
    );
    let members = |tokens: &[&LeaseToken]| -> Vec<String> {
        tokens.iter().map(|t| t.as_str().to_owned()).collect()
    };
    assert!(leases.acquire("s", &dead, ttl).await.unwrap());
    assert!(leases.acquire("t", &live, ttl).await.unwrap());
    // Held by a live member: not taken. Held by one no longer live: taken at once.
    assert!(
        !leases
            .take("t", &me, ttl, &members(&[&live, &me]))
            .await
            .unwrap()
    );
    assert!(
        leases
            .take("s", &me, ttl, &members(&[&live, &me]))
            .await
            .unwrap()
    );
    assert!(
        !leases.renew("s", &dead, ttl).await.unwrap(),
        "the dead holder is fenced off"
    );
    assert!(leases.renew("s", &me, ttl).await.unwrap());
    // Free: taken like acquire. Held by the taker itself: not taken twice.
    assert!(leases.take("u", &me, ttl, &members(&[&me])).await.unwrap());
    assert!(!leases.take("u", &me, ttl, &members(&[&me])).await.unwrap());
}
