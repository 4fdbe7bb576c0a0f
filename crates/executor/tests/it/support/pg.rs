//! The executor tests' fixture: a real PostgreSQL, a loopback sink, timers calling it back,
//! and waits with a deadline. Each test binary uses part of it.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    AppName, CallbackInput, Clock, NewOccurrence, NewTimer, Occurrence, ScheduleInput, SystemClock,
    TaskKey, Timer, TimerName, TimerSpec,
};
use chime_executor::{CallbackSettings, Executor, ExecutorSettings, HttpTarget, Targets};
use chime_storage::testkit::{self, PgFixture};
use chime_storage::{OccurrenceStore, TimerStore};
use chime_test_support::sink::Sink;

pub struct Setup {
    pub db: PgFixture,
    pub sink: Sink,
}

pub async fn setup() -> Setup {
    Setup {
        db: testkit::pg().await,
        sink: Sink::start().await.unwrap(),
    }
}

/// An executor configured as `chime-executor` would be, with `max_in_flight` from config.
pub fn executor(s: &Setup, max_in_flight: usize) -> Arc<Executor> {
    executor_over(s, s.db.store(), max_in_flight)
}

/// [`executor`], keeping its occurrences in `occurrences` (a wrapper that counts, say).
pub fn executor_over(
    s: &Setup,
    occurrences: Arc<dyn OccurrenceStore>,
    max_in_flight: usize,
) -> Arc<Executor> {
    executor_with(s, occurrences, None, max_in_flight)
}

/// [`executor_over`] beside the hot index `index` (retries go there, and unwritten runs
/// are taken under its run leases). Written runs are claimed on their rows, with
/// `executor.leased_first_attempts` off, so these tests keep covering the claim path now
/// that the setting is on by default.
pub fn executor_with(
    s: &Setup,
    occurrences: Arc<dyn OccurrenceStore>,
    index: Option<Arc<dyn chime_storage::HotIndex>>,
    max_in_flight: usize,
) -> Arc<Executor> {
    executor_configured(s, occurrences, index, max_in_flight, false)
}

/// [`executor_with`], taking written runs' first attempts under run leases if `leasing`.
pub fn executor_configured(
    s: &Setup,
    occurrences: Arc<dyn OccurrenceStore>,
    index: Option<Arc<dyn chime_storage::HotIndex>>,
    max_in_flight: usize,
    leasing: bool,
) -> Arc<Executor> {
    let mut config = chime_runtime::Config::default();
    config.executor.max_in_flight = max_in_flight;
    config.executor.leased_first_attempts = leasing;
    executor_from(s.db.store(), occurrences, index, config)
}

/// An executor over `timers` and `occurrences` as `config` sets it up, the sink's loopback
/// allowed.
pub fn executor_from(
    timers: Arc<dyn TimerStore>,
    occurrences: Arc<dyn OccurrenceStore>,
    index: Option<Arc<dyn chime_storage::HotIndex>>,
    mut config: chime_runtime::Config,
) -> Arc<Executor> {
    config.callbacks.allow_networks = vec!["127.0.0.0/8".into()];
    Executor::start(
        timers,
        occurrences,
        index,
        Arc::new(SystemClock),
        Targets::new(HttpTarget::new(CallbackSettings::from_config(&config)).unwrap()),
        ExecutorSettings::from_config(&config),
    )
}

pub async fn timer(s: &Setup, name: &str, url: String, headers: &[(&str, &str)]) -> Timer {
    let every_hour = ScheduleInput {
        every: Some("1h".into()),
        ..Default::default()
    }
    .resolve(SystemClock.now(), None, None)
    .unwrap();
    timer_on(s, name, url, headers, every_hour).await
}

/// [`timer`] on `schedule`.
pub async fn timer_on(
    s: &Setup,
    name: &str,
    url: String,
    headers: &[(&str, &str)],
    schedule: chime_domain::Schedule,
) -> Timer {
    timer_with(s, name, url, headers, schedule, false).await
}

/// [`timer_on`], leaving its runs unwritten if `unwritten` and its schedule allows.
pub async fn timer_with(
    s: &Setup,
    name: &str,
    url: String,
    headers: &[(&str, &str)],
    schedule: chime_domain::Schedule,
    unwritten: bool,
) -> Timer {
    let spec = TimerSpec {
        app: AppName::parse("ops").unwrap(),
        name: TimerName::parse(name).unwrap(),
        schedule,
        callback: CallbackInput {
            url: Some(url),
            method: Some("PUT".into()),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: Some("{\"kind\":\"test\"}".into()),
            timeout: Some("2s".into()),
            ..Default::default()
        }
        .parse()
        .unwrap(),
        retry: Default::default(),
        misfire: Default::default(),
        delivery: Default::default(),
        labels: Default::default(),
        on_complete: Default::default(),
        catch_up_window: None,
        overlap: Default::default(),
        window: None,
        exclude_calendars: Vec::new(),
        then: Default::default(),
    };
    s.db.store
        .create_timer(
            NewTimer {
                spec,
                enabled: true,
                runs_unwritten: unwritten,
            },
            chime_domain::Horizon::DEFAULT,
        )
        .await
        .unwrap()
        .timer
}

/// An occurrence of `t` due now, at the timer's current version.
/// Occurrences of `t` at each of `keys`, in the database.
pub async fn insert(s: &Setup, t: &Timer, keys: &[TaskKey]) {
    let rows: Vec<NewOccurrence> = keys
        .iter()
        .map(|&key| NewOccurrence {
            key,
            timer_version: t.version,
            bucket: t.bucket,
            due: None,
        })
        .collect();
    s.db.store.insert_occurrences(&rows).await.unwrap();
}

pub async fn due_now(s: &Setup, t: &Timer, offset_ms: i64) -> TaskKey {
    let key = TaskKey::new(t.id, SystemClock.now().add_millis(offset_ms));
    s.db.store
        .insert_occurrences(&[NewOccurrence {
            key,
            timer_version: t.version,
            bucket: t.bucket,
            due: None,
        }])
        .await
        .unwrap();
    key
}

pub async fn wait_for<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `key`'s occurrence satisfies `cond`, and returns it.
pub async fn occurrence_when(
    s: &Setup,
    key: TaskKey,
    what: &str,
    cond: fn(&Occurrence) -> bool,
) -> Occurrence {
    let store = s.db.store.clone();
    wait_for(what, || {
        let store = store.clone();
        async move {
            store
                .get_occurrence(key)
                .await
                .unwrap()
                .is_some_and(|o| cond(&o))
        }
    })
    .await;
    store.get_occurrence(key).await.unwrap().unwrap()
}

pub async fn finished(s: &Setup, key: TaskKey) -> Occurrence {
    occurrence_when(s, key, "an outcome", |o| o.status.is_terminal()).await
}

/// `t` with another retry policy or delivery mode (a new version).
pub async fn with_policy(s: &Setup, t: Timer, max_attempts: u32, at_most_once: bool) -> Timer {
    let mut spec = t.spec.clone();
    spec.retry = chime_domain::RetryPolicyInput {
        max_attempts: Some(max_attempts),
        jitter: Some(false),
        ..Default::default()
    }
    .parse()
    .unwrap();
    if at_most_once {
        spec.delivery = chime_domain::DeliveryMode::AtMostOnce;
    }
    s.db.store
        .update_timer(t.id, None, spec, chime_domain::Horizon::DEFAULT)
        .await
        .unwrap()
        .timer
}
