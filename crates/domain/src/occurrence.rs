use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Bucket, OverlapPolicy, TaskKey, TimerId, Timestamp, UnwrittenRun, ValidationError};

/// Where an occurrence is in its life.
///
/// ```text
/// pending ──claim──▶ running ──▶ succeeded
///    │                 │  ├────▶ retrying ──claim──▶ running …
///    │                 │  ├────▶ failed   (not retryable)
///    │                 │  ├────▶ dead     (attempts exhausted) ──redrive──▶ pending
///    └──misfire──▶ skipped ◀──────┘ (timer disabled, deleted or changed)
/// ```
/// A `running` occurrence whose claim lease expired may be claimed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OccurrenceStatus {
    Pending,
    Running,
    Succeeded,
    Retrying,
    Failed,
    Dead,
    Skipped,
}

impl OccurrenceStatus {
    pub const ALL: [Self; 7] = [
        Self::Pending,
        Self::Running,
        Self::Succeeded,
        Self::Retrying,
        Self::Failed,
        Self::Dead,
        Self::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Dead => "dead",
            Self::Skipped => "skipped",
        }
    }

    /// No further transition happens on its own (a dead one may be redriven by hand).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Dead | Self::Skipped
        )
    }

    /// Waiting to be claimed by an executor.
    pub fn is_claimable(self) -> bool {
        matches!(self, Self::Pending | Self::Retrying)
    }

    /// Whether the state machine allows `self → to`.
    pub fn can_become(self, to: Self) -> bool {
        use OccurrenceStatus::*;
        matches!(
            (self, to),
            (Pending | Retrying, Running)
                | (Pending | Retrying, Skipped)
                | (Running, Running) // re-claim after the claim lease expired
                | (Running, Succeeded | Retrying | Failed | Dead | Skipped)
                | (Dead, Pending)
        )
    }

    /// Whether an outcome recorded after a claim may set this status.
    pub fn is_outcome(self) -> bool {
        Self::Running.can_become(self) && self != Self::Running
    }
}

impl fmt::Display for OccurrenceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OccurrenceStatus {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "status",
                    format!(
                        "{s:?} is not one of pending, running, succeeded, retrying, failed, dead, skipped"
                    ),
                )
            })
    }
}

/// One due instant of one timer, as the durable store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Occurrence {
    pub key: TaskKey,
    pub timer_version: i64,
    pub bucket: Bucket,
    pub status: OccurrenceStatus,
    /// Attempts started so far (0 until first claimed).
    pub attempt: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub lease_until: Option<Timestamp>,
    pub fired_at: Option<Timestamp>,
    /// `fired_at − run_at` of the latest attempt.
    pub lateness_ms: Option<i64>,
    pub http_status: Option<u16>,
    pub output: Option<String>,
    pub error: Option<String>,
    /// Added by a backfill, which claims it under this overlap policy (the timer's own
    /// applies to the others).
    pub backfill: Option<OverlapPolicy>,
    /// Started by a chain step after this run ended.
    pub parent: Option<TaskKey>,
    /// A broadcast run's shards (empty for other runs, and as the store lists runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Shard>,
}

/// What came of one shard of a broadcast run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardStatus {
    /// Not delivered yet, or its delivery is under way.
    Pending,
    Succeeded,
    Failed,
}

impl ShardStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Succeeded, Self::Failed]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One shard of a broadcast run: planned at its first attempt, one per worker of the group
/// connected then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub total: u32,
    pub status: ShardStatus,
    /// The run's attempt that last delivered it (0 before any).
    pub attempt: u32,
    /// The worker that last took it.
    pub worker: Option<String>,
    pub error: Option<String>,
}

impl Occurrence {
    /// When it should next be handed to an executor.
    pub fn due_at(&self) -> Timestamp {
        self.next_attempt_at.unwrap_or(self.key.run_at)
    }
}

/// An occurrence the migrator materializes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOccurrence {
    pub key: TaskKey,
    pub timer_version: i64,
    pub bucket: Bucket,
    /// When it is due if not at `run_at`: its place in the timer's flexible `window`.
    pub due: Option<Timestamp>,
}

impl NewOccurrence {
    /// When it comes to fire.
    pub fn due_at(&self) -> Timestamp {
        self.due.unwrap_or(self.key.run_at)
    }
}

/// A request to claim occurrences for one attempt each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The claimer's "now": a running occurrence whose lease ended before it may be re-claimed.
    pub now: Timestamp,
    /// The claim is the claimer's until then; past it, someone else may take it over.
    pub lease_until: Timestamp,
}

/// A run to mark `skipped` before any claim: one write instead of a claim and an outcome.
/// Only a row still waiting for its first attempt is marked, and only as [`EarlySkipKind`]
/// says; anything else (a retry, a row that changed meanwhile) is left to the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EarlySkip {
    pub key: TaskKey,
    /// The timer's version when the executor read it.
    pub timer_version: i64,
    pub kind: EarlySkipKind,
    pub reason: String,
    /// An unwritten run (no row yet): an overtaken one is written skipped, a stopped one is
    /// only dropped.
    pub unwritten: Option<UnwrittenRun>,
}

/// Why a run is skipped before its claim, and so which of its rows may be marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlySkipKind {
    /// Its timer's next run is due already: only a scheduled row (not a backfill) at
    /// `timer_version`, due at `due`, its natural due instant (the run time, or its place in
    /// a flexible window), so a redrive or a row of another version is left alone.
    Overtaken { due: Timestamp },
    /// Its timer is disabled, paused or deleted at `timer_version` (`i64::MAX` for a timer
    /// gone): a row of any version up to it. A row of a later version was written after the
    /// timer started again, and is left to fire.
    Stopped,
}

impl EarlySkipKind {
    /// The natural due instant an overtaken run must still have; `None` when stopped.
    pub fn due(self) -> Option<Timestamp> {
        match self {
            Self::Overtaken { due } => Some(due),
            Self::Stopped => None,
        }
    }
}

/// A timer just stopped (disabled, paused or deleted) whose runs still to come are taken
/// out at once, instead of one by one as each comes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoppedTimer {
    pub id: TimerId,
    /// Its version once stopped (`i64::MAX` when deleted): rows of a later version were
    /// written after it started again, and are left alone.
    pub version: i64,
}

/// An occurrence this claimer won.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimedOccurrence {
    pub key: TaskKey,
    pub timer_version: i64,
    pub bucket: Bucket,
    /// The attempt this claim is (1 for the first).
    pub attempt: u32,
    /// When this attempt is due: the run time, or a retry's next attempt. A claim may come
    /// a little before it (schedulers hand keys off ahead); the callback waits for it.
    pub due: Timestamp,
    /// Added by a backfill: its run time lies in the past on purpose, so lateness is
    /// measured from its due instant.
    pub backfill: bool,
    /// Started by a chain step after this run ended: told to the callee.
    pub parent: Option<TaskKey>,
    /// The timer's version when the claim was made; `None` when it is deleted. Every change
    /// to a timer bumps its version, so an executor holding the timer at this version needs
    /// not read it again.
    pub timer_now: Option<i64>,
    /// An unwritten run taken under a run lease (no row was there): its row is inserted when
    /// it ends.
    pub unwritten: Option<UnwrittenRun>,
    /// A first attempt taken under its run lease with its row left `pending`: the claim
    /// wrote nothing, and the outcome moves the row on from `pending`.
    pub leased: bool,
}

/// The result of one attempt. Recorded only if the occurrence is still `running` at that
/// attempt, so a late writer whose lease was taken over cannot overwrite the new claimer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub key: TaskKey,
    pub attempt: u32,
    pub status: OccurrenceStatus,
    pub fired_at: Option<Timestamp>,
    pub http_status: Option<u16>,
    pub output: Option<String>,
    pub error: Option<String>,
    /// For `retrying`: when to try again.
    pub next_attempt_at: Option<Timestamp>,
    /// An unwritten run: its row is inserted with this outcome rather than updated.
    pub unwritten: Option<UnwrittenRun>,
    /// A first attempt taken under its run lease ([`ClaimedOccurrence::leased`]): recorded
    /// only if its row is still `pending` at the attempt before this one.
    pub leased: bool,
}

impl Outcome {
    /// An attempt that ended without a receiver's answer to record: `status` with only
    /// when it fired (if it did) and why.
    pub fn ended(
        key: TaskKey,
        attempt: u32,
        status: OccurrenceStatus,
        fired_at: Option<Timestamp>,
        error: Option<String>,
    ) -> Self {
        Self {
            key,
            attempt,
            status,
            fired_at,
            http_status: None,
            output: None,
            error,
            next_attempt_at: None,
            unwritten: None,
            leased: false,
        }
    }

    pub fn lateness_ms(&self) -> Option<i64> {
        self.fired_at
            .map(|f| f.as_millis() - self.key.run_at.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OccurrenceStatus::*;

    #[test]
    fn status_machine_allows_only_documented_moves() {
        assert!(Pending.can_become(Running));
        assert!(Retrying.can_become(Running));
        assert!(Running.can_become(Succeeded));
        assert!(Dead.can_become(Pending));
        assert!(!Succeeded.can_become(Running));
        assert!(!Failed.can_become(Retrying));
        assert!(!Pending.can_become(Succeeded));
        assert!(!Skipped.can_become(Pending));
        let outcomes: Vec<_> = OccurrenceStatus::ALL
            .into_iter()
            .filter(|s| s.is_outcome())
            .collect();
        assert_eq!(outcomes, vec![Succeeded, Retrying, Failed, Dead, Skipped]);
        for s in OccurrenceStatus::ALL {
            assert_eq!(s.as_str().parse::<OccurrenceStatus>(), Ok(s));
            if s.is_terminal() {
                assert!(!s.is_claimable());
            }
        }
        assert!("done".parse::<OccurrenceStatus>().is_err());
    }
}
