//! Writing children: created when new, then server-side applied under one field manager with
//! force, so every write is idempotent; a fingerprint annotation tells the observer whether a
//! child matches the spec.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

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

/// Writes `desired` (stamped with its fingerprint) and returns the live object. A child the
/// cache does not hold (`cached` false) is created with a POST; one that exists is server-side
/// applied, and its fields moved from a create's entry to the apply's first when the create's
/// entry owns one the apply does not ([`ownership`](super::ownership)): the apply is then sent
/// again, so that it removes what the operator no longer sets.
pub async fn apply<K>(client: &Client, desired: &K, cached: bool) -> Result<K, Error>
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
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        match api.create(&params, &stamped).await {
            Ok(created) => return Ok(created),
            // Created meanwhile (by this operator's earlier pass the cache has not shown yet, or
            // by someone else): applied over, as any existing child.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => return Err(failed("create")(source)),
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
