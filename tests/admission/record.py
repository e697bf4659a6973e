#!/usr/bin/env python3
"""Record (or --check) the real API server's answers to tests/admission/cases.yaml.

Starts etcd and kube-apiserver from $KUBEBUILDER_ASSETS on loopback, installs the CRD
crds/habitat.yaml as it is, runs every case and writes its `expect`. Needs python3 with PyYAML, openssl.

    KUBEBUILDER_ASSETS=/tmp/k8s-bin python3 tests/admission/record.py          # rewrite expectations
    KUBEBUILDER_ASSETS=/tmp/k8s-bin python3 tests/admission/record.py --check  # compare only
"""
import copy, json, os, re, shutil, socket, ssl, subprocess, sys, tempfile, time, urllib.request
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests/admission/cases.yaml")
BASE = "/apis/habitat.sh/v1/namespaces/default/habitats"
CTX = ssl._create_unverified_context()


def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


class Server:
    def __init__(self, assets):
        self.dir = tempfile.mkdtemp(prefix="admission-")
        d, self.token = self.dir, os.urandom(16).hex()
        p1, p2, p3 = port(), port(), port()
        open(f"{d}/tokens.csv", "w").write(f"{self.token},admin,admin,system:masters\n")
        subprocess.run(["openssl", "genrsa", "-out", f"{d}/sa.key", "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", f"{d}/sa.key", "-pubout", "-out", f"{d}/sa.pub"], check=True, capture_output=True)
        log = open(f"{d}/log", "w")
        self.procs = [subprocess.Popen([f"{assets}/etcd", "--name=t", f"--data-dir={d}/etcd",
            f"--listen-client-urls=http://127.0.0.1:{p1}", f"--advertise-client-urls=http://127.0.0.1:{p1}",
            f"--listen-peer-urls=http://127.0.0.1:{p2}", f"--initial-advertise-peer-urls=http://127.0.0.1:{p2}",
            f"--initial-cluster=t=http://127.0.0.1:{p2}", "--unsafe-no-fsync=true", "--log-level=error"], stdout=log, stderr=log)]
        self.procs.append(subprocess.Popen([f"{assets}/kube-apiserver", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={p3}", f"--etcd-servers=http://127.0.0.1:{p1}",
            f"--cert-dir={d}/certs", f"--token-auth-file={d}/tokens.csv", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d}/sa.pub", f"--service-account-signing-key-file={d}/sa.key",
            "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none"], stdout=log, stderr=log))
        self.url = f"https://127.0.0.1:{p3}"
        for _ in range(300):
            if self.req("GET", "/readyz")[0] == 200:
                return
            time.sleep(0.3)
        self.stop()
        raise SystemExit("kube-apiserver did not become ready")

    def req(self, method, path, body=None, ctype="application/json", warnings=None):
        """(code, body); the texts of the answer's `Warning: 299 - "..."` headers are appended
        to `warnings` when given."""
        data = None if body is None else json.dumps(body).encode()
        r = urllib.request.Request(self.url + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": ctype})
        try:
            with urllib.request.urlopen(r, context=CTX, timeout=30) as resp:
                code, headers, raw = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            code, headers, raw = e.code, e.headers, e.read()
        except OSError:
            return 0, None
        if warnings is not None:
            for w in headers.get_all("Warning") or []:
                warnings.append(json.loads(w.split(" ", 2)[2]))
        return code, parse(raw)

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
            try: p.wait(5)
            except subprocess.TimeoutExpired: p.kill(); p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def parse(raw):
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode(errors="replace")


def schema_at(schema, field):
    for seg in field.split("."):
        schema = schema["properties"][seg]
    return schema


def grow(obj, schema, g):
    *parents, last = g["field"].split(".")
    node = obj
    for seg in parents: node = node[seg]
    n = schema_at(schema, g["field"])[g["bound"]]
    v = node[last]
    node[last] = (v + v[-1] * (n + 1 - len(v))) if isinstance(v, str) else (v + [v[0]] * (n + 1 - len(v)))
    return n


def run(srv, case, schema):
    name = case["name"]
    obj = copy.deepcopy(case.get("object") or {})
    obj.update({"apiVersion": "habitat.sh/v1", "kind": "Habitat",
                "metadata": {**obj.get("metadata", {}), "name": name}})
    n = grow(obj, schema, case["grow"]) if "grow" in case else None
    srv.req("DELETE", f"{BASE}/{name}")
    for _ in range(50):
        if srv.req("GET", f"{BASE}/{name}")[0] == 404: break
        time.sleep(0.1)
    op = case.get("op", "create")
    query = f"?{case['query']}" if "query" in case else ""
    warnings = []
    if op == "create":
        code, body = srv.req("POST", BASE + query, obj, warnings=warnings)
    else:
        code, body = srv.req("POST", BASE, obj)
    if op == "update":
        code, body = srv.req("PATCH", f"{BASE}/{name}{query}", case["patch"], "application/merge-patch+json", warnings=warnings)
    elif op in ("status", "replace"):
        cur = srv.req("GET", f"{BASE}/{name}")[1]
        merge(cur, case["patch"])
        sub = "/status" if op == "status" else ""
        code, body = srv.req("PUT", f"{BASE}/{name}{sub}{query}", cur, warnings=warnings)
    expect = {"code": code}
    if code >= 300:
        expect["causes"] = body.get("details", {}).get("causes", [])
        want = f'Habitat.habitat.sh "{name}" is invalid: '
        if not body["message"].startswith(want):
            expect["message"] = body["message"]
    else:
        expect["object"] = {k: body[k] for k in ("spec", "status") if k in body}
    if warnings:
        expect["warnings"] = warnings
    if n is not None:
        text = json.dumps(expect)
        text = text.replace(f"more than {n} bytes", "more than ${maxLength} bytes")
        text = text.replace(f"Too many: {n + 1}: must have at most {n} items", "Too many: ${count}: must have at most ${maxItems} items")
        expect = json.loads(text)
    return expect


def merge(target, patch):
    for k, v in patch.items():
        if v is None: target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict): merge(target[k], v)
        else: target[k] = v


def canon(expect):
    e = copy.deepcopy(expect)
    if "causes" in e: e["causes"] = sorted(e["causes"], key=json.dumps)
    return e


def main():
    check = "--check" in sys.argv
    assets = os.environ.get("KUBEBUILDER_ASSETS") or sys.exit("set KUBEBUILDER_ASSETS")
    crd = yaml.safe_load(open(os.path.join(ROOT, "crds/habitat.yaml")))
    srv = Server(assets)
    try:
        code, body = srv.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        if code != 201: raise SystemExit(f"CRD not installed: {code} {body}")
        for _ in range(100):
            if srv.req("GET", BASE)[0] == 200: break
            time.sleep(0.2)
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        text = open(CASES).read()
        header = text[: text.index("\ncases:") + 1]
        cases = yaml.safe_load(text)["cases"]
        bad = 0
        for case in cases:
            got = run(srv, case, schema)
            if check:
                if canon(got) != canon(case.get("expect") or {}):
                    bad += 1
                    print(f"{case['name']}: expected {case.get('expect')}\n  got {got}")
            else:
                case["expect"] = got
        if check:
            print(f"{len(cases) - bad} passed, {bad} failed")
            sys.exit(1 if bad else 0)
        body = yaml.safe_dump({"cases": cases}, sort_keys=False, width=140, default_flow_style=None, allow_unicode=True)
        open(CASES, "w").write(header + body)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
