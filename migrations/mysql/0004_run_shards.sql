-- Broadcast to a worker group (issue 42), as PostgreSQL's 0015: each shard of a broadcast
-- run with what came of it.
CREATE TABLE run_shards (
    timer_id BIGINT      NOT NULL,
    run_at   BIGINT      NOT NULL,
    idx      INT         NOT NULL,
    total    INT         NOT NULL,
    status   VARCHAR(16) NOT NULL,
    attempt  INT         NOT NULL,
    worker   VARCHAR(255) NULL,
    error    TEXT        NULL,
    PRIMARY KEY (timer_id, run_at, idx),
    KEY run_shards_run_at (run_at)
) ENGINE = InnoDB;
