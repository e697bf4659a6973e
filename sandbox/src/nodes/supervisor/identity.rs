//! Who a supervisor is when its pod starts: the `MEMBER_ID` file under `/hab/sup/default`, and
//! what it remembers of its ring (the saved member list in `data/<member_id>.rst`).
//!
//! The real supervisor reads `/hab/sup/default/MEMBER_ID` at boot and writes a new random id
//! there when the file is missing (`sup/src/manager.rs` `load_member`). So a pod replaced with a
//! fresh `/hab/sup` is a new member, and its predecessor stays in the ring as Confirmed. The
//! simulation reads the pod spec to know what that file would hold:
//! - a downward-API file mounted at `/hab/sup/default/MEMBER_ID`: the field it projects (a
//!   stable id: the pod's name, which a StatefulSet keeps across replacements);
//! - `/hab/sup` (or `/hab`, `/hab/sup/default`) on a PersistentVolumeClaim: whatever the claim
//!   held, so the id *and* the saved member list survive (see [`Disk`]);
//! - anything else (the image's own filesystem, an emptyDir): a new random id.

use crate::meta;
use serde_json::Value;

/// The supervisor's root: `MEMBER_ID`, `specs/`, `data/` live here.
pub const SUP_ROOT: &str = "/hab/sup/default";

/// Where a supervisor's member id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No `MEMBER_ID` survives the pod: a new random id at every start.
    Fresh,
    /// A `MEMBER_ID` file projected from the pod (downward API): this id, and nothing else
    /// persisted (the member list starts empty, so the peer file is read).
    Projected(String),
    /// `/hab/sup` on this claim (`namespace/claim`): id and saved member list persist.
    Persisted(String),
}

/// What a persisted `/hab/sup` holds between pods.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    /// The `MEMBER_ID` file.
    pub member_id: String,
    /// The addresses of the member list saved in `data/<member_id>.rst`: a restarted
    /// supervisor with a non-empty member list gossips with these and ignores its peer file.
    pub peers: Vec<String>,
}

fn habitat_container(pod: &Value) -> Option<&Value> {
    pod["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "habitat-service")
}

fn volume<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["spec"]["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

/// The value of a downward-API `fieldRef` for this pod.
fn field_value(pod: &Value, path: &str) -> Option<String> {
    let v = match path {
        "metadata.name" => pod["metadata"]["name"].clone(),
        "metadata.namespace" => pod["metadata"]["namespace"].clone(),
        "metadata.uid" => pod["metadata"]["uid"].clone(),
        p => {
            let key = p
                .strip_prefix("metadata.labels['")
                .or_else(|| p.strip_prefix("metadata.annotations['"))?
                .strip_suffix("']")?;
            let map = if p.starts_with("metadata.labels") {
                "labels"
            } else {
                "annotations"
            };
            pod["metadata"][map][key].clone()
        }
    };
    v.as_str().map(String::from)
}

/// The content of file `file` (a path inside the volume) of a downwardAPI or projected volume.
fn projected_file(pod: &Value, vol: &Value, file: &str) -> Option<String> {
    let mut items: Vec<&Value> = vol["downwardAPI"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    for source in vol["projected"]["sources"].as_array().into_iter().flatten() {
        items.extend(
            source["downwardAPI"]["items"]
                .as_array()
                .into_iter()
                .flatten(),
        );
    }
    items
        .into_iter()
        .find(|i| i["path"] == file)
        .and_then(|i| field_value(pod, i["fieldRef"]["fieldPath"].as_str()?))
}

/// Where the member id of `pod`'s supervisor comes from.
pub fn identity(pod: &Value) -> Identity {
    let Some(c) = habitat_container(pod) else {
        return Identity::Fresh;
    };
    let member_file = format!("{SUP_ROOT}/MEMBER_ID");
    let mounts: Vec<&Value> = c["volumeMounts"].as_array().into_iter().flatten().collect();
    // The file itself, mounted from a projected volume.
    for m in &mounts {
        let path = m["mountPath"].as_str().unwrap_or_default();
        let Some(vol) = volume(pod, m["name"].as_str().unwrap_or_default()) else {
            continue;
        };
        let sub = m["subPath"].as_str().unwrap_or_default();
        let file = if path == member_file && !sub.is_empty() {
            Some(sub.to_string())
        } else {
            member_file
                .strip_prefix(&format!("{}/", path.trim_end_matches('/')))
                .filter(|_| sub.is_empty())
                .map(String::from)
        };
        if let Some(id) = file.and_then(|f| projected_file(pod, vol, &f)) {
            return Identity::Projected(id);
        }
    }
    // The deepest mount holding /hab/sup/default, when it is a claim.
    let holding = mounts
        .iter()
        .filter(|m| m["subPath"].as_str().unwrap_or_default().is_empty())
        .filter(|m| {
            let p = m["mountPath"]
                .as_str()
                .unwrap_or_default()
                .trim_end_matches('/');
            !p.is_empty() && (SUP_ROOT == p || SUP_ROOT.starts_with(&format!("{p}/")))
        })
        .max_by_key(|m| m["mountPath"].as_str().unwrap_or_default().len());
    let claim = holding
        .and_then(|m| volume(pod, m["name"].as_str()?))
        .and_then(|v| v["persistentVolumeClaim"]["claimName"].as_str());
    match claim {
        Some(claim) => Identity::Persisted(format!("{}/{claim}", meta::namespace(pod))),
        None => Identity::Fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(mounts: Value, volumes: Value) -> Value {
        json!({"metadata": {"name": "redis-1", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "habitat-service", "volumeMounts": mounts}],
                "volumes": volumes}})
    }

    /// Facts §1 "Persistent state": "Supervisor root is `/hab/sup/default`: `MEMBER_ID` file,
    /// ... Member ID is a 32-char lowercase hex UUID" and `load_member` writes a new one when the
    /// file is missing: without a volume, every pod is a new member.
    #[test]
    fn without_a_volume_the_id_is_fresh() {
        assert_eq!(identity(&pod(json!([]), json!([]))), Identity::Fresh);
        let empty = pod(
            json!([{"name": "sup", "mountPath": "/hab/sup"}]),
            json!([{"name": "sup", "emptyDir": {}}]),
        );
        assert_eq!(identity(&empty), Identity::Fresh);
    }

    /// Facts §1: "`data/<member_id>.rst` (saved member list and rumors, restored at boot ...)":
    /// a claim under `/hab/sup` keeps the id and the member list.
    #[test]
    fn a_claim_holding_hab_sup_persists_the_id() {
        for path in ["/hab", "/hab/sup", "/hab/sup/default", "/hab/sup/"] {
            let p = pod(
                json!([{"name": "data", "mountPath": path}]),
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-redis-1"}}]),
            );
            assert_eq!(
                identity(&p),
                Identity::Persisted("ns/data-redis-1".into()),
                "{path}"
            );
        }
        let elsewhere = pod(
            json!([{"name": "data", "mountPath": "/hab/svc/redis/data"}]),
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-redis-1"}}]),
        );
        assert_eq!(identity(&elsewhere), Identity::Fresh);
    }

    /// `load_member` reads the `MEMBER_ID` file as it is: a file projected by the downward API
    /// gives the same id to every pod of that name.
    #[test]
    fn a_projected_member_id_file_is_read() {
        let sub = pod(
            json!([{"name": "id", "mountPath": "/hab/sup/default/MEMBER_ID", "subPath": "MEMBER_ID"}]),
            json!([{"name": "id", "downwardAPI": {"items": [
                {"path": "MEMBER_ID", "fieldRef": {"fieldPath": "metadata.name"}}]}}]),
        );
        assert_eq!(identity(&sub), Identity::Projected("redis-1".into()));
        let projected = pod(
            json!([{"name": "id", "mountPath": "/hab/sup/default/MEMBER_ID", "subPath": "MEMBER_ID"}]),
            json!([{"name": "id", "projected": {"sources": [{"downwardAPI": {"items": [
                {"path": "MEMBER_ID", "fieldRef": {"fieldPath": "metadata.labels['x']"}}]}}]}}]),
        );
        assert_eq!(identity(&projected), Identity::Fresh, "no such label");
    }
}
