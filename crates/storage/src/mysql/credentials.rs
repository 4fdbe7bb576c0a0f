//! [`crate::Credentials`] on MySQL: the shared row mapping; rotation in one transaction.

use async_trait::async_trait;
use chime_domain::{ApiToken, AppName, SigningSecret, Timestamp, TokenId};

use super::MySqlStore;
use crate::credentials::{TokenRow, secrets_from_rows, token_cols, token_from_row};
use crate::{Credentials, StoreResult};

impl MySqlStore {
    async fn active_secrets(
        &self,
        app: &AppName,
        now: Timestamp,
    ) -> StoreResult<Vec<SigningSecret>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT secret FROM signing_secrets WHERE app = ? \
             AND (retires_at IS NULL OR retires_at > ?) \
             ORDER BY retires_at IS NOT NULL, created_at DESC",
        )
        .bind(app.as_str())
        .bind(now.as_millis())
        .fetch_all(&self.pool)
        .await?;
        secrets_from_rows(rows)
    }
}

#[async_trait]
impl Credentials for MySqlStore {
    async fn create_token(&self, t: &ApiToken) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO api_tokens (id, app, name, scopes, hash, created_at, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(t.id.as_str())
        .bind(t.app.as_str())
        .bind(t.name.as_deref())
        .bind(t.scopes.to_string())
        .bind(&t.hash)
        .bind(t.created_at.as_millis())
        .bind(t.expires_at.map(Timestamp::as_millis))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn list_tokens(&self, app: &AppName) -> StoreResult<Vec<ApiToken>> {
        let rows: Vec<TokenRow> = sqlx::query_as(concat!(
            "SELECT ",
            token_cols!(),
            " FROM api_tokens WHERE app = ? AND revoked_at IS NULL ORDER BY created_at, id"
        ))
        .bind(app.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(token_from_row).collect()
    }

    async fn find_token(&self, id: &TokenId) -> StoreResult<Option<ApiToken>> {
        let row: Option<TokenRow> = sqlx::query_as(concat!(
            "SELECT ",
            token_cols!(),
            " FROM api_tokens WHERE id = ? AND revoked_at IS NULL"
        ))
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(token_from_row).transpose()
    }

    async fn revoke_token(&self, app: &AppName, id: &TokenId, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND app = ? AND revoked_at IS NULL",
        )
        .bind(now.as_millis())
        .bind(id.as_str())
        .bind(app.as_str())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn signing_secrets(
        &self,
        app: &AppName,
        fresh: &SigningSecret,
        now: Timestamp,
    ) -> StoreResult<Vec<SigningSecret>> {
        let secrets = self.active_secrets(app, now).await?;
        if !secrets.is_empty() {
            return Ok(secrets);
        }
        // Racing first uses: the unique current_app key keeps one; the others change nothing.
        sqlx::query(
            "INSERT INTO signing_secrets (app, secret, created_at) VALUES (?, ?, ?) \
             ON DUPLICATE KEY UPDATE app = app",
        )
        .bind(app.as_str())
        .bind(fresh.as_str())
        .bind(now.as_millis())
        .execute(&self.pool)
        .await?;
        self.active_secrets(app, now).await
    }

    async fn rotate_signing_secret(
        &self,
        app: &AppName,
        fresh: &SigningSecret,
        now: Timestamp,
        grace_until: Timestamp,
    ) -> StoreResult<Vec<SigningSecret>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE signing_secrets SET retires_at = ? WHERE app = ? AND retires_at IS NULL",
        )
        .bind(grace_until.as_millis())
        .bind(app.as_str())
        .execute(&mut *tx)
        .await?;
        sqlx::query("INSERT INTO signing_secrets (app, secret, created_at) VALUES (?, ?, ?)")
            .bind(app.as_str())
            .bind(fresh.as_str())
            .bind(now.as_millis())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.active_secrets(app, now).await
    }
}
