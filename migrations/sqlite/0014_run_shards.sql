-- Broadcast to a worker group (issue 42): each shard of a broadcast run, planned at its
-- first attempt (one per worker of the group connected then), with what came of it, so a
-- retry delivers only the shards that did not succeed, with their own index and the total.
CREATE TABLE run_shards (
    timer_id BIGINT  NOT NULL,
    run_at   BIGINT  NOT NULL,
    idx      INTEGER NOT NULL,
    total    INTEGER NOT NULL,
    -- pending | succeeded | failed
    status   TEXT    NOT NULL,
    attempt  INTEGER NOT NULL,
    worker   TEXT,
    error    TEXT,
    PRIMARY KEY (timer_id, run_at, idx)
);
-- The janitor's purge, oldest first.
CREATE INDEX run_shards_run_at ON run_shards (run_at);
