#!/usr/bin/env bash
# Runs a command (a benchmark) against a throwaway PostgreSQL that records every statement's
# cost (pg_stat_statements), then prints the statements that took the most time: calls, rows,
# time per row, buffer hits and WAL records per row. The server is the machine's PostgreSQL
# with its default settings plus the extension, so the figures compare with a bench run on
# the shared server (the extension adds a few per cent of its own).
#
#   scripts/pg-statements.sh target/release/chime-bench pipeline --scenarios steady --duration 60
set -euo pipefail

top=${PG_STATEMENTS_TOP:-12}
pg_bin() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [[ -x $dir/$1 ]] && { echo "$dir/$1"; return; }
    done
    command -v "$1"
}
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
initdb=$(pg_bin initdb) || { echo "pg-statements: needs PostgreSQL's server binaries (apt-get install postgresql)" >&2; exit 1; }
pg_ctl=$(pg_bin pg_ctl)

dir=$(mktemp -d /tmp/chime-pgstat.XXXXXX)
[[ $(id -u) -eq 0 ]] && chown postgres "$dir"
# shellcheck source=scripts/lib/ports.sh
source "$(dirname "$0")/lib/ports.sh"
free_port port

stop() {
    as_pg "$pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT INT TERM

as_pg "$initdb" -D "$dir/data" -U postgres -A trust >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
as_pg "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
url="postgres://postgres@127.0.0.1:$port/postgres"
psql -q "$url" -c "CREATE EXTENSION pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null

rc=0
CHIME_TEST_DATABASE_URL=$url "$(dirname "$0")/with-test-services.sh" "$@" || rc=$?

psql "$url" -P pager=off -c "
SELECT calls, rows,
       round(total_exec_time::numeric) AS total_ms,
       round((1000 * total_exec_time / greatest(rows, calls))::numeric, 1) AS us_per_row,
       round((shared_blks_hit + shared_blks_read)::numeric / greatest(rows, calls), 1) AS blocks_per_row,
       round(wal_records::numeric / greatest(rows, calls), 2) AS wal_records_per_row,
       round(wal_bytes::numeric / greatest(rows, calls)) AS wal_bytes_per_row,
       left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $top"
exit "$rc"
