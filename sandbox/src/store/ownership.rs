//! Field ownership as a real API server shows it in `managedFields`, to the extent its clients
//! rely on it: each field manager's last apply (an `Apply` entry, per subresource) and the fields
//! a create with a `fieldManager` set (an `Update` entry). A write's response carries them; a
//! patch that sets `metadata.managedFields` replaces them, as client-go's `csaupgrade` does to
//! move a create's fields into an apply's, so that the next apply removes what it no longer
//! sets. A GET shows them too; lists and watches do not. Not modelled: the `Update` entries of
//! updates and non-apply patches, and field sets of what defaulting filled in (the sandbox
//! records the fields a create's body set). Field sets name map keys (`f:NAME`) and stop at
//! lists, which the sandbox's apply replaces whole (a real server merges a list of containers
//! by name).

use super::{Inner, ObjKey};
use crate::meta;
use crate::registry::ResourceType;
use serde_json::{json, Map, Value};

/// Metadata fields the server sets, which no field set names.
const SERVER_METADATA: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
];

/// The field set (FieldsV1) of a configuration: every map key down to the leaves, which are
/// scalars or lists.
pub fn fields_of(config: &Value) -> Value {
    fn walk(v: &Value, top: bool, in_metadata: bool) -> Value {
        let Some(m) = v.as_object() else {
            return json!({});
        };
        let mut out = Map::new();
        for (k, v) in m {
            let skipped = (top && matches!(k.as_str(), "apiVersion" | "kind" | "status"))
                || (in_metadata && SERVER_METADATA.contains(&k.as_str()));
            if skipped || v.is_null() {
                continue;
            }
            let sub = if v.as_object().is_some_and(|o| !o.is_empty()) {
                walk(v, false, top && k == "metadata")
            } else {
                json!({})
            };
            out.insert(format!("f:{k}"), sub);
        }
        Value::Object(out)
    }
    walk(config, true, false)
}

/// The part of `live` that the field set `fields` names: the configuration a manager owning
/// those fields would have applied.
pub fn project(live: &Value, fields: &Value) -> Value {
    let mut out = Map::new();
    if let (Some(l), Some(f)) = (live.as_object(), fields.as_object()) {
        for (k, sub) in f {
            let Some(name) = k.strip_prefix("f:") else {
                continue;
            };
            let Some(value) = l.get(name) else { continue };
            let deeper = sub.as_object().is_some_and(|s| s.keys().any(|k| k != "."));
            let v = if deeper && value.is_object() {
                project(value, sub)
            } else {
                value.clone()
            };
            out.insert(name.to_string(), v);
        }
    }
    Value::Object(out)
}

fn entry(rt: &ResourceType, manager: &str, operation: &str, status: bool, fields: Value) -> Value {
    let mut e = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": rt.api_version(),
        "time": meta::now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if status {
        e["subresource"] = json!("status");
    }
    e
}

impl Inner {
    /// The object's `managedFields`, as a real server shows them in a write's response.
    pub(super) fn managed_fields(&self, rt: &ResourceType, key: &ObjKey) -> Vec<Value> {
        let mut entries = Vec::new();
        if let Some(applied) = self.applied.get(key) {
            let mut managers: Vec<_> = applied.iter().collect();
            managers.sort_by(|a, b| a.0.cmp(b.0));
            for ((manager, status), config) in managers {
                entries.push(entry(rt, manager, "Apply", *status, fields_of(config)));
            }
        }
        if let Some((manager, fields)) = self.created.get(key) {
            entries.push(entry(rt, manager, "Update", false, fields.clone()));
        }
        entries
    }

    /// An object as a GET answers it: with its `managedFields` (lists and watches leave them
    /// out, which a real server does not).
    pub fn get_with_managed_fields(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, crate::error::ApiError> {
        let view = self.get(rt, ns, name)?;
        Ok(self.with_managed_fields(rt, &Inner::key(rt, ns, name), view))
    }

    /// `view` with the object's `managedFields`, when anything owns a field of it.
    pub(super) fn with_managed_fields(
        &self,
        rt: &ResourceType,
        key: &ObjKey,
        mut view: Value,
    ) -> Value {
        let entries = self.managed_fields(rt, key);
        if !entries.is_empty() && view.is_object() {
            meta::meta_mut(&mut view).insert("managedFields".into(), Value::Array(entries));
        }
        view
    }

    /// Replaces the ownership of `key` by the `managedFields` a client wrote over `live`: an
    /// entry left out is dropped, an `Apply` entry's fields become what its manager applied.
    pub(super) fn replace_managed_fields(&mut self, key: &ObjKey, live: &Value, entries: &[Value]) {
        let mut applied = std::collections::HashMap::new();
        let mut created = None;
        for e in entries {
            let manager = e["manager"].as_str().unwrap_or_default().to_string();
            let status = e["subresource"].as_str() == Some("status");
            let fields = e.get("fieldsV1").cloned().unwrap_or_else(|| json!({}));
            match e["operation"].as_str() {
                Some("Apply") => {
                    applied.insert((manager, status), project(live, &fields));
                }
                Some("Update") if !status => {
                    let was = self.created.get(key).map(|(m, _)| m.as_str());
                    if was == Some(manager.as_str()) {
                        created = Some((manager, fields));
                    }
                }
                _ => {}
            }
        }
        match created {
            Some(c) => self.created.insert(key.clone(), c),
            None => self.created.remove(key),
        };
        if applied.is_empty() {
            self.applied.remove(key);
        } else {
            self.applied.insert(key.clone(), applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_set_names_map_keys_down_to_scalars_and_lists_without_server_fields() {
        let config = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "labels": {"a": "1"}, "annotations": {}},
            "data": {"x": "1"},
            "spec": {"ports": [{"port": 80}], "empty": null},
            "status": {"phase": "x"},
        });
        assert_eq!(
            fields_of(&config),
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:annotations": {}},
                   "f:data": {"f:x": {}}, "f:spec": {"f:ports": {}}})
        );
    }

    #[test]
    fn a_projection_takes_the_named_fields_of_the_live_object() {
        let live = json!({"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}},
                          "data": {"x": "1", "y": "2"}, "spec": {"ports": [{"port": 80}]}});
        let fields = json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                            "f:data": {"f:y": {}}, "f:spec": {"f:ports": {}}, "f:gone": {}});
        assert_eq!(
            project(&live, &fields),
            json!({"metadata": {"labels": {"a": "1"}}, "data": {"y": "2"},
                   "spec": {"ports": [{"port": 80}]}})
        );
    }
}
