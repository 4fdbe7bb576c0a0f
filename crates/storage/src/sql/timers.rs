//! Shared bodies of `TimerStore` methods, over a [`super::Dialect`] `$d`; `$db` is a pool.

/// `TimerStore::pause_timer`: [`super::Dialect::PAUSE_TIMER`], then the row as it is now, in
/// one transaction (MySQL has no `UPDATE … RETURNING`).
macro_rules! pause_timer {
    ($db:expr, $id:expr, $note:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (id, note): (chime_domain::TimerId, &chime_domain::PauseNote) = ($id, $note);
        let mut tx = $db.begin().await?;
        sqlx::query(<$d>::PAUSE_TIMER)
            .bind(note.at.as_millis())
            .bind(&note.reason)
            .bind(note.at.as_millis())
            .bind(note.by.as_deref())
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        let row = sqlx::query(<$d>::LIVE_TIMER)
            .bind(id.get())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| $crate::StoreError::timer_not_found(id))?;
        tx.commit().await?;
        $crate::rows::timer(&row)
    }};
}

/// `TimerStore::unwritten_timers`: [`super::Dialect::UNWRITTEN_TIMERS`].
macro_rules! unwritten_timers {
    ($db:expr, $bucket:expr, $after:expr, $limit:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (bucket, after, limit): (chime_domain::Bucket, Option<chime_domain::TimerId>, u32) =
            ($bucket, $after, $limit);
        let rows = sqlx::query(<$d>::UNWRITTEN_TIMERS)
            .bind(bucket.get() as i32)
            .bind(after.map_or(0, |id| id.get()))
            .bind(i64::from(limit))
            .fetch_all($db)
            .await?;
        rows.iter().map($crate::rows::behind).collect()
    }};
}

/// `TimerStore::list_timers`: [`super::Dialect::LIST_TIMERS`].
macro_rules! list_timers {
    ($db:expr, $filter:expr, $page:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let (filter, page) = ($filter, $page);
        let scope = filter.scope();
        let after = $crate::decode_page_token(page, &scope)?.map_or(0, |(id, _)| id);
        let rows = sqlx::query(<$d>::LIST_TIMERS)
            .bind(filter.app.as_ref().map(|a| a.as_str()))
            .bind(filter.enabled)
            .bind(filter.bucket.map(|b| b.get() as i32))
            .bind(filter.name_prefix.as_deref())
            .bind(filter.state.map(|(s, _)| s.as_str()))
            .bind(filter.state.map_or(0, |(_, now)| now.as_millis()))
            .bind(filter.labels_json())
            .bind(after)
            .bind(i64::from(page.size.get()) + 1)
            .fetch_all($db)
            .await?;
        let items = $crate::rows::timers(&rows)?;
        Ok($crate::into_page(items, page.size, &scope, |t| {
            (t.id.get(), 0)
        }))
    }};
}

/// The idempotent part of a create, the same on every backend: inside the create's
/// transaction `$tx`, before timer `$id` of request `$req` is written, claims its key. The
/// first use of a key goes on to write the timer (`None`); a repeat gets the timer the
/// first use created, once its fingerprint shows it is the same request (`Some`).
macro_rules! claim_idempotency_key {
    ($tx:expr, $req:expr, $id:expr, $now:expr, $d:ty) => {{
        use $crate::sql::Dialect as _;
        let req: &$crate::CreateTimer = $req;
        match &req.idempotency {
            None => None,
            Some(idem) => {
                let app = req.timer.spec.app.as_str();
                let first_use = sqlx::query(<$d>::CLAIM_IDEMPOTENCY_KEY)
                    .bind(app)
                    .bind(&idem.key)
                    .bind(&idem.fingerprint)
                    .bind($id.get())
                    .bind($now.as_millis())
                    .execute(&mut *$tx)
                    .await?
                    .rows_affected()
                    == 1;
                if first_use {
                    None
                } else {
                    let (fingerprint, original): (String, i64) =
                        sqlx::query_as(<$d>::IDEMPOTENCY_KEY)
                            .bind(app)
                            .bind(&idem.key)
                            .fetch_one(&mut *$tx)
                            .await?;
                    $crate::rows::check_fingerprint(idem, &fingerprint)?;
                    let row = sqlx::query(<$d>::TIMER_BY_ID)
                        .bind(original)
                        .fetch_one(&mut *$tx)
                        .await?;
                    Some($crate::Written {
                        timer: $crate::rows::timer(&row)?,
                        occurrences: Vec::new(),
                    })
                }
            }
        }
    }};
}

/// `TimerStore::create_timers` on a store with `pool`, `clock` and `next_ids`: every request's
/// idempotency key claimed and the fresh timers inserted as one group (`$insert`, given the
/// transaction `$tx` and the group `$group`), in one transaction, run again when it rolled
/// back (the same ids each time: a try that rolled back wrote nothing). `$fresh` makes the
/// rows of a new timer from its id `$id`, request `$req` and the transaction's `$now`.
macro_rules! create_timers {
    ($store:expr, $batch:expr, $d:ty,
     |$id:ident, $req:ident, $now:ident| $fresh:expr,
     |$tx:ident, $group:ident| $insert:expr) => {{
        let store = $store;
        let batch: &[$crate::CreateTimer] = &$batch;
        let ids = $crate::error::retry_rolled_back(|| store.next_ids(batch.len())).await?;
        let ids = &ids;
        $crate::error::retry_rolled_back(|| async move {
            let mut $tx = store.pool.begin().await?;
            let $now = store.clock.now();
            let mut out = $crate::create_queue::BatchResults::new(batch.len());
            for ($req, $id) in batch.iter().zip(ids.iter().copied()) {
                match $crate::sql::claim_idempotency_key!($tx, $req, $id, $now, $d) {
                    Some(original) => out.repeat(original),
                    None => out.fresh($fresh),
                }
            }
            let $group = out.group();
            if !$group.is_empty() {
                let inserted = $insert.await?;
                // The transaction rolls back when dropped.
                out.check_inserted(&inserted)?;
            }
            $tx.commit().await?;
            out.finish()
        })
        .await
    }};
}

pub(crate) use {claim_idempotency_key, create_timers, list_timers, pause_timer, unwritten_timers};
