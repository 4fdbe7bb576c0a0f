//! Where PostgreSQL's time per firing went, statement by statement, from
//! `pg_stat_statements` where the server has it (the throwaway PostgreSQL of
//! `scripts/with-test-services.sh` does). The CPU figures say how much the database cost;
//! this says which of Chime's statements to make cheaper. Execution time is wall time
//! inside the server, close to its CPU on a box where nothing waits on a disk.

use std::collections::HashMap;

use serde::Serialize;

/// Statements reported, the costliest first.
const TOP: usize = 6;
/// Characters of a statement's text kept: enough to tell Chime's statements apart.
const TEXT: usize = 90;

/// One statement's totals at one instant.
#[derive(Debug, Clone, PartialEq)]
struct Totals {
    calls: i64,
    exec_ms: f64,
    rows: i64,
    text: String,
}

/// The server's statement totals at one instant, by query id.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct PgStatements(HashMap<i64, Totals>);

/// One statement between two samples, per firing.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(super) struct StatementTime {
    pub statement: String,
    pub exec_us_per_firing: f64,
    pub calls_per_1000: f64,
    pub rows_per_firing: f64,
}

impl PgStatements {
    /// `None` without a pool, or when the server has no `pg_stat_statements`: a diagnosis,
    /// and a run without it still measures everything else.
    pub async fn take(pool: Option<&sqlx::PgPool>) -> Option<Self> {
        let pool = pool?;
        let schema: String = sqlx::query_scalar(
            "SELECT n.nspname::text FROM pg_extension e \
             JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'",
        )
        .fetch_optional(pool)
        .await
        .ok()??;
        let rows: Vec<(i64, i64, f64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            // The schema is the extension's, named by the server itself.
            "SELECT s.queryid, s.calls, s.total_exec_time, s.rows, s.query \
             FROM \"{}\".pg_stat_statements s \
             WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND s.queryid IS NOT NULL",
            schema.replace('"', "\"\"")
        )))
        .fetch_all(pool)
        .await
        .ok()?;
        Some(Self(
            rows.into_iter()
                .map(|(id, calls, exec_ms, rows, text)| {
                    (
                        id,
                        Totals {
                            calls,
                            exec_ms,
                            rows,
                            text,
                        },
                    )
                })
                .collect(),
        ))
    }

    /// The statements that took the most time from `self` to `later`, per one of `firings`.
    pub fn per_firing(&self, later: &Self, firings: usize) -> Vec<StatementTime> {
        let n = firings.max(1) as f64;
        let mut out: Vec<StatementTime> = later
            .0
            .iter()
            .filter_map(|(id, after)| {
                let before = self.0.get(id);
                let exec_ms = after.exec_ms - before.map_or(0.0, |b| b.exec_ms);
                let calls = after.calls - before.map_or(0, |b| b.calls);
                (calls > 0 && exec_ms > 0.0).then(|| StatementTime {
                    statement: shorten(&after.text),
                    exec_us_per_firing: exec_ms * 1000.0 / n,
                    calls_per_1000: calls as f64 * 1000.0 / n,
                    rows_per_firing: (after.rows - before.map_or(0, |b| b.rows)) as f64 / n,
                })
            })
            .collect();
        out.sort_by(|a, b| b.exec_us_per_firing.total_cmp(&a.exec_us_per_firing));
        out.truncate(TOP);
        out
    }
}

/// The report's row: the costliest statements, each as µs per firing and its start.
fn describe(top: &[StatementTime]) -> String {
    top.iter()
        .take(3)
        .map(|s| {
            let start: String = s.statement.chars().take(32).collect();
            format!("{:.1} µs {start}…", s.exec_us_per_firing)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Adds the costliest statements between `samples` to `o`'s figures (set before, as an
/// object) and its table, per one of `firings`; nothing without both samples.
pub(super) fn statements_row(
    o: &mut super::Outcome,
    samples: Option<(PgStatements, PgStatements)>,
    firings: usize,
) {
    let Some((before, after)) = samples else {
        return;
    };
    let top = before.per_firing(&after, firings);
    o.row("postgres time per firing, by statement", describe(&top), "");
    o.figures["postgres_statements"] = serde_json::json!(top);
}

/// `text` on one line, its whitespace collapsed, cut to [`TEXT`] characters.
fn shorten(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(TEXT)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(calls: i64, exec_ms: f64, rows: i64, text: &str) -> Totals {
        Totals {
            calls,
            exec_ms,
            rows,
            text: text.to_owned(),
        }
    }

    #[test]
    fn statements_are_the_differences_per_firing_costliest_first() {
        let before = PgStatements(HashMap::from([
            (1, totals(10, 100.0, 10, "SELECT a")),
            (2, totals(5, 50.0, 0, "UPDATE b")),
            (3, totals(7, 70.0, 7, "idle since")),
        ]));
        let after = PgStatements(HashMap::from([
            (1, totals(110, 1_100.0, 2_010, "SELECT a")),
            (2, totals(205, 4_050.0, 1_000, "UPDATE\n   b")),
            (3, totals(7, 70.0, 7, "idle since")),
            (4, totals(1, 2.0, 1, "SELECT new")),
        ]));
        let top = before.per_firing(&after, 1_000);
        let names: Vec<&str> = top.iter().map(|s| s.statement.as_str()).collect();
        // Unchanged statements are left out; the text is on one line.
        assert_eq!(names, ["UPDATE b", "SELECT a", "SELECT new"]);
        assert_eq!(top[0].exec_us_per_firing, 4_000.0);
        assert_eq!(top[0].calls_per_1000, 200.0);
        assert_eq!(top[0].rows_per_firing, 1.0);
        assert_eq!(top[1].exec_us_per_firing, 1_000.0);
        assert_eq!(top[1].rows_per_firing, 2.0);
        assert!(describe(&top).starts_with("4000.0 µs UPDATE b…; 1000.0 µs SELECT a…"));
    }

    /// Against the test server: with the extension loaded (the throwaway PostgreSQL of
    /// `make test`), a statement run between two samples is counted; without it, no sample.
    #[tokio::test]
    async fn samples_count_the_statements_run_between_them_on_a_real_server() {
        let pool = sqlx::PgPool::connect(&chime_storage::testkit::database_url())
            .await
            .expect("the test PostgreSQL");
        let loaded: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        let before = PgStatements::take(Some(&pool)).await;
        assert_eq!(before.is_some(), loaded);
        let Some(before) = before else { return };
        for i in 0..3 {
            sqlx::query("SELECT $1::int + 1 AS pgstatements_probe")
                .bind(i)
                .execute(&pool)
                .await
                .unwrap();
        }
        let after = PgStatements::take(Some(&pool)).await.unwrap();
        let (id, probe) = after
            .0
            .iter()
            .find(|(_, t)| t.text.contains("pgstatements_probe"))
            .expect("the probe is recorded");
        let earlier = before.0.get(id).map_or(0, |t| t.calls);
        assert_eq!(probe.calls - earlier, 3);
        assert!(probe.exec_ms > 0.0);
    }

    #[test]
    fn long_statements_are_cut_and_at_most_the_top_are_kept() {
        let long = format!("SELECT {}", "x, ".repeat(100));
        let after = PgStatements(
            (0..10)
                .map(|i| (i, totals(1, (i + 1) as f64, 0, &long)))
                .collect(),
        );
        let top = PgStatements::default().per_firing(&after, 0);
        assert_eq!(top.len(), TOP);
        assert!(top.iter().all(|s| s.statement.chars().count() == TEXT));
        assert_eq!(top[0].exec_us_per_firing, 10_000.0);
    }
}
