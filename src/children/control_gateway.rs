//! The Secret `NAME-control-gateway`: the control secret every supervisor of a Habitat that
//! elects reads as its `/hab/sup/default/CTL_SECRET`, and with which the operator departs dead
//! members through a live member's control gateway (`cluster::control_gateway`).
//!
//! The supervisor reads that file at start when it exists and only writes one when it is missing
//! (`sup/src/ctl_gateway.rs` `readgen_secret_key`, trailing whitespace trimmed), so a read-only
//! Secret file mounted there is used as it is. The operator generates the value once, as the
//! supervisor does (64 random bytes, base64), and never rewrites it: a changed secret would
//! reach only the pods started after the change.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::ResourceExt;
use rand::rngs::OsRng;
use rand::RngCore;

use super::child_meta;
use crate::api::Habitat;

/// The key of the Secret holding the control secret.
pub const CTL_SECRET_KEY: &str = "CTL_SECRET";
/// Where the supervisor reads its control secret.
pub const CTL_SECRET_PATH: &str = "/hab/sup/default/CTL_SECRET";
/// Random bytes in a control secret (the supervisor's own `CTL_SECRET_LEN`).
const SECRET_BYTES: usize = 64;

/// The Secret's name for `h`.
pub fn control_secret_name(h: &Habitat) -> String {
    format!("{}-control-gateway", h.name_any())
}

/// A new control secret from the operating system's secure random source.
pub fn generate() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    OsRng.fill_bytes(&mut bytes);
    STANDARD.encode(bytes)
}

/// The Secret holding `secret`, owned by `h` (it goes with the Habitat).
pub fn control_secret(h: &Habitat, secret: String) -> Secret {
    Secret {
        metadata: child_meta(h, control_secret_name(h)),
        data: Some(BTreeMap::from([(
            CTL_SECRET_KEY.to_string(),
            ByteString(secret.into_bytes()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    }
}

/// The control secret held by a Secret, when it holds a usable one.
pub fn read(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(CTL_SECRET_KEY)?;
    let value = std::str::from_utf8(&bytes.0).ok()?.trim_end();
    (!value.is_empty()).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::habitat;

    #[test]
    fn a_generated_secret_is_64_random_bytes_in_base64() {
        let a = generate();
        assert_eq!(STANDARD.decode(&a).unwrap().len(), 64);
        assert_ne!(a, generate());
    }

    #[test]
    fn the_secret_is_owned_by_the_habitat_and_reads_back() {
        let h = habitat();
        let s = control_secret(&h, "abc".into());
        assert_eq!(s.metadata.name.as_deref(), Some("redis-control-gateway"));
        assert_eq!(s.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(read(&s).as_deref(), Some("abc"));
        let mut empty = s.clone();
        empty.data = Some(BTreeMap::from([(
            CTL_SECRET_KEY.into(),
            ByteString(vec![]),
        )]));
        assert_eq!(read(&empty), None);
    }
}
