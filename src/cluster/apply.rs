//! Writing children: server-side apply under one field manager with force, so every write is
//! idempotent; a fingerprint annotation tells the observer whether a child matches the spec.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{is_not_found, Error};

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "habitat-operator";
/// Annotation holding the fingerprint of the desired object last applied.
pub const FINGERPRINT_ANNOTATION: &str = "habitat.sh/applied-fingerprint";

/// A stable fingerprint of a desired object (before it is stamped).
pub fn fingerprint<T: Serialize>(desired: &T) -> String {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(desired)
        .unwrap_or_default()
        .hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Whether a live object's metadata carries the fingerprint of `desired`.
pub fn is_current<T: Serialize>(live: &ObjectMeta, desired: &T) -> bool {
    live.annotations
        .as_ref()
        .and_then(|a| a.get(FINGERPRINT_ANNOTATION))
        == Some(&fingerprint(desired))
}

/// Server-side applies `desired` (stamped with its fingerprint) and returns the live object.
pub async fn apply<K>(client: &Client, desired: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + Debug,
{
    let name = desired.name_any();
    let fp = fingerprint(desired);
    let mut stamped = desired.clone();
    stamped
        .annotations_mut()
        .insert(FINGERPRINT_ANNOTATION.to_string(), fp);
    let mut body = serde_json::to_value(&stamped).unwrap_or_default();
    // Apply bodies name their type; the k8s-openapi structs leave it implicit.
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    let api: Api<K> = Api::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(|source| Error::Apply {
        action: "apply",
        kind: K::kind(&()).into_owned(),
        name,
        source,
    })
}

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
}
