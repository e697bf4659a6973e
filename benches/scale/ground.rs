//! The two grounds: the sandbox's embedded API server with its simulated nodes, and the test
//! harness's real control plane (etcd, kube-apiserver, kube-controller-manager from
//! `KUBEBUILDER_ASSETS`) with the simulated nodes as an API client. Each knows how to count what
//! a client (by User-Agent) asked of the server: the sandbox's own counter, the API server's
//! audit log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use habitat_operator::api::Habitat;
use habitat_sandbox::{nodes, Options, Sandbox};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, CustomResourceExt};

#[path = "../../tests/support/control_plane.rs"]
#[allow(dead_code)]
mod control_plane;

use control_plane::{ControlPlane, PrivateControlPlane};

/// Where the benchmark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sandbox,
    Real,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sandbox => "sandbox",
            Kind::Real => "real",
        }
    }
}

/// Requests of one client, by (verb, resource).
pub type Counts = BTreeMap<(String, String), u64>;

enum Server {
    Sandbox(Sandbox),
    Real {
        cp: PrivateControlPlane,
        _nodes: nodes::Nodes,
    },
}

/// A running ground: the server, the simulated nodes, and kubeconfigs for the operator.
pub struct Ground {
    pub kind: Kind,
    server: Server,
    _dir: tempfile::TempDir,
    /// The kubeconfig the operator process runs with.
    pub operator_kubeconfig: PathBuf,
    url: String,
    /// On the real ground: the kubeconfig of a user in `system:masters`.
    admin_kubeconfig: Option<PathBuf>,
}

/// A User-Agent header on `config`.
fn with_agent(mut config: Config, agent: &str) -> Config {
    if let Ok(v) = axum::http::HeaderValue::from_str(agent) {
        config.headers.push((axum::http::header::USER_AGENT, v));
    }
    config
}

async fn kubeconfig_client(path: &Path, agent: &str) -> Result<Client, String> {
    let kc = Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Client::try_from(with_agent(config, agent)).map_err(|e| e.to_string())
}

/// How [`Ground::settle`]'s wait ended, after how long.
pub enum Settled {
    /// kube-controller-manager was done with the namespace.
    Done(Duration),
    /// It was still busy with it when the wait's time was up.
    GaveUp(Duration),
}

impl Ground {
    /// Starts a fresh ground of `kind`.
    pub async fn start(kind: Kind) -> Result<Ground, String> {
        let dir = tempfile::Builder::new()
            .prefix("habitat-bench-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        match kind {
            Kind::Sandbox => {
                let sandbox = Sandbox::start(Options {
                    pod_ready_delay: Duration::ZERO,
                    ..Options::default()
                })
                .await
                .map_err(|e| format!("the sandbox did not start: {e}"))?;
                let kc = dir.path().join("kubeconfig");
                std::fs::write(&kc, sandbox.kubeconfig_yaml()).map_err(|e| e.to_string())?;
                let url = sandbox.url();
                let ground = Ground {
                    kind,
                    server: Server::Sandbox(sandbox),
                    _dir: dir,
                    operator_kubeconfig: kc,
                    url,
                    admin_kubeconfig: None,
                };
                ground.install_crd().await?;
                Ok(ground)
            }
            Kind::Real => {
                let cp = ControlPlane::start_private().ok_or(
                    "--ground real needs a control plane: set KUBEBUILDER_ASSETS to a directory \
                     holding etcd, kube-apiserver and kube-controller-manager (see README.md, \
                     A real control plane)",
                )?;
                let admin =
                    kubeconfig_client(cp.admin_kubeconfig(), "habitat-sandbox/bench (nodes)")
                        .await?;
                let nodes = nodes::Nodes::start(
                    admin,
                    nodes::Options {
                        simulate_supervisors: true,
                        pod_ready_delay: Duration::ZERO,
                        namespace: None,
                        gossip: nodes::supervisor::Gossip::FAST,
                    },
                )
                .await
                .map_err(|e| format!("the simulated nodes did not start: {e}"))?;
                let ground = Ground {
                    kind,
                    operator_kubeconfig: cp.operator_kubeconfig().to_path_buf(),
                    url: cp.url().to_string(),
                    admin_kubeconfig: Some(cp.admin_kubeconfig().to_path_buf()),
                    server: Server::Real { cp, _nodes: nodes },
                    _dir: dir,
                };
                ground.install_crd().await?;
                Ok(ground)
            }
        }
    }

    /// A client with full rights and the User-Agent `agent` (`habitat-bench/driver`, ...).
    pub async fn client(&self, agent: &str) -> Result<Client, String> {
        match &self.admin_kubeconfig {
            Some(path) => kubeconfig_client(path, agent).await,
            None => {
                let url = self.url.parse().map_err(|e| format!("{}: {e}", self.url))?;
                Client::try_from(with_agent(Config::new(url), agent)).map_err(|e| e.to_string())
            }
        }
    }

    /// The API server's log directory, for a failure message.
    pub fn where_(&self) -> String {
        match &self.server {
            Server::Sandbox(_) => format!("the sandbox at {}", self.url),
            Server::Real { cp, .. } => format!("the control plane in {}", cp.dir().display()),
        }
    }

    async fn install_crd(&self) -> Result<(), String> {
        let client = self.client("habitat-bench/driver").await?;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let crd = Habitat::crd();
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply("habitat-bench").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|e| format!("installing the CRD: {e}"))?;
        for _ in 0..300 {
            let established = api
                .get(&name)
                .await
                .ok()
                .and_then(|c| c.status)
                .is_some_and(|s| {
                    s.conditions
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                // The real server serves the new resource a moment after it is Established.
                tokio::time::sleep(Duration::from_millis(500)).await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("the Habitat CRD was not Established in 30 s".into())
    }

    /// Creates the namespace `name`.
    pub async fn create_namespace(&self, client: &Client, name: &str) -> Result<(), String> {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))
        .map_err(|e| e.to_string())?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| format!("creating namespace {name}: {e}"))?;
        Ok(())
    }

    /// Deletes the namespace `name` and waits until it is gone (at most `timeout`), so that the
    /// next run shares neither the simulated nodes nor kube-controller-manager with its objects.
    /// Waiting for its pods alone is not enough: until the namespace controller deletes its
    /// StatefulSets, kube-controller-manager's StatefulSet controller goes on recreating their
    /// pods, each create refused (403, the namespace is terminating) with a warning Event, and
    /// those requests come out of the same client-side rate limit (`--kube-api-qps`) as its work
    /// for the next run. At N = 1000 that was about 4,200 of its requests during the operator's
    /// run, 40 s of its budget. Returns what was left when it gave up, or None.
    pub async fn delete_namespace(
        &self,
        client: &Client,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<String>, String> {
        let namespaces = Api::<Namespace>::all(client.clone());
        namespaces
            .delete(name, &DeleteParams::background())
            .await
            .map_err(|e| format!("deleting namespace {name}: {e}"))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), name);
        let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), name);
        let began = std::time::Instant::now();
        loop {
            match namespaces.get_opt(name).await {
                Ok(None) => return Ok(None),
                Ok(Some(_)) | Err(_) if began.elapsed() > timeout => {
                    let count = |n: Result<usize, kube::Error>| {
                        n.map_or_else(|e| format!("? ({e})"), |n| n.to_string())
                    };
                    let lp = ListParams::default();
                    let p = pods.list_metadata(&lp).await.map(|l| l.items.len());
                    let s = statefulsets.list_metadata(&lp).await.map(|l| l.items.len());
                    return Ok(Some(format!(
                        "{} pods and {} StatefulSets",
                        count(p),
                        count(s)
                    )));
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Waits until kube-controller-manager is done with the deleted namespace `name` and its
    /// StatefulSet controller has its request budget back: until, in the last [`SETTLED`], it
    /// has sent fewer than [`SETTLED_REQUESTS`] requests about objects of that namespace or
    /// from its StatefulSet controller, Events aside (at most `timeout`).
    ///
    /// Its clients have a budget of 200 requests refilled at 100 a second (`--kube-api-qps`,
    /// `--kube-api-burst` in tests/support/control_plane.rs), and the StatefulSet controller,
    /// which creates every pod, runs at that limit at N = 100. While a namespace terminates,
    /// that controller goes on trying to create the pods of its StatefulSets (each refused) and
    /// empties its budget: a run that started at once had its pods created at about 90 a second
    /// for the whole run, one that started with a full budget at about 150. Two seconds with
    /// almost nothing sent fill the budget again. What
    /// stays after a namespace goes is a trickle of retries that find nothing, a few a second,
    /// and the Event recorder's retries of Events refused in a namespace that is gone: neither
    /// is waited for. Returns how long it waited and whether the controllers were done by then
    /// (not when `timeout` ended the wait), or None on the sandbox, whose controllers run in
    /// this process and have no budget.
    pub async fn settle(&self, name: &str, timeout: Duration) -> Result<Option<Settled>, String> {
        let Server::Real { cp, .. } = &self.server else {
            return Ok(None);
        };
        let path = cp.audit_log();
        let began = std::time::Instant::now();
        let mut offset = std::fs::metadata(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        let namespace = format!("\"namespace\":\"{name}\"");
        // The requests seen at each look, newest last.
        let mut seen: std::collections::VecDeque<(std::time::Instant, usize)> = Default::default();
        loop {
            let (p, ns) = (path.clone(), namespace.clone());
            let (next, count) =
                tokio::task::spawn_blocking(move || controllers_requests(&p, offset, &ns))
                    .await
                    .map_err(|e| e.to_string())??;
            offset = next;
            let now = std::time::Instant::now();
            seen.push_back((now, count));
            while seen.front().is_some_and(|(at, _)| now - *at > SETTLED) {
                seen.pop_front();
            }
            let recent: usize = seen.iter().map(|(_, n)| n).sum();
            let watched = now - began >= SETTLED;
            if watched && recent < SETTLED_REQUESTS {
                return Ok(Some(Settled::Done(now - began)));
            }
            if now - began >= timeout {
                return Ok(Some(Settled::GaveUp(now - began)));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What the clients whose User-Agent contains `agent` asked so far, by (verb, resource).
    pub async fn requests(&self, agent: &str) -> Result<Counts, String> {
        match &self.server {
            Server::Sandbox(_) => {
                let url = format!("{}/debug/requests", self.url);
                let body = tokio::task::spawn_blocking(move || {
                    ureq::get(&url)
                        .call()
                        .map_err(|e| e.to_string())
                        .and_then(|mut r| r.body_mut().read_to_string().map_err(|e| e.to_string()))
                })
                .await
                .map_err(|e| e.to_string())??;
                let v: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| format!("/debug/requests: {e}"))?;
                let mut counts = Counts::new();
                for row in v["requests"].as_array().into_iter().flatten() {
                    if row["userAgent"].as_str().is_some_and(|a| a.contains(agent)) {
                        let key = (
                            row["verb"].as_str().unwrap_or_default().to_string(),
                            row["resource"].as_str().unwrap_or_default().to_string(),
                        );
                        *counts.entry(key).or_default() += row["count"].as_u64().unwrap_or(0);
                    }
                }
                Ok(counts)
            }
            Server::Real { cp, .. } => {
                let path = cp.audit_log();
                let agent = agent.to_string();
                tokio::task::spawn_blocking(move || audit_counts(&path, &agent))
                    .await
                    .map_err(|e| e.to_string())?
            }
        }
    }

    pub async fn shutdown(self) {
        match self.server {
            Server::Sandbox(s) => s.shutdown().await,
            Server::Real { cp, _nodes } => {
                _nodes.shutdown().await;
                // HABITAT_BENCH_KEEP_AUDIT=DIR keeps each run's audit log, for a closer look.
                if let Some(dir) = std::env::var_os("HABITAT_BENCH_KEEP_AUDIT") {
                    let to = Path::new(&dir).join(format!(
                        "audit-{}.log",
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs())
                    ));
                    let _ = std::fs::create_dir_all(&dir);
                    match std::fs::copy(cp.audit_log(), &to) {
                        Ok(_) => eprintln!("audit log kept: {}", to.display()),
                        Err(e) => eprintln!("audit log not kept: {e}"),
                    }
                }
                drop(cp);
            }
        }
    }
}

/// The window over which [`Ground::settle`] counts kube-controller-manager's requests about a
/// deleted namespace and its StatefulSet controller's, and how many they may be once it is done.
pub const SETTLED: Duration = Duration::from_secs(2);
/// See [`SETTLED`].
pub const SETTLED_REQUESTS: usize = 20;
/// How kube-controller-manager's StatefulSet controller ends its User-Agent.
const STATEFULSET_CONTROLLER: &str = "/statefulset-controller\"";

/// The requests of kube-controller-manager about objects of the namespace that `namespace`
/// matches (`"namespace":"NAME"`) or from its StatefulSet controller, other than Events, in the
/// audit log's complete lines from byte `offset` on (each counted at its `RequestReceived`
/// stage); and the offset after the last complete line.
fn controllers_requests(path: &Path, offset: u64, namespace: &str) -> Result<(u64, usize), String> {
    use std::io::{BufRead, Seek};
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.seek(std::io::SeekFrom::Start(offset))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let (mut at, mut count) = (offset, 0);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // The end, or a line the server is still writing: read it whole next time.
        if n == 0 || !line.ends_with('\n') {
            return Ok((at, count));
        }
        at += n as u64;
        if !(line.contains(namespace) || line.contains(STATEFULSET_CONTROLLER))
            || !line.contains("kube-controller-manager")
            || !line.contains("\"RequestReceived\"")
        {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let agent = v["userAgent"].as_str().unwrap_or_default();
        if v["stage"] == "RequestReceived"
            && agent.starts_with("kube-controller-manager")
            && v["objectRef"]["resource"] != "events"
        {
            count += 1;
        }
    }
}

/// Requests in the audit log (level Metadata: one event per stage) of clients whose User-Agent
/// contains `agent`, each counted once, at its `RequestReceived` stage.
fn audit_counts(path: &Path, agent: &str) -> Result<Counts, String> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut counts = Counts::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if !line.contains(agent) || !line.contains("\"RequestReceived\"") {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["stage"] != "RequestReceived"
            || !v["userAgent"].as_str().is_some_and(|a| a.contains(agent))
        {
            continue;
        }
        let object = &v["objectRef"];
        let resource = match (object["resource"].as_str(), object["subresource"].as_str()) {
            (Some(r), Some(s)) => format!("{r}/{s}"),
            (Some(r), None) => r.to_string(),
            // Non-resource URLs (/version, discovery): the sandbox does not count them either.
            _ => continue,
        };
        let verb = v["verb"].as_str().unwrap_or_default().to_string();
        *counts.entry((verb, resource)).or_default() += 1;
    }
    Ok(counts)
}
