//! [`Activity`]: per-minute tallies, rewritten by their writer, summed over writers on read.

use chime_domain::{Counts, OccurrenceStatus, Tally};

use crate::{Activity, PurgeBefore, Retention};

use super::*;

fn tally(app: &str, minute: i64, succeeded: u64, dead: u64, late_ms: i64) -> Tally {
    let mut counts = Counts::default();
    for _ in 0..succeeded {
        counts.add(OccurrenceStatus::Succeeded, Some(late_ms));
    }
    for _ in 0..dead {
        counts.add(OccurrenceStatus::Dead, None);
    }
    Tally {
        app: AppName::parse(app).unwrap(),
        minute: Timestamp::from_millis(minute),
        counts,
    }
}

pub async fn tallies_are_rewritten_per_writer_and_summed_on_read<S>(store: Arc<S>)
where
    S: Activity + Retention + ?Sized,
{
    let m0 = T0;
    let m1 = T0 + 60_000;
    store
        .write_activity("exec-1", &[tally("act-a", m0, 3, 0, 4)])
        .await
        .unwrap();
    // The same writer again for the same minute: replaces, so a retried write counts once.
    store
        .write_activity(
            "exec-1",
            &[tally("act-a", m0, 5, 1, 4), tally("act-a", m1, 1, 0, 150)],
        )
        .await
        .unwrap();
    store
        .write_activity(
            "exec-2",
            &[tally("act-a", m0, 2, 0, 4), tally("act-b", m0, 7, 0, 1)],
        )
        .await
        .unwrap();

    let a = AppName::parse("act-a").unwrap();
    let mine = store
        .read_activity(Some(&a), Timestamp::from_millis(m0))
        .await
        .unwrap();
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert_eq!(mine[0].minute.as_millis(), m0);
    assert_eq!(
        (
            mine[0].counts.fired,
            mine[0].counts.succeeded,
            mine[0].counts.dead
        ),
        (8, 7, 1),
        "both writers summed, the first write replaced"
    );
    assert_eq!(mine[0].counts.lateness_quantile_ms(0.5), Some(5));
    assert_eq!(mine[1].counts.lateness_quantile_ms(0.99), Some(200));

    let everyone = store
        .read_activity(None, Timestamp::from_millis(m0))
        .await
        .unwrap();
    let apps: Vec<(&str, i64)> = everyone
        .iter()
        .map(|t| (t.app.as_str(), t.minute.as_millis()))
        .collect();
    assert_eq!(apps, vec![("act-a", m0), ("act-b", m0), ("act-a", m1)]);

    let later = store
        .read_activity(Some(&a), Timestamp::from_millis(m1))
        .await
        .unwrap();
    assert_eq!(later.len(), 1, "only minutes from `since` on");

    // Tallies go with the history they sum up.
    let before = PurgeBefore {
        history: Timestamp::from_millis(m1),
        dead: Timestamp::from_millis(0),
        idempotency_keys: Timestamp::from_millis(0),
        deleted_timers: Timestamp::from_millis(0),
    };
    store.purge(&before, 100).await.unwrap();
    let kept = store
        .read_activity(None, Timestamp::from_millis(0))
        .await
        .unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].minute.as_millis(), m1);
}
