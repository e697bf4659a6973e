//! Generated and shipped artifacts stay in step with the code: the CRD, its copies in the Helm
//! chart and the kustomize base, the deployment manifests' RBAC, and the security settings of
//! the rendered kustomize manifests.

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

#[test]
fn the_kustomize_base_ships_the_same_crd() {
    let base = std::fs::read_to_string(root().join("deploy/base/crd.yaml")).expect("base CRD");
    assert!(
        base == crd_output(),
        "copy crds/habitat.yaml to deploy/base/crd.yaml"
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
    let docs = documents("deploy/base/cluster-role.yaml");
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
    for verb in ["update", "patch", "delete", "deletecollection", "*"] {
        assert!(
            !allowed("", "secrets", verb),
            "the operator must never {verb} Secrets"
        );
    }
    assert!(
        !allowed("", "persistentvolumeclaims", "delete"),
        "the operator must never delete claims"
    );
}

#[test]
fn the_namespaced_role_has_the_rules_of_the_cluster_role() {
    let rules = |path: &str, kind: &str| {
        documents(path)
            .into_iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("a {kind} in {path}"))["rules"]
            .clone()
    };
    assert_eq!(
        rules("deploy/namespaced/role.yaml", "Role"),
        rules("deploy/base/cluster-role.yaml", "ClusterRole"),
        "deploy/namespaced/role.yaml must grant what deploy/base/cluster-role.yaml grants"
    );
}

/// `kubectl kustomize DIR`, parsed; None (a skip) without kubectl unless it is required.
fn kustomize(dir: &str) -> Option<Vec<serde_yaml::Value>> {
    let out = match Command::new("kubectl")
        .args(["kustomize", root().join(dir).to_str().expect("UTF-8 path")])
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("HABITAT_REQUIRE_KUBECTL").is_none(),
                "kubectl is required: {e}"
            );
            eprintln!("skipped: no kubectl");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    Some(
        serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
            .collect(),
    )
}

fn kinds(docs: &[serde_yaml::Value]) -> Vec<String> {
    let mut kinds: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    kinds.sort();
    kinds
}

/// The pod runs as non-root on a read-only root filesystem, without capabilities or privilege
/// escalation, under the runtime's default seccomp profile.
fn assert_hardened(dir: &str, docs: &[serde_yaml::Value]) {
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("{dir}: a Deployment"));
    // Only the active replica is Ready, so a rollout that waited for readiness would stall.
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], "100%",
        "{dir}"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{dir}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{dir}"
    );
    assert!(
        pod["securityContext"]["runAsUser"]
            .as_u64()
            .is_some_and(|u| u > 0),
        "{dir}: runAsUser must be a non-root UID"
    );
    assert_eq!(pod["hostNetwork"], serde_yaml::Value::Null, "{dir}");
    let containers = pod["containers"].as_sequence().expect("containers");
    assert!(!containers.is_empty());
    for c in containers {
        let sc = &c["securityContext"];
        let name = c["name"].as_str().unwrap_or_default();
        assert_eq!(sc["runAsNonRoot"], true, "{dir}: {name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{dir}: {name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{dir}: {name}");
        assert_eq!(sc["privileged"], serde_yaml::Value::Null, "{dir}: {name}");
        assert_eq!(
            sc["capabilities"]["drop"],
            serde_yaml::Value::Sequence(vec!["ALL".into()]),
            "{dir}: {name}"
        );
        assert_eq!(
            sc["capabilities"]["add"],
            serde_yaml::Value::Null,
            "{dir}: {name}"
        );
        assert_eq!(
            sc["seccompProfile"]["type"], "RuntimeDefault",
            "{dir}: {name}"
        );
    }
}

#[test]
fn the_cluster_wide_kustomization_renders_the_base_hardened() {
    let Some(docs) = kustomize("deploy") else {
        return;
    };
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "Namespace",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    assert_hardened("deploy", &docs);
}

#[test]
fn the_namespaced_overlay_has_no_cluster_scoped_object_and_watches_its_namespace() {
    let Some(docs) = kustomize("deploy/namespaced") else {
        return;
    };
    assert_eq!(
        kinds(&docs),
        [
            "Deployment",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    assert!(docs
        .iter()
        .all(|d| d["metadata"]["namespace"] == "habitat-operator"));
    assert_hardened("deploy/namespaced", &docs);
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_sequence()
            .into_iter()
            .flatten()
            .any(|a| a == "--namespace=$(POD_NAMESPACE)"),
        "{args:?}"
    );
}
