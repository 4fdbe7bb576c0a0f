//! The activity overview: per-minute attempts, failures, dead letters and lateness.

use axum::Json;
use axum::extract::State;
use chime_domain::Counts;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::activity::{ActivityQuery, ActivityReport};
use crate::error::ApiError;

use super::*;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ActivityParams {
    /// Only this app's activity; an app token sees its own app's.
    pub app: Option<String>,
    /// Minutes back from now, the current one included: 1 to 1440; default 60.
    pub minutes: Option<u32>,
}

/// Attempts of a span of time and what became of them.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ActivityCounts {
    /// Callbacks attempted.
    pub fired: u64,
    pub succeeded: u64,
    /// Attempts that did not succeed (to be retried, failed, or dead).
    pub failed: u64,
    /// Attempts that made their run a dead letter.
    pub dead: u64,
    /// Median lateness, ms: the upper bound of the histogram bucket holding it.
    pub lateness_p50_ms: Option<i64>,
    /// 99th percentile lateness, ms, the same way.
    pub lateness_p99_ms: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ActivityMinute {
    /// The minute's first instant (RFC 3339).
    pub at: String,
    #[serde(flatten)]
    pub counts: ActivityCounts,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ActivityBody {
    /// The app shown; absent: every app the caller may see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// The first minute's start.
    pub from: String,
    /// When the report was made; the last minute is partial.
    pub now: String,
    /// One entry per minute, oldest first, minutes without attempts included.
    pub minutes: Vec<ActivityMinute>,
    pub total: ActivityCounts,
}

impl From<&Counts> for ActivityCounts {
    fn from(c: &Counts) -> Self {
        Self {
            fired: c.fired,
            succeeded: c.succeeded,
            failed: c.failed,
            dead: c.dead,
            lateness_p50_ms: c.lateness_quantile_ms(0.5),
            lateness_p99_ms: c.lateness_quantile_ms(0.99),
        }
    }
}

impl From<ActivityReport> for ActivityBody {
    fn from(r: ActivityReport) -> Self {
        Self {
            app: r.app,
            from: r.from.to_rfc3339(),
            now: r.now.to_rfc3339(),
            minutes: r
                .minutes
                .iter()
                .map(|(at, c)| ActivityMinute {
                    at: at.to_rfc3339(),
                    counts: c.into(),
                })
                .collect(),
            total: (&r.total).into(),
        }
    }
}

/// Attempts, failures, dead letters and lateness per minute, summed over the executors.
#[utoipa::path(get, path = "/v1/activity", tag = "activity",
    params(ActivityParams),
    responses(
        (status = 200, description = "Per-minute activity", body = ActivityBody),
        (status = 400, description = "Invalid app or minutes", body = Problem, content_type = "application/problem+json"),
        AuthErrors,
        ServerErrors,
    ))]
pub(super) async fn get_activity(
    State(api): State<Api>,
    Ctx(ctx): Ctx,
    QueryParams(q): QueryParams<ActivityParams>,
) -> Result<Json<ActivityBody>, ApiError> {
    let report = api
        .activity(
            &ctx,
            ActivityQuery {
                app: q.app,
                minutes: q.minutes,
            },
        )
        .await?;
    Ok(Json(report.into()))
}
