-- Pause notes (issue 19): why, when and by which token a timer was disabled, shown until it
-- is enabled again. Nullable, so the change rewrites no rows.
ALTER TABLE timers ADD COLUMN paused_reason TEXT;
ALTER TABLE timers ADD COLUMN paused_at BIGINT;
ALTER TABLE timers ADD COLUMN paused_by TEXT;
