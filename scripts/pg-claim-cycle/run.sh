#!/usr/bin/env bash
# What a claim round costs PostgreSQL against how many keys it carries: the executor's claim
# statement then its outcome statement for k keys (cycle.sql, as the executor sends them,
# prepared), one client, on a schema of its own holding 3,000,000 pending occurrences in a day
# partition (5,000 timers x 600 s), which it drops at the end.
#   scripts/pg-claim-cycle/run.sh [k ...]      (default: 1 5 25 125 500; PGHOST etc. apply)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres} PGDATABASE=${PGDATABASE:-test}
pgbench=$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)
P="psql -v ON_ERROR_STOP=1 -q"
trap '$P -c "DROP SCHEMA IF EXISTS exp_claim CASCADE" >/dev/null 2>&1' EXIT
$P -c "DROP SCHEMA IF EXISTS exp_claim CASCADE; CREATE SCHEMA exp_claim;" 2>/dev/null
for f in "$here"/../../migrations/postgres/*.sql; do
  (echo "SET search_path = exp_claim;"; cat "$f") | $P -f - >/dev/null
done
lo=$(( $(date +%s) / 86400 * 86400000 ))
$P <<SQL
SET search_path = exp_claim;
CREATE TABLE occ_day (LIKE occurrences INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE occurrences ATTACH PARTITION occ_day FOR VALUES FROM ($lo) TO ($(( lo + 86400000 )));
INSERT INTO occurrences (timer_id, run_at, timer_version, bucket)
SELECT t, $lo + 3600000 + s * 1000 + t % 1000, 1, t % 16
FROM generate_series(1, 5000) t, generate_series(0, 599) s;
VACUUM ANALYZE occurrences;
CREATE SEQUENCE seq;
SQL
for k in "${@:-1 5 25 125 500}"; do
  for kk in $k; do
    ms=$("$pgbench" -n -M prepared -c 1 -T 8 -D k="$kk" -D lo="$lo" -f "$here/cycle.sql" 2>&1 \
      | awk '/latency average/ {print $4}')
    echo "keys $kk: $ms ms per claim + outcome round"
  done
done
