#!/usr/bin/env bash
# What a firing costs PostgreSQL under six designs of the occurrence row, one client,
# commits without waiting for the disk (synchronous_commit off: CPU, not fsync), each on a
# schema of its own (the migrations, a day partition) that it drops at the end:
#   today   the run written ahead (ahead.sql, the migrator's insert), then a claim that marks
#           it running and an outcome (today.sql): three row writes, none HOT;
#   hot     the same, but the claim sets only columns no index names (hot.sql): its update is
#           HOT, the row has room for it (fillfactor 70);
#   create  nothing written ahead: the claim inserts the row, the outcome updates it
#           (create.sql): two row writes;
#   nolock  as today, but the claim finds its rows without locking them first (no
#           FOR UPDATE SKIP LOCKED) and updates them by tuple id, re-checking the status
#           (nolock.sql): what the separate lock costs;
#   lease   as today, but the claim kept off the row (its lease elsewhere, Redis say): the
#           claim only reads the claimable rows, the outcome records the attempt on the row
#           still pending (lease.sql): two row writes, one of them ahead;
#   once    nothing written ahead and the claim kept off the row: the claim only looks for
#           the row, the outcome inserts it finished (once.sql): one row write. What unwritten
#           runs do (docs/pipeline.md, "Unwritten runs").
# Prints microseconds per firing for each; the claim and outcome rounds carry K keys.
#   scripts/pg-claim-cycle/designs.sh [K]      (default 50, a steady 5,000/s batch; PGHOST etc. apply)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k=${1:-50}
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres} PGDATABASE=${PGDATABASE:-test}
pgbench=$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)
P="psql -v ON_ERROR_STOP=1 -q"
trap '$P -c "DROP SCHEMA IF EXISTS exp_design CASCADE" >/dev/null 2>&1' EXIT
lo=$(( $(date +%s) / 86400 * 86400000 ))

# A fresh schema; $1: write the runs ahead (3,000,000: 5,000 timers x 600 s); $2: the HOT variant.
schema() {
  $P -c "DROP SCHEMA IF EXISTS exp_design CASCADE; CREATE SCHEMA exp_design;" 2>/dev/null
  for f in "$here"/../../migrations/postgres/*.sql; do
    (echo "SET search_path = exp_design;"; cat "$f") | $P -f - >/dev/null
  done
  $P <<SQL
SET search_path = exp_design;
CREATE TABLE occ_day (LIKE occurrences INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE occurrences ATTACH PARTITION occ_day FOR VALUES FROM ($lo) TO ($(( lo + 86400000 )));
CREATE SEQUENCE seq;
SQL
  if [[ $2 == hot ]]; then
    $P -c "ALTER TABLE exp_design.occurrences ADD COLUMN claimed_until BIGINT; ALTER TABLE exp_design.occ_day SET (fillfactor = 70);"
  fi
  if [[ $1 == ahead ]]; then
    $P -c "INSERT INTO exp_design.occurrences (timer_id, run_at, timer_version, bucket)
           SELECT t, $lo + 3600000 + s * 1000 + t % 1000, 1, t % 16
           FROM generate_series(1, 5000) t, generate_series(0, 599) s;"
  fi
  # once is left unanalyzed, as a new day's partition is (created ahead, empty, never
  # analyzed): analyzed empty, its look's cached generic plan scans the whole partition per
  # key until it is analyzed again (600 µs a firing here, against 30; in the service the
  # janitor does that within a second of the partition doubling).
  [[ $2 == unanalyzed ]] || $P -c "VACUUM ANALYZE exp_design.occurrences;"
}

# Microseconds per key of one round of $1 carrying $2 keys.
per_key() {
  "$pgbench" -n -M prepared -c 1 -T 10 -D k="$2" -D lo="$lo" -f "$here/designs/$1.sql" 2>&1 \
    | awk -v k="$2" '/latency average/ {printf "%.1f", $4 * 1000 / k}'
}

schema none plain
ahead=$(per_key ahead 1000)
schema ahead plain
today=$(per_key today "$k")
schema ahead hot
hot=$(per_key hot "$k")
schema none plain
create=$(per_key create "$k")
schema ahead plain
nolock=$(per_key nolock "$k")
schema ahead plain
lease=$(per_key lease "$k")
schema none unanalyzed
once=$(per_key once "$k")
awk -v a="$ahead" -v t="$today" -v h="$hot" -v c="$create" -v n="$nolock" -v l="$lease" -v o="$once" -v k="$k" 'BEGIN {
  printf "rounds of %d keys, microseconds of PostgreSQL per firing:\n", k
  printf "  today   %6.1f  (written ahead %.1f + claim and outcome %.1f)\n", a + t, a, t
  printf "  hot     %6.1f  (written ahead %.1f + HOT claim and outcome %.1f)\n", a + h, a, h
  printf "  create  %6.1f  (claim inserts, outcome updates)\n", c
  printf "  nolock  %6.1f  (written ahead %.1f + unlocked claim and outcome %.1f)\n", a + n, a, n
  printf "  lease   %6.1f  (written ahead %.1f + claim read only, outcome %.1f)\n", a + l, a, l
  printf "  once    %6.1f  (nothing ahead, claim looks for the row, outcome inserts it)\n", o
}'
