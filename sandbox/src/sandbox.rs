//! The [`Sandbox`]: starts the API server and the simulated controllers, applies manifests.

use crate::meta;
use crate::server::{self, App};
use crate::store::Store;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Errors returned by the public [`Sandbox`] API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving a socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A manifest could not be parsed.
    #[error("invalid YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A manifest was well-formed YAML but not a Kubernetes object.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// The simulated API server rejected a request.
    #[error("API error: {0}")]
    Api(#[from] crate::error::ApiError),
    /// The simulated nodes could not start.
    #[error("cannot start the simulated nodes: {0}")]
    Nodes(#[from] crate::nodes::NodesError),
    /// A client of the embedded API server could not be built.
    #[error("cannot build a client of the sandbox: {0}")]
    Client(String),
}

/// Field manager used by [`Sandbox::apply_yaml`].
pub const APPLY_MANAGER: &str = "habitat-sandbox";

/// Sandbox options.
#[derive(Debug, Clone)]
pub struct Options {
    /// API server listen address; port 0 picks a free port. Default 127.0.0.1:0.
    pub addr: SocketAddr,
    /// Serve `/census` on pod IPs (default true).
    pub simulate_supervisors: bool,
    /// Kubelet delay before a pod goes Running+Ready (default 300 ms).
    pub pod_ready_delay: Duration,
    /// Injected faults (default none; the simulated nodes are always exempt).
    pub faults: crate::faults::Faults,
    /// Run real Habitat supervisors in the pods instead of simulated ones (default none).
    pub real_supervisors: Option<crate::nodes::habitat::Config>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            simulate_supervisors: true,
            pod_ready_delay: Duration::from_millis(300),
            faults: crate::faults::Faults::default(),
            real_supervisors: None,
        }
    }
}

/// A client of the embedded API server at `addr` (plain HTTP on loopback, no credentials),
/// with the User-Agent `habitat-sandbox/<version> (nodes)` that injected faults spare.
fn local_client(addr: SocketAddr) -> Result<kube::Client, Error> {
    let url = format!("http://{addr}")
        .parse()
        .map_err(|e| Error::Client(format!("bad URL: {e}")))?;
    let mut config = kube::Config::new(url);
    let agent = format!(
        "{}/{} (nodes)",
        crate::faults::SANDBOX_USER_AGENT,
        env!("CARGO_PKG_VERSION")
    );
    if let Ok(value) = axum::http::HeaderValue::from_str(&agent) {
        config.headers.push((axum::http::header::USER_AGENT, value));
    }
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}

/// A running simulated cluster.
pub struct Sandbox {
    addr: SocketAddr,
    store: Arc<Store>,
    tasks: Vec<JoinHandle<()>>,
    sim: crate::sim::Simulation,
    nodes: crate::nodes::Nodes,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("addr", &self.addr).finish()
    }
}

impl Sandbox {
    /// Start the API server and the simulated controllers.
    pub async fn start(opts: Options) -> Result<Sandbox, Error> {
        if !opts.addr.ip().is_loopback() {
            return Err(Error::Manifest(format!(
                "the sandbox binds only loopback addresses, not {}",
                opts.addr
            )));
        }
        let listener = tokio::net::TcpListener::bind(opts.addr).await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store::default());
        store.lock().sweep();
        let app = App {
            store: store.clone(),
            addr,
            faults: Arc::new(crate::faults::Injector::new(opts.faults.clone())),
            requests: Arc::default(),
        };
        let router = server::router(app);
        let mut tasks = vec![tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!("sandbox API server stopped: {e}");
            }
        })];
        let sweep_store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                sweep_store.lock().sweep();
            }
        }));
        let sim = crate::sim::Simulation::start(store.clone());
        let client = local_client(addr)?;
        let nodes = crate::nodes::Nodes::start_with(
            client,
            crate::nodes::Options {
                simulate_supervisors: opts.simulate_supervisors,
                pod_ready_delay: opts.pod_ready_delay,
                namespace: None,
                ..Default::default()
            },
            opts.real_supervisors.clone(),
        )
        .await?;
        Ok(Sandbox {
            addr,
            store,
            tasks,
            sim,
            nodes,
        })
    }

    /// The API server URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shared store (for in-process inspection).
    pub fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// A kubeconfig for this sandbox (cluster, user and context `sandbox`, namespace default).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sandbox\n  cluster:\n    server: {}\nusers:\n- name: sandbox\n  user: {{}}\ncontexts:\n- name: sandbox\n  context:\n    cluster: sandbox\n    user: sandbox\n    namespace: default\ncurrent-context: sandbox\npreferences: {{}}\n",
            self.url()
        )
    }

    /// Create or update every document of a (multi-document) YAML manifest, in order, with
    /// server-side apply. Returns `kind/namespace/name` for each object.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let v: Value = serde::Deserialize::deserialize(doc)?;
            if v.is_null() {
                continue;
            }
            let docs = if v["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
                v["items"].as_array().cloned().unwrap_or_default()
            } else {
                vec![v]
            };
            for obj in docs {
                out.push(self.apply_one(obj)?);
            }
        }
        Ok(out)
    }

    fn apply_one(&self, obj: Value) -> Result<String, Error> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = meta::name(&obj).to_string();
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            return Err(Error::Manifest(format!(
                "every document needs apiVersion, kind and metadata.name: {obj}"
            )));
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let mut inner = self.store.lock();
        let rt = inner
            .registry
            .find_kind(group, version, kind)
            .cloned()
            .ok_or_else(|| Error::Manifest(format!("no resource for {api_version} {kind}")))?;
        let ns = if rt.namespaced {
            let n = meta::namespace(&obj);
            Some(if n.is_empty() {
                "default".to_string()
            } else {
                n.to_string()
            })
        } else {
            None
        };
        inner.patch(
            &rt,
            ns.as_deref(),
            &name,
            crate::patch::PatchType::Apply,
            &obj,
            false,
            crate::store::Manager::forced(APPLY_MANAGER),
        )?;
        Ok(format!("{kind}/{}/{name}", ns.unwrap_or_default()))
    }

    /// Crash a pod's container: every process of it dies at once (its supervisor does not
    /// depart and stays `confirmed` in the others' census), then the kubelet starts the
    /// container again in the same pod, from a fresh filesystem, as a real one does
    /// ([`crate::nodes::CRASH_ANNOTATION`]).
    pub async fn kill_pod(&self, namespace: &str, name: &str) -> Result<(), Error> {
        let mut inner = self.store.lock();
        let rt = inner
            .resource("", "v1", "pods")
            .ok_or_else(|| Error::Manifest("pods are not served".into()))?;
        let mut pod = inner.get(&rt, Some(namespace), name)?;
        pod["metadata"]["annotations"][crate::nodes::CRASH_ANNOTATION] =
            serde_json::json!(meta::hex32());
        inner.update(&rt, Some(namespace), name, pod, false)?;
        Ok(())
    }

    /// Stop everything (API server, controllers, supervisors).
    pub async fn shutdown(self) {
        self.nodes.shutdown().await;
        self.sim.shutdown().await;
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
