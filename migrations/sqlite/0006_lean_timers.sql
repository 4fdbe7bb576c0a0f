-- Nothing to change on SQLite (PostgreSQL's 0006 moves spec from jsonb to json, and SQLite
-- stores text already); this keeps the version numbers of both schemas in step.
SELECT 1;
