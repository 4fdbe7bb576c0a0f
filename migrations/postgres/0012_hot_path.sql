-- PostgreSQL-only mode (issue 21): the hot index, leases and group membership in the
-- database instead of Redis. UNLOGGED, like Redis without persistence: cheap to write (no WAL),
-- and emptied by a crash restart, after which schedulers read the occurrences table (the
-- shard fallback) until the migrator has written the shards again. Instants are Unix ms.

-- A shard is present until `expires_at` (its minute's end plus the shard retention).
CREATE UNLOGGED TABLE hot_shards (
    minute     BIGINT  NOT NULL,
    bucket     INTEGER NOT NULL,
    expires_at BIGINT  NOT NULL,
    PRIMARY KEY (minute, bucket)
);

CREATE UNLOGGED TABLE hot_members (
    minute   BIGINT  NOT NULL,
    bucket   INTEGER NOT NULL,
    timer_id BIGINT  NOT NULL,
    run_at   BIGINT  NOT NULL,
    due      BIGINT  NOT NULL,
    PRIMARY KEY (minute, bucket, timer_id, run_at)
);
-- A shard's members by due time: what a scheduler reads every tick.
CREATE INDEX hot_members_due ON hot_members (minute, bucket, due);

CREATE UNLOGGED TABLE leases (
    name   TEXT   PRIMARY KEY,
    token  TEXT   NOT NULL,
    until  BIGINT NOT NULL,
    -- Grows by one each time the lease changes hands.
    fence  BIGINT NOT NULL
);

CREATE UNLOGGED TABLE group_members (
    grp    TEXT   NOT NULL,
    member TEXT   NOT NULL,
    until  BIGINT NOT NULL,
    PRIMARY KEY (grp, member)
);
