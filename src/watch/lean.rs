//! Watched objects decoded without the parts the operator never reads.
//!
//! [`slim`](crate::watch::slim) drops those parts once an object is decoded, so that the
//! caches do not keep them. Decoding them first still cost the operator a large part of its CPU:
//! every list item and watch event carries the object's `managedFields` (whose `fieldsV1` are
//! decoded into `serde_json::Value` trees), and every pod event its whole spec (containers,
//! volumes, environment). Profiled at N = 1000 on the real ground, decoding `managedFields` alone
//! was about 7% of the operator's CPU samples and a pod's spec 4%.
//!
//! [`Lean<K>`] decodes `K` from the same JSON, but skips the values at the paths `K` names
//! ([`Skip::PATHS`]) as the parser meets them, without building them, as if the server had not
//! sent them. Every skipped field is optional in `K` or defaulted when absent (k8s-openapi decodes a
//! missing required field as its default), and none of them is read by the reconciler: the
//! transform of each cache drops the same parts again (and more) after decoding.
//! [`Lean`] is a [`kube::Resource`] of the same kind, so an `Api<Lean<K>>` lists and watches `K`.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    SeqAccess, Visitor,
};
use serde::Deserialize;

use crate::api::Habitat;

/// A kind whose decoding skips some paths.
pub trait Skip {
    /// Paths from the object's root, each a sequence of keys, whose values are not decoded.
    /// At most 64.
    const PATHS: &'static [&'static [&'static str]];
}

/// Every object's field managers' records.
const MANAGED_FIELDS: &[&str] = &["metadata", "managedFields"];

impl Skip for Pod {
    /// The reconciler reads a pod's metadata, phase, addresses and Ready condition
    /// ([`slim_pod`](crate::watch::slim::slim_pod)).
    const PATHS: &'static [&'static [&'static str]] = &[
        MANAGED_FIELDS,
        &["spec"],
        &["status", "containerStatuses"],
        &["status", "initContainerStatuses"],
        &["status", "ephemeralContainerStatuses"],
    ];
}

impl Skip for StatefulSet {
    /// The operator compares the pod template with what it applies, not the claim templates,
    /// which cannot change ([`slim_statefulset`](crate::watch::slim::slim_statefulset)).
    const PATHS: &'static [&'static [&'static str]] =
        &[MANAGED_FIELDS, &["spec", "volumeClaimTemplates"]];
}

impl Skip for Habitat {
    /// The reconciler reads everything but the managedFields.
    const PATHS: &'static [&'static [&'static str]] = &[MANAGED_FIELDS];
}

/// How a watched type becomes the kind its cache holds: a [`Lean`] decoding of it, or the kind
/// itself. Only the watches with many events per Habitat decode lean (pods, StatefulSets and
/// Habitats: every status update of each): each kind decoded lean adds its own copy of the
/// decoding code to the binary, whose text is most of the operator's resident memory, and the
/// peer ConfigMaps, Services, budgets and Secrets change a few times in a Habitat's life.
pub trait Decoded<K> {
    fn decoded(self) -> K;
}

impl<K: Skip> Decoded<K> for Lean<K> {
    fn decoded(self) -> K {
        self.0
    }
}

/// Kinds whose watches decode them whole.
macro_rules! decoded_whole {
    ($($kind:ty),*) => {$(
        impl Decoded<$kind> for $kind {
            fn decoded(self) -> $kind {
                self
            }
        }
    )*};
}

decoded_whole!(
    ConfigMap,
    Service,
    PodDisruptionBudget,
    PartialObjectMeta<Secret>
);

/// `K`, decoded without the values at [`Skip::PATHS`].
#[derive(Clone, Debug)]
pub struct Lean<K>(pub K);

impl<'de, K: Deserialize<'de> + Skip> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(Skipping {
            inner: d,
            paths: Paths::root(K::PATHS),
        })
        .map(Lean)
    }
}

impl<K: kube::Resource> kube::Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// The paths still to be matched at one depth of the object: those whose keys so far were the
/// keys of the way down.
#[derive(Clone, Copy)]
struct Paths {
    all: &'static [&'static [&'static str]],
    /// Which of `all` are still matched, one bit each.
    live: u64,
    depth: usize,
}

/// What to do with a key's value.
enum At {
    /// A whole path: skip the value.
    Skip,
    /// A path goes on below: decode the value, skipping what these paths say.
    Descend(Paths),
    /// No path: decode the value whole.
    Decode,
}

impl Paths {
    fn root(all: &'static [&'static [&'static str]]) -> Self {
        assert!(all.len() <= 64, "at most 64 skipped paths");
        Paths {
            all,
            live: mask(all.len()),
            depth: 0,
        }
    }

    fn at(&self, key: &str) -> At {
        let mut below = 0u64;
        for (i, path) in self.all.iter().enumerate() {
            if self.live & (1 << i) == 0 || path.get(self.depth) != Some(&key) {
                continue;
            }
            if path.len() == self.depth + 1 {
                return At::Skip;
            }
            below |= 1 << i;
        }
        if below == 0 {
            At::Decode
        } else {
            At::Descend(Paths {
                all: self.all,
                live: below,
                depth: self.depth + 1,
            })
        }
    }
}

/// The bits of the first `n` paths.
fn mask(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// A deserializer that hands its visitor maps that skip `paths`.
struct Skipping<D> {
    inner: D,
    paths: Paths,
}

/// Forwards `deserialize_*` methods to the inner deserializer, with the visitor wrapped.
macro_rules! forward {
    ($($method:ident ( $($arg:ident : $ty:ty),* )),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method($($arg,)* Wrapped { inner: visitor, paths: self.paths })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Skipping<D> {
    type Error = D::Error;

    forward!(
        deserialize_any(),
        deserialize_bool(),
        deserialize_i8(),
        deserialize_i16(),
        deserialize_i32(),
        deserialize_i64(),
        deserialize_i128(),
        deserialize_u8(),
        deserialize_u16(),
        deserialize_u32(),
        deserialize_u64(),
        deserialize_u128(),
        deserialize_f32(),
        deserialize_f64(),
        deserialize_char(),
        deserialize_str(),
        deserialize_string(),
        deserialize_bytes(),
        deserialize_byte_buf(),
        deserialize_option(),
        deserialize_unit(),
        deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str),
        deserialize_seq(),
        deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_map(),
        deserialize_struct(name: &'static str, fields: &'static [&'static str]),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_identifier(),
        deserialize_ignored_any(),
    );

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// A visitor whose maps skip `paths` (and whose options and newtypes pass them on).
struct Wrapped<V> {
    inner: V,
    paths: Paths,
}

/// Forwards `visit_*` methods of one value to the inner visitor.
macro_rules! visit {
    ($($method:ident ( $ty:ty )),* $(,)?) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrapped<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Skipping {
            inner: d,
            paths: self.paths,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Skipping {
            inner: d,
            paths: self.paths,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        // No path goes through a list.
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(LeanMap {
            inner: map,
            paths: self.paths,
            value: None,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A map without the values of the keys that end a path.
struct LeanMap<A> {
    inner: A,
    paths: Paths,
    /// The paths below the key just read, if any.
    value: Option<Paths>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for LeanMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key_seed(KeySeed)? else {
                return Ok(None);
            };
            self.value = match self.paths.at(&key) {
                At::Skip => {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                At::Descend(paths) => Some(paths),
                At::Decode => None,
            };
            return match key {
                Cow::Borrowed(k) => seed.deserialize(de::value::BorrowedStrDeserializer::new(k)),
                Cow::Owned(k) => seed.deserialize(k.into_deserializer()),
            }
            .map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        match self.value.take() {
            Some(paths) => self
                .inner
                .next_value_seed(WrappedSeed { inner: seed, paths }),
            None => self.inner.next_value_seed(seed),
        }
    }
}

/// A map key, borrowed from the input when it can be.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// A value's seed, whose maps skip `paths`.
struct WrappedSeed<S> {
    inner: S,
    paths: Paths,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for WrappedSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Skipping {
            inner: d,
            paths: self.paths,
        })
    }
}

/// A watch's events, as events of the kind its cache holds.
pub fn decoded_event<K, W: Decoded<K>>(
    e: kube::runtime::watcher::Event<W>,
) -> kube::runtime::watcher::Event<K> {
    use kube::runtime::watcher::Event;
    match e {
        Event::Apply(o) => Event::Apply(o.decoded()),
        Event::Delete(o) => Event::Delete(o.decoded()),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.decoded()),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ObjectList, WatchEvent};
    use serde_json::json;

    fn managed_fields() -> serde_json::Value {
        json!([{
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-12-06T09:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}},
            "subresource": "status",
        }])
    }

    fn pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "redis-0",
                "namespace": "bench",
                "uid": "u-1",
                "resourceVersion": "41",
                // Keys named like skipped paths, below other keys, are not skipped.
                "labels": {"spec": "kept", "managedFields": "kept", "app": "redis"},
                "annotations": {"a\"b": "escaped key"},
                "managedFields": managed_fields(),
            },
            "spec": {
                "containers": [{"name": "redis", "image": "core/redis", "env": [{"name": "A", "value": "1"}]}],
                "volumes": [{"name": "config", "configMap": {"name": "redis"}}],
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.5",
                "podIPs": [{"ip": "10.0.0.5"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "redis", "image": "core/redis", "imageID": "sha256:0", "ready": true,
                    "restartCount": 0, "state": {"running": {"startedAt": "2026-12-06T09:00:00Z"}},
                }],
            },
        })
    }

    /// What a whole decode gives once the skipped parts are cleared by hand.
    fn pod_without_skipped() -> Pod {
        let mut p: Pod = serde_json::from_value(pod_json()).expect("a pod");
        p.metadata.managed_fields = None;
        p.spec = None;
        if let Some(s) = p.status.as_mut() {
            s.container_statuses = None;
        }
        p
    }

    #[test]
    fn a_lean_pod_is_the_pod_without_its_spec_container_statuses_and_managed_fields() {
        let text = pod_json().to_string();
        let lean: Lean<Pod> = serde_json::from_str(&text).expect("a lean pod");
        assert_eq!(lean.0, pod_without_skipped());
        let labels = lean.0.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get("spec").map(String::as_str), Some("kept"));
        assert_eq!(
            labels.get("managedFields").map(String::as_str),
            Some("kept")
        );
        assert_eq!(
            lean.0
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("a\"b"))
                .map(String::as_str),
            Some("escaped key")
        );
        // The same from a byte slice and from a Value (the key is then not borrowed).
        let from_slice: Lean<Pod> = serde_json::from_slice(text.as_bytes()).expect("a lean pod");
        assert_eq!(from_slice.0, pod_without_skipped());
        let from_value: Lean<Pod> = serde_json::from_value(pod_json()).expect("a lean pod");
        assert_eq!(from_value.0, pod_without_skipped());
    }

    #[test]
    fn an_escaped_key_is_matched_by_its_value() {
        let text = pod_json()
            .to_string()
            .replace("\"managedFields\":[", "\"managed\\u0046ields\":[");
        assert!(text.contains("managed\\u0046ields"), "{text}");
        let lean: Lean<Pod> = serde_json::from_str(&text).expect("a lean pod");
        assert_eq!(lean.0.metadata.managed_fields, None);
        let whole: Pod = serde_json::from_str(&text).expect("a pod");
        assert!(
            whole.metadata.managed_fields.is_some(),
            "the key is managedFields"
        );
    }

    #[test]
    fn lean_watch_events_and_lists_hold_lean_objects_whatever_the_order_of_their_keys() {
        // The server writes "type" first; the object first makes serde buffer it.
        for event in [
            json!({"type": "MODIFIED", "object": pod_json()}),
            json!({"object": pod_json(), "type": "MODIFIED"}),
        ] {
            let e: WatchEvent<Lean<Pod>> =
                serde_json::from_str(&event.to_string()).expect("an event");
            match e {
                WatchEvent::Modified(p) => assert_eq!(p.0, pod_without_skipped()),
                other => panic!("{other:?}"),
            }
        }
        let list = json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "42"},
            "items": [pod_json(), pod_json()],
        });
        let l: ObjectList<Lean<Pod>> = serde_json::from_str(&list.to_string()).expect("a list");
        assert_eq!(l.items.len(), 2);
        assert!(l.items.iter().all(|p| p.0 == pod_without_skipped()));
        assert_eq!(l.metadata.resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn a_lean_statefulset_has_no_claim_templates_and_keeps_its_pod_template() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "redis", "annotations": {"habitat.sh/fingerprint": "abc"}, "managedFields": managed_fields()},
            "spec": {
                "replicas": 3,
                "serviceName": "redis",
                "selector": {"matchLabels": {"app": "redis"}},
                "template": {"metadata": {"labels": {"app": "redis"}}, "spec": {"containers": [{"name": "redis"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
            },
            "status": {"replicas": 3, "readyReplicas": 2, "updateRevision": "redis-1"},
        });
        let lean: Lean<StatefulSet> =
            serde_json::from_str(&sts.to_string()).expect("a lean StatefulSet");
        let mut whole: StatefulSet = serde_json::from_value(sts).expect("a StatefulSet");
        whole.metadata.managed_fields = None;
        let spec = whole.spec.as_mut().expect("a spec");
        assert!(spec.volume_claim_templates.is_some());
        spec.volume_claim_templates = None;
        assert_eq!(lean.0, whole);
        let template = &lean.0.spec.as_ref().expect("a spec").template;
        assert!(template.spec.is_some(), "compared for drift");
    }

    #[test]
    fn a_lean_habitat_loses_only_its_managed_fields() {
        let h = crate::api::fixtures::habitat();
        let mut v = serde_json::to_value(&h).expect("a Habitat");
        v["metadata"]["managedFields"] = managed_fields();
        let lean: Lean<Habitat> = serde_json::from_str(&v.to_string()).expect("a lean Habitat");
        assert_eq!(
            serde_json::to_value(&lean.0).expect("json"),
            serde_json::to_value(&h).expect("json")
        );
    }

    #[test]
    fn a_path_is_skipped_only_at_its_own_depth() {
        let paths = Paths::root(<Pod as Skip>::PATHS);
        assert!(matches!(paths.at("spec"), At::Skip));
        assert!(matches!(paths.at("apiVersion"), At::Decode));
        let At::Descend(status) = paths.at("status") else {
            panic!("status holds skipped paths")
        };
        assert!(matches!(status.at("containerStatuses"), At::Skip));
        assert!(matches!(status.at("spec"), At::Decode));
        assert!(matches!(status.at("managedFields"), At::Decode));
        let At::Descend(meta) = paths.at("metadata") else {
            panic!("metadata holds a skipped path")
        };
        assert!(matches!(meta.at("managedFields"), At::Skip));
        assert!(matches!(meta.at("containerStatuses"), At::Decode));
    }

    #[test]
    fn a_lean_resource_is_its_kind_and_its_events_are_the_kinds() {
        use kube::runtime::watcher::Event;
        use kube::Resource;
        assert_eq!(Lean::<Pod>::kind(&()), "Pod");
        assert_eq!(
            Lean::<Pod>::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert!(!Lean::<Pod>::metadata_api());
        let lean: Lean<Pod> = serde_json::from_value(pod_json()).expect("a lean pod");
        let Event::Apply(p) = decoded_event::<Pod, _>(Event::Apply(lean)) else {
            panic!("an Apply stays an Apply")
        };
        assert_eq!(p, pod_without_skipped());
        let whole: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "peer"}})).expect("a ConfigMap");
        let Event::Delete(c) = decoded_event::<ConfigMap, _>(Event::Delete(whole.clone())) else {
            panic!("a Delete stays a Delete")
        };
        assert_eq!(c, whole);
    }
}
