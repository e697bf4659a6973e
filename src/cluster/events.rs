//! Kubernetes Events about a Habitat: one per phase transition, per distinct failure, per
//! condition that asks the user to act, and per action worth telling (key generated, pod
//! replaced, leader changed). Publishing is best effort: a lost Event never fails a reconcile.

use habitat_machine::Phase;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;

use crate::api::Habitat;
use crate::error::truncate;

/// An Event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Warning or Normal.
    pub warning: bool,
    /// PascalCase reason, greppable.
    pub reason: String,
    /// What happened, for humans (at most 1 KiB).
    pub message: String,
}

impl Note {
    /// A phase transition: reason `Entered<Phase>`.
    pub fn transition(from: Phase, to: Phase, why: &str) -> Self {
        Note {
            warning: false,
            reason: format!("Entered{to}"),
            message: format!("phase {from} -> {to}: {why}"),
        }
    }

    /// A Normal event.
    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        Note {
            warning: false,
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        Note {
            warning: true,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Publishes `notes` about `h`.
pub async fn publish(recorder: &Recorder, h: &Habitat, notes: &[Note]) {
    let reference = h.object_ref(&());
    for n in notes {
        let event = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.clone(),
            note: Some(truncate(n.message.clone(), 1024)),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        match recorder.publish(&event, &reference).await {
            Ok(()) => {}
            // A namespace being deleted refuses new Events; the Habitat goes away with it.
            Err(e) if crate::error::is_namespace_terminating(&e) => {
                tracing::debug!(error = %e, reason = %n.reason, "Event not recorded: the namespace is being deleted");
            }
            Err(e) => tracing::warn!(error = %e, reason = %n.reason, "cannot record an Event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_events_name_both_phases_in_a_greppable_reason() {
        let n = Note::transition(Phase::Deploying, Phase::Ready, "3/3 replicas ready");
        assert_eq!(n.reason, "EnteredReady");
        assert_eq!(n.message, "phase Deploying -> Ready: 3/3 replicas ready");
        assert!(!n.warning);
    }
}
