//! Secondary indexes over the reflector caches, fed by the same watch events (client-go's
//! `Indexer`).
//!
//! # Flow
//!
//! Each [`Index`] maps a key computed from an object (`keys_of`) to the references of the
//! objects that have it; the objects stay in the store. The watch of the kind hands it every
//! event after the store applied it ([`Index::event`]). Reconciles and event mappings
//! ([`pod_watchers`], [`referencing`]) look objects up by key.
//!
//! # Guarantees
//!
//! - A relist replaces the whole index at its end (`InitDone`), as the reflector does its store,
//!   so that objects deleted while the watch was down go.
//! - Looking up one Habitat's objects touches only them, never the whole cluster.
//!
//! # Caveats
//!
//! - kube-runtime's stores are keyed by namespace and name only: without these indexes, a
//!   reconcile or an event mapping walked every pod, Secret or Habitat of the cluster, and the
//!   cost of one Habitat grew with the cluster.
//! - An index may briefly name an object its store does not hold (or the reverse) between the two
//!   updates: [`Index::objects`] skips references the store no longer has.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::api::{Habitat, LABEL_NAME, LABEL_RING};

/// The keys an object is found under.
pub type KeysOf<K> = fn(&K) -> Vec<String>;

struct Inner<K: Resource<DynamicType = ()>> {
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
    keys: HashMap<ObjectRef<K>, Vec<String>>,
    /// A relist under way: its objects, shown at its end as the reflector does.
    relist: Option<Vec<(ObjectRef<K>, Vec<String>)>>,
}

/// One index of the objects of kind `K`.
pub struct Index<K: Resource<DynamicType = ()>> {
    keys_of: KeysOf<K>,
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K: Resource<DynamicType = ()>> Clone for Index<K> {
    fn clone(&self) -> Self {
        Index {
            keys_of: self.keys_of,
            inner: self.inner.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Index<K> {
    /// An empty index whose objects are found under `keys_of(object)`.
    pub fn new(keys_of: KeysOf<K>) -> Self {
        Index {
            keys_of,
            inner: Arc::new(RwLock::new(Inner {
                by_key: HashMap::new(),
                keys: HashMap::new(),
                relist: None,
            })),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The objects under `key`, in no particular order.
    pub fn refs(&self, key: &str) -> Vec<ObjectRef<K>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .by_key
            .get(key)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The objects under `key` as `store` holds them, sorted by name (a reference whose object
    /// the store no longer has is skipped).
    pub fn objects(&self, store: &Store<K>, key: &str) -> Vec<Arc<K>> {
        let mut out: Vec<Arc<K>> = self.refs(key).iter().filter_map(|r| store.get(r)).collect();
        out.sort_by_key(|o| o.name_any());
        out
    }

    /// Records `o` (created or changed).
    pub fn apply(&self, o: &K) {
        let r = ObjectRef::from_obj(o);
        let keys = (self.keys_of)(o);
        let mut inner = self.write();
        inner.remove(&r);
        inner.insert(r, keys);
    }

    /// Forgets `o`.
    pub fn delete(&self, o: &K) {
        self.write().remove(&ObjectRef::from_obj(o));
    }

    /// Follows one event of the watch that feeds the store: a relist replaces the whole
    /// content at its end (`InitDone`), so that objects deleted while the watch was down go.
    pub fn event(&self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) => self.apply(o),
            watcher::Event::Delete(o) => self.delete(o),
            watcher::Event::Init => self.write().relist = Some(Vec::new()),
            watcher::Event::InitApply(o) => {
                let entry = (ObjectRef::from_obj(o), (self.keys_of)(o));
                self.write().relist.get_or_insert_with(Vec::new).push(entry);
            }
            watcher::Event::InitDone => {
                let mut inner = self.write();
                let relisted = inner.relist.take().unwrap_or_default();
                inner.by_key.clear();
                inner.keys.clear();
                for (r, keys) in relisted {
                    inner.remove(&r);
                    inner.insert(r, keys);
                }
            }
        }
    }
}

impl<K: Resource<DynamicType = ()>> Inner<K> {
    fn remove(&mut self, r: &ObjectRef<K>) {
        for key in self.keys.remove(r).unwrap_or_default() {
            if let Some(set) = self.by_key.get_mut(&key) {
                set.remove(r);
                if set.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, r: ObjectRef<K>, keys: Vec<String>) {
        if keys.is_empty() {
            return;
        }
        for key in &keys {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(r.clone());
        }
        self.keys.insert(r, keys);
    }
}

/// An index key of parts (namespace first); the separator cannot occur in a name.
pub fn key(parts: &[&str]) -> String {
    parts.join("\u{1f}")
}

/// The indexes the reconciler and the event mappings read.
#[derive(Clone)]
pub struct Indexes {
    /// Pods by (namespace, `habitat.sh/name`).
    pub pods_by_habitat: Index<Pod>,
    /// Secrets by (namespace, `habitat.sh/ring`).
    pub secrets_by_ring: Index<PartialObjectMeta<Secret>>,
    /// Habitats by (namespace, service, group) they run.
    pub habitats_by_group: Index<Habitat>,
    /// Habitats by (namespace, service, group) of each of their binds.
    pub habitats_by_bind: Index<Habitat>,
    /// Habitats by the Secrets they name, (namespace, `secret`, name), and the ring they use,
    /// (namespace, `ring`, ring).
    pub habitats_by_secret: Index<Habitat>,
}

impl Default for Indexes {
    fn default() -> Self {
        Indexes {
            pods_by_habitat: Index::new(pod_keys),
            secrets_by_ring: Index::new(ring_secret_keys),
            habitats_by_group: Index::new(group_keys),
            habitats_by_bind: Index::new(bind_keys),
            habitats_by_secret: Index::new(secret_keys),
        }
    }
}

impl Indexes {
    /// Follows one event of the Habitat watch.
    pub fn habitat_event(&self, event: &watcher::Event<Habitat>) {
        self.habitats_by_group.event(event);
        self.habitats_by_bind.event(event);
        self.habitats_by_secret.event(event);
    }
}

fn pod_keys(p: &Pod) -> Vec<String> {
    match (p.namespace(), p.labels().get(LABEL_NAME)) {
        (Some(ns), Some(name)) => vec![key(&[&ns, name])],
        _ => vec![],
    }
}

fn ring_secret_keys(s: &PartialObjectMeta<Secret>) -> Vec<String> {
    match (s.namespace(), s.labels().get(LABEL_RING)) {
        (Some(ns), Some(ring)) => vec![key(&[&ns, ring])],
        _ => vec![],
    }
}

fn group_keys(h: &Habitat) -> Vec<String> {
    let svc = &h.spec.service;
    vec![key(&[
        &h.namespace().unwrap_or_default(),
        &svc.name,
        &svc.group,
    ])]
}

fn bind_keys(h: &Habitat) -> Vec<String> {
    let ns = h.namespace().unwrap_or_default();
    let mut keys: Vec<String> = h
        .spec
        .service
        .bind
        .iter()
        .map(|b| key(&[&ns, &b.service, &b.group]))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The key of a Secret named `name` in `ns` in [`Indexes::habitats_by_secret`].
pub fn secret_key(ns: &str, name: &str) -> String {
    key(&[ns, "secret", name])
}

/// The key of ring `ring` in `ns` in [`Indexes::habitats_by_secret`].
pub fn ring_key(ns: &str, ring: &str) -> String {
    key(&[ns, "ring", ring])
}

fn secret_keys(h: &Habitat) -> Vec<String> {
    let ns = h.namespace().unwrap_or_default();
    let svc = &h.spec.service;
    let mut keys: Vec<String> = [
        &svc.config_secret_name,
        &svc.files_secret_name,
        &svc.ring_secret_name,
    ]
    .into_iter()
    .flatten()
    .map(|n| secret_key(&ns, n))
    .chain(svc.ring.iter().map(|r| ring_key(&ns, &r.name)))
    .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The Habitats a pod matters to: its own, and those that bind to its Habitat's service group
/// (their peer files name one of its pods). Looked up in the indexes: no walk over all Habitats.
pub fn pod_watchers(
    habitats: &Store<Habitat>,
    index: &Indexes,
    p: &Pod,
) -> Vec<ObjectRef<Habitat>> {
    let (Some(ns), Some(name)) = (p.namespace(), p.labels().get(LABEL_NAME)) else {
        return vec![];
    };
    let own = ObjectRef::new(name).within(&ns);
    let mut refs = vec![own.clone()];
    if let Some(own) = habitats.get(&own) {
        let svc = &own.spec.service;
        refs.extend(
            index
                .habitats_by_bind
                .refs(&key(&[&ns, &svc.name, &svc.group])),
        );
    }
    refs
}

/// The Habitats that name a Secret (config, files, ring key) or use its ring.
pub fn referencing(index: &Indexes, s: &PartialObjectMeta<Secret>) -> Vec<ObjectRef<Habitat>> {
    let ns = s.namespace().unwrap_or_default();
    let mut refs = index
        .habitats_by_secret
        .refs(&secret_key(&ns, &s.name_any()));
    if let Some(ring) = s.labels().get(LABEL_RING) {
        refs.extend(index.habitats_by_secret.refs(&ring_key(&ns, ring)));
    }
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs.dedup();
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use kube::runtime::reflector;

    impl<K: Resource<DynamicType = ()> + Clone + 'static> Index<K> {
        /// How many objects the index holds.
        pub fn len(&self) -> usize {
            self.inner
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .keys
                .len()
        }

        /// Whether the index holds no object.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    fn pod(ns: &str, name: &str, habitat: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.labels = Some([(LABEL_NAME.to_string(), habitat.to_string())].into());
        p
    }

    fn names(refs: Vec<ObjectRef<Pod>>) -> Vec<String> {
        let mut out: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        out.sort();
        out
    }

    #[test]
    fn applies_moves_and_deletes_pods() {
        let index = Index::new(pod_keys);
        index.apply(&pod("a", "redis-0", "redis"));
        index.apply(&pod("a", "redis-1", "redis"));
        index.apply(&pod("b", "redis-0", "redis"));
        index.apply(&pod("a", "web-0", "web"));
        assert_eq!(
            names(index.refs(&key(&["a", "redis"]))),
            ["redis-0", "redis-1"]
        );
        assert_eq!(names(index.refs(&key(&["b", "redis"]))), ["redis-0"]);
        // Relabelled: found under its new key only.
        index.apply(&pod("a", "redis-1", "web"));
        assert_eq!(names(index.refs(&key(&["a", "redis"]))), ["redis-0"]);
        assert_eq!(names(index.refs(&key(&["a", "web"]))), ["redis-1", "web-0"]);
        index.delete(&pod("a", "redis-0", "redis"));
        assert!(index.refs(&key(&["a", "redis"])).is_empty());
        assert_eq!(index.len(), 3);
        // Applying the same object twice keeps one entry.
        index.apply(&pod("a", "web-0", "web"));
        assert_eq!(index.len(), 3);
        // An object without the label is not indexed.
        let mut bare = pod("a", "other", "x");
        bare.metadata.labels = None;
        index.apply(&bare);
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn a_relist_replaces_the_content_at_its_end() {
        let index = Index::new(pod_keys);
        index.apply(&pod("a", "gone-0", "gone"));
        index.apply(&pod("a", "redis-0", "redis"));
        index.event(&watcher::Event::Init);
        index.event(&watcher::Event::InitApply(pod("a", "redis-0", "redis")));
        index.event(&watcher::Event::InitApply(pod("a", "new-0", "new")));
        // Until the relist ends, the index shows what it had.
        assert_eq!(names(index.refs(&key(&["a", "gone"]))), ["gone-0"]);
        assert!(index.refs(&key(&["a", "new"])).is_empty());
        index.event(&watcher::Event::InitDone);
        assert!(
            index.refs(&key(&["a", "gone"])).is_empty(),
            "deleted while the watch was down"
        );
        assert_eq!(names(index.refs(&key(&["a", "new"]))), ["new-0"]);
        assert_eq!(names(index.refs(&key(&["a", "redis"]))), ["redis-0"]);
        assert_eq!(index.len(), 2);
        // Events after the relist apply as usual.
        index.event(&watcher::Event::Delete(pod("a", "new-0", "new")));
        index.event(&watcher::Event::Apply(pod("a", "redis-1", "redis")));
        assert_eq!(
            names(index.refs(&key(&["a", "redis"]))),
            ["redis-0", "redis-1"]
        );
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn objects_are_read_from_the_store_sorted_and_missing_ones_skipped() {
        let (store, mut writer) = reflector::store::<Pod>();
        let index = Index::new(pod_keys);
        for p in [pod("a", "redis-1", "redis"), pod("a", "redis-0", "redis")] {
            writer.apply_watcher_event(&watcher::Event::Apply(p.clone()));
            index.apply(&p);
        }
        // Indexed but not (or no longer) in the store.
        index.apply(&pod("a", "redis-2", "redis"));
        let found: Vec<String> = index
            .objects(&store, &key(&["a", "redis"]))
            .iter()
            .map(|p| p.name_any())
            .collect();
        assert_eq!(found, ["redis-0", "redis-1"]);
    }

    fn named(mut h: Habitat, ns: &str, name: &str) -> Habitat {
        h.metadata.namespace = Some(ns.into());
        h.metadata.name = Some(name.into());
        h
    }

    #[test]
    fn habitats_are_found_by_group_bind_secret_and_ring() {
        let indexes = Indexes::default();
        let db = named(habitat(), "a", "db");
        let mut web = named(habitat().ring("prod"), "a", "web");
        web.spec.service.name = "web".into();
        web.spec.service.config_secret_name = Some("web-config".into());
        web.spec.service.bind = vec![crate::api::Bind {
            name: "db".into(),
            service: db.spec.service.name.clone(),
            group: db.spec.service.group.clone(),
        }];
        for h in [&db, &web] {
            indexes.habitat_event(&watcher::Event::Apply(h.clone()));
        }
        let svc = &db.spec.service;
        let by_group = indexes
            .habitats_by_group
            .refs(&key(&["a", &svc.name, &svc.group]));
        assert_eq!(by_group, vec![ObjectRef::from_obj(&db)]);
        let binders = indexes
            .habitats_by_bind
            .refs(&key(&["a", &svc.name, &svc.group]));
        assert_eq!(binders, vec![ObjectRef::from_obj(&web)]);
        assert_eq!(
            indexes
                .habitats_by_secret
                .refs(&secret_key("a", "web-config")),
            vec![ObjectRef::from_obj(&web)]
        );
        assert_eq!(
            indexes.habitats_by_secret.refs(&ring_key("a", "prod")),
            vec![ObjectRef::from_obj(&web)]
        );
        assert!(indexes
            .habitats_by_secret
            .refs(&ring_key("b", "prod"))
            .is_empty());
        // The spec changes: the old keys go.
        web.spec.service.bind.clear();
        web.spec.service.ring = None;
        indexes.habitat_event(&watcher::Event::Apply(web.clone()));
        assert!(indexes
            .habitats_by_bind
            .refs(&key(&["a", &svc.name, &svc.group]))
            .is_empty());
        assert!(indexes
            .habitats_by_secret
            .refs(&ring_key("a", "prod"))
            .is_empty());
        indexes.habitat_event(&watcher::Event::Delete(web));
        assert!(indexes.habitats_by_secret.is_empty());
    }
}
