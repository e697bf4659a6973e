//! Validation of built-in kinds on create and update, as the real API server (v1.36) does it:
//! immutable fields (StatefulSet and Pod spec, immutable ConfigMaps and Secrets, a Service's
//! cluster IP) and the field checks of PodDisruptionBudgets, Leases and events.k8s.io Events.

use crate::validation::Cause;
use serde_json::{json, Value};

fn forbidden(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: format!("Forbidden: {detail}"),
    }
}

fn required(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        field: field.into(),
        message: "Required value".into(),
    }
}

/// `value` without nulls, empty lists and empty objects (Go's semantic equality treats nil
/// and empty alike).
fn normal(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normal(v)))
                .filter(|(_, v)| !empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normal).collect()),
        v => v.clone(),
    }
}

fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

const STS_MUTABLE: [&str; 7] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

/// The StatefulSet message of `ValidateStatefulSetUpdate`.
pub const STS_FORBIDDEN: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The Pod message of `ValidatePodUpdate` (the real one goes on with a diff of the specs).
pub const POD_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

const IMMUTABLE: &str = "field is immutable when `immutable` is set";

fn without(spec: &Value, fields: &[&str]) -> Value {
    let mut s = normal(spec);
    if let Some(m) = s.as_object_mut() {
        for f in fields {
            m.remove(*f);
        }
    }
    s
}

fn statefulset_update(new: &Value, old: &Value) -> Vec<Cause> {
    if without(&new["spec"], &STS_MUTABLE) == without(&old["spec"], &STS_MUTABLE) {
        return vec![];
    }
    vec![forbidden("spec", STS_FORBIDDEN)]
}

/// The old pod spec with the fields an update may change taken from the new one.
fn pod_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut allowed = old["spec"].clone();
    for list in ["containers", "initContainers"] {
        if let (Some(a), Some(n)) = (allowed[list].as_array_mut(), new["spec"][list].as_array()) {
            if a.len() == n.len() {
                for (c, nc) in a.iter_mut().zip(n) {
                    c["image"] = nc["image"].clone();
                }
            }
        }
    }
    for f in [
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
    ] {
        match new["spec"].get(f) {
            Some(v) => allowed[f] = v.clone(),
            None => {
                if let Some(m) = allowed.as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
    if normal(&allowed) == normal(&new["spec"]) {
        return vec![];
    }
    let changed: Vec<String> = diff_keys(&normal(&new["spec"]), &normal(&allowed));
    vec![forbidden(
        "spec",
        &format!("{POD_FORBIDDEN}\n(changed: {})", changed.join(", ")),
    )]
}

fn diff_keys(a: &Value, b: &Value) -> Vec<String> {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec![];
    };
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("spec.{k}"))
        .collect();
    keys.dedup();
    keys
}

fn immutable_data(new: &Value, old: &Value, secret: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    if secret && old["type"] != new["type"] {
        let value = serde_json::to_string(&new["type"]).unwrap_or_default();
        causes.push(Cause::invalid("type", &value, "field is immutable"));
    }
    if old["immutable"].as_bool() != Some(true) {
        return causes;
    }
    if new["immutable"].as_bool() != Some(true) {
        causes.push(forbidden("immutable", IMMUTABLE));
    }
    for f in ["data", "binaryData"] {
        if normal(&new[f]) != normal(&old[f]) {
            causes.push(forbidden(f, IMMUTABLE));
        }
    }
    causes
}

fn ips(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// What the real server makes of a Service update's cluster IPs: an emptied `clusterIP`
/// keeps the allocated one, `clusterIPs` follows `clusterIP`.
pub fn service_update_defaults(new: &mut Value, old: &Value) {
    let ip = new["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !new["spec"].is_object() {
        return;
    }
    if ip.is_empty() {
        new["spec"]["clusterIPs"] = Value::Null;
    } else if ips(&new["spec"]["clusterIPs"]).is_empty() {
        new["spec"]["clusterIPs"] = json!([ip]);
    } else if old["spec"]["clusterIP"] != json!(ip)
        && new["spec"]["clusterIPs"] == old["spec"]["clusterIPs"]
    {
        new["spec"]["clusterIPs"][0] = json!(ip);
    }
    let external = |s: &Value| s["spec"]["type"] == "ExternalName";
    if !external(new) && !external(old) {
        if ip.is_empty() {
            new["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        }
        if ips(&new["spec"]["clusterIPs"]).is_empty() {
            new["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
    }
    if let Some(m) = new["spec"].as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
}

fn service_update(new: &Value, old: &Value) -> Vec<Cause> {
    let external = |s: &Value| s["spec"]["type"] == "ExternalName";
    if external(new) || external(old) {
        return vec![];
    }
    let (n, o) = (
        ips(&new["spec"]["clusterIPs"]),
        ips(&old["spec"]["clusterIPs"]),
    );
    if n.first() != o.first() {
        let value = serde_json::to_string(&n).unwrap_or_default();
        return vec![Cause::invalid(
            "spec.clusterIPs[0]",
            &value,
            "may not change once set",
        )];
    }
    vec![]
}

fn int_or_percent(field: &str, v: &Value) -> Vec<Cause> {
    match v {
        Value::Number(n) if n.as_i64().is_some_and(|i| i < 0) => vec![Cause::invalid(
            field,
            &n.to_string(),
            "must be greater than or equal to 0",
        )],
        Value::String(s) => {
            let pct = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok());
            let value = serde_json::to_string(s).unwrap_or_default();
            match pct {
                None => vec![Cause::invalid(
                    field,
                    &value,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )],
                Some(p) if p > 100 => {
                    vec![Cause::invalid(field, &value, "must not be greater than 100%")]
                }
                _ => vec![],
            }
        }
        _ => vec![],
    }
}

fn pdb(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let (min, max) = (&spec["minAvailable"], &spec["maxUnavailable"]);
    let mut causes = Vec::new();
    if !min.is_null() && !max.is_null() {
        // The value as Go renders the spec struct.
        let value = format!(
            "{{\"MinAvailable\":{min},\"Selector\":{},\"MaxUnavailable\":{max},\"UnhealthyPodEvictionPolicy\":{}}}",
            spec["selector"],
            spec["unhealthyPodEvictionPolicy"]
        );
        causes.push(Cause::invalid(
            "spec",
            &value,
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    causes.extend(int_or_percent("spec.minAvailable", min));
    causes.extend(int_or_percent("spec.maxUnavailable", max));
    causes
}

fn lease(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for f in ["leaseDurationSeconds", "leaseTransitions"] {
        let Some(n) = obj["spec"][f].as_i64() else {
            continue;
        };
        let (bad, detail) = if f == "leaseDurationSeconds" {
            (n <= 0, "must be greater than 0")
        } else {
            (n < 0, "must be greater than or equal to 0")
        };
        if bad {
            causes.push(Cause::invalid(&format!("spec.{f}"), &n.to_string(), detail));
        }
    }
    causes
}

/// The field errors of a built-in object on create (`old` None) or update.
pub fn check(group: &str, plural: &str, new: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    match ((group, plural), old) {
        (("apps", "statefulsets"), Some(old)) => causes.extend(statefulset_update(new, old)),
        (("", "pods"), Some(old)) => causes.extend(pod_update(new, old)),
        (("", "configmaps"), Some(old)) => causes.extend(immutable_data(new, old, false)),
        (("", "secrets"), Some(old)) => causes.extend(immutable_data(new, old, true)),
        (("", "services"), Some(old)) => causes.extend(service_update(new, old)),
        (("policy", "poddisruptionbudgets"), _) => causes.extend(pdb(new)),
        (("coordination.k8s.io", "leases"), _) => causes.extend(lease(new)),
        (("events.k8s.io", "events"), None) if new["eventTime"].is_null() => {
            causes.push(required("eventTime"))
        }
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statefulset_spec_fields_other_than_the_mutable_ones_are_forbidden() {
        let old = json!({"spec": {"serviceName": "a", "replicas": 1, "template": {"x": 1}}});
        let ok = json!({"spec": {"serviceName": "a", "replicas": 3, "template": {"x": 2}}});
        assert!(check("apps", "statefulsets", &ok, Some(&old)).is_empty());
        let bad = json!({"spec": {"serviceName": "b", "replicas": 1, "template": {"x": 1}}});
        let c = check("apps", "statefulsets", &bad, Some(&old));
        assert_eq!(c[0].text(), format!("spec: Forbidden: {STS_FORBIDDEN}"));
    }

    #[test]
    fn a_pod_update_may_change_only_images_and_a_few_fields() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "a"}], "nodeName": "n"}});
        let image = json!({"spec": {"containers": [{"name": "c", "image": "b", "env": []}],
            "nodeName": "n", "activeDeadlineSeconds": 3}});
        assert!(check("", "pods", &image, Some(&old)).is_empty());
        let env = json!({"spec": {"containers": [{"name": "c", "image": "a",
            "env": [{"name": "A"}]}], "nodeName": "n"}});
        let c = check("", "pods", &env, Some(&old));
        assert!(c[0]
            .message
            .starts_with(&format!("Forbidden: {POD_FORBIDDEN}\n")));
    }

    #[test]
    fn immutable_config_maps_keep_their_data() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        let c = check(
            "",
            "configmaps",
            &json!({"immutable": true, "data": {"a": "2"}}),
            Some(&old),
        );
        assert_eq!(
            c[0].text(),
            "data: Forbidden: field is immutable when `immutable` is set"
        );
        let c = check(
            "",
            "configmaps",
            &json!({"immutable": false, "data": {"a": "1"}}),
            Some(&old),
        );
        assert_eq!(c[0].field, "immutable");
        let mutable = json!({"data": {"a": "1"}});
        assert!(check("", "configmaps", &json!({"data": {}}), Some(&mutable)).is_empty());
    }

    #[test]
    fn a_service_keeps_its_cluster_ip() {
        let old = json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}});
        let mut emptied = json!({"spec": {"clusterIP": "", "clusterIPs": ["None"]}});
        service_update_defaults(&mut emptied, &old);
        assert_eq!(emptied, old);
        let mut changed = json!({"spec": {"clusterIP": "10.0.0.7", "clusterIPs": ["None"]}});
        service_update_defaults(&mut changed, &old);
        let c = check("", "services", &changed, Some(&old));
        assert_eq!(
            c[0].text(),
            "spec.clusterIPs[0]: Invalid value: [\"10.0.0.7\"]: may not change once set"
        );
    }

    #[test]
    fn budgets_and_leases() {
        let both = json!({"spec": {"minAvailable": 1, "maxUnavailable": 1}});
        assert_eq!(
            check("policy", "poddisruptionbudgets", &both, None).len(),
            1
        );
        let c = check(
            "policy",
            "poddisruptionbudgets",
            &json!({"spec": {"maxUnavailable": "150%"}}),
            None,
        );
        assert_eq!(
            c[0].text(),
            "spec.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%"
        );
        let c = check(
            "coordination.k8s.io",
            "leases",
            &json!({"spec": {"leaseDurationSeconds": 0}}),
            None,
        );
        assert_eq!(
            c[0].text(),
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
        );
    }
}
