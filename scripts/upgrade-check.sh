#!/usr/bin/env bash
# `make upgrade-check [PREV=<commit>]`: a rolling upgrade from another build to this one, as
# a platform team rolls one out. The commit's binaries run under load (200 every-1s timers,
# 3,000 one-shots), this build's `chime-migrator migrate` runs, then every process is
# replaced by this build's, one at a time (tests/durability.rs,
# `an_upgrade_from_the_previous_build_under_load_loses_nothing`): 0 one-shots lost, no
# every-1s timer missing more than a second.
#
# PREV defaults to the release named in deploy/upgrade-from. Its build is cached outside the
# work tree (CHIME_UPGRADE_CACHE, default ~/.cache/chime/upgrade), so it is built once.
# With --if-changed (CI), the check runs only when migrations/, proto/ or the config changed
# since PREV, and says so either way.
set -euo pipefail
cd "$(dirname "$0")/.."

# Arguments: [--if-changed] [PREV] -- <the command that runs the test>.
if_changed=false
if [ "${1:-}" = "--if-changed" ]; then
  if_changed=true
  shift
fi
prev=""
if [ "${1:-}" != "--" ]; then
  prev=${1:-}
  shift || true
fi
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [--if-changed] [PREV] -- <test command>" >&2; exit 2; }
prev=${prev:-$(grep -v '^#' deploy/upgrade-from | head -1)}
sha=$(git rev-parse --verify "$prev^{commit}")
watched=(migrations proto crates/runtime/src/config)
if $if_changed && git diff --quiet "$sha" HEAD -- "${watched[@]}"; then
  echo "upgrade-check: skipped, nothing in ${watched[*]} changed since $prev (${sha:0:12})"
  exit 0
fi

cache=${CHIME_UPGRADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/chime/upgrade}
bins=$cache/bin/$sha
services=(chime-gateway chime-migrator chime-scheduler chime-executor)
if [ ! -x "$bins/chime-executor" ]; then
  echo "upgrade-check: building ${sha:0:12} once, into $cache" >&2
  src=$cache/src/$sha
  rm -rf "$src" && mkdir -p "$src" "$bins.partial"
  git archive "$sha" | tar -x -C "$src"
  # Its own target directory: built into this tree's, its binaries would replace this
  # build's in target/debug/.
  # Built as this tree builds its own (dependencies at opt-level 1, no debug info anywhere),
  # whatever profile that commit had: a clean build in minutes, not ten.
  (cd "$src" && CARGO_TARGET_DIR=$cache/target CHIME_COMMIT=$sha cargo build --locked --bins \
     --config 'profile.dev.package."*".opt-level=1' --config 'profile.dev.package."*".debug=false' \
     --config 'profile.dev.debug=false' \
     -p chime-api-gateway -p chime-migrator -p chime-scheduler -p chime-executor)
  for b in "${services[@]}"; do cp "$cache/target/debug/$b" "$bins.partial/"; done
  rm -rf "$bins" && mv "$bins.partial" "$bins"
  rm -rf "$src"
fi
echo "upgrade-check: from ${sha:0:12} ($("$bins/chime-gateway" --version 2>/dev/null || echo "no --version")) to this build"
CHIME_UPGRADE_FROM=$bins scripts/with-test-services.sh "$@"
echo "upgrade-check ok: from ${sha:0:12}"
