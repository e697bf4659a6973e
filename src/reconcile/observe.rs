//! Observing: a `Snapshot` of one Habitat's world, read from the caches only, and the
//! machine's `Facts` computed from it.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use habitat_machine::Facts;

use crate::api::key_name::KeyName;
use crate::api::{Habitat, Topology, LABEL_LEADER, USER_TOML_KEY};
use crate::children::peer_config::peer_file_content;
use crate::children::Workload;
use crate::cluster::apply::is_current;
use crate::cluster::census::Election;
use crate::reconcile::context::Stores;
use crate::reconcile::index;
use crate::reconcile::ring::{self, KeyState};
use crate::reconcile::secrets::SecretsView;
use crate::reconcile::{peer, rollout};

/// What the leader census said in this reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderView {
    /// Not read yet.
    NotObserved,
    /// No census could be read; the errors, joined.
    Unreachable(String),
    /// The census' election state, and the pod whose IP the leader has.
    Observed {
        /// The election.
        election: Election,
        /// The leader's pod, when elected and found among the pods.
        pod: Option<String>,
        /// IPs of the group's alive members.
        alive: Vec<String>,
    },
}

impl LeaderView {
    /// The leader's pod, when known.
    pub fn pod(&self) -> Option<&str> {
        match self {
            LeaderView::Observed { pod, .. } => pod.as_deref(),
            _ => None,
        }
    }
}

/// One Habitat's world as the caches show it, updated in place by each step of a reconcile.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The StatefulSet `NAME`.
    pub statefulset: Option<StatefulSet>,
    /// The peer ConfigMap.
    pub peer_config: Option<ConfigMap>,
    /// The headless Service.
    pub headless: Option<Service>,
    /// The leader Service.
    pub leader_service: Option<Service>,
    /// The PodDisruptionBudget.
    pub budget: Option<PodDisruptionBudget>,
    /// The Habitat's pods.
    pub pods: Vec<Pod>,
    /// For each bind, the pods of the Habitats in this namespace that run the bound group.
    pub bound_pods: Vec<Vec<Pod>>,
    /// The ring key.
    pub key: KeyState,
    /// What is wrong with the Secrets the spec names (user.toml, files), if anything.
    pub secret_problem: Option<String>,
    /// What is wrong with the spec itself, if anything.
    pub spec_problem: Option<String>,
    /// The census reading of this reconcile.
    pub leader: LeaderView,
    /// A pod was deleted for replacement in this reconcile.
    pub replaced_pod: bool,
}

fn get<K>(store: &Store<K>, h: &Habitat, name: &str) -> Option<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let ns = h.namespace().unwrap_or_default();
    store
        .get(&ObjectRef::new(name).within(&ns))
        .map(|o| (*o).clone())
}

/// Reads the snapshot of `h` from the caches, through their indexes: it touches the objects of
/// this Habitat and of the groups it binds to, never the whole cluster. `secrets` is what this
/// reconcile read of the Secrets the spec uses; `generated` is a key this process generated for
/// the Habitat's ring that the cache may not show yet.
pub fn observe(
    h: &Habitat,
    stores: &Stores,
    secrets: &SecretsView,
    generated: Option<KeyName>,
) -> Snapshot {
    let name = h.name_any();
    let ns = h.namespace().unwrap_or_default();
    let pods_of = |habitat: &str| -> Vec<Pod> {
        stores
            .index
            .pods_by_habitat
            .objects(&stores.pods, &index::key(&[&ns, habitat]))
            .iter()
            .map(|p| (**p).clone())
            .collect()
    };
    let pods = pods_of(&name);
    let bound_pods = h
        .spec
        .service
        .bind
        .iter()
        .map(|b| {
            stores
                .index
                .habitats_by_group
                .refs(&index::key(&[&ns, &b.service, &b.group]))
                .into_iter()
                .filter(|o| o.name != name)
                .map(|o| o.name)
                .collect::<std::collections::BTreeSet<String>>()
                .into_iter()
                .flat_map(|n| pods_of(&n))
                .collect()
        })
        .collect();
    let mut key = ring::resolve(h, secrets);
    if let (KeyState::ToGenerate { .. }, Some(k)) = (&key, generated) {
        key = KeyState::Ready(k);
    }
    Snapshot {
        statefulset: get(&stores.statefulsets, h, &name),
        peer_config: get(&stores.config_maps, h, &h.peer_config_name()),
        headless: get(&stores.services, h, &name),
        leader_service: get(&stores.services, h, &h.leader_service_name()),
        budget: get(&stores.budgets, h, &name),
        pods,
        bound_pods,
        key,
        secret_problem: secret_problem(h, secrets),
        spec_problem: crate::api::validate::problem(h),
        leader: LeaderView::NotObserved,
        replaced_pod: false,
    }
}

/// What is wrong with the Secrets named by `spec.service.configSecretName` and
/// `filesSecretName`, in words for the user.
pub fn secret_problem(h: &Habitat, secrets: &SecretsView) -> Option<String> {
    let svc = &h.spec.service;
    if let Some(name) = &svc.config_secret_name {
        match secrets.find(name) {
            None => return Some(format!("Secret {name} named in spec.service.configSecretName does not exist; create it with a key {USER_TOML_KEY}")),
            Some(s) if !s.keys.contains(USER_TOML_KEY) => {
                return Some(format!("Secret {name} named in spec.service.configSecretName has no key {USER_TOML_KEY}"))
            }
            Some(_) => {}
        }
    }
    if let Some(name) = &svc.files_secret_name {
        if !secrets.present.contains(name) {
            return Some(format!(
                "Secret {name} named in spec.service.filesSecretName does not exist"
            ));
        }
    }
    None
}

impl Snapshot {
    /// The addresses currently in the peer file.
    pub fn current_peers(&self) -> Vec<&str> {
        self.peer_config
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(crate::api::PEER_IP_KEY))
            .map(|text| {
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first address of the peer file: a pod of this Habitat when one runs.
    pub fn current_peer(&self) -> Option<&str> {
        self.current_peers().into_iter().next()
    }

    /// The addresses the peer file should hold now.
    pub fn desired_peers(&self) -> Vec<String> {
        peer::addresses(&self.current_peers(), &self.pods, &self.bound_pods)
    }

    /// Whether `pod` carries the leader label.
    fn labelled_leader(pod: &Pod) -> bool {
        pod.labels().get(LABEL_LEADER).is_some_and(|v| v == "true")
    }

    /// Pods whose leader label disagrees with `leader`.
    pub fn mislabelled_pods(&self, leader: Option<&str>) -> Vec<(String, bool)> {
        self.pods
            .iter()
            .filter_map(|p| {
                let should = leader == Some(p.name_any().as_str());
                (Self::labelled_leader(p) != should).then(|| (p.name_any(), should))
            })
            .collect()
    }

    /// The machine's facts about `h` given this snapshot and the desired `workload`.
    pub fn facts(&self, h: &Habitat, workload: Option<&Workload>) -> Facts {
        let leader_topology = h.spec.service.topology == Topology::Leader;
        let count = h.spec.count;
        let desired_peer = peer_file_content(&self.desired_peers());
        let peer_config_current = self
            .peer_config
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(crate::api::PEER_IP_KEY))
            .is_some_and(|v| *v == desired_peer);
        let workload_current = workload.is_some_and(|w| self.workload_current(w));
        let leader_pod = self.leader.pod();
        let pod_replacement_due = leader_topology
            && !self.replaced_pod
            && self.members_in_census()
            && self.statefulset.as_ref().is_some_and(|s| {
                rollout::next_replacement(s, &self.pods, count, leader_pod).is_some()
            });
        Facts {
            deleting: h.metadata.deletion_timestamp.is_some(),
            spec_invalid: self.spec_problem.is_some(),
            peer_config_current,
            key_ready: matches!(self.key, KeyState::NotRequired | KeyState::Ready(_)),
            key_can_be_generated: matches!(self.key, KeyState::ToGenerate { .. }),
            referenced_secrets_present: self.secret_problem.is_none(),
            workload_current,
            spec_changed: h.metadata.generation
                > h.status
                    .as_ref()
                    .and_then(|s| s.observed_generation)
                    .or(Some(0)),
            rollout_done: self
                .statefulset
                .as_ref()
                .is_some_and(|s| rollout::done(s, count)),
            pod_replacement_due,
            leader_topology,
            leader_observed: self.leader != LeaderView::NotObserved,
            leader_known: leader_pod.is_some(),
            leader_published: leader_pod.is_some() && self.mislabelled_pods(leader_pod).is_empty(),
        }
    }

    /// Whether every running pod is an alive member of the group's census. Before the census is
    /// read this reconcile it counts as true, so the machine asks to read it first.
    fn members_in_census(&self) -> bool {
        match &self.leader {
            LeaderView::NotObserved => true,
            LeaderView::Unreachable(_) => false,
            LeaderView::Observed { alive, .. } => self
                .pods
                .iter()
                .filter(|p| peer::is_running(p))
                .filter_map(|p| peer::pod_ip(p))
                .all(|ip| alive.iter().any(|a| a == ip)),
        }
    }

    fn workload_current(&self, w: &Workload) -> bool {
        let sts = self
            .statefulset
            .as_ref()
            .is_some_and(|s| is_current(&s.metadata, &w.statefulset));
        let headless = self
            .headless
            .as_ref()
            .is_some_and(|s| is_current(&s.metadata, &w.headless));
        let leader = match &w.leader {
            Some((svc, pdb)) => {
                self.leader_service
                    .as_ref()
                    .is_some_and(|s| is_current(&s.metadata, svc))
                    && self
                        .budget
                        .as_ref()
                        .is_some_and(|b| is_current(&b.metadata, pdb))
            }
            None => self.leader_service.is_none() && self.budget.is_none(),
        };
        sts && headless && leader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use crate::reconcile::peer::tests::pod;
    use k8s_openapi::api::apps::v1::StatefulSetStatus;

    fn outdated_group() -> Snapshot {
        let mut pods: Vec<Pod> = (0..3)
            .map(|i| pod(i, &format!("10.0.0.{i}"), "Running", true))
            .collect();
        for p in &mut pods {
            p.metadata.labels =
                Some([("controller-revision-hash".to_string(), "old".to_string())].into());
        }
        let sts = StatefulSet {
            status: Some(StatefulSetStatus {
                update_revision: Some("new".into()),
                replicas: 3,
                ..Default::default()
            }),
            ..Default::default()
        };
        Snapshot {
            statefulset: Some(sts),
            peer_config: None,
            headless: None,
            leader_service: None,
            budget: None,
            pods,
            bound_pods: vec![],
            key: KeyState::NotRequired,
            secret_problem: None,
            spec_problem: None,
            leader: LeaderView::NotObserved,
            replaced_pod: false,
        }
    }

    fn observed(alive: &[&str]) -> LeaderView {
        LeaderView::Observed {
            election: Election::Elected {
                ip: "10.0.0.0".into(),
            },
            pod: Some("redis-0".into()),
            alive: alive.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_member_is_replaced_only_when_the_census_shows_every_running_member_alive() {
        let h = habitat().leader().count(3);
        let mut snap = outdated_group();
        assert!(
            snap.facts(&h, None).pod_replacement_due,
            "due before the census is read, so it is read"
        );
        snap.leader = observed(&["10.0.0.0", "10.0.0.1"]);
        assert!(
            !snap.facts(&h, None).pod_replacement_due,
            "10.0.0.2 has not rejoined"
        );
        snap.leader = observed(&["10.0.0.0", "10.0.0.1", "10.0.0.2"]);
        assert!(snap.facts(&h, None).pod_replacement_due);
        snap.leader = LeaderView::Unreachable("timeout".into());
        assert!(!snap.facts(&h, None).pod_replacement_due);
    }

    #[test]
    fn standalone_groups_never_replace_pods_themselves() {
        assert!(
            !outdated_group()
                .facts(&habitat().count(3), None)
                .pod_replacement_due
        );
    }
}
