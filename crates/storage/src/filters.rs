//! What listings and redrives select: pages, filters, and how each binds its page tokens.

use chime_domain::{
    AppName, Bucket, OccurrenceStatus, PageSize, TaskKey, TimerId, TimerState, Timestamp,
};

/// Which page of a listing to return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    pub size: PageSize,
    /// The `next_page_token` of the previous page of the same query.
    pub token: Option<String>,
}

/// Which timers to list. Deleted timers are never listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerFilter {
    pub app: Option<AppName>,
    pub enabled: Option<bool>,
    pub bucket: Option<Bucket>,
    /// Only timers in this state at `now`.
    pub state: Option<(TimerState, Timestamp)>,
    /// Only timers whose name starts with this.
    pub name_prefix: Option<String>,
    /// Only timers carrying every one of these labels.
    pub labels: Vec<(String, String)>,
}

impl TimerFilter {
    /// Binds page tokens to this exact query (the state's instant aside: a next page is
    /// read at its own time).
    pub(crate) fn scope(&self) -> String {
        format!(
            "timers|{}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.app.as_ref().map(AppName::as_str).unwrap_or(""),
            self.enabled,
            self.bucket.map(Bucket::get),
            self.state.map(|(s, _)| s.as_str()),
            self.name_prefix,
            self.labels,
        )
    }

    /// The label selector as the JSON object the SQL statements read.
    pub(crate) fn labels_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}

/// Which runs of one timer to list, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFilter {
    pub timer_id: TimerId,
    pub status: Option<OccurrenceStatus>,
    /// Only occurrences due at or before this instant (the history, without what is
    /// materialized ahead); `None` for all.
    pub due_by: Option<Timestamp>,
}

impl RunFilter {
    /// The newest `run_at` to list, exclusive: the page token's cursor, else `due_by`.
    pub(crate) fn before(&self, cursor: Option<(i64, i64)>) -> i64 {
        cursor.map_or(
            self.due_by
                .map_or(i64::MAX, |t| t.as_millis().saturating_add(1)),
            |(run_at, _)| run_at,
        )
    }
}

impl RunFilter {
    pub(crate) fn scope(&self) -> String {
        format!(
            "runs|{}|{}",
            self.timer_id,
            self.status.map(OccurrenceStatus::as_str).unwrap_or("")
        )
    }
}

/// Which dead letters to list: occurrences whose attempts are exhausted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadFilter {
    pub app: Option<AppName>,
    pub timer_id: Option<TimerId>,
}

impl DeadFilter {
    pub(crate) fn scope(&self) -> String {
        format!(
            "dead|{}|{}",
            self.app.as_ref().map(AppName::as_str).unwrap_or(""),
            self.timer_id.map(|t| t.get()).unwrap_or(0)
        )
    }
}

/// What to redrive: one dead occurrence, or all of a timer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redrive {
    One(TaskKey),
    Timer(TimerId),
}

impl Redrive {
    /// The timer, and the run time when it is one occurrence: the SQL backends' parameters.
    pub(crate) fn parts(self) -> (i64, Option<i64>) {
        match self {
            Self::One(k) => (k.timer_id.get(), Some(k.run_at.as_millis())),
            Self::Timer(id) => (id.get(), None),
        }
    }
}
