-- Retention: the janitor deletes old finished occurrences, old idempotency keys and long
-- deleted timers in small batches. BRIN indexes find old rows by time at almost no cost to
-- writers (rows arrive roughly in time order, so block ranges stay narrow).
CREATE INDEX occurrences_run_at_brin ON occurrences USING brin (run_at) WITH (autosummarize = on);
CREATE INDEX idempotency_keys_created_brin ON idempotency_keys USING brin (created_at)
    WITH (autosummarize = on);
CREATE INDEX timers_deleted ON timers (deleted_at) WHERE deleted_at IS NOT NULL;
