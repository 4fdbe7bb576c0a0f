#!/usr/bin/env bash
# Runs a command against a real chime-gateway on a throwaway database, with
# CHIME_GATEWAY_URL (REST), CHIME_GATEWAY_GRPC and CHIME_GATEWAY_TOKEN (its admin token) set; stops the gateway and drops the
# database afterwards. Needs CHIME_TEST_DATABASE_URL (run it under with-test-services.sh).
# PROFILE=release builds and runs optimised binaries (benchmarks); default debug.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/ports.sh
source scripts/lib/ports.sh

profile=${PROFILE:-debug}
# The whole workspace, as `make test` builds it: one package alone resolves other features
# for the shared dependencies and would compile much of the tree again.
if [[ $profile == release ]]; then
    cargo build -q --release --workspace --bins
else
    make -s build
fi
bin=target/$profile

base=${CHIME_TEST_DATABASE_URL:?run under scripts/with-test-services.sh}
db=chime_gw_$$
url="${base%/*}/$db"
psql "$base" -qc "CREATE DATABASE $db"
gateway_pid=""
cleanup() {
    local rc=$?
    if [[ -n $gateway_pid ]]; then
        kill "$gateway_pid" 2>/dev/null || true
        wait "$gateway_pid" 2>/dev/null || true
    fi
    psql "$base" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
    exit "$rc"
}
trap cleanup EXIT INT TERM

token="with-gateway-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
free_port http_port
free_port grpc_port
mkdir -p target
CHIME_DATABASE_URL=$url "$bin/chime-migrator" migrate ||
    { echo "with-gateway: chime-migrator migrate failed on $url" >&2; exit 1; }
CHIME_DATABASE_URL=$url CHIME_LOG=${CHIME_LOG:-warn} CHIME_BOOTSTRAP_TOKEN=$token \
    CHIME_HTTP_ADDR=127.0.0.1:$http_port CHIME_GRPC_ADDR=127.0.0.1:$grpc_port \
    "$bin/chime-gateway" > target/gateway-under-test.log 2>&1 &
gateway_pid=$!
for _ in $(seq 200); do
    curl -fs "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1 && break
    if ! kill -0 "$gateway_pid" 2>/dev/null; then
        echo "with-gateway: the gateway exited before it was ready (ports $http_port, $grpc_port); its log:" >&2
        cat target/gateway-under-test.log >&2
        exit 1
    fi
    sleep 0.05
done

export CHIME_GATEWAY_URL=http://127.0.0.1:$http_port
export CHIME_GATEWAY_GRPC=http://127.0.0.1:$grpc_port
export CHIME_GATEWAY_TOKEN=$token
"$@"
