-- Chime schema v1: timers (durable definition) and occurrences (one row per due instant).
-- All instants are Unix milliseconds (BIGINT): no time-zone conversion ever happens in SQL.

CREATE SEQUENCE timers_id_seq AS BIGINT;

CREATE TABLE timers (
    id            BIGINT  PRIMARY KEY,
    app           TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    -- cron | every | at | after; duplicated out of spec for operators' queries.
    schedule_kind TEXT    NOT NULL,
    -- The whole TimerSpec (schedule, callback, retry, misfire, delivery) as JSON.
    spec          JSONB   NOT NULL,
    enabled       BOOLEAN NOT NULL,
    version       BIGINT  NOT NULL CHECK (version >= 1),
    bucket        INTEGER NOT NULL CHECK (bucket >= 0),
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL,
    deleted_at    BIGINT
);

-- Names are unique per app among live timers; a deleted timer frees its name.
CREATE UNIQUE INDEX timers_app_name_live ON timers (app, name) WHERE deleted_at IS NULL;
CREATE INDEX timers_app_live ON timers (app, id) WHERE deleted_at IS NULL;
-- The migrator pages through the enabled timers of one bucket.
CREATE INDEX timers_bucket_enabled ON timers (bucket, id) WHERE enabled AND deleted_at IS NULL;

-- No foreign key to timers: timers are only soft-deleted, and a per-row check would cost
-- the bulk materialization a measurable share of its throughput.
CREATE TABLE occurrences (
    timer_id        BIGINT  NOT NULL,
    run_at          BIGINT  NOT NULL,
    timer_version   BIGINT  NOT NULL,
    bucket          INTEGER NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN
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
);

-- Work not yet handed out, by due time: the shard fallback and the sweeper read this.
CREATE INDEX occurrences_claimable_due ON occurrences ((COALESCE(next_attempt_at, run_at)), bucket)
    WHERE status IN ('pending', 'retrying');
-- Claims whose holder may have died.
CREATE INDEX occurrences_running_lease ON occurrences (lease_until) WHERE status = 'running';
