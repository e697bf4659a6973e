//! Checks of a Habitat's spec that the operator makes itself. The CRD's schema and CEL rules
//! say the same to the API server; these hold where those rules are not enforced (older API
//! servers, the sandbox) and name the field and the fix in the same words.

use crate::api::key_name::KeyName;
use crate::api::{
    Habitat, UpdateCondition, MAX_BINDS, MAX_HABITAT_NAME_LEN, MAX_HAB_NAME_LEN, MAX_IMAGE_LEN,
    MAX_OBJECT_NAME_LEN, MAX_PATH_LEN, MAX_RING_NAME_LEN, TRACK_CHANNEL_MESSAGE,
};
use kube::ResourceExt;

/// The problem with `metadata.name`: it names a Service (a DNS-1035 label) and is the prefix of
/// the StatefulSet's revision label.
fn name_problem(name: &str) -> Option<String> {
    let n = name.chars().count();
    if n > MAX_HABITAT_NAME_LEN {
        return Some(format!(
            "metadata.name must be at most {MAX_HABITAT_NAME_LEN} characters, not {n}: the StatefulSet's pods carry the label controller-revision-hash=<name>-<hash>, at most 63 characters"
        ));
    }
    let b = name.as_bytes();
    let label = b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    (!label).then(|| {
        format!(
            "metadata.name {name:?} must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it names the Habitat's Services"
        )
    })
}

/// Whether `s` is `component(sep component)*` with lower-case alphanumeric components and the
/// separators of the OCI distribution grammar (`.`, `_`, `__`, one or more `-`).
fn path_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !b.first().copied().is_some_and(alnum) || !b.last().copied().is_some_and(alnum) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// Whether `s` is a registry host (`host[:port]`, DNS-like components, or `localhost`).
fn domain(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()));
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    };
    port_ok && host.split('.').all(label)
}

/// Whether `image` is a valid image reference of the OCI distribution grammar
/// (`[domain/]path[:tag][@digest]`).
pub fn valid_image_reference(image: &str) -> bool {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let Some((alg, hex)) = d.split_once(':') else {
            return false;
        };
        let alg_ok = alg.split(['+', '.', '_', '-']).all(|c| {
            c.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
                && c.bytes().all(|b| b.is_ascii_alphanumeric())
        });
        if !alg_ok || hex.len() < 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
    }
    // The tag follows the last ':' after the last '/'.
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[slash..].find(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        let b = t.as_bytes();
        let ok = (1..=128).contains(&b.len())
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if !ok {
            return false;
        }
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // A first part with '.', ':' or that is `localhost` is the registry (as docker reads it).
    if parts.len() > 1 {
        let first = parts[0];
        if first.contains(['.', ':'])
            || first == "localhost"
            || first.bytes().any(|c| c.is_ascii_uppercase())
        {
            if !domain(first) {
                return false;
            }
            parts.remove(0);
        }
    }
    !parts.is_empty() && parts.iter().all(|p| path_component(p))
}

/// Most supervisors of one Habitat (the schema's `maximum` too): a count in the millions would
/// only make a StatefulSet the cluster cannot schedule, so the operator refuses it.
pub const MAX_COUNT: i32 = 1000;

/// A part of a supervisor identifier (service, group, bind name): printable ASCII, none of the
/// supervisor's separators (`.`, `#`, `@`, `:`, as its `service.group@org` syntax needs), and
/// nothing that changes the health check's URL path (`/`, `?`, `%`); so no whitespace or
/// control character either.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_graphic())
        && !s.contains(['.', '#', '@', ':', '/', '?', '%'])
}

/// How the rule of [`plain_name`] is said to the user.
const PLAIN: &str =
    "must be non-empty printable ASCII and contain no '.', '#', '@', ':', '/', '?', '%' or space";

/// The CRD's `maxLength` of `max` characters, said of `field` when `value` is longer.
fn too_long(field: &str, value: &str, max: usize) -> Option<String> {
    let n = value.chars().count();
    (n > max).then(|| format!("{field} must be at most {max} characters, not {n}"))
}

/// The first problem with `h.spec`, in words for the user; `None` when it can be acted on.
pub fn problem(h: &Habitat) -> Option<String> {
    let spec = &h.spec;
    let svc = &spec.service;
    if spec.image.trim().is_empty() {
        return Some("spec.image must not be empty; set the service's container image".into());
    }
    if let Some(p) = too_long("spec.image", &spec.image, MAX_IMAGE_LEN) {
        return Some(p);
    }
    if !valid_image_reference(&spec.image) {
        return Some(format!(
            "spec.image {:?} is not a valid image reference ([registry/]repository[:tag][@digest], repository in lower case, no spaces)",
            spec.image
        ));
    }
    if let Some(p) = name_problem(&h.name_any()) {
        return Some(p);
    }
    if spec.count < 0 {
        return Some(format!("spec.count must be 0 or more, not {}", spec.count));
    }
    if spec.count > MAX_COUNT {
        return Some(format!(
            "spec.count must be at most {MAX_COUNT}, not {}",
            spec.count
        ));
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
    if svc.update_condition == UpdateCondition::TrackChannel
        && svc.channel.as_deref().is_none_or(str::is_empty)
    {
        return Some(TRACK_CHANNEL_MESSAGE.into());
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
    use crate::api::fixtures::{habitat, HabitatFixture};

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
            (habitat().count(1001), "spec.count must be at most 1000"),
            (habitat().group("grüppe"), "spec.service.group \"grüppe\""),
            (habitat().group("a b"), "spec.service.group \"a b\""),
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
        // Found by the property test of src/children/props.rs: each of these passed before and
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
            (
                named(&"n".repeat(53)),
                "metadata.name must be at most 52 characters",
            ),
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
            (
                {
                    let mut h = habitat();
                    h.spec.service.update_condition = crate::api::UpdateCondition::TrackChannel;
                    h
                },
                "updateCondition track-channel follows a channel: set spec.service.channel",
            ),
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
    fn image_references_follow_the_oci_grammar() {
        for ok in [
            "habitat/redis-hab",
            "kinvolk/redis-hab:latest",
            "redis",
            "registry.example:5000/team/app__x:1.2.3-rc_1",
            "localhost/app",
            "Registry.Example/app",
            "ghcr.io/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(valid_image_reference(ok), "{ok} is valid");
        }
        for bad in [
            "habitat/redis hab",
            "habitat/Redis",
            "habitat/rédis",
            "habitat/redis:",
            "habitat/redis:-x",
            "habitat/redis@sha256:xyz",
            "habitat//redis",
            "-redis",
            "redis-",
            "habitat/redis:1:2",
            ":latest",
            "registry:port/app",
        ] {
            assert!(!valid_image_reference(bad), "{bad} is invalid");
        }
    }

    #[test]
    fn the_name_must_fit_the_derived_child_names() {
        let mut h = habitat();
        h.metadata.name = Some("a".repeat(MAX_HABITAT_NAME_LEN));
        assert_eq!(problem(&h), None);
        h.metadata.name = Some("a".repeat(MAX_HABITAT_NAME_LEN + 1));
        let p = problem(&h).unwrap_or_default();
        assert!(
            p.contains("metadata.name must be at most 52 characters, not 53"),
            "{p}"
        );
        for bad in ["bad.name", "1redis", "redis-"] {
            h.metadata.name = Some(bad.into());
            let p = problem(&h).unwrap_or_default();
            assert!(p.contains("metadata.name") && p.contains("DNS-1035"), "{p}");
        }
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
