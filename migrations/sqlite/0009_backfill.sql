-- Backfill (issue 19): an occurrence added by POST /v1/timers/{id}/backfill carries the
-- overlap policy it is claimed under; NULL for every other occurrence.
ALTER TABLE occurrences ADD COLUMN backfill TEXT;
