-- Failure notifications (issue 42), as PostgreSQL's 0013: each app's settings (JSON), the
-- streaks of failed runs per timer, and the notifications sent lately (JSON).
CREATE TABLE notification_settings (
    app        VARCHAR(64) NOT NULL PRIMARY KEY,
    settings   LONGTEXT    NOT NULL,
    updated_at BIGINT      NOT NULL
) ENGINE = InnoDB;

CREATE TABLE failure_streaks (
    timer_id BIGINT NOT NULL PRIMARY KEY,
    failed   BIGINT NOT NULL
) ENGINE = InnoDB;

CREATE TABLE notifications_sent (
    app  VARCHAR(64)  NOT NULL,
    id   VARCHAR(255) NOT NULL,
    at   BIGINT       NOT NULL,
    sent LONGTEXT     NOT NULL,
    PRIMARY KEY (app, id),
    KEY notifications_sent_at (app, at)
) ENGINE = InnoDB;
