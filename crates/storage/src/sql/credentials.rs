//! The `Credentials` impl every SQL backend shares.

/// `Credentials` for a store whose writes go to `$write` and reads to `$read` (pools), in
/// dialect `$d`. Signing secrets are read from `$write`: a first use reads back what it
/// just wrote.
macro_rules! credentials_impl {
    ($store:ty, $write:ident, $read:ident, $d:ty) => {
        impl $store {
            async fn active_secrets(
                &self,
                app: &chime_domain::AppName,
                now: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<chime_domain::SigningSecret>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<String> = sqlx::query_scalar(<$d>::SECRETS_ACTIVE)
                    .bind(app.as_str())
                    .bind(now.as_millis())
                    .fetch_all(&self.$write)
                    .await?;
                $crate::credentials::secrets_from_rows(rows)
            }
        }

        #[async_trait::async_trait]
        impl $crate::Credentials for $store {
            async fn create_token(&self, t: &chime_domain::ApiToken) -> $crate::StoreResult<()> {
                use $crate::sql::Dialect as _;
                sqlx::query(<$d>::TOKEN_CREATE)
                    .bind(t.id.as_str())
                    .bind(t.app.as_str())
                    .bind(t.name.as_deref())
                    .bind(t.scopes.to_string())
                    .bind(&t.hash)
                    .bind(t.created_at.as_millis())
                    .bind(t.expires_at.map(chime_domain::Timestamp::as_millis))
                    .execute(&self.$write)
                    .await?;
                Ok(())
            }

            async fn list_tokens(
                &self,
                app: &chime_domain::AppName,
            ) -> $crate::StoreResult<Vec<chime_domain::ApiToken>> {
                use $crate::sql::Dialect as _;
                let rows: Vec<$crate::credentials::TokenRow> = sqlx::query_as(<$d>::TOKENS_OF_APP)
                    .bind(app.as_str())
                    .fetch_all(&self.$read)
                    .await?;
                rows.into_iter()
                    .map($crate::credentials::token_from_row)
                    .collect()
            }

            async fn find_token(
                &self,
                id: &chime_domain::TokenId,
            ) -> $crate::StoreResult<Option<chime_domain::ApiToken>> {
                use $crate::sql::Dialect as _;
                let row: Option<$crate::credentials::TokenRow> = sqlx::query_as(<$d>::TOKEN_BY_ID)
                    .bind(id.as_str())
                    .fetch_optional(&self.$read)
                    .await?;
                row.map($crate::credentials::token_from_row).transpose()
            }

            async fn revoke_token(
                &self,
                app: &chime_domain::AppName,
                id: &chime_domain::TokenId,
                now: chime_domain::Timestamp,
            ) -> $crate::StoreResult<bool> {
                use $crate::sql::Dialect as _;
                let done = sqlx::query(<$d>::TOKEN_REVOKE)
                    .bind(now.as_millis())
                    .bind(id.as_str())
                    .bind(app.as_str())
                    .execute(&self.$write)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn signing_secrets(
                &self,
                app: &chime_domain::AppName,
                fresh: &chime_domain::SigningSecret,
                now: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<chime_domain::SigningSecret>> {
                use $crate::sql::Dialect as _;
                let secrets = self.active_secrets(app, now).await?;
                if !secrets.is_empty() {
                    return Ok(secrets);
                }
                sqlx::query(<$d>::SECRET_FIRST)
                    .bind(app.as_str())
                    .bind(fresh.as_str())
                    .bind(now.as_millis())
                    .execute(&self.$write)
                    .await?;
                self.active_secrets(app, now).await
            }

            async fn rotate_signing_secret(
                &self,
                app: &chime_domain::AppName,
                fresh: &chime_domain::SigningSecret,
                now: chime_domain::Timestamp,
                grace_until: chime_domain::Timestamp,
            ) -> $crate::StoreResult<Vec<chime_domain::SigningSecret>> {
                use $crate::sql::Dialect as _;
                let mut tx = self.$write.begin().await?;
                if let Some(lock) = <$d>::SECRET_ROTATION_LOCK {
                    sqlx::query(lock)
                        .bind(app.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
                sqlx::query(<$d>::SECRET_RETIRE)
                    .bind(grace_until.as_millis())
                    .bind(app.as_str())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(<$d>::SECRET_INSERT)
                    .bind(app.as_str())
                    .bind(fresh.as_str())
                    .bind(now.as_millis())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                self.active_secrets(app, now).await
            }
        }
    };
}
pub(crate) use credentials_impl;
