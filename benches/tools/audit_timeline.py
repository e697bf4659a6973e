#!/usr/bin/env python3
"""When each Habitat's writes happened, from a real-ground audit log the scale benchmark kept.

    HABITAT_BENCH_KEEP_AUDIT=DIR cargo bench --bench scale -- --ground real 1000
    python3 benches/tools/audit_timeline.py DIR/audit-*.log

For each run of the benchmark (its namespace: `warm-up`, `required-floor`, `floor`, `bench`, and
with `--rounds` the later rounds' `floor-round-K` and `bench-round-K`), in the order they ran,
seconds from the run's first Habitat create, as quantiles over its Habitats:

- `created`: the driver's create of the Habitat;
- `finalizer`: the first patch of the Habitat itself (the operator's and the required floor's
  finalizer);
- `config map`, `statefulset`: the first successful write of each (a create or an apply);
- `first pod`, `last pod`: kube-controller-manager's creates of the StatefulSet's pods;
- `last pod status`: the simulated kubelet's last status write of one of its pods;
- `ready`: the last write of the Habitat's status.

Then three waits per Habitat (StatefulSet after the Habitat, first pod after the StatefulSet,
Ready after the last pod status) and the latency the server measured for the writes of the
driver and of the operator, by verb and resource (request received to response complete, ms).

Then the pace of kube-controller-manager's StatefulSet controller in the run's first 4 s (its
requests in the run's namespace, and their latency): it creates every pod, each of its workers
one request at a time, so a busier server slows it. And how many writes the run's client had
in flight at once (the operator's, or the floor's), on average over the run and at most.
Needs only python3.
"""
import collections
import json
import re
import sys
from datetime import datetime

# The benchmark's namespaces (`Floor::namespace` in benches/scale/floor.rs, and the operator's
# run) and clients (the operator and the benchmark's driver and floors, by User-Agent).
RUNS = ("warm-up", "required-floor", "floor", "bench")
# The later rounds' namespaces (`--rounds`: `round_namespace` in benches/scale/main.rs).
ROUND = re.compile(r"^(floor|bench)-round-\d+$")
CLIENTS = ("habitat-operator", "habitat-bench")
# Audit verbs that write; a server-side apply is a `patch`.
WRITES = ("create", "update", "patch")
HABITAT = re.compile(r"^(bench-\d+)")
# kube-controller-manager's controller that creates the StatefulSets' pods (the suffix of its
# User-Agent), and how long from a run's first create its pace is measured.
STATEFULSET_CONTROLLER = "statefulset-controller"
PACE_WINDOW_S = 4.0


def seconds(stamp):
    """An audit timestamp (RFC 3339, microseconds) as seconds since the epoch."""
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        whole, frac = stamp.split(".")
        stamp = whole + "." + (frac + "000000")[:6]
    return datetime.fromisoformat(stamp).timestamp()


def quantile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def is_run(namespace):
    return namespace in RUNS or bool(ROUND.match(namespace or ""))


def operators(run):
    """Whether the operator made the run's writes (else the benchmark's driver or a floor)."""
    return run == "bench" or run.startswith("bench-round-")


def read(path):
    """Completed requests in the benchmark's namespaces, by namespace."""
    runs = collections.defaultdict(list)
    with open(path) as log:
        for line in log:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("stage") != "ResponseComplete":
                continue
            ref = e.get("objectRef") or {}
            if not is_run(ref.get("namespace")):
                continue
            runs[ref["namespace"]].append({
                "received": seconds(e["requestReceivedTimestamp"]),
                "done": seconds(e["stageTimestamp"]),
                "verb": e["verb"],
                "resource": ref.get("resource", ""),
                "subresource": ref.get("subresource", ""),
                "name": ref.get("name", ""),
                "client": e.get("userAgent", "").split("/")[0],
                "agent": e.get("userAgent", ""),
                "code": (e.get("responseStatus") or {}).get("code") or 0,
            })
    return runs


def habitats(requests):
    """Per Habitat, the time of each milestone, from the run's first Habitat create."""
    start = start_of(requests)
    if start is None:
        return {}
    per = collections.defaultdict(dict)
    for r in sorted(requests, key=lambda r: r["done"]):
        m = HABITAT.match(r["name"])
        if not m or r["code"] >= 300 or r["verb"] not in WRITES:
            continue
        h, t = per[m.group(1)], r["done"] - start
        kind, sub = r["resource"], r["subresource"]
        if kind == "habitats" and r["verb"] == "create":
            h["created"] = t
        elif kind == "habitats" and sub == "":
            h.setdefault("finalizer", t)
        elif kind == "habitats" and sub == "status":
            h["ready"] = t
        elif kind == "configmaps":
            h.setdefault("config map", t)
        elif kind == "statefulsets" and sub == "":
            h.setdefault("statefulset", t)
        elif kind == "pods" and r["verb"] == "create" and sub == "":
            h.setdefault("first pod", t)
            h["last pod"] = t
        elif kind == "pods" and sub == "status":
            h["last pod status"] = t
    return per


def start_of(requests):
    """When the run's first Habitat create completed, or None."""
    creates = [r["done"] for r in requests if r["resource"] == "habitats" and r["verb"] == "create"]
    return min(creates) if creates else None


def controller_pace(requests, start, suffix=STATEFULSET_CONTROLLER, window=PACE_WINDOW_S):
    """The latencies (ms) of the requests a kube-controller-manager controller sent within
    `window` seconds of `start`."""
    return [1000 * (r["done"] - r["received"]) for r in requests
            if r["agent"].endswith(suffix) and 0 <= r["received"] - start < window]


def in_flight(requests, client):
    """The writes of `client` in flight at once until the run's last status write, the driver's
    Habitat creates aside (and, after the run, its removal of the required floor's finalizers):
    the mean over the time from its first write to its last answer, and the most."""
    statuses = [r["done"] for r in requests if r["resource"] == "habitats"
                and r["subresource"] == "status" and r["verb"] in WRITES]
    end = max(statuses, default=float("inf"))
    edges = []
    for r in requests:
        if r["client"] == client and r["verb"] in WRITES and r["received"] <= end and not (
                r["resource"] == "habitats" and r["verb"] == "create"):
            edges += [(r["received"], 1), (r["done"], -1)]
    if not edges:
        return 0.0, 0
    edges.sort()
    current = most = 0
    area = 0.0
    first, last = edges[0][0], edges[0][0]
    for t, step in edges:
        area += current * (t - last)
        last = t
        current += step
        most = max(most, current)
    return (area / (last - first) if last > first else 0.0), most


def waits(per, later, earlier):
    return [h[later] - h[earlier] for h in per.values() if later in h and earlier in h]


def main(path):
    runs = read(path)
    for run in sorted(runs, key=lambda r: min(e["received"] for e in runs[r])):
        per = habitats(runs.get(run, []))
        if not per:
            continue
        print(f"{run}: {len(per)} Habitats, {len(runs[run])} requests in its namespace")
        print(f"  {'seconds from the first create':32s} {'p10':>7s} {'p50':>7s} {'p90':>7s} {'max':>7s}")
        for milestone in ("created", "finalizer", "config map", "statefulset", "first pod",
                          "last pod", "last pod status", "ready"):
            xs = [h[milestone] for h in per.values() if milestone in h]
            if xs:
                print(f"  {milestone:32s} " + " ".join(
                    f"{quantile(xs, p):7.1f}" for p in (0.1, 0.5, 0.9)) + f" {max(xs):7.1f}")
        for later, earlier in (("statefulset", "created"), ("first pod", "statefulset"),
                               ("ready", "last pod status")):
            xs = waits(per, later, earlier)
            if xs:
                print(f"  wait: {later} after {earlier}: p50 {quantile(xs, 0.5):.2f} s, "
                      f"p90 {quantile(xs, 0.9):.2f} s, max {max(xs):.2f} s")
        latency = collections.defaultdict(list)
        for r in runs[run]:
            if r["client"] in CLIENTS and r["verb"] in WRITES:
                key = f"{r['client']} {r['verb']} {r['resource']}" + (
                    f"/{r['subresource']}" if r["subresource"] else "")
                latency[key].append(1000 * (r["done"] - r["received"]))
        for key in sorted(latency):
            xs = latency[key]
            print(f"  latency {key:52s} n={len(xs):5d} p50 {quantile(xs, 0.5):6.1f} ms, "
                  f"p90 {quantile(xs, 0.9):6.1f} ms, mean {sum(xs) / len(xs):6.1f} ms")
        pace = controller_pace(runs[run], start_of(runs[run]))
        if pace:
            print(f"  {STATEFULSET_CONTROLLER} in the first {PACE_WINDOW_S:g} s: {len(pace)} "
                  f"requests, latency p50 {quantile(pace, 0.5):.1f} ms, "
                  f"mean {sum(pace) / len(pace):.1f} ms")
        client = "habitat-operator" if operators(run) else "habitat-bench"
        mean, most = in_flight(runs[run], client)
        print(f"  writes in flight ({client}): mean {mean:.1f}, most {most}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
