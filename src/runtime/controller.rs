//! Wiring: reflectors (the caches), kube-runtime's `Controller` (the work queue) and the
//! reconciler. Children are watched only when they carry the operator's labels.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::{Habitat, LABEL_MANAGED_BY, LABEL_NAME, LABEL_RING, MANAGER};
use crate::cluster::census::{CensusSource, HttpCensus};
use crate::cluster::events::{EventSink, Recorder};
use crate::reconcile::allocating::{self, Allocating};
use crate::reconcile::context::{Context, Stores};
use crate::watch::echoes::Echoes;
use crate::watch::index::{self, Indexes};
use crate::reconcile::metrics::Metrics;
use crate::reconcile::secrets::SecretReader;
use crate::watch::slim::{drop_managed_fields, Slim};
use crate::reconcile::state::PerHabitat;
use crate::reconcile::{error_policy, reconcile};
use crate::watch::lean::{self, Decoded, Lean};
use crate::watch::triggers::{Triggers, Wake, Woken};

/// Habitats reconciled concurrently unless `--workers` says otherwise. A reconcile spends most
/// of its time waiting on the API server, one round of requests after another (a first pass:
/// the finalizer with the peer ConfigMap, the workload's children together, the status), so the
/// workers bound how many requests the operator has in flight, and how fast the first passes of
/// many new Habitats go out. On the real ground at N = 1000 with 8 workers the first passes were the bottleneck:
/// the last StatefulSet was written 52 s after the first Habitat (the plain floor's after
/// 12 s), and the last pods could not start before it; with 16, after 32 s. The time to Ready
/// was 1.02 to 1.27 times the plain floor's in four runs with 16 against 1.13 to 1.48 in three
/// with 8, for 51 MiB peak RSS against 48. 32 workers gained nothing over 16 (the floors, at
/// the same concurrency, gained as much) and took the peak RSS at N = 100 over 20 MiB.
pub const DEFAULT_WORKERS: u16 = 16;

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch one namespace instead of all.
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub workers: u16,
    /// Port of the supervisors' HTTP gateway.
    pub census_port: u16,
    /// Timeout of one census read.
    pub census_timeout: Duration,
    /// How long a settled standalone Habitat waits before it is looked at again unchanged.
    pub resync: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: None,
            workers: DEFAULT_WORKERS,
            census_port: 9631,
            census_timeout: Duration::from_secs(2),
            resync: crate::reconcile::requeue::RESYNC,
        }
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Objects per page of a cache's initial list. kube's default of 500 made the operator's peak
/// RSS on a restart over 1,000 settled Habitats (2,302 pods) 107 to 115 MiB against 69 MiB once
/// settled: a page's response and its decoded objects (managedFields included, until slimmed),
/// for every cache at once. Pages of 100: 89 MiB. Since
/// the caches list in turn ([`ListTurns`]), pages of 50 against 100: 50 against 59 MiB at
/// N = 1000 and 19 against 23 MiB at N = 100, for 150 requests from start to settled instead of
/// 81, and caches synced in 1.1 s instead of 1.0.
const LIST_PAGE: u32 = 50;

/// Objects per page for the kinds whose objects are large until slimmed: a pod (its spec, its
/// containers' statuses, the managedFields of the controller and the kubelet) and a StatefulSet
/// (its pod template). The restart's peak is the decoding of their pages: restarted over 100
/// settled Habitats with 16 workers, the operator peaked at 18.8 to 21.0 MiB with pages of 50
/// (target 20) and 18.2 to 18.8 with 25 for these two kinds, for 33 requests from start to
/// settled instead of 26 (216 instead of 150 at N = 1000, where the caches themselves set the
/// peak). Their objects are now decoded without those parts ([`lean`]), but each page's
/// response still carries them whole; the page sizes were not measured again since.
const LIST_PAGE_LARGE: u32 = 25;
const _: () = assert!(LIST_PAGE_LARGE < LIST_PAGE);

/// Objects per page of the initial list of `K`'s cache.
fn list_page<K: kube::Resource<DynamicType = ()>>() -> u32 {
    match K::kind(&()).as_ref() {
        "Pod" | "StatefulSet" => LIST_PAGE_LARGE,
        _ => LIST_PAGE,
    }
}

type Trigger<K> = std::pin::Pin<Box<dyn futures::Stream<Item = Arc<K>> + Send>>;

/// A cache of `K` fed by a watch, and the stream of touched objects that drives it.
/// `indexed` sees every event after the store applied it (the secondary indexes); `wake` says
/// which updates are triggers ([`Triggers`]). The triggers are the cache's own objects (shared,
/// not copied): at the end of a list, every object in the cache. Its first list waits for its
/// turn among the caches (`turns`).
fn cached<K, W>(
    api: Api<W>,
    config: watcher::Config,
    modify: impl FnMut(&mut K) + Send + 'static,
    indexed: impl Fn(&watcher::Event<K>) + Send + 'static,
    wake: Wake,
    turns: &ListTurns,
) -> (Store<K>, Trigger<K>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    W: kube::Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Decoded<K>
        + std::fmt::Debug
        + Send
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = turns
        .take(watcher(api, config.page_size(list_page::<K>())).map_ok(lean::decoded_event))
        .inspect_err(|e| {
            tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying with backoff")
        })
        // Like `.backoff(WatchBackoff)`: after an error the watch is not polled for the delay.
        .scan(WatchRetry::default(), |retry, item| {
            let delay = retry.delay_after(&item);
            async move {
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                Some(item)
            }
        })
        .modify(modify);
    let stream = woken(stream, writer, indexed, wake);
    (store, forward(stream))
}

/// The caches' first lists, one cache at a time. Listed all at once, the seven caches each
/// decoded a page (its objects whole, managedFields included, before they are slimmed) at the
/// same moment: on a restart over 100 settled Habitats the operator peaked at 24 to 25 MiB
/// against 17 once settled, 19 in turn with pages of 50.
/// Later relists (after a watch expired or failed) take no turn; a list that fails hands the
/// turn on, so a kind the operator may not list holds no other cache back.
#[derive(Clone)]
struct ListTurns(Arc<tokio::sync::Semaphore>);

impl Default for ListTurns {
    fn default() -> Self {
        ListTurns(Arc::new(tokio::sync::Semaphore::new(1)))
    }
}

impl ListTurns {
    /// `events` (a watch) waits for its turn before its first request, and hands the turn on
    /// when its first list ended or failed.
    fn take<K: Send + 'static>(
        &self,
        events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    ) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
        let turns = self.0.clone();
        futures::stream::once(async move {
            let mut turn = turns.acquire_owned().await.ok();
            events.inspect(move |event| {
                if matches!(event, Ok(watcher::Event::InitDone) | Err(_)) {
                    drop(turn.take());
                }
            })
        })
        .flatten()
    }
}

/// The objects a watch's events wake, once `writer` has applied each event to its store:
/// shared with the store, never copied. An update wakes the store's object, a deletion the
/// deleted object, and a list's end every object in the store.
fn woken<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    writer: reflector::store::Writer<K>,
    indexed: impl Fn(&watcher::Event<K>),
    wake: Wake,
) -> impl futures::Stream<Item = Result<Arc<K>, watcher::Error>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize,
{
    let reader = writer.as_reader();
    events
        .reflect(writer)
        .inspect_ok(move |event| indexed(event))
        .scan(Triggers::new(wake), |triggers, event| {
            futures::future::ready(Some(triggers.after(event)))
        })
        .flat_map(move |woken| {
            let objects = match woken {
                None => vec![],
                // The store's object when it holds this one (an update), else this one (a
                // deletion).
                Some(Woken::Object(o)) => vec![reader
                    .get(&ObjectRef::from_obj(&o))
                    .unwrap_or_else(|| Arc::new(o))],
                Some(Woken::All) => reader.state(),
            };
            futures::stream::iter(objects.into_iter().map(Ok))
        })
}

/// Runs `stream` (a watch) in a task of its own and hands on the objects it touched.
fn forward<K: Send + Sync + 'static>(
    stream: impl futures::Stream<Item = Result<Arc<K>, watcher::Error>> + Send + 'static,
) -> Trigger<K> {
    // The watch runs in a task of its own and hands the touched objects over a channel. Polled
    // by the Controller instead, a watch was polled only when the Controller took a new trigger:
    // after a kube-apiserver outage each watch retried once and then not for tens of seconds
    // (`tests/restart.rs`, operator log). In its own task it retries on its backoff and relists
    // within ~5 s of the API server's return, so the caches are current; the Controller
    // deduplicates what piles up in the channel.
    //
    // Only objects cross the channel, never the watch's errors (logged above, retried by the
    // watch on its own backoff). The Controller wraps its trigger streams in a `StreamBackoff`
    // with kube's default backoff (0.8 s doubling to 30 s, with jitter, reset only after 120 s
    // without an error): every error it receives stops it from taking *any* trigger for that
    // long. An outage's dozens of connect errors held it 3, 5, 10, 21, 51 and 36 s in turn after
    // kube-apiserver was back, and a Habitat created then waited over 90 s (`tests/restart.rs`,
    // `kube_runtime::utils::stream_backoff` at debug).
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let Ok(object) = item else { continue };
            if tx.send(object).is_err() {
                return;
            }
        }
    });
    let rx = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|object| (object, rx))
    });
    Box::pin(rx)
}

/// The watches' retry delays: 0.5 s doubling to at most [`WATCH_BACKOFF_CAP`], with jitter.
/// kube's `default_backoff` (client-go's) grows to 30 s and is reset only after 120 s without an
/// error: after a 30 s API outage the watches came back up to ~50 s late (measured with
/// `tests/restart.rs`), with `/readyz` already 200 and changes unseen meanwhile. The cap bounds
/// that lag to a few seconds; a handful of watches per operator retrying every 5 s is no load for
/// an API server.
pub struct WatchBackoff {
    next: Duration,
}

/// The longest delay between two attempts of a failing watch.
pub const WATCH_BACKOFF_CAP: Duration = Duration::from_secs(5);
const WATCH_BACKOFF_START: Duration = Duration::from_millis(500);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: WATCH_BACKOFF_START,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(WATCH_BACKOFF_CAP);
        // Up to a quarter less, so that the watches do not retry in lockstep.
        let jitter = rand::random::<f64>() * 0.25;
        Some(delay.mul_f64(1.0 - jitter))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_BACKOFF_START;
    }
}

/// When a watch tries again after an error: on [`WatchBackoff`], except that a watch whose
/// resourceVersion expired (410 Gone, which makes kube's watcher relist) relists at once, as
/// client-go's reflector does. After a kube-apiserver restart every watch met a 403 (the new
/// server's authorizer not yet loaded) and then a 410; waiting out the backoff again before the
/// relist made a Habitat created then wait 8 s instead of 3 (`tests/restart.rs`). A 410 right
/// after a 410 waits, so that a server answering nothing else is not relisted in a loop.
#[derive(Default)]
struct WatchRetry {
    backoff: WatchBackoff,
    expired: bool,
}

impl WatchRetry {
    /// The delay before the watch is polled again after `item`, `None` for none.
    fn delay_after<K>(
        &mut self,
        item: &Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<Duration> {
        use kube::runtime::utils::Backoff;
        match item {
            Ok(_) => {
                self.backoff.reset();
                self.expired = false;
                None
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 && !self.expired => {
                self.expired = true;
                None
            }
            Err(_) => self.backoff.next(),
        }
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
    let (sts_store, sts) = cached(
        api::<Lean<StatefulSet>>(&client, ns),
        ours.clone(),
        Slim::slim,
        |_| {},
        Wake::Changed(echoes.clone()),
        &turns,
    );
    let (cm_store, cms) = cached(
        api::<ConfigMap>(&client, ns),
        ours.clone(),
        Slim::slim,
        |_| {},
        Wake::Changed(echoes.clone()),
        &turns,
    );
    let (svc_store, svcs) = cached(
        api::<Service>(&client, ns),
        ours.clone(),
        Slim::slim,
        |_| {},
        Wake::Changed(echoes.clone()),
        &turns,
    );
    let (pdb_store, pdbs) = cached(
        api::<PodDisruptionBudget>(&client, ns),
        ours.clone(),
        Slim::slim,
        |_| {},
        Wake::Changed(echoes.clone()),
        &turns,
    );
    let pods_index = index.pods_by_habitat.clone();
    let (pod_store, pods) = cached(
        api::<Lean<Pod>>(&client, ns),
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
        api::<Lean<Habitat>>(&client, ns),
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
            allocating: Arc::new(allocating),
        },
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
        census: Arc::new(HttpCensus::new(
            settings.census_port,
            settings.census_timeout,
        )) as Arc<dyn CensusSource>,
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

/// Waits until `store` has seen its first full list.
///
/// `Store::wait_until_ready` wakes only its latest waiter (one oneshot receiver behind a
/// mutex), and the Controller waits on the Habitat store too; polling again with a timeout
/// picks up the memoised result instead of sleeping forever.
async fn synced<K: kube::Resource<DynamicType = ()> + Clone + 'static>(store: &Store<K>) {
    loop {
        if let Ok(result) =
            tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await
        {
            if result.is_err() {
                tracing::warn!("a cache writer stopped before its first list");
            }
            return;
        }
    }
}

/// The Habitats a pod matters to: its own, and those that bind to its Habitat's service group
/// (their peer files name one of its pods). Looked up in the indexes: no walk over all Habitats.
fn pod_watchers(habitats: &Store<Habitat>, index: &Indexes, p: &Pod) -> Vec<ObjectRef<Habitat>> {
    let (Some(ns), Some(name)) = (p.namespace(), p.labels().get(LABEL_NAME)) else {
        return vec![];
    };
    let own = ObjectRef::new(name).within(&ns);
    let mut refs = vec![own.clone()];
    if let Some(own) = habitats.get(&own) {
        let svc = &own.spec.service;
        refs.extend(
            index
                .habitats_by_bind
                .refs(&index::key(&[&ns, &svc.name, &svc.group])),
        );
    }
    refs
}

/// The Habitats that name a Secret (config, files, ring key) or use its ring.
fn referencing(index: &Indexes, s: &PartialObjectMeta<Secret>) -> Vec<ObjectRef<Habitat>> {
    let ns = s.namespace().unwrap_or_default();
    let mut refs = index
        .habitats_by_secret
        .refs(&index::secret_key(&ns, &s.name_any()));
    if let Some(ring) = s.labels().get(LABEL_RING) {
        refs.extend(index.habitats_by_secret.refs(&index::ring_key(&ns, ring)));
    }
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    refs.dedup();
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::slim::{slim_pod, slim_statefulset};
    use kube::runtime::controller::Action;

    #[test]
    fn an_expired_watch_relists_at_once_unless_it_expired_just_before() {
        let gone = || {
            let status = kube::core::Status {
                code: 410,
                ..Default::default()
            };
            Err::<watcher::Event<ConfigMap>, _>(watcher::Error::WatchError(Box::new(status)))
        };
        let refused = || Err::<watcher::Event<ConfigMap>, _>(watcher::Error::NoResourceVersion);
        let mut retry = WatchRetry::default();
        // The API server was down, came back, and the watch's resourceVersion is gone.
        let first = retry.delay_after(&refused());
        assert!(first.is_some_and(|d| d <= WATCH_BACKOFF_START), "{first:?}");
        for _ in 0..6 {
            assert!(retry.delay_after(&refused()).is_some());
        }
        assert_eq!(
            retry.delay_after(&gone()),
            None,
            "a first 410 relists at once"
        );
        // The relist answered 410 again: back off, at the cap reached before.
        let again = retry.delay_after(&gone());
        assert!(
            again.is_some_and(|d| d > WATCH_BACKOFF_CAP / 2 && d <= WATCH_BACKOFF_CAP),
            "{again:?}"
        );
        assert!(retry.delay_after(&gone()).is_some());
        // An event resets both the backoff and the 410 allowance.
        assert_eq!(
            retry.delay_after(&Ok(watcher::Event::<ConfigMap>::InitDone)),
            None
        );
        assert_eq!(retry.delay_after(&gone()), None);
        let after = retry.delay_after(&refused());
        assert!(after.is_some_and(|d| d <= WATCH_BACKOFF_START), "{after:?}");
    }

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm
    }

    #[test]
    fn a_cached_pod_keeps_what_the_reconciler_reads() {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-0", "labels": {"habitat.sh/name": "redis"}},
            "spec": {"containers": [{"name": "habitat", "image": "kinvolk/redis-hab"}]},
            "status": {
                "phase": "Running", "podIP": "10.0.0.1",
                "hostIP": "10.0.0.254", "startTime": "2026-12-02T00:00:00Z",
                "conditions": [{"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "habitat", "image": "kinvolk/redis-hab",
                    "imageID": "sha256:0", "ready": true, "restartCount": 0}],
            },
        }))
        .expect("a pod");
        slim_pod(&mut p);
        assert!(p.spec.is_none());
        assert!(crate::reconcile::peer::is_ready(&p), "still ready as read");
        let status = p.status.clone().expect("the status is kept");
        assert!(status.container_statuses.is_none());
        assert!(status.host_ip.is_none() && status.start_time.is_none());
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        let kept: Vec<_> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| &c.type_)
            .collect();
        assert_eq!(kept, ["Ready"]);
        assert_eq!(p.metadata.labels.as_ref().map(|l| l.len()), Some(1));

        // The kubelet's binding changes only the spec: its event wakes nothing.
        let mut triggers = Triggers::new(Wake::Changed(Arc::default()));
        let mut bound: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-0", "uid": "u", "resourceVersion": "1"},
            "spec": {"containers": [{"name": "habitat"}]},
        }))
        .expect("a pod");
        slim_pod(&mut bound);
        assert!(triggers
            .after(Ok(watcher::Event::Apply(bound.clone())))
            .is_some());
        let mut scheduled: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-0", "uid": "u", "resourceVersion": "2"},
            "spec": {"containers": [{"name": "habitat"}], "nodeName": "sandbox-node"},
        }))
        .expect("a pod");
        slim_pod(&mut scheduled);
        assert!(triggers
            .after(Ok(watcher::Event::Apply(scheduled)))
            .is_none());
    }

    #[test]
    fn a_cached_statefulset_keeps_the_rollout_and_wakes_only_on_it() {
        let sts = |rv: &str, ready: i32, available: i32| -> StatefulSet {
            let mut s: StatefulSet = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "redis", "uid": "u", "resourceVersion": rv, "generation": 1},
                "spec": {"replicas": 3, "selector": {}, "serviceName": "redis",
                    "template": {"spec": {"containers": [{"name": "habitat"}]}}},
                "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": ready,
                    "updatedReplicas": 3, "updateRevision": "redis-1", "currentRevision": "redis-1",
                    "availableReplicas": available, "currentReplicas": 3},
            }))
            .expect("a StatefulSet");
            slim_statefulset(&mut s);
            s
        };
        let three = sts("1", 3, 2);
        assert!(
            crate::reconcile::rollout::progress(&three, &[], 3).done,
            "done as read"
        );
        let status = three.status.clone().expect("the status is kept");
        assert_eq!(status.update_revision.as_deref(), Some("redis-1"));
        assert!(status.available_replicas.is_none() && status.current_revision.is_none());
        let mut triggers = Triggers::new(Wake::Changed(Arc::default()));
        assert!(triggers.after(Ok(watcher::Event::Apply(three))).is_some());
        // Only availableReplicas moved: nothing the reconciler reads.
        assert!(triggers
            .after(Ok(watcher::Event::Apply(sts("2", 3, 3))))
            .is_none());
        // A pod stopped being ready: the rollout is not done any more.
        assert!(triggers
            .after(Ok(watcher::Event::Apply(sts("3", 2, 2))))
            .is_some());
    }

    #[test]
    fn a_cached_budget_keeps_its_fingerprint_and_its_status_updates_wake_nothing() {
        let pdb = |rv: &str, healthy: i32| -> PodDisruptionBudget {
            let mut b: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "redis", "uid": "u", "resourceVersion": rv,
                    "annotations": {"habitat.sh/fingerprint": "f1"}},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"habitat.sh/name": "redis"}}},
                "status": {"currentHealthy": healthy, "desiredHealthy": 2, "expectedPods": 3,
                    "disruptionsAllowed": (healthy - 2).max(0), "observedGeneration": 1},
            }))
            .expect("a PodDisruptionBudget");
            b.slim();
            b
        };
        let first = pdb("1", 0);
        assert!(first.status.is_none());
        assert_eq!(
            first.metadata.annotations.as_ref().map(|a| a.len()),
            Some(1),
            "the fingerprint is kept"
        );
        let mut triggers = Triggers::new(Wake::Changed(Arc::default()));
        assert!(triggers.after(Ok(watcher::Event::Apply(first))).is_some());
        // kube-controller-manager counts the healthy members as they come up.
        for (rv, healthy) in [("2", 1), ("3", 2), ("4", 3)] {
            assert!(triggers
                .after(Ok(watcher::Event::Apply(pdb(rv, healthy))))
                .is_none());
        }
    }

    #[test]
    fn pods_and_statefulsets_are_listed_in_smaller_pages() {
        // Their pages' responses, which carry the objects whole, set the restart's peak RSS.
        assert_eq!(list_page::<Pod>(), LIST_PAGE_LARGE);
        assert_eq!(list_page::<StatefulSet>(), LIST_PAGE_LARGE);
        for small in [
            list_page::<ConfigMap>(),
            list_page::<Service>(),
            list_page::<PodDisruptionBudget>(),
            list_page::<PartialObjectMeta<Secret>>(),
            list_page::<Habitat>(),
        ] {
            assert_eq!(small, LIST_PAGE);
        }
    }

    #[tokio::test]
    async fn caches_list_one_at_a_time_and_hand_the_turn_on_when_a_list_ends_or_fails() {
        use futures::FutureExt;
        // Listed all at once, the seven caches each decoded a page at the same moment: the
        // restart's peak RSS at N = 100 was 24 to 25 MiB; in turn, 19.
        let turns = ListTurns::default();
        let polled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // A watch that counts its first poll (its list request), then yields `then`.
        let watch = |then: Vec<Result<watcher::Event<ConfigMap>, watcher::Error>>| {
            let polled = polled.clone();
            futures::stream::once(async move {
                polled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(watcher::Event::Init)
            })
            .chain(futures::stream::iter(then))
            .chain(futures::stream::pending())
        };
        let listed = || {
            vec![
                Ok(watcher::Event::InitApply(config_map("a"))),
                Ok(watcher::Event::InitDone),
                Ok(watcher::Event::Apply(config_map("a"))),
            ]
        };
        let failed = vec![Err(watcher::Error::NoResourceVersion)];
        let mut first = Box::pin(turns.take(watch(failed)));
        let mut second = Box::pin(turns.take(watch(listed())));
        let mut third = Box::pin(turns.take(watch(listed())));
        assert!(matches!(first.next().await, Some(Ok(watcher::Event::Init))));
        assert!(second.next().now_or_never().is_none());
        assert!(third.next().now_or_never().is_none());
        assert_eq!(
            polled.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one list at a time"
        );
        assert!(
            matches!(first.next().await, Some(Err(_))),
            "the first list fails"
        );
        assert!(matches!(
            second.next().await,
            Some(Ok(watcher::Event::Init))
        ));
        assert!(
            third.next().now_or_never().is_none(),
            "the second lists now"
        );
        assert!(matches!(
            second.next().await,
            Some(Ok(watcher::Event::InitApply(_)))
        ));
        assert!(
            third.next().now_or_never().is_none(),
            "its list is not over"
        );
        assert!(matches!(
            second.next().await,
            Some(Ok(watcher::Event::InitDone))
        ));
        assert!(matches!(third.next().await, Some(Ok(watcher::Event::Init))));
        assert_eq!(polled.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(
            matches!(second.next().await, Some(Ok(watcher::Event::Apply(_))),),
            "a watch goes on after handing its turn on"
        );
    }

    #[tokio::test]
    async fn a_lists_end_wakes_the_stores_own_objects_and_copies_none() {
        // The trigger filter kept a copy of every listed object until the list ended, beside the
        // store's: on a restart over 1,000 settled Habitats every cached object was held twice
        // (peak RSS 87.4 MiB, 59.7 since).
        let (store, writer) = reflector::store();
        let (a, b) = (config_map("a"), config_map("b"));
        let mut b2 = b.clone();
        b2.data = Some([("k".to_string(), "v".to_string())].into());
        let events = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(a.clone())),
            Ok(watcher::Event::InitApply(b.clone())),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(b2)),
            Ok(watcher::Event::Delete(a.clone())),
        ]);
        let out: Vec<Arc<ConfigMap>> = woken(events, writer, |_| {}, Wake::Every)
            .try_collect()
            .await
            .expect("no error");
        let names: Vec<String> = out.iter().map(|o| o.name_any()).collect();
        let mut listed = names[..2].to_vec();
        listed.sort();
        assert_eq!(
            listed,
            ["a", "b"],
            "the list's end wakes every cached object"
        );
        assert_eq!(names[2..], ["b", "a"], "then the update and the deletion");
        let b_now = store.get(&ObjectRef::from_obj(&b)).expect("b is cached");
        assert!(
            Arc::ptr_eq(&out[2], &b_now),
            "an update wakes the store's own object"
        );
        assert!(out[2].data.is_some(), "in its updated version");
        assert!(store.get(&ObjectRef::from_obj(&a)).is_none());
    }

    #[tokio::test]
    async fn watch_errors_do_not_hold_the_controller_back() {
        // A watch that failed a few times (an API outage) and then saw an object: the object is
        // reconciled at once. When the errors reached the Controller, its trigger backoff
        // (0.8 s doubling per error) held the object back for about 25 s.
        let (store, mut writer) = reflector::store();
        let cm = config_map("after-the-outage");
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm.clone()),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        let errors = (0..5).map(|_| Err(watcher::Error::NoResourceVersion));
        let stream = futures::stream::iter(errors.chain([Ok(Arc::new(cm))]))
            .chain(futures::stream::pending());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let controller = Controller::for_shared_stream(forward(stream), store).run(
            |cm: Arc<ConfigMap>, tx: Arc<tokio::sync::mpsc::UnboundedSender<String>>| async move {
                let _ = tx.send(cm.name_any());
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            Arc::new(tx),
        );
        tokio::spawn(controller.for_each(|_| async {}));
        let reconciled = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await;
        assert_eq!(
            reconciled.ok().flatten().as_deref(),
            Some("after-the-outage"),
            "the object was not reconciled within 3 s of its watch event"
        );
    }
}
