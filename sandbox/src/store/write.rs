//! Create, update and patch, with status-subresource isolation, generation bumps,
//! optimistic concurrency and no-op detection.

use super::{ChangeKind, Inner, ObjKey};
use crate::error::ApiError;
use crate::meta;
use crate::patch::{self, PatchType};
use crate::registry::ResourceType;
use serde_json::{json, Value};

/// Whether `a` and `b` are equal apart from the keys `ignored` names (at their top level),
/// compared in place instead of on copies of both.
fn equal_except(a: &Value, b: &Value, ignored: impl Fn(&str) -> bool) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| !ignored(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !ignored(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Whether `a` and `b` differ outside the fields that do not take part in the generation
/// comparison (metadata, status when it is a subresource, apiVersion, kind).
fn spec_differs(rt: &ResourceType, a: &Value, b: &Value) -> bool {
    !equal_except(a, b, |k| {
        matches!(k, "metadata" | "apiVersion" | "kind") || (rt.status && k == "status")
    })
}

/// The `managedFields` a client's body writes, which replace the object's (a write of the status
/// subresource cannot: the caller asks only for other writes): none when they are the ones
/// stored, as a body read from the object and written back has them.
fn written_owners(body: &Value, old: &Value) -> Option<Vec<Value>> {
    match body["metadata"].get("managedFields") {
        Some(Value::Array(entries))
            if old["metadata"].get("managedFields") != body["metadata"].get("managedFields") =>
        {
            Some(entries.clone())
        }
        _ => None,
    }
}

/// Whether `a` and `b` are the same object but for their `managedFields` (and resourceVersion):
/// whether a write of `a` over `b` changes anything that ownership follows.
fn same_but_owners(a: &Value, b: &Value) -> bool {
    equal_except(a, b, |k| k == "metadata")
        && equal_except(&a["metadata"], &b["metadata"], |k| {
            matches!(k, "managedFields" | "resourceVersion")
        })
}

/// Whose fields a create's are ([`Inner::create_as`]).
pub(super) enum Creator<'a> {
    /// Nobody's: one of the sandbox's own controllers, or an Event.
    Nobody,
    /// The `Update` entry of a field manager, from the body it sent.
    Update(&'a str, Value),
    /// The `Apply` entry of a field manager, from the configuration it applied.
    Apply((String, bool), Value),
}

impl Inner {
    /// Create an object (POST), as one of the sandbox's own controllers (owning no field).
    pub fn create(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        self.create_as(rt, ns, obj, Creator::Nobody)
    }

    /// Create an object (POST) whose fields are `creator`'s: its entry is in the stored
    /// object's `managedFields`.
    pub(super) fn create_as(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: Value,
        creator: Creator<'_>,
    ) -> Result<Value, ApiError> {
        let mut obj = self.unview(rt, obj);
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        if !rt.is_event() {
            obj["apiVersion"] = json!(rt.api_version());
            obj["kind"] = json!(rt.kind);
        }
        let md = meta::meta_mut(&mut obj);
        let mut name = md
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // The name as sent: admission sees it before a generated name is chosen.
        let sent_name = name.clone();
        if name.is_empty() {
            match md.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", meta::name_suffix());
                }
                _ => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ))
                }
            }
        }
        let body_ns = md
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if rt.namespaced {
            let path_ns = ns.unwrap_or_default();
            if !body_ns.is_empty() && body_ns != path_ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            if path_ns.is_empty() {
                return Err(ApiError::bad_request("a namespace is required"));
            }
            md.insert("namespace".into(), json!(path_ns));
        } else {
            md.remove("namespace");
        }
        md.insert("name".into(), json!(name));
        md.insert("uid".into(), json!(meta::uid()));
        md.insert("creationTimestamp".into(), json!(meta::now()));
        for f in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "generation",
        ] {
            md.remove(f);
        }
        if rt.generation {
            md.insert("generation".into(), json!(1));
        }
        let key = Inner::key(rt, ns, &name);
        if rt.namespaced {
            let ns_key = ObjKey {
                storage: crate::registry::StorageKey::new("", "namespaces"),
                namespace: String::new(),
                name: key.namespace.clone(),
            };
            match self.by_key.get(&ns_key) {
                None => return Err(ApiError::not_found("", "namespaces", &key.namespace)),
                // Only creates are refused; updates and patches of existing objects still work.
                Some(n) if meta::is_deleting(n) => {
                    return Err(ApiError::namespace_terminating(
                        &rt.group,
                        &rt.plural,
                        &sent_name,
                        &key.namespace,
                    ))
                }
                Some(_) => {}
            }
        }
        // Admission (the namespace lifecycle above) answers before storage does.
        if self.by_key.contains_key(&key) {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        if rt.status && !rt.is_event() {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        obj = self.admit(rt, obj, None, false)?;
        self.create_defaults(rt, &mut obj);
        let created_at = meta::meta_str(&obj, "creationTimestamp").map(String::from);
        let created_at = created_at.unwrap_or_else(meta::now);
        match creator {
            Creator::Nobody => {}
            Creator::Update(manager, body) => {
                self.note_create(rt, &key, &body, manager, created_at);
            }
            Creator::Apply(applier, config) => {
                let applied = super::ownership::Applied {
                    config,
                    time: Some(created_at),
                };
                self.applied
                    .entry(key.clone())
                    .or_default()
                    .insert(applier, applied);
            }
        }
        self.stamp(rt, &key, &mut obj);
        let rv = self.next_rv();
        meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        self.after_write(rt, &obj);
        let view = self.view(rt, &obj);
        self.record(ChangeKind::Added, key, obj);
        Ok(view)
    }

    /// Create an object (POST) as `manager`, whose fields the object's `managedFields` then
    /// name (Events aside: nothing reads their ownership).
    pub fn create_by(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: Value,
        manager: Option<&str>,
    ) -> Result<Value, ApiError> {
        let Some(manager) = manager.filter(|m| !m.is_empty() && !rt.is_event()) else {
            return self.create(rt, ns, obj);
        };
        let body = obj.clone();
        self.create_as(rt, ns, obj, Creator::Update(manager, body))
    }

    /// Replace an object (PUT), or its status when `status` is true, as one of the sandbox's
    /// own controllers, which owns no field.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        self.update_by(rt, ns, name, obj, status, None)
    }

    /// Replace an object (PUT), or its status when `status` is true, as the field manager
    /// `manager`, whose `Update` entry then names what it set ([`ownership`](super::ownership)).
    pub fn update_by(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        status: bool,
        manager: Option<&str>,
    ) -> Result<Value, ApiError> {
        let obj = self.unview(rt, obj);
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let body_name = meta::name(&obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let key = Inner::key(rt, ns, name);
        let old = self
            .by_key
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if rt.crd.is_some() && meta::meta_str(&obj, "resourceVersion").is_none_or(str::is_empty) {
            // A custom resource's PUT is never unconditional (a built-in's is).
            let cause = crate::validation::Cause::invalid(
                "metadata.resourceVersion",
                "0",
                "must be specified for an update",
            );
            return Err(ApiError::invalid_fields(
                &rt.group,
                &rt.plural,
                name,
                &[cause],
            ));
        }
        self.check_rv(rt, &old, &obj)?;
        self.write_by(rt, key, &old, obj, status, manager)
    }

    /// Writes `candidate` (a PUT's body, or a patch applied) over `old` as the field manager
    /// `manager`, with its ownership: the `managedFields` the client wrote replace the
    /// object's, then the write takes what it changed ([`ownership`](super::ownership)), when
    /// the object changed; the object is stored with the `managedFields` that result. Returns
    /// the stored view.
    fn write_by(
        &mut self,
        rt: &ResourceType,
        key: ObjKey,
        old: &Value,
        candidate: Value,
        status: bool,
        manager: Option<&str>,
    ) -> Result<Value, ApiError> {
        // A client that writes managedFields replaces the object's (`csaupgrade`'s patch).
        let owners = (!status).then(|| written_owners(&candidate, old)).flatten();
        let change = self.draw_change(rt, &key, old, &candidate, status, manager);
        let mut new = self.prepare(rt, old, candidate, status)?;
        let changed = !same_but_owners(&new, old);
        if let Some(entries) = &owners {
            self.replace_managed_fields(rt, &key, &new, entries);
        }
        let change = change.filter(|_| changed);
        if owners.is_some() || change.is_some() {
            if let Some(change) = change {
                self.note_change(rt, &key, change, status, manager);
            }
            self.stamp(rt, &key, &mut new);
        }
        Ok(self.store(rt, key, old, new))
    }

    /// Sets a pod's `spec.nodeName` as the binding subresource does: a write no client's
    /// update may make. Returns the stored view.
    pub fn bind_node(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        pod: Value,
    ) -> Result<Value, ApiError> {
        self.checked = false;
        let result = self.update(rt, ns, name, pod, false);
        self.checked = true;
        result
    }

    fn check_rv(&self, rt: &ResourceType, old: &Value, new: &Value) -> Result<(), ApiError> {
        if let Some(rv) = meta::meta_str(new, "resourceVersion") {
            if Some(rv) != meta::meta_str(old, "resourceVersion") {
                return Err(ApiError::conflict(&rt.group, &rt.plural, meta::name(old)));
            }
        }
        Ok(())
    }

    /// Patch an object (PATCH), or its status when `status` is true, as the field manager `by`
    /// names.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        pt: PatchType,
        body: &Value,
        status: bool,
        by: super::Manager<'_>,
    ) -> Result<Value, ApiError> {
        let manager = by.name;
        let key = Inner::key(rt, ns, name);
        let old = self.by_key.get(&key).cloned();
        if pt == PatchType::Apply {
            let manager = manager.filter(|m| !m.is_empty()).ok_or_else(|| {
                ApiError::bad_request("PATCH of type apply requires fieldManager")
            })?;
            let mut applied = body.clone();
            if !applied.is_object() {
                return Err(ApiError::bad_request("the apply body must be an object"));
            }
            meta::meta_mut(&mut applied).remove("managedFields");
            let body_name = meta::name(&applied);
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(
                    "the name in the body does not match the URL",
                ));
            }
            let akey = (manager.to_string(), status);
            let Some(old) = old else {
                if status {
                    return Err(ApiError::not_found(&rt.group, &rt.plural, name));
                }
                let mut obj = applied.clone();
                meta::meta_mut(&mut obj).insert("name".into(), json!(name));
                return self.create_as(rt, ns, obj, Creator::Apply(akey, applied));
            };
            let live = self.view_ref(rt, &old);
            self.check_rv(rt, &live, &applied)?;
            if !by.force {
                let conflicts = self.conflicts(rt, &key, &akey, &live, &applied);
                if !conflicts.is_empty() {
                    return Err(ApiError::apply_conflict(&conflicts));
                }
            }
            let prev = self.applied.get(&key).and_then(|a| a.get(&akey)).cloned();
            let others = self.owned_by_others(rt, &key, &akey);
            let merged = patch::server_side_apply(
                &live,
                &applied,
                prev.as_ref().map(|p| &p.config),
                &others,
                rt.schema(),
            );
            let mut new = self.prepare(rt, &old, merged, status)?;
            // Forced, or without conflicts: it takes what it changes. Its entry's time is the
            // time of the last apply that changed the object.
            self.take_changed(rt, &key, &akey, &live, &applied);
            let time = if same_but_owners(&new, &old) {
                prev.and_then(|p| p.time)
            } else {
                Some(meta::now())
            };
            let applied = super::ownership::Applied {
                config: applied,
                time,
            };
            self.applied
                .entry(key.clone())
                .or_default()
                .insert(akey, applied);
            self.stamp(rt, &key, &mut new);
            return Ok(self.store(rt, key, &old, new));
        }
        let old = old.ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        let live = self.view_ref(rt, &old);
        let candidate = patch::apply_patch(pt, &live, body)?;
        self.check_rv(rt, &live, &candidate)?;
        let candidate = self.unview(rt, candidate);
        self.write_by(rt, key, &old, candidate, status, manager)
    }

    /// What a write of `candidate` over `old` would store, honouring the status subresource:
    /// admitted, with `old`'s server fields and `managedFields` (the caller stamps the
    /// ownership the write makes) and the generation it earns.
    fn prepare(
        &mut self,
        rt: &ResourceType,
        old: &Value,
        candidate: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let mut new = if status {
            let mut n = old.clone();
            match candidate.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(m) = n.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            n
        } else {
            let mut n = candidate;
            if rt.status {
                if let Some(m) = n.as_object_mut() {
                    match old.get("status") {
                        Some(s) => {
                            m.insert("status".into(), s.clone());
                        }
                        None => {
                            m.remove("status");
                        }
                    }
                }
            }
            let old_md = old["metadata"].clone();
            let md = meta::meta_mut(&mut n);
            for f in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
            ] {
                match old_md.get(f) {
                    Some(v) => md.insert(f.into(), v.clone()),
                    None => md.remove(f),
                };
            }
            n
        };
        if let Some(m) = new.as_object_mut() {
            m.insert("apiVersion".into(), old["apiVersion"].clone());
            m.insert("kind".into(), old["kind"].clone());
        }
        meta::meta_mut(&mut new).insert(
            "resourceVersion".into(),
            old["metadata"]["resourceVersion"].clone(),
        );
        new = self.admit(rt, new, Some(old), status)?;
        if rt.generation && spec_differs(rt, &new, old) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta::meta_mut(&mut new).insert("generation".into(), json!(g));
        }
        Ok(new)
    }

    /// Stores `new` (what [`prepare`](Self::prepare) made, with its `managedFields`) over
    /// `old` under a new resourceVersion, unless it is `old` again. Returns the stored view.
    fn store(&mut self, rt: &ResourceType, key: ObjKey, old: &Value, mut new: Value) -> Value {
        if new == *old {
            return self.view(rt, old);
        }
        let rv = self.next_rv();
        meta::meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        self.after_write(rt, &new);
        let view = self.view(rt, &new);
        let removed = meta::is_deleting(&new)
            && !meta::has_finalizers(&new)
            && !self.awaits_kubelet(&key, &new);
        self.record(ChangeKind::Modified, key.clone(), new);
        if removed {
            self.remove(&key, super::Propagation::Background);
        }
        view
    }
}
