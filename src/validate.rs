//! Checks of a Habitat's spec that the operator makes itself. The CRD's schema and CEL rules
//! say the same to the API server; these hold where those rules are not enforced (older API
//! servers, the sandbox) and name the field and the fix in the same words.

use crate::api::{
    Habitat, MAX_BINDS, MAX_HABITAT_NAME_LEN, MAX_HAB_NAME_LEN, MAX_IMAGE_LEN, MAX_OBJECT_NAME_LEN,
    MAX_PATH_LEN, MAX_RING_NAME_LEN,
};
use crate::build::ring_key::KeyName;
use kube::ResourceExt;

/// A part of a supervisor identifier (service, group, bind name): none of the supervisor's
/// separators (`.`, `#`, `@`, `:`), nothing that changes the health check's URL path (`/`,
/// `?`, `%`), no whitespace or control character.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && !s.contains(['.', '#', '@', ':', '/', '?', '%'])
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// How the rule of [`plain_name`] is said to the user.
const PLAIN: &str = "must be non-empty and contain no '.', '#', '@', ':', '/', '?', '%', whitespace or control character";

/// The CRD's `maxLength` of `max` characters, said of `field` when `value` is longer.
fn too_long(field: &str, value: &str, max: usize) -> Option<String> {
    let n = value.chars().count();
    (n > max).then(|| format!("{field} must be at most {max} characters, not {n}"))
}

/// The first problem with `h.spec`, in words for the user; `None` when it can be acted on.
pub fn problem(h: &Habitat) -> Option<String> {
    let spec = &h.spec;
    let svc = &spec.service;
    let name = h.name_any();
    let b = name.as_bytes();
    let child_name = !b.is_empty()
        && b.len() <= MAX_HABITAT_NAME_LEN
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !child_name {
        return Some(format!(
            "metadata.name {name:?} must be at most {MAX_HABITAT_NAME_LEN} lower-case letters, digits and '-', starting with a letter and not ending with '-': the StatefulSet, its pods and the Services are named after it"
        ));
    }
    if spec.image.trim().is_empty() {
        return Some("spec.image must not be empty; set the service's container image".into());
    }
    if let Some(p) = too_long("spec.image", &spec.image, MAX_IMAGE_LEN) {
        return Some(p);
    }
    if spec.count < 0 {
        return Some(format!("spec.count must be 0 or more, not {}", spec.count));
    }
    if !plain_name(&svc.name) {
        return Some(format!("spec.service.name {:?} {PLAIN}", svc.name));
    }
    if let Some(p) = too_long("spec.service.name", &svc.name, MAX_HAB_NAME_LEN) {
        return Some(p);
    }
    if !plain_name(&svc.group) {
        return Some(format!("spec.service.group {:?} {PLAIN}", svc.group));
    }
    if let Some(p) = too_long("spec.service.group", &svc.group, MAX_HAB_NAME_LEN) {
        return Some(p);
    }
    if let Some(channel) = &svc.channel {
        let ok = !channel.is_empty()
            && channel.len() <= MAX_HAB_NAME_LEN
            && channel
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
        if !ok {
            return Some(format!(
                "spec.service.channel {channel:?} must be 1-63 letters, digits, '_', '-' or '.'"
            ));
        }
    }
    if svc.ring.is_some() && svc.ring_secret_name.is_some() {
        return Some(
            "spec.service.ring and spec.service.ringSecretName are mutually exclusive; set one"
                .into(),
        );
    }
    if let Some(name) = &svc.ring_secret_name {
        if let Some(p) = too_long("spec.service.ringSecretName", name, MAX_OBJECT_NAME_LEN) {
            return Some(p);
        }
        if KeyName::parse(name).is_none() {
            return Some(format!(
                "spec.service.ringSecretName {name:?} must look like <ring>-<YYYYMMDDhhmmss>, e.g. prod-20170829113029"
            ));
        }
        let secret_name = name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            && !name.starts_with('-');
        if !secret_name {
            return Some(format!(
                "spec.service.ringSecretName {name:?} must be lower-case letters, digits and '-': it names a Secret"
            ));
        }
    }
    if let Some(ring) = &svc.ring {
        // The generated key's Secret is `<name>-<revision>` and is labelled with the name:
        // both must hold, so no upper case or '_' (a Secret's name) and no '-' at the end (a
        // label value).
        let ok = !ring.name.is_empty()
            && ring.name.len() <= MAX_RING_NAME_LEN
            && ring
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !ring.name.starts_with('-')
            && !ring.name.ends_with('-');
        if !ok {
            return Some(format!(
                "spec.service.ring.name {:?} must be 1-38 lower-case letters, digits and '-', starting and ending with a letter or digit: the key's Secret is named and labelled after it",
                ring.name
            ));
        }
    }
    if svc.bind.len() > MAX_BINDS {
        return Some(format!(
            "spec.service.bind must have at most {MAX_BINDS} binds, not {}",
            svc.bind.len()
        ));
    }
    for (i, b) in svc.bind.iter().enumerate() {
        for (field, value) in [
            ("name", &b.name),
            ("service", &b.service),
            ("group", &b.group),
        ] {
            if !plain_name(value) {
                return Some(format!("spec.service.bind[{i}].{field} {value:?} {PLAIN}"));
            }
            let field = format!("spec.service.bind[{i}].{field}");
            if let Some(p) = too_long(&field, value, MAX_HAB_NAME_LEN) {
                return Some(p);
            }
        }
        if svc.bind[..i].iter().any(|other| other.name == b.name) {
            return Some(format!(
                "spec.service.bind[{i}].name {:?} is bound twice; bind each name once",
                b.name
            ));
        }
    }
    if let Some(storage) = &spec.persistent_storage {
        if !storage.mount_path.starts_with('/') {
            return Some(format!(
                "spec.persistentStorage.mountPath {:?} must be an absolute path",
                storage.mount_path
            ));
        }
        if let Some(p) = too_long(
            "spec.persistentStorage.mountPath",
            &storage.mount_path,
            MAX_PATH_LEN,
        ) {
            return Some(p);
        }
        if let Some(name) = &storage.claim_template_name {
            let label = !name.is_empty()
                && name.len() <= MAX_HAB_NAME_LEN
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !name.starts_with('-')
                && !name.ends_with('-');
            if !label {
                return Some(format!(
                    "spec.persistentStorage.claimTemplateName {name:?} must be a DNS label: lower-case letters, digits and '-'"
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::{habitat, HabitatFixture};

    #[test]
    fn a_valid_spec_has_no_problem() {
        assert_eq!(
            problem(
                &habitat()
                    .leader()
                    .ring("prod")
                    .bind("db", "postgresql", "default")
            ),
            None
        );
    }

    #[test]
    fn each_rule_names_the_field_and_the_fix() {
        let mut empty_image = habitat();
        empty_image.spec.image = " ".into();
        let cases = [
            (empty_image, "spec.image must not be empty"),
            (habitat().count(-1), "spec.count must be 0 or more"),
            (habitat().group("a.b"), "spec.service.group \"a.b\""),
            (
                habitat().ring("prod").ring_secret("prod-20170829113029"),
                "mutually exclusive; set one",
            ),
            (
                habitat().ring_secret("prod"),
                "must look like <ring>-<YYYYMMDDhhmmss>",
            ),
            (habitat().ring("no/slash"), "spec.service.ring.name"),
            (
                habitat().bind("db", "postgresql", ""),
                "spec.service.bind[0].group",
            ),
            (
                habitat()
                    .bind("db", "a", "default")
                    .bind("db", "b", "default"),
                "bound twice",
            ),
            (habitat().storage("1Gi", "data"), "must be an absolute path"),
            (
                {
                    let mut h = habitat().storage("1Gi", "/data");
                    if let Some(s) = h.spec.persistent_storage.as_mut() {
                        s.claim_template_name = Some("Persistent".into());
                    }
                    h
                },
                "spec.persistentStorage.claimTemplateName \"Persistent\"",
            ),
        ];
        for (h, expected) in cases {
            let p = problem(&h).unwrap_or_default();
            assert!(p.contains(expected), "{p:?} should contain {expected:?}");
        }
    }

    #[test]
    fn what_children_or_the_supervisor_could_not_take_is_a_problem() {
        // Found by the property test of src/build/props.rs: each of these passed before and
        // built a child Kubernetes refuses or a malformed supervisor argument.
        let named = |name: &str| {
            let mut h = habitat();
            h.metadata.name = Some(name.into());
            h
        };
        let mut slash = habitat();
        slash.spec.service.name = "a/b".into();
        let cases = [
            (named("0"), "metadata.name \"0\""),
            (named("a.b"), "metadata.name \"a.b\""),
            (named(&"n".repeat(53)), "at most 52 lower-case letters"),
            (habitat().ring("Prod"), "spec.service.ring.name \"Prod\""),
            (habitat().ring("a_b"), "spec.service.ring.name \"a_b\""),
            (habitat().ring("a-"), "spec.service.ring.name \"a-\""),
            (
                habitat().ring_secret("Prod-20170829113029"),
                "spec.service.ringSecretName \"Prod-20170829113029\"",
            ),
            (habitat().group("a\tb"), "spec.service.group \"a\\tb\""),
            (slash, "spec.service.name \"a/b\""),
            (
                habitat().bind("db", "pg", "a?b"),
                "spec.service.bind[0].group",
            ),
            (habitat().channel(""), "spec.service.channel \"\""),
            (habitat().channel("a b"), "spec.service.channel \"a b\""),
        ];
        for (h, expected) in cases {
            let p = problem(&h).unwrap_or_default();
            assert!(p.contains(expected), "{p:?} should contain {expected:?}");
        }
        let mut ok = named(&"n".repeat(52)).ring("prod-1").channel("stable");
        ok.spec.service.group = "blue-green_2".into();
        assert_eq!(problem(&ok), None);
    }

    #[test]
    fn a_value_as_long_as_the_crd_allows_is_no_problem() {
        let name63 = "n".repeat(MAX_HAB_NAME_LEN);
        let mut h = habitat()
            .group(&name63)
            .ring_secret(&format!("{}-20170829113029", "r".repeat(238)))
            .storage("1Gi", &format!("/{}", "d".repeat(MAX_PATH_LEN - 1)));
        h.spec.image = "r".repeat(MAX_IMAGE_LEN);
        h.spec.service.name = name63.clone();
        for i in 0..MAX_BINDS {
            h = h.bind(&format!("{i}{}", &name63[2..]), &name63, &name63);
        }
        assert_eq!(problem(&h), None);
    }

    #[test]
    fn a_value_longer_than_the_crd_allows_is_a_problem() {
        let mut long_image = habitat();
        long_image.spec.image = "r".repeat(MAX_IMAGE_LEN + 1);
        let mut many_binds = habitat();
        for i in 0..=MAX_BINDS {
            many_binds = many_binds.bind(&format!("b{i}"), "postgresql", "default");
        }
        let name64 = "n".repeat(MAX_HAB_NAME_LEN + 1);
        let mut long_name = habitat();
        long_name.spec.service.name = name64.clone();
        let cases = [
            (
                long_image,
                "spec.image must be at most 4096 characters, not 4097",
            ),
            (
                long_name,
                "spec.service.name must be at most 63 characters, not 64",
            ),
            (
                habitat().group(&name64),
                "spec.service.group must be at most 63 characters",
            ),
            (
                habitat().ring_secret(&format!("{}-20170829113029", "r".repeat(240))),
                "spec.service.ringSecretName must be at most 253 characters, not 255",
            ),
            (
                many_binds,
                "spec.service.bind must have at most 64 binds, not 65",
            ),
            (
                habitat().bind("db", &name64, "default"),
                "spec.service.bind[0].service must be at most 63 characters",
            ),
            (
                habitat().storage("1Gi", &format!("/{}", "d".repeat(MAX_PATH_LEN))),
                "spec.persistentStorage.mountPath must be at most 4096 characters",
            ),
        ];
        for (h, expected) in cases {
            let p = problem(&h).unwrap_or_default();
            assert!(p.contains(expected), "{p:?} should contain {expected:?}");
        }
    }
}
