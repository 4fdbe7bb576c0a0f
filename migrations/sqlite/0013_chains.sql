-- Chains (issue 42): a run started by a chain step names its parent run
-- ("{timer_id}:{run_at_ms}"), which the claim hands to the executor for its deliveries; and
-- each step is recorded once per parent run and name, so an outcome recorded twice, on any
-- executor, starts it once.
ALTER TABLE occurrences ADD COLUMN parent TEXT;

CREATE TABLE chain_steps (
    parent_timer_id BIGINT NOT NULL,
    parent_run_at   BIGINT NOT NULL,
    step            TEXT   NOT NULL,
    -- on_success | on_failure
    on_outcome      TEXT   NOT NULL,
    app             TEXT   NOT NULL,
    -- started | skipped
    status          TEXT   NOT NULL,
    -- The occurrence it started.
    run_timer_id    BIGINT,
    run_at          BIGINT,
    reason          TEXT,
    at              BIGINT NOT NULL,
    PRIMARY KEY (parent_timer_id, parent_run_at, step)
);
-- The janitor's purge, oldest first.
CREATE INDEX chain_steps_at ON chain_steps (at);
