-- Create requests that carried an idempotency key (REST Idempotency-Key, gRPC request_id):
-- a repeat with the same fingerprint returns the timer created the first time.
CREATE TABLE idempotency_keys (
    app         TEXT   NOT NULL,
    key         TEXT   NOT NULL,
    -- Hash of the canonical request; a different request under the same key is refused.
    fingerprint TEXT   NOT NULL,
    timer_id    BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (app, key)
);
