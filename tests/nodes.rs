//! `habitat-operator sandbox --kubeconfig FILE`: the simulated nodes play the nodes of a real API
//! server that has none, and refuse one that has Nodes (they fake pod status, so they must never
//! touch a real cluster's pods). Its own test binary: it creates a Node, which would make every
//! other real-ground test's nodes refuse to start.

#[macro_use]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use support::control_plane::ControlPlane;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_habitat-operator")
}

fn node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}
    }))
    .expect("a Node")
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("a Pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_nodes_run_pods_of_a_server_without_nodes_and_refuse_one_with_nodes() {
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: KUBEBUILDER_ASSETS is not set");
        return;
    };
    let client = support::client_for(cp.admin_kubeconfig()).await;
    let ns = format!("nodes-{}", rand::random::<u32>() % 100_000);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))
                .expect("a Namespace"),
        )
        .await
        .expect("create the namespace");

    // Without Nodes: a bare pod is bound to the simulated node and runs with a loopback IP.
    let mut nodes = support::Proc(
        Command::new(bin())
            .args(["sandbox", "--log-level", "warn", "--kubeconfig"])
            .arg(cp.admin_kubeconfig())
            .args(["--namespace", &ns])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the simulated nodes"),
        "nodes",
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod("bare"))
        .await
        .expect("create a pod");
    let start = Instant::now();
    let running = loop {
        let p = pods.get("bare").await.expect("get the pod");
        let status = p.status.clone().unwrap_or_default();
        if status.phase.as_deref() == Some("Running") {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the pod never ran: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let spec = running.spec.clone().unwrap_or_default();
    assert_eq!(spec.node_name.as_deref(), Some("sandbox-node"));
    let ip: std::net::Ipv4Addr = running
        .status
        .and_then(|s| s.pod_ip)
        .expect("a pod IP")
        .parse()
        .expect("an IPv4 pod IP");
    assert!(ip.is_loopback(), "{ip}");

    // The node the pod runs on exists, is Ready, and renews its Lease as a kubelet does: without
    // them kube-controller-manager's pod garbage collector deleted every pod within a minute
    // (bound to a node that does not exist), and StatefulSets recreated them.
    let node_api: Api<Node> = Api::all(client.clone());
    let registered = node_api
        .get("sandbox-node")
        .await
        .expect("the simulated Node");
    assert!(
        habitat_sandbox::nodes::node::is_simulated(&registered),
        "{:?}",
        registered.metadata
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let renewed = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
    let first = renewed(leases.get("sandbox-node").await.expect("the node's Lease"));
    let uid = running.metadata.uid.clone();
    // PodGC looks every 20 s and deletes an orphan found twice 40 s apart: 85 s covers it.
    tokio::time::sleep(Duration::from_secs(85)).await;
    let later = renewed(leases.get("sandbox-node").await.expect("the node's Lease"));
    assert!(
        later > first,
        "the Lease was not renewed: {first:?} then {later:?}"
    );
    let still = pods
        .get("bare")
        .await
        .expect("the pod outlives the pod garbage collector");
    assert_eq!(still.metadata.uid, uid, "the pod was deleted and recreated");
    assert!(
        still.metadata.deletion_timestamp.is_none(),
        "the pod is being deleted"
    );

    // A graceful deletion is finished by the simulated kubelet, as a kubelet does.
    pods.delete("bare", &DeleteParams::default())
        .await
        .expect("delete the pod");
    support::wait_for(Duration::from_secs(60), "the pod to be gone", || async {
        pods.get_opt("bare").await.is_ok_and(|p| p.is_none())
    })
    .await;
    assert!(
        nodes.0.try_wait().expect("poll the nodes").is_none(),
        "the simulated nodes exited"
    );
    drop(nodes);

    // With a Node: they refuse to start, name the Node, and exit non-zero.
    node_api
        .create(&PostParams::default(), &node("a-real-node"))
        .await
        .expect("create a Node");
    let out = Command::new(bin())
        .args(["sandbox", "--kubeconfig"])
        .arg(cp.admin_kubeconfig())
        .output()
        .expect("run the simulated nodes");
    let _ = node_api
        .delete("a-real-node", &DeleteParams::default())
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "they started beside a Node");
    assert!(
        stderr.contains("the API server has Nodes (for example a-real-node)"),
        "{stderr}"
    );
}
