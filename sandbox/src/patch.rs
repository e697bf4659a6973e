//! Patch flavours: JSON merge, JSON patch, (simplified) strategic merge, and server-side apply.

use crate::error::ApiError;
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

/// Server-side apply: merge `applied` into `live` (maps merge, lists and scalars replace),
/// then remove the fields the same manager applied last time (`previous`) but omits now.
pub fn server_side_apply(live: &Value, applied: &Value, previous: Option<&Value>) -> Value {
    let mut out = live.clone();
    merge_replace_lists(&mut out, applied);
    if let Some(prev) = previous {
        remove_dropped(&mut out, prev, applied, 0);
    }
    out
}

fn merge_replace_lists(target: &mut Value, applied: &Value) {
    match (target.as_object_mut(), applied.as_object()) {
        (Some(t), Some(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    t.remove(k);
                } else if v.is_object() && t.get(k).is_some_and(Value::is_object) {
                    if let Some(slot) = t.get_mut(k) {
                        merge_replace_lists(slot, v);
                    }
                } else {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        _ => *target = applied.clone(),
    }
}

fn remove_dropped(target: &mut Value, prev: &Value, cur: &Value, depth: usize) {
    let (Some(t), Some(p)) = (target.as_object_mut(), prev.as_object()) else {
        return;
    };
    for (k, pv) in p {
        if depth == 0 && matches!(k.as_str(), "apiVersion" | "kind") {
            continue;
        }
        match cur.get(k) {
            None => {
                t.remove(k);
            }
            Some(cv) if pv.is_object() && cv.is_object() => {
                if let Some(slot) = t.get_mut(k) {
                    remove_dropped(slot, pv, cv, depth + 1);
                }
            }
            Some(_) => {}
        }
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
        let out = server_side_apply(&live, &cur, Some(&prev));
        assert_eq!(out, json!({"spec": {"a": 5, "other": 3, "list": [3]}}));
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
