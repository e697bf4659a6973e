//! The status the operator wants a Habitat to show: phase, counts and conditions, computed
//! from the final snapshot of a reconcile. Pure; `persist` writes it only when it differs.

use chrono::{DateTime, Utc};
use habitat_machine::{Blocker, Facts, Phase};
use kube::ResourceExt;

use crate::api::{Habitat, HabitatStatus, Topology};
use crate::cluster::census::Election;
use crate::reconcile::conditions::{self, ConditionType as T, Desired, Reason as R};
use crate::reconcile::observe::{LeaderView, Snapshot};
use crate::reconcile::ring::KeyState;

/// How the reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The machine waits on this.
    Waiting(Blocker),
    /// The step limit was reached before the machine settled; it goes on at once.
    Busy,
    /// A step failed with this message.
    Failed(String),
    /// The namespace is being deleted and refused a new object; nothing more can be done until
    /// the Habitat is deleted with it. Not a failure.
    NamespaceTerminating,
}

/// Everything the status depends on.
pub struct Inputs<'a> {
    /// The Habitat as read.
    pub habitat: &'a Habitat,
    /// The phase reached.
    pub phase: Phase,
    /// The final snapshot.
    pub snapshot: &'a Snapshot,
    /// The final facts.
    pub facts: &'a Facts,
    /// How the reconcile ended.
    pub outcome: &'a Outcome,
    /// Whether the phase changed in this reconcile.
    pub phase_changed: bool,
    /// The clock.
    pub now: DateTime<Utc>,
}

/// The status to persist.
pub fn desired(i: &Inputs<'_>) -> HabitatStatus {
    let h = i.habitat;
    let previous = h.status.clone().unwrap_or_default();
    let generation = h.metadata.generation.unwrap_or(0);
    let sts_status = i
        .snapshot
        .statefulset
        .as_ref()
        .and_then(|s| s.status.as_ref());
    let replicas = sts_status.map(|s| s.replicas).unwrap_or(0);
    let ready_replicas = sts_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let leader = match &i.snapshot.leader {
        LeaderView::Observed { pod, .. } => pod.clone(),
        // The census could not be read: keep what was known rather than blanking the column.
        LeaderView::Unreachable(_) | LeaderView::NotObserved
            if h.spec.service.topology == Topology::Leader =>
        {
            previous.leader.clone()
        }
        _ => None,
    };
    let wanted = conditions_for(i, ready_replicas);
    HabitatStatus {
        phase: Some(i.phase.to_string()),
        observed_generation: Some(generation),
        conditions: conditions::merge(&previous.conditions, &wanted, generation, i.now),
        replicas,
        ready_replicas,
        ready: Some(format!("{ready_replicas}/{}", h.spec.count)),
        peer_ip: i.snapshot.current_peer().map(str::to_string),
        leader,
        ring_secret_name: i.snapshot.key.key().map(|k| k.full()),
        last_phase_transition_time: if i.phase_changed
            || previous.last_phase_transition_time.is_none()
        {
            Some(conditions::to_time(i.now))
        } else {
            previous.last_phase_transition_time
        },
    }
}

/// Whether two statuses say the same thing (conditions compared regardless of order).
pub fn same(a: &HabitatStatus, b: &HabitatStatus) -> bool {
    let strip = |s: &HabitatStatus| HabitatStatus {
        conditions: vec![],
        ..s.clone()
    };
    strip(a) == strip(b) && conditions::same(&a.conditions, &b.conditions)
}

/// Whether `new` is worth a status write over `old`, the status the object carries, when the
/// pass ended in `phase`. While the workload converges (Deploying, Updating, LeaderElected) the
/// pods' progress changes the observed pod count, the peer address and condition messages
/// several times; those ride along with the next change that matters: the phase, the observed
/// generation, the ready count, the ring key, the leader, a condition's status, or the reason of
/// a condition that is not True. So a standalone Habitat's way to Ready costs two writes (it
/// leaves Pending; it becomes Ready). In every other phase any difference is written.
pub fn worth_writing(new: &HabitatStatus, old: &HabitatStatus, phase: Phase) -> bool {
    if same(new, old) {
        return false;
    }
    let converging = matches!(
        phase,
        Phase::Deploying | Phase::Updating | Phase::LeaderElected
    );
    !converging || material(new) != material(old)
}

type Material<'a> = (
    Option<&'a str>,
    Option<i64>,
    i32,
    Option<&'a str>,
    Option<&'a str>,
    std::collections::BTreeSet<(&'a str, &'a str, &'a str)>,
);

fn material(s: &HabitatStatus) -> Material<'_> {
    let conditions = s
        .conditions
        .iter()
        .map(|c| {
            let reason = if c.status == "True" {
                ""
            } else {
                c.reason.as_str()
            };
            (c.type_.as_str(), c.status.as_str(), reason)
        })
        .collect();
    (
        s.phase.as_deref(),
        s.observed_generation,
        s.ready_replicas,
        s.ring_secret_name.as_deref(),
        s.leader.as_deref(),
        conditions,
    )
}

fn conditions_for(i: &Inputs<'_>, ready_replicas: i32) -> Vec<Desired> {
    let h = i.habitat;
    let s = i.snapshot;
    let f = i.facts;
    let count = h.spec.count;
    let name = h.name_any();
    let mut out = Vec::with_capacity(7);

    out.push(match (&s.peer_config, s.current_peer()) {
        (Some(_), Some(ip)) => Desired::new(
            T::ConfigMapReady,
            true,
            R::PeerSelected,
            format!("the peer file points to {ip}"),
        ),
        (Some(_), None) => Desired::new(
            T::ConfigMapReady,
            true,
            R::NoRunningPod,
            "no pod runs yet; the peer file is empty",
        ),
        (None, _) => Desired::new(
            T::ConfigMapReady,
            false,
            R::PeerConfigPending,
            format!("ConfigMap {}-peer is not created yet", name),
        ),
    });

    out.push(match &s.key {
        KeyState::NotRequired => Desired::new(T::KeyReady, true, R::NotRequired, "gossip is not encrypted"),
        KeyState::Ready(k) => Desired::new(T::KeyReady, true, R::KeyFound, format!("gossip is encrypted with the ring key in Secret {}", k.full())),
        KeyState::Missing { secret } => Desired::new(
            T::KeyReady,
            false,
            R::SecretNotFound,
            format!("Secret {secret} named in spec.service.ringSecretName does not exist; create it with the ring key file under the key ring-key"),
        ),
        KeyState::Malformed { problem, .. } => {
            let field = if h.spec.service.ring_secret_name.is_some() { "spec.service.ringSecretName" } else { "spec.service.ring" };
            Desired::new(T::KeyReady, false, R::KeyMalformed, format!("{problem} (the ring key of {field}); fix the Secret or name another one"))
        }
        KeyState::ToGenerate { ring } => Desired::new(T::KeyReady, false, R::SecretNotFound, format!("no key for ring {ring} yet; the operator generates one")),
    });

    out.push(match (&s.secret_problem, f.workload_current) {
        (Some(problem), _) => Desired::new(
            T::Deployed,
            false,
            R::ReferencedSecretMissing,
            problem.clone(),
        ),
        (None, true) => Desired::new(
            T::Deployed,
            true,
            R::UpToDate,
            format!(
                "StatefulSet {name} matches generation {}",
                h.metadata.generation.unwrap_or(0)
            ),
        ),
        (None, false) => Desired::new(
            T::Deployed,
            false,
            R::NotApplied,
            "the StatefulSet has not been applied for the current spec yet",
        ),
    });

    let available = ready_replicas == count && f.rollout_done;
    out.push(if available {
        Desired::new(
            T::Available,
            true,
            R::AllReplicasReady,
            format!("{ready_replicas}/{count} replicas ready"),
        )
    } else {
        Desired::new(
            T::Available,
            false,
            R::ReplicasNotReady,
            format!("{ready_replicas}/{count} replicas ready"),
        )
    });

    if h.spec.service.topology == Topology::Leader {
        out.push(leader_condition(h, &s.leader));
    }

    let progressing = matches!(
        i.phase,
        Phase::Deploying | Phase::Updating | Phase::LeaderElected
    );
    out.push(match i.phase {
        Phase::Terminating => Desired::new(
            T::Progressing,
            false,
            R::Terminating,
            "the Habitat is being deleted",
        ),
        _ if progressing => Desired::new(
            T::Progressing,
            true,
            R::RollingOut,
            format!(
                "rolling out generation {}",
                h.metadata.generation.unwrap_or(0)
            ),
        ),
        _ => Desired::new(T::Progressing, false, R::Settled, "no rollout in progress"),
    });

    out.push(ready_condition(i, &out, available));
    out
}

fn leader_condition(h: &Habitat, view: &LeaderView) -> Desired {
    let group = format!("{}.{}", h.spec.service.name, h.spec.service.group);
    let count = h.spec.count;
    let warning = if count < 3 {
        format!("; warning: a leader group needs at least 3 members to survive the loss of one (count is {count})")
    } else if count % 2 == 0 {
        format!(
            "; warning: an even count ({count}) tolerates no more failures than {}",
            count - 1
        )
    } else {
        String::new()
    };
    let (status, reason, message) = match view {
        LeaderView::Observed { pod: Some(pod), .. } => (true, R::Elected, format!("{pod} leads {group}")),
        LeaderView::Observed { election: Election::InProgress, .. } => {
            (false, R::ElectionInProgress, format!("the supervisors of {group} are electing a leader"))
        }
        LeaderView::Observed { election: Election::NoQuorum, .. } => (
            false,
            R::NoQuorum,
            format!("{group} has no quorum yet: a majority of its members must be alive to elect a leader"),
        ),
        LeaderView::Observed { election: Election::Elected { ip }, pod: None, .. } => {
            (false, R::NoElection, format!("the census names leader {ip}, which is no running pod of this Habitat"))
        }
        LeaderView::Observed { .. } => (false, R::NoElection, format!("no election has finished in {group}")),
        LeaderView::Unreachable(e) => (false, R::CensusUnreachable, format!("cannot read the census: {e}")),
        LeaderView::NotObserved => (false, R::CensusPending, "the census is read once pods run".to_string()),
    };
    Desired::new(
        T::LeaderElected,
        status,
        reason,
        format!("{message}{warning}"),
    )
}

fn ready_condition(i: &Inputs<'_>, others: &[Desired], available: bool) -> Desired {
    let first_false = others
        .iter()
        .find(|d| !d.status && d.type_ != T::Progressing);
    if let Some(problem) = &i.snapshot.spec_problem {
        return Desired::new(T::Ready, false, R::InvalidSpec, problem.clone());
    }
    match (i.phase, i.outcome) {
        (_, Outcome::Failed(msg)) => Desired::new(
            T::Ready,
            false,
            R::ReconcileFailed,
            format!("{msg}; retrying with backoff"),
        ),
        (Phase::Ready, _) if available && first_false.is_none() => Desired::new(
            T::Ready,
            true,
            R::HabitatReady,
            format!("all {} replicas ready", i.habitat.spec.count),
        ),
        (Phase::Ready, _) => Desired::new(
            T::Ready,
            false,
            R::Degraded,
            first_false
                .map(|d| d.message.clone())
                .unwrap_or_else(|| "replicas are not ready".to_string()),
        ),
        (Phase::Terminating, _) => Desired::new(
            T::Ready,
            false,
            R::Terminating,
            "the Habitat is being deleted",
        ),
        (phase, _) => {
            let why = first_false
                .map(|d| d.message.clone())
                .unwrap_or_else(|| "waiting for pods".to_string());
            let reason = first_false
                .map(|d| d.reason)
                .filter(|r| r.needs_user())
                .unwrap_or(R::NotYetReady);
            Desired::new(T::Ready, false, reason, format!("phase {phase}: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: conditions::to_time(Utc::now()),
            observed_generation: Some(1),
        }
    }

    fn deploying() -> HabitatStatus {
        HabitatStatus {
            phase: Some("Deploying".into()),
            observed_generation: Some(1),
            ready: Some("0/1".into()),
            conditions: vec![
                condition("ConfigMapReady", "True", "NoRunningPod", "no pod runs yet"),
                condition(
                    "Available",
                    "False",
                    "ReplicasNotReady",
                    "0/1 replicas ready",
                ),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn while_deploying_only_material_changes_are_written() {
        let old = deploying();
        assert!(!worth_writing(&old, &old, Phase::Deploying));
        // The pod was created and got an address; the peer file names it: not worth a write.
        let mut new = old.clone();
        new.replicas = 1;
        new.peer_ip = Some("10.0.0.1".into());
        new.conditions[0] = condition(
            "ConfigMapReady",
            "True",
            "PeerSelected",
            "the peer file points to 10.0.0.1",
        );
        assert!(!worth_writing(&new, &old, Phase::Deploying));
        // The same difference in a settled phase is written.
        let mut settled_old = old.clone();
        settled_old.phase = Some("Ready".into());
        let mut settled_new = new.clone();
        settled_new.phase = Some("Ready".into());
        assert!(worth_writing(&settled_new, &settled_old, Phase::Ready));
        // A pod became ready (leader groups count up), a condition flipped, or a failing
        // condition's reason changed: written.
        let mut ready = new.clone();
        ready.ready_replicas = 1;
        assert!(worth_writing(&ready, &old, Phase::Deploying));
        let mut flipped = new.clone();
        flipped.conditions[1] = condition("Available", "True", "AllReplicasReady", "1/1");
        assert!(worth_writing(&flipped, &old, Phase::Deploying));
        let mut failing = new.clone();
        failing.conditions[1] = condition(
            "Available",
            "False",
            "ReferencedSecretMissing",
            "Secret x is gone",
        );
        assert!(worth_writing(&failing, &old, Phase::Deploying));
        // Leaving the phase is always written.
        let mut next = new;
        next.phase = Some("Ready".into());
        assert!(worth_writing(&next, &old, Phase::Ready));
    }
}
