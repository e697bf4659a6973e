//! Drift: whether a live child still carries what the operator would apply.
//!
//! The operator owns the fields it sets on a child, nothing else. A child has drifted when one
//! of those fields is missing or holds another value: someone scaled the StatefulSet, set its
//! image, patched a Service's selector, edited the budget. It has not drifted when the live
//! object holds more than the operator sets: the API server's defaults (`protocol: TCP`,
//! `terminationMessagePath`, a probe's `timeoutSeconds`), kube-controller-manager's fields, a
//! user's annotations. Those are fields a server-side apply would leave alone, so counting them
//! as drift would apply again and again (an apply loop), and they are not the operator's.
//!
//! [`covers`] answers that question on the JSON of both objects:
//!
//! - an object covers another when it covers each of its fields; a field the desired object
//!   holds with a zero value (`false`, `0`, `""`, `{}`, `[]`, `null`) is covered by its absence,
//!   since the server drops zero values of fields it serializes with `omitempty`;
//! - a list of scalars (a container's `args`) must be equal: the server never adds to one;
//! - a list of objects (containers, env, ports, volumes) covers another when each desired item
//!   is covered by some live item: the server defaults fields inside items, and another manager
//!   may add items of its own (which an apply keeps);
//! - scalars must be equal.
//!
//! Guarantees: a child the operator just applied covers what it applied (the server only adds
//! defaults), so the quiet path makes no write. Caveat: what the spec stops setting is not seen
//! here (the live object just holds more); the fingerprint annotation
//! ([`FINGERPRINT_ANNOTATION`](crate::cluster::apply::FINGERPRINT_ANNOTATION)), which is one of
//! the fields compared, changes with every desired object, so such a child is applied again too.
//! A StatefulSet's `volumeClaimTemplates` are not compared: they cannot be changed after the
//! StatefulSet is created, and the server rewrites their quantities in canonical form.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use serde_json::Value;

use crate::children::Workload;
use crate::cluster::apply::stamped;
use crate::reconcile::memo::Versions;

/// Whether `live` carries every field `desired` sets, with the same value (see the module doc).
pub fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (_, Value::Null) => true,
        (Value::Null, d) => is_zero(d),
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => covers(lv, dv),
            None => is_zero(dv),
        }),
        (Value::Array(l), Value::Array(d)) if d.iter().all(Value::is_object) => {
            d.iter().all(|dv| l.iter().any(|lv| covers(lv, dv)))
        }
        (l, d) => l == d,
    }
}

/// The path of the first field `desired` sets that `live` does not carry, when [`covers`] is
/// false: what a debug log names.
pub fn first_difference(live: &Value, desired: &Value) -> Option<String> {
    if covers(live, desired) {
        return None;
    }
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().find_map(|(k, dv)| {
            let lv = l.get(k).unwrap_or(&Value::Null);
            first_difference(lv, dv).map(|rest| format!(".{k}{rest}"))
        }),
        (Value::Array(l), Value::Array(d)) if d.iter().all(Value::is_object) => d
            .iter()
            .enumerate()
            .find(|(_, dv)| !l.iter().any(|lv| covers(lv, dv)))
            .map(|(i, _)| format!("[{i}]")),
        _ => Some(format!(" = {live} (desired {desired})")),
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Whether the live child `live` carries what applying `desired` would write: `desired`
/// stamped with its fingerprint, as [`apply`](crate::cluster::apply::apply) sends it.
pub fn carries<K>(live: &K, desired: &K) -> bool
where
    K: kube::Resource<DynamicType = ()> + Serialize + Clone,
{
    carries_but(live, desired, |_| {})
}

/// [`carries`], but for the fields `skip` removes from the desired object as sent.
fn carries_but<K>(live: &K, desired: &K, skip: impl FnOnce(&mut Value)) -> bool
where
    K: kube::Resource<DynamicType = ()> + Serialize + Clone,
{
    let (Ok(l), Ok(mut d)) = (
        serde_json::to_value(live),
        serde_json::to_value(stamped(desired)),
    ) else {
        return false;
    };
    skip(&mut d);
    let difference = first_difference(&l, &d);
    if let Some(field) = &difference {
        tracing::debug!(
            kind = %K::kind(&()),
            name = desired.meta().name.as_deref().unwrap_or_default(),
            field,
            "a child differs from what the operator applies"
        );
    }
    difference.is_none()
}

/// [`carries`] for a StatefulSet, without its claim templates (see the module doc).
fn statefulset_carries(live: &StatefulSet, desired: &StatefulSet) -> bool {
    carries_but(live, desired, |d| {
        if let Some(spec) = d.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("volumeClaimTemplates");
        }
    })
}

/// The live children of a Habitat's workload.
#[derive(Debug, Clone, Copy)]
pub struct LiveWorkload<'a> {
    /// The StatefulSet.
    pub statefulset: Option<&'a StatefulSet>,
    /// The headless Service.
    pub headless: Option<&'a Service>,
    /// The leader Service.
    pub leader_service: Option<&'a Service>,
    /// The PodDisruptionBudget.
    pub budget: Option<&'a PodDisruptionBudget>,
}

impl LiveWorkload<'_> {
    /// The resourceVersions of the live children (`None` in a slot: that child is absent): a
    /// verdict of [`LiveWorkload::carries`] holds while they do not change. `None` when a child
    /// is present without a version: one sent and not yet answered (a Service created in the
    /// background), whose verdict holds only while its create runs.
    pub fn versions(&self) -> Option<Versions> {
        fn rv<K: kube::Resource>(o: Option<&K>) -> Option<Option<String>> {
            match o {
                None => Some(None),
                Some(o) => o.meta().resource_version.clone().map(Some),
            }
        }
        Some([
            rv(self.statefulset)?,
            rv(self.headless)?,
            rv(self.leader_service)?,
            rv(self.budget)?,
        ])
    }

    /// Whether every child exists and carries its part of `w`, and no leader child is left
    /// when `w` has none.
    pub fn carries(&self, w: &Workload) -> bool {
        let sts = self
            .statefulset
            .is_some_and(|s| statefulset_carries(s, &w.statefulset));
        let headless = self.headless.is_some_and(|s| carries(s, &w.headless));
        let leader = match &w.leader {
            Some((svc, pdb)) => {
                self.leader_service.is_some_and(|s| carries(s, svc))
                    && self.budget.is_some_and(|b| carries(b, pdb))
            }
            None => self.leader_service.is_none() && self.budget.is_none(),
        };
        sts && headless && leader
    }
}

/// Whether the live peer ConfigMap carries `desired`.
pub fn peer_config_carries(live: Option<&ConfigMap>, desired: &ConfigMap) -> bool {
    live.is_some_and(|l| carries(l, desired))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_other_managers_fields_are_no_drift() {
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "hab", "image": "redis:1", "args": ["start", "x"],
             "ports": [{"containerPort": 9638, "name": "gossip"}], "readOnly": false}]}}}});
        let live = json!({"spec": {"replicas": 2, "revisionHistoryLimit": 10,
            "template": {"spec": {"containers": [
                {"name": "sidecar", "image": "theirs:1"},
                {"name": "hab", "image": "redis:1", "args": ["start", "x"],
                 "terminationMessagePath": "/dev/termination-log",
                 "ports": [{"containerPort": 9638, "name": "gossip", "protocol": "TCP"}]}]}}},
            "status": {"replicas": 2}});
        assert!(covers(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_is_drift() {
        let desired = json!({"spec": {"replicas": 2, "selector": {"app": "redis"},
            "containers": [{"name": "hab", "image": "redis:1", "args": ["start"]}]}});
        let changed = |f: &dyn Fn(&mut Value)| {
            let mut live = desired.clone();
            f(&mut live);
            covers(&live, &desired)
        };
        assert!(changed(&|_| {}));
        assert!(!changed(&|l| l["spec"]["replicas"] = json!(5)));
        assert!(!changed(&|l| l["spec"]["selector"]["app"] = json!("other")));
        assert!(!changed(&|l| {
            l["spec"]["selector"]
                .as_object_mut()
                .map(|m| m.remove("app"));
        }));
        assert!(!changed(
            &|l| l["spec"]["containers"][0]["image"] = json!("intruder:1")
        ));
        assert!(!changed(
            &|l| l["spec"]["containers"][0]["args"] = json!(["start", "more"])
        ));
        assert!(!changed(&|l| l["spec"]["containers"] = json!([])));
        assert!(!changed(&|l| l["spec"] = Value::Null));
    }

    /// A StatefulSet with claim templates, as the server holds it after the apply: its claim
    /// templates are not compared, and its fingerprint is the one the apply stamped.
    #[test]
    fn a_persisted_statefulset_as_applied_carries_its_desired_object() {
        use crate::api::fixtures::{habitat, HabitatFixture};
        let h = habitat().storage("1.5Gi", "/hab/svc/redis/data");
        let desired = crate::children::statefulset::statefulset(&h, None);
        assert!(desired
            .spec
            .as_ref()
            .is_some_and(|s| s.volume_claim_templates.is_some()));
        let mut live = stamped(&desired);
        // The server writes quantities in canonical form.
        if let Some(spec) = live.spec.as_mut() {
            spec.volume_claim_templates = None;
        }
        assert!(statefulset_carries(&live, &desired));
    }

    #[test]
    fn a_zero_value_is_covered_by_its_absence_but_not_by_another_value() {
        assert!(covers(
            &json!({}),
            &json!({"readOnly": false, "labels": {}})
        ));
        assert!(covers(
            &json!({"labels": {"theirs": "x"}}),
            &json!({"labels": {}})
        ));
        assert!(!covers(
            &json!({"readOnly": true}),
            &json!({"readOnly": false})
        ));
        assert!(!covers(&json!({"replicas": 1}), &json!({"replicas": 0})));
    }
}
