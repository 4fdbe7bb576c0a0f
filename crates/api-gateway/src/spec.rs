//! Requests' timer fields parsed into a domain [`TimerSpec`]: the same for create, update
//! and both transports, so the same bad input names the same field.

use chime_domain::{
    AppName, CalendarName, Exclusions, Labels, MaxAge, OverlapPolicy, RetryPolicyInput, Schedule,
    TimerName, TimerSpec, Timestamp, ValidationError, Window, limits,
};

use crate::api::{ThenInput, TimerInput, TimerPatch};

pub(crate) fn timestamp(
    raw: &Option<String>,
    field: &str,
) -> Result<Option<Timestamp>, ValidationError> {
    raw.as_deref()
        .map(|s| Timestamp::parse_rfc3339(s).map_err(|m| ValidationError::new(field, m)))
        .transpose()
}

/// A timer's exclusion calendars: their names, and their dates as the service read them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Excluding {
    pub names: Vec<CalendarName>,
    pub dates: Exclusions,
}

/// `exclude_calendars` as given: at most [`limits::MAX_EXCLUDE_CALENDARS`] names, sorted,
/// each once.
pub(crate) fn calendar_names(raw: &[String]) -> Result<Vec<CalendarName>, ValidationError> {
    let mut names = raw
        .iter()
        .map(|n| {
            CalendarName::parse(n.clone())
                .map_err(|e| ValidationError::new("exclude_calendars", e.message))
        })
        .collect::<Result<Vec<_>, _>>()?;
    names.sort();
    names.dedup();
    if names.len() > limits::MAX_EXCLUDE_CALENDARS {
        return Err(ValidationError::new(
            "exclude_calendars",
            format!("at most {} calendars", limits::MAX_EXCLUDE_CALENDARS),
        ));
    }
    Ok(names)
}

pub(crate) fn parse_spec(
    input: &TimerInput,
    now: Timestamp,
    excluding: Excluding,
) -> Result<TimerSpec, ValidationError> {
    let start_at = timestamp(&input.start_at, "start_at")?;
    let end_at = timestamp(&input.end_at, "end_at")?;
    // Exclusions first: `max_runs` counts the runs that fire.
    let mut schedule = input
        .schedule
        .resolve(now, start_at, end_at)?
        .with_exclusions(excluding.dates);
    if let Some(n) = input.max_runs {
        schedule = schedule.limited(n, now)?;
    }
    let overlap = overlap(input.overlap.unwrap_or_default(), &schedule)?;
    Ok(TimerSpec {
        app: AppName::parse(input.app.clone())?,
        name: TimerName::parse(input.name.clone())?,
        schedule,
        callback: input.callback.clone().parse()?,
        retry: input
            .retry
            .as_ref()
            .map(RetryPolicyInput::parse)
            .transpose()?
            .unwrap_or_default(),
        misfire: input.misfire.unwrap_or_default(),
        delivery: input.delivery.unwrap_or_default(),
        labels: Labels::parse(input.labels.clone().unwrap_or_default())?,
        on_complete: input.on_complete.unwrap_or_default(),
        catch_up_window: catch_up_window(input.catch_up_window.as_deref())?,
        overlap,
        window: window(input.window.as_deref())?,
        exclude_calendars: excluding.names,
        then: input
            .then
            .as_ref()
            .map(ThenInput::parse)
            .transpose()?
            .unwrap_or_default(),
    })
}

/// An overlap policy other than `allow_all` needs a recurring schedule.
fn overlap(policy: OverlapPolicy, schedule: &Schedule) -> Result<OverlapPolicy, ValidationError> {
    if policy != OverlapPolicy::AllowAll && schedule.is_one_shot() {
        return Err(ValidationError::new(
            "overlap",
            "applies to recurring schedules (cron, every) only",
        ));
    }
    Ok(policy)
}

/// `window` as given; empty means none.
fn window(raw: Option<&str>) -> Result<Option<Window>, ValidationError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(w) => Window::parse(w).map(Some),
    }
}

/// `catch_up_window` as given; empty means none.
fn catch_up_window(raw: Option<&str>) -> Result<Option<MaxAge>, ValidationError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(w) => MaxAge::parse(w, "catch_up_window").map(Some),
    }
}

/// `current` changed by `patch`; `excluding` is what the patched timer excludes (the
/// patch's calendars, else the current ones, read again).
pub(crate) fn apply_patch(
    current: &TimerSpec,
    patch: &TimerPatch,
    now: Timestamp,
    excluding: Excluding,
) -> Result<TimerSpec, ValidationError> {
    let mut spec = current.clone();
    if let Some(name) = &patch.name {
        spec.name = TimerName::parse(name.clone())?;
    }
    let start_at = timestamp(&patch.start_at, "start_at")?.or(current.schedule.start_at());
    let end_at = timestamp(&patch.end_at, "end_at")?.or(current.schedule.end_at());
    let reshaped = patch.schedule.is_some()
        || patch.start_at.is_some()
        || patch.end_at.is_some()
        || patch.exclude_calendars.is_some();
    spec.schedule = match &patch.schedule {
        Some(s) => s.resolve(now, start_at, end_at)?,
        None => Schedule::new(current.schedule.kind().clone(), start_at, end_at)?,
    }
    .with_exclusions(excluding.dates);
    spec.exclude_calendars = excluding.names;
    // A new limit counts from now; a reshaped schedule counts its limit again from now;
    // otherwise the limit (and its last run) stays as it was.
    let limit = current.schedule.limit();
    spec.schedule = match (patch.max_runs, limit) {
        (Some(0), _) | (None, None) => spec.schedule,
        (Some(n), _) => spec.schedule.limited(n, now)?,
        (None, Some(l)) if reshaped => spec.schedule.limited(l.max_runs, now)?,
        (None, Some(l)) => spec.schedule.with_limit(Some(l)),
    };
    if let Some(labels) = &patch.labels {
        spec.labels = Labels::parse(labels.clone())?;
    }
    if let Some(o) = patch.on_complete {
        spec.on_complete = o;
    }
    if let Some(w) = &patch.catch_up_window {
        spec.catch_up_window = catch_up_window(Some(w))?;
    }
    spec.overlap = overlap(patch.overlap.unwrap_or(spec.overlap), &spec.schedule)?;
    if let Some(w) = &patch.window {
        spec.window = window(Some(w))?;
    }
    if let Some(c) = &patch.callback {
        spec.callback = c.clone().parse()?;
    }
    if let Some(r) = &patch.retry {
        spec.retry = r.parse()?;
    }
    if let Some(m) = patch.misfire {
        spec.misfire = m;
    }
    if let Some(d) = patch.delivery {
        spec.delivery = d;
    }
    if let Some(t) = &patch.then {
        spec.then = t.parse()?;
    }
    Ok(spec)
}
