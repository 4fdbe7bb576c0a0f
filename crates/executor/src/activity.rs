//! Per app and minute tallies of this executor's attempts (the console's overview), kept in
//! memory and written every few seconds. Each process writes under its own name and rewrites
//! the open minutes whole, so a write that is retried or repeated never counts twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{AppName, Clock, Counts, OccurrenceStatus, Tally, Timestamp, minute_of};
use chime_storage::Activity;

/// How often the open minutes are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Minutes kept unwritten while the database is away, at most; older ones are dropped (the
/// overview is a view, not the record: the occurrences are).
const KEEP_MINUTES: i64 = 10;

struct Entry {
    counts: Counts,
    /// Changed since it was last written.
    dirty: bool,
}

pub struct ActivityLog {
    store: Arc<dyn Activity>,
    clock: Arc<dyn Clock>,
    writer: String,
    /// By minute, then app: an attempt of a known app is counted without allocating.
    open: Mutex<HashMap<Timestamp, HashMap<AppName, Entry>>>,
}

impl ActivityLog {
    pub fn new(store: Arc<dyn Activity>, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            store,
            clock,
            writer: writer_name(),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Counts a batch of attempts' results `(app, status, lateness)` in the minute they were
    /// recorded: one lock and one clock read per batch.
    pub fn add<'a>(
        &self,
        attempts: impl IntoIterator<Item = (&'a AppName, OccurrenceStatus, Option<i64>)>,
    ) {
        let minute = minute_of(self.clock.now());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let apps = open.entry(minute).or_default();
        for (app, status, lateness_ms) in attempts {
            let entry = match apps.get_mut(app) {
                Some(entry) => entry,
                None => apps.entry(app.clone()).or_insert(Entry {
                    counts: Counts::default(),
                    dirty: false,
                }),
            };
            let before = entry.counts.fired;
            entry.counts.add(status, lateness_ms);
            entry.dirty |= entry.counts.fired != before;
        }
    }

    /// Writes what changed; then forgets minutes that are over and written, and minutes too
    /// old to keep waiting for the database.
    pub async fn flush(&self) {
        let changed: Vec<Tally> = {
            let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.iter()
                .flat_map(|(minute, apps)| apps.iter().map(move |(app, e)| (minute, app, e)))
                .filter(|(_, _, e)| e.dirty)
                .map(|(minute, app, e)| Tally {
                    app: app.clone(),
                    minute: *minute,
                    counts: e.counts.clone(),
                })
                .collect()
        };
        let written = changed.is_empty()
            || match self.store.write_activity(&self.writer, &changed).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write activity tallies; will retry");
                    false
                }
            };
        let current = minute_of(self.clock.now());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if written {
            for t in &changed {
                // Unless more came in meanwhile: then it goes with the next write.
                if let Some(e) = open
                    .get_mut(&t.minute)
                    .and_then(|apps| apps.get_mut(&t.app))
                    && e.counts == t.counts
                {
                    e.dirty = false;
                }
            }
        }
        open.retain(|minute, apps| {
            let age = (current.as_millis() - minute.as_millis()) / 60_000;
            apps.retain(|_, e| *minute >= current || e.dirty);
            !apps.is_empty() && age < KEEP_MINUTES
        });
    }

    /// Writes every [`FLUSH_EVERY`] until `shutdown`, then once more.
    pub async fn run(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.clock.sleep(FLUSH_EVERY) => {}
            }
            self.flush().await;
        }
        self.flush().await;
    }
}

/// This process's name among the writers: the pod (host) name and a random part, so a
/// restarted process never rewrites its predecessor's rows.
fn writer_name() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "executor".into());
    format!("{host}-{:08x}", rand::random::<u32>())
}
