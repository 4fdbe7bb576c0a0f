-- API tokens and callback signing secrets (issue 18).
--
-- A token is stored only as the SHA-256 of its text; the id is the token's public part,
-- so a request finds its row by primary key and compares hashes. Revoked rows stay for
-- the audit trail.
CREATE TABLE api_tokens (
    id          TEXT PRIMARY KEY,
    app         TEXT NOT NULL,
    name        TEXT,
    scopes      TEXT NOT NULL,
    hash        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT,
    revoked_at  BIGINT
);
CREATE INDEX api_tokens_app ON api_tokens (app, created_at) WHERE revoked_at IS NULL;

-- Each app's Standard Webhooks secrets: exactly one current (retires_at NULL), plus those
-- a rotation retired that still sign until their retires_at. Executors need the key
-- itself, so it is stored as is.
CREATE TABLE signing_secrets (
    app         TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    retires_at  BIGINT,
    PRIMARY KEY (app, secret)
);
CREATE UNIQUE INDEX signing_secrets_current ON signing_secrets (app) WHERE retires_at IS NULL;
