//! Field ownership of the children the operator creates.
//!
//! A child the cache does not hold yet is created with a POST, the cheapest write for the
//! server (server-side apply parses its body as YAML and computes field sets). But a create
//! records the fields it set under the operator's `Update` entry in `managedFields`, and
//! server-side apply never removes a field that another entry owns: a field the operator stops
//! setting (an env var taken out of the spec) would stay on the object. So after an apply to an
//! existing child, when the operator's `Update` entry owns a field that its `Apply` entry does
//! not, [`upgrade`] draws the patch that moves the `Update` entry's fields into the `Apply`
//! entry and drops the `Update` entry (client-go's `csaupgrade` does the same for `kubectl apply
//! --server-side`); the apply that follows it then removes what the operator no longer sets.
//! An `Update` entry whose fields the `Apply` entry covers is left alone: it holds nothing the
//! apply does not. The peer ConfigMap's addresses are merge-patched over its create while its
//! data is all that changes ([`super::apply::data_patch`]), so it usually has no `Apply` entry.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::{json, Map, Value};

/// Whether every field in the field set `owned` (FieldsV1: `f:name`, `k:{..}`, `v:..`, `i:..`
/// keys down to `{}` leaves) is in `by`. The key `.` names the node itself, which `by` holds
/// wherever it holds the node.
pub fn covered(owned: &Value, by: &Value) -> bool {
    let Some(owned) = owned.as_object() else {
        return true;
    };
    owned.iter().all(|(k, v)| {
        k == "."
            || by
                .as_object()
                .and_then(|b| b.get(k))
                .is_some_and(|b| covered(v, b))
    })
}

/// The union of two field sets.
pub fn union(a: &Value, b: &Value) -> Value {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let mut out: Map<String, Value> = a.clone();
            for (k, bv) in b {
                let merged = match out.get(k) {
                    Some(av) => union(av, bv),
                    None => bv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(_), None) => a.clone(),
        _ => b.clone(),
    }
}

fn is_main(e: &ManagedFieldsEntry, manager: &str) -> bool {
    e.manager.as_deref() == Some(manager) && e.subresource.as_deref().unwrap_or("").is_empty()
}

fn fields(e: &ManagedFieldsEntry) -> Value {
    e.fields_v1
        .as_ref()
        .map(|f| f.0.clone())
        .unwrap_or_else(|| json!({}))
}

/// The JSON patch that moves `manager`'s `Update` entry (of the object itself, not of a
/// subresource) into its `Apply` entry, when the former owns a field the latter does not;
/// `None` when there is nothing to move. The patch carries the object's `resourceVersion`, so
/// that it is refused (409) if the object changed since `meta` was read.
pub fn upgrade(meta: &ObjectMeta, manager: &str) -> Option<json_patch::Patch> {
    let entries = meta.managed_fields.as_ref()?;
    let update = entries
        .iter()
        .find(|e| is_main(e, manager) && e.operation.as_deref() == Some("Update"))?;
    let apply = entries
        .iter()
        .find(|e| is_main(e, manager) && e.operation.as_deref() == Some("Apply"));
    if apply.is_some_and(|a| covered(&fields(update), &fields(a))) {
        return None;
    }
    let merged = match apply {
        Some(a) => ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(union(&fields(a), &fields(update)))),
            ..a.clone()
        },
        None => ManagedFieldsEntry {
            operation: Some("Apply".into()),
            ..update.clone()
        },
    };
    let mut upgraded = Vec::with_capacity(entries.len());
    for e in entries {
        if !is_main(e, manager) {
            upgraded.push(e.clone());
        } else if e.operation.as_deref() == Some("Apply") {
            upgraded.push(merged.clone());
        }
    }
    if apply.is_none() {
        upgraded.push(merged);
    }
    let rv = meta.resource_version.clone()?;
    serde_json::from_value(json!([
        {"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/managedFields", "value": upgraded},
    ]))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, operation: &str, subresource: Option<&str>, f: Value) -> Value {
        let mut e = json!({
            "manager": manager,
            "operation": operation,
            "apiVersion": "apps/v1",
            "time": "2026-12-05T22:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": f,
        });
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    fn meta(entries: Vec<Value>) -> ObjectMeta {
        serde_json::from_value(json!({
            "name": "redis",
            "resourceVersion": "42",
            "managedFields": entries,
        }))
        .expect("meta")
    }

    /// What a real server records for a StatefulSet the operator created and then applied with
    /// one env var fewer: the create's entry also owns what defaulting filled in.
    fn created_then_applied() -> ObjectMeta {
        meta(vec![
            entry(
                "habitat-operator",
                "Update",
                None,
                json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                       "f:spec": {"f:revisionHistoryLimit": {}, "f:template": {"f:spec": {
                           "f:containers": {"k:{\"name\":\"hab\"}": {".": {}, "f:env": {
                               ".": {}, "k:{\"name\":\"A\"}": {".": {}, "f:name": {}},
                               "k:{\"name\":\"B\"}": {".": {}, "f:name": {}}}}}}}}}),
            ),
            entry(
                "habitat-operator",
                "Apply",
                None,
                json!({"f:metadata": {"f:labels": {"f:app": {}}},
                       "f:spec": {"f:template": {"f:spec": {
                           "f:containers": {"k:{\"name\":\"hab\"}": {".": {}, "f:env": {
                               "k:{\"name\":\"A\"}": {".": {}, "f:name": {}}}}}}}}}),
            ),
            entry(
                "kube-controller-manager",
                "Update",
                Some("status"),
                json!({"f:status": {"f:replicas": {}}}),
            ),
            entry(
                "habitat-operator",
                "Update",
                Some("status"),
                json!({"f:status": {"f:x": {}}}),
            ),
        ])
    }

    #[test]
    fn a_field_only_the_update_entry_owns_is_not_covered() {
        let m = created_then_applied();
        let e = m.managed_fields.as_ref().expect("entries");
        assert!(!covered(&fields(&e[0]), &fields(&e[1])));
        assert!(covered(&fields(&e[1]), &fields(&e[0])));
        // The node markers alone (`.`) are covered wherever the node is.
        assert!(covered(
            &json!({"f:data": {".": {}, "f:peer-ip": {}}}),
            &json!({"f:data": {"f:peer-ip": {}}})
        ));
        assert!(!covered(&json!({"f:data": {".": {}}}), &json!({})));
    }

    #[test]
    fn the_update_entry_moves_into_the_apply_entry_and_the_others_stay() {
        let patch = upgrade(&created_then_applied(), "habitat-operator").expect("a patch");
        let ops = serde_json::to_value(&patch).expect("json");
        assert_eq!(
            ops[0],
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "42"})
        );
        assert_eq!(ops[1]["path"], "/metadata/managedFields");
        let entries = ops[1]["value"].as_array().expect("entries");
        let described: Vec<(String, String, String)> = entries
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap_or_default().to_string(),
                    e["operation"].as_str().unwrap_or_default().to_string(),
                    e["subresource"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let d = |m: &str, o: &str, s: &str| (m.to_string(), o.to_string(), s.to_string());
        assert_eq!(
            described,
            vec![
                d("habitat-operator", "Apply", ""),
                d("kube-controller-manager", "Update", "status"),
                d("habitat-operator", "Update", "status"),
            ]
        );
        let applied = &entries[0]["fieldsV1"];
        let env = &applied["f:spec"]["f:template"]["f:spec"]["f:containers"]
            ["k:{\"name\":\"hab\"}"]["f:env"];
        assert!(env.get("k:{\"name\":\"B\"}").is_some(), "{env}");
        assert!(applied["f:spec"].get("f:revisionHistoryLimit").is_some());
        assert_eq!(entries[0]["time"], "2026-12-05T22:00:00Z");
    }

    #[test]
    fn a_covered_update_entry_or_none_needs_no_patch() {
        let cm = meta(vec![
            entry(
                "habitat-operator",
                "Update",
                None,
                json!({"f:data": {".": {}, "f:peer-ip": {}}}),
            ),
            entry(
                "habitat-operator",
                "Apply",
                None,
                json!({"f:data": {"f:peer-ip": {}}}),
            ),
        ]);
        assert!(upgrade(&cm, "habitat-operator").is_none());
        let applied_only = meta(vec![entry(
            "habitat-operator",
            "Apply",
            None,
            json!({"f:data": {}}),
        )]);
        assert!(upgrade(&applied_only, "habitat-operator").is_none());
        assert!(upgrade(&ObjectMeta::default(), "habitat-operator").is_none());
        // Another manager's Update entry is not the operator's to move.
        let other = meta(vec![entry(
            "kubectl",
            "Update",
            None,
            json!({"f:data": {}}),
        )]);
        assert!(upgrade(&other, "habitat-operator").is_none());
    }

    #[test]
    fn an_update_entry_without_an_apply_entry_becomes_one() {
        let m = meta(vec![entry(
            "habitat-operator",
            "Update",
            None,
            json!({"f:data": {"f:peer-ip": {}}}),
        )]);
        let ops =
            serde_json::to_value(upgrade(&m, "habitat-operator").expect("patch")).expect("json");
        let entries = ops[1]["value"].as_array().expect("entries");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["operation"], "Apply");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:peer-ip": {}}}));
    }

    #[test]
    fn the_union_keeps_both_sides() {
        assert_eq!(
            union(
                &json!({"f:a": {"f:b": {}}, "f:c": {}}),
                &json!({"f:a": {"f:d": {}}, "f:e": {}})
            ),
            json!({"f:a": {"f:b": {}, "f:d": {}}, "f:c": {}, "f:e": {}})
        );
    }
}
