//! Kubernetes Events about a Habitat: one per reconcile pass that changed the phase (naming the
//! path it took), per distinct failure, per
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
    /// The phases one reconcile pass walked, `path[0]` the one it started in: one Event with
    /// reason `Entered<last phase>` whose message names the whole path (`Pending → ConfigMapReady
    /// → KeyReady → Deploying: why`), instead of one Event per phase. None for fewer than two.
    pub fn passage(path: &[Phase], why: &str) -> Option<Self> {
        let last = path.last()?;
        if path.len() < 2 {
            return None;
        }
        let walked: Vec<String> = path.iter().map(Phase::to_string).collect();
        Some(Note {
            warning: false,
            reason: format!("Entered{last}"),
            message: format!("{}: {why}", walked.join(" → ")),
        })
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
    fn a_pass_is_one_event_naming_its_path_with_the_last_phase_in_a_greppable_reason() {
        let path = [
            Phase::Pending,
            Phase::ConfigMapReady,
            Phase::KeyReady,
            Phase::Deploying,
        ];
        let n = Note::passage(&path, "StatefulSet redis matches generation 1").expect("a passage");
        assert_eq!(n.reason, "EnteredDeploying");
        assert_eq!(
            n.message,
            "Pending → ConfigMapReady → KeyReady → Deploying: StatefulSet redis matches generation 1"
        );
        assert!(!n.warning);
        let n = Note::passage(&[Phase::Deploying, Phase::Ready], "1/1 replicas ready")
            .expect("a passage");
        assert_eq!(n.reason, "EnteredReady");
        assert_eq!(n.message, "Deploying → Ready: 1/1 replicas ready");
        assert_eq!(
            Note::passage(&[Phase::Ready], "x"),
            None,
            "no transition, no Event"
        );
        assert_eq!(Note::passage(&[], "x"), None);
    }
}
