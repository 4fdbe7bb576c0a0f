//! Failure notifications: after its outcomes are stored, the outcome loop hands the runs that
//! ended (succeeded, failed or dead) to the [`Notifier`], which tells the apps that asked
//! (`PUT /v1/apps/{app}/notifications`): `run.dead` when a run goes dead, `timer.failing`
//! when `failing_after` runs of a timer in a row did not succeed, `timer.recovered` at the
//! first success after that. The streaks are counted in the database, so it does not matter
//! which executor ran which run. Each event is POSTed signed like a callback, under the
//! callback network policy, with retries; what came of it is kept for the console.
//!
//! The hand-off is bounded and never waits: when it is full (a database too slow to count
//! streaks), events are dropped and counted, rather than holding the outcome loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{
    AppName, Clock, NotificationEvent, NotificationSettings, NotifyOn, SentNotification, TimerId,
    TimerName, Timestamp,
};
use chime_storage::Notifications;
use tokio::sync::{Semaphore, mpsc};

use crate::targets::HttpTarget;

/// Batches of ended runs waiting for the notifier.
const QUEUE: usize = 256;
/// How long an app's settings are used before they are read again.
const SETTINGS_TTL: Duration = Duration::from_secs(5);
/// Apps whose settings are remembered at most; the cache starts over when full.
const SETTINGS_CACHE_MAX: usize = 10_000;
/// Deliveries of events in flight at once.
const IN_FLIGHT: usize = 32;
/// Tries per event, and the pause before the second (doubling after).
pub const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// How long one POST may take.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the record of a sent notification is kept.
const KEEP_SENT: Duration = Duration::from_secs(7 * 86_400);

/// A run that ended, as the notifier needs it.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    pub app: AppName,
    pub timer_id: TimerId,
    pub name: TimerName,
    pub run_at: Timestamp,
    pub attempt: u32,
    pub succeeded: bool,
    pub dead: bool,
    pub error: Option<String>,
}

struct Cached {
    settings: Option<Arc<NotificationSettings>>,
    read_at: tokio::time::Instant,
}

pub struct Notifier {
    store: Arc<dyn Notifications>,
    http: HttpTarget,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<AppName, Cached>>,
    queue: mpsc::Sender<Vec<Ended>>,
    sending: Arc<Semaphore>,
}

impl Notifier {
    /// Starts the notifier on the current runtime. `http` posts the events: the executor's
    /// callback client, with its signer and network policy.
    pub fn start(
        store: Arc<dyn Notifications>,
        http: HttpTarget,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        // Every series from the start, so an alert's increase() sees the first one move (on
        // the service's recorder, installed here if serving has not yet).
        let _ = chime_runtime::prometheus();
        for on in NotifyOn::ALL {
            for result in ["delivered", "failed"] {
                metrics::counter!("chime_executor_notifications_total", "type" => on.event_type(), "result" => result)
                    .increment(0);
            }
        }
        metrics::counter!("chime_executor_notifications_total", "type" => "any", "result" => "dropped")
            .increment(0);
        let (queue, batches) = mpsc::channel(QUEUE);
        let notifier = Arc::new(Self {
            store,
            http,
            clock,
            cache: Mutex::new(HashMap::new()),
            queue,
            sending: Arc::new(Semaphore::new(IN_FLIGHT)),
        });
        tokio::spawn(notifier.clone().run(batches));
        notifier
    }

    /// Hands over runs that ended; never waits.
    pub(crate) fn observe(&self, ended: Vec<Ended>) {
        if ended.is_empty() {
            return;
        }
        let n = ended.len();
        if self.queue.try_send(ended).is_err() {
            metrics::counter!("chime_executor_notifications_total", "type" => "any", "result" => "dropped")
                .increment(n as u64);
            tracing::warn!(
                runs = n,
                "the notifier is behind; not telling of these runs"
            );
        }
    }

    async fn run(self: Arc<Self>, mut batches: mpsc::Receiver<Vec<Ended>>) {
        while let Some(batch) = batches.recv().await {
            self.handle(batch).await;
        }
    }

    async fn settings(
        &self,
        app: &AppName,
    ) -> Result<Option<Arc<NotificationSettings>>, chime_storage::StoreError> {
        let now = tokio::time::Instant::now();
        if let Some(c) = self.cache_lock().get(app)
            && now.duration_since(c.read_at) < SETTINGS_TTL
        {
            return Ok(c.settings.clone());
        }
        let settings = self.store.get_notifications(app).await?.map(Arc::new);
        let mut cache = self.cache_lock();
        if cache.len() >= SETTINGS_CACHE_MAX {
            cache.clear();
        }
        cache.insert(
            app.clone(),
            Cached {
                settings: settings.clone(),
                read_at: now,
            },
        );
        Ok(settings)
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, HashMap<AppName, Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The events `batch` gives rise to, each sent on its own task.
    async fn handle(&self, batch: Vec<Ended>) {
        let mut by_app: HashMap<AppName, Vec<Ended>> = HashMap::new();
        for e in batch {
            by_app.entry(e.app.clone()).or_default().push(e);
        }
        for (app, runs) in by_app {
            // One app's failure leaves the others' events alone.
            if let Err(e) = self.handle_app(&app, &runs).await {
                tracing::warn!(app = %app, error = %e, "cannot work out failure notifications; some are not sent");
            }
        }
    }

    async fn handle_app(
        &self,
        app: &AppName,
        runs: &[Ended],
    ) -> Result<(), chime_storage::StoreError> {
        let Some(settings) = self.settings(app).await? else {
            return Ok(());
        };
        // Dead runs first: they need no streak, so a database that cannot count them now
        // still lets them be told.
        if settings.wants(NotifyOn::Dead) {
            for r in runs.iter().filter(|r| r.dead) {
                self.send(settings.clone(), NotifyOn::Dead, r).await;
            }
        }
        let mut events = Vec::new();
        if settings.counts_streaks() {
            let failed: Vec<TimerId> = runs
                .iter()
                .filter(|r| !r.succeeded)
                .map(|r| r.timer_id)
                .collect();
            let succeeded: Vec<TimerId> = runs
                .iter()
                .filter(|r| r.succeeded)
                .map(|r| r.timer_id)
                .collect();
            let last_of = |id: TimerId, ok: bool| {
                runs.iter()
                    .rev()
                    .find(|r| r.timer_id == id && r.succeeded == ok)
            };
            for (id, streak) in self.store.count_failures(&failed).await? {
                // Exactly at the threshold: one event per streak, however long it runs.
                if streak == settings.failing_after
                    && settings.wants(NotifyOn::Failing)
                    && let Some(r) = last_of(id, false)
                {
                    events.push((NotifyOn::Failing, r));
                }
            }
            for (id, streak) in self.store.end_streaks(&succeeded).await? {
                if streak >= settings.failing_after
                    && settings.wants(NotifyOn::Recovered)
                    && let Some(r) = last_of(id, true)
                {
                    events.push((NotifyOn::Recovered, r));
                }
            }
        }
        for (on, r) in events {
            self.send(settings.clone(), on, r).await;
        }
        Ok(())
    }

    /// Sends `run`'s `on` event on a task of its own, once one of the [`IN_FLIGHT`] places is free.
    async fn send(&self, settings: Arc<NotificationSettings>, on: NotifyOn, run: &Ended) {
        let event = event(on, run);
        let Ok(place) = self.sending.clone().acquire_owned().await else {
            return;
        };
        let (store, http, clock) = (self.store.clone(), self.http.clone(), self.clock.clone());
        tokio::spawn(async move {
            let _place = place;
            let sent = deliver(&http, clock.as_ref(), &settings, event).await;
            let result = if sent.delivered {
                "delivered"
            } else {
                "failed"
            };
            metrics::counter!("chime_executor_notifications_total", "type" => on.event_type(), "result" => result)
                .increment(1);
            if !sent.delivered {
                tracing::warn!(app = %sent.event.app, kind = %sent.event.kind, error = ?sent.error, "failure notification not delivered");
            }
            let keep_since =
                Timestamp::from_millis(sent.at.as_millis() - KEEP_SENT.as_millis() as i64);
            if let Err(e) = store.record_notification(&sent, keep_since).await {
                tracing::warn!(error = %e, "cannot keep the record of a notification");
            }
        });
    }
}

fn event(on: NotifyOn, r: &Ended) -> NotificationEvent {
    NotificationEvent::new(
        on,
        r.app.clone(),
        r.timer_id,
        r.name.clone(),
        r.run_at,
        r.attempt,
        r.error.as_deref(),
    )
}

/// POSTs `event` to the app's URL, trying again after failures worth it.
async fn deliver(
    http: &HttpTarget,
    clock: &dyn Clock,
    settings: &NotificationSettings,
    event: NotificationEvent,
) -> SentNotification {
    let body = serde_json::to_vec(&event).unwrap_or_default();
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    let error = loop {
        attempts += 1;
        match http
            .post_signed(
                &event.app,
                event.id(),
                &settings.url,
                body.clone(),
                POST_TIMEOUT,
            )
            .await
        {
            Ok(()) => break None,
            Err(e) if e.retryable && attempts < ATTEMPTS => {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            Err(e) => break Some(e.error),
        }
    };
    SentNotification {
        delivered: error.is_none(),
        event,
        at: clock.now(),
        attempts,
        error,
    }
}
