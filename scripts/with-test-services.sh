#!/usr/bin/env bash
# Runs a command with CHIME_TEST_DATABASE_URL, CHIME_TEST_REDIS_URL, CHIME_TEST_MYSQL_URL,
# CHIME_TEST_NATS_URL and CHIME_TEST_AMQP_URL pointing at a reachable PostgreSQL, Redis,
# MySQL/MariaDB, NATS (JetStream) and RabbitMQ: the ones given (or the local defaults) when
# they answer, otherwise throwaway servers started here from the machine's packages and
# removed on exit.
#
#   scripts/with-test-services.sh cargo nextest run --workspace
set -euo pipefail
# shellcheck source=scripts/lib/ports.sh
source "$(dirname "$0")/lib/ports.sh"

db_url=${CHIME_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
redis_url=${CHIME_TEST_REDIS_URL:-redis://127.0.0.1:6379}
mysql_url=${CHIME_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
nats_url=${CHIME_TEST_NATS_URL:-nats://127.0.0.1:4222}
amqp_url=${CHIME_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
nats_pid=""
rabbit_pid=""
scratch=""
pg_dir=""
redis_port=""
mariadb_pid=""

say() { echo "with-test-services: $*" >&2; }

cleanup() {
    local rc=$?
    if [[ -n $pg_dir && -f $pg_dir/data/postmaster.pid ]]; then
        as_pg pg_ctl -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    if [[ -n $redis_port ]]; then
        redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
    fi
    if [[ -n $mariadb_pid ]]; then
        kill "$mariadb_pid" 2>/dev/null || true
        wait "$mariadb_pid" 2>/dev/null || true
    fi
    # One process each (nats-server; the Erlang VM rabbitmq-server execs into): killed by pid.
    for pid in $nats_pid $rabbit_pid; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
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
    free_port port
    say "starting a throwaway PostgreSQL on port $port (max_connections=300)"
    as_pg "$initdb" -D "$pg_dir/data" -U postgres -A trust --no-sync >"$scratch/initdb.log" 2>&1 ||
        { cat "$scratch/initdb.log" >&2; exit 1; }
    # pg_stat_statements, where the server ships it, lets the bench say which statements
    # its PostgreSQL time per firing went to.
    local statements=""
    if [[ -f $(dirname "$(dirname "$(readlink -f "$initdb")")")/lib/pg_stat_statements.so ]]; then
        statements="-c shared_preload_libraries=pg_stat_statements"
    fi
    as_pg "$pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
        -o "-p $port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 $statements" \
        start >/dev/null || { cat "$pg_dir/server.log" >&2; exit 1; }
    db_url="postgres://postgres@127.0.0.1:$port/postgres"
    if [[ -n $statements ]]; then
        psql "$db_url" -qc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null 2>&1 || true
    fi
}

start_redis() {
    if ! command -v redis-server >/dev/null 2>&1; then
        say "error: Redis is not reachable at $redis_url and redis-server is not installed: apt-get install redis-server"
        exit 1
    fi
    ensure_scratch
    free_port redis_port
    say "Redis not reachable at $redis_url; starting a throwaway one on port $redis_port"
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$scratch" --daemonize yes --logfile "$scratch/redis.log" >/dev/null
    for _ in $(seq 100); do
        redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis_url="redis://127.0.0.1:$redis_port"
}

# A given CHIME_TEST_MYSQL_URL is used as it is; the local default is probed.
mysql_reachable() {
    [[ -n ${CHIME_TEST_MYSQL_URL:-} ]] && return 0
    command -v mariadb >/dev/null 2>&1 || return 1
    mariadb -h 127.0.0.1 -P 3306 -u root -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null 2>&1
}

start_mariadb() {
    local mariadbd install port dir
    mariadbd=$(command -v mariadbd 2>/dev/null || ls /usr/sbin/mariadbd 2>/dev/null || true)
    install=$(command -v mariadb-install-db 2>/dev/null || true)
    if [[ -z $mariadbd || -z $install ]]; then
        say "error: MySQL/MariaDB is not reachable at $mysql_url and mariadb-server is not installed: apt-get install mariadb-server"
        exit 1
    fi
    ensure_scratch
    dir=$scratch/mariadb
    mkdir -p "$dir"
    free_port port
    say "MariaDB not reachable at $mysql_url; starting a throwaway one on port $port"
    "$install" --no-defaults --datadir="$dir/data" --user="$(id -un)" \
        --auth-root-authentication-method=normal >"$scratch/mariadb-install.log" 2>&1 ||
        { cat "$scratch/mariadb-install.log" >&2; exit 1; }
    "$mariadbd" --no-defaults --datadir="$dir/data" --user="$(id -un)" --port="$port" \
        --bind-address=127.0.0.1 --socket="$dir/mariadb.sock" --skip-grant-tables \
        --innodb-flush-log-at-trx-commit=0 >"$dir/server.log" 2>&1 &
    mariadb_pid=$!
    for _ in $(seq 100); do
        mariadb -h 127.0.0.1 -P "$port" -u root -e 'CREATE DATABASE IF NOT EXISTS test' \
            >/dev/null 2>&1 && break
        sleep 0.2
    done
    mysql_url="mysql://root@127.0.0.1:$port/test"
}

# host:port of a URL, for a TCP probe.
answers() {
    local hostport=${1#*://}
    hostport=${hostport#*@}
    hostport=${hostport%%/*}
    (exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}") 2>/dev/null
}

start_nats() {
    command -v nats-server >/dev/null 2>&1 ||
        { say "error: NATS does not answer at $nats_url and nats-server is not installed: apt-get install nats-server"; exit 1; }
    [[ -n $scratch ]] || scratch=$(mktemp -d)
    local port
    free_port port
    say "starting a throwaway nats-server -js on :$port"
    nats-server -a 127.0.0.1 -p "$port" -js -sd "$scratch/nats" >"$scratch/nats.log" 2>&1 &
    nats_pid=$!
    nats_url="nats://127.0.0.1:$port"
    for _ in $(seq 100); do answers "$nats_url" && return; sleep 0.1; done
    say "error: the throwaway nats-server did not start"; exit 1
}

start_rabbitmq() {
    [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] ||
        { say "error: RabbitMQ does not answer at $amqp_url and rabbitmq-server is not installed: apt-get install rabbitmq-server"; exit 1; }
    [[ -n $scratch ]] || scratch=$(mktemp -d)
    local port dist_port dir=$scratch/rabbitmq
    free_port port
    mkdir -p "$dir"
    echo "[]." >"$dir/enabled_plugins"
    echo "listeners.tcp.local = 127.0.0.1:$port" >"$dir/rabbitmq.conf"
    : >"$dir/env.conf"
    free_port dist_port
    say "starting a throwaway RabbitMQ on :$port"
    HOME=$dir RUNNING_UNDER_SYSTEMD=true RABBITMQ_CONF_ENV_FILE=$dir/env.conf \
        RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins \
        RABBITMQ_NODENAME="chime_test_$port@localhost" RABBITMQ_NODE_PORT=$port \
        RABBITMQ_DIST_PORT=$dist_port ERL_EPMD_ADDRESS=127.0.0.1 \
        RABBITMQ_MNESIA_BASE=$dir/mnesia RABBITMQ_LOG_BASE=$dir/log RABBITMQ_PID_FILE=$dir/pid \
        /usr/lib/rabbitmq/bin/rabbitmq-server </dev/null >"$dir/server.log" 2>&1 &
    rabbit_pid=$!
    amqp_url="amqp://guest:guest@127.0.0.1:$port/%2f"
    for _ in $(seq 600); do answers "$amqp_url" && return; sleep 0.1; done
    say "error: the throwaway RabbitMQ did not start"; exit 1
}

# Four end-to-end deployments at once, each process with a pool of its own, beside the
# tests' own pools: a server with fewer slots than this (PostgreSQL's default is 100) fails
# tests for want of a connection, so the default one is used only when it has the room.
PG_MIN_CONNECTIONS=250
postgres_roomy() {
    local max
    max=$(psql "$1" -Atqc 'show max_connections' 2>/dev/null) || return 1
    ((max >= PG_MIN_CONNECTIONS)) && return 0
    say "PostgreSQL at $1 allows $max connections, fewer than the $PG_MIN_CONNECTIONS the tests may open"
    return 1
}
if ! postgres_reachable "$db_url"; then
    start_postgres
elif [[ -z ${CHIME_TEST_DATABASE_URL:-} ]] && ! postgres_roomy "$db_url"; then
    start_postgres
fi
redis_reachable "$redis_url" || start_redis
mysql_reachable || start_mariadb
answers "$nats_url" || start_nats
answers "$amqp_url" || start_rabbitmq
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
export CHIME_TEST_MYSQL_URL=$mysql_url
export CHIME_TEST_NATS_URL=$nats_url
export CHIME_TEST_AMQP_URL=$amqp_url
"$@"
