//! AMQP 0-9-1 (RabbitMQ): each attempt is a persistent, mandatory publish on a channel in
//! confirm mode, with `message_id` set to the idempotency key; the broker's ack is success,
//! a nack or an unroutable return is a failed (retryable) attempt.

use std::sync::Arc;

use async_trait::async_trait;
use chime_domain::{BrokerUrl, ClaimedOccurrence, Clock, Target, Timer};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use super::brokers::Pool;
use super::{Attempt, DeliveryTarget, Signer, prepare};

/// A connection and its one confirm-mode channel (lapin channels take concurrent publishes).
#[derive(Clone)]
struct Publisher {
    channel: Channel,
    /// Kept so the connection lives as long as the channel is pooled.
    _connection: Arc<Connection>,
}

pub struct AmqpTarget {
    pool: Pool<Publisher>,
    signer: Option<Arc<Signer>>,
}

impl AmqpTarget {
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

async fn connect(url: &BrokerUrl) -> Result<Publisher, String> {
    let connection = Connection::connect(url.as_str(), ConnectionProperties::default())
        .await
        .map_err(|e| e.to_string())?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| e.to_string())?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(Publisher {
        channel,
        _connection: Arc::new(connection),
    })
}

#[async_trait]
impl DeliveryTarget for AmqpTarget {
    async fn deliver(
        &self,
        timer: &Timer,
        occurrence: ClaimedOccurrence,
        clock: &dyn Clock,
    ) -> Attempt {
        let cb = &timer.spec.callback;
        let Target::Amqp(target) = &cb.target else {
            return Attempt::failed(&occurrence, clock, "not an AMQP callback".into(), false);
        };
        if let Some(refused) = self.pool.refusal(&target.url, &occurrence, clock) {
            return refused;
        }
        let (body, list, fired_at) =
            match prepare(self.signer.as_ref(), timer, &occurrence, clock).await {
                Ok(prepared) => prepared,
                Err(attempt) => return *attempt,
            };
        let mut table = FieldTable::default();
        for (k, v) in list {
            table.insert(ShortString::from(k), AMQPValue::LongString(v.into()));
        }
        let properties = BasicProperties::default()
            .with_message_id(occurrence.key.to_string().into())
            .with_delivery_mode(2)
            .with_content_type("application/octet-stream".into())
            .with_headers(table);
        let failed = |error: String| Attempt::failed_at(&occurrence, fired_at, error, true);
        let publisher = match self.pool.get(&target.url, || connect(&target.url)).await {
            Ok(p) => p,
            Err(e) => {
                self.pool.reset(&target.url);
                return failed(e.to_string());
            }
        };
        let publish = async {
            publisher
                .channel
                .basic_publish(
                    target.exchange.as_str().into(),
                    target.routing_key.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    body.as_bytes(),
                    properties,
                )
                .await?
                .await
        };
        let route = format!("exchange {:?} key {}", target.exchange, target.routing_key);
        match tokio::time::timeout(cb.timeout.get(), publish).await {
            Ok(Ok(Confirmation::Ack(None))) => Attempt::succeeded(&occurrence, fired_at),
            Ok(Ok(Confirmation::Ack(Some(_returned)))) => failed(format!(
                "AMQP publish to {route} was unroutable (no queue bound)"
            )),
            Ok(Ok(Confirmation::Nack(_))) => {
                failed(format!("AMQP broker refused the publish to {route}"))
            }
            Ok(Ok(Confirmation::NotRequested)) => {
                // The channel lost confirm mode (a reconnect): make a new one.
                self.pool.reset(&target.url);
                failed("AMQP channel not in confirm mode".into())
            }
            Ok(Err(e)) => {
                self.pool.reset(&target.url);
                failed(format!("AMQP publish to {route} failed: {e}"))
            }
            Err(_) => {
                self.pool.reset(&target.url);
                failed(format!(
                    "AMQP publish to {route} not confirmed within {}",
                    chime_domain::format_duration(cb.timeout.get())
                ))
            }
        }
    }
}
