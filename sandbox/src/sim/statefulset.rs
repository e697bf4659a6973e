//! The simulated StatefulSet controller: ordinal pods, OrderedReady/Parallel management,
//! RollingUpdate (with partition) and OnDelete, volumeClaimTemplates, and status.

use crate::meta;
use crate::nodes::kubelet::is_ready;
use crate::registry::{ResourceType, StorageKey};
use crate::store::{DeleteOptions, Inner, ObjKey, Store};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Canonical (sorted-key) JSON text, for stable hashing.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(e, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The revision name of a pod template: `<sts>-<10 hex of FNV-1a>`.
pub fn revision_name(sts: &str, template: &Value) -> String {
    let mut s = String::new();
    canonical(template, &mut s);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{sts}-{:010x}", h & 0xff_ffff_ffff)
}

/// The StatefulSet controller. It follows the store's change history: a pass syncs only the
/// StatefulSets that changed, or whose pods changed, since the last pass (and those whose last
/// sync failed), so it costs what changed, not a scan of every pod and StatefulSet. When the
/// history no longer reaches back to its last pass (or on the first), it syncs them all.
#[derive(Debug, Default)]
pub struct Controller {
    /// The resourceVersion the last pass saw; None before the first.
    seen: Option<u64>,
    /// StatefulSets to sync again on the next pass (their sync failed).
    retry: BTreeSet<ObjKey>,
}

impl Controller {
    /// One controller pass over every StatefulSet that changed.
    pub fn step(&mut self, store: &Arc<Store>) {
        let mut inner = store.lock();
        let sts_storage = StorageKey::new("apps", "statefulsets");
        let pod_storage = StorageKey::new("", "pods");
        let mut due = std::mem::take(&mut self.retry);
        let changed = self.seen.map(|rv| {
            let mut keys: BTreeSet<ObjKey> = inner
                .changes_of(&sts_storage, rv)?
                .map(|c| c.key.clone())
                .collect();
            for c in inner.changes_of(&pod_storage, rv)? {
                for owner in meta::owner_uids(&c.object) {
                    if let Some(k) = inner.key_of_uid(owner) {
                        if k.storage == sts_storage {
                            keys.insert(k.clone());
                        }
                    }
                }
            }
            Ok::<_, crate::error::ApiError>(keys)
        });
        match changed {
            Some(Ok(keys)) => due.extend(keys),
            None | Some(Err(_)) => {
                due.extend(inner.raw_list(&sts_storage, None).map(|(k, _)| k.clone()));
            }
        }
        self.seen = Some(inner.rv);
        for key in due {
            let Some(sts) = inner.shared(&key) else {
                continue;
            };
            if meta::is_deleting(&sts) {
                continue;
            }
            let uid = meta::uid_of(&sts);
            let pods: Vec<Arc<Value>> = inner
                .dependents(uid)
                .filter(|k| k.storage == pod_storage && k.namespace == key.namespace)
                .filter_map(|k| inner.shared(k))
                .collect();
            if let Err(e) = sync(&mut inner, &sts, &pods) {
                // Retried on the next pass, changed or not.
                self.retry.insert(key.clone());
                tracing::debug!(
                    "statefulset {}/{}: {e}",
                    meta::namespace(&sts),
                    meta::name(&sts)
                );
            }
        }
    }
}

struct Types {
    pods: ResourceType,
    pvcs: ResourceType,
    revs: ResourceType,
    sts: ResourceType,
}

fn types(inner: &Inner) -> Option<Types> {
    Some(Types {
        pods: inner.resource("", "v1", "pods")?,
        pvcs: inner.resource("", "v1", "persistentvolumeclaims")?,
        revs: inner.resource("apps", "v1", "controllerrevisions")?,
        sts: inner.resource("apps", "v1", "statefulsets")?,
    })
}

fn ordinal(sts: &str, pod: &str) -> Option<usize> {
    pod.strip_prefix(sts)?.strip_prefix('-')?.parse().ok()
}

fn revision_of(pod: &Value) -> &str {
    pod["metadata"]["labels"]["controller-revision-hash"]
        .as_str()
        .unwrap_or_default()
}

fn sync(inner: &mut Inner, sts: &Value, owned: &[Arc<Value>]) -> Result<(), crate::ApiError> {
    let Some(t) = types(inner) else {
        return Ok(());
    };
    let name = meta::name(sts).to_string();
    let ns = meta::namespace(sts).to_string();
    let spec = &sts["spec"];
    let replicas = spec["replicas"].as_u64().unwrap_or(1) as usize;
    let parallel = spec["podManagementPolicy"] == "Parallel";
    let on_delete = spec["updateStrategy"]["type"] == "OnDelete";
    let partition = spec["updateStrategy"]["rollingUpdate"]["partition"]
        .as_u64()
        .unwrap_or(0) as usize;
    let template = &spec["template"];
    let update_rev = revision_name(&name, template);
    if inner
        .raw(&Inner::key(&t.revs, Some(&ns), &update_rev))
        .is_none()
    {
        let rev = json!({"metadata": {"name": update_rev, "labels": template["metadata"]["labels"],
            "ownerReferences": [owner_ref(sts)]}, "data": {"spec": {"template": template}}, "revision": 1});
        inner.create_by(&t.revs, Some(&ns), rev, Some(super::MANAGER))?;
    }
    let current_rev = sts["status"]["currentRevision"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(&update_rev)
        .to_string();
    let mut pods: BTreeMap<usize, &Value> = BTreeMap::new();
    for p in owned {
        if let Some(o) = ordinal(&name, meta::name(p)) {
            pods.insert(o, p);
        }
    }
    let grace = DeleteOptions::default();
    for (o, p) in &pods {
        let phase = p["status"]["phase"].as_str().unwrap_or_default();
        if matches!(phase, "Failed" | "Succeeded") && !meta::is_deleting(p) {
            inner.delete(&t.pods, Some(&ns), &format!("{name}-{o}"), &grace)?;
        }
    }
    let settled = |p: &Value| is_ready(p) && !meta::is_deleting(p);
    for o in 0..replicas {
        match pods.get(&o) {
            None => {
                let rev = if !on_delete && o < partition {
                    current_rev.clone()
                } else {
                    update_rev.clone()
                };
                let tmpl = template_for(inner, &t, &ns, &rev).unwrap_or_else(|| template.clone());
                ensure_claims(inner, &t, sts, o)?;
                // Created with no field manager (no `managedFields` entry): a real
                // kube-controller-manager's create entry names
                // the whole pod spec, and carried in every pod's versions, watch events and
                // answers it made the benchmark's N = 1000 a third slower and its memory a third
                // larger.
                let pod = build_pod(sts, &tmpl, &rev, o);
                inner.create(&t.pods, Some(&ns), pod)?;
                if !parallel {
                    break;
                }
            }
            Some(p) if !parallel && !settled(p) => break,
            Some(_) => {}
        }
    }
    let condemned: Vec<usize> = pods
        .keys()
        .copied()
        .filter(|o| *o >= replicas)
        .rev()
        .collect();
    let all_settled = pods.values().all(|p| settled(p));
    if parallel {
        for o in &condemned {
            if !pods.get(o).is_some_and(|p| meta::is_deleting(p)) {
                inner.delete(&t.pods, Some(&ns), &format!("{name}-{o}"), &grace)?;
            }
        }
    } else if let Some(o) = condemned.first() {
        let lower_ok = pods
            .iter()
            .filter(|(k, _)| **k < *o)
            .all(|(_, p)| settled(p));
        if lower_ok && !pods.get(o).is_some_and(|p| meta::is_deleting(p)) {
            inner.delete(&t.pods, Some(&ns), &format!("{name}-{o}"), &grace)?;
        }
    }
    let complete = (0..replicas).all(|o| pods.contains_key(&o)) && condemned.is_empty();
    if !on_delete && complete && all_settled {
        if let Some(o) = (partition..replicas)
            .rev()
            .find(|o| pods.get(o).is_some_and(|p| revision_of(p) != update_rev))
        {
            inner.delete(&t.pods, Some(&ns), &format!("{name}-{o}"), &grace)?;
        }
    }
    write_status(inner, &t, sts, &pods, replicas, &current_rev, &update_rev)
}

#[allow(clippy::too_many_arguments)]
fn write_status(
    inner: &mut Inner,
    t: &Types,
    sts: &Value,
    pods: &BTreeMap<usize, &Value>,
    replicas: usize,
    current_rev: &str,
    update_rev: &str,
) -> Result<(), crate::ApiError> {
    let count = |f: &dyn Fn(&Value) -> bool| pods.values().filter(|p| f(p)).count();
    let ready = count(&|p| is_ready(p));
    let updated = count(&|p| revision_of(p) == update_rev);
    let all_updated = pods.len() == replicas
        && (0..replicas).all(|o| pods.get(&o).is_some_and(|p| revision_of(p) == update_rev));
    let current_rev = if all_updated { update_rev } else { current_rev };
    let current = count(&|p| revision_of(p) == current_rev);
    let status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": pods.len(), "readyReplicas": ready, "availableReplicas": ready,
        "currentReplicas": current, "updatedReplicas": updated,
        "currentRevision": current_rev, "updateRevision": update_rev, "collisionCount": 0,
    });
    if sts["status"] != status {
        let mut new = sts.clone();
        new["status"] = status;
        let ns = meta::namespace(sts).to_string();
        let name = meta::name(sts);
        inner.update_by(&t.sts, Some(&ns), name, new, true, Some(super::MANAGER))?;
    }
    Ok(())
}

fn owner_ref(sts: &Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": meta::name(sts),
        "uid": meta::uid_of(sts), "controller": true, "blockOwnerDeletion": true})
}

fn template_for(inner: &Inner, t: &Types, ns: &str, rev: &str) -> Option<Value> {
    inner
        .raw(&Inner::key(&t.revs, Some(ns), rev))
        .map(|r| r["data"]["spec"]["template"].clone())
}

fn claim_name(tmpl: &Value, sts: &Value, o: usize) -> String {
    format!("{}-{}-{o}", meta::name(tmpl), meta::name(sts))
}

fn ensure_claims(
    inner: &mut Inner,
    t: &Types,
    sts: &Value,
    o: usize,
) -> Result<(), crate::ApiError> {
    let ns = meta::namespace(sts).to_string();
    for tmpl in sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let claim = claim_name(tmpl, sts, o);
        if inner.raw(&Inner::key(&t.pvcs, Some(&ns), &claim)).is_none() {
            let mut labels = tmpl["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            if let Some(sel) = sts["spec"]["selector"]["matchLabels"].as_object() {
                labels.extend(sel.clone());
            }
            let pvc = json!({"metadata": {"name": claim, "labels": labels}, "spec": tmpl["spec"]});
            inner.create_by(&t.pvcs, Some(&ns), pvc, Some(super::MANAGER))?;
        }
    }
    Ok(())
}

fn build_pod(sts: &Value, template: &Value, rev: &str, o: usize) -> Value {
    let sts_name = meta::name(sts);
    let pod_name = format!("{sts_name}-{o}");
    let mut labels: Map<String, Value> = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("controller-revision-hash".into(), json!(rev));
    labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(pod_name));
    labels.insert("apps.kubernetes.io/pod-index".into(), json!(o.to_string()));
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(pod_name);
    if let Some(svc) = sts["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        spec["subdomain"] = json!(svc);
    }
    for tmpl in sts["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let vol = json!({"name": meta::name(tmpl),
            "persistentVolumeClaim": {"claimName": claim_name(tmpl, sts, o)}});
        if !spec["volumes"].is_array() {
            spec["volumes"] = json!([]);
        }
        if let Some(vols) = spec["volumes"].as_array_mut() {
            vols.retain(|v| v["name"] != vol["name"]);
            vols.push(vol);
        }
    }
    let mut md = json!({"name": pod_name, "generateName": format!("{sts_name}-"), "labels": labels,
        "ownerReferences": [owner_ref(sts)]});
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        md["annotations"] = json!(a);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_stable_and_order_independent() {
        let a = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        let b = json!({"spec": {"x": 1}, "metadata": {"labels": {"b": "2", "a": "1"}}});
        assert_eq!(revision_name("web", &a), revision_name("web", &b));
        assert_ne!(revision_name("web", &a), revision_name("web", &json!({})));
        assert_eq!(ordinal("web", "web-12"), Some(12));
        assert_eq!(ordinal("web", "webx-1"), None);
    }

    #[test]
    fn pods_from_template() {
        let sts = json!({"metadata": {"name": "web", "uid": "u1", "namespace": "d"},
            "spec": {"serviceName": "web", "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
        let pod = build_pod(
            &sts,
            &json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}),
            "web-1",
            2,
        );
        assert_eq!(pod["metadata"]["name"], "web-2");
        assert_eq!(pod["metadata"]["labels"]["app"], "web");
        assert_eq!(pod["spec"]["subdomain"], "web");
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "data-web-2"
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
    }
}
