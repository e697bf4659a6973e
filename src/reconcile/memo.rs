//! The children found current for each Habitat's desired workload, remembered across
//! reconciles.
//!
//! Most reconciles of a settled Habitat find every child current. Knowing it takes the desired
//! workload (the StatefulSet, the Services, the budget: built from the spec) and a comparison of
//! each with its live child ([`drift`](crate::reconcile::drift)). Both are pure functions of the
//! Habitat's spec, name, namespace and uid, of the resolved ring key and of the live children;
//! the spec changes only with `metadata.generation`, and a live child only with its
//! resourceVersion. So a verdict "current" for (uid, generation, key) and the children's
//! resourceVersions holds until one of those changes, and a settled reconcile is decided without
//! building the workload or comparing it. Any write to a child (a user's `kubectl scale`, a
//! controller's status update) gives it a new resourceVersion, and the next reconcile compares it
//! again.
//!
//! The peer ConfigMap is remembered the same way, apart: it depends on the peer addresses (the
//! running pods) rather than on the ring key, and changes more often than the workload. A verdict
//! "current" for (uid, generation, addresses) at the ConfigMap's resourceVersion saves building
//! and comparing it on every decision (about half the cost of a settled leader group's decision
//! when it was compared every time).
//!
//! Entries are a few short strings each (about 200 bytes); the workload itself is not kept, which
//! would cost about 10 MiB at N = 1000. An entry is forgotten when its Habitat is deleted.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::Habitat;
use crate::reconcile::ring::KeyState;

/// The resourceVersions of a Habitat's children (StatefulSet, headless Service, leader Service,
/// budget), as [`LiveWorkload::versions`](crate::reconcile::drift::LiveWorkload::versions)
/// reads them.
pub type Versions = [Option<String>; 4];

/// What one entry was computed for.
#[derive(Debug)]
struct Inputs {
    generation: i64,
    key: KeyState,
}

/// The peer ConfigMap found current: its resourceVersion and the addresses it carries.
#[derive(Debug, PartialEq)]
struct PeerEntry {
    generation: i64,
    version: String,
    addresses: Vec<String>,
}

/// The children's versions found current, by Habitat uid.
#[derive(Debug, Default)]
pub struct VerifiedChildren {
    entries: Mutex<HashMap<String, (Inputs, Versions)>>,
    peer_configs: Mutex<HashMap<String, PeerEntry>>,
}

impl VerifiedChildren {
    /// Whether the children at `versions` were found current for `h`'s generation and `key`.
    /// Never without a uid or a generation (an object not read from an API server), nor for
    /// children without versions (not read from an API server either).
    pub fn is_current(&self, h: &Habitat, key: &KeyState, versions: &Versions) -> bool {
        let (Some(uid), Some(generation)) = (h.metadata.uid.as_deref(), h.metadata.generation)
        else {
            return false;
        };
        if versions[0].is_none() || versions[1].is_none() {
            return false;
        }
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(uid)
            .is_some_and(|(at, v)| at.generation == generation && at.key == *key && v == versions)
    }

    /// Remembers that the children at `versions` are current for `h` with `key`.
    pub fn remember(&self, h: &Habitat, key: &KeyState, versions: &Versions) {
        if let Some((uid, inputs)) = inputs(h, key) {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid, (inputs, versions.clone()));
        }
    }

    /// Whether the peer ConfigMap at `version` was found to carry `addresses` for `h`'s
    /// generation.
    pub fn is_peer_config_current(&self, h: &Habitat, addresses: &[String], version: &str) -> bool {
        let (Some(uid), Some(generation)) = (h.metadata.uid.as_deref(), h.metadata.generation)
        else {
            return false;
        };
        let entries = self.peer_configs.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(uid).is_some_and(|e| {
            e.generation == generation && e.version == version && e.addresses == addresses
        })
    }

    /// Remembers that the peer ConfigMap at `version` carries `addresses` for `h`.
    pub fn remember_peer_config(&self, h: &Habitat, addresses: &[String], version: &str) {
        let (Some(uid), Some(generation)) = (h.uid(), h.metadata.generation) else {
            return;
        };
        self.peer_configs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                uid,
                PeerEntry {
                    generation,
                    version: version.to_string(),
                    addresses: addresses.to_vec(),
                },
            );
    }

    /// Forgets the Habitat `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        self.peer_configs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
    }

    /// How many entries are kept (a Habitat has up to two).
    pub fn len(&self) -> usize {
        let workloads = self.entries.lock().unwrap_or_else(|p| p.into_inner()).len();
        workloads
            + self
                .peer_configs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len()
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

    fn versions(sts: &str) -> Versions {
        [Some(sts.into()), Some("2".into()), None, None]
    }

    #[test]
    fn a_verdict_holds_for_one_generation_key_and_set_of_versions() {
        let memo = VerifiedChildren::default();
        let mut h = habitat();
        let none = KeyState::NotRequired;
        assert!(!memo.is_current(&h, &none, &versions("1")));
        memo.remember(&h, &none, &versions("1"));
        assert!(memo.is_current(&h, &none, &versions("1")));
        assert!(
            !memo.is_current(&h, &none, &versions("3")),
            "the StatefulSet changed"
        );
        let key = KeyState::Ready(KeyName::parse("prod-20261130101500").expect("a key name"));
        assert!(
            !memo.is_current(&h, &key, &versions("1")),
            "another ring key"
        );
        h.spec.count += 1;
        h.metadata.generation = h.metadata.generation.map(|g| g + 1);
        assert!(
            !memo.is_current(&h, &none, &versions("1")),
            "the spec changed"
        );
        memo.forget(&h.uid().expect("a uid"));
        assert!(memo.is_empty());
    }

    #[test]
    fn a_peer_config_verdict_holds_for_one_generation_version_and_set_of_addresses() {
        let memo = VerifiedChildren::default();
        let mut h = habitat();
        let one = vec!["10.0.0.5".to_string()];
        assert!(!memo.is_peer_config_current(&h, &one, "7"));
        memo.remember_peer_config(&h, &one, "7");
        assert!(memo.is_peer_config_current(&h, &one, "7"));
        assert!(
            !memo.is_peer_config_current(&h, &one, "8"),
            "the ConfigMap changed"
        );
        assert!(
            !memo.is_peer_config_current(&h, &["10.0.0.6".to_string()], "7"),
            "another peer"
        );
        h.metadata.generation = h.metadata.generation.map(|g| g + 1);
        assert!(
            !memo.is_peer_config_current(&h, &one, "7"),
            "the spec changed"
        );
        memo.forget(&h.uid().expect("a uid"));
        assert!(memo.is_empty());
    }

    #[test]
    fn nothing_is_remembered_without_a_generation_or_versions() {
        let memo = VerifiedChildren::default();
        let mut h = habitat();
        memo.remember(&h, &KeyState::NotRequired, &Default::default());
        assert!(!memo.is_current(&h, &KeyState::NotRequired, &Default::default()));
        h.metadata.generation = None;
        memo.remember(&h, &KeyState::NotRequired, &versions("1"));
        assert!(!memo.is_current(&h, &KeyState::NotRequired, &versions("1")));
    }
}
