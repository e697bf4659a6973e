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
}

/// A stable fingerprint of a desired object (before it is stamped): the annotation
/// `cluster::apply` stamps on each child it applies, and observing compares. It is persisted in
/// the cluster, so it must not change with the Rust release or the platform (an operator upgraded
/// would otherwise re-apply every child): 64-bit FNV-1a over the object's JSON, whose field order
/// is fixed by the k8s-openapi structs and whose maps are sorted (`BTreeMap`).
pub fn fingerprint<T: serde::Serialize>(desired: &T) -> String {
    let json = serde_json::to_vec(desired).unwrap_or_default();
    format!("{:016x}", fnv1a(&json))
}

/// 64-bit FNV-1a (<http://www.isthe.com/chongo/tech/comp/fnv/>).
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(PRIME)
    })
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
    Workload {
        statefulset,
        headless,
        leader,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // From the reference implementation's test suite.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_fingerprint_is_the_same_on_every_build() {
        // Persisted in the cluster: a change here re-applies every child after an upgrade.
        let cm = k8s_openapi::api::core::v1::ConfigMap {
            metadata: ObjectMeta {
                name: Some("redis".into()),
                ..ObjectMeta::default()
            },
            data: Some([("peer-ip".to_string(), "10.0.0.1".to_string())].into()),
            ..Default::default()
        };
        // FNV-1a of `{"apiVersion":"v1","kind":"ConfigMap","data":{"peer-ip":"10.0.0.1"},
        // "metadata":{"name":"redis"}}`, computed apart from this code.
        assert_eq!(fingerprint(&cm), "d6836a497a338911");
    }
}
