//! The watches and their caches: what the operator knows of the cluster, kept current by
//! watch events, and which of those events wake a Habitat. The reconciler reads only from here
//! ([`Stores`]) to decide; it never lists or watches itself.
//!
//! # Flow
//!
//! One watch per kind ([`cache::cached`]), each in a task of its own: kube-runtime's `watcher`
//! (first lists one cache at a time, paged), retried on [`backoff`], slimmed by the kind's
//! transform ([`slim`]: what each cache keeps), applied to a kube-runtime `reflector` store,
//! then to the secondary indexes ([`index`]), then filtered into triggers ([`triggers`]: changed
//! objects only, not the echoes of this process's own writes, [`echoes`]). The children's writes
//! this process made are answered for the caches until their watch events arrive ([`recent`]).
//!
//! # Guarantees
//!
//! - A Habitat is woken by an event only after its kind's store and indexes have applied it.
//! - Each cache keeps the same slim copy as the memory of this process's writes.
//! - Children are watched only when they carry the operator's labels; Secrets as metadata only.
//!
//! # Caveats
//!
//! - kube-runtime's `reflector`, `watcher` and `Controller` are used as they are; the indexes,
//!   the trigger filter and the retry are the project's own, each module says why.
//! - The reconciler must wait until every cache has synced (kube's Controller waits for the
//!   Habitat cache only): the runtime sets `Context::synced`.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;

use crate::api::Habitat;

pub mod backoff;
pub mod cache;
pub mod echoes;
pub mod index;
pub mod recent;
pub mod slim;
pub mod triggers;

use index::Indexes;
use recent::RecentWrites;

/// The caches the reconciler reads while observing. It never reads the API server to decide.
#[derive(Clone)]
pub struct Stores {
    /// Habitats.
    pub habitats: Store<Habitat>,
    /// StatefulSets carrying the operator's labels.
    pub statefulsets: Store<StatefulSet>,
    /// ConfigMaps carrying the operator's labels.
    pub config_maps: Store<ConfigMap>,
    /// Services carrying the operator's labels.
    pub services: Store<Service>,
    /// PodDisruptionBudgets carrying the operator's labels.
    pub budgets: Store<PodDisruptionBudget>,
    /// Pods carrying the operator's labels.
    pub pods: Store<Pod>,
    /// Secrets' metadata only (no data): their contents are read by `Context::secrets` when needed.
    pub secrets: Store<PartialObjectMeta<Secret>>,
    /// Secondary indexes over these caches, fed by the same watches.
    pub index: Indexes,
    /// This process's writes of children the caches do not show yet.
    pub recent: Arc<RecentWrites>,
}
