//! Writing children: created when new, then server-side applied under one field manager with
//! force, so every write is idempotent; a fingerprint annotation tells the observer whether a
//! child matches the spec. A ConfigMap whose data alone differs from the last write (the peer
//! ConfigMap, as pods come and go) is merge-patched instead ([`data_patch`]).

use std::fmt::Debug;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::ownership;
use crate::error::{is_not_found, Error};

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "habitat-operator";
/// Annotation holding the fingerprint of the desired object last applied.
pub const FINGERPRINT_ANNOTATION: &str = "habitat.sh/applied-fingerprint";

pub use crate::children::fingerprint;

/// Whether a live object's metadata carries the fingerprint of `desired`.
pub fn is_current<T: Serialize>(live: &ObjectMeta, desired: &T) -> bool {
    carries(live, &fingerprint(desired))
}

/// Whether a live object's metadata carries `fingerprint` (of a desired object).
pub fn carries(live: &ObjectMeta, fingerprint: &str) -> bool {
    live.annotations
        .as_ref()
        .and_then(|a| a.get(FINGERPRINT_ANNOTATION))
        .is_some_and(|f| f == fingerprint)
}

/// `desired` with its fingerprint in the annotation [`FINGERPRINT_ANNOTATION`]: the object
/// [`apply`] sends.
pub fn stamped<K: Resource + Serialize + Clone>(desired: &K) -> K {
    let mut stamped = desired.clone();
    stamped
        .annotations_mut()
        .insert(FINGERPRINT_ANNOTATION.to_string(), fingerprint(desired));
    stamped
}

/// A kind of child the operator writes: namespaced, of a fixed type, and (de)serializable.
pub trait Child:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + Debug
{
}

impl<K> Child for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug
{
}

/// Writes `desired` (stamped with its fingerprint) and returns the live object. A child the
/// cache does not hold (`cached` false) is created with a POST; one that exists is server-side
/// applied, and its fields moved from a create's entry to the apply's first when the create's
/// entry owns one the apply does not ([`ownership`](super::ownership)): the apply is then sent
/// again, so that it removes what the operator no longer sets.
pub async fn apply<K: Child>(client: &Client, desired: &K, cached: bool) -> Result<K, Error> {
    let name = desired.name_any();
    let stamped = stamped(desired);
    let api: Api<K> = Api::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
    let failed = |action: &'static str| {
        let name = name.clone();
        move |source| Error::Apply {
            action,
            kind: K::kind(&()).into_owned(),
            name,
            source,
        }
    };
    if !cached {
        // Created meanwhile (by this operator's earlier pass the cache has not shown yet, or by
        // someone else): applied over, as any existing child.
        if let Some(created) = create(client, desired).await? {
            return Ok(created);
        }
    }
    let mut body = serde_json::to_value(&stamped).unwrap_or_default();
    // Apply bodies name their type; the k8s-openapi structs leave it implicit.
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let owner = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let mut tries = 0;
    loop {
        let applied = api
            .patch(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(failed("apply"))?;
        let Some(upgrade) = ownership::upgrade(applied.meta(), FIELD_MANAGER) else {
            return Ok(applied);
        };
        // The move names the resourceVersion it read: another writer in between (a controller
        // writing the status) refuses it with 409, and the apply is sent again to read anew.
        tries += 1;
        match api.patch(&name, &owner, &Patch::Json::<()>(upgrade)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 && tries < MOVE_TRIES => continue,
            Err(source) => return Err(failed("take over the fields of")(source)),
        }
    }
}

/// Creates `desired` (stamped with its fingerprint) with a POST, as [`apply`] does for a child
/// the cache does not hold; `None` when it exists already (409), whatever it holds.
pub async fn create<K: Child>(client: &Client, desired: &K) -> Result<Option<K>, Error> {
    let api: Api<K> = Api::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, &stamped(desired)).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(source) => Err(Error::Apply {
            action: "create",
            kind: K::kind(&()).into_owned(),
            name: desired.name_any(),
            source,
        }),
    }
}

/// The merge patch that writes `desired`'s data over `live`, when its data is all that differs
/// from the object the operator last wrote: `live` carries the fingerprint of `desired` with
/// `live`'s data in place of its own. The patch sets the data keys that changed, removes those
/// `desired` no longer has (the fingerprint says the operator wrote them), stamps `desired`'s
/// fingerprint, and names `live`'s resourceVersion, so that the server refuses it (409) if the
/// object changed since it was read. `None` when anything else differs (labels, owner, keys
/// another writer added), or when nothing does: then the caller applies, as for any child.
///
/// A merge patch is the write a plain client makes here, and the cheaper one for the server:
/// an apply's body is parsed as YAML and its field sets computed (docs/performance.md, the
/// twenty-fourth and twenty-eighth passes).
pub fn data_patch(live: &ConfigMap, desired: &ConfigMap) -> Option<Value> {
    let rv = live.metadata.resource_version.as_deref()?;
    let mut last = desired.clone();
    last.data.clone_from(&live.data);
    if !is_current(&live.metadata, &last) || live.data == desired.data {
        return None;
    }
    let empty = Default::default();
    let before = live.data.as_ref().unwrap_or(&empty);
    let after = desired.data.as_ref().unwrap_or(&empty);
    let mut data: Map<String, Value> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        data.insert(k.clone(), Value::Null);
    }
    Some(json!({
        "metadata": {
            "resourceVersion": rv,
            "annotations": {FINGERPRINT_ANNOTATION: fingerprint(desired)},
        },
        "data": data,
    }))
}

/// Writes `desired`'s data over `live` with the merge patch of [`data_patch`], and returns the
/// written object; `None` when that patch does not do (it is not drawn, the object changed
/// since `live` was read, or is gone): the caller then applies.
pub async fn write_data(
    client: &Client,
    live: &ConfigMap,
    desired: &ConfigMap,
) -> Result<Option<ConfigMap>, Error> {
    let Some(patch) = data_patch(live, desired) else {
        return Ok(None);
    };
    let name = desired.name_any();
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(&name, &params, &Patch::Merge(&patch)).await {
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(None),
        Err(source) => Err(Error::Apply {
            action: "patch",
            kind: "ConfigMap".into(),
            name,
            source,
        }),
    }
}

/// How many times a move of a create's fields is tried before the pass fails (and is retried).
const MOVE_TRIES: u32 = 3;

/// Deletes `name`; an object already gone is not an error.
pub async fn delete<K>(client: &Client, namespace: &str, name: &str) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(source) => Err(Error::Apply {
            action: "delete",
            kind: K::kind(&()).into_owned(),
            name: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use crate::children::peer_config::peer_config;
    use crate::children::statefulset::statefulset;

    #[test]
    fn the_fingerprint_follows_the_spec() {
        let a = statefulset(&habitat(), None);
        assert_eq!(fingerprint(&a), fingerprint(&statefulset(&habitat(), None)));
        assert_ne!(
            fingerprint(&a),
            fingerprint(&statefulset(&habitat().count(4), None))
        );
    }

    #[test]
    fn a_live_object_is_current_only_with_the_desired_fingerprint() {
        let desired = statefulset(&habitat(), None);
        let mut live = desired.metadata.clone();
        assert!(!is_current(&live, &desired));
        live.annotations =
            Some([(FINGERPRINT_ANNOTATION.to_string(), fingerprint(&desired))].into());
        assert!(is_current(&live, &desired));
        assert!(!is_current(
            &live,
            &statefulset(&habitat().channel("stable"), None)
        ));
    }

    /// `desired` as the server holds it once the operator wrote it: stamped with its
    /// fingerprint, at resourceVersion 7.
    fn stamped(desired: ConfigMap) -> ConfigMap {
        let mut live = desired.clone();
        live.annotations_mut()
            .insert(FINGERPRINT_ANNOTATION.into(), fingerprint(&desired));
        live.metadata.resource_version = Some("7".into());
        live
    }

    /// The peer ConfigMap as the operator wrote it for `addresses`.
    fn written(addresses: &[&str]) -> ConfigMap {
        stamped(peer_config(&habitat(), &owned(addresses)))
    }

    fn owned(addresses: &[&str]) -> Vec<String> {
        addresses.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn new_addresses_alone_are_merge_patched_with_the_read_version() {
        let live = written(&[]);
        let desired = peer_config(&habitat(), &owned(&["10.0.0.5"]));
        let patch = data_patch(&live, &desired).expect("a data patch");
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "7",
                    "annotations": {FINGERPRINT_ANNOTATION: fingerprint(&desired)},
                },
                "data": {"peer-ip": "10.0.0.5"},
            })
        );
        // Patched, the object carries the desired fingerprint: current, and the next change of
        // address is a data patch again.
        let mut after = desired.clone();
        after.metadata = live.metadata.clone();
        after
            .annotations_mut()
            .insert(FINGERPRINT_ANNOTATION.into(), fingerprint(&desired));
        assert!(is_current(&after.metadata, &desired));
        assert!(data_patch(&after, &peer_config(&habitat(), &owned(&["10.0.0.6"]))).is_some());
    }

    #[test]
    fn a_key_the_operator_wrote_and_no_longer_sets_is_removed() {
        let mut last = peer_config(&habitat(), &owned(&["10.0.0.5"]));
        last.data
            .as_mut()
            .unwrap()
            .insert("old-key".into(), "x".into());
        let live = stamped(last);
        let desired = peer_config(&habitat(), &owned(&["10.0.0.6"]));
        let patch = data_patch(&live, &desired).expect("a data patch");
        assert_eq!(
            patch["data"],
            json!({"peer-ip": "10.0.0.6", "old-key": null})
        );
    }

    #[test]
    fn anything_else_that_differs_is_applied() {
        let desired = peer_config(&habitat(), &owned(&["10.0.0.5"]));
        // Written with a label the operator no longer sets (an older operator's).
        let mut older = peer_config(&habitat(), &[]);
        older.labels_mut().insert("extra".into(), "label".into());
        assert!(data_patch(&stamped(older), &desired).is_none());
        // A label another writer added is theirs: kept, by a patch as by an apply.
        let mut labelled = written(&[]);
        labelled
            .labels_mut()
            .insert("theirs".into(), "label".into());
        assert!(data_patch(&labelled, &desired).is_some());
        // A key another writer added to the data: the fingerprint no longer covers it.
        let mut added = written(&[]);
        added
            .data
            .as_mut()
            .unwrap()
            .insert("theirs".into(), "y".into());
        assert!(data_patch(&added, &desired).is_none());
        // Written before fingerprints, or by someone else.
        let mut unstamped = written(&[]);
        unstamped.annotations_mut().clear();
        assert!(data_patch(&unstamped, &desired).is_none());
        // No resourceVersion to hold the patch to.
        let mut unversioned = written(&[]);
        unversioned.metadata.resource_version = None;
        assert!(data_patch(&unversioned, &desired).is_none());
        // Nothing differs.
        assert!(data_patch(&written(&["10.0.0.5"]), &desired).is_none());
    }
}
