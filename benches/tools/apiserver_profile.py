#!/usr/bin/env python3
"""Where kube-apiserver's CPU goes in each run of the scale benchmark, from its own profiles.

    HABITAT_BENCH_KEEP_AUDIT=DIR cargo bench --bench scale -- --ground real --rounds 3 100 2> bench.err &
    python3 benches/tools/apiserver_profile.py capture bench.err PROFILES
    python3 benches/tools/apiserver_profile.py runs DIR/audit-*.log PROFILES

`capture` waits until the benchmark's stderr names the control plane's admin kubeconfig, then
takes kube-apiserver's CPU profiles back to back (`/debug/pprof/profile?seconds=2`, through
`kubectl get --raw`) until the server stops answering, and writes each with its start and end
time (`PROFILES/index`).

`capture-kcm` does the same for kube-controller-manager: its secure port is read from its
command line (the process whose arguments name the control plane's directory), and the
profiles are fetched with the admin kubeconfig's token.

`runs` finds each run's window in the audit log (from its first Habitat create to its last
status write, in its namespace: `benches/tools/audit_timeline.py` names them), keeps the
profiles that lie at least 60% inside a window, and prints, for the plain floor's runs, the
required floor's and the operator's, kube-apiserver's CPU seconds per run under a set of frames
(handlers, storage, watch, validation, encoding, garbage collection), then the frames whose
share grew most from the plain floor's runs, and from the required floor's, to the operator's. Per run: each kind's CPU
seconds per second of its profiles, times its runs' mean length. A frame's figure includes its
callees, and a sample counts once under each frame of the list it passes through.

`packages` prints, for the same runs, the CPU seconds per run under each Go package a sample
passes through (the controllers of kube-controller-manager among them), for profiles of either
process.

Reads the profiles itself (gzipped `profile.proto`), so it needs only python3 and kubectl.
The tables of kube-apiserver's and kube-controller-manager's CPU per kind of run in
docs/performance.md come from it.

    python3 benches/tools/apiserver_profile.py capture-kcm bench.err KCM_PROFILES
    python3 benches/tools/apiserver_profile.py packages DIR/audit-*.log KCM_PROFILES
"""
import collections
import gzip
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from datetime import datetime

# The share of a profile that must lie inside a run's window for it to count for that run.
INSIDE = 0.6
SECONDS = 2
KINDS = (
    ("plain floor", re.compile(r"^floor(-round-\d+)?$")),
    ("required floor", re.compile(r"^required-floor(-round-\d+)?$")),
    ("operator", re.compile(r"^bench(-round-\d+)?$")),
)
# A label, and the frames it stands for (a request's handler runs partly in a goroutine of its
# own, `finishRequest`, whose stack does not hold the handler's first frame).
FRAMES = (
    ("PATCH", ("handlers.PatchResource", "handlers.(*patcher)")),
    ("POST", ("createHandler",)),
    ("PUT", ("handlers.UpdateResource",)),
    ("LIST", ("handlers.ListResource",)),
    ("WATCH", ("handlers.handleWatch", "WatchServer).HandleHTTP")),
    ("storage update", ("etcd3.(*store).GuaranteedUpdate",)),
    ("storage create", ("etcd3.(*store).Create",)),
    ("etcd watch decode", ("etcd3.(*watchChan)",)),
    ("watch encode", ("watchEncoder", "watchEmbeddedEncoder", "cachingObject).CacheEncode")),
    ("custom resources", ("k8s.io/apiextensions-apiserver",)),
    ("validation", ("Validate",)),
    ("CEL", ("cel-go",)),
    ("field manager", ("fieldmanager",)),
    ("admission", ("admission",)),
    ("audit", ("k8s.io/apiserver/pkg/audit",)),
    ("JSON", ("encoding/json",)),
    ("protobuf", ("protobuf",)),
    ("HTTP/2", ("http2",)),
    ("TLS", ("crypto/tls",)),
    ("allocation", ("runtime.mallocgc",)),
    ("garbage collection", ("runtime.gcBgMarkWorker",)),
)


def admin_kubeconfig(stderr_path):
    """The admin kubeconfig the benchmark's stderr names, once it does."""
    while True:
        try:
            m = re.search(r"admin kubeconfig (\S+?)\)", open(stderr_path).read())
            if m:
                return m.group(1)
        except OSError:
            pass
        time.sleep(0.2)


def record(out, fetch):
    """Profiles from `fetch()` (the body, or None once the process stops answering), back to
    back, each with its start and end time in `out/index`."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "index"), "a") as index:
        i = 0
        while True:
            began = time.time()
            body = fetch()
            if body is None:
                break
            with open(os.path.join(out, f"p{i}.pb.gz"), "wb") as f:
                f.write(body)
            index.write(f"{i} {began} {time.time()}\n")
            index.flush()
            i += 1
    print(f"{i} profiles in {out}")


def capture(stderr_path, out):
    kubeconfig = admin_kubeconfig(stderr_path)
    print(f"kube-apiserver of {kubeconfig}", flush=True)

    def fetch():
        r = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "get", "--raw",
             f"/debug/pprof/profile?seconds={SECONDS}"],
            capture_output=True)
        return r.stdout if r.returncode == 0 else None
    record(out, fetch)


def capture_kcm(stderr_path, out):
    kubeconfig = admin_kubeconfig(stderr_path)
    token = re.search(r"token:\s*(\S+)", open(kubeconfig).read()).group(1)
    directory, port = os.path.dirname(kubeconfig), None
    while port is None:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        for line in ps.splitlines():
            m = re.search(r"--secure-port=(\d+)", line)
            if m and "kube-controller-manager" in line and directory in line:
                port = m.group(1)
        time.sleep(0.5)
    print(f"kube-controller-manager on port {port} of {kubeconfig}", flush=True)
    # Its serving certificate is self-signed; the profile is all that is read over it.
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={SECONDS}"

    def fetch():
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            return urllib.request.urlopen(request, context=tls, timeout=SECONDS + 10).read()
        except OSError:
            return None
    record(out, fetch)


def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def fields(b):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, v


def ints(wire, v):
    """A repeated integer field's values, packed or not."""
    if wire == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def samples(path):
    """(stack of function names, leaf first; CPU nanoseconds) of each sample of a profile."""
    data = gzip.open(path).read()
    raw, locations, functions, strings = [], {}, {}, []
    for number, wire, v in fields(data):
        if number == 2:  # Sample: location_id (1), value (2)
            ids, values = [], []
            for n, w, x in fields(v):
                if n == 1:
                    ids += ints(w, x)
                elif n == 2:
                    values += ints(w, x)
            raw.append((ids, values))
        elif number == 4:  # Location: id (1), line (4) with function_id (1)
            lid, lines = 0, []
            for n, w, x in fields(v):
                if n == 1:
                    lid = x
                elif n == 4:
                    lines += [y for m, _, y in fields(x) if m == 1]
            locations[lid] = lines
        elif number == 5:  # Function: id (1), name (2, a string index)
            fid = name = 0
            for n, w, x in fields(v):
                if n == 1:
                    fid = x
                elif n == 2:
                    name = x
            functions[fid] = name
        elif number == 6:
            strings.append(v.decode("utf-8", "replace"))
    names = {fid: strings[n] for fid, n in functions.items()}
    return [([names.get(f, "?") for lid in ids for f in locations.get(lid, [])], values[-1])
            for ids, values in raw]


def seconds(stamp):
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def windows(audit):
    """Each namespace's first Habitat create and last Habitat status write."""
    found = {}
    with open(audit) as log:
        for line in log:
            if '"habitats"' not in line:
                continue
            e = json.loads(line)
            ref = e.get("objectRef") or {}
            if e.get("stage") != "RequestReceived" or ref.get("resource") != "habitats":
                continue
            w = found.setdefault(ref.get("namespace"), [None, None])
            t = seconds(e["requestReceivedTimestamp"])
            if e["verb"] == "create" and w[0] is None:
                w[0] = t
            if ref.get("subresource") == "status" and e["verb"] in ("patch", "update"):
                w[1] = t
    return {ns: tuple(w) for ns, w in found.items() if None not in w}


def kinds_profiles(audit, profiles):
    """For each kind of run that has profiles inside its windows: its runs' count and mean
    length, the profiles' files, and the seconds they cover."""
    index = [line.split() for line in open(os.path.join(profiles, "index"))]
    found = windows(audit)
    for kind, pattern in KINDS:
        spans = [w for ns, w in found.items() if pattern.match(ns or "")]
        files, covered = [], 0.0
        for a, b in spans:
            for i, t0, t1 in index:
                t0, t1 = float(t0), float(t1)
                if max(0.0, min(b, t1) - max(a, t0)) >= INSIDE * (t1 - t0):
                    files.append(os.path.join(profiles, f"p{i}.pb.gz"))
                    covered += t1 - t0
        if files:
            yield kind, len(spans), sum(b - a for a, b in spans) / len(spans), files, covered


def heading(per_kind, title, width):
    """Prints `title` and the rows every table starts with (each kind's runs and profiles, its
    runs' mean length, its CPU seconds per run in all); returns the kinds in table order."""
    kinds = [k for k, _ in KINDS if k in per_kind]
    print(title)
    print(f"{'':{width}s}" + "".join(f"{k:>16s}" for k in kinds))
    print(f"{'runs, profiles':{width}s}" + "".join(
        f"{f'{per_kind[k][0]}, {per_kind[k][1]}':>16s}" for k in kinds))
    print(f"{'run length (s)':{width}s}" + "".join(f"{per_kind[k][2]:16.2f}" for k in kinds))
    print(f"{'all':{width}s}" + "".join(f"{per_kind[k][3]:16.2f}" for k in kinds))
    return kinds


# A Go package: a function's name up to its last `/`-separated part's first `.`.
PACKAGE = re.compile(r"^((?:[^/(]*/)*[^./(]+)")


def packages(audit, profiles):
    per_kind = {}
    for kind, count, length, files, covered in kinds_profiles(audit, profiles):
        every, total = collections.Counter(), 0
        for path in files:
            for stack, ns in samples(path):
                total += ns
                for p in {m.group(1) for m in map(PACKAGE.match, stack) if m}:
                    every[p] += ns
        scale = length / covered / 1e9
        per_kind[kind] = (count, len(files), length, total * scale,
                          {k: v * scale for k, v in every.items()})
    kinds = heading(per_kind, "CPU s per run, from the profiles inside each run's window, by Go package", 60)
    last = per_kind[kinds[-1]][4]
    for p in sorted(set().union(*(per_kind[k][4] for k in kinds)), key=lambda p: -last.get(p, 0))[:40]:
        print(f"{p[:60]:60s}" + "".join(f"{per_kind[k][4].get(p, 0):16.2f}" for k in kinds))


def runs(audit, profiles):
    per_kind = {}
    for kind, count, length, files, covered in kinds_profiles(audit, profiles):
        frames, every, total = collections.Counter(), collections.Counter(), 0
        for path in files:
            for stack, ns in samples(path):
                total += ns
                joined = "\n".join(stack)
                for label, keys in FRAMES:
                    if any(k in joined for k in keys):
                        frames[label] += ns
                for f in set(stack):
                    every[f] += ns
        scale = length / covered / 1e9
        per_kind[kind] = (count, len(files), length, total * scale,
                          {k: v * scale for k, v in frames.items()},
                          {k: v * scale for k, v in every.items()})
    kinds = heading(per_kind, "kube-apiserver CPU s per run, from its profiles inside each run's window", 28)
    for label, _ in FRAMES:
        print(f"{label:28s}" + "".join(f"{per_kind[k][4].get(label, 0):16.2f}" for k in kinds))
    for base in ("plain floor", "required floor"):
        if base not in per_kind or "operator" not in per_kind:
            continue
        floor, op = per_kind[base][5], per_kind["operator"][5]
        grown = sorted(set(floor) | set(op), key=lambda f: floor.get(f, 0) - op.get(f, 0))
        print(f"\nframes that grew most from the {base}'s runs to the operator's (CPU s per run)")
        for f in grown[:25]:
            print(f"  {op.get(f, 0) - floor.get(f, 0):+6.2f}  {floor.get(f, 0):6.2f} -> "
                  f"{op.get(f, 0):6.2f}  {f[:110]}")


if __name__ == "__main__":
    commands = {"capture": capture, "capture-kcm": capture_kcm, "runs": runs, "packages": packages}
    if len(sys.argv) == 4 and sys.argv[1] in commands:
        commands[sys.argv[1]](sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
