-- Rolling materialization: every fire time of a timer before materialized_until has an
-- occurrence row (Unix ms; 9223372036854775807 once the schedule has no further fire time).
-- The gateway sets it with a timer's first occurrences, in the same transaction; the
-- migrator extends the timers whose watermark comes within half the lead window.
-- 0 for timers written before this migration: the migrator extends them on its next pass.
ALTER TABLE timers ADD COLUMN materialized_until BIGINT NOT NULL DEFAULT 0;

-- The migrator reads the enabled timers of one bucket by watermark, oldest first.
CREATE INDEX timers_bucket_watermark ON timers (bucket, materialized_until, id)
    WHERE enabled AND deleted_at IS NULL;

-- After CHIME_BUCKETS shrinks, the migrator finds the live timers whose bucket is out of range.
CREATE INDEX timers_bucket_live ON timers (bucket) WHERE deleted_at IS NULL;
