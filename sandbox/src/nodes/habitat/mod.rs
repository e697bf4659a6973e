//! Real Habitat supervisors in the simulated nodes' pods: the kubelet runs each Habitat pod's
//! `habitat-service` container as `hab sup run PACKAGE ARGS` (what an image made by
//! `hab pkg export container` runs), with the binaries of [`ENV_BIN`].
//!
//! Flow: a thread of its own ([`Supervisors::start`]) looks at the nodes' pods every
//! [`STEP`]. A pod that the kubelet started (Running, with its IP) gets a container: a fresh
//! `FS_ROOT` under the nodes' temporary root (one per container incarnation, so a restart has
//! a fresh filesystem), the package its image stands for ([`package`]), its volumes
//! ([`volumes`]), its environment, and the supervisor on the pod's loopback IP. The thread then
//! keeps the projected volumes in step with their objects, runs the readiness probe against
//! the supervisor's gateway at its period, and restarts a container whose launcher exited with
//! a short back-off (restartPolicy Always), counting restarts. A pod being deleted gets SIGTERM
//! to its launcher (the supervisor departs and stops its service), SIGKILL to its whole session
//! after the grace period; the kubelet deletes it once nothing of it runs
//! ([`Supervisors::stopped`]).
//!
//! Guarantees: no process outlives the nodes. [`Supervisors::shutdown`] stops every container
//! as a deletion would and removes the temporary root; each launcher also has SIGTERM as its
//! parent-death signal (the thread that spawned it), for a nodes process killed outright.
//! With a state directory ([`Config::state_dir`]) each running container is described in
//! `STATE/NAMESPACE/POD.json` (its session, `FS_ROOT`, IP, service, incarnation and restarts),
//! for tests in another process to crash it, kill `hab-sup` or turn it unhealthy.
//!
//! Caveats: the pod IPs are loopback addresses of the nodes' machine, so the supervisors'
//! gossip is real but nothing isolates one pod from another (ports, processes). Only the
//! `habitat-service` container runs; init containers are taken as completed. The supervisors
//! never reach Builder (`HAB_BLDR_URL` is a closed local port): packages exist only as made here.

pub mod package;
pub mod process;
pub mod volumes;

use super::kubelet::NODE_NAME;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::runtime::reflector::Store;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The environment variable naming the directory of `hab`, `hab-launch` and `hab-sup` (as
/// `KUBEBUILDER_ASSETS` names the control plane's).
pub const ENV_BIN: &str = "HABITAT_SUPERVISOR_BIN";
/// The binaries [`ENV_BIN`] must hold.
pub const BINARIES: [&str; 3] = ["hab", "hab-launch", "hab-sup"];
/// The container that runs the supervisor.
pub const CONTAINER: &str = "habitat-service";
/// How often the supervisors' thread looks at the pods.
pub const STEP: Duration = Duration::from_millis(200);
/// The first wait before a crashed container starts again, doubled per crash up to
/// [`BACKOFF_CAP`] (a kubelet's CrashLoopBackOff, kept short for tests).
pub const BACKOFF_START: Duration = Duration::from_secs(1);
/// The longest wait before a crashed container starts again.
pub const BACKOFF_CAP: Duration = Duration::from_secs(8);

/// How long a container that crashed `crashes` times before waits to start again: the
/// kubelet's CrashLoopBackOff doubling, from [`BACKOFF_START`] up to [`BACKOFF_CAP`]. The
/// simulated supervisors' containers wait as long.
pub fn restart_backoff(crashes: u32) -> Duration {
    BACKOFF_START
        .saturating_mul(1 << crashes.min(8))
        .min(BACKOFF_CAP)
}
/// How long a pod being deleted has to stop when it names no grace period.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// How long the nodes' shutdown waits for the supervisors to depart before SIGKILL.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);
/// How long one readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the real supervisors come from and where their state is told.
#[derive(Debug, Clone)]
pub struct Config {
    /// The directory holding `hab`, `hab-launch` and `hab-sup`.
    pub bin: PathBuf,
    /// Where to describe each running container for tests (`NAMESPACE/POD.json`).
    pub state_dir: Option<PathBuf>,
}

/// Why the real supervisors cannot run.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// [`ENV_BIN`] is not set.
    #[error(
        "real supervisors need {ENV_BIN}: the directory holding hab, hab-launch and hab-sup \
         (habitat 2.1.78; .ci/run unpacks them from ../shared/habitat, see README.md)"
    )]
    NoBinDir,
    /// A binary is missing.
    #[error("{0} is missing or not executable: {ENV_BIN} must hold hab, hab-launch and hab-sup")]
    Missing(PathBuf),
    /// The temporary root could not be made.
    #[error("cannot make the supervisors' directory {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Config {
    /// The binaries of [`ENV_BIN`], checked.
    pub fn from_env(state_dir: Option<PathBuf>) -> Result<Config, RealError> {
        let bin = std::env::var_os(ENV_BIN)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .ok_or(RealError::NoBinDir)?;
        let cfg = Config { bin, state_dir };
        cfg.check()?;
        Ok(cfg)
    }

    /// Checks that every binary is there and executable.
    pub fn check(&self) -> Result<(), RealError> {
        use std::os::unix::fs::PermissionsExt;
        for b in BINARIES {
            let p = self.bin.join(b);
            let ok = std::fs::metadata(&p)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !ok {
                return Err(RealError::Missing(p));
            }
        }
        Ok(())
    }
}

/// What the kubelet reads of a pod's container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Its last readiness probe succeeded.
    pub ready: bool,
    /// How many times it was restarted.
    pub restarts: i32,
    /// Some process of it runs.
    pub running: bool,
    /// The exit code of its last incarnation (128 + signal when killed).
    pub last_exit: Option<i32>,
}

#[derive(Debug, Default)]
struct Views {
    by_uid: HashMap<String, View>,
    moved: Vec<String>,
}

/// The real supervisors of the nodes' pods.
pub struct Supervisors {
    views: Arc<Mutex<Views>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Supervisors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisors").finish_non_exhaustive()
    }
}

/// The stores the supervisors read.
pub struct Watched {
    /// The nodes' pods.
    pub pods: Store<Pod>,
    /// The nodes' ConfigMaps.
    pub config_maps: Store<ConfigMap>,
    /// The nodes' Secrets.
    pub secrets: Store<Secret>,
}

impl Supervisors {
    /// Starts the supervisors' thread over `watched`; `notify` wakes the kubelet when a
    /// container's readiness, restarts or life moved.
    pub fn start(cfg: Config, watched: Watched, notify: Arc<Notify>) -> Result<Self, RealError> {
        cfg.check()?;
        let root = std::env::temp_dir().join(format!(
            "habitat-nodes-{}-{}",
            std::process::id(),
            crate::meta::hex32().get(..8).unwrap_or("0")
        ));
        std::fs::create_dir_all(root.join("claims")).map_err(|source| RealError::Io {
            path: root.clone(),
            source,
        })?;
        let views = Arc::new(Mutex::new(Views::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut runtime = Runtime {
            cfg,
            root,
            runs: HashMap::new(),
            views: views.clone(),
            notify,
        };
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("habitat-supervisors".into())
            .spawn(move || {
                while !thread_stop.load(Ordering::Relaxed) {
                    runtime.step(&watched);
                    std::thread::sleep(STEP);
                }
                runtime.shutdown();
            })
            .map_err(|source| RealError::Io {
                path: PathBuf::from("habitat-supervisors thread"),
                source,
            })?;
        Ok(Supervisors {
            views,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Views> {
        self.views.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What runs of pod `uid`, if the supervisors know it.
    pub fn view(&self, uid: &str) -> Option<View> {
        self.lock().by_uid.get(uid).cloned()
    }

    /// Whether nothing of pod `uid` runs (any more): its deletion may finish.
    pub fn stopped(&self, uid: &str) -> bool {
        self.view(uid).is_none_or(|v| !v.running)
    }

    /// The pods whose container view changed since the last call, by uid.
    pub fn take_moved(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().moved)
    }

    /// Stops every container (SIGTERM, then SIGKILL after a grace period) and removes the
    /// temporary root; returns when that is done.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for Supervisors {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One running incarnation of a container.
struct Incarnation {
    launcher: Child,
    sid: i32,
    fs_root: PathBuf,
    /// The projected (non-subPath) mounts and what was last written to each.
    projected: Vec<(k8s_openapi::api::core::v1::VolumeMount, volumes::Files)>,
    /// When SIGTERM was sent and until when the processes may take to stop.
    stopping: Option<Instant>,
    next_probe: Instant,
}

/// A pod's container over its incarnations.
struct Run {
    uid: String,
    namespace: String,
    name: String,
    dir: PathBuf,
    incarnations: u32,
    crashes: u32,
    /// The last [`super::CRASH_ANNOTATION`] value seen on the pod.
    crash_token: Option<String>,
    view: View,
    current: Option<Incarnation>,
    next_start: Instant,
}

struct Runtime {
    cfg: Config,
    root: PathBuf,
    runs: HashMap<String, Run>,
    views: Arc<Mutex<Views>>,
    notify: Arc<Notify>,
}

fn habitat_container(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)
}

/// The service a pod's supervisor runs: from its readiness probe's path
/// (`/services/NAME/GROUP/health`), else its `habitat.sh/service` label.
fn service_of(pod: &Pod, c: &k8s_openapi::api::core::v1::Container) -> Option<String> {
    let path = c
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .and_then(|h| h.path.clone())
        .unwrap_or_default();
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match parts.as_slice() {
        ["services", svc, _, "health"] => Some(svc.to_string()),
        _ => pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("habitat.sh/service"))
            .cloned(),
    }
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod_ip(pod).is_some()
        && pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODE_NAME)
}

impl Runtime {
    fn step(&mut self, w: &Watched) {
        let pods = w.pods.state();
        let mut live = HashSet::new();
        for pod in &pods {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            if habitat_container(pod).is_none() {
                continue;
            }
            live.insert(uid.clone());
            let deleting = pod.metadata.deletion_timestamp.is_some();
            if !self.runs.contains_key(&uid) {
                if deleting || !is_running(pod) {
                    continue;
                }
                let dir = self.root.join("pods").join(&uid);
                self.runs.insert(
                    uid.clone(),
                    Run {
                        uid: uid.clone(),
                        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                        name: pod.metadata.name.clone().unwrap_or_default(),
                        dir,
                        incarnations: 0,
                        crashes: 0,
                        crash_token: None,
                        view: View::default(),
                        current: None,
                        next_start: Instant::now(),
                    },
                );
            }
            let before = self.runs.get(&uid).map(|r| r.view.clone());
            if let Some(run) = self.runs.get_mut(&uid) {
                run.step(pod, deleting, w, &self.cfg, &self.root);
            }
            let after = self.runs.get(&uid).map(|r| r.view.clone());
            if before != after {
                self.publish(&uid, after);
            }
        }
        let gone: Vec<String> = self
            .runs
            .keys()
            .filter(|u| !live.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(mut run) = self.runs.remove(&uid) {
                run.kill();
                self.forget_state(&run);
                let _ = std::fs::remove_dir_all(&run.dir);
            }
            self.publish(&uid, None);
        }
    }

    fn publish(&self, uid: &str, view: Option<View>) {
        {
            let mut v = self.views.lock().unwrap_or_else(|e| e.into_inner());
            match view {
                Some(view) => v.by_uid.insert(uid.to_string(), view),
                None => v.by_uid.remove(uid),
            };
            v.moved.push(uid.to_string());
        }
        self.notify.notify_one();
    }

    fn forget_state(&self, run: &Run) {
        run.forget_state(&self.cfg);
    }

    fn shutdown(&mut self) {
        let began = Instant::now();
        for run in self.runs.values_mut() {
            if let Some(c) = &run.current {
                process::signal(c.sid, libc::SIGTERM);
            }
        }
        while began.elapsed() < SHUTDOWN_GRACE && self.runs.values_mut().any(|r| r.reap_alive()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let runs: Vec<Run> = self.runs.drain().map(|(_, r)| r).collect();
        for mut run in runs {
            run.kill();
            self.forget_state(&run);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Run {
    /// Removes this pod's state file, unless it now describes a successor of the same name.
    fn forget_state(&self, cfg: &Config) {
        let Some(dir) = &cfg.state_dir else { return };
        let file = dir
            .join(&self.namespace)
            .join(format!("{}.json", self.name));
        let ours = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v["uid"] == self.uid.as_str());
        if ours {
            let _ = std::fs::remove_file(file);
        }
    }

    /// Whether the current incarnation's launcher still runs (reaping it if it exited).
    fn reap_alive(&mut self) -> bool {
        match &mut self.current {
            Some(c) => matches!(c.launcher.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL to everything of the current incarnation.
    fn kill(&mut self) {
        if let Some(mut c) = self.current.take() {
            process::signal_session(c.sid, libc::SIGKILL);
            let _ = c.launcher.kill();
            let _ = c.launcher.wait();
            process::signal_session(c.sid, libc::SIGKILL);
        }
        self.view.running = false;
        self.view.ready = false;
    }

    fn step(&mut self, pod: &Pod, deleting: bool, w: &Watched, cfg: &Config, root: &Path) {
        // A test asks for a crash: SIGKILL to every process of the container (a value seen
        // before the container started crashes nothing). The exit is seen as any other.
        let token = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(super::CRASH_ANNOTATION));
        if token != self.crash_token.as_ref() {
            self.crash_token = token.cloned();
            if let Some(c) = self.current.as_ref().filter(|_| !deleting) {
                tracing::info!(
                    "real supervisors: {}/{} crashed on request",
                    self.namespace,
                    self.name
                );
                process::signal_session(c.sid, libc::SIGKILL);
            }
        }
        // The launcher exited: a crash (or the end of a deletion).
        let exited = match &mut self.current {
            Some(c) => match c.launcher.try_wait() {
                Ok(Some(status)) => {
                    use std::os::unix::process::ExitStatusExt;
                    Some(status.code().unwrap_or(128 + status.signal().unwrap_or(0)))
                }
                _ => None,
            },
            None => None,
        };
        if let Some(code) = exited {
            if let Some(c) = self.current.take() {
                // Whatever the launcher left (hooks) goes with it, as with a container's.
                process::signal_session(c.sid, libc::SIGKILL);
            }
            self.forget_state(cfg);
            self.view.running = false;
            self.view.ready = false;
            self.view.last_exit = Some(code);
            if !deleting {
                let backoff = restart_backoff(self.crashes);
                self.crashes += 1;
                self.next_start = Instant::now() + backoff;
                tracing::info!(
                    "real supervisors: {}/{} exited with {code}; restarting in {backoff:?}",
                    self.namespace,
                    self.name
                );
            }
        }
        if deleting {
            if let Some(c) = &mut self.current {
                match c.stopping {
                    None => {
                        process::signal(c.sid, libc::SIGTERM);
                        let grace = pod
                            .metadata
                            .deletion_grace_period_seconds
                            .and_then(|s| u64::try_from(s).ok())
                            .map_or(DEFAULT_GRACE, Duration::from_secs);
                        c.stopping = Some(Instant::now() + grace);
                    }
                    Some(deadline) if Instant::now() >= deadline => {
                        process::signal_session(c.sid, libc::SIGKILL);
                    }
                    Some(_) => {}
                }
                self.view.ready = false;
            }
            return;
        }
        if self.current.is_none() && Instant::now() >= self.next_start {
            if let Err(e) = self.start(pod, w, cfg, root) {
                tracing::warn!(
                    "real supervisors: cannot start {}/{}: {e}",
                    self.namespace,
                    self.name
                );
                self.next_start = Instant::now() + BACKOFF_START;
            }
        }
        let Some(ip) = pod_ip(pod) else { return };
        let sources = volumes::Sources {
            config_maps: &w.config_maps,
            secrets: &w.secrets,
            pod_dir: &self.dir,
            claims_dir: &root.join("claims"),
            ip: &ip,
        };
        let probe = habitat_container(pod).and_then(|c| c.readiness_probe.clone());
        if let Some(c) = &mut self.current {
            for (m, written) in &mut c.projected {
                let Some(volume) = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.volumes.as_ref())
                    .and_then(|vs| vs.iter().find(|v| v.name == m.name))
                else {
                    continue;
                };
                if let Some(volumes::Content::Files(now)) = volumes::content(pod, volume, &sources)
                {
                    if now != *written {
                        let at = package::under_root(&c.fs_root, &m.mount_path);
                        match volumes::write_atomic(&at, &now) {
                            Ok(()) => *written = now,
                            Err(e) => tracing::warn!(
                                "real supervisors: cannot update {}: {e}",
                                at.display()
                            ),
                        }
                    }
                }
            }
            if Instant::now() >= c.next_probe {
                let period = probe
                    .as_ref()
                    .and_then(|p| p.period_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .filter(|s| *s > 0)
                    .unwrap_or(10);
                c.next_probe = Instant::now() + Duration::from_secs(period);
                self.view.ready = match probe.as_ref().and_then(|p| p.http_get.as_ref()) {
                    Some(h) => {
                        let port = match &h.port {
                            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => {
                                u16::try_from(*p).unwrap_or(package::HTTP_PORT)
                            }
                            _ => package::HTTP_PORT,
                        };
                        match ip.parse::<std::net::IpAddr>() {
                            Ok(addr) => process::http_probe(
                                SocketAddr::new(addr, port),
                                h.path.as_deref().unwrap_or("/"),
                                PROBE_TIMEOUT,
                            ),
                            Err(_) => false,
                        }
                    }
                    None => true,
                };
            }
        }
    }

    /// Starts a new incarnation: a fresh `FS_ROOT`, the package, the volumes, the supervisor.
    fn start(&mut self, pod: &Pod, w: &Watched, cfg: &Config, root: &Path) -> Result<(), String> {
        let c = habitat_container(pod).ok_or("no habitat-service container")?;
        let ip = pod_ip(pod).ok_or("no pod IP")?;
        let service = service_of(pod, c)
            .ok_or("no service name (readiness probe path or habitat.sh/service label)")?;
        let image = c.image.clone().unwrap_or_default();
        let ident = super::supervisor::package_for(&image, &service);
        let sources = volumes::Sources {
            config_maps: &w.config_maps,
            secrets: &w.secrets,
            pod_dir: &self.dir,
            claims_dir: &root.join("claims"),
            ip: &ip,
        };
        let mounts_spec = c.volume_mounts.clone().unwrap_or_default();
        let Some(mounts) = volumes::mounts(pod, &mounts_spec, &sources) else {
            // A required ConfigMap or Secret is not there yet: wait, as ContainerCreating does.
            self.next_start = Instant::now() + STEP;
            return Ok(());
        };
        let env = package::container_env(pod, c, &ip, &w.config_maps, &w.secrets)?;
        let incarnation = self.incarnations + 1;
        let fs_root = self.dir.join(format!("c{incarnation}"));
        let io = |e: std::io::Error| format!("{}: {e}", fs_root.display());
        // A restart starts from a fresh filesystem; the last one is gone with its container.
        if incarnation > 1 {
            let _ = std::fs::remove_dir_all(self.dir.join(format!("c{}", incarnation - 1)));
        }
        let _ = std::fs::remove_dir_all(&fs_root);
        std::fs::create_dir_all(fs_root.join("hab/sup/default")).map_err(io)?;
        std::fs::create_dir_all(fs_root.join("hab/cache/keys")).map_err(io)?;
        let binds = package::bind_names(c.args.as_deref().unwrap_or_default());
        package::write_package(&fs_root, &ident, &binds).map_err(io)?;
        let mut projected = Vec::new();
        for (m, content) in &mounts {
            volumes::mount(&fs_root, m, content).map_err(io)?;
            if let (volumes::Content::Files(f), None) =
                (content, m.sub_path.as_deref().filter(|s| !s.is_empty()))
            {
                projected.push(((*m).clone(), f.clone()));
            }
        }
        let mut all_env = env;
        let bin = |b: &str| cfg.bin.join(b).display().to_string();
        all_env.extend([
            ("FS_ROOT".to_string(), fs_root.display().to_string()),
            ("HOME".to_string(), fs_root.display().to_string()),
            (
                "HAB_CACHE_KEY_PATH".to_string(),
                fs_root.join("hab/cache/keys").display().to_string(),
            ),
            ("HAB_LICENSE".to_string(), "accept-no-persist".to_string()),
            ("HAB_NONINTERACTIVE".to_string(), "true".to_string()),
            ("HAB_LAUNCH_BINARY".to_string(), bin("hab-launch")),
            ("HAB_SUP_BINARY".to_string(), bin("hab-sup")),
            // A closed local port: nothing ever reaches Builder.
            ("HAB_BLDR_URL".to_string(), "http://127.0.0.1:9".to_string()),
        ]);
        let mut args = vec!["sup".to_string(), "run".to_string(), ident.clone()];
        args.extend(package::supervisor_args(
            c.args.as_deref().unwrap_or_default(),
            &ip,
            &fs_root,
        ));
        args.push("--no-color".to_string());
        let log = self.dir.join(format!("c{incarnation}.log"));
        let launcher = process::spawn(&cfg.bin.join("hab"), &args, &all_env, &log)
            .map_err(|e| format!("cannot run {}: {e}", cfg.bin.join("hab").display()))?;
        let sid = launcher.id() as i32;
        self.incarnations = incarnation;
        if incarnation > 1 {
            self.view.restarts += 1;
        }
        self.view.running = true;
        self.view.ready = false;
        self.current = Some(Incarnation {
            launcher,
            sid,
            fs_root: fs_root.clone(),
            projected,
            stopping: None,
            next_probe: Instant::now() + Duration::from_secs(1),
        });
        tracing::info!(
            "real supervisors: {}/{} runs {ident} on {ip} (session {sid}, FS_ROOT {})",
            self.namespace,
            self.name,
            fs_root.display()
        );
        if let Some(dir) = &cfg.state_dir {
            let state = serde_json::json!({
                "namespace": self.namespace, "pod": self.name,
                "uid": pod.metadata.uid, "ip": ip, "session": sid,
                "fs_root": fs_root, "service": service, "package": ident,
                "incarnation": incarnation, "restarts": self.view.restarts,
                "log": log,
            });
            let dir = dir.join(&self.namespace);
            let file = dir.join(format!("{}.json", self.name));
            let tmp = dir.join(format!(".{}.json.tmp", self.name));
            let written = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&tmp, state.to_string()))
                .and_then(|()| std::fs::rename(&tmp, &file));
            if let Err(e) = written {
                tracing::warn!("real supervisors: cannot write {}: {e}", file.display());
            }
        }
        Ok(())
    }
}
