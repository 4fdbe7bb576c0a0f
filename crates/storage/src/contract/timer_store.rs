//! The `TimerStore` contract.

use super::*;

pub async fn create_then_get(store: Arc<dyn TimerStore>) {
    let created = store
        .create_timer(new_timer("billing", "nightly"), H)
        .await
        .unwrap()
        .timer;
    assert_eq!(created.version, 1);
    assert!(created.enabled);
    assert_eq!(created.deleted_at, None);
    assert_eq!(created.created_at, created.updated_at);
    assert_eq!(created.spec, spec("billing", "nightly"));
    assert_eq!(
        created.bucket,
        Bucket::of(created.id, chime_domain::BucketCount::DEFAULT)
    );
    let fetched = store.get_timer(created.id).await.unwrap();
    assert_eq!(fetched, created);
    let other = store
        .create_timer(new_timer("billing", "hourly"), H)
        .await
        .unwrap()
        .timer;
    assert_ne!(other.id, created.id);
}

fn idempotent(app: &str, name: &str, key: &str, fingerprint: &str) -> CreateTimer {
    CreateTimer {
        timer: new_timer(app, name),
        idempotency: Some(IdempotencyKey {
            key: key.into(),
            fingerprint: fingerprint.into(),
        }),
    }
}

pub async fn batch_create_is_all_or_nothing(store: Arc<dyn TimerStore>) {
    let plain = |name: &str| CreateTimer {
        timer: new_timer("billing", name),
        idempotency: None,
    };
    let created = store
        .create_timers(vec![plain("a"), plain("b")], H)
        .await
        .unwrap();
    assert_eq!(created.len(), 2);
    assert!(
        created[0].timer.id < created[1].timer.id,
        "ids follow request order"
    );
    let failed = store
        .create_timers(vec![plain("c"), plain("d"), plain("a")], H)
        .await;
    assert!(
        matches!(failed, Err(StoreError::NameTaken { .. })),
        "{failed:?}"
    );
    let listed = store
        .list_timers(&TimerFilter::default(), &page(100, None))
        .await
        .unwrap();
    let names: Vec<_> = listed
        .items
        .iter()
        .map(|t| t.spec.name.as_str().to_owned())
        .collect();
    assert_eq!(names, vec!["a", "b"], "nothing of the failed batch remains");
    assert!(store.create_timers(Vec::new(), H).await.unwrap().is_empty());
}

pub async fn idempotent_create_returns_the_original(store: Arc<dyn TimerStore>) {
    let first = store
        .create_timers(vec![idempotent("billing", "nightly", "req-1", "fp-a")], H)
        .await
        .unwrap();
    let again = store
        .create_timers(vec![idempotent("billing", "nightly", "req-1", "fp-a")], H)
        .await
        .unwrap();
    assert_eq!(again[0].timer, first[0].timer);
    let reused = store
        .create_timers(vec![idempotent("billing", "other", "req-1", "fp-b")], H)
        .await;
    assert!(
        matches!(reused, Err(StoreError::IdempotencyKeyReused { .. })),
        "{reused:?}"
    );
    // Keys are scoped per app.
    let elsewhere = store
        .create_timers(vec![idempotent("payroll", "nightly", "req-1", "fp-a")], H)
        .await
        .unwrap();
    assert_ne!(elsewhere[0].timer.id, first[0].timer.id);
}

/// Eight clients retry the same create at once: one timer, and every client sees it.
pub async fn racing_idempotent_creates_make_one_timer(store: Arc<dyn TimerStore>) {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    match store
                        .create_timers(vec![idempotent("billing", "once", "race", "fp")], H)
                        .await
                    {
                        Ok(mut t) => return t.remove(0).timer.id,
                        Err(e) if e.is_retryable() => tokio::task::yield_now().await,
                        Err(e) => panic!("create failed: {e}"),
                    }
                }
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    let listed = store
        .list_timers(&TimerFilter::default(), &page(100, None))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}

/// Concurrent creates of one name (which may share one group commit): one wins, the
/// rest are told the name is taken; distinct names all succeed.
pub async fn racing_creates_of_one_name_make_one_timer(store: Arc<dyn TimerStore>) {
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            let name = if i % 2 == 0 {
                "same".to_owned()
            } else {
                format!("own-{i}")
            };
            tokio::spawn(async move { store.create_timer(new_timer("billing", &name), H).await })
        })
        .collect();
    let (mut won, mut taken) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::NameTaken { .. }) => taken += 1,
            Err(e) => panic!("create failed: {e}"),
        }
    }
    assert_eq!(
        (won, taken),
        (9, 7),
        "8 distinct names and one of the 8 'same' win"
    );
    let listed = store
        .list_timers(&TimerFilter::default(), &page(100, None))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 9);
}

pub async fn unknown_timer_is_not_found(store: Arc<dyn TimerStore>) {
    let missing = id(987_654_321);
    assert!(matches!(
        store.get_timer(missing).await,
        Err(StoreError::TimerNotFound(_))
    ));
    assert!(matches!(
        store.delete_timer(missing).await,
        Err(StoreError::TimerNotFound(_))
    ));
    assert!(matches!(
        store.set_timer_enabled(missing, false, H).await,
        Err(StoreError::TimerNotFound(_))
    ));
    assert!(matches!(
        store.update_timer(missing, None, spec("a", "b"), H).await,
        Err(StoreError::TimerNotFound(_))
    ));
    assert!(matches!(
        store
            .update_timer(missing, Some(1), spec("a", "b"), H)
            .await,
        Err(StoreError::TimerNotFound(_))
    ));
}

pub async fn names_are_unique_per_app_among_live_timers(store: Arc<dyn TimerStore>) {
    let first = store
        .create_timer(new_timer("billing", "nightly"), H)
        .await
        .unwrap()
        .timer;
    let dup = store.create_timer(new_timer("billing", "nightly"), H).await;
    assert!(matches!(dup, Err(StoreError::NameTaken { .. })), "{dup:?}");
    store
        .create_timer(new_timer("payroll", "nightly"), H)
        .await
        .unwrap();
    // Renaming onto a taken name is refused too.
    let second = store
        .create_timer(new_timer("billing", "weekly"), H)
        .await
        .unwrap()
        .timer;
    let clash = store
        .update_timer(second.id, None, spec("billing", "nightly"), H)
        .await;
    assert!(
        matches!(clash, Err(StoreError::NameTaken { .. })),
        "{clash:?}"
    );
    // Deleting frees the name.
    store.delete_timer(first.id).await.unwrap();
    store
        .create_timer(new_timer("billing", "nightly"), H)
        .await
        .unwrap();
}

pub async fn list_pages_in_id_order_with_filters(store: Arc<dyn TimerStore>) {
    let mut billing = Vec::new();
    for i in 0..7 {
        billing.push(
            store
                .create_timer(new_timer("billing", &format!("t{i}")), H)
                .await
                .unwrap()
                .timer
                .id,
        );
    }
    for i in 0..3 {
        store
            .create_timer(new_timer("payroll", &format!("t{i}")), H)
            .await
            .unwrap();
    }
    store.set_timer_enabled(billing[1], false, H).await.unwrap();
    store.delete_timer(billing[2]).await.unwrap();

    let filter = TimerFilter {
        app: Some(AppName::parse("billing").unwrap()),
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut token = None;
    let mut pages = 0;
    loop {
        let p = store.list_timers(&filter, &page(2, token)).await.unwrap();
        assert!(p.items.len() <= 2);
        seen.extend(p.items.iter().map(|t| t.id));
        pages += 1;
        match p.next_page_token {
            Some(t) => token = Some(t.as_str().to_owned()),
            None => break,
        }
    }
    let expected: Vec<_> = billing
        .iter()
        .copied()
        .filter(|i| *i != billing[2])
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);

    let enabled_only = TimerFilter {
        enabled: Some(true),
        ..filter.clone()
    };
    let p = store
        .list_timers(&enabled_only, &page(100, None))
        .await
        .unwrap();
    assert_eq!(p.items.len(), 5);
    assert!(p.next_page_token.is_none());

    let all = store
        .list_timers(&TimerFilter::default(), &page(100, None))
        .await
        .unwrap();
    assert_eq!(all.items.len(), 9);
    let bucket = all.items[0].bucket;
    let by_bucket = TimerFilter {
        bucket: Some(bucket),
        ..Default::default()
    };
    let p = store
        .list_timers(&by_bucket, &page(100, None))
        .await
        .unwrap();
    assert!(!p.items.is_empty());
    assert!(p.items.iter().all(|t| t.bucket == bucket));
}

pub async fn foreign_or_tampered_page_tokens_are_rejected(store: Arc<dyn TimerStore>) {
    for i in 0..3 {
        store
            .create_timer(new_timer("billing", &format!("t{i}")), H)
            .await
            .unwrap();
    }
    let filter = TimerFilter {
        app: Some(AppName::parse("billing").unwrap()),
        ..Default::default()
    };
    let first = store.list_timers(&filter, &page(1, None)).await.unwrap();
    let token = first.next_page_token.unwrap().as_str().to_owned();
    let other = TimerFilter::default();
    assert!(matches!(
        store
            .list_timers(&other, &page(1, Some(token.clone())))
            .await,
        Err(StoreError::Invalid(_))
    ));
    let tampered = token.replacen('c', "x", 1);
    assert!(matches!(
        store.list_timers(&filter, &page(1, Some(tampered))).await,
        Err(StoreError::Invalid(_))
    ));
}

pub async fn update_bumps_version_and_honours_precondition(store: Arc<dyn TimerStore>) {
    let t = store
        .create_timer(new_timer("billing", "nightly"), H)
        .await
        .unwrap()
        .timer;
    let mut changed = spec("billing", "nightly-v2");
    changed.callback.target = chime_domain::Target::Http(
        chime_domain::CallbackUrl::parse("https://example.test/x").unwrap(),
    );
    let v2 = store
        .update_timer(t.id, Some(1), changed.clone(), H)
        .await
        .unwrap()
        .timer;
    assert_eq!(v2.version, 2);
    assert_eq!(v2.spec, changed);
    assert_eq!(v2.created_at, t.created_at);
    let stale = store
        .update_timer(t.id, Some(1), spec("billing", "x"), H)
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::VersionConflict {
                expected: 1,
                actual: 2
            })
        ),
        "{stale:?}"
    );
    let v3 = store
        .update_timer(t.id, None, spec("billing", "y"), H)
        .await
        .unwrap()
        .timer;
    assert_eq!(v3.version, 3);
    assert_eq!(store.get_timer(t.id).await.unwrap(), v3);
}

pub async fn enable_and_disable_bump_version_only_on_change(store: Arc<dyn TimerStore>) {
    let t = store
        .create_timer(new_timer("billing", "nightly"), H)
        .await
        .unwrap()
        .timer;
    let same = store.set_timer_enabled(t.id, true, H).await.unwrap().timer;
    assert_eq!(same.version, 1);
    let off = store.set_timer_enabled(t.id, false, H).await.unwrap().timer;
    assert!(!off.enabled);
    assert_eq!(off.version, 2);
    let still_off = store.set_timer_enabled(t.id, false, H).await.unwrap().timer;
    assert_eq!(still_off.version, 2);
    let on = store.set_timer_enabled(t.id, true, H).await.unwrap().timer;
    assert!(on.enabled);
    assert_eq!(on.version, 3);
    assert!(on.fires_version(3) && !on.fires_version(1));
}

pub async fn delete_is_soft_and_final(store: Arc<dyn TimerStore>) {
    let t = store
        .create_timer(new_timer("billing", "nightly"), H)
        .await
        .unwrap()
        .timer;
    store.delete_timer(t.id).await.unwrap();
    assert!(matches!(
        store.get_timer(t.id).await,
        Err(StoreError::TimerNotFound(_))
    ));
    assert!(matches!(
        store.delete_timer(t.id).await,
        Err(StoreError::TimerNotFound(_))
    ));
    assert!(matches!(
        store
            .update_timer(t.id, None, spec("billing", "nightly"), H)
            .await,
        Err(StoreError::TimerNotFound(_))
    ));
    let listed = store
        .list_timers(&TimerFilter::default(), &page(10, None))
        .await
        .unwrap();
    assert!(listed.items.is_empty());
}

pub async fn get_timers_returns_the_live_ones_in_id_order(store: Arc<dyn TimerStore>) {
    let a = store
        .create_timer(new_timer("ops", "a"), H)
        .await
        .unwrap()
        .timer;
    let b = store
        .create_timer(new_timer("ops", "b"), H)
        .await
        .unwrap()
        .timer;
    let c = store
        .create_timer(new_timer("ops", "c"), H)
        .await
        .unwrap()
        .timer;
    store.delete_timer(b.id).await.unwrap();
    let off = store.set_timer_enabled(c.id, false, H).await.unwrap().timer;
    let got = store
        .get_timers(&[c.id, id(987_654_321), b.id, a.id, a.id])
        .await
        .unwrap();
    assert_eq!(got, vec![a, off]);
    assert!(store.get_timers(&[]).await.unwrap().is_empty());
}

pub async fn live_timers_are_counted_per_app(store: Arc<dyn TimerStore>) {
    let billing = AppName::parse("billing").unwrap();
    assert_eq!(store.count_timers(&billing).await.unwrap(), 0);
    let a = store
        .create_timer(new_timer("billing", "a"), H)
        .await
        .unwrap();
    store
        .create_timer(new_timer("billing", "b"), H)
        .await
        .unwrap();
    store.create_timer(new_timer("mail", "a"), H).await.unwrap();
    assert_eq!(store.count_timers(&billing).await.unwrap(), 2);
    store.delete_timer(a.timer.id).await.unwrap();
    assert_eq!(store.count_timers(&billing).await.unwrap(), 1);
}
