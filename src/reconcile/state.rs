//! What the operator remembers about each Habitat between reconciles, in one place, keyed by
//! the Habitat's uid.
//!
//! The reconciler is stateless in what it decides (every pass reads the caches anew); what it
//! keeps is bookkeeping that makes a pass cheaper or quieter: the backoff of a failing object,
//! the last failure told in an Event (a repeated one is not told again), the version a status
//! write replaced (a stale copy is recognised), when a converging Habitat's progress was first
//! deferred, which versions of its children were found current, and the departures sent for its
//! group and its control secret.
//!
//! Guarantees: every entry is keyed by uid, and [`PerHabitat::forget`] drops all of a uid's
//! entries at once. The Habitat watch calls it on the Delete event, and the pass that releases
//! the finalizer calls it too, so the state of a deleted Habitat does not outlive it (a test
//! creates and deletes 1,000 Habitats and finds the state back at its baseline).
//! Caveat: a Habitat deleted while this process was not watching (its Delete event missed
//! across a relist) is forgotten only by that pass, or kept until the process restarts; each
//! entry is small (under 200 bytes).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::reconcile::depart::Departures;
use crate::reconcile::memo::VerifiedChildren;
use crate::reconcile::requeue::Backoffs;
use crate::reconcile::status::ProgressClock;

/// The per-Habitat state of the reconciler, by uid.
#[derive(Default)]
pub struct PerHabitat {
    /// Exponential backoff of failing Habitats.
    pub backoffs: Backoffs,
    /// The last failure message told in an Event, so that a repeated failure records one Event.
    pub last_failure: Mutex<HashMap<String, String>>,
    /// The resourceVersion a status write of this process replaced: a reconcile handed that
    /// version again comes from a cache the write has not reached yet, and would walk the
    /// phases a second time (the same applies, a repeated Event).
    pub written_over: Mutex<HashMap<String, String>>,
    /// When a converging Habitat's pending progress was first seen: progress is written once it
    /// has waited `status::PROGRESS_INTERVAL`.
    pub progress: ProgressClock,
    /// The versions of each Habitat's children found current, for its generation and key.
    pub verified: VerifiedChildren,
    /// The control secret and the departures sent, of each group that elects.
    pub departures: Departures,
}

impl PerHabitat {
    /// Forgets everything about the Habitat `uid`.
    pub fn forget(&self, uid: &str) {
        self.backoffs.reset(uid);
        lock(&self.last_failure).remove(uid);
        lock(&self.written_over).remove(uid);
        self.progress.forget(uid);
        self.verified.forget(uid);
        self.departures.forget(uid);
    }

    /// How many entries are kept, over every kind of state.
    pub fn len(&self) -> usize {
        self.backoffs.len()
            + lock(&self.last_failure).len()
            + lock(&self.written_over).len()
            + self.progress.len()
            + self.verified.len()
            + self.departures.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::habitat;
    use crate::reconcile::ring::KeyState;
    use crate::reconcile::status::Worth;

    #[test]
    fn forgetting_a_uid_drops_every_kind_of_state_and_only_its_own() {
        let state = PerHabitat::default();
        let h = habitat();
        let uid = h.metadata.uid.clone().expect("a uid");
        for id in [uid.as_str(), "other"] {
            state.backoffs.next(id);
            lock(&state.last_failure).insert(id.into(), "failed".into());
            lock(&state.written_over).insert(id.into(), "7".into());
            state.progress.decided(
                id,
                Worth::Later(std::time::Duration::from_secs(1)),
                true,
                std::time::Instant::now(),
            );
        }
        state.verified.remember(
            &h,
            &KeyState::NotRequired,
            &[Some("1".into()), Some("2".into()), None, None],
        );
        assert_eq!(state.len(), 9);
        state.forget(&uid);
        assert_eq!(state.len(), 4, "the other Habitat's entries stay");
        state.forget("other");
        assert!(state.is_empty());
    }
}
