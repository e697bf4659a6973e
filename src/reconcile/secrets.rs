//! The Secrets a Habitat uses, read only when needed. The cache holds Secrets' metadata only
//! (as cert-manager 1.12 does): thousands of unrelated Secrets (Helm releases of 100 KiB) cost
//! their metadata, not their data. The contents of a ring key Secret, and the key names of a
//! config Secret, are read with one GET when the cached resourceVersion changes and remembered
//! as facts (key names, the parsed key's name): never the values, and never logged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};

use crate::api::key_name::KeyName;
use crate::api::Habitat;
use crate::error::Error;
use crate::reconcile::ring::check_secret;
use crate::watch::index;
use crate::watch::Stores;

/// What the operator keeps of one Secret it read: no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFacts {
    /// The Secret's name.
    pub name: String,
    /// The names of its keys (`data` and `stringData`).
    pub keys: BTreeSet<String>,
    /// Its ring key, or why it holds none usable (without key material).
    pub ring_key: Result<KeyName, String>,
}

impl SecretFacts {
    /// The facts of a Secret read in full; the Secret itself is dropped by the caller.
    pub fn of(s: &Secret) -> Self {
        let keys = s
            .data
            .iter()
            .flat_map(|d| d.keys())
            .chain(s.string_data.iter().flat_map(|d| d.keys()))
            .cloned()
            .collect();
        SecretFacts {
            name: s.name_any(),
            keys,
            ring_key: check_secret(s),
        }
    }
}

/// The Secrets of one Habitat as one reconcile sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretsView {
    /// The Secrets of the namespace the spec names and that exist (files Secret included).
    pub present: BTreeSet<String>,
    /// The facts of the config and ring Secrets the spec names, by name.
    pub named: BTreeMap<String, SecretFacts>,
    /// The facts of the Secrets labelled with the spec's ring.
    pub ring: Vec<SecretFacts>,
}

impl SecretsView {
    /// The facts of `name`, when it exists and was read.
    pub fn find(&self, name: &str) -> Option<&SecretFacts> {
        self.named.get(name)
    }
}

/// Reads Secrets by GET when their cached resourceVersion is newer than what it remembers.
/// Per Secret, the resourceVersion read and its facts.
type Memo = HashMap<ObjectRef<Secret>, (String, SecretFacts)>;

/// Clones share one memory.
#[derive(Default, Clone)]
pub struct SecretReader {
    memo: Arc<Mutex<Memo>>,
}

impl SecretReader {
    /// The facts of the Secret whose cached metadata is `meta`; None when it is gone.
    pub async fn facts(
        &self,
        client: &Client,
        meta: &PartialObjectMeta<Secret>,
    ) -> Result<Option<SecretFacts>, Error> {
        let ns = meta.namespace().unwrap_or_default();
        let name = meta.name_any();
        let r = ObjectRef::new(&name).within(&ns);
        let version = meta.resource_version().unwrap_or_default();
        {
            let memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((v, facts)) = memo.get(&r) {
                if *v == version {
                    return Ok(Some(facts.clone()));
                }
            }
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        // The API server bounds a Secret to 1 MiB; the value lives only in this scope.
        let secret = api
            .get_opt(&name)
            .await
            .map_err(|source| Error::ReadSecret {
                name: name.clone(),
                source,
            })?;
        let mut memo = self.memo.lock().unwrap_or_else(|p| p.into_inner());
        match secret {
            Some(s) => {
                let facts = SecretFacts::of(&s);
                memo.insert(r, (s.resource_version().unwrap_or_default(), facts.clone()));
                Ok(Some(facts))
            }
            None => {
                memo.remove(&r);
                Ok(None)
            }
        }
    }

    /// Forgets a Secret that was deleted.
    pub fn forget(&self, meta: &PartialObjectMeta<Secret>) {
        let r = ObjectRef::new(&meta.name_any()).within(&meta.namespace().unwrap_or_default());
        self.memo
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&r);
    }

    /// The facts of the Secrets labelled with `ring` in `ns`.
    pub async fn ring(
        &self,
        client: &Client,
        stores: &Stores,
        ns: &str,
        ring: &str,
    ) -> Result<Vec<SecretFacts>, Error> {
        let mut out = vec![];
        for meta in stores
            .index
            .secrets_by_ring
            .objects(&stores.secrets, &index::key(&[ns, ring]))
        {
            out.extend(self.facts(client, &meta).await?);
        }
        Ok(out)
    }

    /// What `h` needs to know of its Secrets: which named ones exist; the key names of the
    /// config Secret and the ring key of the ring Secret (read); the ring's labelled keys.
    pub async fn view(
        &self,
        client: &Client,
        stores: &Stores,
        h: &Habitat,
    ) -> Result<SecretsView, Error> {
        let ns = h.namespace().unwrap_or_default();
        let svc = &h.spec.service;
        let mut view = SecretsView::default();
        let cached = |name: &str| stores.secrets.get(&ObjectRef::new(name).within(&ns));
        if let Some(name) = &svc.files_secret_name {
            if cached(name).is_some() {
                view.present.insert(name.clone());
            }
        }
        for name in [&svc.config_secret_name, &svc.ring_secret_name]
            .into_iter()
            .flatten()
        {
            if let Some(meta) = cached(name) {
                if let Some(facts) = self.facts(client, &meta).await? {
                    view.present.insert(name.clone());
                    view.named.insert(name.clone(), facts);
                }
            }
        }
        if let (None, Some(ring)) = (&svc.ring_secret_name, &svc.ring) {
            view.ring = self.ring(client, stores, &ns, &ring.name).await?;
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::ring_key::{generate, ring_secret};
    use chrono::{TimeZone, Utc};
    use k8s_openapi::ByteString;

    #[test]
    fn facts_keep_key_names_and_the_key_name_never_the_values() {
        let (name, file) = generate(
            "prod",
            Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap(),
        );
        let mut s = ring_secret("ns", &name, file.clone());
        s.data
            .get_or_insert_with(Default::default)
            .insert("user.toml".into(), ByteString(b"port = 1".to_vec()));
        let facts = SecretFacts::of(&s);
        assert_eq!(facts.ring_key, Ok(name.clone()));
        assert!(facts.keys.contains("user.toml") && facts.keys.contains("ring-key"));
        let printed = format!("{facts:?}");
        assert!(!printed.contains("port = 1"), "{printed}");
        let material = file.lines().last().unwrap_or_default();
        assert!(
            !material.is_empty() && !printed.contains(material),
            "{printed}"
        );
    }
}
