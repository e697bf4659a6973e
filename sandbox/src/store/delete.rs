//! Deletion: finalizers and deletionTimestamp, graceful pod deletion, namespace deletion,
//! and ownerReference garbage collection.

use super::{hooks::crd_storage, ChangeKind, Inner, ObjKey};
use crate::error::ApiError;
use crate::meta;
use crate::registry::{ResourceType, StorageKey};
use serde_json::{json, Value};

/// `propagationPolicy` of DeleteOptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Dependents are deleted in the background (the default).
    #[default]
    Background,
    /// Treated like Background.
    Foreground,
    /// Dependents lose their ownerReference and stay.
    Orphan,
}

/// The parts of `metav1.DeleteOptions` the sandbox honours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeleteOptions {
    /// Propagation policy.
    pub propagation: Propagation,
    /// gracePeriodSeconds (0 = immediate for pods).
    pub grace_period: Option<i64>,
    /// preconditions.uid
    pub precondition_uid: Option<String>,
    /// preconditions.resourceVersion
    pub precondition_rv: Option<String>,
}

impl DeleteOptions {
    /// Build from a DeleteOptions JSON body merged with query parameters.
    pub fn from_parts(
        body: Option<&Value>,
        query: &std::collections::HashMap<String, String>,
    ) -> Self {
        let empty = json!({});
        let body = body.unwrap_or(&empty);
        let policy = query
            .get("propagationPolicy")
            .map(String::as_str)
            .or_else(|| body["propagationPolicy"].as_str())
            .or_else(|| match body["orphanDependents"].as_bool() {
                Some(true) => Some("Orphan"),
                _ => None,
            });
        DeleteOptions {
            propagation: match policy {
                Some("Orphan") => Propagation::Orphan,
                Some("Foreground") => Propagation::Foreground,
                _ => Propagation::Background,
            },
            grace_period: query
                .get("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
                .or_else(|| body["gracePeriodSeconds"].as_i64()),
            precondition_uid: body["preconditions"]["uid"].as_str().map(String::from),
            precondition_rv: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(String::from),
        }
    }
}

impl Inner {
    /// Delete an object (DELETE). Returns the object as it was (or is, while finalizing).
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let key = Inner::key(rt, ns, name);
        let obj = self
            .by_key
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if opts
            .precondition_uid
            .as_deref()
            .is_some_and(|u| u != meta::uid_of(&obj))
            || opts
                .precondition_rv
                .as_deref()
                .is_some_and(|r| Some(r) != meta::meta_str(&obj, "resourceVersion"))
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let view_rt = rt.clone();
        self.delete_key(&key, opts)?;
        let after = self.by_key.get(&key).unwrap_or(&obj);
        Ok(self.view(&view_rt, after))
    }

    /// Delete by key with deletion semantics (finalizers, graceful pods, namespaces).
    pub(crate) fn delete_key(
        &mut self,
        key: &ObjKey,
        opts: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let Some(obj) = self.by_key.get(key).cloned() else {
            return Ok(());
        };
        if opts.propagation == Propagation::Orphan {
            self.orphan_dependents(meta::uid_of(&obj));
        }
        let is_ns = key.storage == StorageKey::new("", "namespaces");
        let pod_grace = key.storage == StorageKey::new("", "pods")
            && obj["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
            && opts.grace_period != Some(0);
        if meta::is_deleting(&obj) {
            if key.storage == StorageKey::new("", "pods") && opts.grace_period == Some(0) {
                self.remove(key, opts.propagation);
            }
            return Ok(());
        }
        if meta::has_finalizers(&obj) || pod_grace || is_ns {
            let mut new = (*obj).clone();
            let md = meta::meta_mut(&mut new);
            md.insert("deletionTimestamp".into(), json!(meta::now()));
            let grace = if pod_grace {
                opts.grace_period.unwrap_or(30)
            } else {
                0
            };
            md.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if is_ns {
                new["status"]["phase"] = json!("Terminating");
            }
            let rv = self.next_rv();
            meta::meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
            self.record(ChangeKind::Modified, key.clone(), new);
            if is_ns {
                self.delete_namespace_contents(&key.name);
            }
            return Ok(());
        }
        self.remove(key, opts.propagation);
        Ok(())
    }

    /// Remove an object now (DELETED event), then garbage-collect its dependents.
    pub fn remove(&mut self, key: &ObjKey, propagation: Propagation) {
        let Some(obj) = self.by_key.get(key).cloned() else {
            return;
        };
        let mut gone = (*obj).clone();
        let rv = self.next_rv();
        meta::meta_mut(&mut gone).insert("resourceVersion".into(), json!(rv.to_string()));
        self.record(ChangeKind::Deleted, key.clone(), gone.clone());
        if key.storage == crd_storage() {
            self.remove_crd(&gone);
        }
        let uid = meta::uid_of(&gone).to_string();
        if propagation == Propagation::Orphan {
            self.orphan_dependents(&uid);
        } else {
            self.collect_dependents(&uid);
        }
    }

    fn remove_crd(&mut self, crd: &Value) {
        let name = meta::name(crd).to_string();
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let storage = StorageKey::new(group, plural);
        let keys: Vec<ObjKey> = self
            .raw_list(&storage, None)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.remove(&k, Propagation::Background);
        }
        self.registry.unregister_crd(&name);
    }

    fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        if uid.is_empty() {
            return vec![];
        }
        self.dependents(uid).cloned().collect()
    }

    fn collect_dependents(&mut self, uid: &str) {
        for k in self.dependents_of(uid) {
            let other_owner_alive = self.by_key.get(&k).is_some_and(|o| {
                meta::owner_uids(o)
                    .iter()
                    .any(|u| *u != uid && self.uids.contains_key(*u))
            });
            if other_owner_alive {
                continue;
            }
            if let Err(e) = self.delete_key(&k, &DeleteOptions::default()) {
                tracing::warn!("garbage collection of {}/{}: {e}", k.namespace, k.name);
            }
        }
    }

    fn orphan_dependents(&mut self, uid: &str) {
        for k in self.dependents_of(uid) {
            let Some(old) = self.by_key.get(&k) else {
                continue;
            };
            let mut new = (**old).clone();
            if let Some(refs) = new["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|r| r["uid"].as_str() != Some(uid));
            }
            let rv = self.next_rv();
            meta::meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
            self.record(ChangeKind::Modified, k, new);
        }
    }

    fn delete_namespace_contents(&mut self, ns: &str) {
        let keys: Vec<ObjKey> = self
            .objects
            .keys()
            .filter(|k| k.namespace == ns)
            .cloned()
            .collect();
        for k in keys {
            if let Err(e) = self.delete_key(&k, &DeleteOptions::default()) {
                tracing::warn!("namespace deletion of {}/{}: {e}", k.namespace, k.name);
            }
        }
    }

    /// Periodic housekeeping: finish terminating namespaces that are empty, and collect
    /// objects whose owners no longer exist. It looks only at terminating namespaces and at the
    /// objects that lost (or never had) an owner, not at every object.
    pub fn sweep(&mut self) {
        let ns_storage = StorageKey::new("", "namespaces");
        let done: Vec<ObjKey> = self
            .raw_list(&ns_storage, None)
            .filter(|(_, o)| meta::is_deleting(o) && !meta::has_finalizers(o))
            .filter(|(k, _)| self.namespace_len(&k.name) == 0)
            .map(|(k, _)| k.clone())
            .collect();
        for k in done {
            self.remove(&k, Propagation::Background);
        }
        let candidates = std::mem::take(&mut self.orphan_candidates);
        let orphans: Vec<ObjKey> = candidates
            .into_iter()
            .filter(|k| {
                self.by_key.get(k).is_some_and(|o| {
                    let owners = meta::owner_uids(o);
                    !owners.is_empty()
                        && owners.iter().all(|u| !self.uids.contains_key(*u))
                        && !meta::is_deleting(o)
                })
            })
            .collect();
        for k in orphans {
            if let Err(e) = self.delete_key(&k, &DeleteOptions::default()) {
                tracing::warn!("orphan sweep of {}/{}: {e}", k.namespace, k.name);
                self.orphan_candidates.insert(k);
            }
        }
    }
}
