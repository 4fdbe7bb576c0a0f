//! Unwritten runs computed from their timers ([`chime_domain::UnwrittenRun`]): what a shard
//! holds of them when the hot index lost it, and what the sweeper checks against the rows
//! written. Their rows come only when they end, so their timers' schedules are where they
//! are found.

use chime_domain::{Bucket, Timestamp};

use crate::{Behind, HotEntry, StoreResult, TimerStore};

/// Unwritten timers read per page.
const PAGE: u32 = 1_000;

/// Every enabled live timer of `bucket` whose runs are unwritten, with its watermark.
pub async fn timers_of(store: &dyn TimerStore, bucket: Bucket) -> StoreResult<Vec<Behind>> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = store.unwritten_timers(bucket, after, PAGE).await?;
        let full = page.len() == PAGE as usize;
        after = page.last().map(|b| b.timer.id);
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// The runs of `timers` due in `[from, to)`, not before a timer's last change (what an
/// older version named is not its to fire), and with `planned` only those before its
/// watermark (indexed when it was extended). As hot-index entries, by due.
pub fn runs_between(
    timers: &[Behind],
    from: Timestamp,
    to: Timestamp,
    planned: bool,
) -> Vec<HotEntry> {
    let mut runs: Vec<HotEntry> = timers
        .iter()
        .flat_map(|b| {
            let t = &b.timer;
            let lo = from.max(t.updated_at);
            let hi = if planned { to.min(b.watermark) } else { to };
            t.spec.schedule.occurrences_between(lo, hi).map(move |at| {
                let due = chime_domain::misfire::natural_due(t, at);
                HotEntry::new(chime_domain::TaskKey::new(t.id, at), due, t.bucket)
            })
        })
        .filter(|e| e.due >= from && e.due < to)
        .collect();
    runs.sort_by_key(|e| (e.due, e.key));
    runs
}
