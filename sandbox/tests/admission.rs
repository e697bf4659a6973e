//! Every case of `tests/admission/cases.yaml` (invalid Habitats with the answers a real
//! kube-apiserver v1.36 gave, recorded by `tests/admission/record.py`) against the sandbox,
//! with `crds/habitat.yaml` as it is. The runner is shared with the root crate's
//! `tests/admission.rs`, which runs the same cases on a real control plane too.

mod common;

use axum::http;

#[path = "../../tests/admission/runner.rs"]
mod runner;

#[tokio::test]
async fn every_recorded_case_gets_the_real_servers_answer() {
    let sb = common::start().await;
    let uri = sb.url().parse().expect("the sandbox's URL");
    let client = kube::Client::try_from(kube::Config::new(uri)).expect("a client");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    runner::every_case(&client, &root, "the sandbox").await;
}

/// A merge patch whose result has unknown fields: Strict refuses it with the real server's 422
/// on `patch`, Warn answers with a `Warning` header per field.
#[tokio::test]
async fn field_validation_of_a_merge_patch() {
    let sb = common::start().await;
    let crd: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/habitat.yaml"),
        )
        .expect("the CRD"),
    )
    .expect("YAML");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    assert_eq!(common::req(&sb, "POST", crds, crd).await.0, 201);
    let base = "/apis/habitat.sh/v1/namespaces/default/habitats";
    let h = serde_json::json!({"apiVersion": "habitat.sh/v1", "kind": "Habitat",
        "metadata": {"name": "p"}, "spec": {"image": "a", "service": {"name": "r"}}});
    assert_eq!(common::req(&sb, "POST", base, h).await.0, 201);
    let patch = r#"{"spec":{"color":"red","service":{"x":1}}}"#;
    let ct = "application/merge-patch+json";
    let (code, body) = common::raw(
        &common::addr(&sb),
        "PATCH",
        &format!("{base}/p?fieldValidation=Strict"),
        ct,
        patch,
    )
    .await;
    let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "patch");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(r#" "" is invalid: patch: Invalid value: "{"#));
    assert!(message.ends_with(
        r#"strict decoding error: unknown field "spec.color", unknown field "spec.service.x""#
    ));
    let mut s = tokio::net::TcpStream::connect(common::addr(&sb))
        .await
        .expect("connect");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "PATCH {base}/p?fieldValidation=Warn HTTP/1.0\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n{patch}",
        patch.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).await.expect("read");
    assert!(text.starts_with("HTTP/1.0 200"), "{text}");
    let head = text
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        head.contains(r#"warning: 299 - "unknown field \"spec.color\"""#),
        "{head}"
    );
    assert!(
        head.contains(r#"warning: 299 - "unknown field \"spec.service.x\"""#),
        "{head}"
    );
}
