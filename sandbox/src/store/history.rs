//! The change history that watches replay, kept per resource type as kube-apiserver keeps its
//! watch cache (`k8s.io/apiserver/pkg/storage/cacher/history`): a watch of one type is served from
//! that type's window, and refused with 410 Expired only when that window no longer reaches back
//! to its resourceVersion (`GetIntervalLocked`).
//!
//! What differs is the window's size. kube-apiserver v1.36 keeps each type's changes of the last
//! 75 s, at least 100 and at most 102,400 of them. The sandbox keeps [`Limits::budget`] changes of
//! every type together, dropping the oldest first, but never a type's last [`Limits::lower`]: a
//! window as large as the real server's held every change of the scale benchmark's run at
//! N = 5000, and the sandbox then took 1.4 GB more memory and 18 to 31% more time.
//!
//! Before, one window of 10,000 changes served every type: a watch of a type that changed
//! little expired once 10,000 changes of other types had passed its resourceVersion, where
//! kube-apiserver serves it (`tests/fidelity.rs`), and each watch read every type's changes to
//! find its own.

use super::Change;
use crate::error::ApiError;
use crate::registry::StorageKey;
use std::collections::{HashMap, VecDeque};

/// How many changes the histories keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The changes of a type that are never dropped (kube-apiserver's lower bound, 100).
    pub lower: usize,
    /// The changes kept in all, beyond each type's `lower`.
    pub budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lower: 100,
            budget: 10_000,
        }
    }
}

/// The recent changes of one resource type, oldest first.
#[derive(Debug, Clone, Default)]
struct Window {
    changes: VecDeque<Change>,
    /// A change was dropped: the window no longer starts at the store's beginning.
    dropped: bool,
}

impl Window {
    fn after(&self, rv: u64) -> Result<impl Iterator<Item = &Change>, ApiError> {
        // Refused when `rv` is below the oldest kept change's version less one, once a change
        // was dropped: the versions in between may have been changes of this type.
        if let Some(oldest) = self.changes.front().filter(|_| self.dropped) {
            if rv.saturating_add(1) < oldest.rv {
                return Err(ApiError::expired(&rv.to_string()));
            }
        }
        let start = self.changes.partition_point(|c| c.rv <= rv);
        Ok(self.changes.range(start..))
    }
}

/// Every resource type's window.
#[derive(Debug, Clone, Default)]
pub struct Histories {
    limits: Limits,
    windows: Vec<Window>,
    ids: HashMap<StorageKey, usize>,
    /// The window of each kept change, in the order they were recorded.
    order: VecDeque<usize>,
    /// The changes kept in all.
    kept: usize,
}

impl Histories {
    /// Empty histories sized by `limits`.
    pub fn new(limits: Limits) -> Self {
        Histories {
            limits,
            ..Histories::default()
        }
    }

    /// Sizes the histories by `limits` from the next change on.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// How many changes are kept, in all.
    pub fn len(&self) -> usize {
        self.kept
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.kept == 0
    }

    /// Records `change`, then drops the oldest changes over the budget, but never a type's last
    /// `lower`.
    pub fn record(&mut self, change: Change) {
        let id = match self.ids.get(&change.key.storage) {
            Some(&id) => id,
            None => {
                self.windows.push(Window::default());
                self.ids
                    .insert(change.key.storage.clone(), self.windows.len() - 1);
                self.windows.len() - 1
            }
        };
        self.windows[id].changes.push_back(change);
        self.order.push_back(id);
        self.kept += 1;
        while self.kept > self.limits.budget {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let w = &mut self.windows[oldest];
            if w.changes.len() > self.limits.lower {
                w.changes.pop_front();
                w.dropped = true;
                self.kept -= 1;
            }
        }
    }

    /// The changes of one resource type after `rv`, oldest first, or 410 Expired if its window
    /// no longer reaches back to `rv`.
    pub fn after(
        &self,
        storage: &StorageKey,
        rv: u64,
    ) -> Result<impl Iterator<Item = &Change>, ApiError> {
        let changes = match self.ids.get(storage) {
            Some(&id) => Some(self.windows[id].after(rv)?),
            None => None,
        };
        Ok(changes.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChangeKind, ObjKey};
    use std::sync::Arc;

    fn change(plural: &str, rv: u64) -> Change {
        Change {
            rv,
            kind: ChangeKind::Added,
            key: ObjKey {
                storage: StorageKey::new("", plural),
                namespace: "default".into(),
                name: format!("o{rv}"),
            },
            object: Arc::new(serde_json::json!({})),
            old: None,
            encoded: Arc::default(),
        }
    }

    fn rvs(h: &Histories, plural: &str, after: u64) -> Vec<u64> {
        h.after(&StorageKey::new("", plural), after)
            .expect("kept")
            .map(|c| c.rv)
            .collect()
    }

    fn expired(h: &Histories, plural: &str, after: u64) -> bool {
        h.after(&StorageKey::new("", plural), after).is_err()
    }

    #[test]
    fn the_oldest_changes_go_first_but_a_types_last_few_stay() {
        let mut h = Histories::new(Limits {
            lower: 2,
            budget: 6,
        });
        h.record(change("secrets", 1));
        for rv in 2..=9 {
            h.record(change("configmaps", rv));
        }
        assert_eq!(h.len(), 6);
        assert_eq!(
            rvs(&h, "secrets", 0),
            vec![1],
            "a quiet type keeps its change"
        );
        assert_eq!(rvs(&h, "configmaps", 4), (5..=9).collect::<Vec<_>>());
        assert!(expired(&h, "configmaps", 3), "rv 4 was dropped");
        for rv in 10..=20 {
            h.record(change("pods", rv));
        }
        assert_eq!(h.len(), 6);
        assert_eq!(rvs(&h, "secrets", 0), vec![1]);
        assert_eq!(rvs(&h, "configmaps", 7), vec![8, 9], "its last two stay");
        assert!(expired(&h, "configmaps", 6));
        assert_eq!(rvs(&h, "pods", 17), vec![18, 19, 20]);
        assert!(expired(&h, "pods", 16));
        assert!(rvs(&h, "services", 0).is_empty(), "no change of a type yet");
    }

    #[test]
    fn versions_between_a_types_kept_changes_are_served() {
        let mut h = Histories::new(Limits {
            lower: 1,
            budget: 3,
        });
        // Other types' changes take the versions in between.
        for rv in (10..=50).step_by(10) {
            h.record(change("configmaps", rv));
        }
        let oldest = 30;
        assert_eq!(rvs(&h, "configmaps", oldest - 1), vec![30, 40, 50]);
        assert!(expired(&h, "configmaps", oldest - 2));
        assert_eq!(rvs(&h, "configmaps", 45), vec![50]);
        assert!(rvs(&h, "configmaps", 50).is_empty());
    }
}
