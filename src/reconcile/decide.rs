//! Deciding: everything drawn from a [`Snapshot`] in one place. The desired state (the workload,
//! the peer file's addresses, the leader labels, the next pod to replace) and the machine's
//! [`Facts`] are computed here, and [`habitat_machine::decide`] answers the phase and the step.
//! The snapshot stays plain observed data; [`act`](mod@crate::reconcile::act) performs a step with
//! what this module wanted.

use habitat_machine::{decide, Decision, Facts, Phase, Step};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::{Habitat, Topology, LABEL_LEADER};
use crate::children::peer_config::peer_config;
use crate::children::{self, Workload};
use crate::reconcile::drift::peer_config_carries;
use crate::reconcile::memo::{VerifiedChildren, Versions};
use crate::reconcile::observe::{LeaderView, Snapshot};
use crate::reconcile::ring::KeyState;
use crate::reconcile::{peer, rollout};

/// What a Habitat should look like given one snapshot.
#[derive(Debug)]
pub struct Desired<'a> {
    /// Whether every live child of the workload carries what the operator would apply
    /// ([`drift`](crate::reconcile::drift)); false until the ring key is resolved.
    pub workload_current: bool,
    /// The workload itself, when this decision applies it (or it was built to compare it): a
    /// settled Habitat whose children were found current at their versions never builds it.
    pub workload: Option<&'a Workload>,
    /// The addresses the peer file should hold.
    pub peers: Vec<String>,
    /// Whether the live peer ConfigMap carries them (see [`drift`](crate::reconcile::drift)).
    pub peer_config_current: bool,
    /// Pods whose leader label must change, and whether each should carry it.
    pub mislabelled: Vec<(String, bool)>,
    /// The pod to replace next, when a leader group's rollout may replace one now.
    pub replacement: Option<String>,
}

/// One decision: the machine's answer, and the desired state its step works towards.
#[derive(Debug)]
pub struct Plan<'a> {
    /// The phase after this decision and the step to take.
    pub decision: Decision,
    /// What the step applies.
    pub desired: Desired<'a>,
}

/// The decisions of one reconcile. The desired workload depends on the spec and the resolved
/// ring key only, so it is built at most once per key in a reconcile, and only when a decision
/// applies it or its live children must be compared with it: with a [`VerifiedChildren`] the
/// children found current by an earlier reconcile, at the same versions, are not compared again.
#[derive(Default)]
pub struct Decider<'m> {
    memo: Option<&'m VerifiedChildren>,
    resolved_for: Option<KeyState>,
    workload: Option<Workload>,
    /// The last comparison of this reconcile: the children's versions and the verdict.
    compared: Option<(Versions, bool)>,
    /// The last comparison of the peer ConfigMap: its version, the addresses and the verdict.
    peer_compared: Option<(Option<String>, Vec<String>, bool)>,
}

impl<'m> Decider<'m> {
    /// A decider that reads and fills `memo`.
    pub fn remembering(memo: &'m VerifiedChildren) -> Self {
        Decider {
            memo: Some(memo),
            ..Decider::default()
        }
    }

    /// The next decision of a pass in `phase` that has taken `transitions` so far.
    pub fn next(
        &mut self,
        h: &Habitat,
        snap: &Snapshot,
        phase: Phase,
        transitions: &[(Phase, Phase)],
    ) -> Plan<'_> {
        let wanted = self.wanted(h, snap);
        let decision = decide(phase, &facts_in_pass(facts(h, snap, &wanted), transitions));
        if decision.step == Step::ApplyWorkload {
            self.build(h, &snap.key);
        }
        Plan {
            decision,
            desired: Desired {
                workload: self.workload.as_ref(),
                ..wanted
            },
        }
    }

    /// The desired state of `h` given `snap` (the workload only if it was built).
    pub fn desired(&mut self, h: &Habitat, snap: &Snapshot) -> Desired<'_> {
        let wanted = self.wanted(h, snap);
        Desired {
            workload: self.workload.as_ref(),
            ..wanted
        }
    }

    /// The desired state without the workload, so that the workload can still be built for
    /// the step that applies it.
    fn wanted(&mut self, h: &Habitat, snap: &Snapshot) -> Desired<'static> {
        let workload_current = self.workload_current(h, snap);
        let (peers, mislabelled, replacement) = wanted(h, snap);
        let peer_config_current = self.peer_config_current(h, snap, &peers);
        Desired {
            workload_current,
            workload: None,
            peers,
            peer_config_current,
            mislabelled,
            replacement,
        }
    }

    /// Whether the live peer ConfigMap carries `peers`: remembered for its version, or compared.
    fn peer_config_current(&mut self, h: &Habitat, snap: &Snapshot, peers: &[String]) -> bool {
        let version = snap
            .peer_config
            .as_ref()
            .and_then(|c| c.metadata.resource_version.clone());
        if let Some((at, addresses, verdict)) = &self.peer_compared {
            if *at == version && addresses == peers {
                return *verdict;
            }
        }
        let remembered = version.as_deref().is_some_and(|v| {
            self.memo
                .is_some_and(|m| m.is_peer_config_current(h, peers, v))
        });
        let verdict =
            remembered || peer_config_carries(snap.peer_config.as_ref(), &peer_config(h, peers));
        if verdict && !remembered {
            if let (Some(memo), Some(v)) = (self.memo, version.as_deref()) {
                memo.remember_peer_config(h, peers, v);
            }
        }
        self.peer_compared = Some((version, peers.to_vec(), verdict));
        verdict
    }

    /// Whether the live children carry the workload of `h` with the snapshot's key: remembered
    /// for their versions, or compared (building the workload).
    fn workload_current(&mut self, h: &Habitat, snap: &Snapshot) -> bool {
        if self.resolved_for.as_ref() != Some(&snap.key) {
            self.resolved_for = Some(snap.key.clone());
            self.workload = None;
            self.compared = None;
        }
        if !matches!(snap.key, KeyState::NotRequired | KeyState::Ready(_)) {
            return false;
        }
        let live = snap.live_workload();
        // Without versions (a child sent, not answered yet) the verdict is not kept.
        let versions = live.versions();
        if let (Some((at, verdict)), Some(v)) = (&self.compared, &versions) {
            if at == v {
                return *verdict;
            }
        }
        let memo = self.memo.zip(versions.as_ref());
        if memo.is_some_and(|(m, v)| m.is_current(h, &snap.key, v)) {
            self.compared = versions.map(|v| (v, true));
            return true;
        }
        self.build(h, &snap.key);
        let verdict = self.workload.as_ref().is_some_and(|w| live.carries(w));
        if let (true, Some((m, v))) = (verdict, memo) {
            m.remember(h, &snap.key, v);
        }
        self.compared = versions.map(|v| (v, verdict));
        verdict
    }

    /// Builds the workload for `key` unless it is built.
    fn build(&mut self, h: &Habitat, key: &KeyState) {
        if self.workload.is_none() {
            self.workload = workload_for(h, key);
        }
    }
}

/// What `snap` should become besides the workload: the peer file's addresses, the pods whose
/// leader label must change, the pod to replace next.
fn wanted(h: &Habitat, snap: &Snapshot) -> (Vec<String>, Vec<(String, bool)>, Option<String>) {
    let leader_topology = h.spec.service.topology == Topology::Leader;
    let leader_pod = snap.leader.pod();
    let replacement = if leader_topology && !snap.replaced_pod && members_in_census(snap) {
        snap.statefulset
            .as_ref()
            .and_then(|s| rollout::next_replacement(s, &snap.pods, h.spec.count, leader_pod))
    } else {
        None
    };
    (
        peer::addresses(&snap.current_peers(), &snap.pods, &snap.bound_pods),
        mislabelled_pods(&snap.pods, leader_pod),
        replacement,
    )
}

fn workload_for(h: &Habitat, key: &KeyState) -> Option<Workload> {
    match key {
        KeyState::NotRequired => Some(children::workload(h, None)),
        KeyState::Ready(k) => Some(children::workload(h, Some(k))),
        _ => None,
    }
}

/// The machine's facts about `h` given `snap` and what is `desired` of it.
pub fn facts(h: &Habitat, snap: &Snapshot, desired: &Desired<'_>) -> Facts {
    let count = h.spec.count;
    let leader_pod = snap.leader.pod();
    Facts {
        deleting: h.metadata.deletion_timestamp.is_some(),
        spec_invalid: snap.spec_problem.is_some(),
        peer_config_current: desired.peer_config_current,
        key_ready: matches!(snap.key, KeyState::NotRequired | KeyState::Ready(_)),
        key_can_be_generated: matches!(snap.key, KeyState::ToGenerate { .. }),
        referenced_secrets_present: snap.secret_problem.is_none(),
        workload_current: desired.workload_current,
        spec_changed: h.metadata.generation
            > h.status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .or(Some(0)),
        // A child still being created is part of the rollout.
        rollout_done: snap.creating.is_none()
            && snap
                .statefulset
                .as_ref()
                .is_some_and(|s| rollout::progress(s, &snap.pods, count).done),
        pod_replacement_due: desired.replacement.is_some(),
        leader_topology: h.spec.service.topology == Topology::Leader,
        leader_observed: snap.leader != LeaderView::NotObserved,
        leader_known: leader_pod.is_some(),
        leader_published: leader_pod.is_some() && desired.mislabelled.is_empty(),
    }
}

/// The facts of the next decision of a pass. Once the pass has taken a transition, it is acting
/// on the current spec: `spec_changed` (generation above the persisted `observedGeneration`)
/// then no longer means that the spec changed since the object was Ready. Without this, an
/// object whose status was never written (the operator was killed before its first status
/// write) or whose spec changed while it was deploying walked to Ready and then flapped
/// Ready → Updating → Ready until the step limit within one pass.
pub fn facts_in_pass(mut facts: Facts, transitions: &[(Phase, Phase)]) -> Facts {
    if !transitions.is_empty() {
        facts.spec_changed = false;
    }
    facts
}

/// Pods whose leader label disagrees with `leader`.
fn mislabelled_pods(pods: &[Pod], leader: Option<&str>) -> Vec<(String, bool)> {
    pods.iter()
        .filter_map(|p| {
            let should = leader == Some(p.name_any().as_str());
            let labelled = p.labels().get(LABEL_LEADER).is_some_and(|v| v == "true");
            (labelled != should).then(|| (p.name_any(), should))
        })
        .collect()
}

/// Whether every running pod is an alive member of the group's census. Before the census is
/// read this reconcile it counts as true, so the machine asks to read it first.
fn members_in_census(snap: &Snapshot) -> bool {
    match &snap.leader {
        LeaderView::NotObserved => true,
        LeaderView::Unreachable(_) => false,
        LeaderView::Observed { alive, .. } => snap
            .pods
            .iter()
            .filter(|p| peer::is_running(p))
            .filter_map(|p| peer::pod_ip(p))
            .all(|ip| alive.iter().any(|a| a == ip)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use crate::cluster::census::Election;
    use crate::reconcile::peer::tests::pod;
    use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};

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
            creating: None,
        }
    }

    fn observed(alive: &[&str]) -> LeaderView {
        LeaderView::Observed {
            election: Election::Elected {
                ip: "10.0.0.0".into(),
            },
            pod: Some("redis-0".into()),
            alive: alive.iter().map(|s| s.to_string()).collect(),
            members: vec![],
        }
    }

    fn facts_of(h: &Habitat, snap: &Snapshot) -> Facts {
        facts(h, snap, &Decider::default().desired(h, snap))
    }

    #[test]
    fn a_member_is_replaced_only_when_the_census_shows_every_running_member_alive() {
        let h = habitat().leader().count(3);
        let mut snap = outdated_group();
        assert!(
            facts_of(&h, &snap).pod_replacement_due,
            "due before the census is read, so it is read"
        );
        snap.leader = observed(&["10.0.0.0", "10.0.0.1"]);
        assert!(
            !facts_of(&h, &snap).pod_replacement_due,
            "10.0.0.2 has not rejoined"
        );
        snap.leader = observed(&["10.0.0.0", "10.0.0.1", "10.0.0.2"]);
        assert!(facts_of(&h, &snap).pod_replacement_due);
        snap.leader = LeaderView::Unreachable("timeout".into());
        assert!(!facts_of(&h, &snap).pod_replacement_due);
    }

    #[test]
    fn standalone_groups_never_replace_pods_themselves() {
        assert!(!facts_of(&habitat().count(3), &outdated_group()).pod_replacement_due);
    }

    #[test]
    fn the_planned_replacement_is_the_pod_the_rollout_names() {
        let h = habitat().leader().count(3);
        let mut snap = outdated_group();
        snap.leader = observed(&["10.0.0.0", "10.0.0.1", "10.0.0.2"]);
        let expected = rollout::next_replacement(
            snap.statefulset.as_ref().expect("a StatefulSet"),
            &snap.pods,
            3,
            Some("redis-0"),
        );
        let mut decider = Decider::default();
        assert!(expected.is_some());
        assert_eq!(decider.desired(&h, &snap).replacement, expected);
        snap.replaced_pod = true;
        assert_eq!(
            decider.desired(&h, &snap).replacement,
            None,
            "one pod per reconcile"
        );
    }

    /// `desired` as the server holds it once the operator applied it: stamped, defaulted,
    /// at `version`.
    fn applied<K: kube::Resource + serde::Serialize + serde::de::DeserializeOwned + Clone>(
        desired: &K,
        version: &str,
    ) -> K {
        let mut live = crate::cluster::apply::stamped(desired);
        live.meta_mut().resource_version = Some(version.into());
        live
    }

    /// A settled leader group: every child as the operator applied it.
    fn settled(h: &Habitat) -> Snapshot {
        let w = children::workload(h, None);
        let mut snap = outdated_group();
        let mut sts = applied(&w.statefulset, "1");
        sts.status = snap.statefulset.take().and_then(|s| s.status);
        snap.statefulset = Some(sts);
        snap.headless = Some(applied(&w.headless, "2"));
        let (svc, pdb) = w.leader.expect("a leader group");
        snap.leader_service = Some(applied(&svc, "3"));
        snap.budget = Some(applied(&pdb, "4"));
        snap
    }

    #[test]
    fn children_as_applied_are_current_and_an_edit_of_any_is_not() {
        let h = habitat().leader().count(3);
        let current = |snap: &Snapshot| Decider::default().desired(&h, snap).workload_current;
        assert!(current(&settled(&h)));
        type Edit = fn(&mut Snapshot);
        let edits: [(&str, Edit); 6] = [
            ("scaled", |s| {
                s.statefulset
                    .as_mut()
                    .unwrap()
                    .spec
                    .as_mut()
                    .unwrap()
                    .replicas = Some(5)
            }),
            ("image set", |s| {
                let spec = s.statefulset.as_mut().unwrap().spec.as_mut().unwrap();
                spec.template.spec.as_mut().unwrap().containers[0].image =
                    Some("example/intruder:1".into())
            }),
            ("selector patched", |s| {
                let spec = s.headless.as_mut().unwrap().spec.as_mut().unwrap();
                spec.selector = Some([("app".to_string(), "other".to_string())].into())
            }),
            ("budget patched", |s| {
                let spec = s.budget.as_mut().unwrap().spec.as_mut().unwrap();
                spec.min_available = None;
                spec.max_unavailable =
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(3))
            }),
            ("label removed", |s| {
                s.leader_service.as_mut().unwrap().labels_mut().clear()
            }),
            ("deleted", |s| s.budget = None),
        ];
        for (edit, f) in edits {
            let mut snap = settled(&h);
            f(&mut snap);
            assert!(!current(&snap), "{edit}");
        }
    }

    #[test]
    fn other_writers_fields_are_no_drift() {
        let h = habitat().leader().count(3);
        let mut snap = settled(&h);
        let sts = snap.statefulset.as_mut().unwrap();
        sts.annotations_mut()
            .insert("user.example/note".into(), "mine".into());
        let spec = sts.spec.as_mut().unwrap();
        spec.revision_history_limit = Some(10);
        spec.template.spec.as_mut().unwrap().containers[0].termination_message_path =
            Some("/dev/termination-log".into());
        assert!(Decider::default().desired(&h, &snap).workload_current);
    }

    #[test]
    fn children_found_current_are_not_compared_again_at_the_same_versions() {
        let h = habitat().leader().count(3);
        let memo = VerifiedChildren::default();
        let snap = settled(&h);
        let mut first = Decider::remembering(&memo);
        let desired = first.desired(&h, &snap);
        assert!(desired.workload_current);
        assert!(desired.workload.is_some(), "built to compare");
        let mut decider = Decider::remembering(&memo);
        let desired = decider.desired(&h, &snap);
        assert!(desired.workload_current);
        assert!(desired.workload.is_none(), "built again");
        // A write to a child gives it a new version: compared again, and found drifted.
        let mut scaled = settled(&h);
        let sts = scaled.statefulset.as_mut().unwrap();
        sts.spec.as_mut().unwrap().replicas = Some(5);
        sts.metadata.resource_version = Some("9".into());
        let mut decider = Decider::remembering(&memo);
        assert!(!decider.desired(&h, &scaled).workload_current);
    }

    /// A Service still being created in the background is seen as sent, without a version. It
    /// carries the workload, but that verdict is not remembered: when its create fails, the next
    /// pass sees it absent at the same versions and must apply it, not find it current (a leader
    /// group once went Ready without its leader Service under injected API faults).
    #[test]
    fn a_child_without_a_version_is_not_remembered_current() {
        let h = habitat().leader().count(3);
        let memo = VerifiedChildren::default();
        let mut sent = settled(&h);
        sent.leader_service
            .as_mut()
            .expect("a leader Service")
            .metadata
            .resource_version = None;
        sent.creating = Some(h.leader_service_name());
        let current = |snap: &Snapshot| {
            Decider::remembering(&memo)
                .desired(&h, snap)
                .workload_current
        };
        assert!(current(&sent), "the Service as sent carries the workload");
        let mut failed = settled(&h);
        failed.leader_service = None;
        assert!(
            !current(&failed),
            "its create failed: the leader Service is missing"
        );
    }

    #[test]
    fn a_peer_config_found_current_is_compared_again_only_when_it_or_the_peers_change() {
        let h = habitat().leader().count(3);
        let memo = VerifiedChildren::default();
        let mut snap = settled(&h);
        let peers = Decider::default().desired(&h, &snap).peers;
        snap.peer_config = Some(applied(&peer_config(&h, &peers), "5"));
        let current = |snap: &Snapshot| {
            Decider::remembering(&memo)
                .desired(&h, snap)
                .peer_config_current
        };
        assert!(current(&snap));
        assert!(memo.is_peer_config_current(&h, &peers, "5"), "remembered");
        // An edit gives the ConfigMap a new version: compared again, and found drifted.
        let mut edited = snap.clone();
        let cm = edited.peer_config.as_mut().unwrap();
        cm.data = Some([(crate::api::PEER_IP_KEY.to_string(), "10.9.9.9".into())].into());
        cm.metadata.resource_version = Some("6".into());
        assert!(!current(&edited));
        // Other peers at the remembered version: compared again, and found stale.
        let mut moved = snap.clone();
        moved.pods.remove(0);
        let moved_peers = Decider::default().desired(&h, &moved).peers;
        assert_ne!(moved_peers, peers, "the peers changed");
        assert!(!current(&moved));
    }

    #[test]
    fn a_decision_to_apply_the_workload_comes_with_the_workload() {
        let h = habitat().leader().count(3);
        let snap = outdated_group();
        let memo = VerifiedChildren::default();
        let mut decider = Decider::remembering(&memo);
        let plan = decider.next(&h, &snap, Phase::KeyReady, &[]);
        assert_eq!(
            plan.decision.step,
            Step::ApplyWorkload,
            "no child is current"
        );
        assert!(plan.desired.workload.is_some(), "the workload to apply");
    }

    #[test]
    fn only_the_leader_carries_the_leader_label() {
        let mut pods: Vec<Pod> = (0..3)
            .map(|i| pod(i, &format!("10.0.0.{i}"), "Running", true))
            .collect();
        pods[2].metadata.labels = Some([(LABEL_LEADER.to_string(), "true".to_string())].into());
        let leader = pods[0].name_any();
        let mut wanted = mislabelled_pods(&pods, Some(&leader));
        wanted.sort();
        assert_eq!(
            wanted,
            vec![(leader.clone(), true), (pods[2].name_any(), false)]
        );
        assert_eq!(
            mislabelled_pods(&pods, None),
            vec![(pods[2].name_any(), false)]
        );
    }
}
