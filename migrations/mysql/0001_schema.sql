-- Chime's schema on MySQL 8 / MariaDB 10.6+ (issue 21), equivalent to PostgreSQL's migrations
-- 0001–0011. Instants are Unix milliseconds (BIGINT). Where PostgreSQL has a partial or
-- expression index, a generated column stands in: NULL where the row is out of the index's
-- scope, since a UNIQUE index ignores NULLs.

-- PostgreSQL's timers_id_seq: one counter row, moved by `LAST_INSERT_ID(last_id + n)` in an
-- autocommit statement, so a block of ids is consecutive and no transaction holds the row.
CREATE TABLE timer_ids (
    one     TINYINT NOT NULL PRIMARY KEY CHECK (one = 1),
    last_id BIGINT  NOT NULL
) ENGINE = InnoDB;
INSERT INTO timer_ids (one, last_id) VALUES (1, 0);

CREATE TABLE timers (
    id                 BIGINT       NOT NULL PRIMARY KEY,
    app                VARCHAR(64)  NOT NULL,
    name               VARCHAR(512) NOT NULL,
    schedule_kind      VARCHAR(16)  NOT NULL,
    spec               LONGTEXT     NOT NULL,
    enabled            BOOLEAN      NOT NULL,
    version            BIGINT       NOT NULL CHECK (version >= 1),
    bucket             INT          NOT NULL CHECK (bucket >= 0),
    created_at         BIGINT       NOT NULL,
    updated_at         BIGINT       NOT NULL,
    deleted_at         BIGINT,
    materialized_until BIGINT       NOT NULL DEFAULT 0,
    paused_reason      TEXT,
    paused_at          BIGINT,
    paused_by          VARCHAR(256),
    -- The name while the timer lives: names are unique per app among live timers.
    live_name          VARCHAR(512) GENERATED ALWAYS AS (IF(deleted_at IS NULL, name, NULL)) STORED,
    UNIQUE KEY timers_app_name_live (app, live_name),
    KEY timers_app (app, id),
    KEY timers_bucket_watermark (bucket, materialized_until, id),
    KEY timers_deleted (deleted_at)
) ENGINE = InnoDB;

CREATE TABLE occurrences (
    timer_id        BIGINT      NOT NULL,
    run_at          BIGINT      NOT NULL,
    timer_version   BIGINT      NOT NULL,
    bucket          INT         NOT NULL,
    status          VARCHAR(16) NOT NULL DEFAULT 'pending' CHECK (status IN
                        ('pending', 'running', 'succeeded', 'retrying', 'failed', 'dead', 'skipped')),
    attempt         INT         NOT NULL DEFAULT 0,
    next_attempt_at BIGINT,
    lease_until     BIGINT,
    fired_at        BIGINT,
    lateness_ms     BIGINT,
    http_status     INT,
    output          TEXT,
    error           TEXT,
    backfill        VARCHAR(16),
    -- When work not yet handed out is due (PostgreSQL's claimable index expression).
    claimable_due   BIGINT GENERATED ALWAYS AS
        (IF(status IN ('pending', 'retrying'), COALESCE(next_attempt_at, run_at), NULL)) STORED,
    PRIMARY KEY (timer_id, run_at),
    KEY occurrences_claimable_due (claimable_due, bucket),
    KEY occurrences_running_lease (status, lease_until),
    KEY occurrences_run_at (run_at),
    KEY occurrences_dead (status, run_at)
) ENGINE = InnoDB;

CREATE TABLE idempotency_keys (
    app         VARCHAR(64)  NOT NULL,
    `key`       VARCHAR(256) NOT NULL,
    fingerprint VARCHAR(64)  NOT NULL,
    timer_id    BIGINT       NOT NULL,
    created_at  BIGINT       NOT NULL,
    PRIMARY KEY (app, `key`),
    KEY idempotency_keys_created (created_at)
) ENGINE = InnoDB;

CREATE TABLE api_tokens (
    id          VARCHAR(64)  NOT NULL PRIMARY KEY,
    app         VARCHAR(64)  NOT NULL,
    name        VARCHAR(512),
    scopes      VARCHAR(64)  NOT NULL,
    hash        VARCHAR(128) NOT NULL,
    created_at  BIGINT       NOT NULL,
    expires_at  BIGINT,
    revoked_at  BIGINT,
    KEY api_tokens_app (app, created_at)
) ENGINE = InnoDB;

CREATE TABLE signing_secrets (
    app         VARCHAR(64)  NOT NULL,
    secret      VARCHAR(128) NOT NULL,
    created_at  BIGINT       NOT NULL,
    retires_at  BIGINT,
    -- One current secret per app.
    current_app VARCHAR(64) GENERATED ALWAYS AS (IF(retires_at IS NULL, app, NULL)) STORED,
    PRIMARY KEY (app, secret),
    UNIQUE KEY signing_secrets_current (current_app)
) ENGINE = InnoDB;

CREATE TABLE calendars (
    app        VARCHAR(64)  NOT NULL,
    name       VARCHAR(256) NOT NULL,
    dates      LONGTEXT     NOT NULL,
    updated_at BIGINT       NOT NULL,
    PRIMARY KEY (app, name)
) ENGINE = InnoDB;

CREATE TABLE activity (
    minute    BIGINT       NOT NULL,
    app       VARCHAR(64)  NOT NULL,
    writer    VARCHAR(128) NOT NULL,
    fired     BIGINT       NOT NULL,
    succeeded BIGINT       NOT NULL,
    failed    BIGINT       NOT NULL,
    dead      BIGINT       NOT NULL,
    lateness  TEXT         NOT NULL,
    PRIMARY KEY (minute, app, writer)
) ENGINE = InnoDB;
