-- Time partitions for occurrences: one partition per UTC day of run_at, created ahead and
-- dropped whole by the janitor once retention no longer keeps that day, so removing
-- millions of old rows costs a catalog change instead of millions of deletes (and their
-- dead tuples and vacuum work).
--
-- occurrences_default holds every row no day partition covers: rows written before this
-- migration, rows due further ahead than the partitions reach, and the dead letters and
-- unfinished rows a dropped day leaves behind. The janitor moves rows out of it when it
-- creates the day they fall in, and deletes its old rows in small batches.
ALTER TABLE occurrences RENAME TO occurrences_default;
ALTER INDEX occurrences_pkey RENAME TO occurrences_default_pkey;
ALTER INDEX occurrences_claimable_due RENAME TO occurrences_default_claimable_due;
ALTER INDEX occurrences_running_lease RENAME TO occurrences_default_running_lease;
ALTER INDEX occurrences_run_at_brin RENAME TO occurrences_default_run_at_brin;

CREATE TABLE occurrences (
    timer_id        BIGINT  NOT NULL,
    run_at          BIGINT  NOT NULL,
    timer_version   BIGINT  NOT NULL,
    bucket          INTEGER NOT NULL,
    -- Named as on the old table: a partition must carry its parent's checks by name.
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CONSTRAINT occurrences_status_check CHECK (status IN
                        ('pending', 'running', 'succeeded', 'retrying', 'failed', 'dead', 'skipped')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    lease_until     BIGINT,
    fired_at        BIGINT,
    lateness_ms     BIGINT,
    http_status     INTEGER,
    output          TEXT,
    error           TEXT,
    PRIMARY KEY (timer_id, run_at)
) PARTITION BY RANGE (run_at);

-- The same indexes as before but the time index, now partitioned: attaching the old table
-- below adopts its indexes instead of building new ones.
CREATE INDEX occurrences_claimable_due ON occurrences ((COALESCE(next_attempt_at, run_at)), bucket)
    WHERE status IN ('pending', 'retrying');
CREATE INDEX occurrences_running_lease ON occurrences (lease_until) WHERE status = 'running';

ALTER TABLE occurrences ATTACH PARTITION occurrences_default DEFAULT;

-- Only the default partition is searched by time (its old rows go in batches; claims find
-- their rows in it by run_at). A B-tree, not BRIN: rows moved in from dropped days and far
-- future ones arrive out of time order. Day partitions need no time index: they go whole.
DROP INDEX occurrences_default_run_at_brin;
CREATE INDEX occurrences_default_run_at ON occurrences_default (run_at);

-- Dead letters by time: listed by operators, and kept when their day's partition goes.
CREATE INDEX occurrences_dead ON occurrences (run_at) WHERE status = 'dead';
