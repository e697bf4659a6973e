//! Which watch events wake a Habitat: the objects a watch touched, handed to the Controller.
//!
//! # Flow
//!
//! Every event updates the cache first (the reflector runs before this); then [`Triggers::after`]
//! says what it wakes:
//!
//! - **A list** (at start, or a relist after a watch expired) wakes nothing until its end
//!   (`InitDone`), then every object in the cache ([`Woken::All`]).
//! - **An echo** of this process's own write ([`Echoes`]) wakes nothing.
//! - **An unchanged object** wakes nothing: an update after which the object, as the cache keeps
//!   it (the [`slim`](super::slim) transforms drop what the reconciler never reads), differs from
//!   the last version seen only in its resourceVersion.
//! - **A deletion** always wakes.
//!
//! Secrets are cached as metadata only, so a change of their data shows as a resourceVersion
//! alone: their watch wakes on [`Wake::Every`] event.
//!
//! # Guarantees
//!
//! - An object woken by a list is in the store: kube's `touched_objects` hands each `InitApply`
//!   on at once, before the reflector shows the list, and the Controller could look such an
//!   object up, miss it (`ObjectNotFound`), and drop the request with nothing to wake it again.
//! - A list's objects are not kept a second time meanwhile (kept beside the cache, they made a
//!   restart over 1,000 settled Habitats hold every cached object twice and peak at 87 MiB).
//!
//! # Caveats
//!
//! - kube-runtime's `predicate_filter` does the "unchanged" part, but keeps the name, namespace
//!   and uid strings and an `Instant` per object, and passes a list's objects one by one; this
//!   filter keeps 16 bytes per object (two hashes). Two uids whose 64-bit hashes collide and
//!   whose contents' hashes collide too (an update taken for unchanged) are not a practical
//!   concern at 10⁴ objects.
//! - A pod's binding to its node changes only its spec, and a StatefulSet's status update that
//!   moves only its `availableReplicas` or `currentRevision` nothing the reconciler reads: at
//!   N = 1000 these arrive minutes apart, too far apart for the Controller to merge them, and
//!   each woke a reconcile that found nothing to do.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use kube::runtime::watcher;
use kube::Resource;
use serde::Serialize;

use crate::watch::echoes::Echoes;

/// Which updates of a watched kind wake a Habitat.
#[derive(Debug, Clone)]
pub enum Wake {
    /// Every update.
    Every,
    /// Updates that changed the cached object and are not echoes of this process's writes.
    Changed(Arc<Echoes>),
}

/// What one watch event wakes.
#[derive(Debug, PartialEq)]
pub enum Woken<K> {
    /// The Habitats this object concerns: it changed, or it was deleted.
    Object(K),
    /// The Habitats of every object in the cache: a list ended.
    All,
}

/// The state of one watch's trigger filter.
#[derive(Debug)]
pub struct Triggers {
    wake: Wake,
    /// With [`Wake::Changed`]: a hash of each object's content (without its resourceVersion)
    /// by a hash of its uid. Hashes instead of the uids and objects themselves: 16 bytes per
    /// object. Two uids whose 64-bit hashes collide and whose contents' hashes collide too (an
    /// update taken for unchanged) are not a practical concern at 10⁴ objects.
    seen: HashMap<u64, u64>,
}

impl Triggers {
    pub fn new(wake: Wake) -> Self {
        Triggers {
            wake,
            seen: HashMap::new(),
        }
    }

    /// What `event` wakes, if anything. A watch error wakes nothing (the watch logs it and
    /// retries on its own).
    pub fn after<K: Resource + Serialize>(
        &mut self,
        event: Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<Woken<K>> {
        match event {
            Ok(watcher::Event::Apply(mut o)) => {
                let Wake::Changed(echoes) = &self.wake else {
                    return Some(Woken::Object(o));
                };
                let unchanged = record(&mut self.seen, &mut o);
                // Asked either way: the question forgets the write.
                let echo = echoes.is_echo(&o);
                (!unchanged && !echo).then_some(Woken::Object(o))
            }
            Ok(watcher::Event::Delete(o)) => {
                if let Wake::Changed(echoes) = &self.wake {
                    echoes.forget(&o);
                    if let Some(uid) = uid_key(&o) {
                        self.seen.remove(&uid);
                    }
                }
                Some(Woken::Object(o))
            }
            Ok(watcher::Event::Init) => {
                self.seen.clear();
                None
            }
            Ok(watcher::Event::InitApply(mut o)) => {
                if matches!(self.wake, Wake::Changed(_)) {
                    record(&mut self.seen, &mut o);
                }
                None
            }
            Ok(watcher::Event::InitDone) => Some(Woken::All),
            Err(_) => None,
        }
    }
}

/// Remembers the content of `o` in `seen`; whether it is the content last seen for its uid.
fn record<K: Resource + Serialize>(seen: &mut HashMap<u64, u64>, o: &mut K) -> bool {
    let (Some(uid), Some(content)) = (uid_key(o), content_hash(o)) else {
        return false;
    };
    seen.insert(uid, content) == Some(content)
}

fn uid_key<K: Resource>(o: &K) -> Option<u64> {
    let uid = o.meta().uid.as_deref()?;
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    Some(h.finish())
}

/// A hash of the object without its resourceVersion, from its JSON serialization (streamed
/// into the hasher: nothing is allocated). `None` if it does not serialize.
fn content_hash<K: Resource + Serialize>(o: &mut K) -> Option<u64> {
    struct Feed<'a>(&'a mut DefaultHasher);
    impl std::io::Write for Feed<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let version = o.meta_mut().resource_version.take();
    let mut h = DefaultHasher::new();
    let serialized = serde_json::to_writer(Feed(&mut h), &*o).is_ok();
    o.meta_mut().resource_version = version;
    serialized.then(|| h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;

    fn config_map(name: &str, rv: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.uid = Some(format!("uid-{name}"));
        cm.metadata.resource_version = Some(rv.into());
        cm
    }

    /// The names of the objects woken; `*` for all.
    fn names(out: Option<Woken<ConfigMap>>) -> Vec<String> {
        match out {
            None => vec![],
            Some(Woken::Object(c)) => vec![c.name_any()],
            Some(Woken::All) => vec!["*".into()],
        }
    }

    fn apply(o: &ConfigMap) -> Result<watcher::Event<ConfigMap>, watcher::Error> {
        Ok(watcher::Event::Apply(o.clone()))
    }

    fn with_data(mut cm: ConfigMap, rv: &str, value: &str) -> ConfigMap {
        cm.metadata.resource_version = Some(rv.into());
        cm.data = Some([("peer-watch-file".to_string(), value.to_string())].into());
        cm
    }

    #[test]
    fn the_echo_of_an_own_write_updates_the_cache_but_wakes_nothing() {
        let echoes = Arc::new(Echoes::default());
        let mut t = Triggers::new(Wake::Changed(echoes.clone()));
        let written = config_map("redis-peer", "7");
        echoes.wrote(&written);
        assert!(names(t.after(apply(&written))).is_empty());
        // The next version is someone else's change.
        let changed = with_data(written.clone(), "8", "10.0.0.1");
        assert_eq!(names(t.after(apply(&changed))), ["redis-peer"]);
        // A relist and a deletion are triggers even when they show the written version.
        echoes.wrote(&written);
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(written.clone()),
        ] {
            assert!(names(t.after(Ok(event))).is_empty());
        }
        assert_eq!(names(t.after(Ok(watcher::Event::InitDone))), ["*"]);
        assert_eq!(
            names(t.after(Ok(watcher::Event::Delete(written.clone())))),
            ["redis-peer"]
        );
        assert!(echoes.is_empty(), "a deletion forgets the write");
    }

    #[test]
    fn an_update_that_changed_only_the_resource_version_wakes_nothing() {
        let mut t = Triggers::new(Wake::Changed(Arc::default()));
        let first = config_map("redis-peer", "7");
        assert_eq!(names(t.after(apply(&first))), ["redis-peer"]);
        let mut same = first.clone();
        same.metadata.resource_version = Some("8".into());
        assert!(names(t.after(apply(&same))).is_empty());
        // A change of content wakes, and so does the change back.
        let changed = with_data(first.clone(), "9", "10.0.0.1");
        assert_eq!(names(t.after(apply(&changed))), ["redis-peer"]);
        let back = with_data(first.clone(), "10", "10.0.0.2");
        assert_eq!(names(t.after(apply(&back))), ["redis-peer"]);
        // Each object is compared with its own last version.
        let other = config_map("nginx-peer", "11");
        assert_eq!(names(t.after(apply(&other))), ["nginx-peer"]);
        // A deletion wakes, and a re-created object (same content) wakes again.
        assert_eq!(
            names(t.after(Ok(watcher::Event::Delete(back.clone())))),
            ["redis-peer"]
        );
        assert_eq!(names(t.after(apply(&back))), ["redis-peer"]);
        // After a relist, an object is compared with its relisted version.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(back.clone()),
            watcher::Event::InitDone,
        ] {
            t.after(Ok(event));
        }
        let mut again = back.clone();
        again.metadata.resource_version = Some("12".into());
        assert!(names(t.after(apply(&again))).is_empty());
    }

    #[test]
    fn every_update_of_a_metadata_only_watch_wakes() {
        // A Secret cached as metadata shows a change of its data as a new resourceVersion.
        let mut t = Triggers::new(Wake::Every);
        let first = config_map("ring-key", "7");
        assert_eq!(names(t.after(apply(&first))), ["ring-key"]);
        let mut same = first.clone();
        same.metadata.resource_version = Some("8".into());
        assert_eq!(names(t.after(apply(&same))), ["ring-key"]);
        assert!(t.seen.is_empty(), "nothing is remembered");
    }
}
