//! What the operator keeps of the objects it reads: the parts the reconciler reads, in the
//! caches (each watch's transform, as controller-runtime's cache transforms do) and in the
//! memory of its own writes ([`crate::watch::recent`]), which answers for the cache until
//! the watch delivers the write. Both keep the same slim copy: the server's answer to a write
//! carries the whole object (a StatefulSet's claim templates, every object's managedFields), and
//! kept whole, the writes of the last few seconds were a quarter of the operator's heap at
//! N = 1000 (heaptrack).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

/// A kind the operator keeps slim: the same transform for its cache and for its own writes.
pub trait Slim {
    /// Drops what the reconciler never reads.
    fn slim(&mut self);
}

impl Slim for Pod {
    fn slim(&mut self) {
        slim_pod(self)
    }
}

impl Slim for StatefulSet {
    fn slim(&mut self) {
        slim_statefulset(self)
    }
}

/// Kinds of which the reconciler reads everything but the managedFields.
macro_rules! slim_by_managed_fields {
    ($($kind:ty),*) => {$(
        impl Slim for $kind {
            fn slim(&mut self) {
                drop_managed_fields(self)
            }
        }
    )*};
}

slim_by_managed_fields!(ConfigMap, Service);

impl Slim for PodDisruptionBudget {
    fn slim(&mut self) {
        slim_budget(self)
    }
}

/// Any kind: everything but the field managers' records (`managedFields`), which the reconciler
/// never reads.
pub fn drop_managed_fields<K: kube::Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// Pods as the reconciler reads them: metadata and the status's phase, addresses and Ready
/// condition. The spec (containers, volumes, environment: most of a pod), the containers'
/// statuses (images, image digests, states; a kubelet writes them for every container) and the
/// other conditions are never read from the cache, so they are not kept (as controller-runtime's
/// cache transforms do). At N = 1000 the pods' specs were the largest part of the operator's
/// heap. What is not kept does not wake a Habitat either (`watch::triggers`): a pod's binding
/// to its node changes only its spec.
pub fn slim_pod(p: &mut Pod) {
    drop_managed_fields(p);
    p.spec = None;
    if let Some(status) = p.status.take() {
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: status.phase,
            pod_ip: status.pod_ip,
            pod_ips: status.pod_ips,
            conditions: status
                .conditions
                .map(|cs| cs.into_iter().filter(|c| c.type_ == "Ready").collect()),
            ..Default::default()
        });
    }
}

/// PodDisruptionBudgets as the reconciler reads them: metadata (the applied fingerprint) and the
/// spec. kube-controller-manager's disruption controller rewrites the status (healthy pods,
/// disruptions allowed) whenever a member's readiness changes, and each such update woke the
/// leader group although nothing of it is read: at N = 100 on the real ground, 0.5 reconciles per
/// Habitat, 1.7 per leader group.
pub fn slim_budget(b: &mut PodDisruptionBudget) {
    drop_managed_fields(b);
    b.status = None;
}

/// StatefulSets as the reconciler reads them: metadata, the spec with its pod template (compared
/// with what the operator applies: [`drift`](crate::reconcile::drift)) but without its claim
/// templates, which cannot change once the StatefulSet exists, and the status fields that say how
/// far a rollout is (`rollout::progress`, `rollout::outdated`, the Habitat's status). An update of
/// the others (`availableReplicas`, `currentReplicas`, `currentRevision`, conditions) wakes no
/// Habitat.
pub fn slim_statefulset(s: &mut StatefulSet) {
    drop_managed_fields(s);
    if let Some(spec) = s.spec.as_mut() {
        spec.volume_claim_templates = None;
    }
    if let Some(status) = s.status.take() {
        s.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
            observed_generation: status.observed_generation,
            replicas: status.replicas,
            ready_replicas: status.ready_replicas,
            updated_replicas: status.updated_replicas,
            update_revision: status.update_revision,
            ..Default::default()
        });
    }
}
