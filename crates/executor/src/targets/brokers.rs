//! What the NATS and AMQP targets share: the allow-list (`CHIME_BROKERS`, checked again here
//! although the gateway refuses other brokers at create, since a timer may predate a change
//! of the list) and one connection per broker URL, made on first use and dropped after a
//! failure so the next attempt reconnects.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chime_domain::{BrokerUrl, ClaimedOccurrence, Clock};
use tokio::sync::OnceCell;

use super::Attempt;

/// How long making a connection may take before the attempt fails (and is retried).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why no connection to a broker could be had; the attempt fails with it and is retried.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {url}: no connection within {CONNECT_TIMEOUT:?}")]
    TimedOut { url: String },
    #[error("cannot connect to {url}: {reason}")]
    Refused { url: String, reason: String },
}

/// Connections of type `C`, one per broker URL.
pub struct Pool<C> {
    allowed: Arc<Vec<BrokerUrl>>,
    conns: Mutex<HashMap<String, Arc<OnceCell<C>>>>,
}

impl<C: Clone> Pool<C> {
    pub fn new(allowed: Arc<Vec<BrokerUrl>>) -> Self {
        Self {
            allowed,
            conns: Mutex::new(HashMap::new()),
        }
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OnceCell<C>>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The attempt refusing `url` when timers may not publish there (not retried).
    pub fn refusal(
        &self,
        url: &BrokerUrl,
        occurrence: &ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Option<Attempt> {
        if self.allowed.contains(url) {
            return None;
        }
        let error = format!("{} is not in CHIME_BROKERS", url.redacted());
        Some(Attempt::failed(occurrence, clock, error, false))
    }

    /// The connection to `url`, made by `connect` if there is none (one at a time per URL).
    /// `connect`'s error is the client library's, as text.
    pub async fn get<F, Fut>(&self, url: &BrokerUrl, connect: F) -> Result<C, ConnectError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, String>>,
    {
        let cell = self
            .conns()
            .entry(url.as_str().to_owned())
            .or_default()
            .clone();
        let url = || url.redacted();
        let made = cell
            .get_or_try_init(|| async {
                match tokio::time::timeout(CONNECT_TIMEOUT, connect()).await {
                    Ok(made) => made.map_err(|reason| ConnectError::Refused { url: url(), reason }),
                    Err(_) => Err(ConnectError::TimedOut { url: url() }),
                }
            })
            .await;
        made.cloned()
    }

    /// Forgets the connection to `url` after a failure: the next attempt makes a new one.
    pub fn reset(&self, url: &BrokerUrl) {
        self.conns().remove(url.as_str());
    }
}
