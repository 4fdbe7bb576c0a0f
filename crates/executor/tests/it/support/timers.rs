//! A timer store that counts the timers it reads for claims, and passes everything on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use chime_domain::{
    AppName, Bucket, BucketCount, Horizon, NewTimer, Page, PauseNote, Timer, TimerId, TimerSpec,
    Timestamp,
};
use chime_storage::{
    Behind, CreateTimer, PageRequest, StoreResult, TimerFilter, TimerStore, Watermark, Written,
};

pub struct CountingTimers {
    inner: Arc<dyn TimerStore>,
    /// Timers asked for by `get_timers`, over every call.
    pub read: AtomicUsize,
}

impl CountingTimers {
    pub fn new(inner: Arc<dyn TimerStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            read: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl TimerStore for CountingTimers {
    async fn create_timer(&self, new: NewTimer, horizon: Horizon) -> StoreResult<Written> {
        self.inner.create_timer(new, horizon).await
    }
    async fn create_timers(
        &self,
        batch: Vec<CreateTimer>,
        horizon: Horizon,
    ) -> StoreResult<Vec<Written>> {
        self.inner.create_timers(batch, horizon).await
    }
    async fn get_timer(&self, id: TimerId) -> StoreResult<Timer> {
        self.inner.get_timer(id).await
    }
    async fn get_timers(&self, ids: &[TimerId]) -> StoreResult<Vec<Timer>> {
        self.read.fetch_add(ids.len(), Ordering::SeqCst);
        self.inner.get_timers(ids).await
    }
    async fn count_timers(&self, app: &AppName) -> StoreResult<u64> {
        self.inner.count_timers(app).await
    }
    async fn list_timers(
        &self,
        filter: &TimerFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Timer>> {
        self.inner.list_timers(filter, page).await
    }
    async fn update_timer(
        &self,
        id: TimerId,
        expected_version: Option<i64>,
        spec: TimerSpec,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        self.inner
            .update_timer(id, expected_version, spec, horizon)
            .await
    }
    async fn set_timer_enabled(
        &self,
        id: TimerId,
        enabled: bool,
        horizon: Horizon,
    ) -> StoreResult<Written> {
        self.inner.set_timer_enabled(id, enabled, horizon).await
    }
    async fn pause_timer(&self, id: TimerId, note: &PauseNote) -> StoreResult<Timer> {
        self.inner.pause_timer(id, note).await
    }
    async fn delete_timer(&self, id: TimerId) -> StoreResult<()> {
        self.inner.delete_timer(id).await
    }
    async fn remove_finished(&self, ids: &[TimerId], now: Timestamp) -> StoreResult<Vec<TimerId>> {
        self.inner.remove_finished(ids, now).await
    }
    async fn timers_behind(
        &self,
        bucket: Bucket,
        before: Timestamp,
        after: Option<(Timestamp, TimerId)>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>> {
        self.inner.timers_behind(bucket, before, after, limit).await
    }
    async fn unwritten_timers(
        &self,
        bucket: Bucket,
        after: Option<TimerId>,
        limit: u32,
    ) -> StoreResult<Vec<Behind>> {
        self.inner.unwritten_timers(bucket, after, limit).await
    }
    async fn advance_watermarks(&self, marks: &[Watermark]) -> StoreResult<u64> {
        self.inner.advance_watermarks(marks).await
    }
    async fn rebucket(&self, count: BucketCount, limit: u32) -> StoreResult<Vec<Bucket>> {
        self.inner.rebucket(count, limit).await
    }
}
