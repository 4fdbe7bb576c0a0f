//! The one place where driver errors (sqlx, fred) become domain-level storage errors.

use chime_domain::ValidationError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
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
    Unavailable(String),
    /// Anything else: a bug, a corrupt row, a schema mismatch. Retrying will not help.
    #[error("storage failure: {0}")]
    Internal(String),
}

impl StoreError {
    /// No live timer `id`: what every store, and a caller hiding another app's timer, says.
    pub fn timer_not_found(id: chime_domain::TimerId) -> Self {
        Self::NotFound(format!("timer {id}"))
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        Self::Internal(format!("corrupt stored value: {what}"))
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
                Self::Unavailable(err.to_string())
            }
            E::Database(db) => {
                let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                // PostgreSQL: serialization failure, deadlock, admin shutdown, cannot connect
                // now, too many connections. SQLite: BUSY (5), LOCKED (6) and their extended codes.
                let transient = matches!(
                    code.as_str(),
                    "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300"
                ) || code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6));
                if transient {
                    Self::Unavailable(err.to_string())
                } else {
                    Self::Internal(err.to_string())
                }
            }
            _ => Self::Internal(err.to_string()),
        }
    }
}

impl From<fred::error::Error> for StoreError {
    fn from(err: fred::error::Error) -> Self {
        use fred::error::ErrorKind as K;
        match err.kind() {
            K::IO | K::Timeout | K::Canceled | K::Cluster | K::Backpressure | K::Routing => {
                Self::Unavailable(err.to_string())
            }
            _ => Self::Internal(err.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        match err {
            sqlx::migrate::MigrateError::Execute(e) => e.into(),
            other => Self::Internal(format!("migration failed: {other}")),
        }
    }
}
