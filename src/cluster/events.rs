//! Kubernetes Events about a Habitat: one per reconcile pass that changed the phase (naming the
//! path it took), per distinct failure, per
//! condition that asks the user to act, and per action worth telling (key generated, pod
//! replaced, leader changed). Publishing is best effort: a lost Event never fails a reconcile.
//!
//! Reconciles never wait for an Event: they hand it to an [`EventSink`], whose background task
//! records it (client-go's `EventBroadcaster` works the same way). A reconcile worker's time goes
//! to the writes that move a Habitat forward, not to Events about it.
//!
//! The [`Recorder`] writes `events.k8s.io/v1` Events as kube's `Recorder` does, and counts an
//! Event that repeats within [`SERIES_TTL`] in its `series` instead of writing it again. It
//! replaces kube's, whose every publish walks every Event it published in the last six minutes
//! (to expire them) and keeps each whole: at N = 1000 Habitats that was 2,600 Events walked per
//! Event, a cost per Habitat that grew with the number of Habitats, and several MiB of heap.
//! Here a repeat is remembered by a hash of its key with the Event's name and count, and expiry
//! takes the oldest entries off a queue.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use habitat_machine::Phase;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
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
        match recorder.publish(n, reference).await {
            Ok(()) => {}
            // A namespace being deleted refuses new Events; the Habitat goes away with it.
            Err(e) if crate::error::is_namespace_terminating(&e) => {
                tracing::debug!(error = %e, reason = %n.reason, "Event not recorded: the namespace is being deleted");
            }
            Err(e) => tracing::warn!(error = %e, reason = %n.reason, "cannot record an Event"),
        }
    }
}

/// How long an Event is remembered to count its repeats (client-go's and kube's six minutes).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Writes Events about objects, as `reporter`. Cheap to clone: clones share what they remember.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Arc<Mutex<Series>>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            series: Default::default(),
        }
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `note` about `regarding`: a new Event, or, when the same note about the same
    /// object was recorded within [`SERIES_TTL`], one more in that Event's series.
    pub async fn publish(
        &self,
        note: &Note,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let key = series_key(note, regarding);
        let now = k8s_openapi::jiff::Timestamp::now();
        let repeat = self.series().repeat(key, Instant::now());
        if let Some((name, count)) = repeat {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Gone from the server (Events expire there too): record it anew.
                Err(e) if crate::error::is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.event(note, regarding, now);
        let created = api.create(&PostParams::default(), &event).await?;
        if let Some(name) = created.metadata.name {
            self.series().first(key, name, Instant::now());
        }
        Ok(())
    }

    fn event(
        &self,
        note: &Note,
        regarding: &ObjectReference,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Event {
        let controller = &self.reporter.controller;
        Event {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            action: Some("Reconcile".into()),
            reason: Some(note.reason.clone()),
            note: Some(truncate(note.message.clone(), 1024)),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.into()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            ..Default::default()
        }
    }
}

/// What makes two Events the same: the object (by uid, not by resourceVersion: the object
/// changes between two reconciles), the type, reason and message.
fn series_key(note: &Note, regarding: &ObjectReference) -> u64 {
    let mut h = DefaultHasher::new();
    (
        regarding.uid.as_deref(),
        regarding.namespace.as_deref(),
        regarding.name.as_deref(),
        regarding.kind.as_deref(),
        note.warning,
        &note.reason,
        &note.message,
    )
        .hash(&mut h);
    h.finish()
}

/// The Events recorded within [`SERIES_TTL`], by key: each one's name and count.
#[derive(Debug, Default)]
struct Series {
    recorded: HashMap<u64, Recorded>,
    /// When each key was last recorded, oldest first (a key recorded again is queued again).
    expiry: VecDeque<(Instant, u64)>,
}

#[derive(Debug)]
struct Recorded {
    name: String,
    count: i32,
    last: Instant,
}

impl Series {
    /// Counts a repeat of `key` at `now`: the Event's name and its new count, or `None` when
    /// `key` was not recorded within the TTL.
    fn repeat(&mut self, key: u64, now: Instant) -> Option<(String, i32)> {
        self.expire(now);
        let r = self.recorded.get_mut(&key)?;
        r.count += 1;
        r.last = now;
        self.expiry.push_back((now, key));
        Some((r.name.clone(), r.count))
    }

    /// Remembers that `key` was recorded as Event `name` at `now`.
    fn first(&mut self, key: u64, name: String, now: Instant) {
        self.expire(now);
        self.recorded.insert(
            key,
            Recorded {
                name,
                count: 1,
                last: now,
            },
        );
        self.expiry.push_back((now, key));
    }

    /// Forgets the keys not recorded within the TTL: only the queue's expired head is looked at.
    fn expire(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.expiry.front() {
            if now.saturating_duration_since(at) < SERIES_TTL {
                break;
            }
            self.expiry.pop_front();
            if self.recorded.get(&key).is_some_and(|r| r.last <= at) {
                self.recorded.remove(&key);
            }
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

    #[test]
    fn a_repeat_within_the_ttl_counts_in_the_series_and_expiry_forgets_only_the_old() {
        let mut s = Series::default();
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        assert_eq!(s.repeat(1, t0), None, "never recorded");
        s.first(1, "redis.1".into(), t0);
        s.first(2, "nginx.2".into(), t0 + minute);
        assert_eq!(s.repeat(1, t0 + 2 * minute), Some(("redis.1".into(), 2)));
        assert_eq!(s.repeat(1, t0 + 3 * minute), Some(("redis.1".into(), 3)));
        // Seven minutes after key 2 was recorded it is forgotten; key 1, repeated since, is not.
        assert_eq!(s.repeat(2, t0 + 8 * minute), None);
        assert_eq!(s.repeat(1, t0 + 8 * minute), Some(("redis.1".into(), 4)));
        assert_eq!(
            s.repeat(1, t0 + 15 * minute),
            None,
            "not repeated for 7 minutes"
        );
        assert!(s.recorded.is_empty());
        assert!(s.expiry.len() <= 1, "the queue is drained as it expires");
    }

    #[test]
    fn the_same_note_about_the_same_object_is_one_key_whatever_its_version() {
        let note = Note::warning("ApplyFailed", "StatefulSet redis: forbidden");
        let at = |rv: &str, uid: &str| ObjectReference {
            kind: Some("Habitat".into()),
            namespace: Some("ns".into()),
            name: Some("redis".into()),
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        };
        assert_eq!(
            series_key(&note, &at("1", "u")),
            series_key(&note, &at("2", "u"))
        );
        assert_ne!(
            series_key(&note, &at("1", "u")),
            series_key(&note, &at("1", "v"))
        );
        let other = Note::warning("ApplyFailed", "StatefulSet redis: conflict");
        assert_ne!(
            series_key(&note, &at("1", "u")),
            series_key(&other, &at("1", "u"))
        );
    }
}
