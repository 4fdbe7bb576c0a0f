//! What the pipeline scenarios measure, from the sink's record and from /proc: lateness
//! percentiles, deliveries and duplicates, CPU time per process.

use std::collections::{BTreeMap, HashSet};

use chime_domain::Timestamp;
use serde::Serialize;

use crate::sink::Received;

/// One callback as the sink saw it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub key: String,
    pub scheduled_ms: i64,
    pub at_ms: i64,
    /// When the executor sent it (`X-Chime-Sent-At`), where the callback says.
    pub sent_ms: Option<i64>,
}

impl Delivery {
    pub fn lateness_ms(&self) -> i64 {
        self.at_ms - self.scheduled_ms
    }
}

/// The callbacks among `received` that carry Chime's headers.
pub fn deliveries(received: &[Received]) -> Vec<Delivery> {
    received
        .iter()
        .filter_map(|r| {
            let key = r.header("idempotency-key")?.to_owned();
            let scheduled = Timestamp::parse_rfc3339(r.header("x-chime-scheduled-at")?).ok()?;
            let sent = r.header("x-chime-sent-at").map(Timestamp::parse_rfc3339);
            Some(Delivery {
                key,
                scheduled_ms: scheduled.as_millis(),
                at_ms: r.at_ms,
                sent_ms: sent.and_then(Result::ok).map(|t| t.as_millis()),
            })
        })
        .collect()
}

/// Distinct keys delivered, and how many deliveries repeated a key.
pub fn distinct_and_duplicates(deliveries: &[Delivery]) -> (usize, usize) {
    let distinct: HashSet<&str> = deliveries.iter().map(|d| d.key.as_str()).collect();
    (distinct.len(), deliveries.len() - distinct.len())
}

/// Lateness percentiles in milliseconds, first delivery of each key only (a duplicate's
/// lateness says nothing about timing).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Lateness {
    pub count: usize,
    pub p50_ms: i64,
    pub p90_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

impl Lateness {
    pub fn of<'a>(deliveries: impl IntoIterator<Item = &'a Delivery>) -> Self {
        Self::of_ms(firsts(deliveries).map(Delivery::lateness_ms).collect())
    }

    /// Percentiles of `late` (milliseconds, any order).
    fn of_ms(mut late: Vec<i64>) -> Self {
        late.sort_unstable();
        Self {
            count: late.len(),
            p50_ms: nearest_rank(&late, 0.50),
            p90_ms: nearest_rank(&late, 0.90),
            p99_ms: nearest_rank(&late, 0.99),
            max_ms: late.last().copied().unwrap_or(0),
        }
    }
}

/// The first delivery of each key among `deliveries`.
fn firsts<'a>(
    deliveries: impl IntoIterator<Item = &'a Delivery>,
) -> impl Iterator<Item = &'a Delivery> {
    let mut seen = HashSet::new();
    deliveries
        .into_iter()
        .filter(move |d| seen.insert(d.key.as_str()))
}

/// Lateness split at the send (`X-Chime-Sent-At`): how late the executors sent (due → sent)
/// and how long the requests took to reach the sink (sent → arrived: the executor's write,
/// the kernel and the sink, which share the machine's cores). First deliveries that say when
/// they were sent only; `None` when none does.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SentSplit {
    pub before_send: Lateness,
    pub in_transit: Lateness,
}

impl SentSplit {
    pub fn of<'a>(deliveries: impl IntoIterator<Item = &'a Delivery>) -> Option<Self> {
        let (before, transit): (Vec<i64>, Vec<i64>) = firsts(deliveries)
            .filter_map(|d| Some((d.sent_ms? - d.scheduled_ms, d.at_ms - d.sent_ms?)))
            .unzip();
        (!before.is_empty()).then(|| Self {
            before_send: Lateness::of_ms(before),
            in_transit: Lateness::of_ms(transit),
        })
    }
}

/// The `p` quantile of `sorted` by nearest rank: the smallest value with at least `p` of the
/// sample at or below it; the default when the sample is empty.
pub fn nearest_rank<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A burst's drain rate: `delivered` over the time from `due_ms` to the last arrival.
pub fn drain_per_second(deliveries: &[Delivery], due_ms: i64, delivered: usize) -> f64 {
    let last = deliveries.iter().map(|d| d.at_ms).max().unwrap_or(due_ms);
    delivered as f64 / ((last - due_ms).max(1) as f64 / 1000.0)
}

/// CPU seconds of every process but the bench's own (driver and sink), from a
/// [`CpuSample::per_thousand`] table.
pub fn total_but_sink(cpu: &BTreeMap<String, f64>) -> f64 {
    cpu.iter()
        .filter(|(label, _)| label.as_str() != "chime-bench")
        .map(|(_, s)| s)
        .sum()
}

/// Lateness per window of `window_ms` by scheduled time, from `start_ms`.
pub fn windows(deliveries: &[Delivery], start_ms: i64, window_ms: i64) -> Vec<(i64, Lateness)> {
    by_window(deliveries, start_ms, window_ms)
        .into_iter()
        .map(|(w, ds)| (w * window_ms / 1000, Lateness::of(ds)))
        .collect()
}

/// [`SentSplit`] per window of `window_ms` by scheduled time, from `start_ms`, keyed by the
/// window's first second as in [`windows`].
pub fn split_windows(
    deliveries: &[Delivery],
    start_ms: i64,
    window_ms: i64,
) -> BTreeMap<i64, SentSplit> {
    by_window(deliveries, start_ms, window_ms)
        .into_iter()
        .filter_map(|(w, ds)| Some((w * window_ms / 1000, SentSplit::of(ds)?)))
        .collect()
}

/// The seconds (by scheduled time, from `start_ms`) whose p99 lateness passed `limit_ms`,
/// each with how late it was and where: one such second alone fails its 10-s window's p99
/// once a tenth of its firings are late, so a slow window is read here.
pub fn late_seconds(deliveries: &[Delivery], start_ms: i64, limit_ms: i64) -> Vec<LateSecond> {
    by_window(deliveries, start_ms, 1_000)
        .into_iter()
        .filter_map(|(second, ds)| {
            let lateness = Lateness::of(ds.iter().copied());
            (lateness.p99_ms > limit_ms).then(|| LateSecond {
                second,
                lateness,
                sent_split: SentSplit::of(ds),
            })
        })
        .collect()
}

/// One second of [`late_seconds`].
#[derive(Debug, Clone, Serialize)]
pub struct LateSecond {
    pub second: i64,
    pub lateness: Lateness,
    pub sent_split: Option<SentSplit>,
}

/// `deliveries` grouped by window of `window_ms` by scheduled time, keyed by the window's
/// number from `start_ms`.
fn by_window(
    deliveries: &[Delivery],
    start_ms: i64,
    window_ms: i64,
) -> BTreeMap<i64, Vec<&Delivery>> {
    let mut by_window: BTreeMap<i64, Vec<&Delivery>> = BTreeMap::new();
    for d in deliveries {
        let w = (d.scheduled_ms - start_ms).div_euclid(window_ms.max(1));
        by_window.entry(w).or_default().push(d);
    }
    by_window
}

/// CPU seconds (user + system) of each process, by label and pid. Kept per process so that
/// one that exits between two samples (a database connection closed, an autovacuum worker
/// done) takes only its own time out of the difference, not what the others used meanwhile.
#[derive(Debug, Clone, Default)]
pub struct CpuSample(BTreeMap<(String, u32), f64>);

/// Clock ticks per second of /proc's CPU times: `getconf CLK_TCK`, else Linux's usual 100.
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process, in ticks.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// Pids whose command name is `comm`, e.g. every `postgres` backend.
pub fn pids_named(comm: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .collect()
}

impl CpuSample {
    /// The given processes, this one (driver and sink) as `chime-bench`, and every
    /// `postgres` and `redis-server` process summed (and `mariadbd`, when one runs).
    pub fn take(processes: &[(String, u32)]) -> Self {
        let hz = ticks_per_second();
        let mut out = BTreeMap::new();
        let mut add = |label: &str, pids: &[u32]| {
            for pid in pids {
                if let Some(t) = ticks(*pid) {
                    *out.entry((label.to_owned(), *pid)).or_insert(0.0) += t as f64 / hz;
                }
            }
        };
        for (label, pid) in processes {
            add(label, &[*pid]);
        }
        add("chime-bench", &[std::process::id()]);
        add("postgres", &pids_named("postgres"));
        add("redis-server", &pids_named("redis-server"));
        let mariadb = pids_named("mariadbd");
        if !mariadb.is_empty() {
            add("mariadbd", &mariadb);
        }
        Self(out)
    }

    /// CPU seconds each label used between `self` and `later`: per process alive at
    /// `later`, its time then less its time at `self` (all of it, if it started since).
    pub fn used(&self, later: &CpuSample) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for ((label, pid), t) in &later.0 {
            let before = self.0.get(&(label.clone(), *pid)).copied().unwrap_or(0.0);
            *out.entry(label.clone()).or_insert(0.0) += (t - before).max(0.0);
        }
        out
    }

    /// CPU seconds per 1,000 firings of each process between `self` and `later`.
    pub fn per_thousand(&self, later: &CpuSample, firings: usize) -> BTreeMap<String, f64> {
        let k = (firings as f64 / 1000.0).max(f64::MIN_POSITIVE);
        self.used(later)
            .into_iter()
            .map(|(label, used)| (label, (used / k * 1000.0).round() / 1000.0))
            .collect()
    }
}

/// Resident memory (VmRSS) of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resident memory of each process over a run, sampled at a fixed period.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RssTrace {
    pub period_ms: u64,
    /// Per process label: MiB at each sample.
    pub mib: BTreeMap<String, Vec<f64>>,
}

/// How one process's memory went: the highest during warm-up and after it.
#[derive(Debug, Clone, Serialize)]
pub struct RssGrowth {
    pub process: String,
    pub warm_mib: f64,
    pub after_mib: f64,
    pub last_mib: f64,
    /// Whether it stayed within its warm-up high (plus 10 % and 4 MiB of allocator slack).
    pub flat: bool,
}

impl RssTrace {
    pub fn sample(&mut self, processes: &[(String, u32)]) {
        for (label, pid) in processes {
            if let Some(kib) = rss_kib(*pid) {
                self.mib
                    .entry(label.clone())
                    .or_default()
                    .push(kib as f64 / 1024.0);
            }
        }
    }

    /// Each process's high during the first `warm_samples` samples against its high after.
    pub fn growth(&self, warm_samples: usize) -> Vec<RssGrowth> {
        let high = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        self.mib
            .iter()
            .filter(|(_, v)| v.len() > warm_samples)
            .map(|(process, v)| {
                let (warm, after) = v.split_at(warm_samples.max(1));
                let (warm_mib, after_mib) = (high(warm), high(after));
                RssGrowth {
                    process: process.clone(),
                    warm_mib,
                    after_mib,
                    last_mib: v.last().copied().unwrap_or(0.0),
                    flat: after_mib <= warm_mib * 1.1 + 4.0,
                }
            })
            .collect()
    }
}

/// The commit the benchmark ran at, for its report.
pub fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(key: &str, scheduled_ms: i64, at_ms: i64) -> Delivery {
        Delivery {
            key: key.into(),
            scheduled_ms,
            at_ms,
            sent_ms: None,
        }
    }

    #[test]
    fn lateness_splits_at_the_send_time_the_callback_names() {
        let sent = |key: &str, scheduled, sent, at| Delivery {
            sent_ms: Some(sent),
            ..d(key, scheduled, at)
        };
        let ds = [
            sent("a", 1_000, 1_002, 1_010),
            sent("b", 2_000, 2_030, 2_031),
            // A duplicate and a callback without the header count in neither part.
            sent("a", 1_000, 1_500, 1_600),
            d("c", 3_000, 3_900),
        ];
        let split = SentSplit::of(&ds).unwrap();
        assert_eq!((split.before_send.count, split.in_transit.count), (2, 2));
        assert_eq!(
            (split.before_send.p50_ms, split.before_send.max_ms),
            (2, 30)
        );
        assert_eq!((split.in_transit.p50_ms, split.in_transit.max_ms), (1, 8));
        assert!(SentSplit::of(&[d("c", 3_000, 3_900)]).is_none());
    }

    #[test]
    fn percentiles_use_the_nearest_rank_and_skip_duplicates() {
        let mut ds: Vec<Delivery> = (1..=100).map(|i| d(&i.to_string(), 0, i)).collect();
        ds.push(d("100", 0, 5_000));
        let l = Lateness::of(&ds);
        assert_eq!(
            (l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms),
            (100, 50, 90, 99, 100)
        );
        assert_eq!(distinct_and_duplicates(&ds), (100, 1));
    }

    #[test]
    fn drain_and_cpu_totals() {
        let ds = [d("a", 0, 1_000), d("b", 0, 2_000)];
        assert_eq!(drain_per_second(&ds, 0, 2), 1.0);
        assert_eq!(drain_per_second(&[], 0, 0), 0.0);
        let cpu = BTreeMap::from([
            ("chime-bench".to_owned(), 1.0),
            ("postgres".to_owned(), 0.25),
            ("executor-0".to_owned(), 0.5),
        ]);
        assert_eq!(total_but_sink(&cpu), 0.75);
    }

    #[test]
    fn windows_split_by_scheduled_time() {
        let ds = [
            d("a", 1_000, 1_002),
            d("b", 11_500, 11_530),
            d("c", 20_999, 21_000),
        ];
        let w = windows(&ds, 1_000, 10_000);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].0, w[0].1.count, w[0].1.max_ms), (0, 1, 2));
        assert_eq!((w[1].0, w[1].1.count, w[1].1.max_ms), (10, 2, 30));
    }

    #[test]
    fn late_seconds_name_only_the_seconds_past_the_limit() {
        let mut ds: Vec<Delivery> = (0..100)
            .map(|i| d(&format!("on{i}"), 1_000 + i, 1_002 + i))
            .collect();
        ds.extend((0..100).map(|i| d(&format!("late{i}"), 3_000 + i, 3_080 + i)));
        let late = late_seconds(&ds, 1_000, 50);
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!((late[0].second, late[0].lateness.p99_ms), (2, 80));
        assert!(late_seconds(&ds, 1_000, 80).is_empty());
    }

    #[test]
    fn memory_growth_compares_the_high_after_warm_up_with_the_high_during_it() {
        let mut t = RssTrace::default();
        t.mib
            .insert("flat".into(), vec![10.0, 100.0, 98.0, 104.0, 99.0]);
        t.mib
            .insert("leaky".into(), vec![10.0, 100.0, 120.0, 140.0, 160.0]);
        t.mib.insert("short".into(), vec![10.0]);
        let g = t.growth(2);
        assert_eq!(g.len(), 2);
        assert!(g[0].flat && g[0].process == "flat" && g[0].warm_mib == 100.0);
        assert!(!g[1].flat && g[1].after_mib == 160.0 && g[1].last_mib == 160.0);
        t.sample(&[("me".into(), std::process::id())]);
        assert!(t.mib["me"][0] > 0.0);
    }

    #[test]
    fn a_process_gone_between_samples_takes_only_its_own_time_out() {
        let at = |entries: &[(&str, u32, f64)]| {
            CpuSample(
                entries
                    .iter()
                    .map(|(l, p, t)| (((*l).to_owned(), *p), *t))
                    .collect(),
            )
        };
        // Backend 1 exits with 5 s used; 2 works 0.5 s; 3 starts and works 0.25 s.
        let before = at(&[("postgres", 1, 5.0), ("postgres", 2, 1.0)]);
        let after = at(&[("postgres", 2, 1.5), ("postgres", 3, 0.25)]);
        assert_eq!(before.used(&after)["postgres"], 0.75);
        assert_eq!(before.per_thousand(&after, 1_000)["postgres"], 0.75);
    }

    #[test]
    fn this_process_uses_some_cpu() {
        let before = CpuSample::take(&[]);
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = CpuSample::take(&[]);
        assert!(before.used(&after)["chime-bench"] > 0.0);
    }
}
