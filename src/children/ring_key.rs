//! Ring keys: the `SYM-SEC-1` key file format, generation of new keys, and the Secret that
//! holds a generated key. A generated key belongs to its ring, not to any Habitat.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use rand::rngs::OsRng;
use rand::RngCore;

use crate::api::key_name::KeyName;
use crate::api::{LABEL_MANAGED_BY, LABEL_RING, MANAGER, RING_KEY_DATA_KEY};

/// First line of every symmetric ring key file.
pub const KEY_VERSION: &str = "SYM-SEC-1";
const KEY_BYTES: usize = 32;

/// Why a ring key file cannot be used. Never carries key material.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingKeyError {
    /// The first line is not `SYM-SEC-1`.
    #[error("the key does not start with the line SYM-SEC-1")]
    Version,
    /// The second line is not `<ring>-<14 digits>`.
    #[error("the key's second line must be <ring>-<YYYYMMDDhhmmss>")]
    Name,
    /// The key names another ring revision than its Secret.
    #[error("the key is named {found:?} but its Secret is named {expected:?}; they must match")]
    NameMismatch {
        /// The name line of the key.
        found: String,
        /// The Secret's name.
        expected: String,
    },
    /// The key line is not padded standard base64 of 32 bytes.
    #[error("the key's fourth line must be the padded base64 of 32 bytes")]
    Key,
    /// The file is not text.
    #[error("the key is not UTF-8 text")]
    Encoding,
}

/// Checks a key file and returns its name. `secret_name`, when given, must equal the name line.
pub fn parse(content: &[u8], secret_name: Option<&str>) -> Result<KeyName, RingKeyError> {
    let text = std::str::from_utf8(content).map_err(|_| RingKeyError::Encoding)?;
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some(KEY_VERSION) {
        return Err(RingKeyError::Version);
    }
    let name_line = lines.next().map(str::trim_end).unwrap_or_default();
    let name = KeyName::parse(name_line).ok_or(RingKeyError::Name)?;
    if let Some(expected) = secret_name {
        if expected != name_line {
            return Err(RingKeyError::NameMismatch {
                found: name_line.into(),
                expected: expected.into(),
            });
        }
    }
    let key = lines.nth(1).map(str::trim).unwrap_or_default();
    match STANDARD.decode(key) {
        Ok(bytes) if bytes.len() == KEY_BYTES => Ok(name),
        _ => Err(RingKeyError::Key),
    }
}

/// A new key for `ring` with revision `now`, from the operating system's secure random source.
pub fn generate(ring: &str, now: DateTime<Utc>) -> (KeyName, String) {
    let mut key = [0u8; KEY_BYTES];
    OsRng.fill_bytes(&mut key);
    let name = KeyName {
        ring: ring.to_string(),
        revision: now.format("%Y%m%d%H%M%S").to_string(),
    };
    let file = format!("{KEY_VERSION}\n{}\n\n{}", name.full(), STANDARD.encode(key));
    (name, file)
}

/// The Secret holding a generated key: named after the key, labelled with its ring, owned by
/// nobody so that deleting a Habitat never deletes a key other services use.
pub fn ring_secret(namespace: &str, name: &KeyName, file: String) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.full()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (LABEL_RING.to_string(), name.ring.clone()),
                (LABEL_MANAGED_BY.to_string(), MANAGER.to_string()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            RING_KEY_DATA_KEY.to_string(),
            ByteString(file.into_bytes()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 10, 15, 0).unwrap()
    }

    #[test]
    fn a_generated_key_parses_back_to_the_exact_format() {
        let (name, file) = generate("prod", now());
        assert_eq!(name.full(), "prod-20261130101500");
        let lines: Vec<&str> = file.split('\n').collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], "SYM-SEC-1");
        assert_eq!(lines[1], "prod-20261130101500");
        assert_eq!(lines[2], "");
        assert_eq!(lines[3].len(), 44);
        assert!(lines[3].ends_with('=') && !lines[3].ends_with("=="));
        assert_eq!(STANDARD.decode(lines[3]).unwrap().len(), 32);
        assert_eq!(
            parse(file.as_bytes(), Some("prod-20261130101500")),
            Ok(name)
        );
    }

    #[test]
    fn two_generated_keys_differ() {
        assert_ne!(generate("prod", now()).1, generate("prod", now()).1);
    }

    #[test]
    fn a_key_with_a_dashed_ring_name_is_accepted() {
        let file = "SYM-SEC-1\nexample-encrypted-ring-20170829113029\n\nQFfoq4vNlg3zJzzQb5Cd7rgR0zKstWPzOR5iC5ZQjNY=";
        let name = parse(
            file.as_bytes(),
            Some("example-encrypted-ring-20170829113029"),
        )
        .unwrap();
        assert_eq!(name.ring, "example-encrypted-ring");
        assert_eq!(
            name.cache_path(),
            "/hab/cache/keys/example-encrypted-ring-20170829113029.sym.key"
        );
    }

    #[test]
    fn malformed_keys_are_rejected_with_the_reason() {
        let ok_key = STANDARD.encode([7u8; 32]);
        let cases = [
            (
                format!("SYM-1\nprod-20261130101500\n\n{ok_key}"),
                RingKeyError::Version,
            ),
            (
                format!("SYM-SEC-1\nprod-2026\n\n{ok_key}"),
                RingKeyError::Name,
            ),
            (
                "SYM-SEC-1\nprod-20261130101500\n\nc2hvcnQ=".to_string(),
                RingKeyError::Key,
            ),
            (
                "SYM-SEC-1\nprod-20261130101500".to_string(),
                RingKeyError::Key,
            ),
        ];
        for (file, err) in cases {
            assert_eq!(parse(file.as_bytes(), None), Err(err), "{file}");
        }
        let other = format!("SYM-SEC-1\nprod-20261130101500\n\n{ok_key}");
        assert!(matches!(
            parse(other.as_bytes(), Some("prod-20200101000000")),
            Err(RingKeyError::NameMismatch { .. })
        ));
    }

    #[test]
    fn error_messages_never_contain_key_material() {
        let key = STANDARD.encode([9u8; 32]);
        let file = format!("SYM-SEC-1\nprod-20261130101500\n\n{key}");
        let err = parse(file.as_bytes(), Some("other-20261130101500")).unwrap_err();
        assert!(!err.to_string().contains(&key));
    }

    #[test]
    fn the_ring_secret_is_labelled_with_its_ring_and_owned_by_nobody() {
        let (name, file) = generate("prod", now());
        let s = ring_secret("ns", &name, file);
        assert_eq!(s.metadata.name.as_deref(), Some("prod-20261130101500"));
        assert_eq!(s.metadata.labels.unwrap()["habitat.sh/ring"], "prod");
        assert!(s.metadata.owner_references.is_none());
        assert!(s.data.unwrap().contains_key("ring-key"));
    }
}
