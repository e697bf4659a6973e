//! Writing children: every child is server-side applied under one field manager with force, new
//! or existing, so every write is idempotent. Each carries a fingerprint annotation of the
//! desired object it was applied from, which changes whenever the operator's desired object does
//! (the reconciler's drift module compares each live child with what this module would send).

use std::fmt::Debug;

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

/// Writes `desired` (stamped with its fingerprint) with a server-side apply under
/// [`FIELD_MANAGER`], forced, and returns the live object. The one write of every child, new or
/// existing: the apply creates a child that is missing, puts back every field the operator sets
/// that someone changed, removes the fields the operator set before and no longer sets (its
/// field manager owns them), and leaves alone the fields other managers own.
pub async fn apply<K: Child>(client: &Client, desired: &K) -> Result<K, Error> {
    let name = desired.name_any();
    let api: Api<K> = Api::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
    let mut body = serde_json::to_value(stamped(desired)).unwrap_or_default();
    // Apply bodies name their type; the k8s-openapi structs leave it implicit.
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
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
