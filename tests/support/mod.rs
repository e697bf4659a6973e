//! The end-to-end harness: a cluster on one of two grounds, a temporary namespace per test, the
//! operator binary as its own process, and `kubectl` to apply manifests. Objects are created from
//! YAML, never API calls.
//!
//! The grounds: [`Ground::Sandbox`] starts a sandbox process per test; [`Ground::Real`] uses the
//! real control plane of this test binary ([`control_plane::ControlPlane`], from
//! `KUBEBUILDER_ASSETS`) with the simulated nodes (`habitat-operator sandbox --kubeconfig`) for
//! the test's namespace, or the cluster in `HABITAT_E2E_KUBECONFIG` as it is. Write a scenario as
//! `async fn name(ground: Ground)` and list it in [`on_both_grounds!`].
#![allow(dead_code, unused_macros)]

/// For each `async fn NAME(ground: Ground)`, a module `NAME` with the tests `sandbox` and `real`.
macro_rules! on_both_grounds {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sandbox() {
                    super::$name(super::support::Ground::Sandbox).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn real() {
                    super::$name(super::support::Ground::Real).await
                }
            }
        )*
    };
}

/// `Env::start_with(ground, test, operator)`, or return from the test when the ground is not
/// available here (the real control plane without `KUBEBUILDER_ASSETS`).
macro_rules! env_on {
    ($ground:expr, $test:expr) => {
        env_on!($ground, $test, true)
    };
    ($ground:expr, $test:expr, $operator:expr) => {
        match support::Env::start_with($ground, $test, $operator).await {
            Some(env) => env,
            None => return,
        }
    };
}

/// Returns early from a test when kubectl is missing, unless `HABITAT_REQUIRE_KUBECTL` is set.
macro_rules! require_kubectl {
    () => {
        if !support::have_kubectl() {
            assert!(
                std::env::var_os("HABITAT_REQUIRE_KUBECTL").is_none(),
                "kubectl is required but not installed"
            );
            eprintln!("skipped: kubectl is not installed");
            return;
        }
    };
}

pub mod control_plane;
pub mod prometheus;
pub mod supervisors;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use habitat_operator::api::Habitat;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};

/// A child process killed when dropped, even when the test panics.
pub struct Proc(pub Child, pub &'static str);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A free loopback port, never one this test process handed out before
/// ([`control_plane::free_port`]).
pub fn free_port() -> u16 {
    control_plane::free_port().expect("a free loopback port")
}

/// The examples that go into a test's namespace: all but `namespaced`, which names its own.
pub const NAMESPACE_EXAMPLES: [&str; 10] = [
    "standalone",
    "leader",
    "bind",
    "config",
    "bind-config",
    "encrypted",
    "generated-ring",
    "persisted",
    "files",
    "env-vars",
];

/// Where a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ground {
    /// A sandbox process of its own: simulated API server, controllers and nodes.
    Sandbox,
    /// A real API server: the test binary's control plane with simulated nodes, or the cluster
    /// in `HABITAT_E2E_KUBECONFIG`.
    Real,
}

/// The real control plane's CRD, installed once per test binary.
fn install_crd_once(kubeconfig: &Path) {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| install_crd(kubeconfig));
}

/// Installs the CRD on the control plane of `kubeconfig` and waits until it is established.
fn install_crd(kubeconfig: &Path) {
    {
        let crd = root().join("crds/habitat.yaml");
        for args in [
            vec!["apply", "-f", crd.to_str().unwrap_or_default()],
            vec![
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/habitats.habitat.sh",
            ],
        ] {
            kubectl_at_ok(kubeconfig, &args);
        }
    }
}

/// One test's world.
pub struct Env {
    /// The kubeconfig of the test driver (kubectl and assertions).
    pub kubeconfig: PathBuf,
    /// The kubeconfig the operator runs with (on the real control plane, the ServiceAccount of
    /// `deploy/`, bound only by its RBAC; its leader-election Role is also granted in the test
    /// namespace, where the tests' Leases are).
    pub operator_kubeconfig: PathBuf,
    /// The ground.
    pub ground: Ground,
    /// The test's namespace.
    pub namespace: String,
    /// A client for assertions.
    pub client: Client,
    /// The operator's metrics address.
    pub metrics: String,
    /// With real supervisors in the pods: their containers ([`supervisors::States`]).
    pub supervisors: Option<supervisors::States>,
    // Stopped before the rest (and before `_dir` goes): SIGTERM lets the nodes stop the
    // supervisors.
    _graceful: Option<supervisors::Graceful>,
    _dir: tempfile::TempDir,
    _sandbox: Option<Proc>,
    _nodes: Option<Proc>,
    _operator: Option<Proc>,
    real: bool,
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_habitat-operator")
}

/// Whether `kubectl` is on the PATH.
pub fn have_kubectl() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Env {
    /// Starts a cluster on `ground`, a namespace named after `test`, and the operator watching
    /// that namespace. None when the ground is not available here.
    pub async fn start(ground: Ground, test: &str) -> Option<Env> {
        Self::start_with(ground, test, true).await
    }

    /// Like [`Env::start`], optionally without the operator.
    pub async fn start_with(ground: Ground, test: &str, operator: bool) -> Option<Env> {
        Self::start_in(ground, test, operator, None, &[]).await
    }

    /// Like [`Env::start_with`], with extra flags for the sandbox process (ignored on the real
    /// ground), e.g. `["--faults", "server-errors=0.2"]`.
    pub async fn start_full(
        ground: Ground,
        test: &str,
        operator: bool,
        sandbox_flags: &[&str],
    ) -> Option<Env> {
        Self::start_in(ground, test, operator, None, sandbox_flags).await
    }

    /// Like [`Env::start_with`] on the real ground, on the control plane `cp` (a private one,
    /// [`control_plane::ControlPlane::start_private`]) instead of the test binary's shared one.
    pub async fn start_on(cp: &control_plane::ControlPlane, test: &str, operator: bool) -> Env {
        Self::start_in(Ground::Real, test, operator, Some(cp), &[])
            .await
            .expect("a given control plane is always available")
    }

    /// Like [`Env::start_with`], with the real Habitat supervisor in each Habitat pod
    /// (`sandbox --supervisors real`): on the real control plane with the simulated nodes, or
    /// in a sandbox process. None (skipped) without `HABITAT_SUPERVISOR_BIN` or, on the real
    /// ground, without the control plane.
    pub async fn start_real_supervisors(ground: Ground, test: &str, operator: bool) -> Option<Env> {
        supervisors::bin()?;
        let flags = ["--supervisors", "real"];
        Self::start_in(ground, test, operator, None, &flags).await
    }

    async fn start_in(
        ground: Ground,
        test: &str,
        operator: bool,
        private: Option<&control_plane::ControlPlane>,
        sandbox_flags: &[&str],
    ) -> Option<Env> {
        let dir = tempfile::tempdir().expect("temp dir");
        let real_supervisors = sandbox_flags
            .windows(2)
            .any(|w| w == ["--supervisors", "real"]);
        let state_dir = dir.path().join("supervisors");
        let mut sandbox_flags: Vec<String> = sandbox_flags.iter().map(|f| f.to_string()).collect();
        if real_supervisors {
            sandbox_flags.extend([
                "--supervisor-state-dir".to_string(),
                state_dir.display().to_string(),
            ]);
        }
        let suffix: u32 = rand::random::<u32>() % 100_000;
        let namespace = format!("e2e-{}-{suffix}", test.replace('_', "-"))
            .chars()
            .take(60)
            .collect::<String>();
        let external = std::env::var_os("HABITAT_E2E_KUBECONFIG").map(PathBuf::from);
        let mut graceful = None;
        let (kubeconfig, operator_kubeconfig, sandbox, real) = match (ground, external) {
            (Ground::Real, _) if private.is_some() => {
                let cp = private.expect("checked");
                install_crd(cp.admin_kubeconfig());
                (
                    cp.admin_kubeconfig().to_path_buf(),
                    cp.operator_kubeconfig().to_path_buf(),
                    None,
                    true,
                )
            }
            (Ground::Real, Some(k)) => (k.clone(), k, None, true),
            (Ground::Real, None) => {
                let Some(cp) = control_plane::ControlPlane::shared() else {
                    eprintln!("skipped on the real ground: KUBEBUILDER_ASSETS is not set");
                    return None;
                };
                install_crd_once(cp.admin_kubeconfig());
                (
                    cp.admin_kubeconfig().to_path_buf(),
                    cp.operator_kubeconfig().to_path_buf(),
                    None,
                    true,
                )
            }
            (Ground::Sandbox, _) => {
                let kc = dir.path().join("kubeconfig");
                let log = std::fs::File::create(dir.path().join("sandbox.log")).expect("log file");
                let mut cmd = Command::new(bin());
                cmd.args([
                    "sandbox",
                    "--no-operator",
                    "--log-level",
                    "warn",
                    "--kubeconfig-out",
                ])
                .arg(&kc)
                .args(&sandbox_flags)
                .arg(root().join("crds/habitat.yaml"))
                .stdout(Stdio::null())
                .stderr(log);
                if real_supervisors {
                    // The supervisors' temporary root goes with the test's directory, even
                    // after a SIGKILL of the sandbox.
                    cmd.env("TMPDIR", dir.path());
                }
                let child = cmd.spawn().expect("start the sandbox");
                let proc = if real_supervisors {
                    graceful = Some(supervisors::Graceful(child, Duration::from_secs(15)));
                    None
                } else {
                    Some(Proc(child, "sandbox"))
                };
                wait_for(
                    Duration::from_secs(30),
                    "the sandbox kubeconfig",
                    || async { kc.is_file() },
                )
                .await;
                (kc.clone(), kc, proc, false)
            }
        };
        let client = client_for(&kubeconfig).await;
        let mut env = Env {
            kubeconfig,
            operator_kubeconfig,
            ground,
            namespace: namespace.clone(),
            client,
            metrics: String::new(),
            supervisors: real_supervisors.then(|| supervisors::States {
                dir: state_dir.clone(),
                namespace: namespace.clone(),
            }),
            _graceful: graceful,
            _dir: dir,
            _sandbox: sandbox,
            _nodes: None,
            _operator: None,
            real,
        };
        if !env.real {
            env.kubectl_ok(&[
                "apply",
                "-f",
                root()
                    .join("crds/habitat.yaml")
                    .to_str()
                    .unwrap_or_default(),
            ]);
        }
        env.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"
        ));
        if ground == Ground::Real
            && (private.is_some() || std::env::var_os("HABITAT_E2E_KUBECONFIG").is_none())
        {
            env.apply_yaml(
                &control_plane::leader_election_rbac_in(&namespace)
                    .expect("the leader-election RBAC of deploy/base"),
            );
            if real_supervisors {
                env.start_real_nodes(&sandbox_flags);
            } else {
                env.start_nodes();
            }
        }
        if operator {
            env.start_operator();
        }
        Some(env)
    }

    /// Starts the simulated nodes for the test namespace on the real control plane.
    fn start_nodes(&mut self) {
        let log = std::fs::File::create(self._dir.path().join("nodes.log")).expect("log file");
        let child = Command::new(bin())
            .args(["sandbox", "--log-level", "warn", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(["--namespace", &self.namespace])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the simulated nodes");
        self._nodes = Some(Proc(child, "nodes"));
    }

    /// Starts the simulated nodes with real supervisors (`flags`) for the test namespace on
    /// the real control plane.
    fn start_real_nodes(&mut self, flags: &[String]) {
        let log = std::fs::File::create(self._dir.path().join("nodes.log")).expect("log file");
        let child = Command::new(bin())
            .args(["sandbox", "--log-level", "info", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(["--namespace", &self.namespace])
            .args(flags)
            // The supervisors' temporary root goes with the test's directory, even after a
            // SIGKILL of the nodes.
            .env("TMPDIR", self._dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the simulated nodes");
        self._graceful = Some(supervisors::Graceful(child, Duration::from_secs(15)));
    }

    /// The nodes' log so far (with real supervisors, their containers' starts and exits).
    pub fn nodes_log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("nodes.log")).unwrap_or_default()
    }

    /// Stops the nodes (or the sandbox) that run real supervisors, as the end of a test does:
    /// SIGTERM, then SIGKILL after a grace period.
    pub fn stop_real_supervisors(&mut self) {
        self._graceful = None;
    }

    /// Starts the operator binary watching the test namespace (its log appends to
    /// `operator.log`).
    pub fn start_operator(&mut self) {
        let (proc, addr) = self.extra_operator(&["--log-level", "info"]);
        self.metrics = addr;
        self._operator = Some(proc);
    }

    /// Starts another operator process with extra flags; returns it and its metrics address.
    pub fn extra_operator(&self, extra: &[&str]) -> (Proc, String) {
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self._dir.path().join("operator.log"))
            .expect("log file");
        let child = Command::new(bin())
            .args([
                "run",
                "--namespace",
                &self.namespace,
                "--metrics-addr",
                &addr,
                "--kubeconfig",
            ])
            .arg(&self.operator_kubeconfig)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start an operator");
        (Proc(child, "operator"), addr)
    }

    /// The process id of the operator started by [`Env::start_operator`].
    pub fn operator_pid(&self) -> Option<u32> {
        self._operator.as_ref().map(|p| p.0.id())
    }

    /// Stops the operator process.
    pub fn stop_operator(&mut self) {
        self._operator = None;
    }

    /// The operator's log so far.
    pub fn operator_log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("operator.log")).unwrap_or_default()
    }

    /// Runs kubectl in the test namespace and returns (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let namespaced: Vec<&str> = ["-n", self.namespace.as_str()]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        kubectl_at(&self.kubeconfig, &namespaced)
    }

    /// Runs kubectl and panics with its output when it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed: {out}{err}");
        out
    }

    /// `kubectl apply -f examples/<name>/habitat.yml` in the test namespace.
    pub fn apply_example(&self, name: &str) {
        let path = root().join("examples").join(name).join("habitat.yml");
        self.kubectl_ok(&["apply", "-f", path.to_str().unwrap_or_default()]);
    }

    /// `kubectl patch habitat NAME --type merge -p PATCH`.
    pub fn patch(&self, name: &str, patch: &str) {
        self.kubectl_ok(&["patch", "habitat", name, "--type", "merge", "-p", patch]);
    }

    /// Applies YAML text (written to the test's temporary directory) and panics when
    /// kubectl fails.
    pub fn apply_yaml(&self, yaml: &str) {
        let (ok, out, err) = self.try_apply_yaml(yaml);
        assert!(ok, "kubectl apply failed: {out}{err}\n{yaml}");
    }

    /// Applies YAML text; returns kubectl's (success, stdout, stderr).
    pub fn try_apply_yaml(&self, yaml: &str) -> (bool, String, String) {
        let path = self
            ._dir
            .path()
            .join(format!("m-{}.yaml", rand::random::<u32>()));
        std::fs::write(&path, yaml).expect("write manifest");
        self.kubectl(&["apply", "-f", path.to_str().unwrap_or_default()])
    }

    /// The Habitats API of the namespace.
    pub fn habitats(&self) -> Api<Habitat> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Any namespaced API of the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Waits until `name` is in `phase` and its generation is observed; returns it.
    pub async fn wait_phase(&self, name: &str, phase: &str, timeout: Duration) -> Habitat {
        let api = self.habitats();
        let start = Instant::now();
        loop {
            if let Ok(Some(h)) = api.get_opt(name).await {
                let observed =
                    h.status.as_ref().and_then(|s| s.observed_generation) == h.metadata.generation;
                if h.phase_str() == Some(phase) && observed {
                    return h;
                }
                if start.elapsed() > timeout {
                    let pods: Vec<String> = self
                        .pods(name)
                        .await
                        .iter()
                        .map(|p| {
                            let st = p.status.clone().unwrap_or_default();
                            format!(
                                "{} ip={:?} phase={:?} deleting={} labels={:?}",
                                p.name_any(),
                                st.pod_ip,
                                st.phase,
                                p.metadata.deletion_timestamp.is_some(),
                                p.labels()
                            )
                        })
                        .collect();
                    panic!(
                        "{name} did not reach {phase} in {timeout:?}; status: {}\npods:\n{}\noperator log tail:\n{}",
                        serde_json::to_string_pretty(&h.status).unwrap_or_default(),
                        pods.join("\n"),
                        tail(&self.operator_log(), 40)
                    );
                }
            } else if start.elapsed() > timeout {
                panic!("{name} does not exist after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The Habitat's pods, by name.
    pub async fn pods(&self, habitat: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("habitat.sh/name={habitat}"));
        let mut pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        pods.sort_by_key(|p| p.name_any());
        pods
    }

    /// The Events of the test's namespace (none when the list fails).
    pub async fn events(&self) -> Vec<Event> {
        self.api::<Event>()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Whether `habitat` has exactly `count` pods, none of them terminating, all running `image`.
    pub async fn all_pods_at_image(&self, habitat: &str, count: usize, image: &str) -> bool {
        let pods = self.pods(habitat).await;
        pods.len() == count
            && pods.iter().all(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.as_deref())
                        == Some(image)
            })
    }

    /// The address in the Habitat's peer file.
    pub async fn peer_ip(&self, habitat: &str) -> String {
        let cm = self
            .api::<ConfigMap>()
            .get(&format!("{habitat}-peer"))
            .await
            .expect("peer ConfigMap");
        cm.data
            .and_then(|d| d.get("peer-ip").cloned())
            .unwrap_or_default()
    }

    /// The operator's metrics text.
    pub fn metrics(&self) -> String {
        ureq::get(&format!("http://{}/metrics", self.metrics))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default()
    }

    /// Whether this runs against a real cluster.
    pub fn is_real(&self) -> bool {
        self.real
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.real {
            let _ = self.kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
        }
    }
}

/// `kubectl --kubeconfig KUBECONFIG ARGS` (no namespace): (success, stdout, stderr).
pub fn kubectl_at(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`kubectl_at`], panicking with kubectl's output when it fails; returns stdout.
pub fn kubectl_at_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (ok, out, err) = kubectl_at(kubeconfig, args);
    assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
    out
}

/// A client for the kubeconfig at `path`.
pub async fn client_for(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path).expect("kubeconfig readable");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig valid");
    Client::try_from(config).expect("client")
}

/// Polls `check` every 100 ms until it is true; panics naming `what` after `timeout`.
pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Generous timeouts on a real cluster, short ones in the sandbox.
pub fn timeout(env: &Env) -> Duration {
    if env.is_real() {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(30)
    }
}

impl Proc {
    /// Starts `cmd` as `name`, stdin closed, stdout and stderr into the file `log`.
    pub fn spawn_logged(name: &'static str, cmd: &mut Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc(child, name)
    }

    /// Panics when the process has exited, saying that it did while `context`, with the last
    /// lines of `log`.
    pub fn assert_running(&mut self, context: &str, log: &Path) {
        if let Ok(Some(status)) = self.0.try_wait() {
            panic!(
                "{} exited with {status} while {context}; its output:\n{}",
                self.1,
                tail(&std::fs::read_to_string(log).unwrap_or_default(), 40)
            );
        }
    }
}

impl Env {
    /// The test's temporary directory (removed with the Env): room for files of its own.
    pub fn temp_dir(&self) -> &Path {
        self._dir.path()
    }

    /// Panics when a process of this Env (sandbox, simulated nodes, operator) has exited,
    /// saying that it did while `context`, with the last lines of its log.
    pub fn assert_processes_running(&mut self, context: &str) {
        let dir = self._dir.path().to_path_buf();
        for (proc, log) in [
            (&mut self._sandbox, "sandbox.log"),
            (&mut self._nodes, "nodes.log"),
            (&mut self._operator, "operator.log"),
        ] {
            if let Some(p) = proc {
                p.assert_running(context, &dir.join(log));
            }
        }
    }
}
