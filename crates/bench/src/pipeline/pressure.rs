//! How full the machine's cores were, window by window: the kernel's CPU pressure
//! (`/proc/pressure/cpu`, "some"), the share of the time in which at least one runnable
//! task waited for a core. The same build's windows go from a few ms to hundreds on this
//! machine from one hour to the next; this says which windows ran on a full box, so a slow
//! window can be told from a slow build without a sampler beside the run.

use serde::Serialize;

use super::now_ms;

/// Where the kernel keeps it (Linux 4.20 and later, when built with PSI).
const PSI_CPU: &str = "/proc/pressure/cpu";

/// One reading: Unix ms, and the microseconds some task has waited for a core since boot.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    at_ms: i64,
    some_us: u64,
}

/// Readings of a run, taken about once a second.
#[derive(Debug, Default)]
pub(super) struct Pressure {
    readings: Vec<Reading>,
}

/// One window's pressure: the share of its time in which a task waited for a core.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub(super) struct WindowPressure {
    pub from_second: i64,
    /// 0 to 1.
    pub some: f64,
}

impl Pressure {
    /// Reads once a second until `end_ms` (Unix ms); stops at once where the kernel has no
    /// pressure file, and then nothing is reported.
    pub async fn read_until(end_ms: i64) -> Self {
        let mut p = Self::default();
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        while now_ms() < end_ms {
            tick.tick().await;
            if p.sample().is_none() {
                break;
            }
        }
        p
    }

    /// Takes one reading; `None` where the kernel has no pressure file.
    fn sample(&mut self) -> Option<()> {
        let text = std::fs::read_to_string(PSI_CPU).ok()?;
        let some_us = some_total(&text)?;
        self.readings.push(Reading {
            at_ms: now_ms(),
            some_us,
        });
        Some(())
    }

    /// Each window of `window_ms` from `start_ms` that readings cover on both sides, with
    /// its share of time under pressure (the counter read at the window's edges, taken
    /// linearly between the nearest readings).
    pub fn windows(&self, start_ms: i64, window_ms: i64) -> Vec<WindowPressure> {
        let Some(last) = self.readings.last() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut from = start_ms;
        while from + window_ms <= last.at_ms {
            // `at` has no value before the first reading: such a window is left out.
            if let (Some(a), Some(b)) = (self.at(from), self.at(from + window_ms)) {
                out.push(WindowPressure {
                    from_second: (from - start_ms) / 1000,
                    some: ((b - a) / (window_ms as f64 * 1000.0)).clamp(0.0, 1.0),
                });
            }
            from += window_ms;
        }
        out
    }

    /// The counter at `at_ms`, between the readings around it; `None` outside them.
    fn at(&self, at_ms: i64) -> Option<f64> {
        let i = self.readings.partition_point(|r| r.at_ms < at_ms);
        let after = self.readings.get(i)?;
        if after.at_ms == at_ms {
            return Some(after.some_us as f64);
        }
        let before = self.readings.get(i.checked_sub(1)?)?;
        let span = (after.at_ms - before.at_ms) as f64;
        let part = (at_ms - before.at_ms) as f64 / span;
        Some(before.some_us as f64 + part * (after.some_us as f64 - before.some_us as f64))
    }
}

/// `total=` of the "some" line: "some avg10=1.00 avg60=0.50 avg300=0.10 total=12345".
fn some_total(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// "0–10 s 78 %, 10–20 s 31 %, …" for a report row.
pub(super) fn describe(windows: &[WindowPressure], window_s: i64) -> String {
    windows
        .iter()
        .map(|w| {
            format!(
                "{}–{} s {:.0} %",
                w.from_second,
                w.from_second + window_s,
                w.some * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(readings: &[(i64, u64)]) -> Pressure {
        Pressure {
            readings: readings
                .iter()
                .map(|&(at_ms, some_us)| Reading { at_ms, some_us })
                .collect(),
        }
    }

    #[test]
    fn the_some_total_is_read_from_the_kernels_text() {
        let text = "some avg10=19.46 avg60=34.65 avg300=51.45 total=842512086\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(some_total(text), Some(842_512_086));
        assert_eq!(some_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(some_total(""), None);
    }

    #[test]
    fn a_window_is_the_share_of_its_time_under_pressure() {
        // 10 s windows from 1,000 ms; the counter gains 2 s in the first window (20 %)
        // and 9 s in the second (90 %), read once a second.
        let readings: Vec<(i64, u64)> = (1..=21)
            .map(|s| {
                let at = s * 1000;
                let us = if at <= 11_000 {
                    (at - 1_000) as u64 * 200
                } else {
                    2_000_000 + (at - 11_000) as u64 * 900
                };
                (at, us)
            })
            .collect();
        let w = run(&readings).windows(1_000, 10_000);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(w[0].from_second, 0);
        assert!((w[0].some - 0.2).abs() < 1e-9, "{w:?}");
        assert_eq!(w[1].from_second, 10);
        assert!((w[1].some - 0.9).abs() < 1e-9, "{w:?}");
        assert_eq!(describe(&w, 10), "0–10 s 20 %, 10–20 s 90 %");
    }

    #[test]
    fn edges_between_readings_are_taken_linearly() {
        // Two readings 20 s apart at half pressure: the window from 5 s to 15 s lies
        // between them.
        let w = run(&[(0, 0), (20_000, 10_000_000)]).windows(5_000, 10_000);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!((w[0].some - 0.5).abs() < 1e-9, "{w:?}");
    }

    #[test]
    fn windows_the_readings_do_not_cover_are_left_out() {
        // Readings from 5 s to 25 s: the window from 0 s starts before them, the one from
        // 20 s ends after them.
        let readings: Vec<(i64, u64)> = (5..=25).map(|s| (s * 1000, s as u64 * 1000)).collect();
        let w = run(&readings).windows(0, 10_000);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].from_second, 10);
        assert!(run(&[]).windows(0, 10_000).is_empty());
    }
}
