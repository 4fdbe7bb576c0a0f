//! The one place where driver errors (sqlx, fred) become domain-level storage errors.

use std::sync::Arc;

use chime_domain::{TimerId, ValidationError};

/// Why a backend failed: the driver's error kept whole (its source chain too), shareable
/// between the callers of one group commit.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

impl Cause {
    pub fn new(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(err))
    }

    /// A failure Chime itself detected, with no driver error behind it.
    pub fn msg(message: impl Into<String>) -> Self {
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct Message(String);
        Self::new(Message(message.into()))
    }

    /// The driver error this wraps, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No live timer with that id (or one the caller may not see).
    #[error("timer {0} not found")]
    TimerNotFound(TimerId),
    /// The app already has a live timer of that name.
    #[error("a timer named {name:?} already exists in app {app:?}")]
    NameTaken { app: String, name: String },
    /// An idempotency key reused for a different request.
    #[error("idempotency key {key:?} was already used for a different request")]
    IdempotencyKeyReused { key: String },
    #[error("version conflict: expected version {expected}, the timer is at version {actual}")]
    VersionConflict { expected: i64, actual: i64 },
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The backend could not be reached or was busy; the same call may succeed later.
    #[error("storage unavailable: {0}")]
    Unavailable(#[source] Cause),
    /// Anything else: a bug, a corrupt row, a schema mismatch. Retrying will not help.
    #[error("storage failure: {0}")]
    Internal(#[source] Cause),
}

impl StoreError {
    /// No live timer `id`: what every store, and a caller hiding another app's timer, says.
    pub fn timer_not_found(id: TimerId) -> Self {
        Self::TimerNotFound(id)
    }

    /// A failure detected by Chime rather than reported by a driver.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::Internal(Cause::msg(message))
    }

    /// A dependency Chime itself found gone (a stopped writer task, a closed channel).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable(Cause::msg(message))
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        Self::internal(format!("corrupt stored value: {what}"))
    }
}

/// Unique-constraint violations are reported by the caller, which knows what was duplicated.
pub(crate) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        use sqlx::Error as E;
        match &err {
            E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed => {
                Self::Unavailable(Cause::new(err))
            }
            E::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                // SQLite's codes are numbers whose low byte is the primary code; PostgreSQL's and
                // MySQL's SQLSTATEs may be all digits too (22021 & 0xff == 5), so ask which
                // driver answered before reading the code as SQLite's.
                let sqlite = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
                // SQLSTATE: serialization failure, deadlock, admin shutdown, cannot connect
                // now, too many connections. SQLite: BUSY (5), LOCKED (6) and their extended codes.
                let transient = if sqlite {
                    code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
                } else {
                    matches!(
                        code.as_str(),
                        "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300"
                    )
                }
                    // A row routed to the default partition while the janitor attached the
                    // day it belongs to: the same write goes to that day when tried again.
                    || (code == "23514" && db.message().contains("partition constraint"));
                if transient {
                    Self::Unavailable(Cause::new(err))
                } else {
                    Self::Internal(Cause::new(err))
                }
            }
            _ => Self::Internal(Cause::new(err)),
        }
    }
}

impl From<fred::error::Error> for StoreError {
    fn from(err: fred::error::Error) -> Self {
        use fred::error::ErrorKind as K;
        match err.kind() {
            K::IO | K::Timeout | K::Canceled | K::Cluster | K::Backpressure | K::Routing => {
                Self::Unavailable(Cause::new(err))
            }
            _ => Self::Internal(Cause::new(err)),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        match err {
            sqlx::migrate::MigrateError::Execute(e) => e.into(),
            other => Self::Internal(Cause::new(other)),
        }
    }
}
