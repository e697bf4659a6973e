//! The StatefulSet `NAME` that runs one supervisor per pod.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec, Probe,
    SecretVolumeSource, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::child_meta;
use super::control_gateway::{control_secret_name, CTL_SECRET_KEY, CTL_SECRET_PATH};
use super::peer_config::{peer_file_path, PEER_DIR};
use crate::api::key_name::KeyName;
use crate::api::{
    Habitat, Topology, UpdateCondition, UpdateStrategy, LABEL_TOPOLOGY, RING_KEY_DATA_KEY,
    USER_TOML_KEY,
};

/// Name of the service container.
pub const CONTAINER: &str = "habitat-service";
/// Port of the supervisor's HTTP gateway.
pub const HTTP_GATEWAY_PORT: i32 = 9631;
/// Port of the supervisor's control gateway (`hab sup depart`), on the pod's address in groups
/// that elect.
pub const CONTROL_GATEWAY_PORT: i32 = 9632;
/// Port of the supervisor's gossip (TCP and UDP).
pub const GOSSIP_PORT: i32 = 9638;
/// Image of the init container that copies the files Secret into place.
pub const FILES_INIT_IMAGE: &str = "busybox:1.36";

const PEER_VOLUME: &str = "peer";
const CONFIG_VOLUME: &str = "user-config";
const FILES_VOLUME: &str = "files";
const FILES_SECRET_VOLUME: &str = "files-secret";
const FILES_SECRET_DIR: &str = "/habitat-operator/files";
const RING_VOLUME: &str = "ring-key";
const CONTROL_VOLUME: &str = "control-gateway";

/// The StatefulSet of `h`. `ring_key` is the resolved ring key Secret's name, when gossip is
/// encrypted.
pub fn statefulset(h: &Habitat, ring_key: Option<&KeyName>) -> StatefulSet {
    let name = h.name_any();
    let selector = h.child_labels();
    let mut pod_labels = selector.clone();
    pod_labels.insert(
        LABEL_TOPOLOGY.to_string(),
        h.spec.service.topology.as_str().to_string(),
    );
    // Leader topology: the operator replaces pods itself, followers first and the leader last.
    let strategy = match h.spec.service.topology {
        Topology::Standalone => "RollingUpdate",
        Topology::Leader => "OnDelete",
    };
    StatefulSet {
        metadata: child_meta(h, name.clone()),
        spec: Some(StatefulSetSpec {
            replicas: Some(h.spec.count),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            service_name: Some(name),
            // Supervisors find each other through gossip; none needs another to be ready first
            // (a leader group cannot become ready one pod at a time).
            pod_management_policy: Some("Parallel".to_string()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some(strategy.to_string()),
                rolling_update: None,
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(h, ring_key)),
            },
            volume_claim_templates: h.spec.persistent_storage.as_ref().map(|s| {
                vec![PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some(s.claim_template().to_string()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(PersistentVolumeClaimSpec {
                        access_modes: Some(vec!["ReadWriteOnce".to_string()]),
                        storage_class_name: s.storage_class_name.clone(),
                        resources: Some(VolumeResourceRequirements {
                            requests: Some(BTreeMap::from([(
                                "storage".to_string(),
                                Quantity(s.size.clone()),
                            )])),
                            ..VolumeResourceRequirements::default()
                        }),
                        ..PersistentVolumeClaimSpec::default()
                    }),
                    ..PersistentVolumeClaim::default()
                }]
            }),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// The supervisor's arguments (the image's entrypoint runs `hab sup run <pkg> ARGS`).
pub fn supervisor_args(h: &Habitat, ring_key: Option<&KeyName>) -> Vec<String> {
    let svc = &h.spec.service;
    let mut args = vec![
        "--topology".to_string(),
        svc.topology.as_str().to_string(),
        "--group".to_string(),
        svc.group.clone(),
    ];
    if let Some(channel) = &svc.channel {
        args.extend(["--channel".to_string(), channel.clone()]);
    }
    // Only what differs from the supervisor's defaults (`none`, `latest`): adding the flags to
    // every StatefulSet would restart the pods of every Habitat on an operator upgrade.
    if svc.update_strategy != UpdateStrategy::None {
        args.extend([
            "--strategy".to_string(),
            svc.update_strategy.as_str().to_string(),
        ]);
    }
    if svc.update_condition != UpdateCondition::Latest {
        args.extend([
            "--update-condition".to_string(),
            svc.update_condition.as_str().to_string(),
        ]);
    }
    args.extend(["--peer-watch-file".to_string(), peer_file_path()]);
    for b in &svc.bind {
        args.extend([
            "--bind".to_string(),
            format!("{}:{}.{}", b.name, b.service, b.group),
        ]);
    }
    if let Some(key) = ring_key {
        args.extend(["--ring".to_string(), key.ring.clone()]);
    }
    if departs_dead_members(h) {
        // On the pod's address (the default is 127.0.0.1): the operator departs dead members
        // through it.
        args.extend([
            "--listen-ctl".to_string(),
            format!("0.0.0.0:{CONTROL_GATEWAY_PORT}"),
        ]);
    }
    args
}

fn pod_spec(h: &Habitat, ring_key: Option<&KeyName>) -> PodSpec {
    let svc = &h.spec.service;
    let mut volumes = vec![Volume {
        name: PEER_VOLUME.to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: h.peer_config_name(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    // A directory mount: a subPath mount would never see the ConfigMap change.
    let mut mounts = vec![mount(PEER_VOLUME, PEER_DIR, None, true)];
    if let Some(secret) = &svc.config_secret_name {
        volumes.push(secret_volume(CONFIG_VOLUME, secret, Some(USER_TOML_KEY)));
        // A directory under /hab/user: live changes reach the supervisor and nothing under
        // /hab/svc is hidden.
        mounts.push(mount(
            CONFIG_VOLUME,
            &format!("/hab/user/{}/config", svc.name),
            None,
            true,
        ));
    }
    let mut init_containers = vec![];
    if let Some(secret) = &svc.files_secret_name {
        let files_dir = format!("/hab/svc/{}/files", svc.name);
        volumes.push(secret_volume(FILES_SECRET_VOLUME, secret, None));
        volumes.push(Volume {
            name: FILES_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        // The supervisor must own and write this directory, which a Secret volume forbids.
        init_containers.push(Container {
            name: "copy-files".to_string(),
            image: Some(FILES_INIT_IMAGE.to_string()),
            command: Some(vec![
                "sh".to_string(),
                "-c".to_string(),
                format!("cp -L {FILES_SECRET_DIR}/* {files_dir}/ 2>/dev/null || true"),
            ]),
            volume_mounts: Some(vec![
                mount(FILES_SECRET_VOLUME, FILES_SECRET_DIR, None, true),
                mount(FILES_VOLUME, &files_dir, None, false),
            ]),
            ..Container::default()
        });
        mounts.push(mount(FILES_VOLUME, &files_dir, None, false));
    }
    if let Some(key) = ring_key {
        volumes.push(secret_volume(
            RING_VOLUME,
            &key.full(),
            Some(RING_KEY_DATA_KEY),
        ));
        // One file, not the directory: the supervisor writes other keys into its cache.
        mounts.push(mount(
            RING_VOLUME,
            &key.cache_path(),
            Some(RING_KEY_DATA_KEY),
            true,
        ));
    }
    if departs_dead_members(h) {
        volumes.push(secret_volume(
            CONTROL_VOLUME,
            &control_secret_name(h),
            Some(CTL_SECRET_KEY),
        ));
        // One file: the rest of /hab/sup/default (MEMBER_ID, data/) stays the container's own,
        // so that each container starts as a new member.
        mounts.push(mount(
            CONTROL_VOLUME,
            CTL_SECRET_PATH,
            Some(CTL_SECRET_KEY),
            true,
        ));
    }
    if let Some(storage) = &h.spec.persistent_storage {
        mounts.push(mount(
            storage.claim_template(),
            &storage.mount_path,
            None,
            false,
        ));
    }
    PodSpec {
        init_containers: (!init_containers.is_empty()).then_some(init_containers),
        containers: vec![Container {
            name: CONTAINER.to_string(),
            image: Some(h.spec.image.clone()),
            args: Some(supervisor_args(h, ring_key)),
            env: (!h.spec.env.is_empty()).then(|| h.spec.env.clone()),
            ports: Some({
                let mut ports = vec![
                    port("http-gateway", HTTP_GATEWAY_PORT, "TCP"),
                    port("gossip", GOSSIP_PORT, "TCP"),
                    port("gossip-udp", GOSSIP_PORT, "UDP"),
                ];
                if departs_dead_members(h) {
                    ports.push(port("ctl-gateway", CONTROL_GATEWAY_PORT, "TCP"));
                }
                ports
            }),
            readiness_probe: Some(Probe {
                http_get: Some(HTTPGetAction {
                    path: Some(format!("/services/{}/{}/health", svc.name, svc.group)),
                    port: IntOrString::Int(HTTP_GATEWAY_PORT),
                    ..HTTPGetAction::default()
                }),
                period_seconds: Some(5),
                ..Probe::default()
            }),
            volume_mounts: Some(mounts),
            ..Container::default()
        }],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// Whether the group's dead members are departed by the operator: groups that elect (leader
/// topology, or rolling updates, which hold update elections), where a dead member that is
/// never departed counts against quorum.
///
/// Their supervisors get no `MEMBER_ID`: each container writes a new random id on its own
/// filesystem, so a replaced or restarted container joins as a new member. A pod-name id
/// cannot rejoin after an unclean death (measured with the real supervisor: its own census
/// stays at one alive member, no election, for 85 s and more); a new id joins in about 5 s
/// and the dead one, once gossip confirms it dead, is departed through a live member's control
/// gateway with the Habitat's control secret (docs/updates.md, "Member identity").
pub fn departs_dead_members(h: &Habitat) -> bool {
    h.spec.service.topology == Topology::Leader
        || h.spec.service.update_strategy == UpdateStrategy::Rolling
}

fn secret_volume(volume: &str, secret: &str, only_key: Option<&str>) -> Volume {
    Volume {
        name: volume.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            items: only_key.map(|k| {
                vec![k8s_openapi::api::core::v1::KeyToPath {
                    key: k.to_string(),
                    path: k.to_string(),
                    mode: None,
                }]
            }),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(volume: &str, path: &str, sub_path: Option<&str>, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_string(),
        mount_path: path.to_string(),
        sub_path: sub_path.map(str::to_string),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn port(name: &str, number: i32, protocol: &str) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: number,
        protocol: Some(protocol.to_string()),
        ..ContainerPort::default()
    }
}

#[cfg(test)]
mod tests;
