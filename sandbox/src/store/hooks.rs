//! Per-kind behaviour of the simulated API server: creation defaults, CRD registration and
//! status, and custom resource admission (schema defaulting and validation).

use super::{names, rules, Inner, ObjKey};
use crate::error::ApiError;
use crate::meta;
use crate::registry::{ResourceType, StorageKey};
use crate::validation;
use rand::Rng;
use serde_json::{json, Value};
use std::borrow::Cow;

/// Storage key of CRDs.
pub fn crd_storage() -> StorageKey {
    StorageKey::new("apiextensions.k8s.io", "customresourcedefinitions")
}

fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, seg) in path.iter().enumerate() {
        if !cur.is_object() {
            return;
        }
        if i == path.len() - 1 {
            if cur.get(*seg).is_none_or(Value::is_null) {
                cur[*seg] = value;
            }
            return;
        }
        if cur.get(*seg).is_none_or(Value::is_null) {
            cur[*seg] = json!({});
        }
        cur = &mut cur[*seg];
    }
}

impl Inner {
    /// Defaults the real API server (or a built-in controller) fills in on create.
    pub(super) fn create_defaults(&mut self, rt: &ResourceType, obj: &mut Value) {
        spec_defaults(rt, obj);
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "namespaces") => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            ("", "pods") => {
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
            ("", "services") => {
                if obj["spec"]["clusterIP"].as_str().is_none_or(str::is_empty) {
                    let mut rng = rand::thread_rng();
                    let ip = format!(
                        "10.96.{}.{}",
                        rng.gen_range(0..=255),
                        rng.gen_range(1..=254)
                    );
                    obj["spec"]["clusterIP"] = json!(ip);
                }
                let ip = obj["spec"]["clusterIP"].clone();
                set_default(obj, &["spec", "clusterIPs"], json!([ip]));
                obj["status"] = json!({"loadBalancer": {}});
            }
            ("", "persistentvolumeclaims") => {
                let uid = meta::uid_of(obj).to_string();
                set_default(obj, &["spec", "volumeName"], json!(format!("pvc-{uid}")));
                set_default(obj, &["spec", "storageClassName"], json!("standard"));
                set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
                obj["status"] = json!({
                    "phase": "Bound",
                    "accessModes": obj["spec"]["accessModes"].clone(),
                    "capacity": {"storage": obj["spec"]["resources"]["requests"]["storage"].clone()},
                });
            }
            ("apps", "statefulsets") => {
                obj["status"] = json!({"replicas": 0, "availableReplicas": 0});
            }
            _ => {}
        }
    }

    /// Validation of built-in kinds and of every object's name and labels, and the
    /// defaults an update gets. Called by [`Inner::admit`] for writes of the main resource.
    fn builtin_causes(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Vec<crate::validation::Cause> {
        let mut causes = match old {
            None => names::name_causes(
                &rt.group,
                &rt.plural,
                meta::name(obj),
                meta::meta_str(obj, "generateName"),
            ),
            Some(_) => vec![],
        };
        causes.extend(names::label_causes(obj));
        if rt.crd.is_none() {
            if let Some(old) = old {
                spec_defaults(rt, obj);
                if rt.group.is_empty() && rt.plural == "services" {
                    rules::service_update_defaults(obj, old);
                }
            }
            causes.extend(rules::check(&rt.group, &rt.plural, obj, old));
        }
        causes
    }

    /// Admission: CRD checks and status; custom resource pruning, defaulting and validation
    /// (structural schema and CEL rules, see [`validation`]). `status`: a write to the status
    /// subresource, which validates only `.status`.
    pub(super) fn admit(
        &self,
        rt: &ResourceType,
        mut obj: Value,
        old: Option<&Value>,
        status: bool,
    ) -> Result<Value, ApiError> {
        if rt.storage == crd_storage() {
            let causes = validation::crd::check(&obj);
            if !causes.is_empty() {
                return Err(ApiError::invalid_fields(
                    &rt.group,
                    &rt.kind,
                    meta::name(&obj),
                    &causes,
                ));
            }
            crd_status(&mut obj, old);
            return Ok(obj);
        }
        if rt.group.is_empty() && rt.plural == "secrets" {
            fold_string_data(&mut obj);
        }
        let mut causes = if !status && self.checked {
            self.builtin_causes(rt, &mut obj, old)
        } else {
            vec![]
        };
        // Events of events.k8s.io are validated as core ones, and named so.
        let group = if rt.is_event() { "" } else { rt.group.as_str() };
        let name = meta::name(&obj).to_string();
        let invalid =
            |causes: &[validation::Cause]| ApiError::invalid_fields(group, &rt.kind, &name, causes);
        let Some(schema) = self.crd_schema(rt) else {
            return if causes.is_empty() {
                Ok(obj)
            } else {
                Err(invalid(&causes))
            };
        };
        let scope = if status {
            validation::Scope::Status
        } else {
            validation::Scope::Object
        };
        // A bad name does not stop the schema and its CEL rules: the real server reports both,
        // the name first.
        match validation::admit(schema, obj, old, scope) {
            Ok(obj) if causes.is_empty() => Ok(obj),
            Ok(_) => Err(invalid(&causes)),
            Err(more) => {
                causes.extend(more);
                Err(invalid(&causes))
            }
        }
    }

    /// `obj` as kube-apiserver decodes a client's object: with the defaults of decoding (a
    /// built-in kind's, as [`spec_defaults`] has them; a custom resource's schema's, after its
    /// unknown fields are pruned) and nothing else the write adds (allocated addresses,
    /// admission, the status a create starts with). A write's field manager compares this. Of a
    /// write of a built-in's status, which no default of decoding touches, `obj` itself.
    pub(super) fn decoded<'a>(
        &self,
        rt: &ResourceType,
        obj: &'a Value,
        status: bool,
    ) -> Cow<'a, Value> {
        match self.crd_schema(rt) {
            Some(schema) => {
                let mut obj = obj.clone();
                validation::schema::prune(schema, &mut obj);
                validation::schema::apply_defaults(schema, &mut obj);
                Cow::Owned(obj)
            }
            None if !status && has_spec_defaults(rt) => {
                let mut obj = obj.clone();
                spec_defaults(rt, &mut obj);
                Cow::Owned(obj)
            }
            None => Cow::Borrowed(obj),
        }
    }

    /// The `openAPIV3Schema` of a custom resource's version, from its CRD.
    pub fn crd_schema(&self, rt: &ResourceType) -> Option<&Value> {
        let crd_key = ObjKey {
            storage: crd_storage(),
            namespace: String::new(),
            name: rt.crd.clone()?,
        };
        let version = self.by_key.get(&crd_key)?["spec"]["versions"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == rt.version.as_str())?;
        Some(&version["schema"]["openAPIV3Schema"])
    }

    /// Side effects of a stored write: CRD registration.
    pub(super) fn after_write(&mut self, rt: &ResourceType, obj: &Value) {
        if rt.storage == crd_storage() {
            let name = meta::name(obj).to_string();
            self.registry.register_crd(&name, obj);
        }
    }

    /// True for a pod that the kubelet must finish deleting.
    pub(super) fn awaits_kubelet(&self, key: &ObjKey, obj: &Value) -> bool {
        key.storage == StorageKey::new("", "pods")
            && obj["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
            && obj["metadata"]["deletionGracePeriodSeconds"].as_i64() != Some(0)
    }
}

/// Whether [`spec_defaults`] fills in anything of `rt`'s objects.
fn has_spec_defaults(rt: &ResourceType) -> bool {
    matches!(
        (rt.group.as_str(), rt.plural.as_str()),
        ("", "pods" | "secrets" | "services") | ("apps", "statefulsets")
    )
}

/// Spec defaults the real API server fills in on create and again on update (so that an
/// update that leaves them out does not change them).
fn spec_defaults(rt: &ResourceType, obj: &mut Value) {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            set_default(obj, &["spec", "restartPolicy"], json!("Always"));
            set_default(obj, &["spec", "dnsPolicy"], json!("ClusterFirst"));
            set_default(obj, &["spec", "schedulerName"], json!("default-scheduler"));
            set_default(obj, &["spec", "serviceAccountName"], json!("default"));
        }
        ("", "secrets") => set_default(obj, &["type"], json!("Opaque")),
        ("", "services") => {
            set_default(obj, &["spec", "type"], json!("ClusterIP"));
            set_default(obj, &["spec", "sessionAffinity"], json!("None"));
        }
        ("apps", "statefulsets") => {
            set_default(obj, &["spec", "replicas"], json!(1));
            set_default(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
            set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
            set_default(
                obj,
                &["spec", "updateStrategy"],
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(
                obj,
                &["spec", "persistentVolumeClaimRetentionPolicy"],
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
        }
        _ => {}
    }
}

/// Like the API server, a Secret's write-only `stringData` is merged into `data` (base64) and
/// never stored.
fn fold_string_data(obj: &mut Value) {
    use base64::Engine;
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    let data = map.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        data[k.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

fn crd_status(obj: &mut Value, old: Option<&Value>) {
    let names = obj["spec"]["names"].clone();
    let mut accepted = names.clone();
    if accepted.is_object() && accepted.get("singular").is_none() {
        let kind = names["kind"].as_str().unwrap_or_default().to_lowercase();
        accepted["singular"] = json!(kind);
    }
    let since = old
        .and_then(|o| o["status"]["conditions"].get(0))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(String::from)
        .unwrap_or_else(meta::now);
    let stored: Vec<Value> = obj["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    obj["status"] = json!({
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": since},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": since},
        ],
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_with_decoding_defaults_are_those_spec_defaults_fills_in() {
        for rt in crate::registry::Registry::default().all() {
            let mut obj = json!({"metadata": {"name": "x"}});
            spec_defaults(rt, &mut obj);
            let filled = obj != json!({"metadata": {"name": "x"}});
            assert_eq!(has_spec_defaults(rt), filled, "{}", rt.plural);
        }
    }

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let mut s = json!({"stringData": {"user.toml": "port = 1"}, "data": {"a": "Yg=="}});
        fold_string_data(&mut s);
        assert_eq!(
            s,
            json!({"data": {"a": "Yg==", "user.toml": "cG9ydCA9IDE="}})
        );
    }

    #[test]
    fn a_secret_without_a_type_is_opaque_on_create_and_on_update() {
        let registry = crate::registry::Registry::default();
        let rt = registry
            .find("", "v1", "secrets")
            .expect("secrets are served");
        let mut created = json!({"metadata": {"name": "s"}, "data": {}});
        spec_defaults(rt, &mut created);
        let mut updated = json!({"metadata": {"name": "s"}, "data": {"a": "Yg=="}});
        spec_defaults(rt, &mut updated);
        assert_eq!(created["type"], "Opaque");
        assert_eq!(
            updated["type"], created["type"],
            "so the immutable type does not change"
        );
    }

    #[test]
    fn defaults_only_fill_missing() {
        let mut o = json!({"spec": {"replicas": 3}});
        set_default(&mut o, &["spec", "replicas"], json!(1));
        set_default(
            &mut o,
            &["spec", "updateStrategy", "type"],
            json!("RollingUpdate"),
        );
        assert_eq!(
            o,
            json!({"spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}}})
        );
    }

    #[test]
    fn crd_status_conditions() {
        let mut o = json!({"spec": {"names": {"plural": "habitats", "kind": "Habitat"},
            "versions": [{"name": "v1", "storage": true}]}});
        crd_status(&mut o, None);
        assert_eq!(o["status"]["conditions"][1]["type"], "Established");
        assert_eq!(o["status"]["acceptedNames"]["singular"], "habitat");
        assert_eq!(o["status"]["storedVersions"], json!(["v1"]));
    }
}
