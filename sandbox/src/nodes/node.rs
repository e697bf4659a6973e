//! The simulated node's own objects: the Node `sandbox-node` the kubelet binds pods to, and its
//! Lease in `kube-node-lease`, renewed as a kubelet renews it.
//!
//! A real control plane needs them. kube-controller-manager's pod garbage collector deletes
//! every pod bound to a node that does not exist (after a 40 s quarantine), and its node
//! lifecycle controller taints a node whose Lease is not renewed, which evicts its pods. Without
//! them, every pod on the real ground died within a minute and was recreated by its StatefulSet.
//! The sandbox's embedded server serves no Nodes and collects no orphaned pods: there nothing is
//! registered.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

use super::kubelet::NODE_NAME;
use super::NodesError;

/// The label that marks the Node as this simulation's own.
pub const SIMULATED_LABEL: &str = "habitat.sh/simulated-node";
/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How long the Lease lasts; it is renewed every quarter of that, as the kubelet does.
pub const LEASE_SECONDS: i32 = 40;

/// The Node this simulation registers.
pub fn node() -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                SIMULATED_LABEL: "true",
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
            },
        },
        "status": {
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "the simulated kubelet is posting ready status",
            }],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "10000"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "10000"},
        },
    }))
    .unwrap_or_default()
}

/// Whether the Node `n` (or its metadata) is one this simulation registered.
pub fn is_simulated(n: &impl ResourceExt) -> bool {
    n.name_any() == NODE_NAME && n.labels().get(SIMULATED_LABEL).is_some_and(|v| v == "true")
}

/// Fails when the API server behind `client` has a Node that is not this simulation's: the
/// simulated kubelet fakes pod status, so it never plays beside real nodes. An API server that
/// does not serve Nodes at all (the sandbox's) has none.
pub async fn refuse_real_nodes(client: &Client) -> Result<(), NodesError> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.list_metadata(&ListParams::default()).await {
        Ok(list) => match list.items.iter().find(|n| !is_simulated(*n)) {
            Some(node) => Err(NodesError::HasNodes(node.name_any())),
            None => Ok(()),
        },
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Registers the Node (several simulations of one control plane share it) and starts renewing
/// its Lease. None when the API server serves no Nodes.
pub async fn register(client: &Client) -> Result<Option<JoinHandle<()>>, NodesError> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.create(&PostParams::default(), &node()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    renew(&leases).await?;
    Ok(Some(tokio::spawn(async move {
        let period = Duration::from_secs(LEASE_SECONDS as u64 / 4);
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = renew(&leases).await {
                tracing::warn!(error = %e, "cannot renew the simulated node's Lease");
            }
        }
    })))
}

/// Creates or renews the node's Lease.
async fn renew(leases: &Api<Lease>) -> Result<(), kube::Error> {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let spec = json!({
        "holderIdentity": NODE_NAME,
        "leaseDurationSeconds": LEASE_SECONDS,
        "renewTime": now,
    });
    let patch = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NODE_NAME, "namespace": LEASE_NAMESPACE},
        "spec": spec,
    });
    leases
        .patch(
            NODE_NAME,
            &kube::api::PatchParams::apply("habitat-sandbox-kubelet").force(),
            &kube::api::Patch::Apply(patch),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_ready_and_marked_as_simulated() {
        let n = node();
        assert!(is_simulated(&n));
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        assert_eq!(ready.as_deref(), Some("True"));
        let mut other = node();
        other.metadata.labels = None;
        assert!(
            !is_simulated(&other),
            "a node of that name without the label is not ours"
        );
    }
}
