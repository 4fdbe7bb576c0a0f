//! [`crate::Calendars`] on MySQL: the shared row mapping, MySQL's upsert.

use async_trait::async_trait;
use chime_domain::{AppName, Calendar, CalendarName};

use super::MySqlStore;
use crate::calendars::{CalendarRow, calendar, dates_json};
use crate::{Calendars, StoreResult};

#[async_trait]
impl Calendars for MySqlStore {
    async fn put_calendar(&self, c: &Calendar) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let existed: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM calendars WHERE app = ? AND name = ? FOR UPDATE")
                .bind(c.app.as_str())
                .bind(c.name.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO calendars (app, name, dates, updated_at) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE dates = VALUES(dates), updated_at = VALUES(updated_at)",
        )
        .bind(c.app.as_str())
        .bind(c.name.as_str())
        .bind(dates_json(c))
        .bind(c.updated_at.as_millis())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(existed.is_none())
    }

    async fn get_calendars(
        &self,
        app: &AppName,
        names: &[CalendarName],
    ) -> StoreResult<Vec<Calendar>> {
        let all = self.list_calendars(app).await?;
        Ok(all
            .into_iter()
            .filter(|c| names.contains(&c.name))
            .collect())
    }

    async fn list_calendars(&self, app: &AppName) -> StoreResult<Vec<Calendar>> {
        let rows: Vec<CalendarRow> = sqlx::query_as(
            "SELECT app, name, dates, updated_at FROM calendars WHERE app = ? ORDER BY name",
        )
        .bind(app.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(calendar).collect()
    }
}
