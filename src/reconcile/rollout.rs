//! Rollout progress of the StatefulSet, and the order in which the operator replaces pods of
//! a leader group: followers first (highest ordinal first), the leader last.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::LABEL_LEADER;
use crate::reconcile::peer::{is_ready, ordinal};

const REVISION_LABEL: &str = "controller-revision-hash";

/// Whether the StatefulSet has observed its spec, runs `count` pods of the update revision and
/// all of them are ready.
pub fn done(sts: &StatefulSet, count: i32) -> bool {
    let Some(status) = sts.status.as_ref() else {
        return count == 0 && sts.metadata.generation.is_some();
    };
    let observed = status.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(1);
    observed
        && status.replicas == count
        && status.ready_replicas.unwrap_or(0) == count
        && status.updated_replicas.unwrap_or(0) == count
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
