//! Resolving the ring key a Habitat uses, from Secrets in its own namespace.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::key_name::KeyName;
use crate::api::{Habitat, RING_KEY_DATA_KEY};
use crate::children::ring_key;
use crate::reconcile::secrets::{SecretFacts, SecretsView};

/// The state of a Habitat's ring key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// No ring: gossip is not encrypted.
    NotRequired,
    /// The key to use.
    Ready(KeyName),
    /// The named Secret does not exist.
    Missing {
        /// The Secret's name.
        secret: String,
    },
    /// The Secret exists but cannot be used.
    Malformed {
        /// The Secret's name.
        secret: String,
        /// Why, without key material.
        problem: String,
    },
    /// `ring.name` and no Secret of that ring: the operator generates one.
    ToGenerate {
        /// The ring.
        ring: String,
    },
}

impl KeyState {
    /// The key name when the key is usable.
    pub fn key(&self) -> Option<&KeyName> {
        match self {
            KeyState::Ready(k) => Some(k),
            _ => None,
        }
    }
}

/// Checks one Secret as a ring key; `expect_name` requires the key's name line to equal the
/// Secret's name.
pub fn check_secret(secret: &Secret) -> Result<KeyName, String> {
    let name = secret.name_any();
    let content = secret
        .data
        .as_ref()
        .and_then(|d| d.get(RING_KEY_DATA_KEY))
        .ok_or_else(|| format!("Secret {name} has no key {RING_KEY_DATA_KEY:?}"))?;
    ring_key::parse(&content.0, Some(&name)).map_err(|e| format!("Secret {name}: {e}"))
}

/// Resolves the key of `h` from what the reconcile read of the Secrets of its namespace: the
/// Secret `ringSecretName` names, or the Secrets labelled with the spec's ring.
pub fn resolve(h: &Habitat, secrets: &SecretsView) -> KeyState {
    let svc = &h.spec.service;
    if let Some(secret) = &svc.ring_secret_name {
        return match secrets.find(secret) {
            None => KeyState::Missing {
                secret: secret.clone(),
            },
            Some(s) => match &s.ring_key {
                Ok(k) => KeyState::Ready(k.clone()),
                Err(problem) => KeyState::Malformed {
                    secret: secret.clone(),
                    problem: problem.clone(),
                },
            },
        };
    }
    let Some(ring) = &svc.ring else {
        return KeyState::NotRequired;
    };
    match newest(&secrets.ring, &ring.name) {
        Some(k) => KeyState::Ready(k),
        None => KeyState::ToGenerate {
            ring: ring.name.clone(),
        },
    }
}

/// The newest well-formed key of `ring` among `secrets` (those labelled with it): the
/// supervisor itself loads the latest revision; a malformed one is never used.
pub fn newest(secrets: &[SecretFacts], ring: &str) -> Option<KeyName> {
    secrets
        .iter()
        .filter_map(|s| s.ring_key.as_ref().ok())
        .filter(|k| k.ring == ring)
        .max_by(|a, b| a.revision.cmp(&b.revision))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::{habitat, HabitatFixture};
    use crate::children::ring_key::{generate, ring_secret};
    use chrono::{TimeZone, Utc};

    fn secret(ring: &str, minute: u32) -> Secret {
        let (name, file) = generate(
            ring,
            Utc.with_ymd_and_hms(2026, 11, 30, 10, minute, 0).unwrap(),
        );
        ring_secret("ns", &name, file)
    }

    fn named(s: &Secret) -> SecretsView {
        let facts = SecretFacts::of(s);
        SecretsView {
            named: [(facts.name.clone(), facts)].into(),
            ..Default::default()
        }
    }

    fn labelled(secrets: &[Secret]) -> SecretsView {
        SecretsView {
            ring: secrets.iter().map(SecretFacts::of).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn no_ring_needs_no_key() {
        assert_eq!(
            resolve(&habitat(), &SecretsView::default()),
            KeyState::NotRequired
        );
    }

    #[test]
    fn a_named_secret_is_used_when_well_formed() {
        let s = secret("prod", 0);
        let h = habitat().ring_secret("prod-20261130100000");
        assert_eq!(
            resolve(&h, &named(&s)),
            KeyState::Ready(KeyName::parse("prod-20261130100000").unwrap())
        );
    }

    #[test]
    fn a_missing_or_malformed_named_secret_is_reported() {
        let h = habitat().ring_secret("prod-20261130100000");
        assert!(matches!(
            resolve(&h, &SecretsView::default()),
            KeyState::Missing { .. }
        ));
        let mut s = secret("prod", 0);
        s.data = None;
        match resolve(&h, &named(&s)) {
            KeyState::Malformed { problem, .. } => {
                assert!(problem.contains("has no key \"ring-key\""), "{problem}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_ring_uses_its_newest_labelled_key_and_ignores_other_rings() {
        let secrets = [secret("prod", 0), secret("prod", 5), secret("dev", 9)];
        let h = habitat().ring("prod");
        assert_eq!(
            resolve(&h, &labelled(&secrets)),
            KeyState::Ready(KeyName::parse("prod-20261130100500").unwrap())
        );
    }

    #[test]
    fn a_ring_without_a_key_asks_for_generation() {
        let secrets = [secret("dev", 9)];
        assert_eq!(
            resolve(&habitat().ring("prod"), &labelled(&secrets)),
            KeyState::ToGenerate {
                ring: "prod".into()
            }
        );
    }
}
