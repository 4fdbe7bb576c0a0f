-- Failure notifications (issue 42): each app's settings (JSON), the streaks of failed runs
-- per timer that `timer.failing` and `timer.recovered` are told from, and the notifications
-- sent lately (JSON), which the console shows. A timer's streak row exists only while its
-- runs fail, so most runs' successes find nothing to end.
CREATE TABLE notification_settings (
    app TEXT PRIMARY KEY,
    settings TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE failure_streaks (
    timer_id BIGINT PRIMARY KEY,
    failed BIGINT NOT NULL
);

CREATE TABLE notifications_sent (
    app TEXT NOT NULL,
    id TEXT NOT NULL,
    at BIGINT NOT NULL,
    sent TEXT NOT NULL,
    PRIMARY KEY (app, id)
);
CREATE INDEX notifications_sent_at ON notifications_sent (app, at);
