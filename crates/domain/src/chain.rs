//! Chains: timers of the same app started when a run of another ends. A timer's `then`
//! names them; each named timer gets one occurrence due at once, carrying its parent run.

use serde::{Deserialize, Serialize};

use crate::{AppName, OccurrenceStatus, TaskKey, TimerName, Timestamp, ValidationError, limits};

/// The timers started when a run ends: `on_success` after it succeeded, `on_failure` after
/// it ended dead or failed (a run that is retried has not ended).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Then {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub on_success: Vec<TimerName>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub on_failure: Vec<TimerName>,
}

impl Then {
    /// Parses the two lists: each name valid, at most [`limits::MAX_CHAIN_STEPS`] per list,
    /// none twice in one list.
    pub fn parse(
        on_success: Vec<String>,
        on_failure: Vec<String>,
    ) -> Result<Self, ValidationError> {
        Ok(Self {
            on_success: names("then.on_success", on_success)?,
            on_failure: names("then.on_failure", on_failure)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.on_success.is_empty() && self.on_failure.is_empty()
    }

    /// The timers a run ending `status` starts (none while it may still be retried).
    pub fn after(&self, status: OccurrenceStatus) -> (&[TimerName], Option<ChainOn>) {
        match crate::run_ending(status) {
            Some(true) => (&self.on_success, Some(ChainOn::Success)),
            Some(false) => (&self.on_failure, Some(ChainOn::Failure)),
            None => (&[], None),
        }
    }

    /// Every name either list holds, each once.
    pub fn all(&self) -> Vec<&TimerName> {
        let mut all: Vec<&TimerName> = self.on_success.iter().chain(&self.on_failure).collect();
        all.sort();
        all.dedup();
        all
    }
}

fn names(field: &str, raw: Vec<String>) -> Result<Vec<TimerName>, ValidationError> {
    if raw.len() > limits::MAX_CHAIN_STEPS {
        return Err(ValidationError::new(
            field,
            format!("at most {} timers", limits::MAX_CHAIN_STEPS),
        ));
    }
    let mut out: Vec<TimerName> = Vec::with_capacity(raw.len());
    for name in raw {
        let name = TimerName::parse(name).map_err(|e| ValidationError::new(field, e.message))?;
        if out.contains(&name) {
            return Err(ValidationError::new(
                field,
                format!("{:?} is named twice", name.as_str()),
            ));
        }
        out.push(name);
    }
    Ok(out)
}

/// Which list of `then` a step comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainOn {
    Success,
    Failure,
}

impl ChainOn {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "on_success",
            Self::Failure => "on_failure",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Success, Self::Failure]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One step to start: after run `parent` of a timer of `app` ended, timer `step` of the
/// same app gets an occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStep {
    pub parent: TaskKey,
    pub app: AppName,
    pub on: ChainOn,
    pub step: TimerName,
}

/// What came of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// The named timer got its occurrence.
    Started,
    /// There was no live, enabled timer of that name when the run ended.
    Skipped,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Started, Self::Skipped]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// A step as recorded, once per parent run and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    pub parent: TaskKey,
    pub on: ChainOn,
    pub step: TimerName,
    pub status: StepStatus,
    /// The occurrence it started, when it did.
    pub run: Option<TaskKey>,
    /// Why it was skipped.
    pub reason: Option<String>,
    pub at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn then_parses_names_and_picks_the_list_an_ending_starts() {
        let then = Then::parse(vec!["b".into(), "c".into()], vec!["alert".into()]).unwrap();
        assert_eq!(then.after(OccurrenceStatus::Succeeded).0.len(), 2);
        assert_eq!(then.after(OccurrenceStatus::Dead).1, Some(ChainOn::Failure));
        assert_eq!(then.after(OccurrenceStatus::Failed).0[0].as_str(), "alert");
        assert!(then.after(OccurrenceStatus::Retrying).0.is_empty());
        assert!(then.after(OccurrenceStatus::Skipped).1.is_none());
        assert_eq!(then.all().len(), 3);
        let twice = Then::parse(vec!["b".into(), "b".into()], vec![]).unwrap_err();
        assert_eq!(twice.field, "then.on_success");
        let many = (0..=limits::MAX_CHAIN_STEPS)
            .map(|i| format!("t{i}"))
            .collect();
        assert_eq!(
            Then::parse(vec![], many).unwrap_err().field,
            "then.on_failure"
        );
        assert!(Then::parse(vec![" x".into()], vec![]).is_err());
        assert!(Then::default().is_empty());
    }
}
