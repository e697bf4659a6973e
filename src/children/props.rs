//! Property tests: any spec the CRD admits and [`crate::api::validate::problem`] accepts builds
//! children whose names, labels and arguments Kubernetes and the supervisor accept.
//!
//! The generators stay within the CRD's bounds and rules (lengths, the rules' regular
//! expressions) and stray where those rules are loose, so the operator's own validation is what
//! must keep an unusable spec from reaching the builders.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Utc;
use k8s_openapi::api::core::v1::Container;
use kube::api::ObjectMeta;
use proptest::prelude::*;

use super::ring_key;
use super::{peer_config, workload};
use crate::api::key_name::KeyName;
use crate::api::validate::problem;
use crate::api::{Bind, Habitat, HabitatSpec, PersistentStorage, RingSpec, ServiceSpec, Topology};

// ---- What Kubernetes requires -------------------------------------------------------------

/// RFC 1123 label: what a pod's hostname, a container, port or volume name must be.
fn dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1035 label: what a Service's name must be (it starts with a letter).
fn dns1035_label(s: &str) -> bool {
    dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// RFC 1123 subdomain: most object names. As Kubernetes checks it: at most 253 characters,
/// dot-separated parts like labels but of any length.
fn dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A label value: at most 63 of `[A-Za-z0-9_.-]`, starting and ending alphanumeric.
fn label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name like a label value.
fn label_key(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(dns1123_subdomain) && !name.is_empty() && label_value(name)
}

fn labels_ok(what: &str, labels: Option<&BTreeMap<String, String>>) -> Result<(), TestCaseError> {
    for (k, v) in labels.into_iter().flatten() {
        prop_assert!(label_key(k), "{what}: label key {k:?}");
        prop_assert!(
            label_value(v),
            "{what}: label {k}={v:?} is not a valid label value"
        );
    }
    Ok(())
}

fn meta_ok(what: &str, meta: &ObjectMeta, name_ok: fn(&str) -> bool) -> Result<(), TestCaseError> {
    let name = meta.name.as_deref().unwrap_or_default();
    prop_assert!(
        name_ok(name),
        "{what} name {name:?} is not valid for its kind"
    );
    labels_ok(what, meta.labels.as_ref())
}

// ---- What the supervisor requires --------------------------------------------------------

/// A Habitat identifier part (service, group, bind name): no separator of the supervisor's
/// syntax (`.`, `#`, `@`, `:`), no `/` (it is a path segment of the health check), no
/// whitespace or control character.
fn hab_part(s: &str) -> bool {
    !s.is_empty()
        && !s.contains(['.', '#', '@', ':', '/', '?', '%'])
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn supervisor_args_ok(h: &Habitat, c: &Container) -> Result<(), TestCaseError> {
    let args = c.args.clone().unwrap_or_default();
    prop_assert!(args.len() % 2 == 0, "flags come with values: {args:?}");
    for pair in args.chunks(2) {
        let (flag, value) = (pair[0].as_str(), pair[1].as_str());
        prop_assert!(
            !value.is_empty() && !value.chars().any(|c| c.is_whitespace() || c.is_control()),
            "{flag} has the value {value:?}"
        );
        match flag {
            "--topology" => prop_assert!(matches!(value, "standalone" | "leader")),
            "--group" => prop_assert!(hab_part(value), "--group {value:?}"),
            "--channel" => prop_assert!(
                value
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')),
                "--channel {value:?}"
            ),
            "--peer-watch-file" => prop_assert!(value.starts_with('/')),
            "--listen-ctl" => prop_assert!(value == "0.0.0.0:9632"),
            "--strategy" => prop_assert!(matches!(value, "at-once" | "rolling")),
            "--update-condition" => prop_assert!(value == "track-channel"),
            "--bind" => {
                let (name, rest) = value.split_once(':').unwrap_or_default();
                let (service, group) = rest.split_once('.').unwrap_or_default();
                prop_assert!(
                    hab_part(name) && hab_part(service) && hab_part(group),
                    "--bind {value:?}"
                );
            }
            "--ring" => prop_assert!(
                dns1123_subdomain(&format!("{value}-20260101000000")),
                "--ring {value:?}"
            ),
            other => prop_assert!(false, "unknown flag {other}"),
        }
    }
    let svc = &h.spec.service;
    let probe = c
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .and_then(|g| g.path.clone())
        .unwrap_or_default();
    let segments: Vec<&str> = probe.split('/').collect();
    prop_assert_eq!(
        segments,
        vec![
            "",
            "services",
            svc.name.as_str(),
            svc.group.as_str(),
            "health"
        ],
        "the health check path {:?}",
        probe
    );
    prop_assert!(hab_part(&svc.name), "service name {:?}", svc.name);
    Ok(())
}

// ---- The check ----------------------------------------------------------------------------

fn key_of(h: &Habitat) -> Option<KeyName> {
    let svc = &h.spec.service;
    if let Some(ring) = &svc.ring {
        return Some(ring_key::generate(&ring.name, Utc::now()).0);
    }
    svc.ring_secret_name.as_deref().and_then(KeyName::parse)
}

fn children_ok(h: &Habitat) -> Result<(), TestCaseError> {
    let key = key_of(h);
    let w = workload(h, key.as_ref());
    let sts = &w.statefulset;
    // The pod is `<sts>-<ordinal>` and must be a DNS label (its hostname); the
    // controller-revision-hash label is `<sts>-<10 characters>` and must be a label value.
    meta_ok("StatefulSet", &sts.metadata, |n| {
        dns1123_label(n) && n.len() <= 52
    })?;
    let name = sts.metadata.name.clone().unwrap_or_default();
    let spec = sts.spec.clone().unwrap_or_default();
    let last = spec.replicas.unwrap_or(1).max(1) - 1;
    prop_assert!(
        dns1123_label(&format!("{name}-{last}")),
        "pod {name}-{last}"
    );
    let revision = format!("{name}-7d4b9c8f6d");
    prop_assert!(
        label_value(&revision),
        "controller-revision-hash {:?}",
        revision
    );
    prop_assert_eq!(
        spec.service_name.as_deref(),
        w.headless.metadata.name.as_deref()
    );
    labels_ok("selector", spec.selector.match_labels.as_ref())?;
    let template = spec.template.metadata.clone().unwrap_or_default();
    labels_ok("pod template", template.labels.as_ref())?;
    for t in spec.volume_claim_templates.iter().flatten() {
        let tn = t.metadata.name.clone().unwrap_or_default();
        prop_assert!(dns1123_label(&tn), "claim template {tn:?}");
        let claim = format!("{tn}-{name}-{last}");
        prop_assert!(dns1123_subdomain(&claim), "claim {claim:?}");
        let class = t.spec.as_ref().and_then(|s| s.storage_class_name.clone());
        prop_assert!(class.as_deref().is_none_or(dns1123_subdomain), "{class:?}");
    }
    let pod = spec.template.spec.clone().unwrap_or_default();
    let mut volumes = BTreeSet::new();
    for v in pod.volumes.iter().flatten() {
        prop_assert!(dns1123_label(&v.name), "volume {:?}", v.name);
        prop_assert!(volumes.insert(v.name.clone()), "volume {} twice", v.name);
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            prop_assert!(dns1123_subdomain(&s), "Secret volume {s:?}");
        }
        if let Some(cm) = &v.config_map {
            prop_assert!(
                dns1123_subdomain(&cm.name),
                "ConfigMap volume {:?}",
                cm.name
            );
        }
    }
    for c in pod.init_containers.iter().flatten().chain(&pod.containers) {
        prop_assert!(dns1123_label(&c.name), "container {:?}", c.name);
        let mut paths = BTreeSet::new();
        for m in c.volume_mounts.iter().flatten() {
            prop_assert!(
                volumes.contains(&m.name) || spec.volume_claim_templates.is_some(),
                "mount of {}",
                m.name
            );
            prop_assert!(m.mount_path.starts_with('/'), "{:?}", m.mount_path);
            prop_assert!(paths.insert(m.mount_path.clone()), "{} twice", m.mount_path);
        }
    }
    supervisor_args_ok(h, &pod.containers[0])?;

    meta_ok("headless Service", &w.headless.metadata, dns1035_label)?;
    labels_ok(
        "headless selector",
        w.headless.spec.as_ref().and_then(|s| s.selector.as_ref()),
    )?;
    if let Some((svc, pdb)) = &w.leader {
        meta_ok("leader Service", &svc.metadata, dns1035_label)?;
        labels_ok(
            "leader selector",
            svc.spec.as_ref().and_then(|s| s.selector.as_ref()),
        )?;
        meta_ok("PodDisruptionBudget", &pdb.metadata, dns1123_subdomain)?;
    }
    let cm = peer_config::peer_config(h, &["10.0.0.1".to_string()]);
    meta_ok("peer ConfigMap", &cm.metadata, dns1123_subdomain)?;
    if let (Some(ring), Some(key)) = (&h.spec.service.ring, &key) {
        let (_, file) = ring_key::generate(&ring.name, Utc::now());
        let secret = ring_key::ring_secret("ns", key, file);
        meta_ok("ring key Secret", &secret.metadata, dns1123_subdomain)?;
    }
    Ok(())
}

// ---- Generators, within the CRD's bounds -------------------------------------------------

/// A custom resource's name: any DNS subdomain, mostly short.
fn object_name() -> impl Strategy<Value = String> {
    let label = prop_oneof![
        4 => "[a-z]([a-z0-9-]{0,14}[a-z0-9])?",
        1 => "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?",
    ];
    prop_oneof![
        6 => label.clone(),
        1 => prop::collection::vec(label, 2..=4).prop_map(|parts| parts.join(".")),
    ]
    .prop_filter("at most 253 characters", |s| s.len() <= 253)
}

/// Mostly a plain name; sometimes one of the characters the CRD's `[^.#@]` still admits.
fn hab_name() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => "[a-z][a-z0-9_-]{0,20}",
        2 => "[a-z]{1,59}",
        1 => "[a-zA-Z0-9_/\\t:= \u{e9}-]{1,12}",
    ]
}

fn ring() -> impl Strategy<Value = (Option<RingSpec>, Option<String>)> {
    prop_oneof![
        2 => Just((None, None)),
        3 => "[a-z0-9]([a-z0-9-]{0,36}[a-z0-9])?".prop_map(|name| (Some(RingSpec { name }), None)),
        1 => "[A-Za-z0-9_][A-Za-z0-9_-]{0,37}".prop_map(|name| (Some(RingSpec { name }), None)),
        1 => "[a-z0-9][a-z0-9-]{0,20}-[0-9]{14}".prop_map(|n| (None, Some(n))),
        1 => "[A-Za-z0-9_][A-Za-z0-9_-]{0,20}-[0-9]{14}".prop_map(|n| (None, Some(n))),
    ]
}

fn bind() -> impl Strategy<Value = Bind> {
    ("[a-z][a-z0-9_-]{0,8}", hab_name(), hab_name()).prop_map(|(name, service, group)| Bind {
        name,
        service,
        group,
    })
}

fn storage() -> impl Strategy<Value = Option<PersistentStorage>> {
    prop::option::weighted(
        0.3,
        (
            "[1-9][0-9]{0,3}(Mi|Gi)",
            "/[a-z0-9/_-]{0,40}",
            prop::option::of("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"),
            prop::option::of("[a-z]([a-z0-9-]{0,20}[a-z0-9])?"),
        )
            .prop_map(
                |(size, mount_path, claim_template_name, storage_class_name)| PersistentStorage {
                    size,
                    mount_path,
                    storage_class_name,
                    claim_template_name,
                },
            ),
    )
}

fn habitat() -> impl Strategy<Value = Habitat> {
    (
        object_name(),
        prop_oneof![4 => 0..8i32, 1 => 0..=i32::MAX],
        prop_oneof![Just(Topology::Standalone), Just(Topology::Leader)],
        (hab_name(), hab_name()),
        prop::option::weighted(
            0.3,
            prop_oneof![4 => "[a-z][a-z0-9_-]{0,20}", 1 => "[ -~]{0,63}"],
        ),
        ring(),
        prop::collection::vec(bind(), 0..3),
        (
            prop::option::weighted(0.2, "[a-z]([a-z0-9-]{0,20}[a-z0-9])?"),
            prop::option::weighted(0.2, "[a-z]([a-z0-9-]{0,20}[a-z0-9])?"),
        ),
        storage(),
    )
        .prop_map(
            |(
                name,
                count,
                topology,
                (svc, group),
                channel,
                (ring, ring_secret_name),
                bind,
                (config, files),
                persistent_storage,
            )| {
                let mut h = Habitat::new(
                    &name,
                    HabitatSpec {
                        image: "habitat/redis-hab".into(),
                        count,
                        service: ServiceSpec {
                            name: svc,
                            topology,
                            group,
                            channel,
                            config_secret_name: config,
                            files_secret_name: files,
                            ring_secret_name,
                            ring,
                            bind,
                            ..ServiceSpec::default()
                        },
                        env: vec![],
                        persistent_storage,
                    },
                );
                h.metadata.namespace = Some("ns".into());
                h.metadata.uid = Some("uid-1".into());
                h.metadata.generation = Some(1);
                h
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_valid_spec_builds_valid_children(h in habitat()) {
        if problem(&h).is_none() {
            children_ok(&h)?;
        }
    }
}

#[test]
fn the_checks_refuse_what_kubernetes_refuses() {
    assert!(dns1123_label("redis-0"));
    assert!(!dns1123_label("Redis") && !dns1123_label("-a") && !dns1123_label(&"a".repeat(64)));
    assert!(dns1035_label("a1") && !dns1035_label("1a"));
    assert!(dns1123_subdomain("a.b-c") && !dns1123_subdomain("a..b"));
    assert!(label_value("") && label_value("A_b.c") && !label_value("a-") && !label_value("_a"));
    assert!(label_key("habitat.sh/name") && !label_key("a b"));
    assert!(hab_part("redis") && !hab_part("a/b") && !hab_part("a\tb") && !hab_part(""));
}

#[test]
fn the_generator_makes_valid_specs_often_enough_to_test_the_builders() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = habitat();
    let (mut valid, mut rings, mut leaders, mut storage) = (0, 0, 0, 0);
    for _ in 0..1000 {
        let h = strategy.new_tree(&mut runner).expect("a Habitat").current();
        if problem(&h).is_none() {
            valid += 1;
            rings += usize::from(h.spec.service.ring.is_some());
            leaders += usize::from(h.spec.service.topology == Topology::Leader);
            storage += usize::from(h.spec.persistent_storage.is_some());
        }
    }
    assert!(
        valid >= 300,
        "only {valid} of 1000 generated specs are valid"
    );
    assert!(
        rings >= 30 && leaders >= 30 && storage >= 30,
        "{rings} {leaders} {storage}"
    );
}
