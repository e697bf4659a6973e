//! The simulated kubelet, an API client: binds pods to `sandbox-node` (there is no scheduler),
//! starts them after a delay with a unique loopback IP, tracks readiness (through the supervisor
//! health check for Habitat pods), and finishes graceful deletions, as a kubelet does.

use super::supervisor::Hub;
use crate::meta;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
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

/// Kubelet state.
pub struct Kubelet {
    client: Client,
    delay: Duration,
    hub: Option<Arc<Hub>>,
    ips: IpPool,
    /// When each pod was first seen bound to the node.
    scheduled: HashMap<String, Instant>,
    /// The resourceVersion each pod had when the kubelet last wrote it: until the watch shows a
    /// newer one, the kubelet would only repeat itself.
    acted: HashMap<String, String>,
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
            delay,
            hub,
            ips: IpPool::new(),
            scheduled: HashMap::new(),
            acted: HashMap::new(),
        }
    }

    fn ready(&self, pod: &Pod) -> bool {
        match &self.hub {
            Some(h) if probes_supervisor(pod) => {
                h.healthy(pod.metadata.uid.as_deref().unwrap_or_default())
            }
            _ => true,
        }
    }

    /// What to do for `pod` now, if anything.
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
            None | Some("Pending") => (since.elapsed() >= self.delay).then_some(Action::Start),
            Some("Running") => {
                let ready = self.ready(pod);
                (pod_is_ready(pod) != ready).then_some(Action::SetReady(ready))
            }
            _ => None,
        }
    }

    /// One pass over every pod the nodes see, without a request: each pod with something to do
    /// gets one action, which [`Kubelet::act`] sends.
    pub fn plan(&mut self, pods: &[Arc<Pod>]) -> Planned {
        let live: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        self.ips.retain(&live);
        self.scheduled.retain(|uid, _| live.contains(uid.as_str()));
        self.acted.retain(|uid, _| live.contains(uid.as_str()));
        let mut work = Vec::new();
        for pod in pods {
            if let Some(action) = self.action(pod) {
                let status = match action {
                    Action::Start => {
                        let ip = self.ips.allocate(&pod.uid().unwrap_or_default());
                        Some(self.started_status(pod, ip))
                    }
                    Action::SetReady(ready) => Some(readiness_status(pod, ready)),
                    _ => None,
                };
                work.push((pod.clone(), action, status));
            }
        }
        Planned(work)
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
        for (uid, rv) in done {
            match rv {
                Some(rv) => self.acted.insert(uid, rv),
                None => self.acted.remove(&uid),
            };
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

/// The status of a running pod whose readiness became `ready`.
fn readiness_status(pod: &Pod, ready: bool) -> Value {
    let mut value = json!({"status": pod.status});
    set_condition(&mut value, "Ready", ready);
    set_condition(&mut value, "ContainersReady", ready);
    if let Some(cs) = value["status"]["containerStatuses"].as_array_mut() {
        for c in cs {
            c["ready"] = json!(ready);
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
}
