//! The PodDisruptionBudget of a leader-topology Habitat: voluntary disruptions take down at
//! most one member at a time, so the group keeps its quorum.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::child_meta;
use crate::api::Habitat;

/// The budget `NAME`: at most one pod of the group unavailable.
pub fn disruption_budget(h: &Habitat) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: child_meta(h, h.name_any()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(h.child_labels()),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};

    #[test]
    fn the_budget_allows_one_unavailable_member_of_this_habitat() {
        let pdb = disruption_budget(&habitat().leader());
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(
            spec.selector.unwrap().match_labels.unwrap()["habitat.sh/name"],
            "redis"
        );
        assert_eq!(pdb.metadata.owner_references.unwrap()[0].kind, "Habitat");
    }
}
