//! Observing the elected leader: the census is read from running pods, and the leader member
//! is mapped to a pod by its IP.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::Habitat;
use crate::api::MemberStatus;
use crate::cluster::census::{Census, CensusSource, Election};
use crate::reconcile::observe::LeaderView;
use crate::reconcile::peer::{is_running, ordinal, pod_ip};

/// Most members listed in the status (the count's bound, plus room for dead members).
pub const MAX_MEMBERS: usize = 1024;

/// The group's members that have not departed, alive ones first, then by pod and id. A member
/// is mapped to a running pod by its IP; a dead one keeps the host name it had (the pod name).
pub fn members(c: &Census, group: &str, running: &[&Pod]) -> Vec<MemberStatus> {
    let Some(g) = c.census_groups.get(group) else {
        return vec![];
    };
    let finished = g.election_status == "ElectionFinished";
    let mut out: Vec<MemberStatus> = g
        .population
        .values()
        .filter(|m| !m.departed)
        .map(|m| {
            let pod = running
                .iter()
                .find(|p| m.alive && pod_ip(p) == Some(m.sys.ip.as_str()))
                .map(|p| p.name_any())
                .or_else(|| (!m.sys.hostname.is_empty()).then(|| m.sys.hostname.clone()));
            MemberStatus {
                pod,
                member_id: m.member_id.clone(),
                package: m.package.clone(),
                alive: m.alive,
                leader: finished && m.leader && m.alive,
            }
        })
        .collect();
    out.sort_by(|a, b| (!a.alive, &a.pod, &a.member_id).cmp(&(!b.alive, &b.pod, &b.member_id)));
    out.truncate(MAX_MEMBERS);
    out
}

/// How many supervisors are asked before the census counts as unreachable.
const MAX_ATTEMPTS: usize = 3;

/// Reads the census from up to three running pods (lowest ordinal first) and returns the view
/// of the first that answers. Any member's census holds the whole group.
pub async fn observe(h: &Habitat, census: &dyn CensusSource, pods: &[Pod]) -> LeaderView {
    let group = format!("{}.{}", h.spec.service.name, h.spec.service.group);
    let mut running: Vec<&Pod> = pods.iter().filter(|p| is_running(p)).collect();
    running.sort_by_key(|p| ordinal(p));
    let mut errors = Vec::new();
    for pod in running.iter().take(MAX_ATTEMPTS) {
        let Some(ip) = pod_ip(pod) else { continue };
        match census.fetch(ip).await {
            Ok(c) => {
                let election = c.election(&group);
                let leader_pod = match &election {
                    Election::Elected { ip } => running
                        .iter()
                        .find(|p| pod_ip(p) == Some(ip.as_str()))
                        .map(|p| p.name_any()),
                    _ => None,
                };
                return LeaderView::Observed {
                    alive: c.alive_ips(&group),
                    members: members(&c, &group, &running),
                    election,
                    pod: leader_pod,
                };
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.is_empty() {
        LeaderView::Unreachable("no pod runs".to_string())
    } else {
        LeaderView::Unreachable(errors.join("; "))
    }
}

/// Whether the group's election cannot finish before another of its supervisors starts, as the
/// census of this pass and the running pods show: no pod runs (no supervisor, no census), or
/// at most one runs and its census says NoQuorum. A lone supervisor has no member entry of its
/// own until it gossips with a peer, so it has no quorum, and keeps none until a peer joins
/// (habitat-supervisor-facts, `check_quorum_mlr`); a peer that joins runs in a pod that starts
/// running, which the pod watch reports. A lone supervisor whose census does not say NoQuorum
/// yet (it has just started) is read again, so that the Habitat reports why it waits.
pub fn stalled(view: &LeaderView, pods: &[Pod]) -> bool {
    let running = pods.iter().filter(|p| is_running(p)).count();
    match view {
        LeaderView::Observed {
            election: Election::NoQuorum,
            ..
        } => running <= 1,
        LeaderView::Unreachable(_) => running == 0,
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use crate::cluster::census::tests::census_json;
    use crate::cluster::census::{Census, CensusError};
    use crate::reconcile::peer::tests::pod;
    use futures::future::BoxFuture;
    use std::collections::HashMap;

    /// Censuses by IP; an IP not in the map does not answer.
    pub struct Scripted(pub HashMap<String, serde_json::Value>);

    impl CensusSource for Scripted {
        fn fetch<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<Census, CensusError>> {
            Box::pin(async move {
                match self.0.get(ip) {
                    Some(v) => serde_json::from_value(v.clone()).map_err(|e| CensusError::Body {
                        addr: ip.into(),
                        message: e.to_string(),
                    }),
                    None => Err(CensusError::Timeout(ip.to_string())),
                }
            })
        }
    }

    #[tokio::test]
    async fn the_leader_is_mapped_to_its_pod_by_ip() {
        let census = census_json(
            "ElectionFinished",
            &[
                ("a", "10.0.0.1", false, true),
                ("b", "10.0.0.2", true, true),
            ],
        );
        let src = Scripted(HashMap::from([("10.0.0.1".to_string(), census)]));
        let pods = [
            pod(0, "10.0.0.1", "Running", true),
            pod(1, "10.0.0.2", "Running", true),
        ];
        let view = observe(&habitat().leader(), &src, &pods).await;
        assert_eq!(view.pod(), Some("redis-1"));
    }

    #[tokio::test]
    async fn the_members_carry_their_pod_package_and_role_and_departed_ones_are_left_out() {
        let mut census = census_json(
            "ElectionFinished",
            &[
                ("a", "10.0.0.1", false, true),
                ("b", "10.0.0.2", true, true),
                ("c", "10.0.0.9", false, false),
                ("d", "10.0.0.8", false, false),
            ],
        );
        let pop = &mut census["census_groups"]["redis.default"]["population"];
        pop["a"]["package"] = "core/redis/7.0.1/20250101000000".into();
        pop["b"]["package"] = "core/redis/7.0.2/20250202000000".into();
        pop["c"]["sys"]["hostname"] = "redis-2".into();
        pop["d"]["departed"] = true.into();
        pop["d"]["confirmed"] = false.into();
        let src = Scripted(HashMap::from([("10.0.0.1".to_string(), census)]));
        let pods = [
            pod(0, "10.0.0.1", "Running", true),
            pod(1, "10.0.0.2", "Running", true),
        ];
        let LeaderView::Observed { members, .. } = observe(&habitat().leader(), &src, &pods).await
        else {
            panic!("observed");
        };
        let rows: Vec<(Option<&str>, &str, &str, bool, bool)> = members
            .iter()
            .map(|m| {
                let p = m.pod.as_deref();
                (
                    p,
                    m.member_id.as_str(),
                    m.package.as_str(),
                    m.alive,
                    m.leader,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    Some("redis-0"),
                    "a",
                    "core/redis/7.0.1/20250101000000",
                    true,
                    false
                ),
                (
                    Some("redis-1"),
                    "b",
                    "core/redis/7.0.2/20250202000000",
                    true,
                    true
                ),
                (Some("redis-2"), "c", "", false, false),
            ]
        );
    }

    #[tokio::test]
    async fn a_silent_pod_is_skipped_for_the_next_one() {
        let census = census_json("ElectionFinished", &[("b", "10.0.0.2", true, true)]);
        let src = Scripted(HashMap::from([("10.0.0.2".to_string(), census)]));
        let pods = [
            pod(0, "10.0.0.1", "Running", true),
            pod(1, "10.0.0.2", "Running", true),
        ];
        assert_eq!(
            observe(&habitat().leader(), &src, &pods).await.pod(),
            Some("redis-1")
        );
    }

    #[tokio::test]
    async fn no_answer_is_unreachable_with_the_reasons() {
        let src = Scripted(HashMap::new());
        let pods = [pod(0, "10.0.0.1", "Running", true)];
        match observe(&habitat().leader(), &src, &pods).await {
            LeaderView::Unreachable(e) => assert!(e.contains("10.0.0.1"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_election_stalls_without_a_supervisor_or_with_a_lone_one_without_quorum() {
        let h = habitat().leader();
        let no_quorum = census_json("ElectionNoQuorum", &[("a", "10.0.0.1", false, true)]);
        let in_progress = census_json("ElectionInProgress", &[("a", "10.0.0.1", false, true)]);
        let read = |census: serde_json::Value, pods: &[Pod]| {
            let src = Scripted(HashMap::from([("10.0.0.1".to_string(), census)]));
            let pods = pods.to_vec();
            let h = h.clone();
            async move { (observe(&h, &src, &pods).await, pods) }
        };
        let pending = [pod(0, "", "Pending", false)];
        let one = [pod(0, "10.0.0.1", "Running", false)];
        let two = [
            pod(0, "10.0.0.1", "Running", false),
            pod(1, "10.0.0.2", "Running", false),
        ];
        // No pod runs: nothing to read, nothing can change before one does.
        let (view, pods) = read(no_quorum.clone(), &pending).await;
        assert_eq!(view, LeaderView::Unreachable("no pod runs".into()));
        assert!(stalled(&view, &pods));
        // A lone supervisor without quorum keeps none until a peer's pod runs.
        let (view, pods) = read(no_quorum.clone(), &one).await;
        assert!(stalled(&view, &pods), "{view:?}");
        // Just started, its census does not say so yet: read again, to report NoQuorum.
        let (view, pods) = read(in_progress, &one).await;
        assert!(!stalled(&view, &pods), "{view:?}");
        // Two supervisors may elect; one that does not answer yet is asked again.
        let (view, pods) = read(no_quorum, &two).await;
        assert!(!stalled(&view, &pods), "{view:?}");
        let (view, pods) = read(serde_json::json!({}), &one).await;
        assert!(matches!(view, LeaderView::Unreachable(_)));
        assert!(
            !stalled(&view, &pods),
            "a running pod that does not answer yet"
        );
        assert!(!stalled(&LeaderView::NotObserved, &pending));
    }
}
