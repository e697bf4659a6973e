//! Patch flavours: JSON merge, JSON patch, (simplified) strategic merge, and server-side apply.

use crate::error::ApiError;
use crate::lists::{element, ListType, Schema};
use serde_json::Value;

/// The patch types of the `Content-Type` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml`
    Apply,
}

impl PatchType {
    /// Parse a content type.
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchType::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// A body that may be YAML, of which JSON is a subset: read as JSON first, as clients send it
/// (kube, client-go), the JSON parser being many times faster than the YAML one.
pub fn json_or_yaml(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice::<Value>(body)
        .or_else(|_| serde_yaml::from_slice::<Value>(body))
        .map_err(|e| e.to_string())
}

/// Parse a patch body (YAML for apply, JSON otherwise).
pub fn parse_body(pt: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    let parsed = if pt == PatchType::Apply {
        json_or_yaml(body)
    } else {
        serde_json::from_slice::<Value>(body).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// Apply a non-apply patch to `target`.
pub fn apply_patch(pt: PatchType, target: &Value, patch: &Value) -> Result<Value, ApiError> {
    let mut out = target.clone();
    match pt {
        PatchType::Merge => json_patch::merge(&mut out, patch),
        PatchType::Strategic => strategic_merge(&mut out, patch),
        PatchType::Json => {
            // Like the API server's JSON patch library, a `test` of `null` passes on a missing
            // path (kube-runtime's finalizer helper relies on it for objects without finalizers).
            let mut patch = patch.clone();
            if let Some(ops) = patch.as_array_mut() {
                ops.retain(|op| {
                    let is_null_test = op.get("op").and_then(Value::as_str) == Some("test")
                        && op.get("value").is_some_and(Value::is_null);
                    let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
                    !(is_null_test && target.pointer(path).is_none_or(Value::is_null))
                });
            }
            let ops: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut out, &ops).map_err(|e| {
                ApiError::invalid("Patch", "", format!("the JSON patch failed: {e}"))
            })?;
        }
        PatchType::Apply => {
            return Err(ApiError::bad_request("apply patches need a field manager"));
        }
    }
    Ok(out)
}

fn is_named_list(v: &[Value]) -> bool {
    !v.is_empty()
        && v.iter()
            .all(|e| e.get("name").and_then(Value::as_str).is_some())
}

/// A strategic merge patch, simplified: maps merge, lists of objects keyed by `name` merge by
/// name (honouring `$patch: delete`), other lists are replaced; `$setElementOrder`,
/// `$retainKeys` and `$deleteFromPrimitiveList` directives are ignored.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(pmap) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pmap.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = pmap.clone();
        p.remove("$patch");
        *target = Value::Object(p);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Some(tmap) = target.as_object_mut() else {
        return;
    };
    for (k, v) in pmap {
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                tmap.remove(k);
            }
            Value::Object(_) => strategic_merge(tmap.entry(k.clone()).or_insert(Value::Null), v),
            Value::Array(items) => {
                let live = tmap.get_mut(k).and_then(Value::as_array_mut);
                match live {
                    Some(live) if is_named_list(items) && is_named_list(live) => {
                        merge_named(live, items)
                    }
                    _ => {
                        let kept: Vec<Value> = items
                            .iter()
                            .filter(|e| e.get("$patch").is_none())
                            .map(strip_directives)
                            .collect();
                        tmap.insert(k.clone(), Value::Array(kept));
                    }
                }
            }
            other => {
                tmap.insert(k.clone(), other.clone());
            }
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    let mut out = Value::Null;
    strategic_merge(&mut out, v);
    if v.is_object() {
        out
    } else {
        v.clone()
    }
}

fn merge_named(live: &mut Vec<Value>, items: &[Value]) {
    for item in items {
        let name = item.get("name").and_then(Value::as_str).unwrap_or_default();
        let pos = live
            .iter()
            .position(|e| e.get("name").and_then(Value::as_str) == Some(name));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                live.remove(i);
            }
            (Some(i), false) => strategic_merge(&mut live[i], item),
            (None, false) => live.push(strip_directives(item)),
            (None, true) => {}
        }
    }
}

/// Server-side apply: merge `applied` into `live`, then remove what the same manager applied last
/// time (`previous`) but omits now, unless another manager owns it (`others`, the union of the
/// other field sets, FieldsV1).
///
/// Maps merge key by key. Associative lists ([`crate::lists`]) merge item by item, keyed as their
/// schema says, in the order structured-merge-diff gives them: the applied items in their order,
/// each item only the live list has where it stood. Other lists and scalars are replaced.
pub fn server_side_apply(
    live: &Value,
    applied: &Value,
    previous: Option<&Value>,
    others: &Value,
    schema: Schema,
) -> Value {
    let mut out = live.clone();
    let mut path = Vec::new();
    merge_applied(&mut out, applied, schema, &mut path);
    if let Some(prev) = previous {
        remove_dropped(
            &mut out,
            prev,
            Some(applied),
            Some(others),
            schema,
            &mut path,
        );
    }
    out
}

fn merge_applied<'a>(
    target: &mut Value,
    applied: &'a Value,
    schema: Schema,
    path: &mut Vec<&'a str>,
) {
    let (Some(t), Some(a)) = (target.as_object_mut(), applied.as_object()) else {
        *target = applied.clone();
        return;
    };
    for (k, v) in a {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        path.push(k);
        match (t.get_mut(k), v) {
            (Some(slot @ Value::Object(_)), Value::Object(_)) if !schema.atomic(path) => {
                merge_applied(slot, v, schema, path)
            }
            (Some(Value::Array(live)), Value::Array(items))
                if schema.at(path) != ListType::Atomic =>
            {
                let merged = merge_list(live, items, schema.at(path), schema, path);
                *live = merged;
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
        path.pop();
    }
}

/// An associative list merged: walking both lists, an item only the live list has is kept where
/// it is, every applied item comes in the applied order (merged with its live counterpart), and
/// a live item the apply also names waits for its turn in the applied order.
fn merge_list<'a>(
    live: &[Value],
    applied: &'a [Value],
    ty: ListType,
    schema: Schema,
    path: &mut Vec<&'a str>,
) -> Vec<Value> {
    let name = |v: &Value| element(ty, v).unwrap_or_default();
    let live_names: Vec<String> = live.iter().map(name).collect();
    let applied_names: Vec<String> = applied.iter().map(name).collect();
    let in_applied: std::collections::HashSet<&str> =
        applied_names.iter().map(String::as_str).collect();
    let live_at = |n: &str| live_names.iter().position(|l| l == n);
    let mut shared = applied_names.iter().filter(|n| live_at(n).is_some());
    let mut next_shared = shared.next();
    let mut merged = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(live.len().max(applied.len()));
    let item = |r: usize, path: &mut Vec<&'a str>| {
        let mut v = match live_at(&applied_names[r]) {
            Some(l) => live[l].clone(),
            None => Value::Null,
        };
        if ty == ListType::Set || !v.is_object() {
            v = applied[r].clone();
        } else {
            merge_applied(&mut v, &applied[r], schema, path);
        }
        v
    };
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < applied.len() {
        if l < live.len() && r < applied.len() {
            if live_names[l] == applied_names[r] {
                out.push(item(r, path));
                merged.insert(applied_names[r].clone());
                l += 1;
                r += 1;
                next_shared = shared.next();
                continue;
            }
            let waits = in_applied.contains(live_names[l].as_str())
                && next_shared.is_some_and(|n| *n != live_names[l]);
            if waits {
                l += 1;
                continue;
            }
        }
        if l < live.len() {
            if !in_applied.contains(live_names[l].as_str()) {
                out.push(live[l].clone());
                l += 1;
                continue;
            }
            if merged.contains(&live_names[l]) {
                l += 1;
            }
        }
        if r < applied.len() {
            out.push(item(r, path));
            merged.insert(applied_names[r].clone());
            if next_shared.is_some_and(|n| *n == applied_names[r]) {
                next_shared = shared.next();
            }
            r += 1;
        }
    }
    out
}

/// Removes from `target` what `prev` set and `cur` does not (`cur` None: nothing of `prev` is
/// set any more), keeping what `others` (a field set) owns: a field another manager owns stays,
/// with those of its fields the other manager owns.
fn remove_dropped<'a>(
    target: &mut Value,
    prev: &'a Value,
    cur: Option<&Value>,
    others: Option<&Value>,
    schema: Schema,
    path: &mut Vec<&'a str>,
) {
    match (target, prev) {
        // An atomic struct or map is one field: the parent keeps or removes it whole.
        (Value::Object(_), _) if schema.atomic(path) => {}
        (Value::Object(t), Value::Object(p)) => {
            for (k, pv) in p {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                let owned = others.and_then(|o| o.get(format!("f:{k}")));
                let now = cur.and_then(|c| c.get(k));
                if now.is_none() && owned.is_none() {
                    t.remove(k);
                    continue;
                }
                if let Some(slot) = t.get_mut(k) {
                    path.push(k);
                    remove_dropped(slot, pv, now, owned, schema, path);
                    path.pop();
                }
            }
        }
        (Value::Array(t), Value::Array(p)) => {
            let ty = schema.at(path);
            if ty == ListType::Atomic {
                return;
            }
            let name = |v: &Value| element(ty, v).unwrap_or_default();
            let now: Vec<(String, &Value)> = match cur.and_then(Value::as_array) {
                Some(c) => c.iter().map(|v| (name(v), v)).collect(),
                None => Vec::new(),
            };
            for item in p {
                let n = name(item);
                let still = now.iter().find(|(m, _)| *m == n).map(|(_, v)| *v);
                let owned = others.and_then(|o| o.get(&n));
                let Some(at) = t.iter().position(|v| name(v) == n) else {
                    continue;
                };
                if still.is_none() && owned.is_none() {
                    t.remove(at);
                } else if ty != ListType::Set {
                    remove_dropped(&mut t[at], item, still, owned, schema, path);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_apply_body_is_json_or_yaml() {
        let json = parse_body(PatchType::Apply, br#"{"data": {"a": "1"}}"#).expect("json");
        let yaml = parse_body(PatchType::Apply, b"data:\n  a: \"1\"\n").expect("yaml");
        assert_eq!(json, json!({"data": {"a": "1"}}));
        assert_eq!(yaml, json);
        assert!(parse_body(PatchType::Apply, b"data: [unclosed").is_err());
    }

    #[test]
    fn an_apply_replaces_an_atomic_selector_whole() {
        let live = json!({"spec": {"selector": {"a": "b"}, "type": "ClusterIP"}});
        let applied = json!({"spec": {"selector": {"c": "d"}}});
        let others = json!({"f:spec": {"f:selector": {}, "f:type": {}}});
        let merged = server_side_apply(&live, &applied, None, &others, Schema::SERVICE);
        assert_eq!(
            merged,
            json!({"spec": {"selector": {"c": "d"}, "type": "ClusterIP"}})
        );
        // Not atomic elsewhere: a ConfigMap's data merges key by key.
        let live = json!({"data": {"a": "b"}});
        let merged = server_side_apply(
            &live,
            &json!({"data": {"c": "d"}}),
            None,
            &json!({}),
            Schema::CONFIG_MAP,
        );
        assert_eq!(merged, json!({"data": {"a": "b", "c": "d"}}));
    }

    #[test]
    fn strategic_merges_by_name() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let p = json!({"$setElementOrder/containers": [{"name": "a"}],
            "spec": {"containers": [{"name": "a", "image": "z"}, {"name": "b", "$patch": "delete"}]}});
        strategic_merge(&mut t, &p);
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "z"}]}})
        );
    }

    #[test]
    fn merge_and_json_patch() {
        let t = json!({"a": {"b": 1, "c": 2}});
        let m =
            apply_patch(PatchType::Merge, &t, &json!({"a": {"b": null, "d": [1]}})).expect("merge");
        assert_eq!(m, json!({"a": {"c": 2, "d": [1]}}));
        let j = apply_patch(
            PatchType::Json,
            &t,
            &json!([{"op": "replace", "path": "/a/b", "value": 5}]),
        )
        .expect("json");
        assert_eq!(j["a"]["b"], 5);
        assert!(apply_patch(
            PatchType::Json,
            &t,
            &json!([{"op": "test", "path": "/a/b", "value": 9}])
        )
        .is_err());
    }

    #[test]
    fn apply_removes_dropped_fields() {
        let live = json!({"spec": {"a": 1, "b": 2, "other": 3, "list": [1, 2]}});
        let prev = json!({"spec": {"a": 1, "b": 2, "list": [1, 2]}});
        let cur = json!({"spec": {"a": 5, "list": [3]}});
        let out = server_side_apply(&live, &cur, Some(&prev), &json!({}), Schema::CONFIG_MAP);
        assert_eq!(out, json!({"spec": {"a": 5, "other": 3, "list": [3]}}));
    }

    #[test]
    fn apply_keeps_a_dropped_field_another_manager_owns() {
        let live = json!({"data": {"a": "1", "b": "2"}});
        let prev = json!({"data": {"a": "1", "b": "2"}});
        let others = json!({"f:data": {"f:b": {}}});
        let out = server_side_apply(
            &live,
            &json!({"data": {"a": "1"}}),
            Some(&prev),
            &others,
            Schema::CONFIG_MAP,
        );
        assert_eq!(out, json!({"data": {"a": "1", "b": "2"}}));
        let out = server_side_apply(&live, &json!({}), Some(&prev), &others, Schema::CONFIG_MAP);
        assert_eq!(out, json!({"data": {"b": "2"}}), "the rest of data leaves");
    }

    fn env(names: &[&str]) -> Value {
        let env: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "value": n}))
            .collect();
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": env}]}}}})
    }

    fn env_names(v: &Value) -> Vec<String> {
        v["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|i| i["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn apply_merges_an_associative_list_by_key() {
        let live = env(&["A", "B", "C"]);
        let mut applied = env(&["C", "D", "A"]);
        applied["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = json!("new");
        let out = server_side_apply(&live, &applied, None, &json!({}), Schema::STATEFUL_SET);
        assert_eq!(env_names(&out), ["B", "C", "D", "A"]);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"],
            "new"
        );
        // An atomic list (not a pod template's) is replaced.
        let out = server_side_apply(&live, &applied, None, &json!({}), Schema::CONFIG_MAP);
        assert_eq!(env_names(&out), ["C", "D", "A"]);
    }

    #[test]
    fn apply_removes_a_dropped_item_unless_another_manager_owns_it() {
        let live = env(&["A", "B", "C"]);
        let prev = env(&["A", "B", "C"]);
        let cur = env(&["A"]);
        let out = server_side_apply(&live, &cur, Some(&prev), &json!({}), Schema::STATEFUL_SET);
        assert_eq!(env_names(&out), ["A"]);
        let others = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            r#"k:{"name":"c"}"#: {"f:env": {r#"k:{"name":"B"}"#: {".": {}, "f:name": {}}}}}}}}});
        let out = server_side_apply(&live, &cur, Some(&prev), &others, Schema::STATEFUL_SET);
        assert_eq!(env_names(&out), ["A", "B"]);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["env"][1],
            json!({"name": "B"}),
            "B's value was the applier's alone"
        );
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml; charset=utf-8").ok(),
            Some(PatchType::Apply)
        );
        assert!(PatchType::from_content_type("text/plain").is_err());
    }
}
