#!/usr/bin/env bash
# Runs a command with CHIME_TEST_DATABASE_URL and CHIME_TEST_REDIS_URL pointing at a reachable
# PostgreSQL and Redis: the ones given (or the local defaults) when they answer, otherwise
# throwaway servers started here from the machine's packages and removed on exit.
#
#   scripts/with-test-services.sh cargo nextest run --workspace
set -euo pipefail

db_url=${CHIME_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
redis_url=${CHIME_TEST_REDIS_URL:-redis://127.0.0.1:6379}
scratch=""
pg_dir=""
redis_port=""

say() { echo "with-test-services: $*" >&2; }

cleanup() {
    local rc=$?
    if [[ -n $pg_dir && -f $pg_dir/data/postmaster.pid ]]; then
        as_pg pg_ctl -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    if [[ -n $redis_port ]]; then
        redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
    fi
    [[ -n $scratch ]] && rm -rf "$scratch"
    exit "$rc"
}
trap cleanup EXIT INT TERM

# PostgreSQL refuses to run as root; use its own account when we are root.
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    local port
    for _ in $(seq 50); do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    say "no free port found"
    exit 1
}

pg_bin() {
    command -v "$1" 2>/dev/null && return
    ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1
}

postgres_reachable() {
    command -v psql >/dev/null 2>&1 || return 1
    psql "$1" -Atqc 'select 1' >/dev/null 2>&1
}

redis_reachable() {
    command -v redis-cli >/dev/null 2>&1 || return 1
    [[ $(redis-cli -u "$1" ping 2>/dev/null) == PONG ]]
}

ensure_scratch() {
    if [[ -z $scratch ]]; then
        scratch=$(mktemp -d /tmp/chime-test-services.XXXXXX)
        chmod 755 "$scratch"
    fi
}

start_postgres() {
    local initdb pg_ctl port
    initdb=$(pg_bin initdb || true)
    pg_ctl=$(pg_bin pg_ctl || true)
    if [[ -z $initdb || -z $pg_ctl ]] || ! command -v psql >/dev/null 2>&1; then
        say "error: PostgreSQL is not reachable at $db_url and no server is installed: apt-get install postgresql"
        exit 1
    fi
    ensure_scratch
    pg_dir=$scratch/pg
    mkdir -p "$pg_dir"
    [[ $(id -u) -eq 0 ]] && chown postgres "$pg_dir"
    port=$(free_port)
    say "PostgreSQL not reachable at $db_url; starting a throwaway one on port $port"
    as_pg "$initdb" -D "$pg_dir/data" -U postgres -A trust --no-sync >"$scratch/initdb.log" 2>&1 ||
        { cat "$scratch/initdb.log" >&2; exit 1; }
    as_pg "$pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
        -o "-p $port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null || { cat "$pg_dir/server.log" >&2; exit 1; }
    db_url="postgres://postgres@127.0.0.1:$port/postgres"
}

start_redis() {
    if ! command -v redis-server >/dev/null 2>&1; then
        say "error: Redis is not reachable at $redis_url and redis-server is not installed: apt-get install redis-server"
        exit 1
    fi
    ensure_scratch
    redis_port=$(free_port)
    say "Redis not reachable at $redis_url; starting a throwaway one on port $redis_port"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$scratch" --daemonize yes --logfile "$scratch/redis.log" >/dev/null
    for _ in $(seq 100); do
        redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis_url="redis://127.0.0.1:$redis_port"
}

postgres_reachable "$db_url" || start_postgres
redis_reachable "$redis_url" || start_redis
postgres_reachable "$db_url" || { say "error: PostgreSQL at $db_url does not answer"; exit 1; }
redis_reachable "$redis_url" || { say "error: Redis at $redis_url does not answer"; exit 1; }

# The observability tests run a real Prometheus (and promtool); install Debian's when missing.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian's prometheus for the observability tests"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null 2>&1 ||
            say "warning: apt-get install prometheus failed"
    fi
fi

export CHIME_TEST_DATABASE_URL=$db_url
export CHIME_TEST_REDIS_URL=$redis_url
"$@"
