//! Observing: a `Snapshot` of one Habitat's world, read from the caches only. Plain data: what
//! is drawn from it is drawn in [`decide`](mod@crate::reconcile::decide).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use crate::api::key_name::KeyName;
use crate::api::{Habitat, MemberStatus, USER_TOML_KEY};
use crate::cluster::census::Election;
use crate::reconcile::allocating::Allocating;
use crate::reconcile::context::Context;
use crate::reconcile::drift::LiveWorkload;
use crate::reconcile::ring::{self, KeyState};
use crate::reconcile::secrets::SecretsView;
use crate::watch::index;
use crate::watch::recent::Recent;
use crate::watch::Stores;

/// What the leader census said in this reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderView {
    /// Not read yet.
    NotObserved,
    /// No census could be read; the errors, joined.
    Unreachable(String),
    /// The census' election state, and the pod whose IP the leader has.
    Observed {
        /// The election.
        election: Election,
        /// The leader's pod, when elected and found among the pods.
        pod: Option<String>,
        /// IPs of the group's alive members.
        alive: Vec<String>,
        /// The group's members that have not departed, for the status.
        members: Vec<MemberStatus>,
    },
}

impl LeaderView {
    /// The leader's pod, when known.
    pub fn pod(&self) -> Option<&str> {
        match self {
            LeaderView::Observed { pod, .. } => pod.as_deref(),
            _ => None,
        }
    }
}

/// One Habitat's world as the caches show it, updated in place by each step of a reconcile.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The StatefulSet `NAME`.
    pub statefulset: Option<StatefulSet>,
    /// The peer ConfigMap.
    pub peer_config: Option<ConfigMap>,
    /// The headless Service.
    pub headless: Option<Service>,
    /// The leader Service.
    pub leader_service: Option<Service>,
    /// A child this process is creating in the background (a Service waiting for its cluster
    /// IP): seen as sent, so that no pass sends it again, but not there yet.
    pub creating: Option<String>,
    /// The PodDisruptionBudget.
    pub budget: Option<PodDisruptionBudget>,
    /// The Habitat's pods.
    pub pods: Vec<Pod>,
    /// For each bind, the pods of the Habitats in this namespace that run the bound group.
    pub bound_pods: Vec<Vec<Pod>>,
    /// The ring key.
    pub key: KeyState,
    /// What is wrong with the Secrets the spec names (user.toml, files), if anything.
    pub secret_problem: Option<String>,
    /// What is wrong with the spec itself, if anything.
    pub spec_problem: Option<String>,
    /// The census reading of this reconcile.
    pub leader: LeaderView,
    /// A pod was deleted for replacement in this reconcile.
    pub replaced_pod: bool,
}

/// The cache's copy of `name`, or this process's write of it when the cache lags behind.
fn get<K>(store: &Store<K>, recent: &Recent<K>, h: &Habitat, name: &str) -> Option<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let ns = h.namespace().unwrap_or_default();
    let cached = store
        .get(&ObjectRef::new(name).within(&ns))
        .map(|o| (*o).clone());
    recent.fresher(&ns, name, cached)
}

/// The Service `name` of `h`'s namespace: as [`get`], or as sent while this process creates it
/// in the background ([`Allocating`](crate::reconcile::allocating::Allocating)), which `creating`
/// then names.
fn service(
    stores: &Stores,
    allocating: &Allocating,
    h: &Habitat,
    name: &str,
    creating: &mut Option<String>,
) -> Option<Service> {
    let seen = || get(&stores.services, &stores.recent.services, h, name);
    seen().or_else(|| {
        match allocating.pending(&h.namespace().unwrap_or_default(), name) {
            Some(sent) => {
                *creating = Some(name.to_string());
                Some(sent)
            }
            // The create may have ended since the first look: its answer is remembered before
            // it stops being pending.
            None => seen(),
        }
    })
}

/// Reads the snapshot of `h` from the caches, through their indexes: it touches the objects of
/// this Habitat and of the groups it binds to, never the whole cluster. `secrets` is what this
/// reconcile read of the Secrets the spec uses; `generated` is a key this process generated for
/// the Habitat's ring that the cache may not show yet.
pub fn observe(
    h: &Habitat,
    ctx: &Context,
    secrets: &SecretsView,
    generated: Option<KeyName>,
) -> Snapshot {
    let stores = &ctx.stores;
    let name = h.name_any();
    let ns = h.namespace().unwrap_or_default();
    let pods_of = |habitat: &str| -> Vec<Pod> {
        stores
            .index
            .pods_by_habitat
            .objects(&stores.pods, &index::key(&[&ns, habitat]))
            .iter()
            .map(|p| (**p).clone())
            .collect()
    };
    let pods = pods_of(&name);
    let bound_pods = h
        .spec
        .service
        .bind
        .iter()
        .map(|b| {
            stores
                .index
                .habitats_by_group
                .refs(&index::key(&[&ns, &b.service, &b.group]))
                .into_iter()
                .filter(|o| o.name != name)
                .map(|o| o.name)
                .collect::<std::collections::BTreeSet<String>>()
                .into_iter()
                .flat_map(|n| pods_of(&n))
                .collect()
        })
        .collect();
    let recent = &stores.recent;
    let mut creating = None;
    let mut key = ring::resolve(h, secrets);
    if let (KeyState::ToGenerate { .. }, Some(k)) = (&key, generated) {
        key = KeyState::Ready(k);
    }
    Snapshot {
        statefulset: get(&stores.statefulsets, &recent.statefulsets, h, &name),
        peer_config: get(
            &stores.config_maps,
            &recent.config_maps,
            h,
            &h.peer_config_name(),
        ),
        headless: service(stores, &ctx.allocating, h, &name, &mut creating),
        leader_service: service(
            stores,
            &ctx.allocating,
            h,
            &h.leader_service_name(),
            &mut creating,
        ),
        creating,
        budget: get(&stores.budgets, &recent.budgets, h, &name),
        pods,
        bound_pods,
        key,
        secret_problem: secret_problem(h, secrets),
        spec_problem: crate::api::validate::problem(h),
        leader: LeaderView::NotObserved,
        replaced_pod: false,
    }
}

/// What is wrong with the Secrets named by `spec.service.configSecretName` and
/// `filesSecretName`, in words for the user.
pub fn secret_problem(h: &Habitat, secrets: &SecretsView) -> Option<String> {
    let svc = &h.spec.service;
    if let Some(name) = &svc.config_secret_name {
        match secrets.find(name) {
            None => return Some(format!("Secret {name} named in spec.service.configSecretName does not exist; create it with a key {USER_TOML_KEY}")),
            Some(s) if !s.keys.contains(USER_TOML_KEY) => {
                return Some(format!("Secret {name} named in spec.service.configSecretName has no key {USER_TOML_KEY}"))
            }
            Some(_) => {}
        }
    }
    if let Some(name) = &svc.files_secret_name {
        if !secrets.present.contains(name) {
            return Some(format!(
                "Secret {name} named in spec.service.filesSecretName does not exist"
            ));
        }
    }
    None
}

impl Snapshot {
    /// The live children of the workload, as the snapshot holds them.
    pub fn live_workload(&self) -> LiveWorkload<'_> {
        LiveWorkload {
            statefulset: self.statefulset.as_ref(),
            headless: self.headless.as_ref(),
            leader_service: self.leader_service.as_ref(),
            budget: self.budget.as_ref(),
        }
    }

    /// The addresses currently in the peer file.
    pub fn current_peers(&self) -> Vec<&str> {
        self.peer_config
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(crate::api::PEER_IP_KEY))
            .map(|text| {
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first address of the peer file: a pod of this Habitat when one runs.
    pub fn current_peer(&self) -> Option<&str> {
        self.current_peers().into_iter().next()
    }
}
