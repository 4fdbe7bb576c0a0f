-- Rolling materialization; same shape as migrations/postgres/0003.
ALTER TABLE timers ADD COLUMN materialized_until INTEGER NOT NULL DEFAULT 0;

CREATE INDEX timers_bucket_watermark ON timers (bucket, materialized_until, id)
    WHERE enabled = 1 AND deleted_at IS NULL;

CREATE INDEX timers_bucket_live ON timers (bucket) WHERE deleted_at IS NULL;
