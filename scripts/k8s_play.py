"""`make k8s-play`: the real manifests (k8s/overlays/dev) run as pods under `podman kube play`.

Builds an image from this tree's binaries with deploy/Dockerfile's runtime stage, plays the
migrate Job and the Deployments on a podman network of their own, waits for every readiness
probe, creates a timer through the gateway and receives its callback, then fires 500
one-shots while the executors go from 2 to 3 and one executor pod is deleted: none may be
lost. Lost and duplicated counts come from the callback sink's own record. Pods are removed
by name, before each play (a pod an interrupted run left, planted on purpose before the
Deployments) and after the run, which fails if one is left.

Podman is not Kubernetes; what it lacks is bridged here and nowhere in k8s/ (docs/deploy.md,
"Running the manifests locally"):
- no Job controller: the migrate Job's pod template runs as a Pod, to completion, first;
- no Services or cluster DNS: the gateway is called at its pod IP, and schedulers and
  executors find each other in the membership roster, which needs no DNS name;
- no downward API for status.podIP: the executors' POD_IP and advertise URL are dropped, and
  each executor announces the address its default route leaves from, which is the pod IP;
- no ReplicaSet: scaling plays the executor Deployment's pod once more, and a deleted pod
  (SIGTERM, then the pod's grace period) is not replaced;
- podman publishes each containerPort on the host, where replicas collide: the ports are
  dropped (the probes keep their numbers) and every pod is reached at its own IP;
- no kubelet probes here (podman runs liveness through systemd, absent): this script polls
  each container's readinessProbe itself;
- Secrets: podman reads secretKeyRef from its own store, where the Secret is created;
- PostgreSQL (a database of this run's own) and Redis (a throwaway server with a password)
  are reached at the network's gateway address, as an external database would be;
- the callback sink listens on that address too, a private range the SSRF policy blocks, so
  CHIME_CALLBACK_ALLOW_NETWORKS opens the network's subnet, as in-cluster targets need.
"""

import base64
import copy
import http.server
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WORK = os.path.join(ROOT, "target", "k8s-play")
BINARIES = ["chime", "chime-gateway", "chime-scheduler", "chime-executor", "chime-migrator"]
ONE_SHOTS = 500
RUN = secrets.token_hex(3)
TOKEN = "play-" + secrets.token_hex(16)
started = time.monotonic()


def say(msg):
    print(f"k8s-play [{time.monotonic() - started:5.1f}s]: {msg}", flush=True)


def sh(*args, check=True, capture=True):
    out = subprocess.run(args, check=False, text=True, capture_output=capture)
    if check and out.returncode != 0:
        sys.exit(f"k8s-play: {' '.join(args)} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout.strip() if capture else ""


def podman(*args, check=True):
    return sh("podman", *args, check=check)


def until(what, deadline_s, probe, every=0.2):
    deadline = time.monotonic() + deadline_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            sys.exit(f"k8s-play: timed out waiting for {what}")
        time.sleep(every)


def call(method, url, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("content-type", "application/json")
    if token:
        req.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


# ---- The image -------------------------------------------------------------------------


def runtime_stage():
    """deploy/Dockerfile's last stage, without its FROM and the COPY of the build stage."""
    text = open(os.path.join(ROOT, "deploy", "Dockerfile")).read().replace("\\\n", " ")
    stage = text.rsplit("\nFROM ", 1)[1].splitlines()[1:]
    return [line for line in stage
            if line.strip() and not line.startswith(("#", "COPY --from"))]


def build_image(tag, bins):
    ctx = os.path.join(WORK, "image")
    shutil.rmtree(ctx, ignore_errors=True)
    dest = os.path.join(ctx, "root", "usr", "local", "bin")
    os.makedirs(dest)
    libs = set()
    for b in BINARIES:
        src = os.path.join(bins, b)
        # Debug info is most of a debug binary's size and nothing the pods need.
        sh("objcopy", "--strip-debug", src, os.path.join(dest, b))
        for line in sh("ldd", src).splitlines():
            part = [p for p in line.split() if p.startswith("/")]
            libs.update(part[:1])
    # What distroless/cc carries that Chime uses: glibc, libgcc, CA certificates.
    for path in sorted(libs) + ["/etc/ssl/certs/ca-certificates.crt"]:
        target = os.path.join(ctx, "root", path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.realpath(path), target)
    with open(os.path.join(ctx, "Containerfile"), "w") as f:
        f.write("FROM scratch\nCOPY root/ /\n" + "\n".join(runtime_stage()) + "\n")
    commit = os.environ.get("CHIME_COMMIT", "unknown")
    podman("build", "-q", "-t", tag, "--build-arg", f"REVISION={commit}",
           "--build-arg", "SOURCE=local", "-f", os.path.join(ctx, "Containerfile"), ctx)
    labels = json.loads(podman("image", "inspect", tag, "--format", "{{json .Labels}}"))
    user = podman("image", "inspect", tag, "--format", "{{.Config.User}}")
    size = int(podman("image", "inspect", tag, "--format", "{{.Size}}"))
    assert labels.get("org.opencontainers.image.revision") == commit, labels
    assert user == "65532:65532", user
    return size


# ---- The manifests, bridged ------------------------------------------------------------


def render(image, subnet):
    rendered = sh(os.environ.get("KUBECTL", "kubectl"), "kustomize", os.path.join(ROOT, "k8s", "overlays", "dev"))
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    played, migrate, secret_keys = [], None, set()
    for d in docs:
        kind = d["kind"]
        if kind not in ("Deployment", "Job", "ConfigMap"):
            continue  # Services, PDBs, the HPA, NetworkPolicies: nothing in podman plays them
        if kind == "ConfigMap":
            played.append(d)
            continue
        pod = d["spec"]["template"]["spec"]
        for c in pod["containers"]:
            c["image"] = image
            # Podman publishes every containerPort on the host, where two replicas collide;
            # pods are reached at their own IPs. The probes keep the port numbers.
            ports = {p["name"]: p["containerPort"] for p in c.pop("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                get = c.get(probe, {}).get("httpGet")
                if get:
                    get["port"] = ports.get(get["port"], get["port"])
            env = [e for e in c.get("env", [])
                   if e["name"] not in ("POD_IP", "CHIME_EXECUTOR__ADVERTISE_URL")]
            env.append({"name": "CHIME_CALLBACK_ALLOW_NETWORKS", "value": subnet})
            c["env"] = env
            for e in env:
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    secret_keys.add((ref["name"], ref["key"]))
        if kind == "Job":
            migrate = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": d["metadata"]["name"],
                                    "labels": d["spec"]["template"]["metadata"]["labels"]},
                       "spec": pod}
        else:
            if d["metadata"]["name"] == "chime-executor":
                d["spec"]["replicas"] = 2  # the base's count; the dev overlay has one
            played.append(d)
    assert migrate, "the overlay has no migrate Job"
    return played, migrate, secret_keys


def dump(name, docs):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f)
    return path


# ---- Things on the host side of the network --------------------------------------------


class Sink(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr):
        self.got, self.lock = [], threading.Lock()
        super().__init__(addr, SinkHandler)


class SinkHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        key = self.headers.get("idempotency-key", "")  # {timer_id}:{run_at_ms}
        with self.server.lock:
            self.server.got.append((key, time.time()))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# ---- Pods ------------------------------------------------------------------------------


def pod_ip(container):
    return podman("inspect", container, "--format",
                  "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")


def containers(prefix, stopped=False):
    names = podman("ps", *(["-a"] if stopped else []), "--format", "{{.Names}}").splitlines()
    return sorted(n for n in names if n.startswith(prefix) and not n.endswith("-infra"))


def pod_prefixes(docs):
    """What the pods of these manifests are named: a Pod by its name, a Deployment's
    replicas `<name>-pod-<i>` (matched by the prefix `<name>-pod-`)."""
    return tuple(d["metadata"]["name"] + ("-pod-" if d["kind"] == "Deployment" else "")
                 for d in docs if d["kind"] in ("Deployment", "Pod"))


def pods(prefixes):
    names = podman("pod", "ps", "--format", "{{.Name}}", check=False).splitlines()
    return [n for n in names
            if any(n == p or (p.endswith("-pod-") and n.startswith(p)) for p in prefixes)]


def remove_pods(prefixes):
    """Removes the pods these prefixes name, one by one. Not `kube down` or `kube play
    --replace`: podman 4.3 stops at a Deployment's first replica that is already gone (the
    deleted executor's), leaving the replicas after it behind to fail the next play."""
    gone = pods(prefixes)
    for name in gone:
        podman("pod", "rm", "-f", "-t", "5", name, check=False)
    return gone


def readiness_urls(deployments):
    """Each running container's readinessProbe as a URL on its pod IP."""
    urls = {}
    for d in deployments:
        probe = d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
        for name in containers(d["metadata"]["name"] + "-pod-"):
            urls[name] = f"http://{pod_ip(name)}:{probe['port']}{probe['path']}"
    return urls


def wait_ready(deployments, deadline_s=90):
    urls = readiness_urls(deployments)
    for name, url in urls.items():
        until(f"{name} ready ({url})", deadline_s, lambda: call("GET", url)[0] == 200)
    return urls


def keep_logs(container):
    """The container's output, kept under target/k8s-play/logs/ after its pod is gone."""
    os.makedirs(os.path.join(WORK, "logs"), exist_ok=True)
    out = subprocess.run(["podman", "logs", container], text=True, capture_output=True)
    with open(os.path.join(WORK, "logs", f"{container}.log"), "w") as f:
        f.write(out.stdout + out.stderr)


def admin_port(deployment):
    """The port its readiness probe asks: the admin port, which serves /metrics too."""
    return deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"]


def metric(container, port, name):
    """The sum of a metric's series on a container's /metrics."""
    status, body = call("GET", f"http://{pod_ip(container)}:{port}/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if status == 200 and line.split("{")[0].split(" ")[0] == name)


# ---- The run ---------------------------------------------------------------------------


def main():
    bins = os.environ.get("K8S_PLAY_BINARIES", os.path.join(ROOT, "target", "debug"))
    database_url = os.environ["CHIME_TEST_DATABASE_URL"]
    os.makedirs(WORK, exist_ok=True)
    network, tag, db = f"chime-play-{RUN}", f"localhost/chime:play-{RUN}", f"chime_play_{RUN}"
    cleanups, played_prefixes, ok = [], [], False
    try:
        size = build_image(tag, bins)
        cleanups.append(lambda: podman("rmi", "-f", tag, check=False))
        say(f"image {tag}: {size / 1e6:.0f} MB, user 65532, OCI labels of deploy/Dockerfile")

        podman("network", "create", network)
        cleanups.append(lambda: podman("network", "rm", "-f", network, check=False))
        subnet, gateway = podman("network", "inspect", network, "--format",
                                 "{{range .Subnets}}{{.Subnet}} {{.Gateway}}{{end}}").split()
        # A pod of its own holds the bridge up, so the host side can listen on its address.
        holder = f"chime-play-{RUN}-net"
        podman("pod", "create", "--name", holder, "--network", network)
        podman("pod", "start", holder)
        cleanups.append(lambda: podman("pod", "rm", "-f", holder, check=False))

        # PostgreSQL: a database of this run's on the test server, forwarded to the bridge.
        sh("psql", database_url, "-Atqc", f"CREATE DATABASE {db}")
        cleanups.append(lambda: sh("psql", database_url, "-Atqc",
                                   f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", check=False))
        pg = urllib.parse.urlsplit(database_url)
        pg_host, pg_port = pg.hostname or "127.0.0.1", pg.port or 5432
        fwd_port = free_port(gateway)
        forward = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{fwd_port},bind={gateway},fork,reuseaddr",
             f"TCP:{pg_host}:{pg_port}"])
        cleanups.append(forward.kill)
        redis_port, redis_pass = free_port(gateway), secrets.token_hex(12)
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", gateway,
             "--requirepass", redis_pass, "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--logfile", os.path.join(WORK, "redis.log")])
        cleanups.append(redis.kill)
        login = pg.netloc.rsplit("@", 1)[0] + "@" if "@" in pg.netloc else ""
        values = {
            "database-url": f"postgres://{login}{gateway}:{fwd_port}/{db}",
            "redis-url": f"redis://:{redis_pass}@{gateway}:{redis_port}",
            "bootstrap-token": TOKEN,
        }

        played, migrate, secret_keys = render(tag, subnet)
        for name in {n for n, _ in secret_keys}:
            data = {k: base64.b64encode(values[k].encode()).decode()
                    for n, k in secret_keys if n == name}
            path = os.path.join(WORK, f"{name}.json")
            with open(path, "w") as f:
                json.dump(data, f)
            podman("secret", "rm", name, check=False)
            podman("secret", "create", name, path)
            os.remove(path)
            cleanups.append(lambda n=name: podman("secret", "rm", n, check=False))
        configmaps = [d for d in played if d["kind"] == "ConfigMap"]
        deployments = [d for d in played if d["kind"] == "Deployment"]

        def play(name, docs):
            path = dump(name, configmaps + docs)
            prefixes = pod_prefixes(docs)
            played_prefixes.extend(prefixes)
            cleanups.append(lambda: remove_pods(prefixes))
            stale = remove_pods(prefixes)
            if stale:
                say(f"removed pods an earlier run left behind: {', '.join(stale)}")
            podman("kube", "play", "--network", network, path)

        play("migrate.yaml", [migrate])
        job = f"{migrate['metadata']['name']}-{migrate['spec']['containers'][0]['name']}"
        until("the migrate Job's pod to finish", 120,
              lambda: podman("inspect", job, "--format", "{{.State.Status}}") == "exited")
        code = podman("inspect", job, "--format", "{{.State.ExitCode}}")
        if code != "0":
            sys.exit(f"k8s-play: the migration exited {code}:\n{podman('logs', job)}")
        say("migrate Job: schema applied")

        # What a run stopped before its clean-up leaves (CI once failed on it: "pod already
        # exists"): a pod named as an executor replica. The play must remove it, not fail.
        planted = "chime-executor-pod-1"
        podman("pod", "create", "--name", planted)
        cleanups.append(lambda: podman("pod", "rm", "-f", planted, check=False))
        t0 = time.monotonic()
        play("deployments.yaml", deployments)
        urls = wait_ready(deployments)
        ready_s = time.monotonic() - t0
        say(f"{len(urls)} pods ready in {ready_s:.1f}s: {', '.join(sorted(urls))}")

        sink = Sink((gateway, 0))
        threading.Thread(target=sink.serve_forever, daemon=True).start()
        cleanups.append(sink.shutdown)
        callback = f"http://{gateway}:{sink.server_address[1]}/tick"
        rest = f"http://{pod_ip(containers('chime-gateway-pod-')[0])}:8080"

        status, body = call("POST", f"{rest}/v1/timers", {
            "app": "play", "name": "first", "schedule": {"after": "1s"},
            "callback": {"url": callback}}, TOKEN)
        assert status == 201, (status, body)
        first = json.loads(body)["id"]
        until("the first timer's callback", 30,
              lambda: any(k.startswith(f"{first}:") for k, _ in sink.got))
        say(f"timer {first} created through the gateway; its callback arrived")

        # 500 one-shots due over 20 s from 6 s on.
        due0 = time.time() + 6
        due = [due0 + 20 * i / ONE_SHOTS for i in range(ONE_SHOTS)]
        keys = set()
        for b in range(0, ONE_SHOTS, 100):
            reqs = [{"timer": {"app": "play", "name": f"load-{i}", "callback": {"url": callback},
                               "schedule": {"at": time.strftime(
                                   "%Y-%m-%dT%H:%M:%S", time.gmtime(due[i]))
                                   + f".{int(due[i] * 1000) % 1000:03d}Z"}}}
                    for i in range(b, b + 100)]
            status, body = call("POST", f"{rest}/v1/timers:batchCreate", {"requests": reqs}, TOKEN)
            assert status == 201, (status, body)
            keys.update(f"{t['id']}:{_millis(t['schedule']['at'])}"
                        for t in json.loads(body)["timers"])
        say(f"{ONE_SHOTS} one-shots created, due over 20 s")

        until("the first one-shots to fire", 30, lambda: time.time() > due0 + 3)
        executor = next(d for d in deployments if d["metadata"]["name"] == "chime-executor")
        port = admin_port(executor)
        third = copy.deepcopy(executor)
        third["metadata"]["name"] = "chime-executor-3"
        third["spec"]["replicas"] = 1
        play("scale.yaml", [third])
        wait_ready([third])
        say("executors scaled from 2 to 3")

        until("half-way", 30, lambda: time.time() > due0 + 10)
        victim = containers("chime-executor-pod-")[0]
        grace = third["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        pod = victim.rsplit("-", 1)[0]
        t_stop = time.monotonic()
        # The container, not the pod: `pod stop` takes the pod's network down with it while
        # the executor drains, where Kubernetes keeps the sandbox until its containers exit.
        podman("stop", "-t", str(grace), victim)
        stopped_s = time.monotonic() - t_stop
        keep_logs(victim)
        podman("pod", "rm", "-f", pod)
        say(f"executor pod {pod} deleted: SIGTERM, stopped in {stopped_s:.1f}s (grace {grace}s)")

        def received():
            with sink.lock:
                return {k for k, _ in sink.got}
        until("every one-shot's callback", 90, lambda: keys <= received(), every=0.5)
        # Counted once no executor has a callback in flight: a duplicate would be among them.
        until("the executors to go idle", 30, lambda: all(
            metric(c, port, "chime_executor_in_flight") == 0
            for c in containers("chime-executor")))
        with sink.lock:
            got = list(sink.got)
        counts = {}
        lateness = []
        for k, at in got:
            counts[k] = counts.get(k, 0) + 1
            if k in keys and counts[k] == 1:
                lateness.append((at * 1000 - int(k.split(":")[1])))
        lost = len(keys - set(counts))
        dups = sum(n - 1 for k, n in counts.items() if k in keys)
        lateness.sort()
        p50 = lateness[len(lateness) // 2]
        p99 = lateness[int(len(lateness) * 0.99)]
        per_executor = {c: int(metric(c, port, "chime_executor_outcomes_total"))
                        for c in containers("chime-executor")}
        new = sum(n for c, n in per_executor.items() if c.startswith("chime-executor-3"))
        if lost or new == 0:
            sys.exit(f"k8s-play: lost {lost} of {ONE_SHOTS}; the added executor ran {new}")
        print(f"k8s-play ok: image {size / 1e6:.0f} MB; {len(urls)} pods ready in {ready_s:.1f}s; "
              f"{ONE_SHOTS} one-shots while executors went 2 -> 3 and one was deleted: "
              f"lost 0, duplicates {dups}, lateness p50 {p50:.0f} ms p99 {p99:.0f} ms; "
              f"outcomes per live executor {per_executor}; "
              f"{time.monotonic() - started:.0f}s in all", flush=True)
        ok = True
    finally:
        for name in containers("chime-", stopped=True):
            keep_logs(name)
        for undo in reversed(cleanups):
            try:
                undo()
            except Exception as e:  # cleanup goes on whatever one step did
                print(f"k8s-play: cleanup: {e}", file=sys.stderr)
        left = pods(tuple(played_prefixes)) if ok else []
        if left:
            sys.exit(f"k8s-play: the clean-up left pods behind: {', '.join(left)}")


def _millis(rfc3339):
    """Epoch milliseconds of an RFC 3339 UTC timestamp with up to millisecond precision."""
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000 + 0.5)


if __name__ == "__main__":
    main()
