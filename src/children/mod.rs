//! Pure builders of the objects the operator creates for a Habitat. Each takes the Habitat and
//! the inputs already resolved while observing, and returns the object; none touches a client.

pub mod control_gateway;
pub mod disruption_budget;
pub mod peer_config;
pub mod ring_key;
pub mod service;
pub mod statefulset;

#[cfg(test)]
mod props;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::Habitat;

/// Metadata of a child named `name`: the Habitat's namespace, labels and controller reference.
pub(crate) fn child_meta(h: &Habitat, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: h.namespace(),
        labels: Some(h.child_labels()),
        owner_references: Some(vec![h.owner_ref()]),
        ..ObjectMeta::default()
    }
}

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::api::key_name::KeyName;

/// The workload of a Habitat: what `ApplyWorkload` applies.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The StatefulSet.
    pub statefulset: StatefulSet,
    /// The headless Service.
    pub headless: Service,
    /// Leader topology: the leader Service and the PodDisruptionBudget.
    pub leader: Option<(Service, PodDisruptionBudget)>,
    /// The fingerprints of the objects above, computed once: observing compares them with the
    /// cached children at every decision of a reconcile.
    pub fingerprints: Fingerprints,
}

/// A stable fingerprint of a desired object (before it is stamped): the annotation
/// `cluster::apply` stamps on each child it applies, and observing compares.
pub fn fingerprint<T: serde::Serialize>(desired: &T) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(desired)
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// [`fingerprint`] of each object of a [`Workload`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprints {
    /// Of the StatefulSet.
    pub statefulset: String,
    /// Of the headless Service.
    pub headless: String,
    /// Of the leader Service and the PodDisruptionBudget.
    pub leader: Option<(String, String)>,
}

/// The workload of `h` with the resolved ring key.
pub fn workload(h: &Habitat, ring_key: Option<&KeyName>) -> Workload {
    let statefulset = statefulset::statefulset(h, ring_key);
    let headless = service::headless_service(h);
    let leader = (h.spec.service.topology == crate::api::Topology::Leader).then(|| {
        (
            service::leader_service(h),
            disruption_budget::disruption_budget(h),
        )
    });
    let fingerprints = Fingerprints {
        statefulset: fingerprint(&statefulset),
        headless: fingerprint(&headless),
        leader: leader
            .as_ref()
            .map(|(svc, pdb)| (fingerprint(svc), fingerprint(pdb))),
    };
    Workload {
        statefulset,
        headless,
        leader,
        fingerprints,
    }
}
