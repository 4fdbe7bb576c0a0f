//! [`Notifications`]: an app's settings, the streaks of failed runs, the notifications sent.

use chime_domain::{
    AppName, NotificationEvent, NotificationSettings, NotifyOn, SentNotification, TimerId,
    TimerName, Timestamp,
};

use crate::Notifications;

use super::*;

fn id(n: i64) -> TimerId {
    TimerId::new(n).unwrap()
}

fn sent(app: &str, timer: i64, run_at: i64, at: i64, delivered: bool) -> SentNotification {
    SentNotification {
        event: NotificationEvent::new(
            NotifyOn::Dead,
            AppName::parse(app).unwrap(),
            id(timer),
            TimerName::parse("nightly").unwrap(),
            Timestamp::from_millis(run_at),
            3,
            Some("HTTP 500"),
        ),
        at: Timestamp::from_millis(at),
        delivered,
        attempts: if delivered { 1 } else { 5 },
        error: (!delivered).then(|| "connection refused".to_owned()),
    }
}

pub async fn settings_streaks_and_sent_notifications_are_kept_per_app<S: Notifications + ?Sized>(
    store: Arc<S>,
) {
    let app = AppName::parse("notify-a").unwrap();
    assert_eq!(store.get_notifications(&app).await.unwrap(), None);
    let first = NotificationSettings::parse(
        app.clone(),
        "https://ops.example/a",
        None,
        None,
        Timestamp::from_millis(T0),
    )
    .unwrap();
    assert!(store.put_notifications(&first).await.unwrap(), "created");
    let on = vec!["dead".to_owned()];
    let second = NotificationSettings::parse(
        app.clone(),
        "https://ops.example/b",
        Some(&on),
        Some(5),
        Timestamp::from_millis(T0 + 1_000),
    )
    .unwrap();
    assert!(!store.put_notifications(&second).await.unwrap(), "replaced");
    assert_eq!(store.get_notifications(&app).await.unwrap(), Some(second));
    let other = AppName::parse("notify-b").unwrap();
    assert_eq!(store.get_notifications(&other).await.unwrap(), None);

    // Streaks: counted per timer across calls, ended once.
    let (a, b, c) = (id(9_001), id(9_002), id(9_003));
    assert_eq!(
        store.end_streaks(&[a, b]).await.unwrap(),
        vec![],
        "none yet"
    );
    assert_eq!(
        store.count_failures(&[a, b]).await.unwrap(),
        vec![(a, 1), (b, 1)]
    );
    assert_eq!(
        store.count_failures(&[a, a]).await.unwrap(),
        vec![(a, 2), (a, 3)]
    );
    let mut ended = store.end_streaks(&[a, c]).await.unwrap();
    ended.sort();
    assert_eq!(ended, vec![(a, 3)]);
    assert_eq!(store.end_streaks(&[a]).await.unwrap(), vec![], "ended once");
    assert_eq!(
        store.count_failures(&[a]).await.unwrap(),
        vec![(a, 1)],
        "a new streak"
    );
    assert_eq!(store.end_streaks(&[b]).await.unwrap(), vec![(b, 1)]);
    assert_eq!(store.count_failures(&[]).await.unwrap(), vec![]);
    assert_eq!(store.end_streaks(&[]).await.unwrap(), vec![]);

    // Sent notifications: newest first, a repeat of the same event replaces its record, and
    // records older than what is kept go.
    let old = sent("notify-a", 1, 1_000, T0, false);
    let later = sent("notify-a", 1, 2_000, T0 + 10, true);
    store
        .record_notification(&old, Timestamp::from_millis(0))
        .await
        .unwrap();
    store
        .record_notification(&later, Timestamp::from_millis(0))
        .await
        .unwrap();
    store
        .record_notification(
            &sent("notify-b", 2, 1_000, T0, true),
            Timestamp::from_millis(0),
        )
        .await
        .unwrap();
    assert_eq!(
        store.recent_notifications(&app, 10).await.unwrap(),
        vec![later.clone(), old.clone()]
    );
    assert_eq!(
        store.recent_notifications(&app, 1).await.unwrap(),
        vec![later.clone()]
    );
    let retried = sent("notify-a", 1, 1_000, T0 + 20, true);
    store
        .record_notification(&retried, Timestamp::from_millis(T0 + 5))
        .await
        .unwrap();
    assert_eq!(
        store.recent_notifications(&app, 10).await.unwrap(),
        vec![retried, later],
        "replaced, and nothing older than kept"
    );
    assert_eq!(
        store.recent_notifications(&other, 10).await.unwrap().len(),
        1
    );
}
