//! Field ownership as a real API server shows it in `managedFields`, to the extent its clients
//! rely on it: each field manager's last apply (an `Apply` entry, per subresource) and the fields
//! a create with a `fieldManager` set (an `Update` entry). A write's response carries them; a
//! patch that sets `metadata.managedFields` replaces them, as client-go's `csaupgrade` does to
//! move a create's fields into an apply's, so that the next apply removes what it no longer
//! sets. An apply removes nothing another entry owns. One with `force` takes from the other
//! entries the fields it changes; one without is refused with a conflict per such field
//! ([`Inner::conflicts`]), as kube-apiserver's field manager refuses it.
//! A GET shows them too; lists and watches do not. Field sets name map keys (`f:NAME`) and the
//! items of associative lists (`k:{...}`, `v:...`, [`crate::lists`]); other lists are one field.
//! Not modelled: the `Update` entries of updates and non-apply patches, and field sets of what
//! defaulting filled in (the sandbox records the fields a create's body set).

use super::{Inner, ObjKey};
use crate::lists::{element, ListType, Schema};
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
/// scalars and atomic lists; an associative list names each item (`k:{...}` or `v:...`, with a
/// `.` for the item itself), as a real server's field sets do.
pub fn fields_of(config: &Value, schema: Schema) -> Value {
    fn walk<'a>(v: &'a Value, path: &mut Vec<&'a str>, schema: Schema) -> Value {
        match v {
            Value::Object(m) => {
                let top = path.is_empty();
                let in_metadata = path.as_slice() == ["metadata"];
                let mut out = Map::new();
                for (k, v) in m {
                    let skipped = (top && matches!(k.as_str(), "apiVersion" | "kind" | "status"))
                        || (in_metadata && SERVER_METADATA.contains(&k.as_str()));
                    if skipped || v.is_null() {
                        continue;
                    }
                    path.push(k);
                    out.insert(format!("f:{k}"), walk(v, path, schema));
                    path.pop();
                }
                Value::Object(out)
            }
            Value::Array(items) if !items.is_empty() && schema.at(path) != ListType::Atomic => {
                let ty = schema.at(path);
                let mut out = Map::new();
                out.insert(".".into(), json!({}));
                for item in items {
                    let Some(name) = element(ty, item) else {
                        continue;
                    };
                    let sub = match ty {
                        ListType::Map(_) => {
                            let mut sub = walk(item, path, schema);
                            if let Some(m) = sub.as_object_mut() {
                                m.insert(".".into(), json!({}));
                            }
                            sub
                        }
                        _ => json!({}),
                    };
                    out.insert(name, sub);
                }
                Value::Object(out)
            }
            _ => json!({}),
        }
    }
    walk(config, &mut Vec::new(), schema)
}

/// The part of `live` that the field set `fields` names: the configuration a manager owning
/// those fields would have applied.
pub fn project(live: &Value, fields: &Value, schema: Schema) -> Value {
    fn walk<'a>(live: &'a Value, fields: &Value, path: &mut Vec<&'a str>, schema: Schema) -> Value {
        let named = |f: &Value| f.as_object().is_some_and(|s| s.keys().any(|k| k != "."));
        match live {
            Value::Object(l) => {
                let mut out = Map::new();
                for (k, sub) in fields.as_object().into_iter().flatten() {
                    let Some(name) = k.strip_prefix("f:") else {
                        continue;
                    };
                    let Some((key, value)) = l.get_key_value(name) else {
                        continue;
                    };
                    path.push(key);
                    let v = if named(sub) {
                        walk(value, sub, path, schema)
                    } else {
                        value.clone()
                    };
                    path.pop();
                    out.insert(name.to_string(), v);
                }
                Value::Object(out)
            }
            Value::Array(items) if named(fields) => {
                let ty = schema.at(path);
                let kept = items.iter().filter_map(|item| {
                    let sub = fields.get(element(ty, item)?)?;
                    Some(match ty {
                        ListType::Map(_) if named(sub) => walk(item, sub, path, schema),
                        _ => item.clone(),
                    })
                });
                Value::Array(kept.collect())
            }
            other => other.clone(),
        }
    }
    walk(live, fields, &mut Vec::new(), schema)
}

/// `fields` without what a forced apply of `applied` over `live` changes: a field whose applied
/// value differs from the live one (a scalar or an atomic list) goes to the applier, and its
/// other owners stop naming it. A map or list item some of whose fields went keeps the rest.
pub fn without_changed(fields: &Value, live: &Value, applied: &Value, schema: Schema) -> Value {
    fn walk<'a>(
        fields: &mut Map<String, Value>,
        live: Option<&Value>,
        applied: &'a Value,
        path: &mut Vec<&'a str>,
        schema: Schema,
    ) {
        let Some(a) = applied.as_object() else {
            return;
        };
        for (k, av) in a {
            let key = format!("f:{k}");
            let Some(Value::Object(sub)) = fields.get_mut(&key) else {
                continue;
            };
            let lv = live.and_then(|l| l.get(k));
            path.push(k);
            let had_parts = !sub.is_empty();
            match (av, schema.at(path)) {
                (Value::Object(_), _) if had_parts => walk(sub, lv, av, path, schema),
                (Value::Array(items), ty @ ListType::Map(_)) if had_parts => {
                    for item in items {
                        let Some(name) = element(ty, item) else {
                            continue;
                        };
                        let live_item = lv.and_then(Value::as_array).and_then(|l| {
                            l.iter().find(|i| element(ty, i).as_ref() == Some(&name))
                        });
                        if let Some(Value::Object(isub)) = sub.get_mut(&name) {
                            walk(isub, live_item, item, path, schema);
                        }
                    }
                }
                (Value::Array(_), ListType::Set) if had_parts => {}
                _ => {
                    if lv != Some(av) {
                        fields.remove(&key);
                        path.pop();
                        continue;
                    }
                }
            }
            path.pop();
            if had_parts
                && fields
                    .get(&key)
                    .and_then(Value::as_object)
                    .is_some_and(Map::is_empty)
            {
                fields.remove(&key);
            }
        }
    }
    let mut out = fields.clone();
    if let Some(m) = out.as_object_mut() {
        walk(m, Some(live), applied, &mut Vec::new(), schema);
    }
    out
}

/// The leaves of the field set `fields` that `kept` (a part of it) no longer names, as
/// structured-merge-diff prints a path (`.metadata.labels.a`, `.spec.ports[port=80,protocol="TCP"]`,
/// `.metadata.finalizers[="f"]`).
pub fn lost_paths(fields: &Value, kept: &Value) -> Vec<String> {
    fn element(key: &str) -> String {
        if let Some(name) = key.strip_prefix("f:") {
            return format!(".{name}");
        }
        if let Some(value) = key.strip_prefix("v:") {
            return format!("[={value}]");
        }
        if let Some(Ok(Value::Object(keys))) =
            key.strip_prefix("k:").map(serde_json::from_str::<Value>)
        {
            let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            return format!("[{}]", pairs.join(","));
        }
        format!("[{key}]")
    }
    fn walk(fields: &Value, kept: Option<&Value>, path: &str, out: &mut Vec<String>) {
        let Some(m) = fields.as_object() else {
            return;
        };
        if m.is_empty() {
            if kept.is_none() {
                out.push(path.to_string());
            }
            return;
        }
        for (k, v) in m {
            let below = kept.and_then(|kept| kept.get(k));
            if k == "." {
                if below.is_none() {
                    out.push(path.to_string());
                }
            } else {
                walk(v, below, &format!("{path}{}", element(k)), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(fields, Some(kept), "", &mut out);
    out
}

/// The union of two field sets. A field one names whole (`{}`) and the other by its parts is
/// named both ways (`.` and the parts).
pub fn union(a: &Value, b: &Value) -> Value {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) if x.is_empty() && !y.is_empty() => union(&json!({".": {}}), b),
        (Some(x), Some(y)) if y.is_empty() && !x.is_empty() => union(a, &json!({".": {}})),
        (Some(x), Some(y)) => {
            let mut out = x.clone();
            for (k, v) in y {
                let merged = match out.get(k) {
                    Some(w) => union(w, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

fn entry(
    rt: &ResourceType,
    manager: &str,
    operation: &str,
    status: bool,
    fields: Value,
    time: String,
) -> Value {
    let mut e = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": rt.api_version(),
        "time": time,
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
                entries.push(entry(
                    rt,
                    manager,
                    "Apply",
                    *status,
                    fields_of(config, rt.schema()),
                    meta::now(),
                ));
            }
        }
        if let Some((manager, fields)) = self.created.get(key) {
            // The create's time, which the entry keeps until its manager writes again.
            let created = self
                .by_key
                .get(key)
                .and_then(|o| meta::meta_str(o, "creationTimestamp").map(String::from))
                .unwrap_or_else(meta::now);
            entries.push(entry(rt, manager, "Update", false, fields.clone(), created));
        }
        entries
    }

    /// A forced apply of `applied` by `applier` over `live` takes what it changes from the other
    /// entries ([`without_changed`]); an entry left with no fields is dropped.
    pub(super) fn take_changed(
        &mut self,
        rt: &ResourceType,
        key: &ObjKey,
        applier: &(String, bool),
        live: &Value,
        applied: &Value,
    ) {
        let schema = rt.schema();
        let empty = |f: &Value| f.as_object().is_none_or(Map::is_empty);
        if let Some((manager, fields)) = self.created.get(key) {
            let left = without_changed(fields, live, applied, schema);
            if empty(&left) {
                self.created.remove(key);
            } else {
                let manager = manager.clone();
                self.created.insert(key.clone(), (manager, left));
            }
        }
        if let Some(appliers) = self.applied.get_mut(key) {
            appliers.retain(|manager, config| {
                if manager == applier || manager.1 != applier.1 {
                    return true;
                }
                let left = without_changed(&fields_of(config, schema), live, applied, schema);
                *config = project(config, &left, schema);
                !empty(&left)
            });
        }
    }

    /// The fields an apply of `applied` by `applier` over `live` would take from other managers
    /// (those of the same subresource, and the create's `Update` entry): each as the manager
    /// kube-apiserver names in its conflict (`"m"`, or `"m" using v1` for an `Update` entry, both
    /// recorded from a real server in `tests/fidelity.rs`; a status apply's `"m" with subresource
    /// "status"` follows its field manager's `printManager` and is not recorded) and the field's
    /// path. Empty when it changes nothing another manager owns.
    pub(super) fn conflicts(
        &self,
        rt: &ResourceType,
        key: &ObjKey,
        applier: &(String, bool),
        live: &Value,
        applied: &Value,
    ) -> Vec<(String, String)> {
        let schema = rt.schema();
        let lost =
            |fields: &Value| lost_paths(fields, &without_changed(fields, live, applied, schema));
        let mut out = Vec::new();
        if let Some((manager, fields)) = self.created.get(key).filter(|_| !applier.1) {
            let who = format!("{manager:?} using {}", rt.api_version());
            out.extend(lost(fields).into_iter().map(|p| (who.clone(), p)));
        }
        let mut others: Vec<_> = self
            .applied
            .get(key)
            .into_iter()
            .flatten()
            .filter(|(manager, _)| *manager != applier && manager.1 == applier.1)
            .collect();
        others.sort_by(|a, b| a.0.cmp(b.0));
        for ((manager, status), config) in others {
            let who = if *status {
                format!("{manager:?} with subresource \"status\"")
            } else {
                format!("{manager:?}")
            };
            out.extend(
                lost(&fields_of(config, schema))
                    .into_iter()
                    .map(|p| (who.clone(), p)),
            );
        }
        out
    }

    /// What managers other than `applier` (a manager and whether it applies to the status) own
    /// of `key`: the union of their field sets.
    pub(super) fn owned_by_others(
        &self,
        rt: &ResourceType,
        key: &ObjKey,
        applier: &(String, bool),
    ) -> Value {
        let mut owned = json!({});
        for (manager, config) in self.applied.get(key).into_iter().flatten() {
            if manager != applier {
                owned = union(&owned, &fields_of(config, rt.schema()));
            }
        }
        if let Some((_, fields)) = self.created.get(key) {
            owned = union(&owned, fields);
        }
        owned
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
    pub(super) fn replace_managed_fields(
        &mut self,
        rt: &ResourceType,
        key: &ObjKey,
        live: &Value,
        entries: &[Value],
    ) {
        let mut applied = std::collections::HashMap::new();
        let mut created = None;
        for e in entries {
            let manager = e["manager"].as_str().unwrap_or_default().to_string();
            let status = e["subresource"].as_str() == Some("status");
            let fields = e.get("fieldsV1").cloned().unwrap_or_else(|| json!({}));
            match e["operation"].as_str() {
                Some("Apply") => {
                    applied.insert((manager, status), project(live, &fields, rt.schema()));
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
            fields_of(&config, Schema::CONFIG_MAP),
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:annotations": {}},
                   "f:data": {"f:x": {}}, "f:spec": {"f:ports": {}}})
        );
        // A Service's ports are a list-map: its field set names each port.
        assert_eq!(
            fields_of(&config, Schema::SERVICE)["f:spec"],
            json!({"f:ports": {".": {}, r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}})
        );
        let finalizers = json!({"metadata": {"finalizers": ["a", "b"]}});
        assert_eq!(
            fields_of(&finalizers, Schema::CONFIG_MAP),
            json!({"f:metadata": {"f:finalizers": {".": {}, r#"v:"a""#: {}, r#"v:"b""#: {}}}})
        );
    }

    #[test]
    fn a_projection_takes_the_named_fields_of_the_live_object() {
        let live = json!({"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}},
                          "data": {"x": "1", "y": "2"}, "spec": {"ports": [{"port": 80}]}});
        let fields = json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
                            "f:data": {"f:y": {}}, "f:spec": {"f:ports": {}}, "f:gone": {}});
        assert_eq!(
            project(&live, &fields, Schema::CONFIG_MAP),
            json!({"metadata": {"labels": {"a": "1"}}, "data": {"y": "2"},
                   "spec": {"ports": [{"port": 80}]}})
        );
        let live =
            json!({"spec": {"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "b"}]}});
        let fields = json!({"f:spec": {"f:ports": {r#"k:{"port":81,"protocol":"TCP"}"#: {
            ".": {}, "f:port": {}}}}});
        assert_eq!(
            project(&live, &fields, Schema::SERVICE),
            json!({"spec": {"ports": [{"port": 81}]}}),
            "the items named, with their fields named"
        );
    }

    #[test]
    fn a_forced_apply_takes_what_it_changes() {
        let fields = json!({"f:data": {"f:a": {}, "f:b": {}}, "f:spec": {"f:ports": {".": {},
            r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}, "f:name": {}}}}});
        let live =
            json!({"data": {"a": "1", "b": "2"}, "spec": {"ports": [{"port": 80, "name": "x"}]}});
        let applied =
            json!({"data": {"a": "9", "b": "2"}, "spec": {"ports": [{"port": 80, "name": "y"}]}});
        assert_eq!(
            without_changed(&fields, &live, &applied, Schema::SERVICE),
            json!({"f:data": {"f:b": {}}, "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}})
        );
        let all = json!({"data": {"a": "9", "b": "9"}});
        assert_eq!(
            without_changed(
                &json!({"f:data": {"f:a": {}, "f:b": {}}}),
                &live,
                &all,
                Schema::SERVICE
            ),
            json!({}),
            "a map left with nothing goes"
        );
    }

    #[test]
    fn the_paths_an_owner_loses_are_printed_as_structured_merge_diff_prints_them() {
        let fields = json!({"f:metadata": {"f:labels": {"f:a": {}, "f:b": {}},
            "f:finalizers": {".": {}, r#"v:"x""#: {}}},
            "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}, "f:name": {}}}}});
        let kept = json!({"f:metadata": {"f:labels": {"f:b": {}}, "f:finalizers": {".": {}}},
            "f:spec": {"f:ports": {".": {},
                r#"k:{"port":80,"protocol":"TCP"}"#: {".": {}, "f:port": {}}}}});
        assert_eq!(
            lost_paths(&fields, &kept),
            [
                ".metadata.finalizers[=\"x\"]",
                ".metadata.labels.a",
                ".spec.ports[port=80,protocol=\"TCP\"].name",
            ]
        );
        assert!(lost_paths(&fields, &fields).is_empty());
    }

    #[test]
    fn a_union_names_what_either_names() {
        assert_eq!(
            union(
                &json!({"f:a": {}, "f:b": {"f:c": {}}}),
                &json!({"f:a": {"f:x": {}}, "f:d": {}})
            ),
            json!({"f:a": {".": {}, "f:x": {}}, "f:b": {"f:c": {}}, "f:d": {}})
        );
    }
}
