//! The `HotIndex` contract.

use super::*;

fn entry(timer: i64, due: i64, bucket: u32) -> HotEntry {
    HotEntry::new(
        key(timer, due),
        Timestamp::from_millis(due),
        Bucket::from_stored(bucket),
    )
}

fn shard(at: i64, bucket: u32) -> ShardKey {
    ShardKey::new(Timestamp::from_millis(at), Bucket::from_stored(bucket))
}

/// The hot index expires shards relative to real time on Redis; pick the current minute.
fn now_minute() -> i64 {
    chime_domain::Clock::now(&chime_domain::SystemClock).as_millis() / 60_000 * 60_000
}

pub async fn due_members_come_in_score_order_up_to_a_limit(index: Arc<dyn HotIndex>) {
    let m = now_minute();
    let entries: Vec<_> = [30_000, 10_000, 20_000, 50_000, 40_000]
        .iter()
        .enumerate()
        .map(|(i, off)| entry(i as i64 + 1, m + off, 4))
        .collect();
    index.add(&entries).await.unwrap();
    let s = shard(m, 4);
    let due = index
        .due(s, Timestamp::from_millis(m + 30_000), 100)
        .await
        .unwrap();
    let offsets: Vec<_> = due.iter().map(|(_, t)| t.as_millis() - m).collect();
    assert_eq!(offsets, vec![10_000, 20_000, 30_000]);
    assert_eq!(due[0].0, key(2, m + 10_000));
    let limited = index
        .due(s, Timestamp::from_millis(m + 59_999), 2)
        .await
        .unwrap();
    assert_eq!(limited.len(), 2);
    assert!(
        index
            .due(s, Timestamp::from_millis(m + 9_999), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn re_adding_moves_a_member(index: Arc<dyn HotIndex>) {
    let m = now_minute();
    index.add(&[entry(1, m + 40_000, 0)]).await.unwrap();
    let moved = HotEntry {
        shard: shard(m, 0),
        key: key(1, m + 40_000),
        due: Timestamp::from_millis(m + 5_000),
    };
    index.add(&[moved]).await.unwrap();
    let due = index
        .due(shard(m, 0), Timestamp::from_millis(m + 10_000), 10)
        .await
        .unwrap();
    assert_eq!(
        due,
        vec![(key(1, m + 40_000), Timestamp::from_millis(m + 5_000))]
    );
}

pub async fn removed_members_are_gone_but_the_shard_stays(index: Arc<dyn HotIndex>) {
    let m = now_minute();
    let s = shard(m, 7);
    assert!(!index.shard_complete(s).await.unwrap());
    index
        .add(&[entry(1, m + 1, 7), entry(2, m + 2, 7)])
        .await
        .unwrap();
    index.touch(&[s]).await.unwrap();
    assert!(index.shard_complete(s).await.unwrap());
    index
        .remove(s, &[key(1, m + 1), key(2, m + 2), key(3, m + 3)])
        .await
        .unwrap();
    assert!(
        index
            .due(s, Timestamp::from_millis(m + 60_000), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        index.shard_complete(s).await.unwrap(),
        "an emptied shard is not a lost shard"
    );
    index.remove(s, &[]).await.unwrap();
    index.add(&[]).await.unwrap();
}

pub async fn touched_shards_are_complete_without_members(index: Arc<dyn HotIndex>) {
    let m = now_minute();
    let (a, b) = (shard(m, 3), shard(m + 60_000, 3));
    assert!(!index.shard_complete(a).await.unwrap());
    index.touch(&[a, b]).await.unwrap();
    assert!(index.shard_complete(a).await.unwrap());
    assert!(index.shard_complete(b).await.unwrap());
    let far = Timestamp::from_millis(m + 600_000);
    assert!(index.due(a, far, 10).await.unwrap().is_empty());
    assert_eq!(
        index.due_if_complete(a, far, 10).await.unwrap(),
        Some(vec![])
    );
    // Touching a shard keeps its members.
    index.add(&[entry(1, m + 1_000, 3)]).await.unwrap();
    index.touch(&[a]).await.unwrap();
    assert_eq!(index.due(a, far, 10).await.unwrap().len(), 1);
    index.touch(&[]).await.unwrap();
}

/// A writer adding members (a create, a retry) does not make a shard complete: one that
/// was never built from the database, or was lost and re-created, is read from there.
pub async fn added_members_leave_a_shard_incomplete_until_touched(index: Arc<dyn HotIndex>) {
    let m = now_minute();
    let s = shard(m, 5);
    let far = Timestamp::from_millis(m + 59_999);
    index
        .add(&[entry(1, m + 2_000, 5), entry(2, m + 1_000, 5)])
        .await
        .unwrap();
    assert!(!index.shard_complete(s).await.unwrap());
    assert_eq!(index.due_if_complete(s, far, 10).await.unwrap(), None);
    index.touch(&[s]).await.unwrap();
    assert!(index.shard_complete(s).await.unwrap());
    assert_eq!(
        index.due_if_complete(s, far, 1).await.unwrap(),
        Some(vec![(key(2, m + 1_000), Timestamp::from_millis(m + 1_000))])
    );
    assert_eq!(
        index
            .due_if_complete(s, Timestamp::from_millis(m + 999), 10)
            .await
            .unwrap(),
        Some(vec![])
    );
}

pub async fn shards_are_separated_by_minute_and_bucket(index: Arc<dyn HotIndex>) {
    let m = now_minute();
    index
        .add(&[
            entry(1, m + 1_000, 0),
            entry(2, m + 1_000, 1),
            entry(3, m + 61_000, 0),
        ])
        .await
        .unwrap();
    let far = Timestamp::from_millis(m + 120_000);
    assert_eq!(
        index.due(shard(m, 0), far, 10).await.unwrap(),
        vec![(key(1, m + 1_000), Timestamp::from_millis(m + 1_000))]
    );
    assert_eq!(index.due(shard(m, 1), far, 10).await.unwrap().len(), 1);
    assert_eq!(
        index
            .due(shard(m + 60_000, 0), far, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(!index.shard_complete(shard(m, 2)).await.unwrap());
    assert!(index.due(shard(m, 2), far, 10).await.unwrap().is_empty());
}
