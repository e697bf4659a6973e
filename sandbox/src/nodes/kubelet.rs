//! The simulated kubelet, an API client: binds pods to `sandbox-node` (there is no scheduler),
//! starts them after a delay with a unique loopback IP, tracks readiness (through the supervisor
//! health check for Habitat pods), and finishes graceful deletions, as a kubelet does.

use super::habitat::{volumes, Supervisors, View};
use super::supervisor::Hub;
use crate::meta;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many API requests the kubelet has in flight at once.
const CONCURRENCY: usize = 32;

/// The node every pod runs on.
pub const NODE_NAME: &str = "sandbox-node";

/// Allocates unique `127.<k>.<x>.<y>` pod IPs.
#[derive(Debug)]
pub struct IpPool {
    octet: u8,
    next: u32,
    used: HashMap<String, Ipv4Addr>,
    /// The IPs in `used`, to find a free one without collecting them each time.
    taken: HashSet<Ipv4Addr>,
    // Held for the pool's lifetime: the claim on `127.<octet>.0.0/16` (see `claim_octet`).
    _claim: Option<std::net::TcpListener>,
}

/// Claims a second octet that no other sandbox on this machine uses, by binding the node's
/// address `127.<k>.0.1` on the gateway port: two sandboxes with the same octet would hand out
/// the same pod IPs, and an operator could read another sandbox's census.
fn claim_octet() -> (u8, Option<std::net::TcpListener>) {
    let mut rng = rand::thread_rng();
    for _ in 0..64 {
        let octet: u8 = rng.gen_range(1..=254);
        if let Ok(l) = std::net::TcpListener::bind((Ipv4Addr::new(127, octet, 0, 1), 9631)) {
            return (octet, Some(l));
        }
    }
    (rng.gen_range(1..=254), None)
}

impl IpPool {
    /// A pool with a random second octet (1..=254) that no other sandbox holds.
    pub fn new() -> Self {
        let (octet, claim) = claim_octet();
        IpPool {
            octet,
            next: 2,
            used: HashMap::new(),
            taken: HashSet::new(),
            _claim: claim,
        }
    }

    /// The node's IP.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, self.octet, 0, 1)
    }

    /// The IP of pod `uid`, allocating one if needed.
    pub fn allocate(&mut self, uid: &str) -> Ipv4Addr {
        if let Some(ip) = self.used.get(uid) {
            return *ip;
        }
        loop {
            let n = self.next;
            self.next = if self.next >= 65_000 {
                2
            } else {
                self.next + 1
            };
            let (x, y) = ((n / 250) as u8, (n % 250) as u8 + 2);
            let ip = Ipv4Addr::new(127, self.octet, x, y);
            if !self.taken.contains(&ip) && ip != self.host_ip() {
                self.used.insert(uid.to_string(), ip);
                self.taken.insert(ip);
                return ip;
            }
        }
    }

    /// Release the IP of pod `uid`, if it has one.
    pub fn release(&mut self, uid: &str) {
        if let Some(ip) = self.used.remove(uid) {
            self.taken.remove(&ip);
        }
    }

    /// Release the IP of every pod not in `live`.
    pub fn retain(&mut self, live: &HashSet<&str>) {
        let taken = &mut self.taken;
        self.used.retain(|uid, ip| {
            let keep = live.contains(uid.as_str());
            if !keep {
                taken.remove(ip);
            }
            keep
        });
    }
}

impl Default for IpPool {
    fn default() -> Self {
        Self::new()
    }
}

/// What the kubelet does next for one pod.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    /// Bind it to the node (the scheduler's job; there is none).
    Bind,
    /// Start it: phase Running, IPs, container statuses.
    Start,
    /// Its readiness changed.
    SetReady(bool),
    /// Finish a graceful deletion.
    Delete,
}

/// The requests one kubelet pass will send: each pod with its action and, for a status
/// write, the status.
pub struct Planned(Vec<(Arc<Pod>, Action, Option<Value>)>);

/// Kubelet state: the client it acts through and the [`Planner`] that decides.
pub struct Kubelet {
    client: Client,
    planner: Planner,
}

/// What the kubelet remembers between passes, and the planning itself (no requests): kept apart
/// from the client so that a plan can be tested without an API server.
pub struct Planner {
    delay: Duration,
    hub: Option<Arc<Hub>>,
    /// The real supervisors, when the Habitat pods run them: readiness comes from their probes,
    /// restarts from their containers, and a deletion finishes once nothing of the pod runs.
    real: Option<Arc<Supervisors>>,
    ips: IpPool,
    /// When each pod was first seen bound to the node.
    scheduled: HashMap<String, Instant>,
    /// The resourceVersion each pod had when the kubelet last wrote it: until the watch shows a
    /// newer one, the kubelet would only repeat itself.
    acted: HashMap<String, String>,
    /// Where each pod seen lives, by uid: a pod named by uid (waiting, retried, or its
    /// supervisor's health moved) is read from the cache through it.
    refs: HashMap<String, ObjectRef<Pod>>,
    /// Pods bound to the node that wait for the start delay or for their volumes' objects:
    /// looked at on every pass until they start, changed or not (the clock and the other
    /// caches move them).
    waiting: BTreeSet<String>,
    /// Pods whose last request failed: looked at again on the next pass (no watch event will
    /// name them).
    retry: BTreeSet<String>,
    /// The ConfigMaps and Secrets the pods' volumes project: a pod starts once every required
    /// one is there, as a kubelet's leaves ContainerCreating. `None`: not checked (plans
    /// tested without them).
    sources: Option<(Store<ConfigMap>, Store<Secret>)>,
}

fn condition(t: &str, ok: bool, since: &str) -> Value {
    json!({"type": t, "status": if ok { "True" } else { "False" }, "lastProbeTime": null,
        "lastTransitionTime": since})
}

fn set_condition(pod: &mut Value, t: &str, ok: bool) {
    let status = if ok { "True" } else { "False" };
    let now = meta::now();
    if let Some(conds) = pod["status"]["conditions"].as_array_mut() {
        match conds.iter_mut().find(|c| c["type"] == t) {
            Some(c) if c["status"] == status => {}
            Some(c) => *c = condition(t, ok, &now),
            None => conds.push(condition(t, ok, &now)),
        }
    }
}

/// Mark a pod as crashed: phase Failed, not ready, containers terminated.
pub fn mark_failed(pod: &mut Value) {
    pod["status"]["phase"] = json!("Failed");
    set_condition(pod, "Ready", false);
    set_condition(pod, "ContainersReady", false);
    let now = meta::now();
    if let Some(cs) = pod["status"]["containerStatuses"].as_array_mut() {
        for c in cs {
            c["ready"] = json!(false);
            c["started"] = json!(false);
            c["state"] =
                json!({"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now}});
        }
    }
}

/// True when the pod is Running and its Ready condition is True.
pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && !meta::is_deleting(pod)
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn pod_is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod.metadata.deletion_timestamp.is_none()
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// True when the pod has a readiness probe the simulated supervisor answers.
pub fn probes_supervisor(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| {
            c.name == "habitat-service"
                && c.readiness_probe
                    .as_ref()
                    .is_some_and(|p| p.http_get.is_some())
        })
    })
}

impl Kubelet {
    /// A kubelet acting through `client`, starting pods `delay` after they are bound.
    pub fn new(client: Client, delay: Duration, hub: Option<Arc<Hub>>) -> Self {
        Kubelet {
            client,
            planner: Planner::new(delay, hub),
        }
    }

    /// A kubelet whose Habitat pods run the real supervisors of `real`.
    pub fn with_real(mut self, real: Arc<Supervisors>) -> Self {
        self.planner.real = Some(real);
        self
    }

    /// A kubelet that starts a pod only once the ConfigMaps and Secrets its volumes require
    /// are in these caches.
    pub fn with_sources(mut self, config_maps: Store<ConfigMap>, secrets: Store<Secret>) -> Self {
        self.planner.sources = Some((config_maps, secrets));
        self
    }

    /// The kubelet's planning state.
    pub fn planner(&mut self) -> &mut Planner {
        &mut self.planner
    }

    /// Sends the planned requests, [`CONCURRENCY`] at a time, and remembers what each acted on.
    pub async fn act(&mut self, Planned(work): Planned) {
        let client = &self.client;
        let done: Vec<(String, Option<String>)> = futures::stream::iter(work)
            .map(|(pod, action, status)| async move {
                let uid = pod.uid().unwrap_or_default();
                let result = act(client, &pod, &action, status).await;
                if let Err(e) = &result {
                    tracing::debug!(
                        "kubelet: {:?} {}/{}: {e}",
                        action,
                        pod.namespace().unwrap_or_default(),
                        pod.name_any()
                    );
                }
                (uid, result.ok().and(pod.resource_version()))
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        self.planner.record(done);
    }
}

impl Planner {
    /// A planner that starts pods `delay` after they are bound, ready as `hub`'s supervisors say.
    pub fn new(delay: Duration, hub: Option<Arc<Hub>>) -> Self {
        Planner {
            delay,
            hub,
            real: None,
            ips: IpPool::new(),
            scheduled: HashMap::new(),
            acted: HashMap::new(),
            refs: HashMap::new(),
            waiting: BTreeSet::new(),
            retry: BTreeSet::new(),
            sources: None,
        }
    }

    /// Whether the objects `pod`'s volumes require are there (see [`Planner::sources`]).
    fn sources_present(&self, pod: &Pod) -> bool {
        self.sources
            .as_ref()
            .is_none_or(|(cms, secrets)| volumes::sources_present(pod, cms, secrets))
    }

    /// The real container of a Habitat pod, when the pods run real supervisors.
    fn real_view(&self, pod: &Pod) -> Option<View> {
        let real = self.real.as_ref()?;
        probes_supervisor(pod).then(|| {
            real.view(pod.metadata.uid.as_deref().unwrap_or_default())
                .unwrap_or_default()
        })
    }

    /// The restarts of a Habitat pod's container and the exit code of its last run, from its
    /// real container or its simulated supervisor (a crash there is a SIGKILL: 137).
    fn restarts(&self, pod: &Pod) -> Option<(i32, Option<i32>)> {
        if let Some(view) = self.real_view(pod) {
            return Some((view.restarts, view.last_exit));
        }
        let hub = self.hub.as_ref().filter(|_| probes_supervisor(pod))?;
        let n = hub.restarts(pod.metadata.uid.as_deref().unwrap_or_default());
        Some((i32::try_from(n).unwrap_or(i32::MAX), (n > 0).then_some(137)))
    }

    fn ready(&self, pod: &Pod) -> bool {
        if let Some(view) = self.real_view(pod) {
            return view.ready;
        }
        match &self.hub {
            Some(h) if probes_supervisor(pod) => {
                h.healthy(pod.metadata.uid.as_deref().unwrap_or_default())
            }
            _ => true,
        }
    }

    /// What to do for `pod` now, if anything. A pod that waits for the start delay, or for an
    /// object its volumes require, is noted in `waiting`.
    fn action(&mut self, pod: &Pod) -> Option<Action> {
        let uid = pod.metadata.uid.as_deref()?;
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        if !node.is_empty() && node != NODE_NAME {
            return None;
        }
        if self.acted.get(uid) == pod.metadata.resource_version.as_ref() {
            return None;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            // A real container stops first (SIGTERM, then SIGKILL after the grace period).
            if self.real.as_ref().is_some_and(|r| !r.stopped(uid)) {
                self.waiting.insert(uid.to_string());
                return None;
            }
            return Some(Action::Delete);
        }
        if node.is_empty() {
            return Some(Action::Bind);
        }
        let since = match self.scheduled.get(uid) {
            Some(since) => *since,
            None => *self
                .scheduled
                .entry(uid.to_string())
                .or_insert_with(Instant::now),
        };
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            None | Some("Pending") => {
                if since.elapsed() >= self.delay && self.sources_present(pod) {
                    Some(Action::Start)
                } else {
                    self.waiting.insert(uid.to_string());
                    None
                }
            }
            Some("Running") => {
                let ready = self.ready(pod);
                let restarted = self
                    .restarts(pod)
                    .is_some_and(|(n, _)| restart_count(pod) != n);
                (pod_is_ready(pod) != ready || restarted).then_some(Action::SetReady(ready))
            }
            _ => None,
        }
    }

    /// Adds `pod`'s action, if it has one, to `work`.
    fn consider(&mut self, pod: &Arc<Pod>, work: &mut Vec<(Arc<Pod>, Action, Option<Value>)>) {
        if let Some(action) = self.action(pod) {
            let status = match action {
                Action::Start => {
                    let ip = self.ips.allocate(&pod.uid().unwrap_or_default());
                    Some(self.started_status(pod, ip))
                }
                Action::SetReady(ready) => Some(readiness_status(pod, ready, self.restarts(pod))),
                _ => None,
            };
            work.push((pod.clone(), action, status));
        }
    }

    /// Forgets a pod that is gone.
    fn forget(&mut self, uid: &str) {
        self.ips.release(uid);
        self.scheduled.remove(uid);
        self.acted.remove(uid);
        self.refs.remove(uid);
        self.waiting.remove(uid);
        self.retry.remove(uid);
    }

    /// One pass over every pod the nodes see, without a request: each pod with something to do
    /// gets one action, which [`Kubelet::act`] sends. After a relist, when any pod may have
    /// changed.
    pub fn plan(&mut self, pods: &[Arc<Pod>]) -> Planned {
        let live: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        self.ips.retain(&live);
        self.scheduled.retain(|uid, _| live.contains(uid.as_str()));
        self.acted.retain(|uid, _| live.contains(uid.as_str()));
        self.refs = pods
            .iter()
            .filter_map(|p| Some((p.metadata.uid.clone()?, ObjectRef::from_obj(p.as_ref()))))
            .collect();
        self.waiting.clear();
        self.retry.clear();
        let mut work = Vec::new();
        for pod in pods {
            self.consider(pod, &mut work);
        }
        Planned(work)
    }

    /// A pass over the pods that may have something to do, without a request: those that
    /// changed since the last pass (`changed`, by uid, each as it is now; `None`: deleted),
    /// those waiting for the start delay, those whose last request failed, and those whose
    /// supervisor's health moved (`health_moved`, by uid: readiness follows the supervisor, not
    /// the pod). Each is read from `pods`, the cache, as it is now. A pass so costs what
    /// changed, not every pod: at N = 5000 the whole-world pass was a quarter of the sandbox's
    /// CPU.
    pub fn plan_changed(
        &mut self,
        pods: &Store<Pod>,
        changed: &[(String, Option<Arc<Value>>)],
        health_moved: &[String],
    ) -> Planned {
        let mut look = std::mem::take(&mut self.waiting);
        look.append(&mut self.retry);
        for (uid, pod) in changed {
            match pod {
                Some(pod) => {
                    if let Some(r) = object_ref(pod) {
                        self.refs.insert(uid.clone(), r);
                        look.insert(uid.clone());
                    }
                }
                None => {
                    self.forget(uid);
                    look.remove(uid);
                }
            }
        }
        look.extend(
            health_moved
                .iter()
                .filter(|uid| self.refs.contains_key(*uid))
                .cloned(),
        );
        let mut work = Vec::new();
        for uid in &look {
            let pod = self.refs.get(uid).and_then(|r| pods.get(r));
            match pod {
                // The cache may hold a newer pod of the same name: its own change names it.
                Some(pod) if pod.metadata.uid.as_deref() == Some(uid.as_str()) => {
                    self.consider(&pod, &mut work)
                }
                _ => {}
            }
        }
        Planned(work)
    }

    /// Remembers what each request acted on (`Some(resourceVersion)`), or that it failed.
    fn record(&mut self, done: Vec<(String, Option<String>)>) {
        for (uid, rv) in done {
            match rv {
                Some(rv) => {
                    self.acted.insert(uid, rv);
                }
                None => {
                    self.acted.remove(&uid);
                    if self.refs.contains_key(&uid) {
                        self.retry.insert(uid);
                    }
                }
            }
        }
    }

    fn started_status(&self, pod: &Pod, ip: Ipv4Addr) -> Value {
        let now = meta::now();
        let ready = self.ready(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let statuses: Vec<Value> = spec
            .containers
            .iter()
            .map(|c| {
                let image = c.image.clone().unwrap_or_default();
                json!({"name": c.name, "image": image,
                    "imageID": format!("docker.io/{image}@sha256:{}{}", meta::hex32(), meta::hex32()),
                    "containerID": format!("containerd://{}{}", meta::hex32(), meta::hex32()),
                    "ready": ready, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": now}}, "lastState": {}})
            })
            .collect();
        let inits: Vec<Value> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| {
                json!({"name": c.name, "image": c.image, "ready": true, "started": false,
                    "restartCount": 0, "lastState": {},
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": now, "finishedAt": now}}})
            })
            .collect();
        let host = self.ips.host_ip().to_string();
        let scheduled = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| json!(t))
            .unwrap_or_else(|| json!(now));
        let mut status = json!({
            "phase": "Running", "hostIP": host, "hostIPs": [{"ip": host}],
            "podIP": ip.to_string(), "podIPs": [{"ip": ip.to_string()}], "startTime": now,
            "qosClass": "BestEffort",
            "conditions": [
                condition("PodReadyToStartContainers", true, &now),
                condition("Initialized", true, &now),
                condition("Ready", ready, &now),
                condition("ContainersReady", ready, &now),
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": scheduled},
            ],
            "containerStatuses": statuses,
        });
        if !inits.is_empty() {
            status["initContainerStatuses"] = json!(inits);
        }
        status
    }
}

/// Where the pod in `pod` (as JSON) lives in the cache.
fn object_ref(pod: &Value) -> Option<ObjectRef<Pod>> {
    let name = meta::meta_str(pod, "name")?;
    let r = ObjectRef::new(name);
    Some(match meta::meta_str(pod, "namespace") {
        Some(ns) => r.within(ns),
        None => r,
    })
}

/// The restarts of a pod's `habitat-service` container, as its status says.
fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == super::habitat::CONTAINER))
        .map_or(0, |c| c.restart_count)
}

/// The status of a running pod whose readiness became `ready` (and, for a Habitat pod, whose
/// container restarted `restarts.0` times, last exiting with `restarts.1`).
fn readiness_status(pod: &Pod, ready: bool, restarts: Option<(i32, Option<i32>)>) -> Value {
    let mut value = json!({"status": pod.status});
    set_condition(&mut value, "Ready", ready);
    set_condition(&mut value, "ContainersReady", ready);
    if let Some(cs) = value["status"]["containerStatuses"].as_array_mut() {
        for c in cs {
            c["ready"] = json!(ready);
            if let Some((count, last_exit)) =
                restarts.filter(|_| c["name"] == super::habitat::CONTAINER)
            {
                if c["restartCount"].as_i64() != Some(i64::from(count)) {
                    c["restartCount"] = json!(count);
                    c["state"] = json!({"running": {"startedAt": meta::now()}});
                    if let Some(code) = last_exit {
                        c["lastState"] = json!({"terminated": {"exitCode": code,
                            "reason": "Error", "finishedAt": meta::now()}});
                    }
                }
            }
        }
    }
    value["status"].take()
}

/// Sends the one request that performs `action`.
async fn act(
    client: &Client,
    pod: &Pod,
    action: &Action,
    status: Option<Value>,
) -> Result<(), kube::Error> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    match action {
        Action::Bind => {
            let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME}});
            api.create_subresource::<Value, Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await?;
        }
        Action::Start | Action::SetReady(_) => {
            let patch = json!({"status": status});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Action::Delete => {
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            api.delete(&name, &dp).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    #[test]
    fn ips_are_unique_loopback() {
        let mut p = IpPool::new();
        let a = p.allocate("a");
        let b = p.allocate("b");
        assert_ne!(a, b);
        assert_eq!(p.allocate("a"), a);
        assert!(a.is_loopback() && a != Ipv4Addr::new(127, 0, 0, 1));
        p.retain(&["b"].into_iter().collect());
        assert_ne!(p.allocate("c"), b);
    }

    #[test]
    fn failed_pods_are_not_ready() {
        let mut pod = json!({"status": {"phase": "Running", "conditions": [condition("Ready", true, "t")],
            "containerStatuses": [{"ready": true}]}});
        assert!(is_ready(&pod));
        mark_failed(&mut pod);
        assert!(!is_ready(&pod));
        assert_eq!(pod["status"]["containerStatuses"][0]["ready"], false);
    }

    #[test]
    fn two_live_pools_never_share_an_octet() {
        let pools: Vec<IpPool> = (0..20).map(|_| IpPool::new()).collect();
        let octets: HashSet<u8> = pools.iter().map(|p| p.octet).collect();
        assert_eq!(octets.len(), pools.len());
    }

    fn pod(name: &str, uid: &str, rv: &str, node: Option<&str>, status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]},
            "status": status,
        }))
        .expect("a pod")
    }

    fn pending() -> Value {
        json!({"phase": "Pending"})
    }

    fn running(ready: bool) -> Value {
        json!({"phase": "Running", "podIP": "127.9.0.2",
            "conditions": [condition("Ready", ready, "2026-12-04T00:00:00Z")]})
    }

    /// A cache holding `pods`, and its writer to change them.
    fn cache(pods: &[Pod]) -> (Store<Pod>, reflector::store::Writer<Pod>) {
        let (store, mut writer) = reflector::store();
        for p in pods {
            writer.apply_watcher_event(&watcher::Event::Apply(p.clone()));
        }
        (store, writer)
    }

    /// `p` as the nodes' pod mirror names a change: its uid, and it as JSON.
    fn change(p: &Pod) -> (String, Option<Arc<Value>>) {
        let json = serde_json::to_value(p).expect("json");
        (p.uid().expect("uid"), Some(Arc::new(json)))
    }

    fn actions(Planned(work): &Planned) -> Vec<(String, Action)> {
        work.iter()
            .map(|(p, a, _)| (p.name_any(), a.clone()))
            .collect()
    }

    /// A pass after the first looks at what changed, what waits for the clock, what failed and
    /// what the supervisors moved; a pod that none of those name is not looked at, even when
    /// the cache holds something to do for it.
    #[test]
    fn a_pass_looks_at_the_pods_that_moved_and_at_no_other() {
        let delay = Duration::from_millis(100);
        let mut planner = Planner::new(delay, None);
        let unbound = pod("unbound", "u1", "1", None, json!({}));
        let waiting = pod("waiting", "u2", "1", Some(NODE_NAME), pending());
        let settled = pod("settled", "u3", "1", Some(NODE_NAME), running(true));
        let elsewhere = pod("elsewhere", "u4", "1", Some("other-node"), json!({}));
        let (store, mut writer) =
            cache(&[unbound.clone(), waiting.clone(), settled.clone(), elsewhere]);
        let first = planner.plan(&store.state());
        assert_eq!(actions(&first), [("unbound".to_string(), Action::Bind)]);
        planner.record(vec![("u1".into(), unbound.resource_version())]);

        // Nothing changed: the waiting pod is looked at again, and still waits.
        assert!(actions(&planner.plan_changed(&store, &[], &[])).is_empty());
        assert!(planner.waiting.contains("u2"));
        std::thread::sleep(delay);
        let started = planner.plan_changed(&store, &[], &[]);
        assert_eq!(actions(&started), [("waiting".to_string(), Action::Start)]);
        planner.record(vec![("u2".into(), waiting.resource_version())]);
        assert!(planner.waiting.is_empty());

        // The settled pod's readiness is wrong in the cache, but nothing names it.
        let unready = pod("settled", "u3", "2", Some(NODE_NAME), running(false));
        writer.apply_watcher_event(&watcher::Event::Apply(unready.clone()));
        assert!(actions(&planner.plan_changed(&store, &[], &[])).is_empty());
        // Its supervisor's health moved: looked at.
        let moved = planner.plan_changed(&store, &[], &["u3".to_string()]);
        assert_eq!(
            actions(&moved),
            [("settled".to_string(), Action::SetReady(true))]
        );
        // The request failed: looked at again on the next pass, without a change.
        planner.record(vec![("u3".into(), None)]);
        let retried = planner.plan_changed(&store, &[], &[]);
        assert_eq!(
            actions(&retried),
            [("settled".to_string(), Action::SetReady(true))]
        );
        planner.record(vec![("u3".into(), unready.resource_version())]);
        assert!(actions(&planner.plan_changed(&store, &[], &[])).is_empty());

        // A changed pod is looked at as the cache holds it now.
        let bound = pod("unbound", "u1", "2", Some(NODE_NAME), pending());
        writer.apply_watcher_event(&watcher::Event::Apply(bound.clone()));
        assert!(actions(&planner.plan_changed(&store, &[change(&bound)], &[])).is_empty());
        assert!(planner.waiting.contains("u1"), "it waits for the delay");
    }

    /// A pod whose volumes name a Secret or ConfigMap that is not there yet stays `Pending`,
    /// looked at on every pass, and starts once the object is there (a kubelet's
    /// ContainerCreating); an optional source does not hold it.
    #[test]
    fn a_pod_starts_once_the_objects_its_volumes_require_are_there() {
        let mut planner = Planner::new(Duration::ZERO, None);
        let (cms, mut cm_writer) = reflector::store::<ConfigMap>();
        let (secrets, mut secret_writer) = reflector::store::<Secret>();
        planner.sources = Some((cms, secrets));
        let mut waits = pod("waits", "u1", "1", Some(NODE_NAME), pending());
        let mut optional = pod("optional", "u2", "1", Some(NODE_NAME), pending());
        let volumes = |optional: bool| {
            serde_json::from_value(json!([
                {"name": "key", "secret": {"secretName": "key", "optional": optional}},
                {"name": "peer", "configMap": {"name": "peer", "items": [{"key": "ip", "path": "ip"}], "optional": optional}},
                {"name": "scratch", "emptyDir": {}},
            ]))
            .expect("volumes")
        };
        for (p, o) in [(&mut waits, false), (&mut optional, true)] {
            if let Some(spec) = p.spec.as_mut() {
                spec.volumes = Some(volumes(o));
            }
        }
        let (store, _writer) = cache(&[waits.clone(), optional.clone()]);
        let first = planner.plan(&store.state());
        assert_eq!(actions(&first), [("optional".to_string(), Action::Start)]);
        assert!(planner.waiting.contains("u1"));
        let object = |kind: &str, data: Value| {
            json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": if kind == "Secret" { "key" } else { "peer" }, "namespace": "ns"},
                "data": data})
        };
        let secret: Secret =
            serde_json::from_value(object("Secret", json!({"k": "eA=="}))).expect("a Secret");
        secret_writer.apply_watcher_event(&watcher::Event::Apply(secret));
        assert!(actions(&planner.plan_changed(&store, &[], &[])).is_empty());
        // The ConfigMap without the key its item picks: still waiting.
        let cm: ConfigMap =
            serde_json::from_value(object("ConfigMap", json!({"other": "x"}))).expect("a CM");
        cm_writer.apply_watcher_event(&watcher::Event::Apply(cm));
        assert!(actions(&planner.plan_changed(&store, &[], &[])).is_empty());
        let cm: ConfigMap =
            serde_json::from_value(object("ConfigMap", json!({"ip": "10.0.0.1"}))).expect("a CM");
        cm_writer.apply_watcher_event(&watcher::Event::Apply(cm));
        let started = planner.plan_changed(&store, &[], &[]);
        assert_eq!(actions(&started), [("waits".to_string(), Action::Start)]);
    }

    /// A deleted pod is forgotten: its IP goes back to the pool and nothing of it is looked at
    /// again. A pod of the same name with another uid is looked at under its own uid only.
    #[test]
    fn a_deleted_pod_is_forgotten_and_its_successor_is_its_own_pod() {
        let mut planner = Planner::new(Duration::ZERO, None);
        let old = pod("web-0", "old", "1", Some(NODE_NAME), pending());
        let (store, mut writer) = cache(std::slice::from_ref(&old));
        assert_eq!(
            actions(&planner.plan(&store.state())),
            [("web-0".to_string(), Action::Start)]
        );
        assert!(planner.ips.used.contains_key("old"));
        planner.record(vec![("old".into(), None)]);
        assert!(planner.retry.contains("old"));

        let new = pod("web-0", "new", "3", None, json!({}));
        writer.apply_watcher_event(&watcher::Event::Delete(old.clone()));
        writer.apply_watcher_event(&watcher::Event::Apply(new.clone()));
        // The old pod's change arrives with the cache already holding its successor.
        let planned = planner.plan_changed(&store, &[change(&old)], &[]);
        assert!(
            actions(&planned).is_empty(),
            "the successor is not the old pod"
        );
        let planned = planner.plan_changed(
            &store,
            &[("old".into(), None), change(&new)],
            &["old".into()],
        );
        assert_eq!(actions(&planned), [("web-0".to_string(), Action::Bind)]);
        assert!(!planner.ips.used.contains_key("old"));
        assert!(!planner.refs.contains_key("old") && !planner.retry.contains("old"));
        assert!(!planner.scheduled.contains_key("old"));
    }
}
