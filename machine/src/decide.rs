//! [`decide`]: from the persisted phase and what the operator observed, the next phase and the
//! one step to take. Pure and total: every (phase, facts) pair has an answer.

use crate::lifecycle::{self as Lifecycle, Variant::*, *};
use crate::Phase;
use sm::{AsEnum, Initializer, Transition};

/// What the operator observed, reduced to what the lifecycle depends on.
///
/// Every field is a plain fact; the operator computes them from its caches (and, for the
/// leader, from the supervisors' census) before asking [`decide`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The object has a deletionTimestamp.
    pub deleting: bool,
    /// The spec cannot be acted on (a rule the API server could not check failed).
    pub spec_invalid: bool,
    /// The peer ConfigMap exists with the content it should have now.
    pub peer_config_current: bool,
    /// The ring key is resolved: the referenced Secret is present and well-formed, the ring's
    /// Secret exists, or gossip is not encrypted.
    pub key_ready: bool,
    /// The key is missing but the operator may create it (`spec.service.ring.name`).
    pub key_can_be_generated: bool,
    /// Every Secret the spec references (user.toml, files) exists.
    pub referenced_secrets_present: bool,
    /// The StatefulSet and Services exist and match the current spec.
    pub workload_current: bool,
    /// `metadata.generation` is above the status' `observedGeneration`.
    pub spec_changed: bool,
    /// The StatefulSet has rolled out the current template and every replica is ready.
    pub rollout_done: bool,
    /// The operator replaces pods itself (leader topology) and one is due: an outdated pod exists
    /// and no pod is currently starting.
    pub pod_replacement_due: bool,
    /// The service runs in the leader topology.
    pub leader_topology: bool,
    /// The census was read during this reconcile.
    pub leader_observed: bool,
    /// The census names a leader that finished its election and is alive.
    pub leader_known: bool,
    /// The leader's pod label, the other pods' labels and `status.leader` match the census.
    pub leader_published: bool,
}

/// Why an object cannot progress right now. The operator turns it into a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Blocker {
    /// Nothing blocks: the object is settled in its phase.
    Nothing,
    /// The spec is invalid; waiting for the user to change it.
    InvalidSpec,
    /// The ring key Secret is missing or malformed and cannot be generated.
    RingKeyMissing,
    /// A Secret named in the spec is missing.
    SecretMissing,
    /// Pods are starting or being replaced.
    Rollout,
    /// The supervisors have not elected a leader.
    Election,
}

/// One idempotent action for the operator to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// No action: the phase changed; decide again from the new phase.
    Advance,
    /// Create or update the peer ConfigMap.
    ApplyPeerConfig,
    /// Find the ring's Secret, or generate it.
    ResolveRingKey,
    /// Apply the StatefulSet, the Services and (leader topology) the PodDisruptionBudget.
    ApplyWorkload,
    /// Delete the next outdated pod, followers before the leader.
    ReplacePod,
    /// Read the census from the supervisors.
    ObserveLeader,
    /// Label the leader's pod, unlabel the others.
    PublishLeader,
    /// Record termination and release the finalizer.
    Cleanup,
    /// Nothing to do until something changes.
    Wait(Blocker),
}

/// The answer of [`decide`]: the phase the object is in after this decision, and what to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The phase to persist. Differs from the input phase exactly when `step` is
    /// [`Step::Advance`] or [`Step::Cleanup`] taken from a live phase.
    pub phase: Phase,
    /// The one step to take now.
    pub step: Step,
}

impl Decision {
    fn stay(phase: Phase, step: Step) -> Self {
        Decision { phase, step }
    }

    fn advance(phase: Phase) -> Self {
        Decision {
            phase,
            step: Step::Advance,
        }
    }
}

/// The phase a machine variant stands in.
pub(crate) fn phase_of(variant: Lifecycle::Variant) -> Phase {
    match variant {
        InitialPending(_) => Phase::Pending,
        InitialConfigMapReady(_) | ConfigMapReadyByCreatePeerConfig(_) => Phase::ConfigMapReady,
        InitialKeyReady(_) | KeyReadyByResolveKey(_) => Phase::KeyReady,
        InitialDeploying(_) | DeployingByDeploy(_) => Phase::Deploying,
        InitialLeaderElected(_) | LeaderElectedByElectLeader(_) => Phase::LeaderElected,
        InitialReady(_) | ReadyByBecomeReady(_) => Phase::Ready,
        InitialUpdating(_) | UpdatingByUpdate(_) => Phase::Updating,
        InitialTerminating(_) | TerminatingByTerminate(_) => Phase::Terminating,
    }
}

/// Fires `event` on a machine resumed in `from`; only declared edges compile.
fn fire<S, E>(from: S, event: E) -> Phase
where
    S: sm::InitialState,
    E: sm::Event,
    Lifecycle::Machine<S, sm::NoneEvent>: Transition<E>,
    Lifecycle::Machine<S, sm::NoneEvent>:
        Initializer<S, Machine = Lifecycle::Machine<S, sm::NoneEvent>>,
    <Lifecycle::Machine<S, sm::NoneEvent> as Transition<E>>::Machine:
        AsEnum<Enum = Lifecycle::Variant>,
{
    phase_of(
        <Lifecycle::Machine<S, sm::NoneEvent> as Initializer<S>>::new(from)
            .transition(event)
            .as_enum(),
    )
}

/// Decides the next phase and step from the persisted `phase` and the observed `facts`.
///
/// Call it in a loop: perform the returned step, update the facts with its result, and decide
/// again, until the step is [`Step::Wait`]. A transition (`phase` changed) always comes with
/// [`Step::Advance`], so every transition is recorded before the next step runs.
pub fn decide(phase: Phase, f: &Facts) -> Decision {
    if f.deleting {
        return match phase {
            Phase::Terminating => Decision::stay(phase, Step::Cleanup),
            live => Decision {
                phase: terminate(live),
                step: Step::Cleanup,
            },
        };
    }
    if f.spec_invalid {
        return Decision::stay(phase, Step::Wait(Blocker::InvalidSpec));
    }
    match phase {
        Phase::Pending if f.peer_config_current => {
            Decision::advance(fire(Pending, CreatePeerConfig))
        }
        Phase::Pending => Decision::stay(phase, Step::ApplyPeerConfig),
        Phase::ConfigMapReady if f.key_ready => Decision::advance(fire(ConfigMapReady, ResolveKey)),
        Phase::ConfigMapReady if f.key_can_be_generated => {
            Decision::stay(phase, Step::ResolveRingKey)
        }
        Phase::ConfigMapReady => Decision::stay(phase, Step::Wait(Blocker::RingKeyMissing)),
        Phase::KeyReady => match workload_step(f) {
            Some(step) => Decision::stay(phase, step),
            None => Decision::advance(fire(KeyReady, Deploy)),
        },
        Phase::Deploying => {
            if let Some(step) = maintenance_step(f) {
                return Decision::stay(phase, step);
            }
            if f.leader_topology {
                match leader_step(f) {
                    Some(step) => Decision::stay(phase, step),
                    None => Decision::advance(fire(Deploying, ElectLeader)),
                }
            } else if f.rollout_done {
                Decision::advance(fire(Deploying, BecomeReady))
            } else {
                Decision::stay(phase, Step::Wait(Blocker::Rollout))
            }
        }
        Phase::LeaderElected => match maintenance_step(f).or_else(|| leader_step(f)) {
            Some(step) => Decision::stay(phase, step),
            None if f.rollout_done => Decision::advance(fire(LeaderElected, BecomeReady)),
            None => Decision::stay(phase, Step::Wait(Blocker::Rollout)),
        },
        Phase::Ready if f.spec_changed => Decision::advance(fire(Ready, Update)),
        Phase::Ready => {
            let step = maintenance_step(f)
                .or_else(|| f.leader_topology.then(|| leader_step(f)).flatten())
                .unwrap_or(Step::Wait(Blocker::Nothing));
            Decision::stay(phase, step)
        }
        Phase::Updating => {
            if let Some(step) = maintenance_step(f) {
                return Decision::stay(phase, step);
            }
            if !f.rollout_done {
                return Decision::stay(phase, Step::Wait(Blocker::Rollout));
            }
            match f.leader_topology.then(|| leader_step(f)).flatten() {
                Some(step) => Decision::stay(phase, step),
                None => Decision::advance(fire(Updating, BecomeReady)),
            }
        }
        // Terminating is left only by the object disappearing; without a deletion timestamp
        // (cannot happen in Kubernetes) there is nothing to do.
        Phase::Terminating => Decision::stay(phase, Step::Wait(Blocker::Nothing)),
    }
}

/// The step that creates or repairs the workload, if one is needed.
fn workload_step(f: &Facts) -> Option<Step> {
    if !f.referenced_secrets_present {
        Some(Step::Wait(Blocker::SecretMissing))
    } else if !f.workload_current {
        Some(Step::ApplyWorkload)
    } else {
        None
    }
}

/// Keeps every child in shape once the workload exists: the peer file follows the running pods,
/// the key and the workload are repaired, outdated pods are replaced.
fn maintenance_step(f: &Facts) -> Option<Step> {
    if !f.peer_config_current {
        Some(Step::ApplyPeerConfig)
    } else if !f.key_ready {
        Some(if f.key_can_be_generated {
            Step::ResolveRingKey
        } else {
            Step::Wait(Blocker::RingKeyMissing)
        })
    } else if let Some(step) = workload_step(f) {
        Some(step)
    } else if f.pod_replacement_due {
        // A leader group replaces a member only once the census shows the others alive.
        Some(if f.leader_topology && !f.leader_observed {
            Step::ObserveLeader
        } else {
            Step::ReplacePod
        })
    } else {
        None
    }
}

/// What the leader topology still needs, if anything.
fn leader_step(f: &Facts) -> Option<Step> {
    if !f.leader_observed {
        Some(Step::ObserveLeader)
    } else if !f.leader_known {
        Some(Step::Wait(Blocker::Election))
    } else if !f.leader_published {
        Some(Step::PublishLeader)
    } else {
        None
    }
}

fn terminate(live: Phase) -> Phase {
    match live {
        Phase::Pending => fire(Pending, Terminate),
        Phase::ConfigMapReady => fire(ConfigMapReady, Terminate),
        Phase::KeyReady => fire(KeyReady, Terminate),
        Phase::Deploying => fire(Deploying, Terminate),
        Phase::LeaderElected => fire(LeaderElected, Terminate),
        Phase::Ready => fire(Ready, Terminate),
        Phase::Updating => fire(Updating, Terminate),
        Phase::Terminating => Phase::Terminating,
    }
}

#[cfg(test)]
mod tests;
