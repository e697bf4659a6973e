//! End-to-end scenarios: the operator binary runs as its own process against the sandbox (or a
//! real cluster given `HABITAT_E2E_KUBECONFIG`), and Habitats are created from the examples'
//! YAML with `kubectl`.

#[macro_use]
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::ListParams;
use kube::ResourceExt;
use support::{timeout, wait_for, Ground};

/// Every example except `namespaced` (which names its own namespace) reaches Ready.
async fn every_example_reaches_ready(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "examples");
    let mut names = Vec::new();
    for example in support::NAMESPACE_EXAMPLES {
        env.apply_example(example);
    }
    for h in env
        .habitats()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
    {
        names.push(h.name_any());
    }
    assert!(names.len() >= 13, "{names:?}");
    for name in &names {
        env.wait_phase(name, "Ready", timeout(&env)).await;
    }
}

async fn scaling_up_and_down_changes_the_pods_and_returns_to_ready(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "scale");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    env.patch("example-standalone", r#"{"spec":{"count":3}}"#);
    let h = env
        .wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    assert_eq!(
        h.status.as_ref().and_then(|s| s.ready.clone()).as_deref(),
        Some("3/3")
    );
    assert_eq!(env.pods("example-standalone").await.len(), 3);
    assert!(env
        .metrics()
        .contains(r#"habitat_operator_phase_transitions_total{from="Ready",to="Updating"}"#));
    env.patch("example-standalone", r#"{"spec":{"count":1}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    wait_for(timeout(&env), "one pod left", || async {
        env.pods("example-standalone").await.len() == 1
    })
    .await;
}

async fn an_image_change_goes_updating_then_ready_with_new_pods(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "image");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let before: Vec<String> = env
        .pods("example-standalone")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    env.patch(
        "example-standalone",
        r#"{"spec":{"image":"kinvolk/redis-hab:v2"}}"#,
    );
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let pods = env.pods("example-standalone").await;
    let image = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    assert!(
        pods.iter().all(|p| image(p) == "kinvolk/redis-hab:v2"),
        "{:?}",
        pods.iter().map(image).collect::<Vec<_>>()
    );
    assert!(
        pods.iter()
            .all(|p| !before.contains(&p.uid().unwrap_or_default())),
        "pods were not replaced"
    );
    let metrics = env.metrics();
    assert!(
        metrics
            .contains(r#"habitat_operator_phase_transitions_total{from="Ready",to="Updating"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"habitat_operator_phase_transitions_total{from="Updating",to="Ready"} 1"#),
        "{metrics}"
    );
}

async fn a_killed_peer_pod_is_replaced_and_the_peer_ip_moves_off_it(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "peer");
    env.apply_example("standalone");
    env.patch("example-standalone", r#"{"spec":{"count":3}}"#);
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let peer = env.peer_ip("example-standalone").await;
    let pods = env.pods("example-standalone").await;
    let victim = pods
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(peer.as_str()))
        .expect("the peer IP belongs to a pod")
        .name_any();
    env.kubectl_ok(&["delete", "pod", &victim, "--wait=false"]);
    wait_for(
        timeout(&env),
        "the peer IP to move to a running pod",
        || async {
            let now = env.peer_ip("example-standalone").await;
            let running: Vec<String> = env
                .pods("example-standalone")
                .await
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
                .collect();
            now != peer && running.contains(&now)
        },
    )
    .await;
    wait_for(timeout(&env), "three running pods again", || async {
        env.pods("example-standalone")
            .await
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count()
            == 3
    })
    .await;
}

async fn deletion_goes_terminating_and_leaves_only_claims_and_ring_keys(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "delete");
    env.apply_example("persisted");
    env.apply_example("generated-ring");
    env.wait_phase("example-persisted", "Ready", timeout(&env))
        .await;
    env.wait_phase("example-ring-a", "Ready", timeout(&env))
        .await;
    env.wait_phase("example-ring-b", "Ready", timeout(&env))
        .await;
    env.kubectl_ok(&["delete", "habitat", "--all", "--wait=true", "--timeout=60s"]);
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=habitat-operator");
    wait_for(timeout(&env), "every child to be gone", || async {
        let sts = env
            .api::<StatefulSet>()
            .list(&lp)
            .await
            .map(|l| l.items.len())
            .unwrap_or(1);
        let cms = env
            .api::<ConfigMap>()
            .list(&lp)
            .await
            .map(|l| l.items.len())
            .unwrap_or(1);
        let svcs = env
            .api::<Service>()
            .list(&lp)
            .await
            .map(|l| l.items.len())
            .unwrap_or(1);
        let pods = env
            .api::<Pod>()
            .list(&lp)
            .await
            .map(|l| l.items.len())
            .unwrap_or(1);
        sts + cms + svcs + pods == 0
    })
    .await;
    let claims = env
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await
        .expect("list claims")
        .items;
    assert!(
        claims
            .iter()
            .any(|c| c.name_any() == "data-example-persisted-0"),
        "the claim was deleted"
    );
    let keys = env
        .api::<Secret>()
        .list(&ListParams::default().labels("habitat.sh/ring=example-ring"))
        .await
        .expect("list")
        .items;
    assert_eq!(keys.len(), 1, "the ring key was deleted or duplicated");
    let metrics = env.metrics();
    assert!(
        metrics.contains(
            r#"habitat_operator_phase_transitions_total{from="Ready",to="Terminating"} 3"#
        ),
        "{metrics}"
    );
    let log = env.operator_log();
    let noise: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not found") || l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(
        noise.is_empty(),
        "error noise while deleting:\n{}",
        noise.join("\n")
    );
    wait_for(
        Duration::from_secs(10),
        "the phase gauge to drop to zero",
        || async {
            env.metrics()
                .contains(r#"habitat_operator_habitats{phase="Ready"} 0"#)
        },
    )
    .await;
}

/// Deleting the whole namespace while Habitats converge is not a failure: the API server
/// refuses new content in it (403, cause `NamespaceTerminating`), and the operator stops quietly
/// instead of logging warnings and backing off (a real server showed 73 such lines in one run).
async fn deleting_the_namespace_while_habitats_converge_makes_no_warnings(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "ns-delete");
    env.apply_example("standalone");
    env.apply_example("leader");
    env.apply_example("generated-ring");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    // New Habitats that are still being built when the namespace goes.
    env.apply_example("persisted");
    env.apply_example("bind");
    env.kubectl_ok(&["delete", "namespace", &env.namespace, "--wait=false"]);
    wait_for(timeout(&env), "the namespace to be gone", || async {
        let (ok, out, _) = env.kubectl(&["get", "namespace", &env.namespace, "-o", "name"]);
        !ok && out.is_empty()
    })
    .await;
    let log = env.operator_log();
    let noise: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("being terminated"))
        .collect();
    assert!(
        noise.is_empty(),
        "warnings while the namespace was deleted:\n{}",
        noise.join("\n")
    );
    let metrics = env.metrics();
    assert!(
        metrics.contains(r#"habitat_operator_reconciles_total{result="error"} 0"#),
        "{metrics}"
    );
}

on_both_grounds!(
    every_example_reaches_ready,
    scaling_up_and_down_changes_the_pods_and_returns_to_ready,
    an_image_change_goes_updating_then_ready_with_new_pods,
    a_killed_peer_pod_is_replaced_and_the_peer_ip_moves_off_it,
    deletion_goes_terminating_and_leaves_only_claims_and_ring_keys,
    deleting_the_namespace_while_habitats_converge_makes_no_warnings,
);
