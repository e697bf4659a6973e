//! Which lists of the built-in kinds are associative, as their OpenAPI schemas say
//! (`x-kubernetes-list-type: map` with its `x-kubernetes-list-map-keys`, or `set`). Server-side
//! apply merges such a list item by item, and a field set names its items (`k:{"name":"a"}`,
//! `v:"x"`); every other list is atomic: an apply replaces it whole, and a field set names it as
//! one field.
//!
//! The table covers what the sandbox's clients apply: pod templates (containers and what they
//! hold, volumes), Service ports and the metadata every object has. A custom resource's lists
//! are atomic here, whatever its schema says (a real server reads `x-kubernetes-list-type` from
//! it).

use serde_json::Value;

/// How a list merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole.
    Atomic,
    /// Items are objects, one per value of these key fields.
    Map(&'static [&'static str]),
    /// Items are scalars, each at most once.
    Set,
}

/// The lists of one kind of object.
#[derive(Debug, Clone, Copy)]
pub struct Schema<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
}

impl Schema<'_> {
    /// The type of the list at `path`: see [`list_type`].
    pub fn at(&self, path: &[&str]) -> ListType {
        list_type(self.group, self.kind, path)
    }

    /// Whether the items of the list-map at `path` are atomic structs (`+structType=atomic`),
    /// which a field set names as one field each, without what they hold: an owner
    /// reference's.
    pub fn atomic_items(&self, path: &[&str]) -> bool {
        path == ["metadata", "ownerReferences"]
    }

    /// Whether the map or struct at `path` is atomic (`+structType=atomic`, `+mapType=atomic`):
    /// a field set names it as one field, without what it holds, and an apply replaces it whole.
    /// A workload's and a disruption budget's label selector (`metav1.LabelSelector`) and a
    /// Service's selector (a map).
    pub fn atomic(&self, path: &[&str]) -> bool {
        matches!(
            (self.group, self.kind, path),
            (
                "apps",
                "StatefulSet" | "Deployment" | "DaemonSet" | "ReplicaSet",
                ["spec", "selector"],
            ) | ("batch", "Job", ["spec", "selector"])
                | ("policy", "PodDisruptionBudget", ["spec", "selector"])
                | ("", "Service", ["spec", "selector"])
        )
    }
}

#[cfg(test)]
impl Schema<'static> {
    pub(crate) const CONFIG_MAP: Self = Schema {
        group: "",
        kind: "ConfigMap",
    };
    pub(crate) const SERVICE: Self = Schema {
        group: "",
        kind: "Service",
    };
    pub(crate) const STATEFUL_SET: Self = Schema {
        group: "apps",
        kind: "StatefulSet",
    };
}

/// Where a kind keeps its pod spec, as a path of map keys from the object's root.
fn pod_spec_at(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    match (group, kind) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("", "ReplicationController")
        | ("apps", "StatefulSet" | "Deployment" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job") => Some(&["spec", "template", "spec"]),
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

fn in_pod_spec(path: &[&str]) -> ListType {
    const CONTAINERS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
    match path {
        [c] if CONTAINERS.contains(c) => ListType::Map(&["name"]),
        [c, "env"] if CONTAINERS.contains(c) => ListType::Map(&["name"]),
        [c, "ports"] if CONTAINERS.contains(c) => ListType::Map(&["containerPort", "protocol"]),
        [c, "volumeMounts"] if CONTAINERS.contains(c) => ListType::Map(&["mountPath"]),
        [c, "volumeDevices"] if CONTAINERS.contains(c) => ListType::Map(&["devicePath"]),
        ["volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates"] => {
            ListType::Map(&["name"])
        }
        ["hostAliases"] => ListType::Map(&["ip"]),
        ["topologySpreadConstraints"] => ListType::Map(&["topologyKey", "whenUnsatisfiable"]),
        _ => ListType::Atomic,
    }
}

/// The type of the list at `path` (map keys from the root; list items add nothing) in an
/// object of `group`/`kind`.
pub fn list_type(group: &str, kind: &str, path: &[&str]) -> ListType {
    match path {
        ["metadata", "ownerReferences"] => return ListType::Map(&["uid"]),
        ["metadata", "finalizers"] => return ListType::Set,
        _ => {}
    }
    if (group, kind) == ("", "Service") && path == ["spec", "ports"] {
        return ListType::Map(&["port", "protocol"]);
    }
    match pod_spec_at(group, kind) {
        Some(at) if path.starts_with(at) => in_pod_spec(&path[at.len()..]),
        _ => ListType::Atomic,
    }
}

/// A key field's value in `item`, with the default the schema gives a missing one (a port's
/// protocol is TCP).
fn key_value(item: &Value, field: &str) -> Value {
    match item.get(field) {
        Some(v) if !v.is_null() => v.clone(),
        _ if field == "protocol" => Value::String("TCP".into()),
        _ => Value::Null,
    }
}

/// The path element that names `item` in a list of type `ty`, as field sets spell it:
/// `k:{"name":"a"}` (key fields in name order, compact JSON) for a list-map, `v:"x"` for a set.
/// None in an atomic list.
pub fn element(ty: ListType, item: &Value) -> Option<String> {
    match ty {
        ListType::Atomic => None,
        ListType::Set => Some(format!("v:{item}")),
        ListType::Map(keys) => {
            let mut sorted = keys.to_vec();
            sorted.sort_unstable();
            let fields: Vec<String> = sorted
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).into()), key_value(item, k)))
                .collect();
            Some(format!("k:{{{}}}", fields.join(",")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_templates_service_ports_and_metadata_have_associative_lists() {
        let sts = |p: &[&str]| list_type("apps", "StatefulSet", p);
        assert_eq!(
            sts(&["spec", "template", "spec", "containers"]),
            ListType::Map(&["name"])
        );
        assert_eq!(
            sts(&["spec", "template", "spec", "containers", "env"]),
            ListType::Map(&["name"])
        );
        assert_eq!(
            sts(&["spec", "volumeClaimTemplates"]),
            ListType::Atomic,
            "not a pod spec"
        );
        assert_eq!(
            list_type("", "Pod", &["spec", "initContainers", "ports"]),
            ListType::Map(&["containerPort", "protocol"])
        );
        assert_eq!(
            list_type("", "Service", &["spec", "ports"]),
            ListType::Map(&["port", "protocol"])
        );
        assert_eq!(
            list_type("", "ConfigMap", &["metadata", "finalizers"]),
            ListType::Set
        );
        assert_eq!(
            list_type("habitat.sh", "Habitat", &["spec", "env"]),
            ListType::Atomic
        );
    }

    #[test]
    fn an_element_names_its_keys_in_order_with_defaults() {
        let ty = ListType::Map(&["port", "protocol"]);
        assert_eq!(
            element(ty, &json!({"protocol": "UDP", "port": 53, "name": "dns"})).as_deref(),
            Some(r#"k:{"port":53,"protocol":"UDP"}"#)
        );
        assert_eq!(
            element(ty, &json!({"port": 80})).as_deref(),
            Some(r#"k:{"port":80,"protocol":"TCP"}"#)
        );
        assert_eq!(
            element(ListType::Set, &json!("x")).as_deref(),
            Some(r#"v:"x""#)
        );
        assert_eq!(element(ListType::Atomic, &json!(1)), None);
    }
}
