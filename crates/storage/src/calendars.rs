//! [`Calendars`]: each app's exclusion calendars. The SQL backends share one impl
//! (`sql::calendars_impl!`); the dates are stored as a JSON array of their written form.

use async_trait::async_trait;
use chime_domain::{AppName, Calendar, CalendarName, DateRange, Timestamp};

use crate::{StoreError, StoreResult};

#[async_trait]
pub trait Calendars: Send + Sync + 'static {
    /// Creates or replaces the app's calendar of that name; `true` when it was created.
    async fn put_calendar(&self, calendar: &Calendar) -> StoreResult<bool>;

    /// The app's calendars among `names`, in name order; unknown names are left out.
    async fn get_calendars(
        &self,
        app: &AppName,
        names: &[CalendarName],
    ) -> StoreResult<Vec<Calendar>>;

    /// Every calendar of the app, in name order.
    async fn list_calendars(&self, app: &AppName) -> StoreResult<Vec<Calendar>>;
}

/// A stored calendar row: (app, name, dates, updated_at).
pub(crate) type CalendarRow = (String, String, String, i64);

pub(crate) fn dates_json(c: &Calendar) -> String {
    let written: Vec<String> = c.dates.iter().map(ToString::to_string).collect();
    serde_json::Value::from(written).to_string()
}

pub(crate) fn calendar((app, name, dates, updated_at): CalendarRow) -> StoreResult<Calendar> {
    let written: Vec<String> = serde_json::from_str(&dates).map_err(StoreError::corrupt)?;
    Ok(Calendar {
        app: AppName::parse(app).map_err(StoreError::corrupt)?,
        name: CalendarName::parse(name).map_err(StoreError::corrupt)?,
        dates: written
            .iter()
            .map(|d| DateRange::parse(d))
            .collect::<Result<_, _>>()
            .map_err(StoreError::corrupt)?,
        updated_at: Timestamp::from_millis(updated_at),
    })
}
