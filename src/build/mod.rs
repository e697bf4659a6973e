//! Pure builders of the objects the operator creates for a Habitat. Each takes the Habitat and
//! the inputs already resolved while observing, and returns the object; none touches a client.

pub mod disruption_budget;
pub mod peer_config;
pub mod ring_key;
pub mod service;
pub mod statefulset;

#[cfg(test)]
pub(crate) mod fixtures;

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
