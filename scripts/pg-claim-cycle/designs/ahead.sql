-- The migrator's part of today's design and the HOT one: the runs written ahead, :k a statement
-- (the insert-if-absent as crates/storage/src/postgres/occurrences.rs sends it, without the
-- adoption of older versions, which a steady load never takes).
SET synchronous_commit = off;
SELECT nextval('exp_design.seq') - 1 AS n \gset
SELECT array_agg(i % 5000 + 1)::text AS ids, array_agg(:lo::bigint + 3600000 + (i / 5000) * 1000 + (i % 5000 + 1) % 1000)::text AS runs, array_agg(1)::text AS att, array_agg('succeeded'::text)::text AS st, array_agg(:lo::bigint + 3600000 + (i / 5000) * 1000 + 3)::text AS fired, array_agg(200)::text AS http, array_agg(NULL::text)::text AS nulls, array_agg(NULL::bigint)::text AS nnull, array_agg(1::bigint)::text AS ver, array_agg((i % 5000 + 1) % 16)::text AS buckets FROM generate_series(:n::bigint * :k::bigint, :n::bigint * :k::bigint + :k::bigint - 1) i \gset
INSERT INTO exp_design.occurrences (timer_id, run_at, timer_version, bucket, next_attempt_at) SELECT * FROM UNNEST(:ids::bigint[], :runs::bigint[], :ver::bigint[], :buckets::integer[], :nnull::bigint[]) ON CONFLICT (timer_id, run_at) DO NOTHING;
