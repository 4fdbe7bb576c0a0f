//! The storage contract: one suite of behaviours every backend of a trait must show. Backends
//! are instantiated in `tests/` with [`storage_contract!`](crate::storage_contract), which
//! names each test `<backend>::<trait>::<behaviour>`.
//!
//! Each function takes the store under test and panics on a violated contract.

// Panicking is how a contract reports a violation.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chime_domain::{
    AppName, Bucket, CallbackInput, Claim, EarlySkip, EarlySkipKind, Horizon, NewOccurrence,
    NewTimer, OccurrenceStatus, Outcome, OverlapPolicy, PageSize, ScheduleInput, ShardKey,
    StoppedTimer, TaskKey, Timer, TimerId, TimerName, TimerSpec, Timestamp,
};

use crate::{
    CreateTimer, DeadFilter, HotEntry, HotIndex, IdempotencyKey, LeaseToken, Leases, Membership,
    OccurrenceStore, PageRequest, Redrive, RunFilter, StoreError, TimerFilter, TimerStore,
};

/// Lets a contract make time pass for a backend: backends on an injected clock move it,
/// backends on a server's clock (Redis expiry) do nothing and the contract polls instead.
pub trait TimeControl: Send + Sync {
    fn advance(&self, by: Duration);
}

/// Real time: nothing to do.
pub struct RealTime;

impl TimeControl for RealTime {
    fn advance(&self, _by: Duration) {}
}

impl TimeControl for chime_domain::ManualClock {
    fn advance(&self, by: Duration) {
        chime_domain::ManualClock::advance(self, by);
    }
}

pub mod activity;
pub mod backfill;
pub mod calendars;
pub mod chains;
pub mod credentials;
pub mod hot_index;
pub mod leases;
pub mod lifecycle;
pub mod materialize;
pub mod membership;
pub mod notifications;
pub mod occurrence_store;
pub mod retention;
pub mod shards;
pub mod timer_store;
pub mod unwritten;

const T0: i64 = 1_893_456_000_000; // 2030-01-01T00:00:00Z: clear of any real clock in tests.

/// The horizon timer writes use in the contracts.
const H: Horizon = Horizon::DEFAULT;

/// A valid timer spec for tests: every minute from [`T0`].
pub fn spec(app: &str, name: &str) -> TimerSpec {
    spec_every(app, name, "1m", Timestamp::from_millis(T0))
}

/// [`spec_with`] a schedule of `every` (`"1h"`, `"1m"`, …) anchored at `now`.
pub fn spec_every(app: &str, name: &str, every: &str, now: Timestamp) -> TimerSpec {
    let schedule = ScheduleInput {
        every: Some(every.into()),
        ..Default::default()
    };
    spec_with(app, name, &schedule, now)
}

/// Claims `key` at `now` and records its first attempt failed (`HTTP 503`), its retry due
/// at `now`: a row no skip before the claim may mark.
pub async fn failed_once(store: &dyn OccurrenceStore, key: TaskKey, now: Timestamp) {
    let claim = Claim {
        now,
        lease_until: now.add_millis(30_000),
    };
    assert_eq!(store.claim(&[key], claim).await.unwrap().len(), 1, "{key}");
    let mut failed = Outcome::ended(
        key,
        1,
        OccurrenceStatus::Retrying,
        Some(now),
        Some("HTTP 503".into()),
    );
    failed.next_attempt_at = Some(now);
    store.record_outcomes(&[failed]).await.unwrap();
}

/// A valid timer spec for tests with `schedule` anchored at `now`, calling back a port
/// nothing listens on, the other settings at their defaults.
pub fn spec_with(app: &str, name: &str, schedule: &ScheduleInput, now: Timestamp) -> TimerSpec {
    TimerSpec {
        app: AppName::parse(app).expect("test app name"),
        name: TimerName::parse(name).expect("test timer name"),
        schedule: schedule.resolve(now, None, None).expect("test schedule"),
        callback: CallbackInput {
            url: Some("http://127.0.0.1:9/callback".into()),
            ..Default::default()
        }
        .parse()
        .expect("test callback"),
        retry: Default::default(),
        misfire: Default::default(),
        delivery: Default::default(),
        labels: Default::default(),
        on_complete: Default::default(),
        catch_up_window: None,
        overlap: Default::default(),
        window: None,
        exclude_calendars: Vec::new(),
        then: Default::default(),
    }
}

/// Timer `id` as a store hands it back when just created (version 1, enabled, bucket 0),
/// without a store: for code that takes a `Timer` (delivery targets, the bench's callback
/// floor).
pub fn unstored_timer(id: i64, spec: TimerSpec, now: Timestamp) -> Timer {
    Timer {
        id: TimerId::new(id).expect("test timer id"),
        spec,
        enabled: true,
        version: 1,
        bucket: Bucket::from_stored(0),
        created_at: now,
        updated_at: now,
        deleted_at: None,
        paused: None,
        written_ahead: true,
    }
}

pub fn new_timer(app: &str, name: &str) -> NewTimer {
    NewTimer {
        spec: spec(app, name),
        enabled: true,
        runs_unwritten: false,
    }
}

fn page(size: u32, token: Option<String>) -> PageRequest {
    PageRequest {
        size: PageSize::new(Some(size)).expect("test page size"),
        token,
    }
}

fn id(n: i64) -> TimerId {
    TimerId::new(n).expect("test timer id")
}

fn key(timer: i64, run_at: i64) -> TaskKey {
    TaskKey::new(id(timer), Timestamp::from_millis(run_at))
}

fn occ(timer: i64, run_at: i64, version: i64, bucket: u32) -> NewOccurrence {
    NewOccurrence {
        key: key(timer, run_at),
        timer_version: version,
        bucket: Bucket::from_stored(bucket),
        due: None,
    }
}

fn claim_at(now: i64, lease_ms: i64) -> Claim {
    Claim {
        now: Timestamp::from_millis(now),
        lease_until: Timestamp::from_millis(now + lease_ms),
    }
}

fn outcome(k: TaskKey, attempt: u32, status: OccurrenceStatus, fired_at: i64) -> Outcome {
    Outcome {
        key: k,
        attempt,
        status,
        fired_at: Some(Timestamp::from_millis(fired_at)),
        http_status: Some(200),
        output: Some("ok".into()),
        error: None,
        next_attempt_at: None,
        unwritten: None,
        leased: false,
    }
}

/// Instantiates the contract for one backend. `$make` is an async expression yielding a
/// fixture with `store()` (for the SQL stores), `hot_index()` or `leases()`/`time()`; the
/// fixture cleans up after itself when dropped.
#[macro_export]
macro_rules! storage_contract {
    (timer_store, $make:expr) => {
        $crate::storage_contract!(@cases timer_store, $make, store, [
            create_then_get,
            batch_create_is_all_or_nothing,
            idempotent_create_returns_the_original,
            racing_idempotent_creates_make_one_timer,
            racing_creates_of_one_name_make_one_timer,
            unknown_timer_is_not_found,
            names_are_unique_per_app_among_live_timers,
            list_pages_in_id_order_with_filters,
            foreign_or_tampered_page_tokens_are_rejected,
            update_bumps_version_and_honours_precondition,
            enable_and_disable_bump_version_only_on_change,
            delete_is_soft_and_final,
            get_timers_returns_the_live_ones_in_id_order,
            live_timers_are_counted_per_app,
        ]);
    };
    (occurrence_store, $make:expr) => {
        $crate::storage_contract!(@cases occurrence_store, $make, store, [
            insert_is_idempotent,
            newer_version_adopts_pending_rows_only,
            claim_then_record_outcome,
            first_attempts_are_read_not_claimed,
            a_leased_outcome_moves_the_pending_row_on_once,
            expired_claim_is_taken_over_and_late_outcome_ignored,
            retrying_is_due_at_next_attempt_and_claimable,
            outcome_must_be_a_final_status,
            list_runs_newest_first_with_filter_and_pages,
            find_overdue_reports_missed_and_abandoned_work,
            due_in_bucket_is_scoped_to_bucket_window_and_status,
            racing_claimers_win_each_occurrence_exactly_once,
            skipping_touches_claimable_occurrences_only,
            overtaken_runs_are_skipped_only_while_waiting_for_a_first_attempt,
            a_stopped_timers_runs_are_skipped_up_to_its_version,
            dropping_pending_leaves_what_is_due_under_way_or_newer,
            dead_letters_are_listed_and_redriven,
        ]);
    };
    (materialize, $make:expr) => {
        $crate::storage_contract!(@cases materialize, $make, store, [
            creates_write_first_occurrences_and_watermark,
            a_one_shot_is_written_whole_and_never_behind,
            a_failed_batch_leaves_no_occurrences,
            idempotent_repeats_write_nothing_more,
            enabling_and_updating_write_rows_at_the_new_version,
            timers_behind_page_by_watermark_and_advance_forward_only,
            shrinking_the_bucket_count_moves_out_of_range_timers,
        ]);
    };
    (unwritten, $make:expr) => {
        $crate::storage_contract!(@cases unwritten, $make, store, [
            timers_that_leave_runs_unwritten_write_none_ahead,
            a_change_may_write_runs_ahead_but_never_leave_them_unwritten_again,
            an_unwritten_runs_row_is_written_when_it_ends,
            a_skip_is_written_once_and_gives_way_to_a_real_attempt,
        ]);
    };
    (run_leases, $make:expr) => {
        mod run_leases {
            #[allow(unused_imports)]
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_run_is_held_by_one_taker_until_freed() {
                let fixture = $make.await;
                $crate::contract::unwritten::a_run_is_held_by_one_taker_until_freed(
                    fixture.hot_index(),
                )
                .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn racing_takers_hold_each_run_once() {
                let fixture = $make.await;
                $crate::contract::unwritten::racing_takers_hold_each_run_once(fixture.hot_index())
                    .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_lapsed_run_lease_is_taken_over() {
                let fixture = $make.await;
                $crate::contract::unwritten::a_lapsed_run_lease_is_taken_over(
                    fixture.hot_index(),
                    fixture.time(),
                )
                .await;
            }
        }
    };
    (retention, $make:expr) => {
        $crate::storage_contract!(@cases retention, $make, store, [
            finished_occurrences_go_after_their_retention,
            purges_are_bounded_batches,
            old_idempotency_keys_and_deleted_timers_go,
            claims_take_only_their_rows_across_days,
            rotation_keeps_live_rows_and_dead_letters,
        ]);
    };
    (lifecycle, $make:expr) => {
        $crate::storage_contract!(@cases lifecycle, $make, store, [
            pause_notes_are_kept_until_enabled,
            timers_are_listed_by_state_name_prefix_and_labels,
            finished_timers_that_asked_are_removed_once_their_runs_ended,
            exclusive_claims_skip_while_another_occurrence_is_in_flight,
            buffer_one_keeps_one_occurrence_waiting_and_skips_the_rest,
            racing_exclusive_claims_of_one_timer_start_one,
            windowed_occurrences_are_due_at_their_place,
            cancel_other_ends_the_earlier_occurrence_in_flight,
            claims_tell_the_timer_version_now,
        ]);
    };
    (backfill, $make:expr) => {
        $crate::storage_contract!(@cases backfill, $make, store, [
            backfilled_occurrences_are_marked_and_added_once,
            backfilled_occurrences_are_claimed_under_their_own_policy,
            only_backfills_under_their_own_policy_are_held_for_exclusive_claims,
        ]);
    };
    (activity, $make:expr) => {
        $crate::storage_contract!(@cases activity, $make, store, [
            tallies_are_rewritten_per_writer_and_summed_on_read,
        ]);
    };
    (calendars, $make:expr) => {
        $crate::storage_contract!(@cases calendars, $make, store, [
            calendars_are_put_by_name_and_read_per_app,
        ]);
    };
    (shards, $make:expr) => {
        $crate::storage_contract!(@cases shards, $make, store, [
            a_broadcast_runs_shards_are_planned_once_and_recorded,
        ]);
    };
    (chains, $make:expr) => {
        $crate::storage_contract!(@cases chains, $make, store, [
            chain_steps_start_once_and_carry_their_parent,
        ]);
    };
    (notifications, $make:expr) => {
        $crate::storage_contract!(@cases notifications, $make, store, [
            settings_streaks_and_sent_notifications_are_kept_per_app,
        ]);
    };
    (credentials, $make:expr) => {
        $crate::storage_contract!(@cases credentials, $make, store, [
            tokens_are_found_by_id_until_revoked,
            each_app_gets_one_signing_secret,
            rotation_keeps_the_old_secret_for_its_grace,
        ]);
    };
    (hot_index, $make:expr) => {
        $crate::storage_contract!(@cases hot_index, $make, hot_index, [
            due_members_come_in_score_order_up_to_a_limit,
            re_adding_moves_a_member,
            removed_members_are_gone_but_the_shard_stays,
            shards_are_separated_by_minute_and_bucket,
            touched_shards_are_complete_without_members,
            added_members_leave_a_shard_incomplete_until_touched,
        ]);
    };
    (leases, $make:expr) => {
        mod leases {
            #[allow(unused_imports)]
            use super::*;
            $crate::storage_contract!(@lease_case $make, one_of_two_contenders_wins);
            $crate::storage_contract!(@lease_case $make, holder_renews_and_releases);
            $crate::storage_contract!(@lease_case $make, expired_lease_goes_to_a_new_token);
            $crate::storage_contract!(@lease_case $make, stale_token_can_neither_renew_nor_release);
        }
    };
    (membership, $make:expr) => {
        mod membership {
            #[allow(unused_imports)]
            use super::*;
            $crate::storage_contract!(@membership_case $make, heartbeats_show_every_live_member_sorted);
            $crate::storage_contract!(@membership_case $make, a_member_that_stops_heartbeating_lapses);
            $crate::storage_contract!(@membership_case $make, members_are_read_without_joining);
            $crate::storage_contract!(@membership_case $make, a_lease_held_by_a_departed_member_is_taken);
        }
    };
    (@membership_case $make:expr, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let fixture = $make.await;
            $crate::contract::membership::$case(
                fixture.membership(),
                fixture.leases(),
                fixture.time(),
            )
            .await;
        }
    };
    (@lease_case $make:expr, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let fixture = $make.await;
            $crate::contract::leases::$case(fixture.leases(), fixture.time()).await;
        }
    };
    (@cases $suite:ident, $make:expr, $getter:ident, [$($case:ident),* $(,)?]) => {
        mod $suite {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = $make.await;
                    $crate::contract::$suite::$case(fixture.$getter()).await;
                }
            )*
        }
    };
}
