//! The real control plane from `$KUBEBUILDER_ASSETS` (etcd, kube-apiserver,
//! kube-controller-manager): it starts, its two kubeconfigs work for kube's client and for
//! `kubectl`, the operator is the ServiceAccount of deploy/ with exactly its RBAC, and the CRDs install.

#[macro_use]
mod support;

use std::path::Path;

use habitat_operator::api::Habitat;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use support::control_plane::ControlPlane;

/// The shared control plane, or an early return when there is none.
macro_rules! control_plane {
    () => {
        match ControlPlane::shared() {
            Some(cp) => cp,
            None => {
                eprintln!("skipped: no KUBEBUILDER_ASSETS");
                return;
            }
        }
    };
}

async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig valid");
    Client::try_from(config).expect("client")
}

use support::{kubectl_at as kubectl, kubectl_at_ok as kubectl_ok};

#[tokio::test]
async fn the_control_plane_starts_and_the_operator_user_is_not_admin() {
    let cp = control_plane!();
    assert!(cp.url().starts_with("https://127.0.0.1:"), "{}", cp.url());

    // The test driver is admin, through kube's client verifying the self-signed certificate.
    let admin = client(cp.admin_kubeconfig()).await;
    let namespaces = Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .expect("admin lists namespaces");
    assert!(
        namespaces
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("kube-system")),
        "no kube-system among the namespaces"
    );

    // The operator's user reads what its ClusterRole grants, cluster-wide...
    let operator = client(cp.operator_kubeconfig()).await;
    Api::<StatefulSet>::all(operator.clone())
        .list(&ListParams::default())
        .await
        .expect("the operator lists StatefulSets in every namespace");

    // ...and may never delete a Secret: it is not in system:masters.
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "control-plane-test-key"},
        "stringData": {"key": "value"},
    }))
    .unwrap();
    let admin_secrets = Api::<Secret>::namespaced(admin.clone(), "default");
    match admin_secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("admin creates a Secret: {e}"),
    }
    let refused = Api::<Secret>::namespaced(operator, "default")
        .delete("control-plane-test-key", &DeleteParams::default())
        .await
        .expect_err("the operator's user must not delete Secrets");
    match refused {
        kube::Error::Api(s) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected 403 Forbidden, got {other}"),
    }
    admin_secrets
        .get("control-plane-test-key")
        .await
        .expect("the Secret is still there");

    // The audit log names who did what.
    let audit = std::fs::read_to_string(cp.audit_log()).expect("audit.log readable");
    let forbidden = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|e| {
            e["user"]["username"] == support::control_plane::OPERATOR_USER
                && e["verb"] == "delete"
                && e["objectRef"]["resource"] == "secrets"
                && e["responseStatus"]["code"] == 403
        });
    assert!(forbidden, "audit.log lacks the operator's refused delete");

    // kubectl takes both kubeconfigs as they are.
    require_kubectl!();
    let out = kubectl_ok(cp.admin_kubeconfig(), &["get", "namespaces", "-o", "name"]);
    assert!(out.contains("namespace/default"), "{out}");
    kubectl_ok(
        cp.operator_kubeconfig(),
        &["get", "statefulsets", "--all-namespaces"],
    );
    let (_, can, _) = kubectl(
        cp.operator_kubeconfig(),
        &["auth", "can-i", "delete", "secrets", "-n", "default"],
    );
    assert_eq!(can.trim(), "no");
    // Leases only where deploy/ grants them: the operator's own namespace.
    let can_update_leases = |ns: &str| {
        let (_, can, _) = kubectl(
            cp.operator_kubeconfig(),
            &[
                "auth",
                "can-i",
                "update",
                "leases.coordination.k8s.io",
                "-n",
                ns,
            ],
        );
        can.trim().to_string()
    };
    assert_eq!(can_update_leases("habitat-operator"), "yes");
    assert_eq!(can_update_leases("any-namespace"), "no");
    let (_, who, _) = kubectl(
        cp.operator_kubeconfig(),
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(who.trim(), support::control_plane::OPERATOR_USER);
}

#[tokio::test]
async fn the_crd_and_the_chart_copy_install_and_become_established() {
    let cp = control_plane!();
    require_kubectl!();
    let admin = cp.admin_kubeconfig();
    for file in [
        "crds/habitat.yaml",
        "deploy/helm/habitat-operator/crds/habitat.yaml",
    ] {
        let path = support::root().join(file);
        let path = path.to_str().expect("UTF-8 path");
        kubectl_ok(admin, &["apply", "-f", path]);
        kubectl_ok(
            admin,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                path,
            ],
        );
    }

    // Once it is in, the operator's user lists Habitats in every namespace.
    let operator = client(cp.operator_kubeconfig()).await;
    let mut attempts = 0;
    loop {
        match Api::<Habitat>::all(operator.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(_) => break,
            // Discovery may lag Established by a moment.
            Err(e) if attempts < 50 => {
                attempts += 1;
                eprintln!("listing Habitats: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the operator lists Habitats: {e}"),
        }
    }
}
