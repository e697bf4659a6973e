//! The StatefulSet `NAME` that runs one supervisor per pod.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, DownwardAPIVolumeFile,
    DownwardAPIVolumeSource, EmptyDirVolumeSource, HTTPGetAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec, PodTemplateSpec, Probe,
    SecretVolumeSource, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::child_meta;
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
    if stable_member_id(h) {
        volumes.push(member_id_volume());
        mounts.push(mount(
            MEMBER_ID_VOLUME,
            MEMBER_ID_PATH,
            Some(MEMBER_ID_FILE),
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
            ports: Some(vec![
                port("http-gateway", HTTP_GATEWAY_PORT, "TCP"),
                port("gossip", GOSSIP_PORT, "TCP"),
                port("gossip-udp", GOSSIP_PORT, "UDP"),
            ]),
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

/// Where the supervisor reads its member id at boot (`sup/src/manager.rs` `load_member`: the
/// file's content as it is; a new random id is written only when the file is missing).
pub const MEMBER_ID_PATH: &str = "/hab/sup/default/MEMBER_ID";
const MEMBER_ID_FILE: &str = "MEMBER_ID";
const MEMBER_ID_VOLUME: &str = "member-id";

/// Whether the pods get a stable member id: groups that elect (leader topology, or rolling
/// updates, which hold update elections). A replaced pod then rejoins as the same member
/// instead of leaving a Confirmed one behind that counts against quorum for 3 days (see
/// docs/architecture.md, "Leader groups keep quorum").
pub fn stable_member_id(h: &Habitat) -> bool {
    h.spec.service.topology == Topology::Leader
        || h.spec.service.update_strategy == UpdateStrategy::Rolling
}

/// The pod's name as its `MEMBER_ID` file: a StatefulSet gives a replaced pod the same name.
/// Nothing else of `/hab/sup` persists, so the member list starts empty, the supervisor reads
/// the peer file and rejoins even when every pod IP changed.
fn member_id_volume() -> Volume {
    Volume {
        name: MEMBER_ID_VOLUME.to_string(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: MEMBER_ID_FILE.to_string(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".to_string(),
                    ..ObjectFieldSelector::default()
                }),
                ..DownwardAPIVolumeFile::default()
            }]),
            ..DownwardAPIVolumeSource::default()
        }),
        ..Volume::default()
    }
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
