-- Backfill (issue 19): an occurrence added by POST /v1/timers/{id}/backfill carries the
-- overlap policy it is claimed under; NULL for every other occurrence. Nullable, so adding
-- it rewrites no rows (the day partitions inherit it).
ALTER TABLE occurrences ADD COLUMN backfill TEXT;
