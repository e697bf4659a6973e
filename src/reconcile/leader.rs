//! Observing the elected leader: the census is read from running pods, and the leader member
//! is mapped to a pod by its IP.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::MemberStatus;
use crate::api::{Habitat, LABEL_LEADER};
use crate::cluster::census::{Census, CensusSource, Election};
use crate::reconcile::observe::LeaderView;
use crate::reconcile::peer::{is_ready, is_running, ordinal, pod_ip};

/// Most members listed in the status (the count's bound, plus room for dead members).
pub const MAX_MEMBERS: usize = 1024;

/// The group's members that have not departed, alive ones first, then by pod and id. An alive
/// member is mapped to the running pod with its IP; a dead one keeps the host name it had (the
/// pod name). When several alive members claim one pod's IP (a new member on the address of
/// one not yet found dead), the pod is the member the pod itself reports as its own
/// (`local_member_id` of a census it answered), else none of them.
pub fn members(
    c: &Census,
    group: &str,
    running: &[&Pod],
    answered: Option<&str>,
) -> Vec<MemberStatus> {
    let Some(g) = c.census_groups.get(group) else {
        return vec![];
    };
    let finished = g.election_status == "ElectionFinished";
    let mut out: Vec<MemberStatus> = g
        .population
        .values()
        .filter(|m| !m.departed)
        .map(|m| {
            let pod = m
                .alive
                .then(|| pod_of(c, group, running, answered, &m.member_id))
                .flatten()
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

/// The running pod of alive member `id`: the pod with its IP, when no other alive member claims
/// that IP, or when the pod itself answered the census and reports `id` as its own.
fn pod_of(
    c: &Census,
    group: &str,
    running: &[&Pod],
    answered: Option<&str>,
    id: &str,
) -> Option<String> {
    let g = c.census_groups.get(group)?;
    let ip = g.population.get(id).filter(|m| m.alive)?.sys.ip.as_str();
    let pod = running.iter().find(|p| pod_ip(p) == Some(ip))?;
    let claims = g
        .population
        .values()
        .filter(|m| m.alive && m.sys.ip == ip)
        .count();
    let own = answered == Some(pod.name_any().as_str()) && c.local_member_id.as_deref() == Some(id);
    (claims == 1 || own).then(|| pod.name_any())
}

/// How many supervisors are asked before the census counts as unreachable.
const MAX_ATTEMPTS: usize = 3;

/// A census as read this reconcile: what it says, and which running pod answered it.
#[derive(Debug, Clone)]
pub struct CensusRead {
    /// The pod that answered.
    pub pod: String,
    /// Its IP.
    pub ip: String,
    /// What it said.
    pub census: Census,
}

/// Reads the census from up to three running pods and returns the view of the first that is
/// trusted ([`trusted`]); when none is, the one that sees the most alive members. Any
/// member's census holds the whole group, but not every member's is right: pods that are not
/// the labelled leader are asked first, lowest ordinal first.
pub async fn observe(h: &Habitat, census: &dyn CensusSource, pods: &[Pod]) -> LeaderView {
    observe_read(h, census, pods).await.0
}

/// [`observe`], with the census the view was drawn from.
pub async fn observe_read(
    h: &Habitat,
    census: &dyn CensusSource,
    pods: &[Pod],
) -> (LeaderView, Option<CensusRead>) {
    let group = format!("{}.{}", h.spec.service.name, h.spec.service.group);
    let mut running: Vec<&Pod> = pods.iter().filter(|p| is_running(p)).collect();
    running.sort_by_key(|p| (labelled_leader(p), ordinal(p)));
    let ready = running.iter().filter(|p| is_ready(p)).count();
    let mut errors = Vec::new();
    let mut best: Option<CensusRead> = None;
    for pod in running.iter().take(MAX_ATTEMPTS) {
        let Some(ip) = pod_ip(pod) else { continue };
        match census.fetch(ip).await {
            Ok(c) => {
                let read = CensusRead {
                    pod: pod.name_any(),
                    ip: ip.to_string(),
                    census: c,
                };
                if trusted(&read, &group, ready, is_ready(pod)) {
                    best = Some(read);
                    break;
                }
                let alive = |r: &CensusRead| r.census.alive_ips(&group).len();
                if best.as_ref().is_none_or(|b| alive(&read) > alive(b)) {
                    best = Some(read);
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    let Some(read) = best else {
        let view = if errors.is_empty() {
            LeaderView::Unreachable("no pod runs".to_string())
        } else {
            LeaderView::Unreachable(errors.join("; "))
        };
        return (view, None);
    };
    let c = &read.census;
    let election = c.election(&group);
    let leader_pod = match &election {
        Election::Elected { .. } => c
            .census_groups
            .get(&group)
            .and_then(|g| g.population.values().find(|m| m.alive && m.leader))
            .and_then(|m| pod_of(c, &group, &running, Some(&read.pod), &m.member_id)),
        _ => None,
    };
    let view = LeaderView::Observed {
        alive: c.alive_ips(&group),
        members: members(c, &group, &running, Some(&read.pod)),
        election,
        pod: leader_pod,
    };
    (view, Some(read))
}

fn labelled_leader(p: &Pod) -> bool {
    p.labels().get(LABEL_LEADER).is_some_and(|v| v == "true")
}

/// Whether a census is believed. Measured with the real supervisor: a member that has just
/// started alone, or restarted after an unclean death, sees only itself (one alive member, no
/// election) while the others agree on a leader; and one restarted with its saved data reports
/// its old election (itself leader, finished) for about a second. So a census is not trusted
/// when it sees fewer alive members than there are ready pods (its own pod counted even when
/// not ready), or when it names its own member leader while its pod is not ready.
pub fn trusted(read: &CensusRead, group: &str, ready_pods: usize, own_pod_ready: bool) -> bool {
    let expected = ready_pods + usize::from(!own_pod_ready);
    let alive = read.census.alive_ips(group).len();
    let g = read.census.census_groups.get(group);
    let self_leader = g.is_some_and(|g| {
        g.election_status == "ElectionFinished"
            && g.leader_id.is_some()
            && g.leader_id == read.census.local_member_id
    });
    alive >= expected && (own_pod_ready || !self_leader)
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

#[cfg(test)]
mod trust_tests {
    use super::tests::Scripted;
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use crate::cluster::census::tests::census_json;
    use crate::reconcile::peer::tests::pod;
    use std::collections::HashMap;

    fn own(mut census: serde_json::Value, id: &str) -> serde_json::Value {
        census["local_member_id"] = id.into();
        census
    }

    fn three_agree() -> serde_json::Value {
        census_json(
            "ElectionFinished",
            &[
                ("a", "10.0.0.1", false, true),
                ("b", "10.0.0.2", true, true),
                ("c", "10.0.0.3", false, true),
            ],
        )
    }

    /// Measured with the real supervisor: a crashed follower's replacement sees only itself.
    #[tokio::test]
    async fn a_lone_replacement_is_not_trusted_while_the_others_agree_on_a_leader() {
        let alone = own(
            census_json("ElectionNoQuorum", &[("n", "10.0.0.9", false, true)]),
            "n",
        );
        let src = Scripted(HashMap::from([
            ("10.0.0.9".to_string(), alone),
            ("10.0.0.2".to_string(), own(three_agree(), "b")),
        ]));
        let pods = [
            pod(0, "10.0.0.9", "Running", false),
            pod(1, "10.0.0.2", "Running", true),
            pod(2, "10.0.0.3", "Running", true),
        ];
        let (view, read) = observe_read(&habitat().leader(), &src, &pods).await;
        assert_eq!(view.pod(), Some("redis-1"), "{view:?}");
        assert_eq!(read.unwrap().pod, "redis-1");
    }

    /// Measured: a supervisor restarted with its saved data reports its old election (itself
    /// leader, finished) for about a second.
    #[tokio::test]
    async fn a_restarted_member_that_names_itself_leader_before_its_pod_is_ready_is_not_trusted() {
        let stale = own(
            census_json(
                "ElectionFinished",
                &[
                    ("a", "10.0.0.1", true, true),
                    ("b", "10.0.0.2", false, true),
                    ("c", "10.0.0.3", false, true),
                ],
            ),
            "a",
        );
        let src = Scripted(HashMap::from([
            ("10.0.0.1".to_string(), stale),
            ("10.0.0.2".to_string(), own(three_agree(), "b")),
        ]));
        let pods = [
            pod(0, "10.0.0.1", "Running", false),
            pod(1, "10.0.0.2", "Running", true),
            pod(2, "10.0.0.3", "Running", true),
        ];
        let view = observe(&habitat().leader(), &src, &pods).await;
        assert_eq!(view.pod(), Some("redis-1"), "{view:?}");
    }

    #[tokio::test]
    async fn when_no_census_is_trusted_the_one_seeing_most_members_is_used() {
        let alone = own(
            census_json("ElectionNoQuorum", &[("n", "10.0.0.9", false, true)]),
            "n",
        );
        let two = own(
            census_json(
                "ElectionFinished",
                &[
                    ("b", "10.0.0.2", true, true),
                    ("n", "10.0.0.9", false, true),
                ],
            ),
            "b",
        );
        let src = Scripted(HashMap::from([
            ("10.0.0.9".to_string(), alone),
            ("10.0.0.2".to_string(), two),
        ]));
        let pods = [
            pod(0, "10.0.0.9", "Running", true),
            pod(1, "10.0.0.2", "Running", true),
            pod(2, "10.0.0.3", "Running", true),
        ];
        let (view, read) = observe_read(&habitat().leader(), &src, &pods).await;
        assert_eq!(read.unwrap().pod, "redis-1");
        assert_eq!(view.pod(), Some("redis-1"));
    }

    #[test]
    fn trust_rules() {
        let read = |c: serde_json::Value| CensusRead {
            pod: "redis-0".into(),
            ip: "10.0.0.1".into(),
            census: serde_json::from_value(c).unwrap(),
        };
        let agree = read(own(three_agree(), "a"));
        assert!(trusted(&agree, "redis.default", 3, true));
        assert!(trusted(&agree, "redis.default", 2, false));
        assert!(
            !trusted(&agree, "redis.default", 4, true),
            "sees fewer than are ready"
        );
        let leader_itself = read(own(three_agree(), "b"));
        assert!(trusted(&leader_itself, "redis.default", 3, true));
        assert!(!trusted(&leader_itself, "redis.default", 2, false));
    }

    /// A new member on the address of one not yet found dead: both alive at one IP.
    #[test]
    fn two_alive_members_at_one_ip_map_to_the_one_the_pod_reports_as_its_own() {
        let c: Census = serde_json::from_value(own(
            census_json(
                "ElectionFinished",
                &[
                    ("old", "10.0.0.1", false, true),
                    ("new", "10.0.0.1", false, true),
                    ("b", "10.0.0.2", true, true),
                ],
            ),
            "new",
        ))
        .unwrap();
        let pods = [
            pod(0, "10.0.0.1", "Running", true),
            pod(1, "10.0.0.2", "Running", true),
        ];
        let running: Vec<&Pod> = pods.iter().collect();
        let pod_of_member = |answered: Option<&str>, id: &str| {
            members(&c, "redis.default", &running, answered)
                .into_iter()
                .find(|m| m.member_id == id)
                .and_then(|m| m.pod)
        };
        assert_eq!(
            pod_of_member(Some("redis-0"), "new").as_deref(),
            Some("redis-0")
        );
        // The old one keeps only its host name ("h" in these censuses), not the pod.
        assert_eq!(pod_of_member(Some("redis-0"), "old").as_deref(), Some("h"));
        // Read from another pod, the claim is ambiguous: neither is mapped.
        assert_eq!(pod_of_member(Some("redis-1"), "new").as_deref(), Some("h"));
        assert_eq!(
            pod_of_member(Some("redis-1"), "b").as_deref(),
            Some("redis-1")
        );
    }
}
