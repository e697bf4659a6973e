//! Checks of a Habitat's spec that the operator makes itself. The CRD's schema and CEL rules
//! say the same to the API server; these hold where those rules are not enforced (older API
//! servers, the sandbox) and name the field and the fix in the same words.

use crate::api::Habitat;
use crate::build::ring_key::KeyName;

fn plain_name(s: &str) -> bool {
    !s.is_empty() && !s.contains(['.', '#', '@', ':', ' '])
}

/// The first problem with `h.spec`, in words for the user; `None` when it can be acted on.
pub fn problem(h: &Habitat) -> Option<String> {
    let spec = &h.spec;
    let svc = &spec.service;
    if spec.image.trim().is_empty() {
        return Some("spec.image must not be empty; set the service's container image".into());
    }
    if spec.count < 0 {
        return Some(format!("spec.count must be 0 or more, not {}", spec.count));
    }
    if !plain_name(&svc.name) {
        return Some(format!(
            "spec.service.name {:?} must be non-empty and contain no '.', '#' or '@'",
            svc.name
        ));
    }
    if !plain_name(&svc.group) {
        return Some(format!(
            "spec.service.group {:?} must be non-empty and contain no '.', '#' or '@'",
            svc.group
        ));
    }
    if svc.ring.is_some() && svc.ring_secret_name.is_some() {
        return Some(
            "spec.service.ring and spec.service.ringSecretName are mutually exclusive; set one"
                .into(),
        );
    }
    if let Some(name) = &svc.ring_secret_name {
        if KeyName::parse(name).is_none() {
            return Some(format!(
                "spec.service.ringSecretName {name:?} must look like <ring>-<YYYYMMDDhhmmss>, e.g. prod-20170829113029"
            ));
        }
    }
    if let Some(ring) = &svc.ring {
        let ok = !ring.name.is_empty()
            && ring.name.len() <= 38
            && ring
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !ring.name.starts_with('-');
        if !ok {
            return Some(format!(
                "spec.service.ring.name {:?} must be 1-38 letters, digits, '_' or '-'",
                ring.name
            ));
        }
    }
    for (i, b) in svc.bind.iter().enumerate() {
        for (field, value) in [
            ("name", &b.name),
            ("service", &b.service),
            ("group", &b.group),
        ] {
            if !plain_name(value) {
                return Some(format!(
                    "spec.service.bind[{i}].{field} {value:?} must be non-empty and contain no ':', '.', '#', '@' or space"
                ));
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
        ];
        for (h, expected) in cases {
            let p = problem(&h).unwrap_or_default();
            assert!(p.contains(expected), "{p:?} should contain {expected:?}");
        }
    }
}
