#!/usr/bin/env bash
# `make bench-compare`: the pipeline benchmark alternated between builds (and settings) the
# same day, medians side by side. A figure counts only beside the previous build measured
# the same day, runs alternated (docs/performance.md, "Reading the figures"): this does that.
#
#   scripts/bench-compare/run.sh [--base REV] [--runs N] [--variant NAME:CHIME_X=v[,CHIME_Y=w]]…
#                                [--out-dir DIR] [--plan] -- <chime-bench pipeline arguments>
#
# Sides: `base` (REV's services, default HEAD~1; `--base none` leaves it out), `new` (this
# tree's target/release), and each variant (this tree's services with more settings, e.g.
# `--variant linger50:CHIME_EXECUTOR__CLAIM_LINGER=50ms`). Round r starts one side further
# along than round r-1 (base new v1, then new v1 base, …), so no side always runs first or
# last on a machine that warms or tires over a round; `--plan` prints that order and stops.
# Every side runs the same chime-bench, this tree's, so only the services differ. REV is
# built once, in release, into a cache outside the work tree (CHIME_BENCH_CACHE, default
# ~/.cache/chime/bench). Each run's report goes to DIR/<side>-<round>.json (default
# target/bench/compare); the medians, with every run, to DIR/compare.json.
set -euo pipefail
cd "$(dirname "$0")/../.."

base=HEAD~1
runs=3
out_dir=target/bench/compare
variants=()
plan=0
while [ $# -gt 0 ]; do
  case $1 in
    --base) base=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --variant) variants+=("$2"); shift 2 ;;
    --out-dir) out_dir=$2; shift 2 ;;
    --plan) plan=1; shift ;;
    --) shift; break ;;
    *) echo "bench-compare: unknown argument $1 (arguments for chime-bench go after --)" >&2; exit 2 ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench-compare: --runs takes a whole number ≥ 1" >&2; exit 2; }
for v in "${variants[@]}"; do
  [[ $v =~ ^[A-Za-z0-9_-]+:CHIME_[A-Z0-9_]+=.*$ ]] || {
    echo "bench-compare: --variant takes NAME:CHIME_X=value[,CHIME_Y=value], not $v" >&2; exit 2; }
done
sides=()
[ "$base" = none ] || sides+=(base)
sides+=(new)
for v in "${variants[@]}"; do
  name=${v%%:*}
  for s in "${sides[@]}"; do
    [ "$s" != "$name" ] || { echo "bench-compare: a second side named $name (base and new are taken)" >&2; exit 2; }
  done
  sides+=("$name")
done
# The sides of round $1 (from 1), each round rotated one further than the one before.
round_sides() {
  local n=${#sides[@]} i
  for ((i = 0; i < n; i++)); do echo "${sides[$(((i + $1 - 1) % n))]}"; done
}
if [ "$plan" = 1 ]; then
  for round in $(seq 1 "$runs"); do echo "$round" $(round_sides "$round"); done
  exit 0
fi
bench_bins=(chime-bench chime-bench-callbacks)
services=(chime-gateway chime-migrator chime-scheduler chime-executor chime)
for b in "${bench_bins[@]}" "${services[@]}"; do
  [ -x "target/release/$b" ] || { echo "bench-compare: target/release/$b is missing: cargo build --release --workspace --bins" >&2; exit 1; }
done
cache=${CHIME_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chime/bench}

# A directory of one side's services beside this tree's chime-bench: the bench starts the
# services it finds next to itself.
side_dir() {
  local dir=$1 from=$2
  mkdir -p "$dir"
  for b in "${services[@]}"; do cp -f "$from/$b" "$dir/"; done
  for b in "${bench_bins[@]}"; do cp -f "target/release/$b" "$dir/"; done
}

declare -A dirs extra
if [ "$base" != none ]; then
  sha=$(git rev-parse --verify "$base^{commit}")
  bins=$cache/bin/$sha
  if [ ! -x "$bins/chime-executor" ]; then
    echo "bench-compare: building ${sha:0:12} once, in release, into $cache" >&2
    src=$cache/src/$sha
    rm -rf "$src" "$bins.partial" && mkdir -p "$src" "$bins.partial"
    git archive "$sha" | tar -x -C "$src"
    # Its own target directory: built into this tree's, its binaries would replace this
    # build's in target/release/.
    (cd "$src" && CARGO_TARGET_DIR=$cache/target CHIME_COMMIT=$sha cargo build --locked --release --bins \
       -p chime-api-gateway -p chime-migrator -p chime-scheduler -p chime-executor -p chime)
    for b in "${services[@]}"; do cp "$cache/target/release/$b" "$bins.partial/"; done
    rm -rf "$bins" && mv "$bins.partial" "$bins"
    rm -rf "$src"
  fi
  side_dir "$out_dir/bin/base" "$bins"
  dirs[base]=$out_dir/bin/base; extra[base]=""
fi
side_dir "$out_dir/bin/new" target/release
dirs[new]=$out_dir/bin/new; extra[new]=""
for v in "${variants[@]}"; do
  name=${v%%:*}
  dirs[$name]=$out_dir/bin/new
  envs=()
  IFS=',' read -ra pairs <<< "${v#*:}"
  for p in "${pairs[@]}"; do envs+=(--env "$p"); done
  extra[$name]="${envs[*]}"
done

# The machine's PostgreSQL, as the figures in docs/performance.md were taken (a durable
# server; with-test-services.sh would otherwise start a throwaway one without fsync when the
# machine's has fewer connections than the test suite wants). One that does not answer is
# still replaced by a throwaway server.
export CHIME_TEST_DATABASE_URL=${CHIME_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}

reports=()
for round in $(seq 1 "$runs"); do
  for side in $(round_sides "$round"); do
    dir=${dirs[$side]}
    report=$out_dir/$side-$round.json
    echo "bench-compare: round $round of $runs, $side ($("$dir/chime-gateway" --version 2>/dev/null | head -1))" >&2
    # shellcheck disable=SC2086 # the variant's --env pairs are words
    rm -f "$report"
    status=0
    scripts/with-test-services.sh "$dir/chime-bench" pipeline "$@" ${extra[$side]} --out "$report" \
      > "$out_dir/$side-$round.log" 2>&1 || status=$?
    # chime-bench exits non-zero when a target is missed, after writing its report: that is a
    # figure to compare. Without a report the run did not measure anything.
    if [ ! -s "$report" ]; then
      echo "bench-compare: $side round $round wrote no report (exit $status), its output: $out_dir/$side-$round.log" >&2
      grep -v -e '^ *[0-9]*: ' -e '^ *at ' "$out_dir/$side-$round.log" | tail -20 >&2
      exit 1
    fi
    [ "$status" -eq 0 ] || echo "bench-compare: $side round $round exited $status: $(grep -m1 -A3 '^Error' "$out_dir/$side-$round.log" | tr '\n' ' ')" >&2
    reports+=("$side=$report")
  done
done
python3 scripts/bench-compare/summarize.py "$out_dir/compare.json" "${reports[@]}"
