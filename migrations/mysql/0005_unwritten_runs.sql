-- Runs written when they end (issue 39), as PostgreSQL's 0016: fast recurring timers' first
-- attempts get no occurrence row ahead of time.
ALTER TABLE timers
    ADD COLUMN written_ahead BOOLEAN NOT NULL DEFAULT TRUE,
    ADD KEY timers_unwritten (written_ahead, bucket, id);
