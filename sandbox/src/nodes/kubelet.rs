//! The simulated kubelet: schedules pods onto `sandbox-node`, starts them after a delay with a
//! unique loopback IP, tracks readiness (via the supervisor health endpoint for Habitat pods),
//! and finishes graceful deletions.

use super::supervisor::Hub;
use crate::meta;
use crate::registry::{ResourceType, StorageKey};
use crate::store::{Inner, ObjKey, Propagation, Store};
use rand::Rng;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node every pod runs on.
pub const NODE_NAME: &str = "sandbox-node";

/// Allocates unique `127.<k>.<x>.<y>` pod IPs.
#[derive(Debug)]
pub struct IpPool {
    octet: u8,
    next: u32,
    used: HashMap<String, Ipv4Addr>,
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
        let taken: HashSet<Ipv4Addr> = self.used.values().copied().collect();
        loop {
            let n = self.next;
            self.next = if self.next >= 65_000 {
                2
            } else {
                self.next + 1
            };
            let (x, y) = ((n / 250) as u8, (n % 250) as u8 + 2);
            let ip = Ipv4Addr::new(127, self.octet, x, y);
            if !taken.contains(&ip) && ip != self.host_ip() {
                self.used.insert(uid.to_string(), ip);
                return ip;
            }
        }
    }

    /// Release the IP of every pod not in `live`.
    pub fn retain(&mut self, live: &HashSet<String>) {
        self.used.retain(|uid, _| live.contains(uid));
    }
}

impl Default for IpPool {
    fn default() -> Self {
        Self::new()
    }
}

/// Kubelet state.
pub struct Kubelet {
    delay: Duration,
    hub: Option<Arc<Hub>>,
    ips: IpPool,
    scheduled: HashMap<String, Instant>,
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

/// True when the pod has a readiness probe the simulated supervisor answers.
pub fn probes_supervisor(pod: &Value) -> bool {
    pod["spec"]["containers"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["name"] == "habitat-service" && c["readinessProbe"]["httpGet"].is_object())
    })
}

impl Kubelet {
    /// A kubelet with the given start delay.
    pub fn new(delay: Duration, hub: Option<Arc<Hub>>) -> Self {
        Kubelet {
            delay,
            hub,
            ips: IpPool::new(),
            scheduled: HashMap::new(),
        }
    }

    fn ready(&self, pod: &Value) -> bool {
        match &self.hub {
            Some(h) if probes_supervisor(pod) => h.healthy(meta::uid_of(pod)),
            _ => true,
        }
    }

    /// One reconcile pass over every pod.
    pub fn step(&mut self, store: &Arc<Store>) {
        let mut inner = store.lock();
        let Some(rt) = inner.resource("", "v1", "pods") else {
            return;
        };
        let storage = StorageKey::new("", "pods");
        let live: HashSet<String> = inner
            .raw_list(&storage, None)
            .map(|(_, p)| meta::uid_of(p).to_string())
            .collect();
        // Only pods with something to do are copied: a settled pod costs a look, not a clone.
        let pods: Vec<(ObjKey, Value)> = inner
            .raw_list(&storage, None)
            .filter(|(_, p)| self.needs_sync(p))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.ips.retain(&live);
        self.scheduled.retain(|uid, _| live.contains(uid));
        for (key, pod) in pods {
            if let Err(e) = self.sync(&mut inner, &rt, &key, pod) {
                tracing::debug!("kubelet: {}/{}: {e}", key.namespace, key.name);
            }
        }
    }

    /// Whether `sync` would change anything for `pod`.
    fn needs_sync(&self, pod: &Value) -> bool {
        meta::is_deleting(pod)
            || pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
            || match pod["status"]["phase"].as_str().unwrap_or("Pending") {
                "Pending" => true,
                "Running" => is_ready(pod) != self.ready(pod),
                _ => false,
            }
    }

    fn sync(
        &mut self,
        inner: &mut Inner,
        rt: &ResourceType,
        key: &ObjKey,
        mut pod: Value,
    ) -> Result<(), crate::ApiError> {
        let ns = Some(key.namespace.as_str());
        let uid = meta::uid_of(&pod).to_string();
        if meta::is_deleting(&pod) {
            if !meta::has_finalizers(&pod) {
                inner.remove(key, Propagation::Background);
            }
            return Ok(());
        }
        let phase = pod["status"]["phase"]
            .as_str()
            .unwrap_or("Pending")
            .to_string();
        if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
            pod["spec"]["nodeName"] = json!(NODE_NAME);
            let mut pod = inner.update(rt, ns, &key.name, pod, false)?;
            pod["status"]["conditions"] = json!([condition("PodScheduled", true, &meta::now())]);
            inner.update(rt, ns, &key.name, pod, true)?;
            self.scheduled.insert(uid, Instant::now());
            return Ok(());
        }
        match phase.as_str() {
            "Pending" => {
                let since = *self
                    .scheduled
                    .entry(uid.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() < self.delay {
                    return Ok(());
                }
                let ip = self.ips.allocate(&uid).to_string();
                self.start(&mut pod, &ip);
                inner.update(rt, ns, &key.name, pod, true)?;
            }
            "Running" => {
                let ready = self.ready(&pod);
                if is_ready(&pod) != ready {
                    set_condition(&mut pod, "Ready", ready);
                    set_condition(&mut pod, "ContainersReady", ready);
                    if let Some(cs) = pod["status"]["containerStatuses"].as_array_mut() {
                        for c in cs {
                            c["ready"] = json!(ready);
                        }
                    }
                    inner.update(rt, ns, &key.name, pod, true)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn start(&self, pod: &mut Value, ip: &str) {
        let now = meta::now();
        let ready = self.ready(pod);
        let statuses: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let image = c["image"].as_str().unwrap_or_default();
                json!({"name": c["name"], "image": image,
                    "imageID": format!("docker.io/{image}@sha256:{}{}", meta::hex32(), meta::hex32()),
                    "containerID": format!("containerd://{}{}", meta::hex32(), meta::hex32()),
                    "ready": ready, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": now}}, "lastState": {}})
            })
            .collect();
        let inits: Vec<Value> = pod["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                json!({"name": c["name"], "image": c["image"], "ready": true, "started": false,
                    "restartCount": 0, "lastState": {},
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                        "startedAt": now, "finishedAt": now}}})
            })
            .collect();
        let host = self.ips.host_ip().to_string();
        let scheduled = pod["status"]["conditions"][0]["lastTransitionTime"].clone();
        let mut status = json!({
            "phase": "Running", "hostIP": host, "hostIPs": [{"ip": host}],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now, "qosClass": "BestEffort",
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
        pod["status"] = status;
    }
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
        p.retain(&["b".to_string()].into_iter().collect());
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
