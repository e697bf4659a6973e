//! Every case of `tests/admission/cases.yaml` (invalid Habitats with the answers a real
//! kube-apiserver v1.36 gave, recorded by `tests/admission/record.py`) against the sandbox.

mod common;

use serde_json::{json, Value};

const BASE: &str = "/apis/habitat.sh/v1/namespaces/default/habitats";

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(root().join(path)).expect(path);
    serde_yaml::from_str(&text).expect("YAML")
}

/// The fallback of record.py: bounds where a string or list has none.
fn bound_unbounded(s: &mut Value) {
    match s["type"].as_str() {
        Some("string") if s.get("maxLength").is_none() => s["maxLength"] = json!(253),
        Some("array") if s.get("maxItems").is_none() => s["maxItems"] = json!(32),
        _ => {}
    }
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(bound_unbounded);
    }
    for k in ["items", "additionalProperties"] {
        if let Some(sub) = s.get_mut(k).filter(|v| v.is_object()) {
            bound_unbounded(sub);
        }
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

/// Grow `field` one past its bound; returns the bound.
fn grow(obj: &mut Value, schema: &Value, g: &Value) -> u64 {
    let field = g["field"].as_str().unwrap_or_default();
    let mut s = schema;
    let mut node = &mut *obj;
    for seg in field.split('.') {
        s = &s["properties"][seg];
        node = &mut node[seg];
    }
    let n = s[g["bound"].as_str().unwrap_or_default()]
        .as_u64()
        .expect("bound");
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
        .map(|c| format!("{}|{}|{}", c["field"], c["reason"], c["message"]))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn every_recorded_case_gets_the_real_servers_answer() {
    let sb = common::start().await;
    let mut crd = yaml("crds/habitat.yaml");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (mut code, _) = common::req(&sb, "POST", crds, crd.clone()).await;
    if code == 422 {
        // crds/habitat.yaml without bounds: the sandbox, like a real server, refuses it.
        for v in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
            bound_unbounded(&mut v["schema"]["openAPIV3Schema"]);
        }
        code = common::req(&sb, "POST", crds, crd.clone()).await.0;
    }
    assert_eq!(code, 201, "the CRD installs");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let cases = yaml("tests/admission/cases.yaml");
    let cases = cases["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15);
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let mut obj = case.get("object").cloned().unwrap_or(json!({}));
        obj["apiVersion"] = json!("habitat.sh/v1");
        obj["kind"] = json!("Habitat");
        obj["metadata"] = json!({"name": name});
        let n = case.get("grow").map(|g| grow(&mut obj, schema, g));
        let (mut code, mut body) = common::req(&sb, "POST", BASE, obj).await;
        let path = format!("{BASE}/{name}");
        match case["op"].as_str().unwrap_or("create") {
            "update" => {
                let ct = "application/merge-patch+json";
                (code, body) = common::req_ct(&sb, "PATCH", &path, ct, case["patch"].clone()).await;
            }
            "status" => {
                let (_, mut cur) = common::req(&sb, "GET", &path, Value::Null).await;
                merge(&mut cur, &case["patch"]);
                (code, body) = common::req(&sb, "PUT", &format!("{path}/status"), cur).await;
            }
            _ => {}
        }
        let mut expect = case["expect"].to_string();
        if let Some(n) = n {
            expect = expect
                .replace("${maxLength}", &n.to_string())
                .replace("${maxItems}", &n.to_string())
                .replace("${count}", &(n + 1).to_string());
        }
        let expect: Value = serde_json::from_str(&expect).expect("expect");
        let mut problems = Vec::new();
        if code != expect["code"] {
            problems.push(format!("code {code}, expected {}", expect["code"]));
        }
        if code >= 300 {
            if sorted(&body["details"]["causes"]) != sorted(&expect["causes"]) {
                problems.push(format!(
                    "causes {:#?}\nexpected {:#?}",
                    sorted(&body["details"]["causes"]),
                    sorted(&expect["causes"])
                ));
            }
            let texts: Vec<String> = body["details"]["causes"]
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
            let message = format!("Habitat.habitat.sh \"{name}\" is invalid: {list}");
            let want = expect
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or(&message);
            if body["message"] != want {
                problems.push(format!("message {}, expected {want}", body["message"]));
            }
        } else {
            for k in ["spec", "status"] {
                if body.get(k) != expect["object"].get(k) {
                    problems.push(format!("{k} {}, expected {}", body[k], expect["object"][k]));
                }
            }
        }
        if !problems.is_empty() {
            failures.push(format!("{name}: {}", problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
