-- Runs written when they end (issue 39): a fast recurring timer's first attempts get no
-- occurrence row ahead of time; the row is inserted once, when the run ends. TRUE keeps
-- every timer written before this migration as it was: rows ahead.
ALTER TABLE timers ADD COLUMN written_ahead BOOLEAN NOT NULL DEFAULT TRUE;

-- The sweeper, and a shard rebuilt after Redis lost it, read the live timers whose runs
-- are unwritten, bucket by bucket.
CREATE INDEX timers_unwritten ON timers (bucket, id)
    WHERE NOT written_ahead AND enabled AND deleted_at IS NULL;

-- PostgreSQL-only mode: the leases under which executors take unwritten runs, beside the
-- hot index and as unlogged as it is (a crash empties it, as a Redis restart would).
CREATE UNLOGGED TABLE run_leases (
    timer_id BIGINT NOT NULL,
    run_at   BIGINT NOT NULL,
    until    BIGINT NOT NULL,
    PRIMARY KEY (timer_id, run_at)
);
