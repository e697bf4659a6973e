//! Table tests of the StatefulSet builder over spec variants.

use super::*;
use crate::api::fixtures::{habitat, HabitatFixture};

fn args(h: &Habitat, key: Option<&KeyName>) -> Vec<String> {
    statefulset(h, key)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap()
}

fn key() -> KeyName {
    KeyName::parse("prod-20261130101500").unwrap()
}

#[test]
fn supervisor_arguments_for_each_spec_variant() {
    let peer = "/habitat-operator/peer/peer-ip";
    let cases: Vec<(Habitat, Option<KeyName>, Vec<String>)> = vec![
        (
            habitat(),
            None,
            vec![
                "--topology",
                "standalone",
                "--group",
                "default",
                "--peer-watch-file",
                peer,
            ],
        ),
        (
            habitat().leader(),
            None,
            vec![
                "--topology",
                "leader",
                "--group",
                "default",
                "--peer-watch-file",
                peer,
                "--listen-ctl",
                "0.0.0.0:9632",
            ],
        ),
        (
            habitat().group("blue"),
            None,
            vec![
                "--topology",
                "standalone",
                "--group",
                "blue",
                "--peer-watch-file",
                peer,
            ],
        ),
        (
            habitat().channel("stable"),
            None,
            vec![
                "--topology",
                "standalone",
                "--group",
                "default",
                "--channel",
                "stable",
                "--peer-watch-file",
                peer,
            ],
        ),
        (
            {
                let mut h = habitat().channel("stable");
                h.spec.service.update_strategy = crate::api::UpdateStrategy::Rolling;
                h.spec.service.update_condition = crate::api::UpdateCondition::TrackChannel;
                h
            },
            None,
            vec![
                "--topology",
                "standalone",
                "--group",
                "default",
                "--channel",
                "stable",
                "--strategy",
                "rolling",
                "--update-condition",
                "track-channel",
                "--peer-watch-file",
                peer,
                "--listen-ctl",
                "0.0.0.0:9632",
            ],
        ),
        (
            {
                let mut h = habitat();
                h.spec.service.update_strategy = crate::api::UpdateStrategy::AtOnce;
                h
            },
            None,
            vec![
                "--topology",
                "standalone",
                "--group",
                "default",
                "--strategy",
                "at-once",
                "--peer-watch-file",
                peer,
            ],
        ),
        (
            habitat()
                .bind("db", "postgresql", "default")
                .bind("cache", "redis", "blue"),
            None,
            vec![
                "--topology",
                "standalone",
                "--group",
                "default",
                "--peer-watch-file",
                peer,
                "--bind",
                "db:postgresql.default",
                "--bind",
                "cache:redis.blue",
            ],
        ),
        (
            habitat().ring("prod"),
            Some(key()),
            vec![
                "--topology",
                "standalone",
                "--group",
                "default",
                "--peer-watch-file",
                peer,
                "--ring",
                "prod",
            ],
        ),
    ]
    .into_iter()
    .map(|(h, k, a)| (h, k, a.into_iter().map(String::from).collect()))
    .collect();
    for (h, k, expected) in cases {
        assert_eq!(args(&h, k.as_ref()), expected, "{:?}", h.spec.service);
    }
}

#[test]
fn the_channel_is_passed_only_when_set() {
    assert!(!args(&habitat(), None).contains(&"--channel".to_string()));
}

#[test]
fn the_statefulset_is_named_owned_labelled_and_sized_after_the_habitat() {
    let sts = statefulset(&habitat().count(5), None);
    assert_eq!(sts.metadata.name.as_deref(), Some("redis"));
    assert_eq!(
        sts.metadata.owner_references.as_ref().unwrap()[0].uid,
        "uid-1"
    );
    let spec = sts.spec.unwrap();
    assert_eq!(spec.replicas, Some(5));
    assert_eq!(spec.service_name.as_deref(), Some("redis"));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    let selector = spec.selector.match_labels.unwrap();
    let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
    for (k, v) in &selector {
        assert_eq!(pod_labels.get(k), Some(v));
    }
    assert_eq!(pod_labels["habitat.sh/topology"], "standalone");
}

#[test]
fn leader_topology_rolls_out_on_delete_and_standalone_rolls_by_itself() {
    let strategy = |h: &Habitat| {
        statefulset(h, None)
            .spec
            .unwrap()
            .update_strategy
            .unwrap()
            .type_
            .unwrap()
    };
    assert_eq!(strategy(&habitat()), "RollingUpdate");
    assert_eq!(strategy(&habitat().leader()), "OnDelete");
}

fn pod(h: &Habitat, key: Option<&KeyName>) -> PodSpec {
    statefulset(h, key).spec.unwrap().template.spec.unwrap()
}

fn mounts(p: &PodSpec) -> Vec<(String, String, Option<String>, bool)> {
    p.containers[0]
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.name,
                m.mount_path,
                m.sub_path,
                m.read_only.unwrap_or(false),
            )
        })
        .collect()
}

#[test]
fn the_peer_file_is_a_directory_mount_of_the_peer_config() {
    let p = pod(&habitat(), None);
    assert_eq!(
        mounts(&p),
        vec![("peer".into(), "/habitat-operator/peer".into(), None, true)]
    );
    let vol = &p.volumes.unwrap()[0];
    assert_eq!(vol.config_map.as_ref().unwrap().name, "redis-peer");
}

#[test]
fn the_user_toml_is_mounted_as_a_directory_under_hab_user() {
    let p = pod(&habitat().config_secret("redis-user-toml"), None);
    assert!(mounts(&p).contains(&(
        "user-config".into(),
        "/hab/user/redis/config".into(),
        None,
        true
    )));
    let vols = p.volumes.unwrap();
    let v = vols
        .iter()
        .find(|v| v.name == "user-config")
        .unwrap()
        .secret
        .clone()
        .unwrap();
    assert_eq!(v.secret_name.as_deref(), Some("redis-user-toml"));
    assert_eq!(v.items.unwrap()[0].key, "user.toml");
    assert!(mounts(&pod(&habitat().config_secret("x"), None))
        .iter()
        .all(|m| !m.1.starts_with("/hab/svc")));
}

#[test]
fn the_files_secret_is_copied_into_a_writable_directory_by_an_init_container() {
    let p = pod(&habitat().files_secret("redis-files"), None);
    assert!(mounts(&p).contains(&("files".into(), "/hab/svc/redis/files".into(), None, false)));
    let init = &p.init_containers.unwrap()[0];
    assert!(init.command.as_ref().unwrap()[2].contains("/hab/svc/redis/files"));
    let vols = p.volumes.unwrap();
    assert!(vols
        .iter()
        .any(|v| v.name == "files" && v.empty_dir.is_some()));
    assert!(vols
        .iter()
        .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("redis-files")));
}

#[test]
fn the_ring_key_is_one_file_in_the_key_cache_which_stays_writable() {
    let p = pod(&habitat().ring("prod"), Some(&key()));
    let ring_mounts: Vec<_> = mounts(&p)
        .into_iter()
        .filter(|m| m.0 == "ring-key")
        .collect();
    assert_eq!(
        ring_mounts,
        vec![(
            "ring-key".into(),
            "/hab/cache/keys/prod-20261130101500.sym.key".into(),
            Some("ring-key".into()),
            true
        )]
    );
    assert!(mounts(&p).iter().all(|m| m.1 != "/hab/cache/keys"));
}

#[test]
fn persistent_storage_becomes_a_claim_template_and_a_mount() {
    let h = habitat().storage("1Gi", "/hab/svc/redis/data");
    let spec = statefulset(&h, None).spec.unwrap();
    let claim = &spec.volume_claim_templates.unwrap()[0];
    assert_eq!(claim.metadata.name.as_deref(), Some("data"));
    let requests = claim
        .spec
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .requests
        .clone()
        .unwrap();
    assert_eq!(requests["storage"].0, "1Gi");
    assert!(mounts(&spec.template.spec.unwrap()).contains(&(
        "data".into(),
        "/hab/svc/redis/data".into(),
        None,
        false
    )));
}

#[test]
fn a_claim_template_name_names_the_claims_and_the_mount() {
    let mut h = habitat().storage("1Gi", "/hab/svc/redis/data");
    if let Some(s) = h.spec.persistent_storage.as_mut() {
        s.claim_template_name = Some("persistent".into());
    }
    let spec = statefulset(&h, None).spec.unwrap();
    let claim = &spec.volume_claim_templates.unwrap()[0];
    assert_eq!(claim.metadata.name.as_deref(), Some("persistent"));
    assert!(mounts(&spec.template.spec.unwrap()).contains(&(
        "persistent".into(),
        "/hab/svc/redis/data".into(),
        None,
        false
    )));
}

#[test]
fn ports_and_readiness_probe_follow_the_supervisor() {
    let c = &pod(&habitat().group("blue"), None).containers[0];
    let ports: Vec<_> = c
        .ports
        .clone()
        .unwrap()
        .into_iter()
        .map(|p| (p.container_port, p.protocol.unwrap()))
        .collect();
    assert_eq!(
        ports,
        vec![
            (9631, "TCP".into()),
            (9638, "TCP".into()),
            (9638, "UDP".into())
        ]
    );
    let probe = c.readiness_probe.clone().unwrap().http_get.unwrap();
    assert_eq!(probe.path.as_deref(), Some("/services/redis/blue/health"));
    assert_eq!(probe.port, IntOrString::Int(9631));
    assert_eq!(c.name, "habitat-service");
}

#[test]
fn env_is_passed_to_the_service_container() {
    let mut h = habitat();
    h.spec.env = vec![k8s_openapi::api::core::v1::EnvVar {
        name: "HAB_REDIS".into(),
        value: Some("{}".into()),
        value_from: None,
    }];
    assert_eq!(
        pod(&h, None).containers[0].env.as_ref().unwrap()[0].name,
        "HAB_REDIS"
    );
}

#[test]
fn groups_that_elect_get_no_member_id_and_the_control_secret_and_gateway() {
    let pod = |h: &Habitat| statefulset(h, None).spec.unwrap().template.spec.unwrap();
    let leader = pod(&habitat().leader());
    let c = &leader.containers[0];
    let mounts = c.volume_mounts.as_ref().unwrap();
    // Each container writes its own random id: nothing is mounted under /hab/sup but the secret.
    assert!(
        mounts
            .iter()
            .filter(|m| m.mount_path.starts_with("/hab/sup"))
            .map(|m| m.mount_path.as_str())
            .eq(["/hab/sup/default/CTL_SECRET"]),
        "{mounts:?}"
    );
    let m = mounts.iter().find(|m| m.name == "control-gateway").unwrap();
    assert_eq!(
        (m.sub_path.as_deref(), m.read_only),
        (Some("CTL_SECRET"), Some(true))
    );
    let volume = leader
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "control-gateway")
        .expect("a control-gateway volume");
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("redis-control-gateway"));
    assert!(leader
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .all(|v| v.downward_api.is_none()));
    let args = c.args.as_ref().unwrap();
    let at = args
        .iter()
        .position(|a| a == "--listen-ctl")
        .expect("--listen-ctl");
    assert_eq!(args[at + 1], "0.0.0.0:9632");
    assert!(c
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .any(|p| p.name.as_deref() == Some("ctl-gateway") && p.container_port == 9632));

    let mut rolling = habitat();
    rolling.spec.service.update_strategy = crate::api::UpdateStrategy::Rolling;
    assert!(departs_dead_members(&rolling));
    // A standalone group without update elections keeps the supervisor's defaults: the gateway
    // on 127.0.0.1 and a secret of its own.
    let standalone = pod(&habitat());
    assert!(standalone
        .volumes
        .unwrap_or_default()
        .iter()
        .all(|v| v.name != "control-gateway"));
    assert!(!standalone.containers[0]
        .args
        .as_ref()
        .unwrap()
        .contains(&"--listen-ctl".to_string()));
}
