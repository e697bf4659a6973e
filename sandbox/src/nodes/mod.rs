//! The simulated nodes: a kubelet and Habitat supervisors that play the nodes of any API server
//! that has none, as kwok does. They are an API client: they watch pods and ConfigMaps through
//! the Kubernetes API and write pod status through it, so the same simulation serves the
//! sandbox's embedded server and a real kube-apiserver.
//!
//! Guarantees: [`Nodes::start`] refuses an API server that has Node objects other than its own
//! (`sandbox-node`, labelled [`node::SIMULATED_LABEL`]), so the simulation never fakes the status
//! of a real cluster's pods. On a server that serves Nodes it registers that Node and renews its
//! Lease ([`mod@node`]), as a kubelet does. Only pods bound to [`kubelet::NODE_NAME`] (or
//! not bound yet) are touched.
//!
//! With [`Nodes::start_with`] and a [`habitat::Config`], the Habitat pods run the real Habitat
//! supervisor instead of a simulated one ([`mod@habitat`]).

pub mod habitat;
pub mod kubelet;
pub mod node;
pub mod supervisor;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The pod annotation a test sets, to a new value each time, to crash the pod's container:
/// its processes die at once (SIGKILL: the supervisor does not depart) and the kubelet starts
/// the container again in the same pod (same name, uid and IP, `restartCount` one more) from a
/// fresh filesystem, as after an OOM kill. A real kubelet ignores it. A value the nodes find
/// on a pod whose container they have not started yet (the nodes restarted) crashes nothing.
pub const CRASH_ANNOTATION: &str = "sandbox.habitat.sh/crash";

/// How often the nodes step without a change (readiness and elections also follow the clock).
pub const TICK: Duration = Duration::from_millis(50);
/// How long a burst of changes may gather before the nodes step once for all of them.
pub const DEBOUNCE: Duration = Duration::from_millis(15);

/// A loop waits at least this many times as long as its last step took before the next one:
/// N = 5000 took 80.6 s with no pause, 40.7 s at 1, 47.6 to 55.7 s at 3.
pub const PACE: u32 = 1;

/// How long a loop whose last step took `took` lets changes gather before its next step: the
/// [`DEBOUNCE`], or [`PACE`] times the step when that is longer. The simulated nodes and the
/// sandbox's StatefulSet controller both pace themselves so. A step that scans a
/// whole kind then costs at most half a core, however large the world: in a busy sandbox
/// changes arrive without pause, and at N = 5000 stepping every 15 ms made the loops' cost grow
/// with the square of the world (each step longer, and as many steps). Each step takes in
/// every change since the last, so a longer wait only batches more of them.
pub fn pause_after(took: Duration) -> Duration {
    DEBOUNCE.max(took * PACE)
}

/// What the simulated nodes do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Serve `/census` and health checks on pod IPs (default true).
    pub simulate_supervisors: bool,
    /// How long after binding a pod goes Running (default 300 ms).
    pub pod_ready_delay: Duration,
    /// Only the pods of this namespace (default: every namespace).
    pub namespace: Option<String>,
    /// The simulated supervisors' gossip delays (default: [`supervisor::Gossip::from_env`]).
    pub gossip: supervisor::Gossip,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            simulate_supervisors: true,
            pod_ready_delay: Duration::from_millis(300),
            namespace: None,
            gossip: supervisor::Gossip::from_env(),
        }
    }
}

/// Why the simulated nodes cannot start.
#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    /// The API server has real nodes.
    #[error(
        "the API server has Nodes (for example {0}): the simulated kubelet fakes pod status, so \
         it only plays the nodes of an API server that has none (a test control plane)"
    )]
    HasNodes(String),
    /// The API server could not be asked.
    #[error("cannot list the API server's Nodes: {0}")]
    Api(#[from] kube::Error),
    /// The real supervisors cannot run.
    #[error(transparent)]
    Real(#[from] habitat::RealError),
}

/// Running simulated nodes.
pub struct Nodes {
    tasks: Vec<JoinHandle<()>>,
    hub: Option<Arc<supervisor::Hub>>,
    real: Option<Arc<habitat::Supervisors>>,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes").finish_non_exhaustive()
    }
}

pub use node::refuse_real_nodes;

/// The objects of one watch as JSON (what the supervisors read of them, [`Supervised`]), kept in
/// step with the watch events: each event serializes only the object it carries, so a change
/// costs one object, not the whole store. It also remembers which objects changed since
/// [`JsonMirror::take_changed`] last asked.
#[derive(Debug, Default)]
pub struct JsonMirror {
    state: Mutex<Mirrored>,
}

#[derive(Debug)]
struct Mirrored {
    objects: BTreeMap<String, Arc<Value>>,
    /// The keys of the objects changed since the last `take_changed`.
    changed: BTreeSet<String>,
    /// Relisted (or new) since the last `take_changed`: any object may have changed.
    relisted: bool,
    /// Whether `changed` is kept (only for a mirror whose reader takes it).
    tracked: bool,
}

impl Default for Mirrored {
    fn default() -> Self {
        Mirrored {
            objects: BTreeMap::new(),
            changed: BTreeSet::new(),
            relisted: true,
            tracked: false,
        }
    }
}

impl JsonMirror {
    /// A mirror that remembers which objects changed, for [`JsonMirror::take_changed`].
    pub fn tracking_changes() -> Self {
        let m = JsonMirror::default();
        m.lock().tracked = true;
        m
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mirrored> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every object, shared (cloning the list costs one pointer per object).
    pub fn values(&self) -> Vec<Arc<Value>> {
        self.lock().objects.values().cloned().collect()
    }

    /// The objects changed since the last call, by key, each as it is now (`None`: deleted);
    /// `None` when the watch relisted meanwhile (or on the first call), when any may have.
    pub fn take_changed(&self) -> Option<Vec<(String, Option<Arc<Value>>)>> {
        let mut m = self.lock();
        let keys = std::mem::take(&mut m.changed);
        if std::mem::replace(&mut m.relisted, false) {
            return None;
        }
        Some(
            keys.into_iter()
                .map(|k| {
                    let now = m.objects.get(&k).cloned();
                    (k, now)
                })
                .collect(),
        )
    }

    fn apply(&self, key: String, object: Arc<Value>) {
        let mut m = self.lock();
        if m.tracked {
            m.changed.insert(key.clone());
        }
        m.objects.insert(key, object);
    }

    fn delete(&self, key: &str) {
        let mut m = self.lock();
        m.objects.remove(key);
        if m.tracked {
            m.changed.insert(key.to_string());
        }
    }

    fn relist(&self, objects: BTreeMap<String, Arc<Value>>) {
        let mut m = self.lock();
        m.objects = objects;
        m.changed.clear();
        m.relisted = true;
    }
}

fn key_of<K: kube::Resource>(o: &K) -> String {
    o.meta().uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.meta().name.as_deref().unwrap_or_default()
        )
    })
}

/// How a watched object is kept for the supervisors: only what they read of it, as JSON.
pub trait Supervised {
    /// The parts of `self` the supervisors read.
    fn supervised(&self) -> Option<Arc<Value>>;
}

/// The metadata the supervisors read, borrowed from the object: its identity, its labels and
/// annotations (a downward-API volume may project any of them), its owners and whether it is
/// being deleted. Not its `managedFields`, which on a real API server are most of a pod's
/// metadata.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct KeptMeta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_references: Option<&'a Vec<OwnerReference>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deletion_timestamp: Option<&'a Time>,
}

impl<'a> KeptMeta<'a> {
    fn of(m: &'a ObjectMeta) -> Self {
        KeptMeta {
            name: m.name.as_ref(),
            namespace: m.namespace.as_ref(),
            uid: m.uid.as_ref(),
            labels: m.labels.as_ref(),
            annotations: m.annotations.as_ref(),
            owner_references: m.owner_references.as_ref(),
            deletion_timestamp: m.deletion_timestamp.as_ref(),
        }
    }
}

/// A pod as the supervisors read it (`supervisor::member_for`, `supervisor::identity`,
/// `supervisor::rings`), borrowed from the pod.
#[derive(serde::Serialize)]
struct KeptPod<'a> {
    metadata: KeptMeta<'a>,
    spec: KeptSpec<'a>,
    status: KeptStatus<'a>,
}

#[derive(serde::Serialize)]
struct KeptSpec<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    containers: Option<&'a Vec<Container>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    volumes: Option<&'a Vec<Volume>>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct KeptStatus<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<&'a String>,
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pod_ip: Option<&'a String>,
}

/// A pod as the supervisors read it: its metadata, its containers and volumes, and its phase
/// and IP. Not the rest of its status (conditions, every container's status), which the
/// simulated kubelet rewrites as the pod starts, nor the rest of its spec: turned into JSON
/// whole at each of its watch events, those were most of what the nodes' reflectors spent.
/// Serialized from borrows, without a copy of the pod.
impl Supervised for Pod {
    fn supervised(&self) -> Option<Arc<Value>> {
        let spec = self.spec.as_ref();
        let status = self.status.as_ref();
        let kept = KeptPod {
            metadata: KeptMeta::of(&self.metadata),
            spec: KeptSpec {
                containers: spec.map(|s| &s.containers),
                volumes: spec.and_then(|s| s.volumes.as_ref()),
            },
            status: KeptStatus {
                phase: status.and_then(|s| s.phase.as_ref()),
                pod_ip: status.and_then(|s| s.pod_ip.as_ref()),
            },
        };
        serde_json::to_value(kept).ok().map(Arc::new)
    }
}

/// A ConfigMap as the supervisors read it (a peer file): its metadata and data.
#[derive(serde::Serialize)]
struct KeptConfigMap<'a> {
    metadata: KeptMeta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a BTreeMap<String, String>>,
}

impl Supervised for ConfigMap {
    fn supervised(&self) -> Option<Arc<Value>> {
        let kept = KeptConfigMap {
            metadata: KeptMeta::of(&self.metadata),
            data: self.data.as_ref(),
        };
        serde_json::to_value(kept).ok().map(Arc::new)
    }
}

/// The longest wait of the nodes' watches between two attempts.
pub const WATCH_BACKOFF_CAP: Duration = Duration::from_secs(2);
const WATCH_BACKOFF_START: Duration = Duration::from_millis(100);

/// The nodes' watch retry delays: 100 ms doubling to [`WATCH_BACKOFF_CAP`], less up to a quarter
/// of jitter, reset by any event. kube's `default_backoff` grows to 30 s and is reset only after
/// 120 s without an error: after a kube-apiserver outage (`tests/restart.rs`) the nodes came
/// back up to 30 s after the API server, and pods made meanwhile waited that long to run. They
/// are two watches of a test's simulation; a retry every 2 s is no load.
struct WatchBackoff {
    next: Duration,
}

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
        Some(delay.mul_f64(1.0 - rand::random::<f64>() * 0.25))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_BACKOFF_START;
    }
}

/// A reflector over `api` whose every change bumps `version`, wakes `notify` and updates
/// `mirror` (for the supervisors, returned) with what they read of the changed object only.
fn reflect<K>(
    api: Api<K>,
    version: Arc<AtomicU64>,
    notify: Arc<Notify>,
    mirror: JsonMirror,
) -> (Store<K>, Arc<JsonMirror>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Supervised
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let mirror = Arc::new(mirror);
    let stream = watcher(api, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .reflect(writer);
    let m = mirror.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut relist: Option<BTreeMap<String, Arc<Value>>> = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    match event {
                        watcher::Event::Apply(o) => {
                            if let Some(v) = o.supervised() {
                                m.apply(key_of(&o), v);
                            }
                        }
                        watcher::Event::Delete(o) => {
                            m.delete(&key_of(&o));
                        }
                        watcher::Event::Init => relist = Some(BTreeMap::new()),
                        watcher::Event::InitApply(o) => {
                            if let (Some(buf), Some(v)) = (relist.as_mut(), o.supervised()) {
                                buf.insert(key_of(&o), v);
                            }
                        }
                        watcher::Event::InitDone => {
                            if let Some(buf) = relist.take() {
                                m.relist(buf);
                            }
                        }
                    }
                    version.fetch_add(1, Ordering::Relaxed);
                    notify.notify_one();
                }
                Err(e) => tracing::debug!("simulated nodes: watch error: {e}"),
            }
        }
    });
    (reader, mirror, task)
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

impl Nodes {
    /// Checks that the API server has no Nodes, then starts the kubelet and (optionally) the
    /// supervisors against it.
    pub async fn start(client: Client, opts: Options) -> Result<Nodes, NodesError> {
        Self::start_with(client, opts, None).await
    }

    /// Like [`Nodes::start`]; with `real`, the Habitat pods run real supervisors
    /// ([`habitat`]) instead of simulated ones.
    pub async fn start_with(
        client: Client,
        opts: Options,
        real: Option<habitat::Config>,
    ) -> Result<Nodes, NodesError> {
        if let Some(cfg) = &real {
            cfg.check()?;
        }
        refuse_real_nodes(&client).await?;
        let heartbeat = node::register(&client).await?;
        let version = Arc::new(AtomicU64::new(0));
        let notify = Arc::new(Notify::new());
        let ns = opts.namespace.as_deref();
        let (pods, pod_json, pod_task) = reflect(
            api::<Pod>(&client, ns),
            version.clone(),
            notify.clone(),
            JsonMirror::tracking_changes(),
        );
        let (config_maps, cm_json, cm_task) = reflect(
            api::<ConfigMap>(&client, ns),
            version.clone(),
            notify.clone(),
            JsonMirror::tracking_changes(),
        );
        let hub = (opts.simulate_supervisors && real.is_none())
            .then(|| Arc::new(supervisor::Hub::new(opts.gossip)));
        // Secrets, for the volumes a pod waits for and the real supervisors' mounts.
        let (secrets, writer) = reflector::store::<Secret>();
        let stream = watcher(api::<Secret>(&client, ns), watcher::Config::default())
            .backoff(WatchBackoff::default())
            .reflect(writer);
        let secret_version = version.clone();
        let secret_notify = notify.clone();
        let secret_task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::debug!("simulated nodes: Secret watch error: {e}");
                }
                secret_version.fetch_add(1, Ordering::Relaxed);
                secret_notify.notify_one();
            }
        });
        let real = match real {
            Some(cfg) => {
                let watched = habitat::Watched {
                    pods: pods.clone(),
                    config_maps: config_maps.clone(),
                    secrets: secrets.clone(),
                };
                Some(Arc::new(habitat::Supervisors::start(
                    cfg,
                    watched,
                    notify.clone(),
                )?))
            }
            None => None,
        };
        let mut kubelet = kubelet::Kubelet::new(client, opts.pod_ready_delay, hub.clone())
            .with_sources(config_maps.clone(), secrets.clone());
        if let Some(r) = &real {
            kubelet = kubelet.with_real(r.clone());
        }
        let loop_real = real.clone();
        let loop_hub = hub.clone();
        let main = tokio::spawn(async move {
            let (Ok(()), Ok(()), Ok(())) = (
                pods.wait_until_ready().await,
                config_maps.wait_until_ready().await,
                secrets.wait_until_ready().await,
            ) else {
                return;
            };
            let mut seen = None;
            loop {
                let began = std::time::Instant::now();
                let now = version.load(Ordering::Relaxed);
                // The pods and ConfigMaps changed since the last step (`None`: relisted, any
                // may have).
                let (changed, changed_cms) = if seen == Some(now) {
                    (Some(Vec::new()), Some(Vec::new()))
                } else {
                    (pod_json.take_changed(), cm_json.take_changed())
                };
                let mut health_moved = Vec::new();
                if let Some(hub) = &loop_hub {
                    match (&changed, &changed_cms) {
                        _ if seen == Some(now) => hub.step(None),
                        (Some(pods), Some(cms)) => hub.step_changed(pods, cms),
                        _ => hub.step(Some((&pod_json.values(), &cm_json.values()))),
                    }
                    health_moved = hub.take_health_moved();
                }
                if let Some(real) = &loop_real {
                    health_moved.extend(real.take_moved());
                }
                seen = Some(now);
                let planner = kubelet.planner();
                let planned = match &changed {
                    Some(changed) => planner.plan_changed(&pods, changed, &health_moved),
                    None => planner.plan(&pods.state()),
                };
                // The pace follows the step's own work, not the kubelet's requests' round trips.
                let pause = pause_after(began.elapsed());
                kubelet.act(planned).await;
                tokio::select! {
                    _ = notify.notified() => tokio::time::sleep(pause).await,
                    _ = tokio::time::sleep(TICK.max(pause)) => {}
                }
            }
        });
        let mut tasks = vec![pod_task, cm_task, secret_task, main];
        tasks.extend(heartbeat);
        Ok(Nodes { tasks, hub, real })
    }

    /// Stops every task and closes every supervisor gateway.
    pub async fn shutdown(self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(h) = self.hub {
            h.shutdown();
        }
        if let Some(real) = self.real {
            // Waits for the supervisors to depart (a few seconds), off the async threads.
            let _ = tokio::task::spawn_blocking(move || real.shutdown()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;
    use serde_json::json;

    /// A pod as a real API server sends it to the nodes: with what the supervisors read (its
    /// identity, labels and annotations, owner, containers, volumes, phase and IP) and with what
    /// they do not (field managers, conditions, container statuses, the rest of the spec).
    fn whole_pod(annotation: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "labels": {"habitat.sh/service": "web"}, "annotations": {"member": annotation},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "web", "uid": "s1"}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:habitat.sh/service": {}}}}}]},
            "spec": {"nodeName": "sandbox-node", "serviceAccountName": "default",
                "containers": [{"name": "habitat-service", "image": "acme/web:1.2",
                    "args": ["--group", "blue", "--topology", "leader", "--strategy", "rolling"],
                    "env": [{"name": "HAB_LICENSE", "value": "accept-no-persist"}],
                    "readinessProbe": {"httpGet": {"path": "/services/web/blue/health",
                        "port": 9631}},
                    "volumeMounts": [{"name": "peer", "mountPath": "/etc/habitat/peer"},
                        {"name": "id", "mountPath": "/hab/sup/default/MEMBER_ID",
                            "subPath": "MEMBER_ID"}]}],
                "volumes": [{"name": "peer", "configMap": {"name": "web-peer"}},
                    {"name": "id", "downwardAPI": {"items": [{"path": "MEMBER_ID",
                        "fieldRef": {"fieldPath": "metadata.annotations['member']"}}]}}]},
            "status": {"phase": "Running", "podIP": "10.1.0.5", "hostIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "habitat-service", "image": "acme/web:1.2",
                    "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .expect("a valid pod")
    }

    /// The nodes keep only part of each pod for the supervisors ([`Supervised`]): the
    /// supervisors must make the same of it as of the whole pod.
    #[test]
    fn the_supervisors_read_the_same_of_a_kept_pod_as_of_the_whole() {
        let whole = whole_pod("m1");
        let kept = whole.supervised().expect("a pod as JSON");
        let full = serde_json::to_value(&whole).expect("a pod as JSON");
        let read = |pod: &Value| {
            let m = supervisor::member_for(pod).expect("a supervised pod");
            let seen = (m.pod, m.pod_uid, m.namespace, m.ip, m.service, m.group);
            let more = (m.leader_topology, m.strategy, m.package, m.mounts);
            (seen, more, supervisor::identity::identity(pod))
        };
        assert_eq!(read(&kept), read(&full));
        let (seen, more, identity) = read(&kept);
        assert_eq!(seen.4, "web");
        assert_eq!(seen.3, "10.1.0.5");
        assert_eq!(more.3, vec!["web-peer".to_string()]);
        assert_eq!(
            identity,
            supervisor::identity::Identity::Projected("m1".into())
        );
        assert_eq!(
            kept["status"],
            json!({"phase": "Running", "podIP": "10.1.0.5"})
        );
        assert!(kept["metadata"].get("managedFields").is_none());
        assert_eq!(
            kept["spec"]
                .as_object()
                .map(|s| s.keys().cloned().collect::<Vec<_>>()),
            Some(vec!["containers".to_string(), "volumes".to_string()])
        );

        let mut deleting = whole_pod("m1");
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-12-05T14:00:00Z")).expect("a time");
        let kept = deleting.supervised().expect("a pod as JSON");
        assert!(
            crate::meta::is_deleting(&kept),
            "a pod being deleted stops its supervisor"
        );
    }

    /// A peer file is kept with its data and identity, without its field managers.
    #[test]
    fn a_kept_config_map_has_its_data() {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "web-peer", "namespace": "ns", "uid": "c1",
                "managedFields": [{"manager": "habitat-operator", "operation": "Apply"}]},
            "data": {"peer-ip": "10.1.0.5"}
        }))
        .expect("a valid ConfigMap");
        assert_eq!(
            cm.supervised().as_deref(),
            Some(
                &json!({"metadata": {"name": "web-peer", "namespace": "ns", "uid": "c1"},
                "data": {"peer-ip": "10.1.0.5"}})
            )
        );
    }

    #[test]
    fn a_mirror_names_what_changed_since_it_was_last_asked() {
        let m = JsonMirror::tracking_changes();
        let v = |n: i64| Arc::new(serde_json::json!({"n": n}));
        m.relist([("a".to_string(), v(1)), ("b".to_string(), v(2))].into());
        assert!(
            m.take_changed().is_none(),
            "a relist may have changed anything"
        );
        assert_eq!(m.take_changed(), Some(vec![]));
        m.apply("a".into(), v(3));
        m.delete("b");
        m.apply("c".into(), v(4));
        m.apply("c".into(), v(5));
        assert_eq!(
            m.take_changed(),
            Some(vec![
                ("a".to_string(), Some(v(3))),
                ("b".to_string(), None),
                ("c".to_string(), Some(v(5))),
            ])
        );
        assert_eq!(m.take_changed(), Some(vec![]));
        assert_eq!(m.values(), vec![v(3), v(5)]);
        let untracked = JsonMirror::default();
        untracked.apply("a".into(), v(1));
        assert!(untracked.lock().changed.is_empty());
    }

    #[test]
    fn watch_retries_stay_short_and_reset() {
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = (0..20).filter_map(|_| b.next()).collect();
        assert!(delays[0] <= WATCH_BACKOFF_START, "{delays:?}");
        assert!(delays.iter().all(|d| *d <= WATCH_BACKOFF_CAP), "{delays:?}");
        assert!(delays[19] >= WATCH_BACKOFF_CAP * 3 / 4, "{delays:?}");
        b.reset();
        assert!(b.next().is_some_and(|d| d <= WATCH_BACKOFF_START));
    }
}
