//! The in-memory object store: objects, the global resourceVersion, and the change history
//! that watches replay.

mod delete;
mod hooks;
mod names;
mod rules;
mod write;

pub use delete::{DeleteOptions, Propagation};

use crate::error::ApiError;
use crate::events;
use crate::registry::{Registry, ResourceType, StorageKey};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::watch;

/// How many changes the watch history keeps.
pub const HISTORY_LIMIT: usize = 10_000;

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
    pub object: Value,
    /// The object before a modification.
    pub old: Option<Value>,
}

/// The store's state, accessed under the lock.
#[derive(Debug, Clone)]
pub struct Inner {
    /// The current (latest) resourceVersion.
    pub rv: u64,
    /// Served resource types.
    pub registry: Registry,
    objects: BTreeMap<ObjKey, Value>,
    history: VecDeque<Change>,
    trimmed: u64,
    applied: HashMap<(ObjKey, String, bool), Value>,
    /// Whether writes are validated like a client's (off for a scheduler's binding).
    checked: bool,
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
            history: VecDeque::new(),
            trimmed: 0,
            applied: HashMap::new(),
            checked: true,
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
        self.objects
            .get(&Self::key(rt, ns, name))
            .map(|o| self.view(rt, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// The stored object for a key.
    pub fn raw(&self, key: &ObjKey) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Stored objects of a storage key, optionally in one namespace.
    pub fn raw_list<'a>(
        &'a self,
        storage: &'a StorageKey,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        self.objects
            .iter()
            .filter(move |(k, _)| k.storage == *storage && ns.is_none_or(|n| k.namespace == n))
    }

    /// List objects, as served by `rt`.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Value> {
        self.raw_list(&rt.storage, ns)
            .map(|(_, o)| self.view(rt, o))
            .collect()
    }

    /// Every stored object (for garbage collection sweeps).
    pub fn all_objects(&self) -> impl Iterator<Item = (&ObjKey, &Value)> {
        self.objects.iter()
    }

    /// The changes after `rv` for a storage key, or 410 Expired if the history no longer has them.
    pub fn changes_since(&self, storage: &StorageKey, rv: u64) -> Result<Vec<Change>, ApiError> {
        if rv < self.trimmed {
            return Err(ApiError::expired(&rv.to_string()));
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self
            .history
            .range(start..)
            .filter(|c| c.key.storage == *storage)
            .cloned()
            .collect())
    }

    /// Record a change and store (or remove) the object.
    fn record(&mut self, kind: ChangeKind, key: ObjKey, object: Value, old: Option<Value>) {
        match kind {
            ChangeKind::Deleted => {
                self.objects.remove(&key);
                self.applied.retain(|(k, _, _), _| *k != key);
            }
            _ => {
                self.objects.insert(key.clone(), object.clone());
            }
        }
        self.history.push_back(Change {
            rv: self.rv,
            kind,
            key,
            object,
            old,
        });
        while self.history.len() > HISTORY_LIMIT {
            if let Some(c) = self.history.pop_front() {
                self.trimmed = c.rv;
            }
        }
    }

    /// Advance and return the global resourceVersion.
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }
}
