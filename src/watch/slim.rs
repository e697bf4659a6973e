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
/// with what the operator applies, to find drift) but without its claim
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::triggers::{Triggers, Wake};
    use kube::runtime::watcher;
    use std::sync::Arc;

    #[test]
    fn a_cached_pod_keeps_what_the_reconciler_reads() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-0", "labels": {"habitat.sh/name": "redis"}},
            "spec": {"containers": [{"name": "habitat", "image": "kinvolk/redis-hab"}]},
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "hostIP": "10.0.0.254", "startTime": "2026-12-02T00:00:00Z",
                "conditions": [{"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "habitat", "image": "kinvolk/redis-hab",
                    "imageID": "sha256:0", "ready": true, "restartCount": 0}],
            },
        }))
        .expect("a pod");
        slim_pod(&mut p);
        assert!(p.spec.is_none());
        let status = p.status.clone().expect("the status is kept");
        assert!(status.container_statuses.is_none());
        assert!(status.host_ip.is_none() && status.start_time.is_none());
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        let kept: Vec<_> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| &c.type_)
            .collect();
        assert_eq!(kept, ["Ready"]);
        let ready = status.conditions.iter().flatten().next().map(|c| &c.status);
        assert_eq!(
            ready.map(String::as_str),
            Some("True"),
            "still ready as read"
        );
        assert_eq!(p.metadata.labels.as_ref().map(|l| l.len()), Some(1));

        // The kubelet's binding changes only the spec: its event wakes nothing.
        let mut triggers = Triggers::new(Wake::Changed(Arc::default()));
        let mut bound: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-0", "uid": "u", "resourceVersion": "1"},
            "spec": {"containers": [{"name": "habitat"}]},
        }))
        .expect("a pod");
        slim_pod(&mut bound);
        assert!(triggers
            .after(Ok(watcher::Event::Apply(bound.clone())))
            .is_some());
        let mut scheduled: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-0", "uid": "u", "resourceVersion": "2"},
            "spec": {"containers": [{"name": "habitat"}], "nodeName": "sandbox-node"},
        }))
        .expect("a pod");
        slim_pod(&mut scheduled);
        assert!(triggers
            .after(Ok(watcher::Event::Apply(scheduled)))
            .is_none());
    }

    #[test]
    fn a_cached_statefulset_keeps_the_rollout_and_wakes_only_on_it() {
        let sts = |rv: &str, ready: i32, available: i32| -> StatefulSet {
            let mut s: StatefulSet = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "redis", "uid": "u", "resourceVersion": rv, "generation": 1},
                "spec": {"replicas": 3, "selector": {}, "serviceName": "redis",
                    "template": {"spec": {"containers": [{"name": "habitat"}]}}},
                "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": ready,
                    "updatedReplicas": 3, "updateRevision": "redis-1", "currentRevision": "redis-1",
                    "availableReplicas": available, "currentReplicas": 3},
            }))
            .expect("a StatefulSet");
            slim_statefulset(&mut s);
            s
        };
        let three = sts("1", 3, 2);
        let status = three.status.clone().expect("the status is kept");
        assert_eq!(status.update_revision.as_deref(), Some("redis-1"));
        assert!(status.available_replicas.is_none() && status.current_revision.is_none());
        let mut triggers = Triggers::new(Wake::Changed(Arc::default()));
        assert!(triggers.after(Ok(watcher::Event::Apply(three))).is_some());
        // Only availableReplicas moved: nothing the reconciler reads.
        assert!(triggers
            .after(Ok(watcher::Event::Apply(sts("2", 3, 3))))
            .is_none());
        // A pod stopped being ready: the rollout is not done any more.
        assert!(triggers
            .after(Ok(watcher::Event::Apply(sts("3", 2, 2))))
            .is_some());
    }

    #[test]
    fn a_cached_budget_keeps_its_fingerprint_and_its_status_updates_wake_nothing() {
        let pdb = |rv: &str, healthy: i32| -> PodDisruptionBudget {
            let mut b: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "redis", "uid": "u", "resourceVersion": rv,
                    "annotations": {"habitat.sh/fingerprint": "f1"}},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"habitat.sh/name": "redis"}}},
                "status": {"currentHealthy": healthy, "desiredHealthy": 2, "expectedPods": 3,
                    "disruptionsAllowed": (healthy - 2).max(0), "observedGeneration": 1},
            }))
            .expect("a PodDisruptionBudget");
            b.slim();
            b
        };
        let first = pdb("1", 0);
        assert!(first.status.is_none());
        assert_eq!(
            first.metadata.annotations.as_ref().map(|a| a.len()),
            Some(1),
            "the fingerprint is kept"
        );
        let mut triggers = Triggers::new(Wake::Changed(Arc::default()));
        assert!(triggers.after(Ok(watcher::Event::Apply(first))).is_some());
        // kube-controller-manager counts the healthy members as they come up.
        for (rv, healthy) in [("2", 1), ("3", 2), ("4", 3)] {
            assert!(triggers
                .after(Ok(watcher::Event::Apply(pdb(rv, healthy))))
                .is_none());
        }
    }
}
