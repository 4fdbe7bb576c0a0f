-- SQLite has no partitions (its janitor deletes in batches); this keeps the version numbers
-- of both schemas in step and adds the dead-letter index of migrations/postgres/0005.
CREATE INDEX occurrences_dead ON occurrences (run_at) WHERE status = 'dead';
