//! Which pod's address goes into the peer file: one running pod, stable while it stays
//! running, preferring ready pods, never a dead or terminating one.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// Whether the pod runs: phase Running, an IP, and not being deleted.
pub fn is_running(p: &Pod) -> bool {
    let status = p.status.as_ref();
    p.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod_ip(p).is_some()
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(p: &Pod) -> bool {
    is_running(p)
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's IP, if it has one.
pub fn pod_ip(p: &Pod) -> Option<&str> {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
}

/// The StatefulSet ordinal of a pod (`name-3` → 3), for a stable order.
pub fn ordinal(p: &Pod) -> u32 {
    p.name_any()
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// The address for the peer file. Keeps `current` while its pod runs (and is ready, unless no
/// pod is); otherwise the lowest-ordinal ready pod, else the lowest-ordinal running pod; `None`
/// when no pod runs.
pub fn choose<'a>(
    current: Option<&str>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Option<String> {
    let mut running: Vec<&Pod> = pods.into_iter().filter(|p| is_running(p)).collect();
    running.sort_by_key(|p| ordinal(p));
    let any_ready = running.iter().any(|p| is_ready(p));
    let eligible = |p: &Pod| !any_ready || is_ready(p);
    if let Some(cur) = current.filter(|c| !c.is_empty()) {
        if running
            .iter()
            .any(|p| eligible(p) && pod_ip(p) == Some(cur))
        {
            return Some(cur.to_string());
        }
    }
    running
        .iter()
        .find(|p| eligible(p))
        .and_then(|p| pod_ip(p))
        .map(str::to_string)
}

/// The addresses for the peer file: this Habitat's peer first, then one running pod of each
/// group it binds to, so that its supervisors gossip in one ring with what they bind to. An
/// address already in `current` is kept while its pod still qualifies.
pub fn addresses(current: &[&str], own: &[Pod], bound: &[Vec<Pod>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for pods in std::iter::once(own).chain(bound.iter().map(Vec::as_slice)) {
        let kept = current
            .iter()
            .copied()
            .find(|c| pods.iter().any(|p| pod_ip(p) == Some(*c)));
        if let Some(ip) = choose(kept, pods) {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A pod `redis-<ordinal>` with `ip`, phase `phase` and readiness `ready`.
    pub fn pod(ordinal: u32, ip: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("redis-{ordinal}")),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                pod_ip: (!ip.is_empty()).then(|| ip.to_string()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn bound_groups_add_one_address_each_after_our_own() {
        let own = [pod(0, "10.0.0.1", "Running", true)];
        let db = vec![
            pod(0, "10.0.1.1", "Running", true),
            pod(1, "10.0.1.2", "Running", true),
        ];
        assert_eq!(
            addresses(&[], &own, std::slice::from_ref(&db)),
            ["10.0.0.1", "10.0.1.1"]
        );
        // The bound group's current address is kept while it runs.
        assert_eq!(
            addresses(&["10.0.0.1", "10.0.1.2"], &own, &[db]),
            ["10.0.0.1", "10.0.1.2"]
        );
        // Without our own pods the bound peer alone seeds the ring; with nothing, the file is empty.
        assert_eq!(
            addresses(&[], &[], &[vec![pod(0, "10.0.1.1", "Running", true)]]),
            ["10.0.1.1"]
        );
        assert!(addresses(&[], &[], &[vec![]]).is_empty());
    }

    #[test]
    fn no_running_pod_means_an_empty_peer_file() {
        assert_eq!(choose(None, &[]), None);
        assert_eq!(
            choose(
                Some("10.0.0.1"),
                &[
                    pod(0, "10.0.0.1", "Failed", false),
                    pod(1, "", "Pending", false)
                ]
            ),
            None
        );
    }

    #[test]
    fn the_current_peer_is_kept_while_it_runs() {
        let pods = [
            pod(0, "10.0.0.1", "Running", true),
            pod(1, "10.0.0.2", "Running", true),
        ];
        assert_eq!(choose(Some("10.0.0.2"), &pods).as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn a_dead_peer_is_replaced_by_a_running_pod() {
        let pods = [
            pod(0, "10.0.0.1", "Failed", false),
            pod(1, "10.0.0.2", "Running", true),
        ];
        assert_eq!(choose(Some("10.0.0.1"), &pods).as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn a_terminating_peer_is_replaced() {
        let mut dying = pod(0, "10.0.0.1", "Running", true);
        dying.metadata.deletion_timestamp =
            Some(crate::reconcile::conditions::to_time(chrono::Utc::now()));
        let pods = [dying, pod(1, "10.0.0.2", "Running", true)];
        assert_eq!(choose(Some("10.0.0.1"), &pods).as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn a_peer_that_stops_being_ready_is_replaced_by_a_ready_one() {
        let pods = [
            pod(0, "10.0.0.1", "Running", false),
            pod(1, "10.0.0.2", "Running", true),
        ];
        assert_eq!(choose(Some("10.0.0.1"), &pods).as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn running_but_unready_pods_seed_the_group_when_none_is_ready() {
        // Leader groups become ready only after they gossip: the peer must not wait for it.
        let pods = [
            pod(1, "10.0.0.2", "Running", false),
            pod(0, "10.0.0.1", "Running", false),
        ];
        assert_eq!(choose(None, &pods).as_deref(), Some("10.0.0.1"));
    }
}
