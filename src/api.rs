//! The `Habitat` custom resource (`habitat.sh/v1`): the schema's only home, with the label and
//! annotation keys the operator puts on what it creates.
// Each `printcolumn(...)` repeats `type_ = ...`; clippy reads them as one duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::{CustomResource, KubeSchema, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label: the Habitat that a child belongs to (also `app.kubernetes.io/name`).
pub const LABEL_NAME: &str = "habitat.sh/name";
/// Label: the Kubernetes recommended application name.
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
/// Label: who manages the object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`] on everything the operator creates.
pub const MANAGER: &str = "habitat-operator";
/// Pod label: the service's topology.
pub const LABEL_TOPOLOGY: &str = "habitat.sh/topology";
/// Pod label: `"true"` on the elected leader's pod only.
pub const LABEL_LEADER: &str = "habitat.sh/leader";
/// Secret label: the ring whose key the Secret holds.
pub const LABEL_RING: &str = "habitat.sh/ring";
/// Key of the ring key in a ring Secret.
pub const RING_KEY_DATA_KEY: &str = "ring-key";
/// Key of the user configuration in the config Secret.
pub const USER_TOML_KEY: &str = "user.toml";
/// Key of the peer address in the peer ConfigMap.
pub const PEER_IP_KEY: &str = "peer-ip";
/// The finalizer that lets the operator record termination.
pub const FINALIZER: &str = "habitat.sh/finalizer";

/// A Chef Habitat service run by Habitat supervisors in a StatefulSet.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "habitat.sh",
    version = "v1",
    kind = "Habitat",
    plural = "habitats",
    singular = "habitat",
    shortname = "hab",
    category = "all",
    namespaced,
    status = "HabitatStatus",
    doc = "A Chef Habitat service: the operator runs its supervisors in a StatefulSet with a peer ConfigMap, an optional ring key and Services.",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Ready replicas / desired"
    ),
    printcolumn(
        name = "Leader",
        type_ = "string",
        json_path = ".status.leader",
        description = "Pod of the elected leader"
    ),
    printcolumn(
        name = "Topology",
        type_ = "string",
        json_path = ".spec.service.topology",
        description = "Supervisor topology"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        priority = "1",
        description = "Service image"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HabitatSpec {
    /// Container image of the Habitat service, e.g. `habitat/redis-hab`.
    #[x_kube(validation = Rule::new("self.size() > 0").message("spec.image must not be empty; set the service's container image"))]
    pub image: String,
    /// Number of supervisors (pods). Leader topology needs at least 3, and an odd number, to
    /// keep quorum when a member is lost.
    #[serde(default = "default_count")]
    #[schemars(range(min = 0))]
    pub count: i32,
    /// The Habitat service the supervisors run.
    pub service: ServiceSpec,
    /// Environment variables of the service container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// One PersistentVolumeClaim per pod, kept when the Habitat is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_storage: Option<PersistentStorage>,
}

fn default_count() -> i32 {
    1
}

/// The supervisor's view of the service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new("!(has(self.ring) && has(self.ringSecretName))").message("spec.service.ring and spec.service.ringSecretName are mutually exclusive; set one"))]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The Habitat package's service name (the `name` of the package), e.g. `redis`.
    #[x_kube(validation = Rule::new("self.matches('^[^.#@]+$')").message("spec.service.name must be non-empty and contain no '.', '#' or '@'"))]
    pub name: String,
    /// Supervisor topology: `standalone` (default) or `leader` (the supervisors elect a leader).
    #[serde(default)]
    pub topology: Topology,
    /// Supervisor `--group`. Members of one group share configuration and elections.
    #[serde(default = "default_group")]
    #[x_kube(validation = Rule::new("self.matches('^[^.#@]+$')").message("spec.service.group must be non-empty and contain no '.', '#' or '@'"))]
    pub group: String,
    /// Supervisor `--channel` to follow for updates. Unset: the supervisor's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Name of a Secret in the same namespace whose key `user.toml` configures the service.
    /// Changes to its content reach running supervisors without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_secret_name: Option<String>,
    /// Name of a Secret in the same namespace whose keys become files in
    /// `/hab/svc/<service>/files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_secret_name: Option<String>,
    /// Name of an existing ring key Secret (`<ring>-<14 digits>`, key `ring-key`) to encrypt
    /// gossip with. Mutually exclusive with `ring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9_][A-Za-z0-9_-]*-[0-9]{14}$')").message("spec.service.ringSecretName must look like <ring>-<YYYYMMDDhhmmss>, e.g. prod-20170829113029"))]
    pub ring_secret_name: Option<String>,
    /// Encrypt gossip with the key of this ring: the Secret labelled `habitat.sh/ring=<name>`,
    /// generated when none exists. Mutually exclusive with `ringSecretName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingSpec>,
    /// Service groups this service binds to (supervisor `--bind name:service.group`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind: Vec<Bind>,
}

fn default_group() -> String {
    "default".to_string()
}

/// Supervisor topology.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Every supervisor runs the service independently.
    #[default]
    Standalone,
    /// The supervisors elect a leader; the others follow.
    Leader,
}

impl Topology {
    /// The value of the supervisor's `--topology` flag and of the topology pod label.
    pub fn as_str(self) -> &'static str {
        match self {
            Topology::Standalone => "standalone",
            Topology::Leader => "leader",
        }
    }
}

/// A ring whose key the operator finds or generates.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RingSpec {
    /// Ring name: letters, digits, `_` and `-`. The key Secret is `<name>-<revision>`.
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9_][A-Za-z0-9_-]{0,37}$')").message("spec.service.ring.name must be 1-38 letters, digits, '_' or '-'"))]
    pub name: String,
}

/// A supervisor bind: the service's bind `name` is satisfied by `service.group`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Bind name declared by the package (e.g. `db`).
    #[x_kube(validation = Rule::new("self.matches('^[^:.#@ ]+$')").message("spec.service.bind[].name must be non-empty and contain no ':', '.', '#', '@' or space"))]
    pub name: String,
    /// Service name of the group bound to (e.g. `postgresql`).
    #[x_kube(validation = Rule::new("self.matches('^[^:.#@ ]+$')").message("spec.service.bind[].service must be non-empty and contain no ':', '.', '#', '@' or space"))]
    pub service: String,
    /// Group of the service bound to.
    #[serde(default = "default_group")]
    #[x_kube(validation = Rule::new("self.matches('^[^:.#@ ]+$')").message("spec.service.bind[].group must be non-empty and contain no ':', '.', '#', '@' or space"))]
    pub group: String,
}

/// Persistent storage: one PersistentVolumeClaim per pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PersistentStorage {
    /// Requested size, e.g. `1Gi`.
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(\\\\.[0-9]+)?([EPTGMK]i?|[mk])?$')").message("spec.persistentStorage.size must be a quantity such as 1Gi"))]
    pub size: String,
    /// Where the volume is mounted in the service container, e.g. `/hab/svc/redis/data`.
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("spec.persistentStorage.mountPath must be an absolute path"))]
    pub mount_path: String,
    /// StorageClass of the claims. Unset: the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// What the operator observed and did, written by the operator only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HabitatStatus {
    /// Lifecycle phase: Pending, ConfigMapReady, KeyReady, Deploying, LeaderElected, Ready,
    /// Updating or Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Detailed conditions: ConfigMapReady, KeyReady, Deployed, Available, LeaderElected,
    /// Progressing and the Ready summary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Pods of the StatefulSet.
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods of the StatefulSet.
    #[serde(default)]
    pub ready_replicas: i32,
    /// `readyReplicas/count`, for the READY column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// The address written to the peer ConfigMap, if any pod runs.
    #[serde(default, rename = "peerIP", skip_serializing_if = "Option::is_none")]
    pub peer_ip: Option<String>,
    /// Leader topology: the pod of the elected leader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// The ring key Secret in use, when gossip is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_secret_name: Option<String>,
    /// When `phase` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_phase_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl Habitat {
    /// The labels every child of this Habitat carries, and the selector of its pods.
    pub fn child_labels(&self) -> BTreeMap<String, String> {
        let name = self.name_any();
        BTreeMap::from([
            (LABEL_APP_NAME.to_string(), name.clone()),
            (LABEL_MANAGED_BY.to_string(), MANAGER.to_string()),
            (LABEL_NAME.to_string(), name),
        ])
    }

    /// The controller ownerReference children carry, so garbage collection removes them.
    pub fn owner_ref(&self) -> OwnerReference {
        // `controller_owner_ref` is None only without a name or uid, which an object read from
        // the API server always has; fall back to a reference the API server will reject
        // loudly rather than panicking.
        self.controller_owner_ref(&())
            .unwrap_or_else(|| OwnerReference {
                api_version: Habitat::api_version(&()).into_owned(),
                kind: Habitat::kind(&()).into_owned(),
                name: self.name_any(),
                uid: self.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            })
    }

    /// Name of the peer ConfigMap.
    pub fn peer_config_name(&self) -> String {
        format!("{}-peer", self.name_any())
    }

    /// Name of the Service that selects the elected leader.
    pub fn leader_service_name(&self) -> String {
        format!("{}-leader", self.name_any())
    }

    /// The `.status.phase`, if set.
    pub fn phase_str(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_crd_has_the_printer_columns_of_the_spec() {
        let crd = serde_json::to_value(Habitat::crd()).unwrap();
        let cols = &crd["spec"]["versions"][0]["additionalPrinterColumns"];
        let names: Vec<&str> = cols
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["Phase", "Ready", "Leader", "Topology", "Age", "Image"]
        );
        assert_eq!(cols[5]["priority"], 1);
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "hab");
    }

    #[test]
    fn the_crd_carries_cel_rules_with_messages_for_users() {
        let crd = serde_json::to_string(&Habitat::crd()).unwrap();
        assert!(crd.contains("mutually exclusive; set one"));
        assert!(crd.contains("spec.image must not be empty"));
        assert!(crd.contains("ringSecretName must look like"));
    }

    #[test]
    fn a_minimal_spec_gets_the_documented_defaults() {
        let spec: HabitatSpec = serde_json::from_value(
            serde_json::json!({"image": "habitat/redis", "service": {"name": "redis"}}),
        )
        .unwrap();
        assert_eq!(spec.count, 1);
        assert_eq!(spec.service.group, "default");
        assert_eq!(spec.service.topology, Topology::Standalone);
    }
}
