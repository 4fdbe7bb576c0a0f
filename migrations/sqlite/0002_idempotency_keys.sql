-- Same as migrations/postgres/0002.
CREATE TABLE idempotency_keys (
    app         TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    timer_id    INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (app, key)
) WITHOUT ROWID;
