//! The simulated nodes: a kubelet and Habitat supervisors that play the nodes of any API server
//! that has none, as kwok does. They are an API client: they watch pods and ConfigMaps through
//! the Kubernetes API and write pod status through it, so the same simulation serves the
//! sandbox's embedded server and a real kube-apiserver.
//!
//! Guarantees: [`Nodes::start`] refuses an API server that has Node objects, so the simulation
//! never fakes the status of a real cluster's pods. Only pods bound to [`kubelet::NODE_NAME`] (or
//! not bound yet) are touched.

pub mod kubelet;
pub mod supervisor;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How often the nodes step without a change (readiness and elections also follow the clock).
pub const TICK: Duration = Duration::from_millis(50);
/// How long a burst of changes may gather before the nodes step once for all of them.
pub const DEBOUNCE: Duration = Duration::from_millis(15);

/// What the simulated nodes do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Serve `/census` and health checks on pod IPs (default true).
    pub simulate_supervisors: bool,
    /// How long after binding a pod goes Running (default 300 ms).
    pub pod_ready_delay: Duration,
    /// Only the pods of this namespace (default: every namespace).
    pub namespace: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            simulate_supervisors: true,
            pod_ready_delay: Duration::from_millis(300),
            namespace: None,
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
}

/// Running simulated nodes.
pub struct Nodes {
    tasks: Vec<JoinHandle<()>>,
    hub: Option<Arc<supervisor::Hub>>,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes").finish_non_exhaustive()
    }
}

/// Fails when the API server behind `client` has Nodes. An API server that does not serve Nodes
/// at all (the sandbox's) has none.
pub async fn refuse_real_nodes(client: &Client) -> Result<(), NodesError> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.list_metadata(&ListParams::default().limit(1)).await {
        Ok(list) => match list.items.first() {
            Some(node) => Err(NodesError::HasNodes(node.name_any())),
            None => Ok(()),
        },
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
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

/// A reflector over `api` whose every change bumps `version` and wakes `notify`.
fn reflect<K>(
    api: Api<K>,
    version: Arc<AtomicU64>,
    notify: Arc<Notify>,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .reflect(writer);
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    version.fetch_add(1, Ordering::Relaxed);
                    notify.notify_one();
                }
                Err(e) => tracing::debug!("simulated nodes: watch error: {e}"),
            }
        }
    });
    (reader, task)
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

fn values<K>(store: &Store<K>) -> Vec<Value>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize,
{
    store
        .state()
        .iter()
        .filter_map(|o| serde_json::to_value(&**o).ok())
        .collect()
}

impl Nodes {
    /// Checks that the API server has no Nodes, then starts the kubelet and (optionally) the
    /// supervisors against it.
    pub async fn start(client: Client, opts: Options) -> Result<Nodes, NodesError> {
        refuse_real_nodes(&client).await?;
        let version = Arc::new(AtomicU64::new(0));
        let notify = Arc::new(Notify::new());
        let ns = opts.namespace.as_deref();
        let (pods, pod_task) = reflect(api::<Pod>(&client, ns), version.clone(), notify.clone());
        let (config_maps, cm_task) = reflect(
            api::<ConfigMap>(&client, ns),
            version.clone(),
            notify.clone(),
        );
        let hub = opts
            .simulate_supervisors
            .then(|| Arc::new(supervisor::Hub::default()));
        let mut kubelet = kubelet::Kubelet::new(client, opts.pod_ready_delay, hub.clone());
        let loop_hub = hub.clone();
        let main = tokio::spawn(async move {
            let (Ok(()), Ok(())) = (
                pods.wait_until_ready().await,
                config_maps.wait_until_ready().await,
            ) else {
                return;
            };
            let mut seen = None;
            loop {
                let now = version.load(Ordering::Relaxed);
                if let Some(hub) = &loop_hub {
                    if seen == Some(now) {
                        hub.step(None);
                    } else {
                        let (p, c) = (values(&pods), values(&config_maps));
                        hub.step(Some((&p, &c)));
                    }
                }
                seen = Some(now);
                kubelet.step(&pods.state()).await;
                tokio::select! {
                    _ = notify.notified() => tokio::time::sleep(DEBOUNCE).await,
                    _ = tokio::time::sleep(TICK) => {}
                }
            }
        });
        Ok(Nodes {
            tasks: vec![pod_task, cm_task, main],
            hub,
        })
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

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
