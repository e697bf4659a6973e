//! Rollout progress of the StatefulSet, and the order in which the operator replaces pods of
//! a leader group: followers first (highest ordinal first), the leader last.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::LABEL_LEADER;
use crate::reconcile::peer::{is_ready, ordinal};

const REVISION_LABEL: &str = "controller-revision-hash";

/// How far the StatefulSet's rollout is: its replicas and ready replicas, and whether it is
/// done (it has observed its spec, and runs `count` pods of the update revision, all ready).
///
/// All are read from the StatefulSet's status or from its pods (the watched cache), whichever
/// is ahead: kube-controller-manager writes the status after the pods' readiness, and under
/// load late (a median 26.7 s after a Habitat's last pod was ready at N = 1000 on the real
/// ground), and every Habitat waited for that write to be Ready. The pods count for done only
/// once the StatefulSet has observed its spec and named its update revision: each of the
/// `count` ordinals has a pod that is not being deleted, is ready and carries the update
/// revision, and no pod remains at or above `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Replicas (the StatefulSet's `replicas`, or its pods not being deleted when more).
    pub replicas: i32,
    /// Ready replicas (the StatefulSet's `readyReplicas`, or the ready pods below `count` when
    /// more).
    pub ready: i32,
    /// Whether the rollout is done.
    pub done: bool,
}

/// The progress of `sts`, whose pods are `pods`, towards `count` replicas.
pub fn progress(sts: &StatefulSet, pods: &[Pod], count: i32) -> Progress {
    let Some(status) = sts.status.as_ref() else {
        return Progress {
            replicas: 0,
            ready: 0,
            done: count == 0 && sts.metadata.generation.is_some(),
        };
    };
    let observed = status.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(1);
    let by_status = observed
        && status.replicas == count
        && status.ready_replicas.unwrap_or(0) == count
        && status.updated_replicas.unwrap_or(0) == count;
    let want = u32::try_from(count).unwrap_or(0);
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let ready: Vec<&Pod> = live
        .iter()
        .copied()
        .filter(|p| ordinal(p) < want && is_ready(p))
        .collect();
    let by_pods = observed
        && live.iter().all(|p| ordinal(p) < want)
        && status.update_revision.as_deref().is_some_and(|update| {
            let current = ready
                .iter()
                .filter(|p| p.labels().get(REVISION_LABEL).is_some_and(|r| r == update))
                .count();
            current == want as usize
        });
    let as_count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    Progress {
        replicas: status.replicas.max(as_count(live.len())),
        ready: status
            .ready_replicas
            .unwrap_or(0)
            .max(as_count(ready.len())),
        done: by_status || by_pods,
    }
}

/// Pods whose template revision is not the StatefulSet's update revision.
pub fn outdated<'a>(sts: &StatefulSet, pods: &'a [Pod]) -> Vec<&'a Pod> {
    let Some(update) = sts
        .status
        .as_ref()
        .and_then(|s| s.update_revision.as_deref())
    else {
        return vec![];
    };
    pods.iter()
        .filter(|p| p.labels().get(REVISION_LABEL).is_some_and(|r| r != update))
        .collect()
}

/// The next pod to delete so that it comes back at the new revision, when one is due: every
/// pod of the set exists and is ready (one replacement at a time), and an outdated pod remains.
/// Followers go first, highest ordinal first; the leader (`leader` pod name or the pod labelled
/// leader) goes last.
pub fn next_replacement(
    sts: &StatefulSet,
    pods: &[Pod],
    count: i32,
    leader: Option<&str>,
) -> Option<String> {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    if live.len() != usize::try_from(count).unwrap_or(0) || !live.iter().all(|p| is_ready(p)) {
        return None;
    }
    let is_leader = |p: &Pod| {
        leader.is_some_and(|l| l == p.name_any())
            || p.labels().get(LABEL_LEADER).is_some_and(|v| v == "true")
    };
    let mut candidates = outdated(sts, pods);
    candidates.sort_by_key(|p| (is_leader(p), std::cmp::Reverse(ordinal(p))));
    candidates.first().map(|p| p.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::peer::tests::pod;
    use k8s_openapi::api::apps::v1::StatefulSetStatus;

    fn sts(update: &str, replicas: i32, ready: i32, updated: i32) -> StatefulSet {
        let mut s = StatefulSet::default();
        s.metadata.generation = Some(2);
        s.status = Some(StatefulSetStatus {
            observed_generation: Some(2),
            replicas,
            ready_replicas: Some(ready),
            updated_replicas: Some(updated),
            update_revision: Some(update.into()),
            ..StatefulSetStatus::default()
        });
        s
    }

    fn at(ordinal: u32, revision: &str) -> Pod {
        let mut p = pod(ordinal, &format!("10.0.0.{ordinal}"), "Running", true);
        p.metadata.labels = Some([(REVISION_LABEL.to_string(), revision.to_string())].into());
        p
    }

    fn done(s: &StatefulSet, count: i32) -> bool {
        progress(s, &[], count).done
    }

    #[test]
    fn a_rollout_is_done_when_every_replica_is_updated_and_ready() {
        assert!(done(&sts("r2", 3, 3, 3), 3));
        assert!(!done(&sts("r2", 3, 2, 3), 3));
        assert!(!done(&sts("r2", 3, 3, 2), 3));
        let mut stale = sts("r2", 3, 3, 3);
        stale.metadata.generation = Some(3);
        assert!(!done(&stale, 3));
    }

    #[test]
    fn the_pods_tell_a_done_rollout_before_the_statefulset_status_does() {
        // kube-controller-manager has created the pods and named the revision, but not yet
        // counted them ready.
        let s = sts("r2", 3, 0, 3);
        let pods = [at(0, "r2"), at(1, "r2"), at(2, "r2")];
        assert_eq!(
            progress(&s, &pods, 3),
            Progress {
                replicas: 3,
                ready: 3,
                done: true
            }
        );
        // One not ready, one of the old revision, one missing, one being deleted: not done.
        let mut unready = pods.clone();
        unready[1] = pod(1, "10.0.0.1", "Running", false);
        unready[1].metadata.labels = pods[1].metadata.labels.clone();
        assert_eq!(
            progress(&s, &unready, 3),
            Progress {
                replicas: 3,
                ready: 2,
                done: false
            }
        );
        assert!(!progress(&s, &[at(0, "r2"), at(1, "r1"), at(2, "r2")], 3).done);
        assert!(!progress(&s, &pods[..2], 3).done);
        let mut deleting = pods.clone();
        deleting[2].metadata.deletion_timestamp =
            Some(crate::reconcile::conditions::to_time(chrono::Utc::now()));
        assert!(!progress(&s, &deleting, 3).done);
        // A pod beyond the count (a scale-down under way) keeps the rollout open.
        assert!(!progress(&s, &[at(0, "r2"), at(1, "r2"), at(2, "r2"), at(3, "r2")], 3).done);
        // Before the StatefulSet observed its spec, the pods do not count for done.
        let mut stale = sts("r2", 3, 0, 3);
        stale.metadata.generation = Some(3);
        assert!(!progress(&stale, &pods, 3).done);
        // Without a named revision, neither.
        let mut unnamed = sts("r2", 3, 0, 3);
        if let Some(st) = unnamed.status.as_mut() {
            st.update_revision = None;
        }
        assert!(!progress(&unnamed, &pods, 3).done);
        // The status ahead of the cache counts too.
        assert_eq!(progress(&sts("r2", 3, 3, 3), &[], 3).ready, 3);
    }

    #[test]
    fn followers_are_replaced_highest_ordinal_first_and_the_leader_last() {
        let s = sts("new", 3, 3, 0);
        let mut pods = vec![at(0, "old"), at(1, "old"), at(2, "old")];
        assert_eq!(
            next_replacement(&s, &pods, 3, Some("redis-2")).as_deref(),
            Some("redis-1")
        );
        pods[1] = at(1, "new");
        assert_eq!(
            next_replacement(&s, &pods, 3, Some("redis-2")).as_deref(),
            Some("redis-0")
        );
        pods[0] = at(0, "new");
        assert_eq!(
            next_replacement(&s, &pods, 3, Some("redis-2")).as_deref(),
            Some("redis-2")
        );
        pods[2] = at(2, "new");
        assert_eq!(next_replacement(&s, &pods, 3, Some("redis-2")), None);
    }

    #[test]
    fn nothing_is_replaced_while_a_pod_is_starting_or_missing() {
        let s = sts("new", 3, 2, 0);
        let mut pods = vec![at(0, "old"), at(1, "old"), at(2, "old")];
        pods[2]
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .status = "False".into();
        assert_eq!(next_replacement(&s, &pods, 3, None), None);
        pods.pop();
        assert_eq!(next_replacement(&s, &pods, 3, None), None);
    }
}
