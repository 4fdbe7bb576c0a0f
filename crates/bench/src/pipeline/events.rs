//! What PostgreSQL did in the background during a run: checkpoints, and autovacuum or
//! autoanalyze of the scenario's own tables, each with the sample it was first seen in, so a
//! slow window of the report can be laid beside them.

use std::collections::BTreeMap;

use serde::Serialize;

use super::now_ms;

/// One background event, seen at most one sampling period after it happened.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct PgEvent {
    pub at_ms: i64,
    pub what: String,
}

/// Counters of the last sample.
#[derive(Default, PartialEq, Debug)]
struct Counts {
    checkpoints: i64,
    /// Per table of the scenario's schema: (autovacuums, autoanalyzes).
    tables: BTreeMap<String, (i64, i64)>,
}

pub(super) struct PgWatch {
    pool: sqlx::PgPool,
    last: Option<Counts>,
    pub events: Vec<PgEvent>,
}

impl PgWatch {
    pub async fn start(pool: sqlx::PgPool) -> Self {
        let mut w = Self {
            pool,
            last: None,
            events: Vec::new(),
        };
        w.last = w.counts().await;
        w
    }

    /// Reads the counters and records what changed since the last sample. A failed read
    /// is skipped: the events are a diagnosis, not a measurement.
    pub async fn sample(&mut self) {
        let Some(now) = self.counts().await else {
            return;
        };
        if let Some(last) = &self.last {
            let at_ms = now_ms();
            self.events.extend(
                changes(last, &now)
                    .into_iter()
                    .map(|what| PgEvent { at_ms, what }),
            );
        }
        self.last = Some(now);
    }

    async fn counts(&self) -> Option<Counts> {
        // PostgreSQL 15 keeps the checkpoint counters in pg_stat_bgwriter.
        let checkpoints: i64 = sqlx::query_scalar(
            "SELECT (checkpoints_timed + checkpoints_req)::bigint FROM pg_stat_bgwriter",
        )
        .fetch_one(&self.pool)
        .await
        .ok()?;
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables \
             WHERE schemaname = current_schema()",
        )
        .fetch_all(&self.pool)
        .await
        .ok()?;
        Some(Counts {
            checkpoints,
            tables: rows.into_iter().map(|(t, v, a)| (t, (v, a))).collect(),
        })
    }
}

fn changes(before: &Counts, after: &Counts) -> Vec<String> {
    let mut out = Vec::new();
    if after.checkpoints > before.checkpoints {
        out.push("checkpoint".to_owned());
    }
    for (table, (vacuums, analyzes)) in &after.tables {
        let (v0, a0) = before.tables.get(table).copied().unwrap_or((0, 0));
        if *vacuums > v0 {
            out.push(format!("autovacuum {table}"));
        }
        if *analyzes > a0 {
            out.push(format!("autoanalyze {table}"));
        }
    }
    out
}

/// The events of the window of `window_ms` starting `from_s` seconds after `start_ms`,
/// joined for a report row ("" when none).
pub(super) fn in_window(events: &[PgEvent], start_ms: i64, from_s: i64, window_ms: i64) -> String {
    let from = start_ms + from_s * 1_000;
    let mut seen: Vec<&str> = events
        .iter()
        .filter(|e| e.at_ms >= from && e.at_ms < from + window_ms)
        .map(|e| e.what.as_str())
        .collect();
    seen.dedup();
    seen.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_checkpoints_and_each_tables_vacuums() {
        let before = Counts {
            checkpoints: 3,
            tables: [("occurrences_p1".to_owned(), (1, 1))].into(),
        };
        let after = Counts {
            checkpoints: 4,
            tables: [
                ("occurrences_p1".to_owned(), (2, 1)),
                ("timers".to_owned(), (0, 1)),
            ]
            .into(),
        };
        assert_eq!(
            changes(&before, &after),
            [
                "checkpoint",
                "autovacuum occurrences_p1",
                "autoanalyze timers"
            ]
        );
        assert!(changes(&after, &after).is_empty());
    }

    #[test]
    fn events_fall_in_the_window_they_were_seen_in() {
        let e = |at_ms, what: &str| PgEvent {
            at_ms,
            what: what.into(),
        };
        let events = [
            e(1_000, "checkpoint"),
            e(12_000, "autovacuum t"),
            e(19_999, "autovacuum t"),
        ];
        assert_eq!(in_window(&events, 0, 0, 10_000), "checkpoint");
        assert_eq!(in_window(&events, 0, 10, 10_000), "autovacuum t");
        assert_eq!(in_window(&events, 0, 20, 10_000), "");
    }
}
