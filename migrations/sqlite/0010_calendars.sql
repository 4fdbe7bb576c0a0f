-- Exclusion calendars (issue 19): an app's named sets of dates its timers may exclude.
-- `dates` is a JSON array of "YYYY-MM-DD" and "YYYY-MM-DD/YYYY-MM-DD" strings.
CREATE TABLE calendars (
    app TEXT NOT NULL,
    name TEXT NOT NULL,
    dates TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app, name)
);
