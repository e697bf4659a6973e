//! The children this process wrote, until the caches show them (client-go's `MutationCache`).
//!
//! # Flow
//!
//! A reconcile applies a child and gets the server's answer back; the watch delivers the same
//! object to the cache a little later. Each write is remembered ([`Recent::record`]) with the
//! version it replaced, and [`Recent::fresher`] answers the written object while the cache still
//! shows that version (or, for a create, nothing).
//!
//! # Guarantees
//!
//! - A reconcile of the same Habitat that runs in between (woken by another child's event) sees
//!   its write, not the cache's older copy: it does not judge the child out of date and apply it
//!   again, a write that changes nothing.
//! - Once the cache shows anything else, or after [`TTL`], the cache is the truth again.
//!
//! # Caveats
//!
//! - kube-runtime's stores take no writes but the watch's, so the project keeps this beside them.
//! - Entries are kept in the same slim copy as the caches ([`slim`](super::slim)).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Resource, ResourceExt};

/// How long a write is trusted over the cache. Watches deliver within milliseconds; a watch this
/// far behind is better answered by a repeated (idempotent) apply.
pub const TTL: Duration = Duration::from_secs(5);

/// How often expired entries are swept. Most are never asked for again (the echo of a write
/// wakes no reconcile), so only a sweep forgets them: swept when 1,024 had piled up, a kind's
/// map held nearly every write at N = 1000.
const SWEEP_EVERY: Duration = TTL;

struct Entry<K> {
    written: K,
    /// The resourceVersion of the copy the write replaced; None when it created the object.
    replaced: Option<String>,
    at: Instant,
}

/// Recent writes of one kind, by (namespace, name).
pub struct Recent<K> {
    entries: Mutex<Entries<K>>,
}

struct Entries<K> {
    by_name: HashMap<(String, String), Entry<K>>,
    swept: Instant,
}

impl<K> Default for Recent<K> {
    fn default() -> Self {
        Recent {
            entries: Mutex::new(Entries {
                by_name: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }
}

impl<K: Resource + Clone> Recent<K> {
    /// Remembers `written`, the server's answer to a write made over `before` (the copy the
    /// reconcile saw; None when there was none).
    pub fn record(&self, before: Option<&K>, written: &K) {
        self.record_at(before, written, Instant::now());
    }

    fn record_at(&self, before: Option<&K>, written: &K, now: Instant) {
        let Some(namespace) = written.namespace() else {
            return;
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_duration_since(entries.swept) >= SWEEP_EVERY {
            entries
                .by_name
                .retain(|_, e| now.saturating_duration_since(e.at) < TTL);
            entries.swept = now;
        }
        entries.by_name.insert(
            (namespace, written.name_any()),
            Entry {
                written: written.clone(),
                replaced: before.and_then(|b| b.resource_version()),
                at: now,
            },
        );
    }

    /// `cached`, the cache's copy of `namespace/name`, or the object this process wrote over it
    /// when the cache has not caught up with that write yet.
    pub fn fresher(&self, namespace: &str, name: &str, cached: Option<K>) -> Option<K> {
        let entries = &mut self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_name;
        // Observing asks for every child of every reconcile; most find nothing remembered.
        if entries.is_empty() {
            return cached;
        }
        let key = (namespace.to_string(), name.to_string());
        let Some(entry) = entries.get(&key) else {
            return cached;
        };
        let behind = entry.at.elapsed() < TTL
            && match &cached {
                None => entry.replaced.is_none(),
                Some(c) => {
                    let version = c.resource_version();
                    version.is_some() && version == entry.replaced
                }
            };
        if behind {
            return Some(entry.written.clone());
        }
        // Caught up, moved on (another writer, a deletion), or too old: the cache decides.
        entries.remove(&key);
        cached
    }

    /// How many writes are remembered.
    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_name
            .len()
    }

    /// Whether no write is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Recent writes of every kind of child that is applied.
#[derive(Default)]
pub struct RecentWrites {
    /// StatefulSets.
    pub statefulsets: Recent<StatefulSet>,
    /// Peer ConfigMaps.
    pub config_maps: Recent<ConfigMap>,
    /// Headless and leader Services.
    pub services: Recent<Service>,
    /// PodDisruptionBudgets.
    pub budgets: Recent<PodDisruptionBudget>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(version: &str, peer: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("web-peer".into()),
                namespace: Some("ns".into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            data: Some([("peer-ip".to_string(), peer.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    fn peer(c: Option<ConfigMap>) -> Option<String> {
        c.and_then(|c| c.data)
            .and_then(|d| d.get("peer-ip").cloned())
    }

    #[test]
    fn a_write_is_answered_until_the_cache_shows_it() {
        let recent = Recent::<ConfigMap>::default();
        let before = cm("5", "");
        recent.record(Some(&before), &cm("9", "10.0.0.1"));
        // The cache still holds the replaced version: the written one answers.
        assert_eq!(
            peer(recent.fresher("ns", "web-peer", Some(before.clone()))),
            Some("10.0.0.1".into())
        );
        // The watch delivered the write: the cache answers, and the entry is gone.
        assert_eq!(
            peer(recent.fresher("ns", "web-peer", Some(cm("9", "10.0.0.1")))),
            Some("10.0.0.1".into())
        );
        assert!(recent.is_empty());
        assert_eq!(
            peer(recent.fresher("ns", "web-peer", Some(before))),
            Some(String::new()),
            "forgotten once caught up"
        );
    }

    #[test]
    fn a_create_is_answered_while_the_cache_shows_nothing() {
        let recent = Recent::<ConfigMap>::default();
        recent.record(None, &cm("9", ""));
        assert!(recent.fresher("ns", "web-peer", None).is_some());
        assert!(recent.fresher("ns", "other", None).is_none());
    }

    #[test]
    fn the_cache_wins_once_it_moved_past_the_write() {
        // Another writer changed it after us, or it was deleted: the cache is the truth.
        let recent = Recent::<ConfigMap>::default();
        recent.record(Some(&cm("5", "")), &cm("9", "10.0.0.1"));
        assert_eq!(
            peer(recent.fresher("ns", "web-peer", Some(cm("12", "10.0.0.7")))),
            Some("10.0.0.7".into())
        );
        let recent = Recent::<ConfigMap>::default();
        recent.record(Some(&cm("5", "")), &cm("9", "10.0.0.1"));
        assert!(recent.fresher("ns", "web-peer", None).is_none());
    }

    #[test]
    fn writes_never_asked_for_again_are_forgotten_after_the_ttl() {
        // The echo of a write wakes no reconcile, so most entries are never looked up again.
        let recent = Recent::<ConfigMap>::default();
        let start = Instant::now();
        recent.record_at(None, &cm("9", ""), start);
        let mut other = cm("10", "");
        other.metadata.name = Some("db-peer".into());
        recent.record_at(None, &other, start + TTL / 2);
        assert_eq!(recent.len(), 2, "both within the TTL");
        let mut third = cm("11", "");
        third.metadata.name = Some("cache-peer".into());
        recent.record_at(None, &third, start + TTL + TTL / 4);
        assert_eq!(recent.len(), 2, "the first expired and was swept");
        assert!(recent.fresher("ns", "web-peer", None).is_none());
    }
}
