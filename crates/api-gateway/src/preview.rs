//! Run-time previews: a schedule's next fire times, each with how a daylight-saving change
//! shaped it. The same `Schedule` walk as materialization, so a preview is what fires.

use chime_domain::{Exclusions, Schedule, Timestamp, ValidationError, limits};

use crate::api::{PreviewRequest, PreviewRun};
use crate::spec::timestamp;

/// Run times a preview shows when the request does not say.
const DEFAULT_COUNT: u32 = 10;

/// The count asked for, within 1 to [`limits::MAX_PREVIEW`].
pub(crate) fn count(raw: Option<u32>) -> Result<usize, ValidationError> {
    let n = raw.unwrap_or(DEFAULT_COUNT);
    if n == 0 || n as usize > limits::MAX_PREVIEW {
        return Err(ValidationError::new(
            "count",
            format!("must be between 1 and {}", limits::MAX_PREVIEW),
        ));
    }
    Ok(n as usize)
}

/// The schedule of a preview request (anchored at `now`, as a create would anchor it), the
/// instant to preview from and how many runs.
pub(crate) fn parse(
    req: &PreviewRequest,
    now: Timestamp,
    excluded: Exclusions,
) -> Result<(Schedule, Timestamp, usize), ValidationError> {
    let start_at = timestamp(&req.start_at, "start_at")?;
    let end_at = timestamp(&req.end_at, "end_at")?;
    let from = timestamp(&req.from, "from")?.unwrap_or(now);
    let mut schedule = req
        .schedule
        .resolve(now, start_at, end_at)?
        .with_exclusions(excluded);
    if let Some(n) = req.max_runs {
        schedule = schedule.limited(n, from)?;
    }
    Ok((schedule, from, count(req.count)?))
}

/// The first `count` fire times at or after `from`.
pub(crate) fn runs(schedule: &Schedule, from: Timestamp, count: usize) -> Vec<PreviewRun> {
    let zone = schedule.time_zone();
    schedule
        .next_runs(from, count)
        .into_iter()
        .map(|at| PreviewRun {
            at,
            zone,
            dst: schedule.dst_note(at),
        })
        .collect()
}
