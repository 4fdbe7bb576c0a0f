//! The one place where driver errors (sqlx, fred) become domain-level storage errors.

use std::sync::Arc;

use chime_domain::{TimerId, ValidationError};

use crate::StoreResult;

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

    /// Transient, and surely nothing committed: the database refused the statement (a
    /// deadlock, a serialization failure, a partition attached under it, no connection slot
    /// free) or no pooled connection was to be had. Unlike a connection lost mid-commit, the
    /// same transaction can run again without writing anything twice.
    pub fn rolled_back(&self) -> bool {
        let Self::Unavailable(cause) = self else {
            return false;
        };
        matches!(
            cause.downcast_ref::<sqlx::Error>(),
            Some(sqlx::Error::Database(_) | sqlx::Error::PoolTimedOut)
        )
    }

    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        Self::internal(format!("corrupt stored value: {what}"))
    }
}

/// How often a transaction that [rolled back](StoreError::rolled_back) runs again, and the
/// first pause between tries (doubling after each).
const TRIES: u32 = 4;
const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Runs `tx` (a whole transaction) until it succeeds, fails for good, or has rolled back
/// [`TRIES`] times: the races it meets (a day partition attached under it, a deadlock with a
/// concurrent write, a burst of connections) are over within milliseconds, so the caller
/// should not see them as "unavailable".
pub(crate) async fn retry_rolled_back<T, F>(mut tx: impl FnMut() -> F) -> StoreResult<T>
where
    F: std::future::Future<Output = StoreResult<T>>,
{
    let mut pause = FIRST_PAUSE;
    for _ in 1..TRIES {
        match tx().await {
            Err(e) if e.rolled_back() => {
                tracing::debug!(error = %e, "transaction rolled back; trying it again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            done => return done,
        }
    }
    tx().await
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A statement the server refused with SQLSTATE `code`.
    #[derive(Debug, thiserror::Error)]
    #[error("refused with {0}")]
    struct Refused(&'static str);

    impl sqlx::error::DatabaseError for Refused {
        fn message(&self) -> &str {
            "refused"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn refused(code: &'static str) -> StoreError {
        sqlx::Error::Database(Box::new(Refused(code))).into()
    }

    fn io() -> StoreError {
        sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()).into()
    }

    #[test]
    fn only_what_surely_did_not_commit_counts_as_rolled_back() {
        // Deadlock, partition attached under the statement, too many connections.
        assert!(refused("40P01").rolled_back());
        assert!(refused("53300").rolled_back());
        assert!(StoreError::from(sqlx::Error::PoolTimedOut).rolled_back());
        // A connection lost mid-commit may have committed; a constraint fails every time.
        assert!(io().is_retryable() && !io().rolled_back());
        assert!(!refused("23505").rolled_back());
        assert!(!StoreError::unavailable("writer gone").rolled_back());
    }

    #[tokio::test(start_paused = true)]
    async fn a_rolled_back_transaction_runs_again_until_it_commits() {
        let mut runs = 0;
        let out = retry_rolled_back(|| {
            runs += 1;
            let out = if runs < 3 {
                Err(refused("40001"))
            } else {
                Ok(runs)
            };
            async move { out }
        })
        .await;
        assert_eq!(out.unwrap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn it_gives_up_after_its_tries_and_never_repeats_an_unknown_outcome() {
        let mut runs = 0;
        let out: StoreResult<()> = retry_rolled_back(|| {
            runs += 1;
            async { Err(refused("40P01")) }
        })
        .await;
        assert!(out.unwrap_err().rolled_back());
        assert_eq!(runs, TRIES);
        let mut runs = 0;
        let out: StoreResult<()> = retry_rolled_back(|| {
            runs += 1;
            async { Err(io()) }
        })
        .await;
        assert!(out.is_err());
        assert_eq!(runs, 1);
    }
}
