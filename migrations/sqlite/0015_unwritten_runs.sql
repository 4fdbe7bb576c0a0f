-- Runs written when they end (issue 39), as PostgreSQL's 0016: fast recurring timers' first
-- attempts get no occurrence row ahead of time.
ALTER TABLE timers ADD COLUMN written_ahead BOOLEAN NOT NULL DEFAULT 1;
CREATE INDEX timers_unwritten ON timers (bucket, id)
    WHERE NOT written_ahead AND enabled AND deleted_at IS NULL;
