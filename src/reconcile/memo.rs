//! The fingerprints of each Habitat's desired workload, remembered across reconciles.
//!
//! Most reconciles of a settled Habitat find every child current: all they need of the desired
//! workload is its fingerprints, to compare with the annotations of the cached children. The
//! workload is a pure function of the Habitat's spec, name, namespace and uid and of the resolved
//! ring key ([`children::workload`](crate::children::workload)); the spec changes only with
//! `metadata.generation`, and the others never change for one uid. So the fingerprints computed
//! for (uid, generation, key) hold until one of those changes, and a settled reconcile compares
//! without building the StatefulSet, the Services and the budget (about 12 µs for a leader group,
//! most of its decide path). The workload itself is built only when it is applied.
//!
//! Entries are a few short strings each (about 200 bytes); the whole workload is not kept, which
//! would cost about 10 MiB at N = 1000.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::Habitat;
use crate::children::Fingerprints;
use crate::reconcile::ring::KeyState;

/// What one entry was computed for.
#[derive(Debug)]
struct Inputs {
    generation: i64,
    key: KeyState,
}

/// Fingerprints of desired workloads, by Habitat uid.
#[derive(Debug, Default)]
pub struct FingerprintMemo {
    entries: Mutex<HashMap<String, (Inputs, Fingerprints)>>,
}

impl FingerprintMemo {
    /// The fingerprints remembered for `h` with `key`, if they were computed for its current
    /// generation and that key. Nothing without a uid or a generation (an object not read from an
    /// API server).
    pub fn get(&self, h: &Habitat, key: &KeyState) -> Option<Fingerprints> {
        // Every reconcile asks: nothing is copied but the answer.
        let uid = h.metadata.uid.as_deref()?;
        let generation = h.metadata.generation?;
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(uid) {
            Some((at, f)) if at.generation == generation && at.key == *key => Some(f.clone()),
            _ => None,
        }
    }

    /// Remembers `fingerprints` as those of `h`'s workload with `key`.
    pub fn remember(&self, h: &Habitat, key: &KeyState, fingerprints: &Fingerprints) {
        if let Some((uid, inputs)) = inputs(h, key) {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid, (inputs, fingerprints.clone()));
        }
    }

    /// Forgets the Habitat `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }

    /// How many Habitats are remembered.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn inputs(h: &Habitat, key: &KeyState) -> Option<(String, Inputs)> {
    Some((
        h.uid()?,
        Inputs {
            generation: h.metadata.generation?,
            key: key.clone(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::habitat;
    use crate::api::key_name::KeyName;
    use crate::children::workload;

    fn fingerprints(h: &Habitat) -> Fingerprints {
        workload(h, None).fingerprints
    }

    #[test]
    fn remembered_fingerprints_hold_for_one_generation_and_key() {
        let memo = FingerprintMemo::default();
        let mut h = habitat();
        assert_eq!(memo.get(&h, &KeyState::NotRequired), None);
        memo.remember(&h, &KeyState::NotRequired, &fingerprints(&h));
        assert_eq!(memo.get(&h, &KeyState::NotRequired), Some(fingerprints(&h)));
        let key = KeyState::Ready(KeyName::parse("prod-20261130101500").expect("a key name"));
        assert_eq!(memo.get(&h, &key), None, "another ring key");
        h.spec.count += 1;
        h.metadata.generation = h.metadata.generation.map(|g| g + 1);
        assert_eq!(
            memo.get(&h, &KeyState::NotRequired),
            None,
            "the spec changed"
        );
        memo.forget(&h.uid().expect("a uid"));
        assert!(memo.is_empty());
    }

    #[test]
    fn nothing_is_remembered_without_a_generation() {
        let memo = FingerprintMemo::default();
        let mut h = habitat();
        h.metadata.generation = None;
        memo.remember(&h, &KeyState::NotRequired, &fingerprints(&h));
        assert!(memo.is_empty());
    }
}
