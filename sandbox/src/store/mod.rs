//! The in-memory object store: objects, the global resourceVersion, and the change history
//! that watches replay.
//!
//! Objects are kept in key order (storage, namespace, name), so a list of one resource (in one
//! namespace) is a range of the map, not a scan of every object. Secondary indexes, kept by
//! [`Inner::record`] (the only place objects are stored or removed), answer what would otherwise
//! be scans: objects by uid, dependents by owner uid, object counts per namespace, and the
//! objects that may have lost all their owners (the garbage collector's work list). A stored
//! object is shared (`Arc`) between the map and the change history, so a version costs its
//! memory once. The history is kept per resource type, as kube-apiserver keeps its watch cache
//! ([`history`]).

mod delete;
pub mod history;
mod hooks;
mod names;
mod ownership;
mod rules;
mod write;

pub use delete::{DeleteOptions, Propagation};

use crate::error::ApiError;
use crate::events;
use crate::meta;
use crate::registry::{Registry, ResourceType, StorageKey};
use crate::selector::{FieldSelector, LabelSelector};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tokio::sync::watch;

/// The identity of a stored object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// Where it is stored.
    pub storage: StorageKey,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Who makes a PATCH, as its query says: the `fieldManager`, and for an apply whether it is
/// forced (`force=true`), which takes the fields it changes from their other managers where an
/// apply without it is refused for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Manager<'a> {
    /// The `fieldManager` (an apply needs one).
    pub name: Option<&'a str>,
    /// `force=true`.
    pub force: bool,
}

impl<'a> Manager<'a> {
    /// The manager `name`, forcing its applies.
    pub fn forced(name: &'a str) -> Self {
        Manager {
            name: Some(name),
            force: true,
        }
    }
}

/// The type of a change (watch event type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// ADDED
    Added,
    /// MODIFIED
    Modified,
    /// DELETED
    Deleted,
}

impl ChangeKind {
    /// The watch event type string.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "ADDED",
            ChangeKind::Modified => "MODIFIED",
            ChangeKind::Deleted => "DELETED",
        }
    }
}

/// One recorded change.
#[derive(Debug, Clone)]
pub struct Change {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Type.
    pub kind: ChangeKind,
    /// The object.
    pub key: ObjKey,
    /// The object after the change (before it, for deletions).
    pub object: Arc<Value>,
    /// The object before a modification.
    pub old: Option<Arc<Value>>,
    /// `object` as JSON text, written by the first watch that sends it as stored and shared
    /// by every other: a change watched by several clients is serialized once.
    pub encoded: Arc<OnceLock<String>>,
}

/// The store's state, accessed under the lock.
#[derive(Debug, Clone)]
pub struct Inner {
    /// The current (latest) resourceVersion.
    pub rv: u64,
    /// Served resource types.
    pub registry: Registry,
    /// The objects in key order: lists and watches' initial lists walk ranges of it.
    objects: BTreeMap<ObjKey, Arc<Value>>,
    /// The same objects by key, for the point reads of every write and GET. A lookup in the
    /// ordered map compares keys (four strings each) down a tree that deepens as the world
    /// grows: those comparisons were 5% of the sandbox's CPU samples at N = 2000, 1.4% since.
    by_key: HashMap<ObjKey, Arc<Value>>,
    /// The recent changes of each resource type.
    histories: history::Histories,
    /// The last apply of each (field manager, status subresource) per object.
    applied: HashMap<ObjKey, HashMap<(String, bool), ownership::Applied>>,
    /// The `Update` entries of each object's `managedFields` ([`ownership`]).
    updated: HashMap<ObjKey, Vec<ownership::Updated>>,
    /// Whether writes are validated like a client's (off for a scheduler's binding).
    checked: bool,
    /// The key of each stored object by uid.
    uids: HashMap<String, ObjKey>,
    /// The objects naming each uid in their ownerReferences.
    dependents: HashMap<String, BTreeSet<ObjKey>>,
    /// How many objects each namespace holds.
    per_namespace: HashMap<String, usize>,
    /// Objects that named an owner that did not exist (when written, or since the owner went):
    /// what the garbage collector's sweep looks at.
    orphan_candidates: BTreeSet<ObjKey>,
}

/// The shared store; lock it to read or write.
#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    tx: watch::Sender<u64>,
}

/// A locked store; notifies watchers on drop when something changed.
pub struct Txn<'a> {
    guard: MutexGuard<'a, Inner>,
    tx: &'a watch::Sender<u64>,
    start: u64,
}

impl Deref for Txn<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl DerefMut for Txn<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.guard
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.guard.rv != self.start {
            self.tx.send_replace(self.guard.rv);
        }
    }
}

impl Default for Store {
    fn default() -> Self {
        let (tx, _) = watch::channel(1);
        let mut inner = Inner {
            rv: 1,
            registry: Registry::default(),
            objects: BTreeMap::new(),
            by_key: HashMap::new(),
            histories: history::Histories::default(),
            applied: HashMap::new(),
            updated: HashMap::new(),
            checked: true,
            uids: HashMap::new(),
            dependents: HashMap::new(),
            per_namespace: HashMap::new(),
            orphan_candidates: BTreeSet::new(),
        };
        let ns = inner
            .registry
            .find("", "v1", "namespaces")
            .cloned()
            .expect("namespaces are built in");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = serde_json::json!({"metadata": {"name": name}});
            if let Err(e) = inner.create(&ns, None, obj) {
                tracing::error!("creating namespace {name}: {e}");
            }
        }
        Store {
            inner: Mutex::new(inner),
            tx,
        }
    }
}

impl Store {
    /// Lock the store.
    pub fn lock(&self) -> Txn<'_> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let start = guard.rv;
        Txn {
            guard,
            tx: &self.tx,
            start,
        }
    }

    /// A receiver that sees the latest resourceVersion after each change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// The resourceVersion of the latest change.
    pub fn version(&self) -> u64 {
        *self.tx.borrow()
    }
}

impl Inner {
    /// Find a served resource type.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.registry.find(group, version, plural).cloned()
    }

    /// A resource type storing objects at `storage` (the preferred version).
    pub fn resource_for_storage(&self, storage: &StorageKey) -> Option<ResourceType> {
        let mut types: Vec<&ResourceType> = self
            .registry
            .all()
            .iter()
            .filter(|t| t.storage == *storage && t.group == storage.group)
            .collect();
        types.sort_by_key(|t| std::cmp::Reverse(crate::registry::version_priority(&t.version)));
        types.first().map(|t| (*t).clone())
    }

    /// The object as served by `rt` (apiVersion/kind set; events converted).
    pub fn view(&self, rt: &ResourceType, stored: &Value) -> Value {
        if rt.is_event() && rt.group == "events.k8s.io" {
            return events::core_to_events(stored);
        }
        let mut v = stored.clone();
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), Value::String(rt.api_version()));
            m.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        v
    }

    /// The object as served by `rt`, borrowed when that is how it is stored (the usual case:
    /// a list then costs no copy of its objects).
    pub fn view_ref<'a>(&self, rt: &ResourceType, stored: &'a Value) -> Cow<'a, Value> {
        let converted = rt.is_event() && rt.group == "events.k8s.io";
        if !converted
            && stored["kind"].as_str() == Some(rt.kind.as_str())
            && stored["apiVersion"].as_str() == Some(rt.api_version().as_str())
        {
            return Cow::Borrowed(stored);
        }
        Cow::Owned(self.view(rt, stored))
    }

    /// The stored form of an object written through `rt`.
    fn unview(&self, rt: &ResourceType, obj: Value) -> Value {
        if rt.is_event() && rt.group == "events.k8s.io" {
            return events::events_to_core(&obj);
        }
        obj
    }

    /// The key of an object of `rt`.
    pub fn key(rt: &ResourceType, ns: Option<&str>, name: &str) -> ObjKey {
        ObjKey {
            storage: rt.storage.clone(),
            namespace: if rt.namespaced {
                ns.unwrap_or_default().to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    /// Get one object, as served by `rt`.
    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.by_key
            .get(&Self::key(rt, ns, name))
            .map(|o| self.view(rt, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// Whether the object exists (no copy of it is made).
    pub fn exists(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> bool {
        self.by_key.contains_key(&Self::key(rt, ns, name))
    }

    /// The stored object for a key.
    pub fn raw(&self, key: &ObjKey) -> Option<&Value> {
        self.by_key.get(key).map(|o| &**o)
    }

    /// The stored object for a key, shared: a copy costs one pointer.
    pub fn shared(&self, key: &ObjKey) -> Option<Arc<Value>> {
        self.by_key.get(key).cloned()
    }

    /// The key of the stored object with this uid.
    pub fn key_of_uid(&self, uid: &str) -> Option<&ObjKey> {
        self.uids.get(uid)
    }

    /// The keys of the objects that name `uid` in their ownerReferences, in key order.
    pub fn dependents(&self, uid: &str) -> impl Iterator<Item = &ObjKey> {
        self.dependents.get(uid).into_iter().flatten()
    }

    /// How many objects the namespace holds.
    pub fn namespace_len(&self, ns: &str) -> usize {
        self.per_namespace.get(ns).copied().unwrap_or(0)
    }

    /// Stored objects of a storage key, optionally in one namespace.
    pub fn raw_list<'a>(
        &'a self,
        storage: &'a StorageKey,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        let from = ObjKey {
            storage: storage.clone(),
            namespace: ns.unwrap_or_default().to_string(),
            name: String::new(),
        };
        self.objects
            .range(from..)
            .take_while(move |(k, _)| k.storage == *storage && ns.is_none_or(|n| k.namespace == n))
            .map(|(k, o)| (k, &**o))
    }

    /// List objects, as served by `rt`.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Value> {
        self.raw_list(&rt.storage, ns)
            .map(|(_, o)| self.view(rt, o))
            .collect()
    }

    /// The objects of `rt` (in one namespace) that match both selectors, as served by `rt`, in
    /// key order. Only the objects of that resource (and namespace) are looked at, and only the
    /// named one when the field selector names one (`metadata.name=`, as a watch of one object
    /// sends); labels are matched before an object is copied.
    pub fn select<'s>(
        &'s self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Cow<'s, Value>> {
        let named = fields
            .0
            .iter()
            .find(|(path, eq, _)| *eq && path == "metadata.name")
            .map(|(_, _, name)| name.as_str());
        let keep = |o: &'s Value| self.selected(rt, labels, fields, o);
        match (named, ns.is_some() || !rt.namespaced) {
            (Some(name), true) => self
                .by_key
                .get(&Self::key(rt, ns, name))
                .and_then(|o| keep(o))
                .into_iter()
                .collect(),
            _ => {
                let from = ObjKey {
                    storage: rt.storage.clone(),
                    namespace: ns.unwrap_or_default().to_string(),
                    name: String::new(),
                };
                self.objects
                    .range(from..)
                    .take_while(|(k, _)| {
                        k.storage == rt.storage && ns.is_none_or(|n| k.namespace == n)
                    })
                    .filter_map(|(_, o)| keep(o))
                    .collect()
            }
        }
    }

    /// `o` as served by `rt` when it matches both selectors; labels are matched before it is
    /// copied (the view only sets apiVersion and kind, labels stay, except for events.k8s.io).
    fn selected<'s>(
        &'s self,
        rt: &ResourceType,
        labels: &LabelSelector,
        fields: &FieldSelector,
        o: &'s Value,
    ) -> Option<Cow<'s, Value>> {
        let converted = rt.is_event() && rt.group == "events.k8s.io";
        if !converted && !labels.matches(o) {
            return None;
        }
        let v = self.view_ref(rt, o);
        (labels.matches(&v) && fields.matches(&v)).then_some(v)
    }

    /// One page of [`select`](Self::select), as a real server pages a list (`limit` and
    /// `continue`): at most `limit` matching objects after `after` (a namespace and name), in key
    /// order, and the position of the last one when more match after it. Starts at `after`, so a
    /// page costs what it holds (and the objects its selectors skip), not the whole list.
    pub fn select_page<'s>(
        &'s self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> (Vec<Cow<'s, Value>>, Option<(String, String)>) {
        use std::ops::Bound;
        let start = match after {
            Some((namespace, name)) => Bound::Excluded(ObjKey {
                storage: rt.storage.clone(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            None => Bound::Included(ObjKey {
                storage: rt.storage.clone(),
                namespace: ns.unwrap_or_default().to_string(),
                name: String::new(),
            }),
        };
        let mut page = vec![];
        let mut last: Option<&ObjKey> = None;
        for (k, o) in self
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| k.storage == rt.storage && ns.is_none_or(|n| k.namespace == n))
        {
            let Some(v) = self.selected(rt, labels, fields, o) else {
                continue;
            };
            if page.len() == limit {
                let next = last.map(|k| (k.namespace.clone(), k.name.clone()));
                return (page, next);
            }
            page.push(v);
            last = Some(k);
        }
        (page, None)
    }

    /// Every stored object (for garbage collection sweeps).
    pub fn all_objects(&self) -> impl Iterator<Item = (&ObjKey, &Value)> {
        self.objects.iter().map(|(k, o)| (k, &**o))
    }

    /// The changes of one resource type after `rv`, oldest first, or 410 Expired if its history
    /// no longer reaches back to `rv`.
    pub fn changes_of(
        &self,
        storage: &StorageKey,
        rv: u64,
    ) -> Result<impl Iterator<Item = &Change>, ApiError> {
        self.histories.after(storage, rv)
    }

    /// Sizes the watch histories by `limits` from the next change on: tests make them small to
    /// see a watch expire.
    pub fn set_history_limits(&mut self, limits: history::Limits) {
        self.histories.set_limits(limits);
    }

    /// Record a change and store (or remove) the object. The old object of a modification is
    /// the one stored until now.
    fn record(&mut self, kind: ChangeKind, key: ObjKey, object: Value) {
        let object = Arc::new(object);
        let old = match kind {
            ChangeKind::Deleted => {
                self.by_key.remove(&key);
                if let Some(prev) = self.objects.remove(&key) {
                    self.unindex(&key, &prev);
                    self.queue_dependents(meta::uid_of(&prev));
                }
                self.applied.remove(&key);
                self.updated.remove(&key);
                None
            }
            _ => {
                self.by_key.insert(key.clone(), object.clone());
                let prev = self.objects.insert(key.clone(), object.clone());
                if let Some(prev) = &prev {
                    self.unindex(&key, prev);
                }
                self.index(&key, &object);
                prev.filter(|_| kind == ChangeKind::Modified)
            }
        };
        self.histories.record(Change {
            rv: self.rv,
            kind,
            key,
            object,
            old,
            encoded: Arc::default(),
        });
    }

    fn index(&mut self, key: &ObjKey, obj: &Value) {
        let uid = meta::uid_of(obj);
        if !uid.is_empty() {
            self.uids.insert(uid.to_string(), key.clone());
        }
        let owners = meta::owner_uids(obj);
        for owner in &owners {
            self.dependents
                .entry((*owner).to_string())
                .or_default()
                .insert(key.clone());
        }
        if owners.iter().any(|o| !self.uids.contains_key(*o)) {
            self.orphan_candidates.insert(key.clone());
        }
        *self.per_namespace.entry(key.namespace.clone()).or_default() += 1;
    }

    fn unindex(&mut self, key: &ObjKey, obj: &Value) {
        let uid = meta::uid_of(obj);
        if self.uids.get(uid) == Some(key) {
            self.uids.remove(uid);
        }
        for owner in meta::owner_uids(obj) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
        if let Some(n) = self.per_namespace.get_mut(&key.namespace) {
            *n -= 1;
            if *n == 0 {
                self.per_namespace.remove(&key.namespace);
            }
        }
    }

    /// The dependents of a removed object become the sweep's to check.
    fn queue_dependents(&mut self, uid: &str) {
        let keys: Vec<ObjKey> = self.dependents(uid).cloned().collect();
        self.orphan_candidates.extend(keys);
    }

    /// Advance and return the global resourceVersion.
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }
}

#[cfg(test)]
mod tests;
