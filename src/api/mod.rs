//! The `Habitat` custom resource (`habitat.sh/v1`): the schema's only home, with the label and
//! annotation keys the operator puts on what it creates.
// Each `printcolumn(...)` repeats `type_ = ...`; clippy reads them as one duplicated attribute.
#![allow(clippy::duplicated_attributes)]

pub mod convert;
pub mod key_name;
pub mod validate;

#[cfg(test)]
pub(crate) mod fixtures;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::{CustomResource, KubeSchema, Resource, ResourceExt};
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

// Bounds of the schema's strings and lists. A real API server estimates the cost of each CEL
// rule from them and refuses a CRD whose rules could cost too much, so every string and list
// in the schema carries one; `validate` holds the operator to the same numbers.

/// Longest Habitat name (`metadata.name`): the StatefulSet is named after it and its pods are
/// `NAME-ORDINAL`, and the StatefulSet's `controller-revision-hash` label, `NAME-` and a
/// 10-character hash, must fit a label value's 63 characters.
pub const MAX_HABITAT_NAME_LEN: usize = 52;
/// Longest `spec.image`: a generous bound on an image reference (registry, repository, tag
/// and digest); Kubernetes itself sets none.
pub const MAX_IMAGE_LEN: usize = 4096;
/// Longest Habitat service, group, channel or bind name: a DNS label's 63 characters.
pub const MAX_HAB_NAME_LEN: usize = 63;
/// Longest name of a Kubernetes object (Secret, StorageClass, pod): a DNS subdomain's 253.
pub const MAX_OBJECT_NAME_LEN: usize = 253;
/// Longest ring name (`spec.service.ring.name`'s rule says 1-38 characters).
pub const MAX_RING_NAME_LEN: usize = 38;
/// Longest absolute path (`PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;
/// Longest quantity such as `1Gi`.
pub const MAX_QUANTITY_LEN: usize = 64;
/// Most binds of one service.
pub const MAX_BINDS: usize = 64;
/// Most environment variables of the service container.
pub const MAX_ENV: usize = 1024;
/// Most conditions in the status.
pub const MAX_CONDITIONS: usize = 32;
/// Longest timestamp (RFC 3339 needs at most 35 characters).
pub const MAX_TIME_LEN: usize = 64;

/// The CEL rule on `spec.image`: the OCI distribution grammar of an image reference (an empty
/// image is the other rule's). `validate::valid_image_reference` says the same to the sandbox
/// and older servers. Within the cost budget: the string is at most `MAX_IMAGE_LEN` long.
pub const IMAGE_REFERENCE_RULE: &str = "self.size() == 0 || self.matches('^((?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:[.](?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$')";

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
    validation = Rule::new("self.metadata.name.size() <= 52 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS-1035 label of at most 52 characters (lower-case letters, digits and '-', starting with a letter): it names the Habitat's Services, and the pods' label controller-revision-hash=<name>-<hash> has at most 63"),
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
    ),
    printcolumn(
        name = "Release",
        type_ = "string",
        json_path = ".status.release",
        priority = "1",
        description = "Release the supervisors run (version/release), or mixed"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HabitatSpec {
    /// Container image of the Habitat service, e.g. `habitat/redis-hab`. At most 4096
    /// characters.
    #[schemars(length(max = MAX_IMAGE_LEN))]
    #[x_kube(validation = Rule::new("self.size() > 0").message("spec.image must not be empty; set the service's container image"))]
    #[x_kube(validation = Rule::new(IMAGE_REFERENCE_RULE).message("spec.image must be an image reference: [registry[:port]/]repository[:tag][@digest], the repository in lower case, no spaces"))]
    pub image: String,
    /// Number of supervisors (pods). Leader topology needs at least 3, and an odd number, to
    /// keep quorum when a member is lost.
    #[serde(default = "default_count")]
    #[schemars(range(min = 0, max = crate::api::validate::MAX_COUNT))]
    pub count: i32,
    /// The Habitat service the supervisors run.
    pub service: ServiceSpec,
    /// Environment variables of the service container, at most 1024. A name has at most 253
    /// characters, a value at most 131072 (the kernel's limit on one environment string).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ENV), transform = bound_env_var_list)]
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
#[x_kube(validation = Rule::new(TRACK_CHANNEL_RULE).message(TRACK_CHANNEL_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The Habitat package's service name (the `name` of the package), e.g. `redis`. At most
    /// 63 characters.
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new(PLAIN_NAME_RULE).message("spec.service.name must be non-empty printable ASCII and contain no '.', '#', '@', ':', '/', '?', '%' or space"))]
    pub name: String,
    /// Supervisor topology: `standalone` (default) or `leader` (the supervisors elect a leader).
    #[serde(default)]
    // `standalone`, the longer value; schemars' `length` does not reach an enum's schema.
    #[schemars(extend("maxLength" = 10))]
    pub topology: Topology,
    /// Supervisor `--group`. Members of one group share configuration and elections. At most
    /// 63 characters.
    #[serde(default = "default_group")]
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new(PLAIN_NAME_RULE).message("spec.service.group must be non-empty printable ASCII and contain no '.', '#', '@', ':', '/', '?', '%' or space"))]
    pub group: String,
    /// Supervisor `--channel` to follow for updates. Unset: the supervisor's own default. At
    /// most 63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9_.-]+$')").message("spec.service.channel must be 1-63 letters, digits, '_', '-' or '.'"))]
    pub channel: Option<String>,
    /// How the supervisors update the package themselves from `channel` (supervisor
    /// `--strategy`): `none` (default: never; new releases come only with a new image),
    /// `at-once` (every supervisor as soon as a release appears) or `rolling` (one at a time,
    /// in the order of an update election). See docs/updates.md.
    #[serde(default)]
    // `at-once`/`rolling`, the longest value has 7 characters.
    #[schemars(extend("maxLength" = 7))]
    pub update_strategy: UpdateStrategy,
    /// Which release counts as an update (supervisor `--update-condition`): `latest` (default:
    /// only a newer release) or `track-channel` (whatever the channel holds, older ones too;
    /// needs `channel`).
    #[serde(default)]
    #[schemars(extend("maxLength" = 13))]
    pub update_condition: UpdateCondition,
    /// Name of a Secret in the same namespace whose key `user.toml` configures the service.
    /// Changes to its content reach running supervisors without a restart. At most 253
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub config_secret_name: Option<String>,
    /// Name of a Secret in the same namespace whose keys become files in
    /// `/hab/svc/<service>/files`. At most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub files_secret_name: Option<String>,
    /// Name of an existing ring key Secret (`<ring>-<14 digits>`, key `ring-key`) to encrypt
    /// gossip with. Mutually exclusive with `ring`. At most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9_][A-Za-z0-9_-]*-[0-9]{14}$')").message("spec.service.ringSecretName must look like <ring>-<YYYYMMDDhhmmss>, e.g. prod-20170829113029"))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9][-a-z0-9]*$')").message("spec.service.ringSecretName must be lower-case letters, digits and '-': it names a Secret"))]
    pub ring_secret_name: Option<String>,
    /// Encrypt gossip with the key of this ring: the Secret labelled `habitat.sh/ring=<name>`,
    /// generated when none exists. Mutually exclusive with `ringSecretName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingSpec>,
    /// Service groups this service binds to (supervisor `--bind name:service.group`), at
    /// most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_BINDS))]
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

/// The CEL rule of a part of a supervisor identifier (service, group, bind): what `validate`'s
/// `plain_name` accepts, printable ASCII without the supervisor's separators (`.`, `#`, `@`,
/// `:`) or what changes the health check's URL path (`/`, `?`, `%`).
pub const PLAIN_NAME_RULE: &str = "self.matches('^[!-~]+$') && !self.matches('[.#@:/?%]')";
/// The CEL rule that refuses `updateCondition: track-channel` without a channel. Every field
/// it reads is bounded (`channel` has at most 63 characters, the condition is an enum).
pub const TRACK_CHANNEL_RULE: &str = "!has(self.updateCondition) || self.updateCondition != 'track-channel' || (has(self.channel) && self.channel.size() > 0)";
/// What [`TRACK_CHANNEL_RULE`] says; `validate` says the same.
pub const TRACK_CHANNEL_MESSAGE: &str = "spec.service.updateCondition track-channel follows a channel: set spec.service.channel, or use updateCondition latest";

/// Supervisor `--strategy`: how supervisors update their package from the channel.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateStrategy {
    /// Never update: the package changes only with a new image.
    #[default]
    None,
    /// Every supervisor updates as soon as the channel has an update.
    AtOnce,
    /// One supervisor at a time, in the order of an update election.
    Rolling,
}

impl UpdateStrategy {
    /// The value of the supervisor's `--strategy` flag.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateStrategy::None => "none",
            UpdateStrategy::AtOnce => "at-once",
            UpdateStrategy::Rolling => "rolling",
        }
    }
}

/// Supervisor `--update-condition`: which release of the channel counts as an update.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateCondition {
    /// Only a release newer than the running one.
    #[default]
    Latest,
    /// The channel's release, older or newer: rolls back when the channel does.
    TrackChannel,
}

impl UpdateCondition {
    /// The value of the supervisor's `--update-condition` flag.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateCondition::Latest => "latest",
            UpdateCondition::TrackChannel => "track-channel",
        }
    }
}

/// A ring whose key the operator finds or generates.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RingSpec {
    /// Ring name: 1-38 lower-case letters, digits and `-`, starting and ending with a letter or
    /// digit. The key Secret is `<name>-<revision>`, labelled `habitat.sh/ring=<name>`.
    #[schemars(length(max = MAX_RING_NAME_LEN))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("spec.service.ring.name must be 1-38 lower-case letters, digits and '-', starting and ending with a letter or digit: the key's Secret is named and labelled after it"))]
    pub name: String,
}

/// A supervisor bind: the service's bind `name` is satisfied by `service.group`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Bind name declared by the package (e.g. `db`). At most 63 characters.
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new(PLAIN_NAME_RULE).message("spec.service.bind[].name must be non-empty printable ASCII and contain no '.', '#', '@', ':', '/', '?', '%' or space"))]
    pub name: String,
    /// Service name of the group bound to (e.g. `postgresql`). At most 63 characters.
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new(PLAIN_NAME_RULE).message("spec.service.bind[].service must be non-empty printable ASCII and contain no '.', '#', '@', ':', '/', '?', '%' or space"))]
    pub service: String,
    /// Group of the service bound to. At most 63 characters.
    #[serde(default = "default_group")]
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new(PLAIN_NAME_RULE).message("spec.service.bind[].group must be non-empty printable ASCII and contain no '.', '#', '@', ':', '/', '?', '%' or space"))]
    pub group: String,
}

/// Persistent storage: one PersistentVolumeClaim per pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PersistentStorage {
    /// Requested size, e.g. `1Gi`. At most 64 characters.
    #[schemars(length(max = MAX_QUANTITY_LEN))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+(\\\\.[0-9]+)?([EPTGMK]i?|[mk])?$')").message("spec.persistentStorage.size must be a quantity such as 1Gi"))]
    pub size: String,
    /// Where the volume is mounted in the service container, e.g. `/hab/svc/redis/data`. At
    /// most 4096 characters.
    #[schemars(length(max = MAX_PATH_LEN))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("spec.persistentStorage.mountPath must be an absolute path"))]
    pub mount_path: String,
    /// StorageClass of the claims. Unset: the cluster's default class. At most 253 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub storage_class_name: Option<String>,
    /// Name of the StatefulSet's volume claim template, so each pod's claim is
    /// `<claimTemplateName>-<habitat>-<ordinal>`. Unset: `data`. Set it to `persistent` to
    /// reuse the claims the original Go operator made (see docs/migrating.md). A DNS label,
    /// at most 63 characters; fixed once the StatefulSet exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("spec.persistentStorage.claimTemplateName must be a DNS label: lower-case letters, digits and '-'"))]
    pub claim_template_name: Option<String>,
}

impl PersistentStorage {
    /// The claim template's name: `claimTemplateName`, else `data`.
    pub fn claim_template(&self) -> &str {
        self.claim_template_name
            .as_deref()
            .unwrap_or(DEFAULT_CLAIM_TEMPLATE)
    }
}

/// The claim template's name when `spec.persistentStorage.claimTemplateName` is unset.
pub const DEFAULT_CLAIM_TEMPLATE: &str = "data";

/// Bounds of the strings in an embedded k8s-openapi type, whose generated schema has none: by
/// property name, else `default`.
struct StringBounds {
    by_name: &'static [(&'static str, usize)],
    default: usize,
}

impl StringBounds {
    /// Gives every string, list and map in `schema` (an embedded type's schema, walked through
    /// its properties, items, additional properties and `anyOf`/`oneOf`/`allOf` branches) a
    /// `maxLength`, `maxItems` or `maxProperties` where it has none. `max_len` bounds strings
    /// at this level; lists and maps in the type get `max_items`.
    fn apply(&self, schema: &mut Value, max_len: usize, max_items: usize) {
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        let has_type = |t: &str| match obj.get("type") {
            Some(Value::String(s)) => s == t,
            Some(Value::Array(a)) => a.iter().any(|v| v == t),
            _ => false,
        };
        let (string, array, object) = (has_type("string"), has_type("array"), has_type("object"));
        let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if (string || int_or_string) && !obj.contains_key("enum") {
            obj.entry("maxLength").or_insert(max_len.into());
        }
        if array {
            obj.entry("maxItems").or_insert(max_items.into());
        }
        if object
            && obj
                .get("additionalProperties")
                .is_some_and(Value::is_object)
        {
            obj.entry("maxProperties").or_insert(max_items.into());
        }
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            for (name, sub) in props.iter_mut() {
                self.apply(sub, self.bound_of(name), max_items);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = obj.get_mut(key) {
                self.apply(sub, max_len, max_items);
            }
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(subs)) = obj.get_mut(key) {
                for sub in subs {
                    self.apply(sub, max_len, max_items);
                }
            }
        }
    }

    fn bound_of(&self, property: &str) -> usize {
        self.by_name
            .iter()
            .find(|(name, _)| *name == property)
            .map_or(self.default, |&(_, max)| max)
    }
}

/// `spec.env`: names and ConfigMap/Secret keys and names are at most 253 characters (a
/// ConfigMap key's and an object name's limit), a container name 63 (a DNS label), a value
/// 131072 (the kernel's limit on one environment string), a divisor 64 (a quantity), anything
/// else 1024.
fn bound_env_var_list(schema: &mut Schema) {
    const ENV_VAR: StringBounds = StringBounds {
        by_name: &[
            ("name", MAX_OBJECT_NAME_LEN),
            ("key", MAX_OBJECT_NAME_LEN),
            ("containerName", 63),
            ("value", 131_072),
            ("divisor", MAX_QUANTITY_LEN),
        ],
        default: 1024,
    };
    if let Some(item) = schema.get_mut("items") {
        ENV_VAR.apply(item, ENV_VAR.default, MAX_ENV);
    }
}

/// `status.conditions`: the bounds metav1.Condition has in Kubernetes' own API (type 316,
/// reason 1024, message 32768), which its k8s-openapi schema leaves out.
fn bound_condition_list(schema: &mut Schema) {
    const CONDITION: StringBounds = StringBounds {
        by_name: &[
            ("type", 316),
            ("reason", 1024),
            ("message", 32_768),
            ("status", 7),
            ("lastTransitionTime", MAX_TIME_LEN),
        ],
        default: 1024,
    };
    if let Some(item) = schema.get_mut("items") {
        CONDITION.apply(item, CONDITION.default, MAX_CONDITIONS);
    }
}

/// What the operator observed and did, written by the operator only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HabitatStatus {
    /// Lifecycle phase: Pending, ConfigMapReady, KeyReady, Deploying, LeaderElected, Ready,
    /// Updating or Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    pub phase: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Detailed conditions: ConfigMapReady, KeyReady, Deployed, Available, LeaderElected,
    /// Progressing and the Ready summary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_CONDITIONS), transform = bound_condition_list)]
    pub conditions: Vec<Condition>,
    /// Pods of the StatefulSet.
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods of the StatefulSet.
    #[serde(default)]
    pub ready_replicas: i32,
    /// `readyReplicas/count`, for the READY column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Two int32s and a slash need at most 23.
    #[schemars(length(max = 32))]
    pub ready: Option<String>,
    /// The address written to the peer ConfigMap, if any pod runs.
    #[serde(default, rename = "peerIP", skip_serializing_if = "Option::is_none")]
    // The longest textual IPv6 address (INET6_ADDRSTRLEN less the NUL).
    #[schemars(length(max = 45))]
    pub peer_ip: Option<String>,
    /// Leader topology: the pod of the elected leader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub leader: Option<String>,
    /// The ring key Secret in use, when gossip is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub ring_secret_name: Option<String>,
    /// When `phase` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_TIME_LEN))]
    pub last_phase_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The supervisors of the group as their census shows them (members not departed, alive
    /// ones first), at most 1024.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024))]
    pub members: Vec<MemberStatus>,
    /// The release the alive members run (`version/release` of their package), or `mixed`
    /// while they run different ones, for the RELEASE column of `kubectl get -o wide`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    pub release: Option<String>,
}

/// One supervisor of the group, from the census.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Its pod (for a dead member, the pod it ran in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBJECT_NAME_LEN))]
    pub pod: Option<String>,
    /// Supervisor member id.
    #[schemars(length(max = MAX_HAB_NAME_LEN))]
    pub member_id: String,
    /// The package it runs: `origin/name/version/release`.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub package: String,
    /// Alive in the gossip ring (a dead member stays, Confirmed, until it departs).
    #[serde(default)]
    pub alive: bool,
    /// The elected leader.
    #[serde(default)]
    pub leader: bool,
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
            ["Phase", "Ready", "Leader", "Topology", "Age", "Image", "Release"]
        );
        assert_eq!(cols[5]["priority"], 1);
        assert_eq!(cols[6]["priority"], 1, "RELEASE is shown with -o wide");
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "hab");
    }

    #[test]
    fn the_crd_carries_cel_rules_with_messages_for_users() {
        let crd = serde_json::to_string(&Habitat::crd()).unwrap();
        assert!(crd.contains("mutually exclusive; set one"));
        assert!(crd.contains("spec.image must not be empty"));
        assert!(crd.contains("ringSecretName must look like"));
        assert!(crd.contains("spec.image must be an image reference"));
        assert!(crd.contains("metadata.name must be a DNS-1035 label of at most 52"));
    }

    #[test]
    fn every_string_list_and_map_in_the_schema_is_bounded() {
        fn unbounded(schema: &serde_json::Value, path: &str, found: &mut Vec<String>) {
            let is = |t: &str| schema["type"] == t;
            let int_or_string = schema["x-kubernetes-int-or-string"] == true;
            if (is("string") || int_or_string) && schema.get("maxLength").is_none() {
                found.push(format!("{path}: string without maxLength"));
            }
            if is("array") && schema.get("maxItems").is_none() {
                found.push(format!("{path}: array without maxItems"));
            }
            if schema.get("additionalProperties").is_some() && schema.get("maxProperties").is_none()
            {
                found.push(format!("{path}: map without maxProperties"));
            }
            for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
                unbounded(sub, &format!("{path}.{name}"), found);
            }
            if let Some(items) = schema.get("items") {
                unbounded(items, &format!("{path}[]"), found);
            }
            if let Some(values) = schema.get("additionalProperties") {
                unbounded(values, &format!("{path}{{}}"), found);
            }
        }
        let crd = serde_json::to_value(Habitat::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut found = vec![];
        for part in ["spec", "status"] {
            unbounded(&schema["properties"][part], part, &mut found);
        }
        assert!(found.is_empty(), "unbounded: {found:#?}");
        let env = &schema["properties"]["spec"]["properties"]["env"];
        assert_eq!(env["maxItems"], MAX_ENV);
        assert_eq!(env["items"]["properties"]["value"]["maxLength"], 131_072);
        let bind = &schema["properties"]["spec"]["properties"]["service"]["properties"]["bind"];
        assert_eq!(bind["maxItems"], MAX_BINDS);
        assert_eq!(
            bind["items"]["properties"]["group"]["maxLength"],
            MAX_HAB_NAME_LEN
        );
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
