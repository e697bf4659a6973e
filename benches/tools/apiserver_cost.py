#!/usr/bin/env python3
"""What one request costs kube-apiserver and etcd, in CPU milliseconds, by kind of write.

Starts etcd and kube-apiserver from $KUBEBUILDER_ASSETS (as tests/admission/record.py does),
installs crds/habitat.yaml, then sends N requests of each kind, 8 at a time on kept-alive
connections, and prints the CPU time the two processes spent per request (/proc/PID/stat).
Children shaped like the operator's: a ConfigMap, a headless Service and a StatefulSet, each
created with a plain POST and with a server-side apply; a pod's address written into the
ConfigMaps created by POST, by a merge patch and by a server-side apply; then the Habitat's own
writes: its create, the finalizer (merge patch), a status write (merge patch and apply) and an
Event. Twice, in opposite orders: docs/performance.md's table of what each kind of write costs
the server comes from it. Needs python3, PyYAML, openssl.

    KUBEBUILDER_ASSETS=/path/to/binaries python3 benches/tools/apiserver_cost.py [N]
"""
import http.client, json, os, sys, threading, time
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/admission"))
from record import CTX, Server  # noqa: E402

J, M, A = "application/json", "application/merge-patch+json", "application/apply-patch+yaml"
OWNER = [{"apiVersion": "habitat.sh/v1", "kind": "Habitat", "name": "x", "controller": True,
          "uid": "6f8e2b7c-1111-2222-3333-444455556666", "blockOwnerDeletion": True}]


def meta(ns, name):
    return {"name": name, "namespace": ns, "labels": {"habitat.sh/name": name},
            "annotations": {"habitat.sh/applied-fingerprint": "abcdef0123456789"},
            "ownerReferences": OWNER}


def config_map(ns, name):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(ns, name + "-peer"),
            "data": {"peer-ip": ""}}


def service(ns, name):
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(ns, name),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {"habitat.sh/name": name},
                     "ports": [{"name": "gossip", "port": 9638}, {"name": "http", "port": 9631}]}}


def statefulset(ns, name):
    labels = {"habitat.sh/name": name}
    container = {
        "name": "habitat", "image": "kinvolk/redis-hab",
        "args": ["--peer-watch-file", "/habitat/peers/peer-ip", "--topology", "leader"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "gossip", "containerPort": 9638}, {"name": "http", "containerPort": 9631}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 9631}, "periodSeconds": 5},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/habitat/peers"}]}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(ns, name),
            "spec": {"replicas": 3, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "securityContext": {"runAsNonRoot": True, "fsGroup": 42},
                         "containers": [container],
                         "volumes": [{"name": "config", "configMap": {"name": name + "-peer"}}]}}}}


CHILDREN = {"ConfigMap": ("/api/v1/namespaces/%s/configmaps", config_map),
            "Service": ("/api/v1/namespaces/%s/services", service),
            "StatefulSet": ("/apis/apps/v1/namespaces/%s/statefulsets", statefulset)}


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def send(server, label, requests, concurrency=8):
    host, port = server.url[len("https://"):].split(":")
    pending, lock = iter(requests), threading.Lock()
    failures = []

    def worker():
        conn = http.client.HTTPSConnection(host, int(port), context=CTX)
        while True:
            with lock:
                r = next(pending, None)
            if r is None:
                return
            method, path, body, ctype = r
            conn.request(method, path, json.dumps(body),
                         {"Authorization": f"Bearer {server.token}", "Content-Type": ctype})
            answer = conn.getresponse()
            text = answer.read()
            if answer.status not in (200, 201):
                failures.append((answer.status, text[:200]))

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    api, etcd = server.procs[1].pid, server.procs[0].pid
    a0, e0, t0 = cpu(api), cpu(etcd), time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a1, e1, t1 = cpu(api), cpu(etcd), time.time()
    n = len(requests)
    if failures:
        raise SystemExit(f"{label}: {len(failures)} of {n} failed, first {failures[0]}")
    print(f"| {label} | {n} | {1000 * (a1 - a0) / n:.2f} | {1000 * (e1 - e0) / n:.2f} | {t1 - t0:.2f} |",
          flush=True)


def children(server, n, rnd):
    for kind, (path, make) in CHILDREN.items():
        modes = ["create (POST)", "server-side apply"]
        for mode in (modes if rnd == 0 else modes[::-1]):
            ns = f"{kind.lower()}-{'post' if 'POST' in mode else 'apply'}-{rnd}"
            server.req("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            base = path % ns
            if "POST" in mode:
                reqs = [("POST", f"{base}?fieldManager=habitat-operator", make(ns, f"h{i}"), J)
                        for i in range(n)]
            else:
                reqs = []
                for i in range(n):
                    body = make(ns, f"h{i}")
                    reqs.append(("PATCH", f"{base}/{body['metadata']['name']}"
                                 "?fieldManager=habitat-operator&force=true", body, A))
            send(server, f"{kind} {mode}", reqs)


def addresses(server, n, rnd):
    """A pod's address written into the peer ConfigMaps `children` created by POST: a merge
    patch of the data and the fingerprint, or a server-side apply of the whole ConfigMap."""
    ns = f"configmap-post-{rnd}"
    base = CHILDREN["ConfigMap"][0] % ns

    def merge(i, k):
        return ("PATCH", f"{base}/h{i}-peer?fieldManager=habitat-operator",
                {"metadata": {"annotations": {"habitat.sh/applied-fingerprint": f"{k:016x}"}},
                 "data": {"peer-ip": f"10.1.{k}.{i % 250}"}}, M)

    def apply(i, k):
        body = config_map(ns, f"h{i}")
        body["metadata"]["annotations"] = {"habitat.sh/applied-fingerprint": f"{k:016x}"}
        body["data"] = {"peer-ip": f"10.1.{k}.{i % 250}"}
        return ("PATCH", f"{base}/h{i}-peer?fieldManager=habitat-operator&force=true", body, A)

    modes = [("merge patch", merge), ("server-side apply", apply)]
    for k, (label, make) in enumerate(modes if rnd == 0 else modes[::-1]):
        send(server, f"ConfigMap address ({label})", [make(i, 1 + k) for i in range(n)])


def habitat_writes(server, n, rnd):
    ns = f"habitats-{rnd}"
    server.req("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    base = f"/apis/habitat.sh/v1/namespaces/{ns}/habitats"
    spec = {"image": "kinvolk/redis-hab", "count": 1,
            "service": {"name": "redis", "group": "default", "topology": "standalone"}}
    send(server, "Habitat create (POST)", [
        ("POST", base, {"apiVersion": "habitat.sh/v1", "kind": "Habitat",
                        "metadata": {"name": f"h{i}"}, "spec": spec}, J) for i in range(n)])
    send(server, "Habitat finalizer (merge patch)", [
        ("PATCH", f"{base}/h{i}", {"metadata": {"finalizers": ["habitat.sh/finalizer"]}}, M)
        for i in range(n)])

    def status(phase):
        return {"phase": phase, "observedGeneration": 1, "replicas": 1, "readyReplicas": 0,
                "conditions": [{"type": "Ready", "status": "False", "reason": phase,
                                "message": "waiting for the pods", "observedGeneration": 1,
                                "lastTransitionTime": "2026-12-03T10:00:00Z"}]}

    writes = [("merge patch", M, lambda i, p: {"status": status(p)}, ""),
              ("server-side apply", A, lambda i, p: {
                  "apiVersion": "habitat.sh/v1", "kind": "Habitat",
                  "metadata": {"name": f"h{i}"}, "status": status(p)},
               "?fieldManager=habitat-operator&force=true")]
    for phase, (label, ctype, body, query) in zip(["Deploying", "Ready"],
                                                  writes if rnd == 0 else writes[::-1]):
        send(server, f"Habitat status ({label})", [
            ("PATCH", f"{base}/h{i}/status{query}", body(i, phase), ctype) for i in range(n)])
    send(server, "Event create (POST)", [
        ("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"h{i}.{rnd}"}, "eventTime": "2026-12-03T10:00:00.000000Z",
            "reportingController": "habitat-operator", "reportingInstance": "bench",
            "action": "Reconcile", "reason": "EnteredDeploying", "type": "Normal",
            "note": "Pending → ConfigMapReady → KeyReady → Deploying: the children are applied",
            "regarding": {"apiVersion": "habitat.sh/v1", "kind": "Habitat", "name": f"h{i}",
                          "namespace": ns}}, J) for i in range(n)])


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    server = Server(os.environ["KUBEBUILDER_ASSETS"])
    try:
        crd = yaml.safe_load(open(os.path.join(ROOT, "crds/habitat.yaml")))
        code, _ = server.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        if code != 201:
            raise SystemExit(f"installing the CRD: {code}")
        time.sleep(5)
        print("| request | n | kube-apiserver CPU ms / request | etcd CPU ms / request | wall s |")
        print("|---|---|---|---|---|")
        for rnd in range(2):
            children(server, n, rnd)
            addresses(server, n, rnd)
            habitat_writes(server, n, rnd)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
