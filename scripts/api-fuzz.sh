#!/usr/bin/env bash
# Fuzzes the REST API from its own OpenAPI document with schemathesis against a real
# chime-gateway: every operation, checking for server errors, undocumented statuses,
# content types, schema violations and accepted invalid input, with a valid (admin) token.
# Run it via `make api-fuzz`.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=target/pytools
if [[ ! -x $tools/bin/schemathesis ]]; then
    echo "api-fuzz: installing schemathesis into $tools (PyPI)" >&2
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q schemathesis
fi
mkdir -p target/api-fuzz
# shellcheck disable=SC2016 # expanded by the inner shell, once the gateway is up
scripts/with-gateway.sh bash -c '"$0/bin/schemathesis" run "$CHIME_GATEWAY_URL/openapi.json" \
    --header "Authorization: Bearer $CHIME_GATEWAY_TOKEN" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection \
    --max-examples "${FUZZ_EXAMPLES:-100}" \
    --report junit --report-junit-path target/api-fuzz/junit.xml' "$tools"
