#!/usr/bin/env python3
"""Why the operator reconciled each Habitat and how each reconcile ended, from its debug log.

    HABITAT_BENCH_OPERATOR_LOG=warn,habitat_operator::reconcile=debug,kube_runtime::controller=info \\
        cargo bench --bench scale -- --ground real --no-floor 100 1000
    python3 benches/tools/reconcile_reasons.py /tmp/habitat-bench-operator-*/bench-real-1000.log

The benchmark prints the directory of the kept logs, one per run, named by the operator's
identity. With that filter every reconcile logs one line ("reconciled") with the reason kube's
Controller gave for it (`object updated`, `related object updated: KIND`, `reconciler requested
retry`) and the pass's outcome (`Waiting(Rollout)`, `Waiting(Election)`, `Waiting(Nothing)`...).

For each log, reconciles per Habitat by (topology, reason, outcome), until the last transition to
Ready (the convergence) and after it (the quiet period). A Habitat `bench-I` of the benchmark's
workload is a leader group when I % 10 is 3, 6 or 9 (benches/scale/workload.rs). Debug logging
costs the operator CPU: use it to count, not to time. Needs only python3.
"""
import collections
import re
import sys

LINE = re.compile(
    r"object\.reason=([^}]*)\}.*reconciled ns=\S+ name=(\S+) outcome=(\S+)"
)
RELATED = re.compile(r"(related object updated: [A-Za-z]+).*")
WORKLOAD_NAME = re.compile(r"[a-z-]+-(\d+)$")


def topology(name):
    m = WORKLOAD_NAME.match(name)
    if not m:
        return "other"
    return "leader" if int(m.group(1)) % 10 in (3, 6, 9) else "standalone"


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    # Timestamps are RFC 3339 with a fixed width: compared as strings.
    ready = [l[:27] for l in lines if "phase transition" in l and "to=Ready" in l]
    converged = max(ready) if ready else None
    until, after = collections.Counter(), collections.Counter()
    habitats = set()
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        reason, name, outcome = m.groups()
        reason = RELATED.sub(r"\1", reason)
        habitats.add(name)
        key = (topology(name), reason, outcome)
        if converged is None or line[:27] <= converged:
            until[key] += 1
        else:
            after[key] += 1
    return habitats, until, after


def table(title, counts, n):
    total = sum(counts.values())
    print(f"  {title}: {total / n:.2f} per Habitat")
    for (topo, reason, outcome), count in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"    {count / n:6.3f}  {topo:<10}  {reason:<42}  {outcome}")


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    for path in paths:
        habitats, until, after = read(path)
        n = max(len(habitats), 1)
        print(f"{path}: {len(habitats)} Habitats reconciled")
        table("until the last Ready", until, n)
        table("after it", after, n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
