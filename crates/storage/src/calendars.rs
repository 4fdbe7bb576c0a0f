//! [`Calendars`]: each app's exclusion calendars. Both SQL backends run the same statements
//! ([`calendars_impl!`]); the dates are stored as a JSON array of their written form.

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

pub(crate) const EXISTS: &str = "SELECT 1 FROM calendars WHERE app = $1 AND name = $2";
pub(crate) const UPSERT: &str = "INSERT INTO calendars (app, name, dates, updated_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (app, name) DO UPDATE SET dates = excluded.dates, updated_at = excluded.updated_at";
pub(crate) const LIST: &str =
    "SELECT app, name, dates, updated_at FROM calendars WHERE app = $1 ORDER BY name";

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

/// [`Calendars`] for a store whose writes go to `$write` and reads to `$read` (pools).
macro_rules! calendars_impl {
    ($store:ty, $write:ident, $read:ident) => {
        #[async_trait::async_trait]
        impl $crate::Calendars for $store {
            async fn put_calendar(&self, c: &chime_domain::Calendar) -> $crate::StoreResult<bool> {
                let mut tx = self.$write.begin().await?;
                let existed: Option<i32> = sqlx::query_scalar($crate::calendars::EXISTS)
                    .bind(c.app.as_str())
                    .bind(c.name.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                sqlx::query($crate::calendars::UPSERT)
                    .bind(c.app.as_str())
                    .bind(c.name.as_str())
                    .bind($crate::calendars::dates_json(c))
                    .bind(c.updated_at.as_millis())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(existed.is_none())
            }

            async fn get_calendars(
                &self,
                app: &chime_domain::AppName,
                names: &[chime_domain::CalendarName],
            ) -> $crate::StoreResult<Vec<chime_domain::Calendar>> {
                // An app has few calendars: read them all and keep those asked for.
                let all = $crate::Calendars::list_calendars(self, app).await?;
                Ok(all
                    .into_iter()
                    .filter(|c| names.contains(&c.name))
                    .collect())
            }

            async fn list_calendars(
                &self,
                app: &chime_domain::AppName,
            ) -> $crate::StoreResult<Vec<chime_domain::Calendar>> {
                let rows: Vec<$crate::calendars::CalendarRow> =
                    sqlx::query_as($crate::calendars::LIST)
                        .bind(app.as_str())
                        .fetch_all(&self.$read)
                        .await?;
                rows.into_iter().map($crate::calendars::calendar).collect()
            }
        }
    };
}
pub(crate) use calendars_impl;
