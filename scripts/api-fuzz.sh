#!/usr/bin/env bash
# Fuzzes the REST API from its own OpenAPI document with schemathesis: a real chime-gateway
# on a throwaway database, every operation, checking for server errors, undocumented
# statuses, content types and schema violations. Run it through `make api-fuzz`, which
# provides CHIME_TEST_DATABASE_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

examples=${FUZZ_EXAMPLES:-100}
tools=target/pytools
if [[ ! -x $tools/bin/schemathesis ]]; then
    echo "api-fuzz: installing schemathesis into $tools (PyPI)" >&2
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q schemathesis
fi
cargo build -q -p chime-api-gateway -p chime-migrator

base=${CHIME_TEST_DATABASE_URL:?run through make api-fuzz}
db=chime_fuzz_$$
url="${base%/*}/$db"
psql "$base" -qc "CREATE DATABASE $db"
gateway_pid=""
cleanup() {
    [[ -n $gateway_pid ]] && kill "$gateway_pid" 2>/dev/null && wait "$gateway_pid" 2>/dev/null
    psql "$base" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
}
trap cleanup EXIT

free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 30000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
    done
}
http_port=$(free_port)
grpc_port=$(free_port)
export CHIME_DATABASE_URL=$url CHIME_LOG=warn
target/debug/chime-migrator migrate
CHIME_HTTP_ADDR=127.0.0.1:$http_port CHIME_GRPC_ADDR=127.0.0.1:$grpc_port \
    target/debug/chime-gateway > target/api-fuzz-gateway.log 2>&1 &
gateway_pid=$!
for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done

mkdir -p target/api-fuzz
"$tools/bin/schemathesis" run "http://127.0.0.1:$http_port/openapi.json" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection \
    --max-examples "$examples" \
    --report junit --report-junit-path target/api-fuzz/junit.xml
