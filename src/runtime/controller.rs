//! Wiring: the caches ([`crate::watch`]), kube-runtime's `Controller` (the work queue) and the
//! reconciler. Children are watched only when they carry the operator's labels.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::runtime::{watcher, Controller};
use kube::{Api, Client};

use crate::api::{Habitat, LABEL_MANAGED_BY, MANAGER};
use crate::children::statefulset::HTTP_GATEWAY_PORT;
use crate::cluster::census::{CensusSource, HttpCensus};
use crate::cluster::events::{EventSink, Recorder};
use crate::reconcile::allocating::{self, Allocating};
use crate::reconcile::context::Context;
use crate::reconcile::metrics::Metrics;
use crate::reconcile::secrets::SecretReader;
use crate::reconcile::state::PerHabitat;
use crate::reconcile::{error_policy, reconcile};
use crate::watch::cache::{cached, synced, ListTurns};
use crate::watch::echoes::Echoes;
use crate::watch::index::{pod_watchers, referencing, Indexes};
use crate::watch::slim::{drop_managed_fields, Slim};
use crate::watch::triggers::Wake;
use crate::watch::Stores;

/// Habitats reconciled concurrently unless `--workers` says otherwise. A reconcile mostly waits
/// on the API server, so the workers bound the requests in flight and how fast the first passes
/// of many new Habitats go out: on the real ground at N = 1000, 16 workers took the time to Ready
/// to 1.02 to 1.27 times the floor against 1.13 to 1.48 with 8, for 51 MiB peak RSS against 48;
/// 32 gained nothing and took the peak at N = 100 over 20 MiB.
pub const DEFAULT_WORKERS: u16 = 16;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch one namespace instead of all.
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub workers: u16,
    /// How long a settled standalone Habitat waits before it is looked at again unchanged.
    pub resync: Duration,
}

/// How long one census read may take; the pod's census is then taken as unreachable and
/// another running pod's is asked.
const CENSUS_TIMEOUT: Duration = Duration::from_secs(2);

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` completes (the caller listens for SIGTERM and SIGINT),
/// then returns once the reconciles under way finished. `habitats` receives the Habitat cache so
/// that the metrics endpoint can count phases; `ready` is set once every cache has synced; each
/// notification of `api_back` (the API server reachable again) reconciles every Habitat.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Metrics,
    habitats: Arc<OnceLock<Store<Habitat>>>,
    ready: Arc<std::sync::atomic::AtomicBool>,
    api_back: Arc<tokio::sync::Notify>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_deref();
    let ours = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    let index = Indexes::default();
    let reader = SecretReader::default();
    let echoes = Arc::new(Echoes::default());
    let turns = ListTurns::default();
    // The children's caches: the operator's labelled objects, slimmed, woken by changes that
    // are not echoes of this process's writes.
    macro_rules! child {
        ($kind:ty) => {
            cached(
                api::<$kind>(&client, ns),
                ours.clone(),
                Slim::slim,
                |_| {},
                Wake::Changed(echoes.clone()),
                &turns,
            )
        };
    }
    let (sts_store, sts) = child!(StatefulSet);
    let (cm_store, cms) = child!(ConfigMap);
    let (svc_store, svcs) = child!(Service);
    let (pdb_store, pdbs) = child!(PodDisruptionBudget);
    let pods_index = index.pods_by_habitat.clone();
    let (pod_store, pods) = cached(
        api::<Pod>(&client, ns),
        ours,
        Slim::slim,
        move |e| pods_index.event(e),
        Wake::Changed(echoes.clone()),
        &turns,
    );
    // Secrets are cached as metadata only (a metadata list and watch: the API server sends no
    // data): the operator needs to know which exist and which carry a ring label; the contents
    // of the few a Habitat uses are read when needed (`SecretReader`).
    let secrets_index = index.secrets_by_ring.clone();
    let forget = reader.clone();
    let (secret_store, secrets) = cached(
        api::<PartialObjectMeta<Secret>>(&client, ns),
        watcher::Config::default(),
        drop_managed_fields,
        move |e| {
            secrets_index.event(e);
            if let watcher::Event::Delete(s) = e {
                forget.forget(s);
            }
        },
        Wake::Every,
        &turns,
    );

    let habitats_index = index.clone();
    let per_habitat = Arc::new(PerHabitat::default());
    let (deleted, state_metrics) = (per_habitat.clone(), metrics.clone());
    let (habitat_store, habitat_stream) = cached(
        api::<Habitat>(&client, ns),
        watcher::Config::default(),
        drop_managed_fields,
        move |e| {
            habitats_index.habitat_event(e);
            if let watcher::Event::Delete(h) = e {
                if let Some(uid) = h.metadata.uid.as_deref() {
                    deleted.forget(uid);
                    state_metrics.state_entries(deleted.len());
                }
            }
        },
        Wake::Changed(echoes.clone()),
        &turns,
    );
    let controller = Controller::for_shared_stream(habitat_stream, habitat_store.clone());
    // The Habitats whose Service failed to be created in the background: reconciled again.
    let (allocating, allocation_failed) = Allocating::new(allocating::IN_FLIGHT);
    let _ = habitats.set(habitat_store.clone());
    let by_secret = index.clone();
    let by_pod = (habitat_store.clone(), index.clone());

    let ctx = Arc::new(Context {
        client: client.clone(),
        stores: Stores {
            habitats: habitat_store.clone(),
            statefulsets: sts_store.clone(),
            config_maps: cm_store.clone(),
            services: svc_store.clone(),
            budgets: pdb_store.clone(),
            pods: pod_store.clone(),
            secrets: secret_store.clone(),
            index,
            recent: Default::default(),
        },
        allocating: Arc::new(allocating),
        secrets: reader,
        events: EventSink::spawn(Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        )),
        metrics: metrics.clone(),
        resync: settings.resync,
        census: Arc::new(HttpCensus::new(HTTP_GATEWAY_PORT as u16, CENSUS_TIMEOUT))
            as Arc<dyn CensusSource>,
        habitats: per_habitat,
        generated_keys: Mutex::new(Default::default()),
        key_generation: tokio::sync::Mutex::new(()),
        echoes,
        synced: ready.clone(),
    });

    let stores = ctx.stores.clone();
    tokio::spawn(async move {
        synced(&stores.habitats).await;
        synced(&stores.statefulsets).await;
        synced(&stores.config_maps).await;
        synced(&stores.services).await;
        synced(&stores.budgets).await;
        synced(&stores.pods).await;
        synced(&stores.secrets).await;
        ready.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!("caches synced");
    });

    controller
        .owns_shared_stream(sts)
        .owns_shared_stream(cms)
        .owns_shared_stream(svcs)
        .owns_shared_stream(pdbs)
        .watches_shared_stream(pods, move |p: Arc<Pod>| {
            pod_watchers(&by_pod.0, &by_pod.1, &p)
        })
        .watches_shared_stream(secrets, move |s: Arc<PartialObjectMeta<Secret>>| {
            referencing(&by_secret, &s)
        })
        .reconcile_on(allocation_failed)
        .reconcile_all_on(futures::stream::unfold(api_back, |n| async move {
            n.notified().await;
            Some(((), n))
        }))
        .with_config(kube::runtime::controller::Config::default().concurrency(settings.workers))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
}
