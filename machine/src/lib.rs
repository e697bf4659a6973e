//! The lifecycle of a `Habitat` object: its phases, the events that move between them, and
//! [`decide`], the pure function that picks the next phase and the one step to take.
//!
//! The machine is declared with the [`sm`] crate, so a transition that is not declared below
//! does not compile. A declared one does:
//!
//! ```
//! use habitat_machine::lifecycle::*;
//! use sm::{Initializer, Machine as _, Transition};
//! let m = Machine::new(Pending).transition(CreatePeerConfig);
//! assert_eq!(m.state(), ConfigMapReady);
//! ```
//!
//! and an undeclared one is rejected by the compiler:
//!
//! ```compile_fail
//! use habitat_machine::lifecycle::*;
//! use sm::{Initializer, Transition};
//! // Ready never goes back to Pending: there is no such edge, so this does not build.
//! let _ = Machine::new(Ready).transition(CreatePeerConfig);
//! ```
//!
//! The machine is rebuilt from the persisted `.status.phase` on every reconcile ([`resume`]) and
//! thrown away afterwards: the operator keeps no state across reconciles or restarts. This crate
//! has no Kubernetes, I/O or clock dependency; everything it knows comes in through [`Facts`].
#![forbid(unsafe_code)]

mod decide;
mod phase;

#[cfg(test)]
use decide::phase_of;
pub use decide::{decide, Blocker, Decision, Facts, Step};
pub use phase::{Phase, UnknownPhase};

#[cfg(test)]
mod props;

/// The declared machine: its states, events, `Machine` and `Variant` types.
#[allow(missing_docs)]
pub mod lifecycle {
    use sm::sm;

    sm! {
        Lifecycle {
            // Any phase can be the starting point: the machine is resumed from `.status.phase`.
            InitialStates {
                Pending, ConfigMapReady, KeyReady, Deploying, LeaderElected, Ready, Updating, Terminating
            }

            // The peer ConfigMap exists with the right content.
            CreatePeerConfig {
                Pending => ConfigMapReady
            }

            // The ring key is resolved (or gossip is not encrypted).
            ResolveKey {
                ConfigMapReady => KeyReady
            }

            // The StatefulSet and Services are applied for the current spec.
            Deploy {
                KeyReady => Deploying
            }

            // Leader topology: the supervisors elected a leader and the operator published it.
            ElectLeader {
                Deploying => LeaderElected
            }

            // Every replica is ready (and, for leader topology, a leader is known).
            BecomeReady {
                Deploying, LeaderElected, Updating => Ready
            }

            // The spec of a Ready object changed.
            Update {
                Ready => Updating
            }

            // The object is being deleted.
            Terminate {
                Pending, ConfigMapReady, KeyReady, Deploying, LeaderElected, Ready, Updating => Terminating
            }
        }
    }

    pub use self::Lifecycle::*;
}

/// Every transition [`lifecycle`] declares, as (from, to) phases, for code that must name them
/// all (the metrics start a series at 0 for each). The machine's tests check that [`decide`]
/// takes no other edge and that every one of these is reached.
pub const TRANSITIONS: [(Phase, Phase); 15] = [
    (Phase::Pending, Phase::ConfigMapReady),
    (Phase::ConfigMapReady, Phase::KeyReady),
    (Phase::KeyReady, Phase::Deploying),
    (Phase::Deploying, Phase::LeaderElected),
    (Phase::Deploying, Phase::Ready),
    (Phase::LeaderElected, Phase::Ready),
    (Phase::Updating, Phase::Ready),
    (Phase::Ready, Phase::Updating),
    (Phase::Pending, Phase::Terminating),
    (Phase::ConfigMapReady, Phase::Terminating),
    (Phase::KeyReady, Phase::Terminating),
    (Phase::Deploying, Phase::Terminating),
    (Phase::LeaderElected, Phase::Terminating),
    (Phase::Ready, Phase::Terminating),
    (Phase::Updating, Phase::Terminating),
];

/// Whether `to` is `from` or can be reached from it along [`TRANSITIONS`].
///
/// A reconcile may walk several phases in one pass and persist only the last (SPEC section 3),
/// so two consecutive phases observed on an object are legal exactly when the second is
/// reachable from the first.
pub fn reachable(from: Phase, to: Phase) -> bool {
    let mut seen = vec![from];
    let mut next = 0;
    while let Some(&p) = seen.get(next) {
        if p == to {
            return true;
        }
        for (a, b) in TRANSITIONS {
            if a == p && !seen.contains(&b) {
                seen.push(b);
            }
        }
        next += 1;
    }
    false
}

/// Checks a phase history recorded from outside (a watch on `.status.phase`), starting from
/// [`Phase::Pending`], the phase of an object without status. Returns the first consecutive
/// pair whose second phase is not [`reachable`] from the first.
pub fn check_history(phases: &[Phase]) -> Result<(), (Phase, Phase)> {
    let mut at = Phase::Pending;
    for &p in phases {
        if !reachable(at, p) {
            return Err((at, p));
        }
        at = p;
    }
    Ok(())
}

/// The machine resumed in a persisted phase, ready to take one transition.
pub fn resume(phase: Phase) -> lifecycle::Variant {
    use lifecycle::*;
    use sm::{AsEnum, Initializer};
    match phase {
        Phase::Pending => Machine::new(Pending).as_enum(),
        Phase::ConfigMapReady => Machine::new(ConfigMapReady).as_enum(),
        Phase::KeyReady => Machine::new(KeyReady).as_enum(),
        Phase::Deploying => Machine::new(Deploying).as_enum(),
        Phase::LeaderElected => Machine::new(LeaderElected).as_enum(),
        Phase::Ready => Machine::new(Ready).as_enum(),
        Phase::Updating => Machine::new(Updating).as_enum(),
        Phase::Terminating => Machine::new(Terminating).as_enum(),
    }
}
