//! What every write checks before it reaches the store: a create request turned into what the
//! store writes (spec, idempotency key and its fingerprint), and a callback the deployment's
//! network policy and broker list allow.

use chime_domain::{AppName, NewTimer, Target, TimerSpec, Timestamp, plain_text};
use chime_storage::{CreateTimer, IdempotencyKey};

use crate::api::{CreateRequest, TimerInput};
use crate::context::RequestContext;
use crate::error::{ApiError, ApiResult};
use crate::service::TimerService;
use crate::spec::parse_spec;

/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 256;

impl TimerService {
    /// A callback whose address is an IP the policy blocks, or a broker not allowed: 400
    /// naming the rule.
    pub(crate) fn check_callback(&self, spec: &TimerSpec) -> ApiResult<()> {
        match &spec.callback.target {
            Target::Http(url) => self
                .networks
                .check_url(url.as_url())
                .map_err(|blocked| ApiError::invalid("callback.url", blocked.to_string())),
            Target::Worker(_) => Ok(()),
            target @ (Target::Nats(_) | Target::Amqp(_)) => {
                let field = format!("callback.{}.url", target.kind().as_str());
                match target.broker() {
                    Some(url) if self.brokers.contains(url) => Ok(()),
                    Some(url) => Err(ApiError::invalid(
                        field,
                        format!(
                            "{} is not a broker this deployment allows (CHIME_BROKERS lists them)",
                            url.redacted()
                        ),
                    )),
                    None => Ok(()),
                }
            }
        }
    }

    pub(crate) async fn prepare(
        &self,
        ctx: &RequestContext,
        req: &CreateRequest,
        now: Timestamp,
    ) -> ApiResult<CreateTimer> {
        let excluding = match &req.timer.exclude_calendars {
            Some(names) if !names.is_empty() => {
                let app = AppName::parse(req.timer.app.clone())?;
                ctx.scope.check(&app)?;
                self.excluding(&app, Some(names), &[]).await?
            }
            _ => Default::default(),
        };
        let spec = parse_spec(&req.timer, now, excluding)?;
        ctx.scope.check(&spec.app)?;
        self.check_callback(&spec)?;
        self.check_chain(&spec, None).await?;
        if let Some(key) = &req.idempotency_key {
            plain_text("idempotency_key", key, MAX_IDEMPOTENCY_KEY)?;
        }
        let idempotency = match &req.idempotency_key {
            None => None,
            Some(key) if key.is_empty() => {
                return Err(ApiError::invalid("idempotency_key", "must not be empty"));
            }
            Some(key) => Some(IdempotencyKey {
                key: key.clone(),
                fingerprint: fingerprint(&req.timer),
            }),
        };
        Ok(CreateTimer {
            timer: NewTimer {
                spec,
                enabled: req.timer.enabled.unwrap_or(true),
                runs_unwritten: self.runs_unwritten,
            },
            idempotency,
        })
    }
}

/// Identifies a create request's content, stable across releases (stored with the key).
fn fingerprint(input: &TimerInput) -> String {
    let canonical = serde_json::to_vec(input).unwrap_or_default();
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&canonical))
}
