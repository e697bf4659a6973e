//! Generated and shipped artifacts stay in step with the code: the CRD, its copy in the Helm
//! chart, and the deployment manifests' RBAC.

use std::process::Command;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn crd_output() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_habitat-operator"))
        .arg("crd")
        .output()
        .expect("run crd");
    assert!(out.status.success());
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn crds_habitat_yaml_is_the_output_of_the_crd_command() {
    let committed =
        std::fs::read_to_string(root().join("crds/habitat.yaml")).expect("crds/habitat.yaml");
    assert!(
        committed == crd_output(),
        "crds/habitat.yaml is out of date: run `cargo run -- crd > crds/habitat.yaml`"
    );
}

#[test]
fn the_helm_chart_ships_the_same_crd() {
    let chart =
        std::fs::read_to_string(root().join("deploy/helm/habitat-operator/crds/habitat.yaml"))
            .expect("chart CRD");
    assert!(
        chart == crd_output(),
        "copy crds/habitat.yaml to deploy/helm/habitat-operator/crds/"
    );
}

fn documents(path: &str) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(root().join(path)).expect("manifest");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
        .collect()
}

#[test]
fn the_cluster_role_grants_what_the_operator_uses() {
    let docs = documents("deploy/habitat-operator.yaml");
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    let allowed = |group: &str, resource: &str, verb: &str| {
        role["rules"].as_sequence().into_iter().flatten().any(|r| {
            let has = |key: &str, v: &str| {
                r[key]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .any(|x| x.as_str() == Some(v))
            };
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };
    let needed = [
        ("habitat.sh", "habitats", "watch"),
        ("habitat.sh", "habitats", "patch"),
        ("habitat.sh", "habitats/status", "patch"),
        ("apps", "statefulsets", "patch"),
        ("", "configmaps", "patch"),
        ("", "services", "delete"),
        ("", "pods", "delete"),
        ("", "pods", "patch"),
        ("", "secrets", "create"),
        ("", "secrets", "watch"),
        ("policy", "poddisruptionbudgets", "patch"),
        ("events.k8s.io", "events", "create"),
    ];
    for (g, r, v) in needed {
        assert!(
            allowed(g, r, v),
            "the ClusterRole does not allow {v} on {g}/{r}"
        );
    }
    assert!(
        !allowed("", "secrets", "delete"),
        "the operator must never delete Secrets"
    );
    assert!(
        !allowed("", "persistentvolumeclaims", "delete"),
        "the operator must never delete claims"
    );
}
