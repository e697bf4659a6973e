//! Kubernetes Events about a Habitat: one per reconcile pass that changed the phase (naming the
//! path it took), per distinct failure, per
//! condition that asks the user to act, and per action worth telling (key generated, pod
//! replaced, leader changed). Publishing is best effort: a lost Event never fails a reconcile.
//!
//! Reconciles never wait for an Event: they hand it to an [`EventSink`], whose background task
//! records it (client-go's `EventBroadcaster` works the same way). A reconcile worker's time goes
//! to the writes that move a Habitat forward, not to Events about it.

use std::sync::Arc;

use habitat_machine::Phase;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;
use tokio::sync::{mpsc, Semaphore};

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

/// Hands Events to a background task that records them, so that a reconcile never waits for
/// them. The queue is bounded: when it is full (the API server is far behind), further Events are
/// dropped and logged, as client-go's broadcaster drops them. One pass's Events are recorded in
/// order; up to [`EventSink::CONCURRENCY`] passes' Events are in flight at once.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<(ObjectReference, Vec<Note>)>,
}

impl EventSink {
    /// Events queued at most before new ones are dropped.
    pub const CAPACITY: usize = 4096;
    /// Passes whose Events are recorded at once.
    pub const CONCURRENCY: usize = 4;

    /// Starts the task that records Events with `recorder`; it ends when every sink is dropped,
    /// once the queue is drained. Must be called within a Tokio runtime.
    pub fn spawn(recorder: Recorder) -> Self {
        let (queue, mut rx) = mpsc::channel::<(ObjectReference, Vec<Note>)>(Self::CAPACITY);
        tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(Self::CONCURRENCY));
            while let Some((reference, notes)) = rx.recv().await {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    break;
                };
                let recorder = recorder.clone();
                tokio::spawn(async move {
                    publish(&recorder, &reference, &notes).await;
                    drop(slot);
                });
            }
        });
        EventSink { queue }
    }

    /// Queues `notes` about `h`; returns at once.
    pub fn send(&self, h: &Habitat, notes: Vec<Note>) {
        if notes.is_empty() {
            return;
        }
        if let Err(e) = self.queue.try_send((h.object_ref(&()), notes)) {
            let (reason, dropped) = match e {
                mpsc::error::TrySendError::Full((_, n)) => ("the Event queue is full", n),
                mpsc::error::TrySendError::Closed((_, n)) => ("the Event task has stopped", n),
            };
            tracing::warn!(
                name = %h.metadata.name.as_deref().unwrap_or_default(),
                events = dropped.len(),
                "Events dropped: {reason}"
            );
        }
    }
}

/// Records `notes` about the object `reference`, in order.
pub async fn publish(recorder: &Recorder, reference: &ObjectReference, notes: &[Note]) {
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
        match recorder.publish(&event, reference).await {
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
