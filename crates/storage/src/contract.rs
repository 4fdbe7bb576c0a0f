//! The storage contract: one suite of behaviours every backend of a trait must show. Backends
//! are instantiated in `tests/` with [`storage_contract!`](crate::storage_contract), which
//! names each test `<backend>::<trait>::<behaviour>`.
//!
//! Each function takes the store under test and panics on a violated contract.

// Panicking is how a contract reports a violation.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    AppName, Bucket, CallbackInput, Claim, Horizon, NewOccurrence, NewTimer, OccurrenceStatus,
    Outcome, PageSize, ScheduleInput, ShardKey, TaskKey, Timer, TimerId, TimerName, TimerSpec,
    Timestamp,
};

use crate::{
    CreateTimer, DeadFilter, HotEntry, HotIndex, IdempotencyKey, LeaseToken, Leases, Membership,
    OccurrenceStore, PageRequest, Redrive, RunFilter, StoreError, TimerFilter, TimerStore,
};

/// Lets a contract make time pass for a backend: backends on an injected clock move it,
/// backends on a server's clock (Redis expiry) do nothing and the contract polls instead.
pub trait TimeControl: Send + Sync {
    fn advance(&self, by: Duration);
}

/// Real time: nothing to do.
pub struct RealTime;

impl TimeControl for RealTime {
    fn advance(&self, _by: Duration) {}
}

impl TimeControl for chime_domain::ManualClock {
    fn advance(&self, by: Duration) {
        chime_domain::ManualClock::advance(self, by);
    }
}

pub mod activity;
pub mod backfill;
pub mod calendars;
pub mod credentials;
pub mod lifecycle;
pub mod materialize;
pub mod membership;
pub mod retention;

const T0: i64 = 1_893_456_000_000; // 2030-01-01T00:00:00Z: clear of any real clock in tests.

/// The horizon timer writes use in the contracts.
const H: Horizon = Horizon::DEFAULT;

/// A valid timer spec for tests: every minute from [`T0`].
pub fn spec(app: &str, name: &str) -> TimerSpec {
    spec_every(app, name, "1m", Timestamp::from_millis(T0))
}

/// [`spec_with`] a schedule of `every` (`"1h"`, `"1m"`, …) anchored at `now`.
pub fn spec_every(app: &str, name: &str, every: &str, now: Timestamp) -> TimerSpec {
    let schedule = ScheduleInput {
        every: Some(every.into()),
        ..Default::default()
    };
    spec_with(app, name, &schedule, now)
}

/// A valid timer spec for tests with `schedule` anchored at `now`, calling back a port
/// nothing listens on, the other settings at their defaults.
pub fn spec_with(app: &str, name: &str, schedule: &ScheduleInput, now: Timestamp) -> TimerSpec {
    TimerSpec {
        app: AppName::parse(app).expect("test app name"),
        name: TimerName::parse(name).expect("test timer name"),
        schedule: schedule.resolve(now, None, None).expect("test schedule"),
        callback: CallbackInput {
            url: Some("http://127.0.0.1:9/callback".into()),
            ..Default::default()
        }
        .parse()
        .expect("test callback"),
        retry: Default::default(),
        misfire: Default::default(),
        delivery: Default::default(),
        labels: Default::default(),
        on_complete: Default::default(),
        catch_up_window: None,
        overlap: Default::default(),
        window: None,
        exclude_calendars: Vec::new(),
    }
}

/// Timer `id` as a store hands it back when just created (version 1, enabled, bucket 0),
/// without a store: for code that takes a `Timer` (delivery targets, the bench's callback
/// floor).
pub fn unstored_timer(id: i64, spec: TimerSpec, now: Timestamp) -> Timer {
    Timer {
        id: TimerId::new(id).expect("test timer id"),
        spec,
        enabled: true,
        version: 1,
        bucket: Bucket::from_stored(0),
        created_at: now,
        updated_at: now,
        deleted_at: None,
        paused: None,
    }
}

pub fn new_timer(app: &str, name: &str) -> NewTimer {
    NewTimer {
        spec: spec(app, name),
        enabled: true,
    }
}

fn page(size: u32, token: Option<String>) -> PageRequest {
    PageRequest {
        size: PageSize::new(Some(size)).expect("test page size"),
        token,
    }
}

fn id(n: i64) -> TimerId {
    TimerId::new(n).expect("test timer id")
}

fn key(timer: i64, run_at: i64) -> TaskKey {
    TaskKey::new(id(timer), Timestamp::from_millis(run_at))
}

fn occ(timer: i64, run_at: i64, version: i64, bucket: u32) -> NewOccurrence {
    NewOccurrence {
        key: key(timer, run_at),
        timer_version: version,
        bucket: Bucket::from_stored(bucket),
        due: None,
    }
}

fn claim_at(now: i64, lease_ms: i64) -> Claim {
    Claim {
        now: Timestamp::from_millis(now),
        lease_until: Timestamp::from_millis(now + lease_ms),
    }
}

fn outcome(k: TaskKey, attempt: u32, status: OccurrenceStatus, fired_at: i64) -> Outcome {
    Outcome {
        key: k,
        attempt,
        status,
        fired_at: Some(Timestamp::from_millis(fired_at)),
        http_status: Some(200),
        output: Some("ok".into()),
        error: None,
        next_attempt_at: None,
    }
}

// ---- TimerStore ------------------------------------------------------------------------

pub mod timer_store {
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
                tokio::spawn(
                    async move { store.create_timer(new_timer("billing", &name), H).await },
                )
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
}

// ---- OccurrenceStore ---------------------------------------------------------------------

pub mod occurrence_store {
    use super::*;

    async fn status_of(store: &dyn OccurrenceStore, k: TaskKey) -> OccurrenceStatus {
        store
            .get_occurrence(k)
            .await
            .unwrap()
            .expect("occurrence exists")
            .status
    }

    pub async fn insert_is_idempotent(store: Arc<dyn OccurrenceStore>) {
        let batch: Vec<_> = (0..100).map(|i| occ(1, T0 + i * 1000, 1, 3)).collect();
        assert_eq!(store.insert_occurrences(&batch).await.unwrap(), 100);
        assert_eq!(store.insert_occurrences(&batch).await.unwrap(), 0);
        // Repeats inside one batch are fine too.
        let repeated = vec![occ(2, T0, 1, 0), occ(2, T0, 1, 0)];
        assert_eq!(store.insert_occurrences(&repeated).await.unwrap(), 1);
        assert_eq!(store.insert_occurrences(&[]).await.unwrap(), 0);
        let o = store
            .get_occurrence(key(1, T0 + 5000))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.status, OccurrenceStatus::Pending);
        assert_eq!(o.attempt, 0);
        assert_eq!(o.timer_version, 1);
        assert_eq!(o.bucket, Bucket::from_stored(3));
        assert_eq!(store.get_occurrence(key(1, T0 + 500)).await.unwrap(), None);
    }

    pub async fn newer_version_adopts_pending_rows_only(store: Arc<dyn OccurrenceStore>) {
        store
            .insert_occurrences(&[occ(1, T0, 1, 0), occ(1, T0 + 1000, 1, 0)])
            .await
            .unwrap();
        store
            .claim(&[key(1, T0 + 1000)], claim_at(T0, 30_000))
            .await
            .unwrap();
        let adopted = store
            .insert_occurrences(&[occ(1, T0, 2, 0), occ(1, T0 + 1000, 2, 0)])
            .await
            .unwrap();
        assert_eq!(adopted, 1);
        let pending = store.get_occurrence(key(1, T0)).await.unwrap().unwrap();
        assert_eq!(pending.timer_version, 2);
        let running = store
            .get_occurrence(key(1, T0 + 1000))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(running.timer_version, 1);
        // An older version never overwrites a newer one.
        assert_eq!(
            store.insert_occurrences(&[occ(1, T0, 1, 0)]).await.unwrap(),
            0
        );
    }

    pub async fn claim_then_record_outcome(store: Arc<dyn OccurrenceStore>) {
        let k = key(7, T0);
        store.insert_occurrences(&[occ(7, T0, 4, 2)]).await.unwrap();
        let won = store
            .claim(&[k, key(7, T0 + 1)], claim_at(T0, 30_000))
            .await
            .unwrap();
        assert_eq!(won.len(), 1, "only existing occurrences are claimed");
        assert_eq!(won[0].key, k);
        assert_eq!(won[0].attempt, 1);
        assert_eq!(
            won[0].due, k.run_at,
            "a first attempt is due at its run time"
        );
        assert_eq!(won[0].timer_version, 4);
        assert_eq!(won[0].bucket, Bucket::from_stored(2));
        let running = store.get_occurrence(k).await.unwrap().unwrap();
        assert_eq!(running.status, OccurrenceStatus::Running);
        assert_eq!(
            running.lease_until,
            Some(Timestamp::from_millis(T0 + 30_000))
        );
        // A second claim while the lease holds wins nothing.
        assert!(
            store
                .claim(&[k], claim_at(T0 + 10, 30_000))
                .await
                .unwrap()
                .is_empty()
        );

        let recorded = store
            .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Succeeded, T0 + 12)])
            .await
            .unwrap();
        assert_eq!(recorded, 1);
        let done = store.get_occurrence(k).await.unwrap().unwrap();
        assert_eq!(done.status, OccurrenceStatus::Succeeded);
        assert_eq!(done.fired_at, Some(Timestamp::from_millis(T0 + 12)));
        assert_eq!(done.lateness_ms, Some(12));
        assert_eq!(done.http_status, Some(200));
        assert_eq!(done.output.as_deref(), Some("ok"));
        assert_eq!(done.lease_until, None);
        // Terminal: never claimed again, and a repeated outcome is ignored.
        assert!(
            store
                .claim(&[k], claim_at(T0 + 99_000, 30_000))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store
                .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Failed, T0 + 50)])
                .await
                .unwrap(),
            0
        );
        assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Succeeded);
    }

    pub async fn expired_claim_is_taken_over_and_late_outcome_ignored(
        store: Arc<dyn OccurrenceStore>,
    ) {
        let k = key(8, T0);
        store.insert_occurrences(&[occ(8, T0, 1, 0)]).await.unwrap();
        let first = store.claim(&[k], claim_at(T0, 1_000)).await.unwrap();
        assert_eq!(first[0].attempt, 1);
        // The first claimer went silent past its lease: a second claimer takes over.
        let second = store
            .claim(&[k], claim_at(T0 + 5_000, 1_000))
            .await
            .unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].attempt, 2);
        // The first claimer's late outcome must not overwrite the takeover.
        let late = store
            .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Succeeded, T0 + 6_000)])
            .await
            .unwrap();
        assert_eq!(late, 0);
        assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Running);
        let ok = store
            .record_outcomes(&[outcome(k, 2, OccurrenceStatus::Succeeded, T0 + 5_010)])
            .await
            .unwrap();
        assert_eq!(ok, 1);
    }

    pub async fn retrying_is_due_at_next_attempt_and_claimable(store: Arc<dyn OccurrenceStore>) {
        let k = key(9, T0);
        store.insert_occurrences(&[occ(9, T0, 1, 5)]).await.unwrap();
        store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
        let retry_at = Timestamp::from_millis(T0 + 2_000);
        let mut failed = outcome(k, 1, OccurrenceStatus::Retrying, T0 + 5);
        failed.http_status = Some(503);
        failed.error = Some("HTTP 503".into());
        failed.next_attempt_at = Some(retry_at);
        assert_eq!(store.record_outcomes(&[failed]).await.unwrap(), 1);
        let o = store.get_occurrence(k).await.unwrap().unwrap();
        assert_eq!(o.status, OccurrenceStatus::Retrying);
        assert_eq!(o.due_at(), retry_at);
        assert_eq!(o.error.as_deref(), Some("HTTP 503"));
        let b = Bucket::from_stored(5);
        let early = store
            .due_in_bucket(b, Timestamp::from_millis(T0), retry_at, 10)
            .await
            .unwrap();
        assert!(
            early.is_empty(),
            "not due before next_attempt_at: {early:?}"
        );
        let due = store
            .due_in_bucket(b, retry_at, retry_at.add_millis(1), 10)
            .await
            .unwrap();
        assert_eq!(due, vec![(k, retry_at)]);
        let again = store
            .claim(&[k], claim_at(T0 + 2_000, 30_000))
            .await
            .unwrap();
        assert_eq!(again[0].attempt, 2);
        assert_eq!(again[0].due, retry_at, "a retry is due at its next attempt");
    }

    pub async fn outcome_must_be_a_final_status(store: Arc<dyn OccurrenceStore>) {
        let k = key(10, T0);
        store
            .insert_occurrences(&[occ(10, T0, 1, 0)])
            .await
            .unwrap();
        store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
        for bad in [OccurrenceStatus::Pending, OccurrenceStatus::Running] {
            let r = store.record_outcomes(&[outcome(k, 1, bad, T0)]).await;
            assert!(matches!(r, Err(StoreError::Invalid(_))), "{bad}: {r:?}");
        }
        assert_eq!(status_of(&*store, k).await, OccurrenceStatus::Running);
    }

    pub async fn list_runs_newest_first_with_filter_and_pages(store: Arc<dyn OccurrenceStore>) {
        let batch: Vec<_> = (0..5).map(|i| occ(11, T0 + i * 1000, 1, 0)).collect();
        store.insert_occurrences(&batch).await.unwrap();
        store
            .insert_occurrences(&[occ(12, T0, 1, 0)])
            .await
            .unwrap();
        let k = key(11, T0 + 1000);
        store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
        store
            .record_outcomes(&[outcome(k, 1, OccurrenceStatus::Succeeded, T0 + 1001)])
            .await
            .unwrap();

        let filter = RunFilter {
            timer_id: id(11),
            status: None,
            due_by: None,
        };
        let mut seen = Vec::new();
        let mut token = None;
        loop {
            let p = store.list_runs(&filter, &page(2, token)).await.unwrap();
            seen.extend(p.items.iter().map(|o| o.key.run_at.as_millis() - T0));
            match p.next_page_token {
                Some(t) => token = Some(t.as_str().to_owned()),
                None => break,
            }
        }
        assert_eq!(seen, vec![4000, 3000, 2000, 1000, 0]);

        let history = RunFilter {
            due_by: Some(Timestamp::from_millis(T0 + 2_000)),
            ..filter.clone()
        };
        let mut seen = Vec::new();
        let mut token = None;
        loop {
            let p = store.list_runs(&history, &page(2, token)).await.unwrap();
            seen.extend(p.items.iter().map(|o| o.key.run_at.as_millis() - T0));
            match p.next_page_token {
                Some(t) => token = Some(t.as_str().to_owned()),
                None => break,
            }
        }
        assert_eq!(seen, vec![2000, 1000, 0], "due_by is inclusive");

        let succeeded = RunFilter {
            timer_id: id(11),
            status: Some(OccurrenceStatus::Succeeded),
            due_by: None,
        };
        let p = store.list_runs(&succeeded, &page(10, None)).await.unwrap();
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.items[0].key, k);
        assert_eq!(p.items[0].lateness_ms, Some(1));

        let bad = store
            .list_runs(&succeeded, &page(10, Some("c1nonsense".into())))
            .await;
        assert!(matches!(bad, Err(StoreError::Invalid(_))));
    }

    pub async fn skipping_touches_claimable_occurrences_only(store: Arc<dyn OccurrenceStore>) {
        store
            .insert_occurrences(&[occ(21, T0, 1, 0), occ(21, T0 + 1_000, 1, 0)])
            .await
            .unwrap();
        let running = key(21, T0 + 1_000);
        store.claim(&[running], claim_at(T0, 30_000)).await.unwrap();
        let skipped = store
            .skip_occurrences(&[key(21, T0), running, key(99, T0)], "misfired")
            .await
            .unwrap();
        assert_eq!(skipped, 1);
        let o = store.get_occurrence(key(21, T0)).await.unwrap().unwrap();
        assert_eq!(o.status, OccurrenceStatus::Skipped);
        assert_eq!(o.error.as_deref(), Some("misfired"));
        assert_eq!(
            status_of(store.as_ref(), running).await,
            OccurrenceStatus::Running
        );
        assert_eq!(store.skip_occurrences(&[], "x").await.unwrap(), 0);
    }

    pub async fn dropping_pending_leaves_what_is_due_or_under_way(store: Arc<dyn OccurrenceStore>) {
        // Due before the cut, pending after it (one due later by its window), running after
        // it, a second timer's, and one of a timer not named.
        let mut windowed = occ(22, T0 + 3_000, 1, 2);
        windowed.due = Some(Timestamp::from_millis(T0 + 3_500));
        store
            .insert_occurrences(&[
                occ(22, T0 - 1_000, 1, 2),
                occ(22, T0 + 1_000, 1, 2),
                occ(22, T0 + 2_000, 1, 2),
                windowed,
                occ(23, T0 + 1_000, 1, 5),
                occ(24, T0 + 1_500, 1, 7),
            ])
            .await
            .unwrap();
        let running = key(22, T0 + 2_000);
        store.claim(&[running], claim_at(T0, 30_000)).await.unwrap();
        let timers = [TimerId::new(22).unwrap(), TimerId::new(24).unwrap()];
        let mut dropped = store
            .drop_pending(&timers, Timestamp::from_millis(T0))
            .await
            .unwrap();
        assert!(
            store
                .drop_pending(&[], Timestamp::from_millis(T0))
                .await
                .unwrap()
                .is_empty()
        );
        dropped.sort_by_key(|e| e.key);
        let bucket = Bucket::from_stored(2);
        assert_eq!(
            dropped,
            vec![
                HotEntry::new(
                    key(22, T0 + 1_000),
                    Timestamp::from_millis(T0 + 1_000),
                    bucket
                ),
                HotEntry::new(
                    key(22, T0 + 3_000),
                    Timestamp::from_millis(T0 + 3_500),
                    bucket
                ),
                HotEntry::new(
                    key(24, T0 + 1_500),
                    Timestamp::from_millis(T0 + 1_500),
                    Bucket::from_stored(7)
                ),
            ]
        );
        for gone in [key(22, T0 + 1_000), key(22, T0 + 3_000)] {
            assert_eq!(store.get_occurrence(gone).await.unwrap(), None);
        }
        assert_eq!(
            status_of(store.as_ref(), key(22, T0 - 1_000)).await,
            OccurrenceStatus::Pending,
            "due already: the executors and the sweeper skip it"
        );
        assert_eq!(
            status_of(store.as_ref(), running).await,
            OccurrenceStatus::Running
        );
        assert_eq!(
            status_of(store.as_ref(), key(23, T0 + 1_000)).await,
            OccurrenceStatus::Pending
        );
        // Written again when the timer is enabled again.
        assert_eq!(
            store
                .insert_occurrences(&[occ(22, T0 + 1_000, 2, 2)])
                .await
                .unwrap(),
            1
        );
    }

    /// Kills `k`: claims it and records it dead.
    async fn dead(store: &dyn OccurrenceStore, k: TaskKey) {
        let won = store.claim(&[k], claim_at(T0, 30_000)).await.unwrap();
        assert_eq!(won.len(), 1);
        let mut o = outcome(k, won[0].attempt, OccurrenceStatus::Dead, T0 + 1);
        o.http_status = Some(500);
        o.error = Some("callback answered HTTP 500".into());
        assert_eq!(store.record_outcomes(&[o]).await.unwrap(), 1);
    }

    pub async fn dead_letters_are_listed_and_redriven<S>(store: Arc<S>)
    where
        S: OccurrenceStore + TimerStore,
    {
        let a = store
            .create_timer(new_timer("billing", "a"), H)
            .await
            .unwrap()
            .timer;
        let b = store
            .create_timer(new_timer("ops", "b"), H)
            .await
            .unwrap()
            .timer;
        let (ka1, ka2, kb) = (
            TaskKey::new(a.id, Timestamp::from_millis(T0)),
            TaskKey::new(a.id, Timestamp::from_millis(T0 + 1_000)),
            TaskKey::new(b.id, Timestamp::from_millis(T0)),
        );
        let alive = TaskKey::new(b.id, Timestamp::from_millis(T0 + 5_000));
        let rows: Vec<NewOccurrence> = [ka1, ka2, kb, alive]
            .iter()
            .map(|k| NewOccurrence {
                key: *k,
                timer_version: 1,
                bucket: Bucket::from_stored(0),
                due: None,
            })
            .collect();
        store.insert_occurrences(&rows).await.unwrap();
        for k in [ka1, ka2, kb] {
            dead(store.as_ref(), k).await;
        }

        let all = DeadFilter::default();
        let mut seen = Vec::new();
        let mut token = None;
        loop {
            let p = store.list_dead(&all, &page(2, token)).await.unwrap();
            seen.extend(p.items.iter().map(|o| o.key));
            match p.next_page_token {
                Some(t) => token = Some(t.as_str().to_owned()),
                None => break,
            }
        }
        assert_eq!(
            seen,
            vec![ka1, ka2, kb],
            "by timer, then run time; the live one left out"
        );
        let billing = DeadFilter {
            app: Some(AppName::parse("billing").unwrap()),
            timer_id: None,
        };
        let p = store.list_dead(&billing, &page(10, None)).await.unwrap();
        assert_eq!(
            p.items.iter().map(|o| o.key).collect::<Vec<_>>(),
            vec![ka1, ka2]
        );
        let of_b = DeadFilter {
            app: None,
            timer_id: Some(b.id),
        };
        assert_eq!(
            store
                .list_dead(&of_b, &page(10, None))
                .await
                .unwrap()
                .items
                .len(),
            1
        );
        let foreign = store
            .list_dead(&billing, &page(10, token_of(&store, &all).await))
            .await;
        assert!(
            matches!(foreign, Err(StoreError::Invalid(_))),
            "tokens are bound to their query"
        );

        // Redrive one, then the rest of a timer's: pending again, fresh budget, due now.
        let now = Timestamp::from_millis(T0 + 60_000);
        assert_eq!(store.redrive(Redrive::One(ka1), now).await.unwrap(), 1);
        assert_eq!(
            store.redrive(Redrive::One(ka1), now).await.unwrap(),
            0,
            "not dead any more"
        );
        let o = store.get_occurrence(ka1).await.unwrap().unwrap();
        assert_eq!(
            (o.status, o.attempt, o.next_attempt_at, o.error),
            (OccurrenceStatus::Pending, 0, Some(now), None)
        );
        assert_eq!(store.redrive(Redrive::Timer(a.id), now).await.unwrap(), 1);
        assert_eq!(store.redrive(Redrive::Timer(b.id), now).await.unwrap(), 1);
        assert!(
            store
                .list_dead(&all, &page(10, None))
                .await
                .unwrap()
                .items
                .is_empty()
        );
        let won = store
            .claim(&[ka1], claim_at(T0 + 60_000, 30_000))
            .await
            .unwrap();
        assert_eq!(
            won[0].attempt, 1,
            "the redriven attempt counts from 1 again"
        );
    }

    async fn token_of<S: OccurrenceStore>(store: &Arc<S>, filter: &DeadFilter) -> Option<String> {
        store
            .list_dead(filter, &page(1, None))
            .await
            .unwrap()
            .next_page_token
            .map(|t| t.as_str().to_owned())
    }

    pub async fn find_overdue_reports_missed_and_abandoned_work(store: Arc<dyn OccurrenceStore>) {
        store
            .insert_occurrences(&[
                occ(13, T0, 1, 0),          // missed: overdue pending
                occ(13, T0 + 60_000, 1, 0), // not yet due
                occ(14, T0 + 1_000, 1, 0),  // claimed, lease expired
                occ(15, T0 + 2_000, 1, 0),  // claimed, lease still valid
                occ(16, T0 + 3_000, 1, 0),  // done
            ])
            .await
            .unwrap();
        store
            .claim(&[key(14, T0 + 1_000)], claim_at(T0 + 1_000, 1_000))
            .await
            .unwrap();
        store
            .claim(&[key(15, T0 + 2_000)], claim_at(T0 + 2_000, 600_000))
            .await
            .unwrap();
        store
            .claim(&[key(16, T0 + 3_000)], claim_at(T0 + 3_000, 1_000))
            .await
            .unwrap();
        store
            .record_outcomes(&[outcome(
                key(16, T0 + 3_000),
                1,
                OccurrenceStatus::Succeeded,
                T0 + 3_001,
            )])
            .await
            .unwrap();
        let now = Timestamp::from_millis(T0 + 30_000);
        let overdue = store.find_overdue(now, now, 100).await.unwrap();
        let keys: Vec<_> = overdue.iter().map(|o| o.key).collect();
        assert_eq!(keys, vec![key(13, T0), key(14, T0 + 1_000)]);
        let limited = store.find_overdue(now, now, 1).await.unwrap();
        assert_eq!(limited.len(), 1);
    }

    pub async fn due_in_bucket_is_scoped_to_bucket_window_and_status(
        store: Arc<dyn OccurrenceStore>,
    ) {
        store
            .insert_occurrences(&[
                occ(20, T0, 1, 1),
                occ(21, T0 + 10, 1, 1),
                occ(22, T0 + 20, 1, 2),
                occ(23, T0 + 60_000, 1, 1),
                occ(24, T0 + 30, 1, 1),
            ])
            .await
            .unwrap();
        store
            .claim(&[key(24, T0 + 30)], claim_at(T0, 30_000))
            .await
            .unwrap();
        let got = store
            .due_in_bucket(
                Bucket::from_stored(1),
                Timestamp::from_millis(T0),
                Timestamp::from_millis(T0 + 60_000),
                100,
            )
            .await
            .unwrap();
        assert_eq!(
            got,
            vec![
                (key(20, T0), Timestamp::from_millis(T0)),
                (key(21, T0 + 10), Timestamp::from_millis(T0 + 10)),
            ]
        );
    }

    /// 8 claimers race over the same 10,000 occurrences: each is won exactly once.
    pub async fn racing_claimers_win_each_occurrence_exactly_once(store: Arc<dyn OccurrenceStore>) {
        const N: i64 = 10_000;
        const CLAIMERS: usize = 8;
        const BATCH: usize = 250;
        let all: Vec<_> = (0..N)
            .map(|i| occ(1 + i % 97, T0 + i, 1, (i % 16) as u32))
            .collect();
        for chunk in all.chunks(5_000) {
            store.insert_occurrences(chunk).await.unwrap();
        }
        let keys: Arc<Vec<TaskKey>> = Arc::new(all.iter().map(|o| o.key).collect());
        let mut tasks = Vec::new();
        for c in 0..CLAIMERS {
            let store = store.clone();
            let keys = keys.clone();
            tasks.push(tokio::spawn(async move {
                // Each claimer walks the keys from a different offset and direction, so
                // batches overlap in every possible way.
                let mut order: Vec<TaskKey> = keys.to_vec();
                order.rotate_left(c * keys.len() / CLAIMERS);
                if c % 2 == 1 {
                    order.reverse();
                }
                let mut won = Vec::new();
                for batch in order.chunks(BATCH) {
                    loop {
                        match store.claim(batch, claim_at(T0 + 1, 600_000)).await {
                            Ok(got) => {
                                won.extend(got.into_iter().map(|c| c.key));
                                break;
                            }
                            // Busy is allowed (the caller retries); wrong answers are not.
                            Err(e) if e.is_retryable() => tokio::task::yield_now().await,
                            Err(e) => panic!("claim failed: {e}"),
                        }
                    }
                }
                won
            }));
        }
        let mut total = 0;
        let mut distinct = HashSet::new();
        for t in tasks {
            let won = t.await.unwrap();
            total += won.len();
            distinct.extend(won);
        }
        assert_eq!(distinct.len(), N as usize, "every occurrence claimed");
        assert_eq!(total, N as usize, "no occurrence claimed twice");
    }
}

// ---- HotIndex --------------------------------------------------------------------------

pub mod hot_index {
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
}

// ---- Leases ----------------------------------------------------------------------------

pub mod leases {
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
            let ta =
                tokio::spawn(async move { la.acquire(&na, &a, Duration::from_secs(30)).await });
            let tb =
                tokio::spawn(async move { lb.acquire(&nb, &b, Duration::from_secs(30)).await });
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
}

/// Instantiates the contract for one backend. `$make` is an async expression yielding a
/// fixture with `store()` (for the SQL stores), `hot_index()` or `leases()`/`time()`; the
/// fixture cleans up after itself when dropped.
#[macro_export]
macro_rules! storage_contract {
    (timer_store, $make:expr) => {
        $crate::storage_contract!(@cases timer_store, $make, store, [
            create_then_get,
            batch_create_is_all_or_nothing,
            idempotent_create_returns_the_original,
            racing_idempotent_creates_make_one_timer,
            racing_creates_of_one_name_make_one_timer,
            unknown_timer_is_not_found,
            names_are_unique_per_app_among_live_timers,
            list_pages_in_id_order_with_filters,
            foreign_or_tampered_page_tokens_are_rejected,
            update_bumps_version_and_honours_precondition,
            enable_and_disable_bump_version_only_on_change,
            delete_is_soft_and_final,
            get_timers_returns_the_live_ones_in_id_order,
            live_timers_are_counted_per_app,
        ]);
    };
    (occurrence_store, $make:expr) => {
        $crate::storage_contract!(@cases occurrence_store, $make, store, [
            insert_is_idempotent,
            newer_version_adopts_pending_rows_only,
            claim_then_record_outcome,
            expired_claim_is_taken_over_and_late_outcome_ignored,
            retrying_is_due_at_next_attempt_and_claimable,
            outcome_must_be_a_final_status,
            list_runs_newest_first_with_filter_and_pages,
            find_overdue_reports_missed_and_abandoned_work,
            due_in_bucket_is_scoped_to_bucket_window_and_status,
            racing_claimers_win_each_occurrence_exactly_once,
            skipping_touches_claimable_occurrences_only,
            dropping_pending_leaves_what_is_due_or_under_way,
            dead_letters_are_listed_and_redriven,
        ]);
    };
    (materialize, $make:expr) => {
        $crate::storage_contract!(@cases materialize, $make, store, [
            creates_write_first_occurrences_and_watermark,
            a_one_shot_is_written_whole_and_never_behind,
            a_failed_batch_leaves_no_occurrences,
            idempotent_repeats_write_nothing_more,
            enabling_and_updating_write_rows_at_the_new_version,
            timers_behind_page_by_watermark_and_advance_forward_only,
            shrinking_the_bucket_count_moves_out_of_range_timers,
        ]);
    };
    (retention, $make:expr) => {
        $crate::storage_contract!(@cases retention, $make, store, [
            finished_occurrences_go_after_their_retention,
            purges_are_bounded_batches,
            old_idempotency_keys_and_deleted_timers_go,
            claims_take_only_their_rows_across_days,
            rotation_keeps_live_rows_and_dead_letters,
        ]);
    };
    (lifecycle, $make:expr) => {
        $crate::storage_contract!(@cases lifecycle, $make, store, [
            pause_notes_are_kept_until_enabled,
            timers_are_listed_by_state_name_prefix_and_labels,
            finished_timers_that_asked_are_removed_once_their_runs_ended,
            exclusive_claims_skip_while_another_occurrence_is_in_flight,
            buffer_one_keeps_one_occurrence_waiting_and_skips_the_rest,
            racing_exclusive_claims_of_one_timer_start_one,
            windowed_occurrences_are_due_at_their_place,
            cancel_other_ends_the_earlier_occurrence_in_flight,
            claims_tell_the_timer_version_now,
        ]);
    };
    (backfill, $make:expr) => {
        $crate::storage_contract!(@cases backfill, $make, store, [
            backfilled_occurrences_are_marked_and_added_once,
            backfilled_occurrences_are_claimed_under_their_own_policy,
            only_backfills_under_their_own_policy_are_held_for_exclusive_claims,
        ]);
    };
    (activity, $make:expr) => {
        $crate::storage_contract!(@cases activity, $make, store, [
            tallies_are_rewritten_per_writer_and_summed_on_read,
        ]);
    };
    (calendars, $make:expr) => {
        $crate::storage_contract!(@cases calendars, $make, store, [
            calendars_are_put_by_name_and_read_per_app,
        ]);
    };
    (credentials, $make:expr) => {
        $crate::storage_contract!(@cases credentials, $make, store, [
            tokens_are_found_by_id_until_revoked,
            each_app_gets_one_signing_secret,
            rotation_keeps_the_old_secret_for_its_grace,
        ]);
    };
    (hot_index, $make:expr) => {
        $crate::storage_contract!(@cases hot_index, $make, hot_index, [
            due_members_come_in_score_order_up_to_a_limit,
            re_adding_moves_a_member,
            removed_members_are_gone_but_the_shard_stays,
            shards_are_separated_by_minute_and_bucket,
            touched_shards_are_complete_without_members,
            added_members_leave_a_shard_incomplete_until_touched,
        ]);
    };
    (leases, $make:expr) => {
        mod leases {
            #[allow(unused_imports)]
            use super::*;
            $crate::storage_contract!(@lease_case $make, one_of_two_contenders_wins);
            $crate::storage_contract!(@lease_case $make, holder_renews_and_releases);
            $crate::storage_contract!(@lease_case $make, expired_lease_goes_to_a_new_token);
            $crate::storage_contract!(@lease_case $make, stale_token_can_neither_renew_nor_release);
        }
    };
    (membership, $make:expr) => {
        mod membership {
            #[allow(unused_imports)]
            use super::*;
            $crate::storage_contract!(@membership_case $make, heartbeats_show_every_live_member_sorted);
            $crate::storage_contract!(@membership_case $make, a_member_that_stops_heartbeating_lapses);
            $crate::storage_contract!(@membership_case $make, a_lease_held_by_a_departed_member_is_taken);
        }
    };
    (@membership_case $make:expr, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let fixture = $make.await;
            $crate::contract::membership::$case(
                fixture.membership(),
                fixture.leases(),
                fixture.time(),
            )
            .await;
        }
    };
    (@lease_case $make:expr, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let fixture = $make.await;
            $crate::contract::leases::$case(fixture.leases(), fixture.time()).await;
        }
    };
    (@cases $suite:ident, $make:expr, $getter:ident, [$($case:ident),* $(,)?]) => {
        mod $suite {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = $make.await;
                    $crate::contract::$suite::$case(fixture.$getter()).await;
                }
            )*
        }
    };
}
