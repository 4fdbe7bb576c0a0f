-- Chains (issue 42), as PostgreSQL's 0014: a chained run's parent run on the occurrence,
-- and each step recorded once per parent run and name.
ALTER TABLE occurrences ADD COLUMN parent VARCHAR(64) NULL;

CREATE TABLE chain_steps (
    parent_timer_id BIGINT       NOT NULL,
    parent_run_at   BIGINT       NOT NULL,
    step            VARCHAR(512) NOT NULL,
    on_outcome      VARCHAR(16)  NOT NULL,
    app             VARCHAR(64)  NOT NULL,
    status          VARCHAR(16)  NOT NULL,
    run_timer_id    BIGINT       NULL,
    run_at          BIGINT       NULL,
    reason          TEXT         NULL,
    at              BIGINT       NOT NULL,
    PRIMARY KEY (parent_timer_id, parent_run_at, step),
    KEY chain_steps_at (at)
) ENGINE = InnoDB;
