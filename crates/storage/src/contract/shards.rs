//! [`Shards`]: a broadcast run's plan made once, each shard's result kept, a timer's page of
//! runs read in one go.

use chime_domain::{Shard, ShardStatus};

use crate::Shards;

use super::*;

pub async fn a_broadcast_runs_shards_are_planned_once_and_recorded<S>(store: Arc<S>)
where
    S: Shards + ?Sized,
{
    let timer = TimerId::new(901).unwrap();
    let run = TaskKey::new(timer, Timestamp::from_millis(T0));
    assert!(store.shards_of(run).await.unwrap().is_empty());
    let planned = store.plan_shards(run, 3).await.unwrap();
    assert_eq!(planned.len(), 3);
    assert!(planned.iter().enumerate().all(|(i, s)| s.index == i as u32
        && s.total == 3
        && s.status == ShardStatus::Pending
        && s.attempt == 0
        && s.worker.is_none()));
    // A second plan (another executor, another roster) leaves the first.
    assert_eq!(store.plan_shards(run, 5).await.unwrap(), planned);

    let done = Shard {
        status: ShardStatus::Succeeded,
        attempt: 1,
        worker: Some("w0-a".into()),
        ..planned[0].clone()
    };
    let failed = Shard {
        status: ShardStatus::Failed,
        attempt: 1,
        worker: Some("w1-b".into()),
        error: Some("exit 3".into()),
        ..planned[2].clone()
    };
    store
        .record_shards(run, &[done.clone(), failed.clone()])
        .await
        .unwrap();
    let now = store.shards_of(run).await.unwrap();
    assert_eq!(now, vec![done.clone(), planned[1].clone(), failed]);

    // Another run of the timer, and another timer's: a page reads its timer's range only.
    let later = TaskKey::new(timer, Timestamp::from_millis(T0 + 60_000));
    store.plan_shards(later, 2).await.unwrap();
    let other = TaskKey::new(TimerId::new(902).unwrap(), Timestamp::from_millis(T0));
    store.plan_shards(other, 1).await.unwrap();
    let page = store
        .shards_between(
            timer,
            Timestamp::from_millis(T0),
            Timestamp::from_millis(T0 + 60_000),
        )
        .await
        .unwrap();
    let runs: Vec<(i64, u32)> = page
        .iter()
        .map(|(at, s)| (at.as_millis(), s.index))
        .collect();
    assert_eq!(
        runs,
        vec![
            (T0, 0),
            (T0, 1),
            (T0, 2),
            (T0 + 60_000, 0),
            (T0 + 60_000, 1)
        ]
    );
    assert_eq!(page[0].1, done);
}
