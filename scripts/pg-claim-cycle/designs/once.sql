-- once: nothing written ahead and the claim kept off the row (a lease elsewhere): the claim only probes for a row, the outcome inserts the finished one.

SET synchronous_commit = off;
SELECT nextval('exp_design.seq') - 1 AS n \gset
SELECT nextval('exp_design.seq') - 1 AS n \gset
SELECT o.timer_id, o.run_at, o.status FROM UNNEST(:ids::bigint[], :runs::bigint[]) AS k(timer_id, run_at) CROSS JOIN LATERAL (SELECT * FROM exp_design.occurrences o WHERE o.timer_id = k.timer_id AND o.run_at = k.run_at OFFSET 0) o;
INSERT INTO exp_design.occurrences (timer_id, run_at, timer_version, bucket, status, attempt, fired_at, lateness_ms, http_status, output, error, next_attempt_at) SELECT u.timer_id, u.run_at, u.ver, u.bucket, u.status, u.attempt, u.fired_at, u.fired_at - u.run_at, u.http_status, u.output, u.error, u.next_attempt_at FROM UNNEST(:ids::bigint[], :runs::bigint[], :ver::bigint[], :buckets::integer[], :att::integer[], :st::text[], :fired::bigint[], :http::integer[], :nulls::text[], :nulls::text[], :nnull::bigint[]) AS u(timer_id, run_at, ver, bucket, attempt, status, fired_at, http_status, output, error, next_attempt_at) ON CONFLICT (timer_id, run_at) DO NOTHING;
