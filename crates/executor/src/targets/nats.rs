//! NATS JetStream: each attempt is a publish to the timer's subject that waits for the
//! stream's acknowledgement, with `Nats-Msg-Id` set to the idempotency key so the server drops
//! a republish of the same occurrence within the stream's duplicate window.

use std::sync::Arc;

use async_trait::async_trait;
use chime_domain::{BrokerUrl, ClaimedOccurrence, Clock, Target, Timer};

use super::brokers::Pool;
use super::{Attempt, DeliveryTarget, Signer, prepare};

pub struct NatsTarget {
    pool: Pool<async_nats::jetstream::Context>,
    signer: Option<Arc<Signer>>,
}

impl NatsTarget {
    /// Publishes only to the servers in `allowed` (`CHIME_BROKERS`).
    pub fn new(allowed: Arc<Vec<BrokerUrl>>) -> Self {
        Self {
            pool: Pool::new(allowed),
            signer: None,
        }
    }

    pub fn with_signer(mut self, signer: Arc<Signer>) -> Self {
        self.signer = Some(signer);
        self
    }
}

async fn connect(url: &BrokerUrl) -> Result<async_nats::jetstream::Context, String> {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(super::brokers::CONNECT_TIMEOUT)
        .connect(url.as_str())
        .await
        .map_err(|e| e.to_string())?;
    Ok(async_nats::jetstream::new(client))
}

#[async_trait]
impl DeliveryTarget for NatsTarget {
    async fn deliver(
        &self,
        timer: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt {
        let cb = &timer.spec.callback;
        let Target::Nats(target) = &cb.target else {
            return Attempt::failed(&occurrence, clock, "not a NATS callback".into(), false);
        };
        if let Some(refused) = self.pool.refusal(&target.url, &occurrence, clock) {
            return refused;
        }
        let (body, list, fired_at) =
            match prepare(self.signer.as_ref(), timer, &occurrence, clock).await {
                Ok(prepared) => prepared,
                Err(attempt) => return *attempt,
            };
        let mut headers = async_nats::HeaderMap::new();
        for (k, v) in list {
            headers.insert(k.as_str(), v.as_str());
        }
        headers.insert("Nats-Msg-Id", occurrence.key.to_string().as_str());
        let failed = |error: String| Attempt::failed_at(&occurrence, fired_at, error, true);
        let js = match self.pool.get(&target.url, || connect(&target.url)).await {
            Ok(js) => js,
            Err(e) => {
                self.pool.reset(&target.url);
                return failed(e.to_string());
            }
        };
        let publish = async {
            js.publish_with_headers(target.subject.clone(), headers, body.to_owned().into())
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(cb.timeout.get(), publish).await {
            Ok(Ok(_ack)) => Attempt::succeeded(&occurrence, fired_at),
            Ok(Err(e)) => failed(format!("NATS publish to {} failed: {e}", target.subject)),
            Err(_) => failed(format!(
                "NATS publish to {} not acknowledged within {}",
                target.subject,
                chime_domain::format_duration(cb.timeout.get())
            )),
        }
    }
}
