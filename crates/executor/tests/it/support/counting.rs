//! An occurrence store that counts the claim and outcome statements it passes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use chime_domain::{
    Bucket, Claim, ClaimedOccurrence, NewOccurrence, Occurrence, Outcome, OverlapPolicy, Page,
    TaskKey, Timestamp,
};
use chime_storage::{
    DeadFilter, Exclusive, OccurrenceStore, PageRequest, Redrive, RunFilter, StoreResult,
};

pub struct Counting {
    inner: Arc<dyn OccurrenceStore>,
    pub claims: AtomicUsize,
    pub records: AtomicUsize,
    /// This many outcome statements fail, as a server's odd error, before they pass.
    pub failing_records: AtomicUsize,
    pub held: AtomicUsize,
    pub exclusive: AtomicUsize,
    /// The keys of each claim statement, in order.
    pub claimed: std::sync::Mutex<Vec<Vec<TaskKey>>>,
    /// Claims wait while a test holds this for writing.
    pub gate: tokio::sync::RwLock<()>,
    /// Claims of this key wait while a test holds `key_gate` for writing.
    pub held_key: std::sync::Mutex<Option<TaskKey>>,
    pub key_gate: tokio::sync::RwLock<()>,
}

impl Counting {
    /// Every key a claim statement was asked for, in order.
    pub fn claimed_keys(&self) -> Vec<TaskKey> {
        self.claimed
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .copied()
            .collect()
    }

    pub fn new(inner: Arc<dyn OccurrenceStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            claims: AtomicUsize::new(0),
            records: AtomicUsize::new(0),
            failing_records: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            exclusive: AtomicUsize::new(0),
            claimed: std::sync::Mutex::new(Vec::new()),
            gate: tokio::sync::RwLock::new(()),
            held_key: std::sync::Mutex::new(None),
            key_gate: tokio::sync::RwLock::new(()),
        })
    }
}

#[async_trait]
impl OccurrenceStore for Counting {
    async fn insert_occurrences(&self, batch: &[NewOccurrence]) -> StoreResult<u64> {
        self.inner.insert_occurrences(batch).await
    }
    async fn claim(&self, keys: &[TaskKey], claim: Claim) -> StoreResult<Vec<ClaimedOccurrence>> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.claimed.lock().unwrap().push(keys.to_vec());
        let _open = self.gate.read().await;
        let held = *self.held_key.lock().unwrap();
        let _key_open = match held {
            Some(k) if keys.contains(&k) => Some(self.key_gate.read().await),
            _ => None,
        };
        self.inner.claim(keys, claim).await
    }
    async fn first_attempts(&self, keys: &[TaskKey]) -> StoreResult<Vec<ClaimedOccurrence>> {
        self.inner.first_attempts(keys).await
    }
    async fn held_for_exclusive(
        &self,
        keys: &[TaskKey],
        now: Timestamp,
    ) -> StoreResult<Vec<TaskKey>> {
        self.held.fetch_add(1, Ordering::SeqCst);
        self.inner.held_for_exclusive(keys, now).await
    }
    async fn claim_exclusive(
        &self,
        key: TaskKey,
        claim: Claim,
        overlap: OverlapPolicy,
    ) -> StoreResult<Exclusive> {
        self.exclusive.fetch_add(1, Ordering::SeqCst);
        self.inner.claim_exclusive(key, claim, overlap).await
    }
    async fn still_running(&self, claims: &[(TaskKey, u32)]) -> StoreResult<Vec<TaskKey>> {
        self.inner.still_running(claims).await
    }
    async fn backfill(
        &self,
        batch: &[NewOccurrence],
        overlap: OverlapPolicy,
    ) -> StoreResult<Vec<TaskKey>> {
        self.inner.backfill(batch, overlap).await
    }
    async fn absent(&self, keys: &[TaskKey]) -> StoreResult<Vec<chime_storage::Absent>> {
        self.inner.absent(keys).await
    }
    async fn record_outcomes(&self, outcomes: &[Outcome]) -> StoreResult<u64> {
        self.records.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .failing_records
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(chime_storage::StoreError::internal(
                "Error on delete of a temporary file",
            ));
        }
        self.inner.record_outcomes(outcomes).await
    }
    async fn get_occurrence(&self, key: TaskKey) -> StoreResult<Option<Occurrence>> {
        self.inner.get_occurrence(key).await
    }
    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        self.inner.list_runs(filter, page).await
    }
    async fn find_overdue(
        &self,
        due_before: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<Occurrence>> {
        self.inner.find_overdue(due_before, now, limit).await
    }
    async fn skip_occurrences(&self, keys: &[TaskKey], reason: &str) -> StoreResult<u64> {
        self.inner.skip_occurrences(keys, reason).await
    }
    async fn skip_before_claim(
        &self,
        runs: &[chime_domain::EarlySkip],
    ) -> StoreResult<Vec<TaskKey>> {
        self.inner.skip_before_claim(runs).await
    }
    async fn drop_pending(
        &self,
        timers: &[chime_domain::StoppedTimer],
        after: Timestamp,
    ) -> StoreResult<Vec<chime_storage::HotEntry>> {
        self.inner.drop_pending(timers, after).await
    }
    async fn list_dead(
        &self,
        filter: &DeadFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Occurrence>> {
        self.inner.list_dead(filter, page).await
    }
    async fn redrive(&self, what: Redrive, now: Timestamp) -> StoreResult<u64> {
        self.inner.redrive(what, now).await
    }
    async fn due_in_bucket(
        &self,
        bucket: Bucket,
        from: Timestamp,
        to: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<(TaskKey, Timestamp)>> {
        self.inner.due_in_bucket(bucket, from, to, limit).await
    }
}
