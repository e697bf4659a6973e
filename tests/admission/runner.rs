//! Runs every case of `tests/admission/cases.yaml` against one ground (an API server reached
//! by a `kube::Client`) and compares each answer with the one recorded from a real
//! kube-apiserver. Included with `#[path]` by `tests/admission.rs` (both grounds) and
//! `sandbox/tests/admission.rs` (the sandbox); the including crate provides `crate::http` (the
//! `http` crate, as `hyper` or `axum` re-export it).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::http::Request;
use kube::client::Body;
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const CRD: &str = "habitats.habitat.sh";

/// One answer: status code, body, and the texts of its `Warning: 299 - "..."` headers.
#[derive(Debug)]
struct Answer {
    code: u16,
    body: Value,
    warnings: Vec<String>,
}

async fn req(client: &kube::Client, method: &str, path: &str, ct: &str, body: &Value) -> Answer {
    let data = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(Body::from(data))
        .expect("a request");
    let resp = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: no answer: {e}"));
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|w| w.splitn(3, ' ').nth(2))
        .map(|q| serde_json::from_str::<String>(q).unwrap_or_else(|_| q.to_string()))
        .collect();
    let bytes = resp
        .into_body()
        .collect_bytes()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: reading the answer: {e}"));
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer {
        code,
        body,
        warnings,
    }
}

fn yaml(root: &Path, path: &str) -> Value {
    let text = std::fs::read_to_string(root.join(path)).expect(path);
    serde_yaml::from_str(&text).expect("YAML")
}

/// Installs `crds/habitat.yaml` as it is (an existing copy is kept) and waits until it is
/// Established and its resource is served.
async fn install_crd(client: &kube::Client, crd: &Value, namespace: &str) {
    let ans = req(client, "POST", CRDS, "application/json", crd).await;
    assert!(
        ans.code == 201 || ans.code == 409,
        "crds/habitat.yaml does not install: {} {}",
        ans.code,
        ans.body
    );
    let list = format!("/apis/habitat.sh/v1/namespaces/{namespace}/habitats");
    let start = Instant::now();
    loop {
        let crd = req(client, "GET", &format!("{CRDS}/{CRD}"), "", &Value::Null).await;
        let established = crd.body["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if established && req(client, "GET", &list, "", &Value::Null).await.code == 200 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the CRD is not Established after 60s: {}",
            crd.body["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn merge(target: &mut Value, patch: &Value) {
    for (k, v) in patch.as_object().into_iter().flatten() {
        match (target.get_mut(k), v) {
            (_, Value::Null) => {
                target.as_object_mut().map(|m| m.remove(k));
            }
            (Some(t), Value::Object(_)) if t.is_object() => merge(t, v),
            _ => target[k.as_str()] = v.clone(),
        }
    }
}

/// Grows `field` one past its bound in the CRD's schema; returns the bound.
fn grow(obj: &mut Value, schema: &Value, g: &Value) -> u64 {
    let field = g["field"].as_str().unwrap_or_default();
    let mut s = schema;
    let mut node = &mut *obj;
    for seg in field.split('.') {
        s = &s["properties"][seg];
        node = &mut node[seg];
    }
    let bound = g["bound"].as_str().unwrap_or_default();
    let n = s[bound]
        .as_u64()
        .unwrap_or_else(|| panic!("crds/habitat.yaml sets no {bound} on {field}"));
    match node {
        Value::String(v) => {
            let last = v.chars().last().unwrap_or('a');
            while (v.chars().count() as u64) <= n {
                v.push(last);
            }
        }
        Value::Array(v) => {
            while (v.len() as u64) <= n {
                v.push(v[0].clone());
            }
        }
        _ => panic!("cannot grow {field}"),
    }
    n
}

fn sorted(causes: &Value) -> Vec<String> {
    let mut v: Vec<String> = causes
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{} | {} | {}", c["field"], c["reason"], c["message"]))
        .collect();
    v.sort();
    v
}

/// The message a 422 with `causes` has: `Habitat.habitat.sh "NAME" is invalid: ...`.
fn invalid_message(name: &str, causes: &Value) -> String {
    let texts: Vec<String> = causes
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let list = if texts.len() == 1 {
        texts[0].clone()
    } else {
        format!("[{}]", texts.join(", "))
    };
    format!("Habitat.habitat.sh \"{name}\" is invalid: {list}")
}

/// Runs one case in `namespace`; returns the request under test's answer and the bound of a
/// `grow` case.
async fn run_case(
    client: &kube::Client,
    namespace: &str,
    schema: &Value,
    case: &Value,
) -> (Answer, Option<u64>) {
    let base = format!("/apis/habitat.sh/v1/namespaces/{namespace}/habitats");
    let name = case["name"].as_str().expect("name");
    let mut obj = case.get("object").cloned().unwrap_or(json!({}));
    obj["apiVersion"] = json!("habitat.sh/v1");
    obj["kind"] = json!("Habitat");
    let mut metadata = obj.get("metadata").cloned().unwrap_or(json!({}));
    metadata["name"] = json!(name);
    obj["metadata"] = metadata;
    let n = case.get("grow").map(|g| grow(&mut obj, schema, g));
    let query = case["query"]
        .as_str()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let json_ct = "application/json";
    let op = case["op"].as_str().unwrap_or("create");
    let create_path = if op == "create" {
        format!("{base}{query}")
    } else {
        base.clone()
    };
    let mut ans = req(client, "POST", &create_path, json_ct, &obj).await;
    let path = format!("{base}/{name}");
    match op {
        "create" => {}
        "update" => {
            let ct = "application/merge-patch+json";
            ans = req(
                client,
                "PATCH",
                &format!("{path}{query}"),
                ct,
                &case["patch"],
            )
            .await;
        }
        "status" | "replace" => {
            let mut cur = req(client, "GET", &path, "", &Value::Null).await.body;
            merge(&mut cur, &case["patch"]);
            let sub = if op == "status" { "/status" } else { "" };
            ans = req(client, "PUT", &format!("{path}{sub}{query}"), json_ct, &cur).await;
        }
        other => panic!("{name}: unknown op {other}"),
    }
    (ans, n)
}

/// What differs between `got` and the recorded `expect`; empty when they agree.
fn compare(name: &str, got: &Answer, expect: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if got.code != expect["code"] {
        problems.push(format!("code: {} instead of {}", got.code, expect["code"]));
    }
    if got.code >= 300 {
        let (have, want) = (
            sorted(&got.body["details"]["causes"]),
            sorted(&expect["causes"]),
        );
        for c in want.iter().filter(|c| !have.contains(c)) {
            problems.push(format!("missing cause: {c}"));
        }
        for c in have.iter().filter(|c| !want.contains(c)) {
            problems.push(format!("extra cause:   {c}"));
        }
        // The causes in the answer's order (the real server's is random), compared as a set above.
        let message = invalid_message(name, &got.body["details"]["causes"]);
        let want = expect
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or(&message);
        if got.body["message"] != want {
            problems.push(format!(
                "message: {}\n      instead of {}",
                got.body["message"],
                Value::String(want.into())
            ));
        }
    } else {
        for k in ["spec", "status"] {
            if got.body.get(k) != expect["object"].get(k) {
                problems.push(format!(
                    "{k}: {}\n      instead of {}",
                    got.body[k], expect["object"][k]
                ));
            }
        }
    }
    let want: Vec<String> = expect["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(String::from))
        .collect();
    if got.warnings != want {
        problems.push(format!(
            "warnings: {:?}\n      instead of {want:?}",
            got.warnings
        ));
    }
    problems
}

/// The recorded expectation of a case, with a `grow` case's bound filled in.
fn expectation(case: &Value, n: Option<u64>) -> Value {
    let mut expect = case["expect"].to_string();
    if let Some(n) = n {
        expect = expect
            .replace("${maxLength}", &n.to_string())
            .replace("${maxItems}", &n.to_string())
            .replace("${count}", &(n + 1).to_string());
    }
    serde_json::from_str(&expect).expect("expect")
}

/// Runs every case on `ground` (named in messages: "the sandbox", "the real control plane")
/// in a namespace of its own, after installing `crds/habitat.yaml` from `root` (the
/// repository); panics with a readable difference per case that does not get the recorded
/// answer. Returns how many cases ran.
pub async fn every_case(client: &kube::Client, root: &Path, ground: &str) -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let namespace = format!("admission-{}", nanos % 1_000_000);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let ans = req(
        client,
        "POST",
        "/api/v1/namespaces",
        "application/json",
        &ns,
    )
    .await;
    assert_eq!(ans.code, 201, "namespace {namespace}: {}", ans.body);
    let crd = yaml(root, "crds/habitat.yaml");
    install_crd(client, &crd, &namespace).await;
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let cases = yaml(root, "tests/admission/cases.yaml");
    let cases = cases["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let (got, n) = run_case(client, &namespace, schema, case).await;
        let expect = expectation(case, n);
        let problems = compare(name, &got, &expect);
        if !problems.is_empty() {
            let shown = json!({"code": got.code, "message": got.body["message"],
                "causes": got.body["details"]["causes"], "warnings": got.warnings});
            failures.push(format!(
                "case {name}:\n  - {}\n  recorded from kube-apiserver v1.36: {expect}\n  {ground} answered: {shown}",
                problems.join("\n  - ")
            ));
        }
    }
    let path = format!("/api/v1/namespaces/{namespace}");
    req(client, "DELETE", &path, "application/json", &Value::Null).await;
    assert!(
        failures.is_empty(),
        "{} of {} cases do not get the recorded answer on {ground}:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    eprintln!("{} cases got the recorded answer on {ground}", cases.len());
    cases.len()
}
