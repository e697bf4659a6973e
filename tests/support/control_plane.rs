//! A real Kubernetes control plane on loopback for the tests, following controller-runtime's
//! envtest convention: the binaries `etcd`, `kube-apiserver` and `kube-controller-manager` live in
//! the directory named by `KUBEBUILDER_ASSETS`. One control plane serves every test of a test
//! binary; it is started on first use and torn down by a watchdog process once the test binary
//! is gone (the harness never drops statics, and may be killed).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The binaries the control plane needs, in `$KUBEBUILDER_ASSETS`.
const BINARIES: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

/// How long start-up may take before it is called a failure (the machine may be busy).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// etcd, kube-apiserver and kube-controller-manager on 127.0.0.1, in a temporary directory.
pub struct ControlPlane {
    url: String,
    dir: PathBuf,
    admin_kubeconfig: PathBuf,
    operator_kubeconfig: PathBuf,
    /// The running processes and how each was started, for [`ControlPlane::stop_apiserver`] and
    /// the like (filled once start-up succeeded).
    procs: std::sync::Mutex<Option<Procs>>,
}

impl ControlPlane {
    /// The control plane shared by every test of this test binary, started on first use.
    /// None when `KUBEBUILDER_ASSETS` is unset or lacks a binary (etcd, kube-apiserver,
    /// kube-controller-manager); with `HABITAT_REQUIRE_APISERVER=1` that panics instead.
    /// Callable from inside a tokio runtime: start-up runs on a thread of its own.
    pub fn shared() -> Option<&'static ControlPlane> {
        static SHARED: OnceLock<Result<Option<ControlPlane>, String>> = OnceLock::new();
        let shared = SHARED.get_or_init(|| {
            let Some(assets) = assets() else {
                return Ok(None);
            };
            std::thread::spawn(move || start(&assets))
                .join()
                .unwrap_or_else(|_| Err("the control plane's start-up thread panicked".into()))
                .map(Some)
        });
        match shared {
            Ok(cp) => cp.as_ref(),
            Err(e) => panic!("the control plane did not start: {e}"),
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig for a token user in `system:masters` (the test driver).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// A kubeconfig for the ServiceAccount `habitat-operator/habitat-operator` of `deploy/`
    /// ([`OPERATOR_USER`]), with a token from the TokenRequest API: bound by the ClusterRole and
    /// the leader-election Role of `deploy/base` and nothing else.
    pub fn operator_kubeconfig(&self) -> &Path {
        &self.operator_kubeconfig
    }

    /// The temporary directory: each process's log, `audit.log`, etcd's data, certificates.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The certificate the API server serves (for kubeconfigs of its own).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("certs").join("apiserver.crt")
    }

    /// The API server's audit log (level Metadata, one JSON event a line).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }
}

/// Whether `HABITAT_REQUIRE_APISERVER` asks for the control plane to be there.
fn required() -> bool {
    std::env::var("HABITAT_REQUIRE_APISERVER").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The assets directory when it holds every binary; None (or a panic, when required) otherwise.
fn assets() -> Option<PathBuf> {
    let missing = match std::env::var_os("KUBEBUILDER_ASSETS").filter(|v| !v.is_empty()) {
        None => "KUBEBUILDER_ASSETS is not set".to_string(),
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let absent: Vec<_> = BINARIES
                .iter()
                .filter(|b| !dir.join(b).is_file())
                .copied()
                .collect();
            if absent.is_empty() {
                return Some(dir);
            }
            format!(
                "KUBEBUILDER_ASSETS={} lacks {}",
                dir.display(),
                absent.join(", ")
            )
        }
    };
    assert!(
        !required(),
        "HABITAT_REQUIRE_APISERVER is set but {missing}: a real control plane needs {} \
         in the directory KUBEBUILDER_ASSETS names (.ci/run unpacks them from ../shared/k8s)",
        BINARIES.join(", ")
    );
    None
}

/// A free loopback port, never one this process handed out before. The port is free when it
/// is picked, not when its server binds it, and the kernel may give the port it just freed to
/// the next `bind(0)`: two operators of one test were once given the same port, the second
/// could not bind it and exited, and the test read the first one's `/readyz` as the second's.
pub fn free_port() -> Result<u16, String> {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    unseen_port(&mut given, || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free port: {e}"))
    })
}

/// The first port `pick` gives that is not in `given`, added to it.
fn unseen_port(
    given: &mut std::collections::BTreeSet<u16>,
    mut pick: impl FnMut() -> Result<u16, String>,
) -> Result<u16, String> {
    for _ in 0..100 {
        let port = pick()?;
        if given.insert(port) {
            return Ok(port);
        }
    }
    Err("no free port this process has not handed out already".to_string())
}

/// A random token for tokens.csv.
fn token() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..32)
        .map(|_| format!("{:x}", rng.gen_range(0..16u8)))
        .collect()
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// A kubeconfig for one token user, trusting the API server's self-signed certificate.
fn kubeconfig(url: &str, ca: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: habitat-test\n  cluster:\n    \
         server: {url}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    \
         token: {token}\ncontexts:\n- name: {user}\n  context:\n    cluster: habitat-test\n    \
         user: {user}\ncurrent-context: {user}\n",
        ca = ca.display()
    )
}

/// The last lines of a process's log, for a failure message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The processes of one start-up attempt, and where they log.
struct Procs {
    dir: PathBuf,
    pgid: Option<u32>,
    children: Vec<(Child, &'static str, PathBuf)>,
    /// How each process was started: name, binary, arguments (to start it again).
    commands: Vec<(&'static str, PathBuf, Vec<String>)>,
}

impl Procs {
    /// Starts `bin` in the control plane's process group (the first one founds it), logging to
    /// `DIR/NAME.log`.
    fn spawn(&mut self, name: &'static str, bin: &Path, args: &[String]) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let log_path = self.dir.join(format!("{name}.log"));
        // Appended to: a process started again keeps its earlier log.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{name}.log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("{name}.log: {e}"))?;
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(self.pgid.unwrap_or(0) as i32)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        self.pgid.get_or_insert(child.id());
        // For the watchdog, which stops etcd (the first) last.
        let mut pids = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pids"))
            .map_err(|e| format!("pids: {e}"))?;
        writeln!(pids, "{}", child.id()).map_err(|e| format!("pids: {e}"))?;
        self.children.push((child, name, log_path));
        if !self.commands.iter().any(|(n, ..)| *n == name) {
            self.commands.push((name, bin.to_path_buf(), args.to_vec()));
        }
        Ok(())
    }

    /// An error naming any process that has exited, with its log's tail.
    fn check(&mut self) -> Result<(), String> {
        for (child, name, log) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "{name} exited ({status}); its log ends:\n{}",
                    log_tail(log)
                ));
            }
        }
        Ok(())
    }

    /// After a failed start: the group is stopped and the directory removed.
    fn abort(mut self) {
        if let Some(pgid) = self.pgid {
            let group = format!("-{pgid}");
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
        for (child, ..) in &mut self.children {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the control plane, a second time if the first attempt fails (a port picked as free
/// may have been taken meanwhile). Everything is blocking or on a runtime of this thread's own.
fn start(assets: &Path) -> Result<ControlPlane, String> {
    let first = match attempt(assets) {
        Ok(cp) => return Ok(cp),
        Err(e) => e,
    };
    eprintln!("control plane: start-up failed, trying once more: {first}");
    attempt(assets).map_err(|e| format!("{e}\n(the first attempt: {first})"))
}

fn attempt(assets: &Path) -> Result<ControlPlane, String> {
    let began = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("habitat-control-plane-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?
        .keep();
    let mut procs = Procs {
        dir: dir.clone(),
        pgid: None,
        children: Vec::new(),
        commands: Vec::new(),
    };
    let cp = match launch(assets, &dir, &mut procs, began) {
        Ok(cp) => cp,
        Err(e) => {
            procs.abort();
            return Err(e);
        }
    };
    eprintln!(
        "control plane: {} ready in {:.1?} (directory {}; admin kubeconfig {})",
        cp.url,
        began.elapsed(),
        dir.display(),
        cp.admin_kubeconfig.display()
    );
    *cp.procs.lock().unwrap_or_else(|e| e.into_inner()) = Some(procs);
    Ok(cp)
}

fn launch(
    assets: &Path,
    dir: &Path,
    procs: &mut Procs,
    began: Instant,
) -> Result<ControlPlane, String> {
    let (etcd_client, etcd_peer, api_port, kcm_port) =
        (free_port()?, free_port()?, free_port()?, free_port()?);
    let url = format!("https://127.0.0.1:{api_port}");
    let path = |name: &str| dir.join(name).display().to_string();

    let (admin, kcm) = (token(), token());
    write(
        &dir.join("tokens.csv"),
        &format!(
            "{admin},habitat-test-admin,habitat-test-admin,\"system:masters\"\n\
             {kcm},system:kube-controller-manager,system:kube-controller-manager,\"system:masters\"\n"
        ),
    )?;
    write(
        &dir.join("audit-policy.yaml"),
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n",
    )?;
    openssl(&["genrsa", "-out", &path("sa.key"), "2048"])?;
    openssl(&[
        "rsa",
        "-in",
        &path("sa.key"),
        "-pubout",
        "-out",
        &path("sa.pub"),
    ])?;

    // The watchdog right after the group exists, so nothing outlives the test binary even if
    // start-up hangs.
    procs.spawn(
        "etcd",
        &assets.join("etcd"),
        &[
            "--name=test".into(),
            format!("--data-dir={}", path("etcd")),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            format!("--initial-cluster=test=http://127.0.0.1:{etcd_peer}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ],
    )?;
    watchdog(procs.pgid.expect("etcd founded the group"), dir)?;
    procs.spawn(
        "kube-apiserver",
        &assets.join("kube-apiserver"),
        &[
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            format!("--cert-dir={}", path("certs")),
            format!("--token-auth-file={}", path("tokens.csv")),
            "--authorization-mode=Node,RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", path("sa.pub")),
            format!("--service-account-signing-key-file={}", path("sa.key")),
            // Room for thousands of ClusterIP Services (the scale benchmark's 300 leader
            // Services at N = 1000 filled a /24).
            "--service-cluster-ip-range=10.0.0.0/16".into(),
            "--endpoint-reconciler-type=none".into(),
            "--allow-privileged=true".into(),
            // As OpenShift does: setting blockOwnerDeletion on an owner reference would require
            // the right to update the owner's finalizers, which deploy/ does not grant.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement".into(),
            format!("--audit-policy-file={}", path("audit-policy.yaml")),
            format!("--audit-log-path={}", path("audit.log")),
            "--audit-log-format=json".into(),
            "--audit-log-mode=blocking".into(),
            // Never rotated: the default rotates at 100 MB, and a benchmark at N = 1000 writes
            // more; its request counts read the one file.
            "--audit-log-maxsize=1000000".into(),
        ],
    )?;

    let ca = dir.join("certs").join("apiserver.crt");
    let kubeconfigs = [
        ("admin.kubeconfig", "habitat-test-admin", &admin),
        ("kcm.kubeconfig", "system:kube-controller-manager", &kcm),
    ];
    for (file, user, token) in kubeconfigs {
        write(&dir.join(file), &kubeconfig(&url, &ca, user, token))?;
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        // The serving certificate is written before the port opens.
        poll(procs, began, "kube-apiserver to listen", || async {
            std::net::TcpStream::connect(("127.0.0.1", api_port)).is_ok() && ca.is_file()
        })
        .await?;
        let admin = client(&dir.join("admin.kubeconfig")).await?;
        poll(procs, began, "kube-apiserver /readyz", || async {
            get(&admin, "/readyz").await.as_deref() == Some("ok")
        })
        .await?;

        let kcm_certs = dir.join("kcm-certs");
        let kc = path("kcm.kubeconfig");
        procs.spawn(
            "kube-controller-manager",
            &assets.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={kcm_port}"),
                format!("--cert-dir={}", kcm_certs.display()),
                "--authentication-skip-lookup=true".into(),
                "--controllers=*,-service-ca-certificate-publisher-controller".into(),
                "--use-service-account-credentials=false".into(),
                format!("--service-account-private-key-file={}", path("sa.key")),
                format!("--root-ca-file={}", ca.display()),
                "--service-cluster-ip-range=10.0.0.0/16".into(),
                "--leader-elect=false".into(),
                "--kube-api-qps=100".into(),
                "--kube-api-burst=200".into(),
            ],
        )?;

        for doc in ["/openapi/v2", "/openapi/v3"] {
            poll(procs, began, &format!("kube-apiserver {doc}"), || async {
                get(&admin, doc).await.is_some()
            })
            .await?;
        }
        let operator = rbac(&admin).await?;
        write(
            &dir.join("operator.kubeconfig"),
            &kubeconfig(&url, &ca, "habitat-operator", &operator),
        )?;

        // Its self-signed serving certificate, too, is written before its port opens.
        let kcm_ca = kcm_certs.join("kube-controller-manager.crt");
        poll(
            procs,
            began,
            "kube-controller-manager to listen",
            || async {
                std::net::TcpStream::connect(("127.0.0.1", kcm_port)).is_ok() && kcm_ca.is_file()
            },
        )
        .await?;
        let kcm_kubeconfig = dir.join("kcm-health.kubeconfig");
        let kcm_url = format!("https://127.0.0.1:{kcm_port}");
        write(
            &kcm_kubeconfig,
            &kubeconfig(&kcm_url, &kcm_ca, "system:kube-controller-manager", &kcm),
        )?;
        let kcm_client = client(&kcm_kubeconfig).await?;
        poll(procs, began, "kube-controller-manager /healthz", || async {
            get(&kcm_client, "/healthz").await.as_deref() == Some("ok")
        })
        .await
    })?;

    Ok(ControlPlane {
        url,
        dir: dir.to_path_buf(),
        admin_kubeconfig: dir.join("admin.kubeconfig"),
        operator_kubeconfig: dir.join("operator.kubeconfig"),
        procs: std::sync::Mutex::new(None),
    })
}

fn openssl(args: &[&str]) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("openssl (needed for the service-account key pair): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A process that waits for the test binary to exit, then stops the control plane and removes its
/// directory: SIGTERM to the processes after etcd (the API server drains faster while etcd still
/// answers), then to the whole group; SIGKILL to whatever is left a few seconds later. It is in a
/// process group of its own, so a Ctrl-C in the terminal does not stop it before it has cleaned up.
fn watchdog(pgid: u32, dir: &Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    // $1: the test binary, $2: the group (etcd's pid), $3: the directory, whose `pids` lists
    // each process started, etcd first.
    const SCRIPT: &str = r#"
        while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
        rest=$(tail -n +2 "$3/pids" 2>/dev/null)
        alive() { for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
        wait_for() { i=0; while alive "$@" && [ "$i" -lt "$limit" ]; do sleep 0.25; i=$((i + 1)); done; }
        [ -n "$rest" ] && kill -TERM $rest 2>/dev/null
        limit=20 wait_for $rest
        kill -TERM "-$2" 2>/dev/null
        limit=12 wait_for "-$2"
        kill -KILL "-$2" 2>/dev/null
        rm -rf -- "$3"
    "#;
    Command::new("sh")
        .args(["-c", SCRIPT, "habitat-control-plane-watchdog"])
        .arg(std::process::id().to_string())
        .arg(pgid.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|e| format!("starting the watchdog (sh): {e}"))
}

/// Polls `ready` every 100 ms until it holds, a process exits, or start-up takes too long.
async fn poll<F, Fut>(procs: &mut Procs, began: Instant, what: &str, ready: F) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if ready().await {
            return Ok(());
        }
        procs.check()?;
        if began.elapsed() > START_TIMEOUT {
            let logs: Vec<_> = procs
                .children
                .iter()
                .map(|(_, name, log)| format!("{name}'s log ends:\n{}", log_tail(log)))
                .collect();
            return Err(format!(
                "waited {START_TIMEOUT:?} for {what}\n{}",
                logs.join("\n")
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The body of a successful GET, None on any failure.
async fn get(client: &Client, path: &str) -> Option<String> {
    let req = hyper::Request::get(path).body(Vec::new()).ok()?;
    tokio::time::timeout(Duration::from_secs(10), client.request_text(req))
        .await
        .ok()?
        .ok()
}

async fn client(kubeconfig: &Path) -> Result<Client, String> {
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| format!("kubeconfig: {e}"))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("kubeconfig: {e}"))?;
    Client::try_from(config).map_err(|e| format!("client: {e}"))
}

/// The namespace and ServiceAccount of the operator in `deploy/`.
pub const OPERATOR_NAMESPACE: &str = "habitat-operator";
pub const OPERATOR_SERVICE_ACCOUNT: &str = "habitat-operator";
/// The operator's user name, as the API server (and its audit log) knows it.
pub const OPERATOR_USER: &str = "system:serviceaccount:habitat-operator:habitat-operator";

/// The documents of the files that `deploy/base/kustomization.yaml` lists.
pub fn base_documents() -> Result<Vec<serde_yaml::Value>, String> {
    use serde::Deserialize;
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    let read = |name: &str| {
        let path = base.join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let kustomization: serde_yaml::Value = serde_yaml::from_str(&read("kustomization.yaml")?)
        .map_err(|e| format!("deploy/base/kustomization.yaml: {e}"))?;
    let mut docs = Vec::new();
    for file in kustomization["resources"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        let file = file.as_str().unwrap_or_default();
        let text = read(file)?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            docs.push(
                serde_yaml::Value::deserialize(doc)
                    .map_err(|e| format!("deploy/base/{file}: {e}"))?,
            );
        }
    }
    Ok(docs)
}

/// The one document of `kind` in `docs`, deserialized.
fn one<K: serde::de::DeserializeOwned>(
    docs: &[serde_yaml::Value],
    kind: &str,
) -> Result<K, String> {
    let doc = docs
        .iter()
        .find(|d| d["kind"] == kind)
        .ok_or_else(|| format!("no {kind} in deploy/base"))?;
    serde_yaml::from_value(doc.clone()).map_err(|e| format!("the {kind} of deploy/base: {e}"))
}

/// What `deploy/` installs for the operator's identity and rights, exactly as written there: the
/// namespace, the ServiceAccount, the ClusterRole and its binding, the leader-election Role and
/// its binding. Then a token of the ServiceAccount from the TokenRequest API, which the
/// operator's kubeconfig carries: the operator is authenticated as that ServiceAccount and bound
/// by nothing but the RBAC of `deploy/`.
async fn rbac(client: &Client) -> Result<String, String> {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let docs = base_documents()?;
    let pp = PatchParams::apply("habitat-tests").force();
    let namespace: Namespace = one(&docs, "Namespace")?;
    let account: ServiceAccount = one(&docs, "ServiceAccount")?;
    let role: ClusterRole = one(&docs, "ClusterRole")?;
    let binding: ClusterRoleBinding = one(&docs, "ClusterRoleBinding")?;
    let lease_role: Role = one(&docs, "Role")?;
    let lease_binding: RoleBinding = one(&docs, "RoleBinding")?;
    let ns = OPERATOR_NAMESPACE;
    macro_rules! apply {
        ($api:expr, $obj:expr) => {{
            let name = $obj.metadata.name.clone().unwrap_or_default();
            $api.patch(&name, &pp, &Patch::Apply(&$obj))
                .await
                .map_err(|e| format!("applying {name} from deploy/base: {e}"))?;
        }};
    }
    apply!(Api::<Namespace>::all(client.clone()), namespace);
    apply!(
        Api::<ServiceAccount>::namespaced(client.clone(), ns),
        account
    );
    apply!(Api::<ClusterRole>::all(client.clone()), role);
    apply!(Api::<ClusterRoleBinding>::all(client.clone()), binding);
    apply!(Api::<Role>::namespaced(client.clone(), ns), lease_role);
    apply!(
        Api::<RoleBinding>::namespaced(client.clone(), ns),
        lease_binding
    );
    service_account_token(client, ns, OPERATOR_SERVICE_ACCOUNT).await
}

/// A token of the ServiceAccount `namespace/name` from the TokenRequest API (POST
/// serviceaccounts/NAME/token), valid for a day: longer than any test binary runs.
pub async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<String, String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(24 * 3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let api = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    // The ServiceAccount was just created; the token endpoint may not find it at once.
    let mut attempts = 0;
    loop {
        match api
            .create_token_request(name, &kube::api::PostParams::default(), &request)
            .await
        {
            Ok(t) => {
                return t
                    .status
                    .map(|s| s.token)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| format!("the TokenRequest of {namespace}/{name} has no token"))
            }
            Err(e) if attempts < 50 => {
                attempts += 1;
                if attempts == 50 {
                    return Err(format!("TokenRequest of {namespace}/{name}: {e}"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("TokenRequest of {namespace}/{name}: {e}")),
        }
    }
}

/// The leader-election Role and RoleBinding of `deploy/base`, moved to `namespace` (the subject
/// stays the operator's ServiceAccount): the tests elect a leader in their own namespaces, so
/// that parallel tests do not share one Lease. The same three verbs on Leases, in one namespace.
pub fn leader_election_rbac_in(namespace: &str) -> Result<String, String> {
    let docs = base_documents()?;
    let mut out = String::new();
    for kind in ["Role", "RoleBinding"] {
        let mut doc = docs
            .iter()
            .find(|d| d["kind"] == kind)
            .cloned()
            .ok_or_else(|| format!("no {kind} in deploy/base"))?;
        doc["metadata"]["namespace"] = namespace.into();
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// A kubeconfig for `token`, on the control plane at `url` (whose certificate is `ca`).
pub fn token_kubeconfig(url: &str, ca: &Path, user: &str, token: &str) -> String {
    kubeconfig(url, ca, user, token)
}

/// A control plane of one test's own, for tests that stop and start its processes (which must
/// not share the test binary's control plane with other tests). Stopped and removed on Drop, and
/// by the watchdog should the test binary be killed first.
pub struct PrivateControlPlane(ControlPlane);

impl std::ops::Deref for PrivateControlPlane {
    type Target = ControlPlane;
    fn deref(&self) -> &ControlPlane {
        &self.0
    }
}

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        let procs = self
            .0
            .procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(procs) = procs {
            procs.abort();
        }
    }
}

/// How long a stopped process may take to exit before it is killed. kube-apiserver, sent
/// SIGTERM, answers not-ready at once but holds its watches open for ~20 s (measured); the grace
/// is shorter, so that a stop is an outage of about the length a test asks for.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

impl ControlPlane {
    /// A control plane of the caller's own (not [`ControlPlane::shared`]'s), started now. None
    /// when `KUBEBUILDER_ASSETS` is unset or lacks a binary; with `HABITAT_REQUIRE_APISERVER=1`
    /// that panics instead. Callable from inside a tokio runtime.
    pub fn start_private() -> Option<PrivateControlPlane> {
        let assets = assets()?;
        let cp = std::thread::spawn(move || start(&assets))
            .join()
            .unwrap_or_else(|_| Err("the control plane's start-up thread panicked".into()))
            .unwrap_or_else(|e| panic!("the private control plane did not start: {e}"));
        Some(PrivateControlPlane(cp))
    }

    /// Stops kube-apiserver (SIGTERM, SIGKILL after 5 s) and waits until it has exited.
    pub async fn stop_apiserver(&self) -> Result<(), String> {
        self.stop("kube-apiserver").await
    }

    /// Starts kube-apiserver again, as it was started (same port, etcd, certificates and
    /// tokens), and waits until its `/readyz` answers `ok`.
    pub async fn start_apiserver(&self) -> Result<(), String> {
        self.respawn("kube-apiserver")?;
        self.wait_api_ready("kube-apiserver to serve again").await
    }

    /// Stops etcd (SIGTERM, SIGKILL after 5 s) and waits until it has exited.
    pub async fn stop_etcd(&self) -> Result<(), String> {
        self.stop("etcd").await
    }

    /// Starts etcd again, as it was started (same data directory and ports), and waits until
    /// kube-apiserver's `/readyz` (which checks etcd) answers `ok`.
    pub async fn start_etcd(&self) -> Result<(), String> {
        self.respawn("etcd")?;
        self.wait_api_ready("kube-apiserver to be ready on the restarted etcd")
            .await
    }

    /// Stops etcd, waits `down`, starts it again.
    pub async fn restart_etcd(&self, down: Duration) -> Result<(), String> {
        self.stop_etcd().await?;
        tokio::time::sleep(down).await;
        self.start_etcd().await
    }

    /// SIGTERM to the running process `name`, then waits for it (SIGKILL after
    /// [`STOP_TIMEOUT`]).
    async fn stop(&self, name: &str) -> Result<(), String> {
        let mut child = {
            let mut guard = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            let procs = guard.as_mut().ok_or("the control plane has no processes")?;
            let at = procs
                .children
                .iter_mut()
                .position(|(c, n, _)| *n == name && matches!(c.try_wait(), Ok(None)))
                .ok_or_else(|| format!("{name} is not running"))?;
            procs.children.remove(at).0
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let began = Instant::now();
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return Ok(());
            }
            if began.elapsed() > STOP_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts `name` again with the command it was first started with, in the control plane's
    /// process group (so the watchdog stops it too), its log appended to.
    fn respawn(&self, name: &str) -> Result<(), String> {
        let mut guard = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let procs = guard.as_mut().ok_or("the control plane has no processes")?;
        let (name, bin, args) = procs
            .commands
            .iter()
            .find(|(n, ..)| *n == name)
            .cloned()
            .ok_or_else(|| format!("{name} was never started"))?;
        procs.spawn(name, &bin, &args)
    }

    /// Polls the API server's `/readyz` until it answers `ok`, or fails after
    /// [`START_TIMEOUT`] naming `what`, or as soon as a process has exited.
    async fn wait_api_ready(&self, what: &str) -> Result<(), String> {
        let began = Instant::now();
        let admin = client(&self.admin_kubeconfig).await?;
        loop {
            if get(&admin, "/readyz").await.as_deref() == Some("ok") {
                return Ok(());
            }
            {
                let mut guard = self.procs.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(procs) = guard.as_mut() {
                    procs.check()?;
                }
            }
            if began.elapsed() > START_TIMEOUT {
                return Err(format!("waited {START_TIMEOUT:?} for {what}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_port_handed_out_once_is_not_handed_out_again() {
        let mut given = std::collections::BTreeSet::new();
        let mut picks = [41000u16, 41000, 41000, 41001].into_iter();
        let mut pick = || picks.next().ok_or_else(|| "none left".to_string());
        assert_eq!(super::unseen_port(&mut given, &mut pick), Ok(41000));
        assert_eq!(super::unseen_port(&mut given, &mut pick), Ok(41001));
        assert!(super::unseen_port(&mut given, &mut pick).is_err());
    }
}
