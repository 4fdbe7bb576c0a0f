//! Failure notifications: where an app wants to hear that its runs fail
//! (`PUT /v1/apps/{app}/notifications`), and the events the executors send there. The events
//! are about runs and timers, not attempts: a run that is retried and then succeeds says
//! nothing.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{AppName, CallbackUrl, OccurrenceStatus, TimerId, TimerName, Timestamp};
use crate::{ValidationError, plain_text};

/// `failing_after` when a put leaves it out.
pub const DEFAULT_FAILING_AFTER: u32 = 3;
/// The most runs in a row `failing_after` may wait for.
pub const MAX_FAILING_AFTER: u32 = 1000;
/// Longest `error` an event carries, in characters (the run keeps the whole of it).
pub const MAX_EVENT_ERROR_CHARS: usize = 1000;

/// What an app is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyOn {
    /// A run went dead: its attempts are spent, or its error was not worth retrying.
    Dead,
    /// `failing_after` runs of a timer in a row did not succeed.
    Failing,
    /// A timer that was failing had a run succeed.
    Recovered,
}

impl NotifyOn {
    pub const ALL: [Self; 3] = [Self::Dead, Self::Failing, Self::Recovered];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dead => "dead",
            Self::Failing => "failing",
            Self::Recovered => "recovered",
        }
    }

    /// The event's `type` on the wire.
    pub fn event_type(self) -> &'static str {
        match self {
            Self::Dead => "run.dead",
            Self::Failing => "timer.failing",
            Self::Recovered => "timer.recovered",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ValidationError> {
        Self::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "on",
                    format!("{s:?} is not one of dead, failing, recovered"),
                )
            })
    }
}

impl fmt::Display for NotifyOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An app's notification settings, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationSettings {
    pub app: AppName,
    /// Where the events are POSTed; the callback network policy applies to it.
    pub url: CallbackUrl,
    /// Sorted, without repeats; empty: nothing is sent.
    pub on: Vec<NotifyOn>,
    pub failing_after: u32,
    pub updated_at: Timestamp,
}

impl NotificationSettings {
    /// Settings from their written parts: `on` absent means every event.
    pub fn parse(
        app: AppName,
        url: &str,
        on: Option<&[String]>,
        failing_after: Option<u32>,
        now: Timestamp,
    ) -> Result<Self, ValidationError> {
        let url = CallbackUrl::parse(url)?;
        let mut on = match on {
            None => NotifyOn::ALL.to_vec(),
            Some(list) => list
                .iter()
                .map(|s| NotifyOn::parse(s.trim()))
                .collect::<Result<Vec<_>, _>>()?,
        };
        on.sort();
        on.dedup();
        let failing_after = failing_after.unwrap_or(DEFAULT_FAILING_AFTER);
        if !(1..=MAX_FAILING_AFTER).contains(&failing_after) {
            return Err(ValidationError::new(
                "failing_after",
                format!("must be 1 to {MAX_FAILING_AFTER}"),
            ));
        }
        Ok(Self {
            app,
            url,
            on,
            failing_after,
            updated_at: now,
        })
    }

    pub fn wants(&self, event: NotifyOn) -> bool {
        self.on.contains(&event)
    }

    /// Whether runs' streaks of failures must be counted for these settings.
    pub fn counts_streaks(&self) -> bool {
        self.wants(NotifyOn::Failing) || self.wants(NotifyOn::Recovered)
    }
}

/// How a run ended, as far as notifications care; `None` for a run still going or skipped.
pub fn run_ending(status: OccurrenceStatus) -> Option<bool> {
    match status {
        OccurrenceStatus::Succeeded => Some(true),
        OccurrenceStatus::Dead | OccurrenceStatus::Failed => Some(false),
        _ => None,
    }
}

/// One notification, as POSTed (JSON) and as kept for the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub app: AppName,
    pub timer_id: TimerId,
    pub timer_name: TimerName,
    /// The run's scheduled instant, written RFC 3339.
    #[serde(with = "rfc3339")]
    pub run_at: Timestamp,
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl NotificationEvent {
    pub fn new(
        on: NotifyOn,
        app: AppName,
        timer_id: TimerId,
        timer_name: TimerName,
        run_at: Timestamp,
        attempt: u32,
        error: Option<&str>,
    ) -> Self {
        let error = error.map(|e| {
            let e: String = e.chars().take(MAX_EVENT_ERROR_CHARS).collect();
            // Control characters would only make the receiver's logs harder to read.
            if plain_text("error", &e, MAX_EVENT_ERROR_CHARS).is_ok() {
                e
            } else {
                e.chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect()
            }
        });
        Self {
            kind: on.event_type().to_owned(),
            app,
            timer_id,
            timer_name,
            run_at,
            attempt,
            error,
        }
    }

    /// Its `webhook-id`: the same for every delivery of the same event, so a receiver can
    /// drop a repeat.
    pub fn id(&self) -> String {
        format!(
            "{}:{}:{}",
            self.kind,
            self.timer_id,
            self.run_at.as_millis()
        )
    }
}

/// An instant written RFC 3339 in JSON, as receivers read it.
mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::Timestamp;

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }
}

/// A notification as the executor left it: delivered, or given up on after its attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentNotification {
    pub event: NotificationEvent,
    /// When the last attempt ended.
    pub at: Timestamp,
    pub delivered: bool,
    pub attempts: u32,
    /// The last attempt's failure, when not delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> AppName {
        AppName::parse("billing").unwrap()
    }

    #[test]
    fn settings_parse_with_defaults_and_refuse_what_is_wrong() {
        let now = Timestamp::from_millis(1);
        let s = NotificationSettings::parse(app(), "https://ops.example/hook", None, None, now)
            .unwrap();
        assert_eq!(s.on, NotifyOn::ALL.to_vec());
        assert_eq!(s.failing_after, DEFAULT_FAILING_AFTER);
        assert!(s.counts_streaks());
        let on = vec!["recovered".into(), "dead".into(), "dead".into()];
        let s = NotificationSettings::parse(app(), "http://x/", Some(&on), Some(1), now).unwrap();
        assert_eq!(s.on, vec![NotifyOn::Dead, NotifyOn::Recovered]);
        let dead_only =
            NotificationSettings::parse(app(), "http://x/", Some(&on[1..]), None, now).unwrap();
        assert!(!dead_only.counts_streaks());

        let err = |url: &str, on: Option<&[String]>, after: Option<u32>| {
            NotificationSettings::parse(app(), url, on, after, now)
                .unwrap_err()
                .field
        };
        assert_eq!(err("ftp://x/", None, None), "url");
        assert_eq!(err("http://x/", Some(&["late".into()]), None), "on");
        assert_eq!(err("http://x/", None, Some(0)), "failing_after");
        assert_eq!(err("http://x/", None, Some(1001)), "failing_after");
    }

    #[test]
    fn events_carry_a_stable_id_and_a_bounded_error() {
        let at = Timestamp::parse_rfc3339("2026-11-28T02:00:00Z").unwrap();
        let e = NotificationEvent::new(
            NotifyOn::Dead,
            app(),
            TimerId::new(7).unwrap(),
            TimerName::parse("nightly").unwrap(),
            at,
            3,
            Some(&format!("line\n{}", "x".repeat(2000))),
        );
        assert_eq!(e.id(), format!("run.dead:7:{}", at.as_millis()));
        let error = e.error.as_deref().unwrap();
        assert_eq!(error.chars().count(), MAX_EVENT_ERROR_CHARS);
        assert!(!error.contains('\n'));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["type"], "run.dead");
        assert_eq!(json["timer_name"], "nightly");
        assert_eq!(json["run_at"], "2026-11-28T02:00:00.000Z");
        assert_eq!(run_ending(OccurrenceStatus::Failed), Some(false));
        assert_eq!(run_ending(OccurrenceStatus::Retrying), None);
    }
}
