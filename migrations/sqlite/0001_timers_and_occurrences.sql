-- Chime schema v1 for the embedded store; same shape as migrations/postgres/0001.
-- All instants are Unix milliseconds (INTEGER).

CREATE TABLE timers (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    app           TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    schedule_kind TEXT    NOT NULL,
    spec          TEXT    NOT NULL CHECK (json_valid(spec)),
    enabled       INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    version       INTEGER NOT NULL CHECK (version >= 1),
    bucket        INTEGER NOT NULL CHECK (bucket >= 0),
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    deleted_at    INTEGER
);

CREATE UNIQUE INDEX timers_app_name_live ON timers (app, name) WHERE deleted_at IS NULL;
CREATE INDEX timers_app_live ON timers (app, id) WHERE deleted_at IS NULL;
CREATE INDEX timers_bucket_enabled ON timers (bucket, id) WHERE enabled = 1 AND deleted_at IS NULL;

CREATE TABLE occurrences (
    timer_id        INTEGER NOT NULL,
    run_at          INTEGER NOT NULL,
    timer_version   INTEGER NOT NULL,
    bucket          INTEGER NOT NULL,
    status          TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN
                        ('pending', 'running', 'succeeded', 'retrying', 'failed', 'dead', 'skipped')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    lease_until     INTEGER,
    fired_at        INTEGER,
    lateness_ms     INTEGER,
    http_status     INTEGER,
    output          TEXT,
    error           TEXT,
    PRIMARY KEY (timer_id, run_at)
) WITHOUT ROWID;

CREATE INDEX occurrences_claimable_due ON occurrences (COALESCE(next_attempt_at, run_at), bucket)
    WHERE status IN ('pending', 'retrying');
CREATE INDEX occurrences_running_lease ON occurrences (lease_until) WHERE status = 'running';
