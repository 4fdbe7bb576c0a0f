-- Activity tallies (issue 20): per app, minute and executor process, the attempts made and a
-- lateness histogram, for the console's overview. Each executor rewrites its own rows of the
-- current minutes; readers sum over writers. `lateness` is a JSON array of bucket counts.
CREATE TABLE activity (
    app       TEXT   NOT NULL,
    minute    BIGINT NOT NULL,
    writer    TEXT   NOT NULL,
    fired     BIGINT NOT NULL,
    succeeded BIGINT NOT NULL,
    failed    BIGINT NOT NULL,
    dead      BIGINT NOT NULL,
    lateness  TEXT   NOT NULL,
    PRIMARY KEY (minute, app, writer)
);
