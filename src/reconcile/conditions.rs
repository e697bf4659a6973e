//! The Habitat's conditions: their types, their reasons, and the one merge rule
//! (`lastTransitionTime` moves only when `status` flips; `observedGeneration` always stamped).

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The condition types, in the fixed order they are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConditionType {
    /// The peer ConfigMap exists with the right address.
    ConfigMapReady,
    /// The ring key is resolved, or not required.
    KeyReady,
    /// The StatefulSet and Services match the spec.
    Deployed,
    /// Ready replicas equal `count`.
    Available,
    /// Leader topology: a leader is elected and published.
    LeaderElected,
    /// A rollout is in progress (Deploying or Updating).
    Progressing,
    /// Summary: the Habitat is Ready and healthy.
    Ready,
    /// The alive supervisors run different releases (True), as during a rolling update; its
    /// reason turns `MixedTooLong` when that lasts longer than a rollout should.
    MixedReleases,
}

impl ConditionType {
    /// Every type, in written order.
    pub const ALL: [ConditionType; 8] = [
        ConditionType::ConfigMapReady,
        ConditionType::KeyReady,
        ConditionType::Deployed,
        ConditionType::Available,
        ConditionType::LeaderElected,
        ConditionType::Progressing,
        ConditionType::Ready,
        ConditionType::MixedReleases,
    ];

    /// The `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::ConfigMapReady => "ConfigMapReady",
            ConditionType::KeyReady => "KeyReady",
            ConditionType::Deployed => "Deployed",
            ConditionType::Available => "Available",
            ConditionType::LeaderElected => "LeaderElected",
            ConditionType::Progressing => "Progressing",
            ConditionType::Ready => "Ready",
            ConditionType::MixedReleases => "MixedReleases",
        }
    }
}

/// Reasons: PascalCase, one per distinct cause, stable for alerting and grepping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The peer file points at a running pod.
    PeerSelected,
    /// No pod runs; the peer file is empty.
    NoRunningPod,
    /// The peer ConfigMap has not been written yet.
    PeerConfigPending,
    /// Gossip is not encrypted.
    NotRequired,
    /// The ring key Secret is present and well-formed.
    KeyFound,
    /// The operator generated the ring's key.
    KeyGenerated,
    /// The ring names no Secret yet and the operator is generating its key.
    KeyPending,
    /// The ring key Secret does not exist.
    SecretNotFound,
    /// The ring key Secret is malformed.
    KeyMalformed,
    /// A Secret named in the spec is missing or lacks its key.
    ReferencedSecretMissing,
    /// The StatefulSet and Services match the spec.
    UpToDate,
    /// The workload has not been applied for the current spec yet.
    NotApplied,
    /// Every replica is ready.
    AllReplicasReady,
    /// Some replicas are not ready.
    ReplicasNotReady,
    /// The census names an alive leader.
    Elected,
    /// The group has no quorum.
    NoQuorum,
    /// An election is running.
    ElectionInProgress,
    /// No election has started.
    NoElection,
    /// No supervisor's census could be read.
    CensusUnreachable,
    /// The census has not been read yet.
    CensusPending,
    /// A rollout is in progress.
    RollingOut,
    /// Nothing is rolling out.
    Settled,
    /// The Habitat is being deleted.
    Terminating,
    /// The Habitat is Ready and healthy.
    HabitatReady,
    /// The Habitat has not reached Ready yet.
    NotYetReady,
    /// The Habitat is Ready but lost health (see the other conditions).
    Degraded,
    /// The spec is invalid.
    InvalidSpec,
    /// The last attempt failed; it is retried with backoff.
    ReconcileFailed,
    /// Every alive supervisor runs one release.
    OneRelease,
    /// The alive supervisors run different releases, for less than a rollout should take.
    RollingUpdate,
    /// The alive supervisors have run different releases for longer than a rollout should take.
    MixedTooLong,
}

impl Reason {
    /// Whether `reason`, on a condition that is not True, only says the workload is still on its
    /// way (pods starting, an election running): expected while it converges, and a change
    /// between two such reasons is progress, not news.
    pub fn is_progress(reason: &str) -> bool {
        [
            Reason::PeerConfigPending,
            Reason::KeyPending,
            Reason::NotApplied,
            Reason::ReplicasNotReady,
            Reason::NoQuorum,
            Reason::ElectionInProgress,
            Reason::NoElection,
            Reason::CensusUnreachable,
            Reason::CensusPending,
            Reason::NotYetReady,
        ]
        .iter()
        .any(|r| r.as_str() == reason)
    }

    /// The `reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PeerSelected => "PeerSelected",
            Reason::NoRunningPod => "NoRunningPod",
            Reason::PeerConfigPending => "PeerConfigPending",
            Reason::NotRequired => "NotRequired",
            Reason::KeyFound => "KeyFound",
            Reason::KeyGenerated => "KeyGenerated",
            Reason::KeyPending => "KeyPending",
            Reason::SecretNotFound => "SecretNotFound",
            Reason::KeyMalformed => "KeyMalformed",
            Reason::ReferencedSecretMissing => "ReferencedSecretMissing",
            Reason::UpToDate => "UpToDate",
            Reason::NotApplied => "NotApplied",
            Reason::AllReplicasReady => "AllReplicasReady",
            Reason::ReplicasNotReady => "ReplicasNotReady",
            Reason::Elected => "Elected",
            Reason::NoQuorum => "NoQuorum",
            Reason::ElectionInProgress => "ElectionInProgress",
            Reason::NoElection => "NoElection",
            Reason::CensusUnreachable => "CensusUnreachable",
            Reason::CensusPending => "CensusPending",
            Reason::RollingOut => "RollingOut",
            Reason::Settled => "Settled",
            Reason::Terminating => "Terminating",
            Reason::HabitatReady => "HabitatReady",
            Reason::NotYetReady => "NotYetReady",
            Reason::Degraded => "Degraded",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::OneRelease => "OneRelease",
            Reason::RollingUpdate => "RollingUpdate",
            Reason::MixedTooLong => "MixedTooLong",
            Reason::ReconcileFailed => "ReconcileFailed",
        }
    }

    /// Whether the user must act (a Warning Event is recorded when it appears).
    pub fn needs_user(self) -> bool {
        matches!(
            self,
            Reason::SecretNotFound
                | Reason::KeyMalformed
                | Reason::ReferencedSecretMissing
                | Reason::InvalidSpec
        )
    }
}

/// A condition the operator wants, before it is merged with the existing one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// Which condition.
    pub type_: ConditionType,
    /// True or False.
    pub status: bool,
    /// Why.
    pub reason: Reason,
    /// For humans: what is the case and, when False, what to do.
    pub message: String,
}

impl Desired {
    /// A condition of `type_`.
    pub fn new(
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        Desired {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// Merges `desired` into `existing`: a condition keeps its `lastTransitionTime` unless its
/// status flips; every condition is stamped with `generation`. The result holds the desired
/// types only, in [`ConditionType::ALL`] order, so that a serialised status is stable.
pub fn merge(
    existing: &[Condition],
    desired: &[Desired],
    generation: i64,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let mut desired: Vec<&Desired> = desired.iter().collect();
    desired.sort_by_key(|d| d.type_);
    desired
        .into_iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" };
            let previous = existing.iter().find(|c| c.type_ == d.type_.as_str());
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => to_time(now),
            };
            Condition {
                type_: d.type_.as_str().to_string(),
                status: status.to_string(),
                reason: d.reason.as_str().to_string(),
                message: d.message.clone(),
                observed_generation: Some(generation),
                last_transition_time,
            }
        })
        .collect()
}

/// A Kubernetes `Time` from a chrono instant.
pub fn to_time(t: DateTime<Utc>) -> Time {
    let ts = k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32);
    Time(ts.unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

/// A chrono instant from a Kubernetes `Time`.
pub fn from_time(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

/// Whether two condition lists say the same thing, whatever their order.
pub fn same(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len() && a.iter().all(|c| b.contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 10, minute, 0).unwrap()
    }

    fn ready(status: bool, reason: Reason) -> Desired {
        Desired::new(ConditionType::Ready, status, reason, "m")
    }

    #[test]
    fn a_new_condition_is_stamped_with_now_and_the_generation() {
        let c = merge(&[], &[ready(false, Reason::NotYetReady)], 3, t(0));
        assert_eq!(c[0].last_transition_time, to_time(t(0)));
        assert_eq!(c[0].observed_generation, Some(3));
        assert_eq!(
            (c[0].type_.as_str(), c[0].status.as_str()),
            ("Ready", "False")
        );
    }

    #[test]
    fn the_transition_time_is_kept_when_only_reason_message_or_generation_change() {
        let first = merge(&[], &[ready(false, Reason::NotYetReady)], 1, t(0));
        let second = merge(
            &first,
            &[Desired::new(
                ConditionType::Ready,
                false,
                Reason::Degraded,
                "other",
            )],
            2,
            t(5),
        );
        assert_eq!(second[0].last_transition_time, to_time(t(0)));
        assert_eq!(second[0].observed_generation, Some(2));
        assert_eq!(second[0].reason, "Degraded");
    }

    #[test]
    fn the_transition_time_moves_when_the_status_flips() {
        let first = merge(&[], &[ready(false, Reason::NotYetReady)], 1, t(0));
        let second = merge(&first, &[ready(true, Reason::HabitatReady)], 1, t(5));
        assert_eq!(second[0].last_transition_time, to_time(t(5)));
    }

    #[test]
    fn conditions_are_written_in_a_fixed_order() {
        let desired = [
            ready(true, Reason::HabitatReady),
            Desired::new(ConditionType::KeyReady, true, Reason::NotRequired, "m"),
            Desired::new(
                ConditionType::ConfigMapReady,
                true,
                Reason::PeerSelected,
                "m",
            ),
        ];
        let types: Vec<String> = merge(&[], &desired, 1, t(0))
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(types, ["ConfigMapReady", "KeyReady", "Ready"]);
    }

    #[test]
    fn comparison_ignores_order() {
        let a = merge(
            &[],
            &[
                ready(true, Reason::HabitatReady),
                Desired::new(ConditionType::KeyReady, true, Reason::NotRequired, "m"),
            ],
            1,
            t(0),
        );
        let mut b = a.clone();
        b.reverse();
        assert!(same(&a, &b));
        b[0].message = "changed".into();
        assert!(!same(&a, &b));
    }
}
