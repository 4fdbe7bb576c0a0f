-- Retention; same purpose as migrations/postgres/0004 (SQLite has no BRIN: plain indexes).
CREATE INDEX occurrences_run_at ON occurrences (run_at);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
CREATE INDEX timers_deleted ON timers (deleted_at) WHERE deleted_at IS NOT NULL;
