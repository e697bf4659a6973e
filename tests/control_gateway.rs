//! The operator's control gateway client against the real supervisor: three real supervisors on
//! loopback (as `../shared/habitat/tools/run-ring.sh` runs them, sharing one control secret the
//! way the operator's pods share the Habitat's control gateway Secret, and with no `MEMBER_ID`:
//! each writes a random id), one SIGKILLed (a crash: its id stays in the ring, `confirmed` dead),
//! departed with `TcpControlGateway` through a survivor, and seen `departed` in every survivor's
//! census. A supervisor started again with the departed id exits.
//!
//! Runs when `HABITAT_SUPERVISOR_BIN` names a directory with `hab`, `hab-launch` and `hab-sup`;
//! skips without it, and fails without it when `HABITAT_REQUIRE_SUPERVISOR=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use habitat_operator::cluster::control_gateway::{
    ControlGateway, ControlGatewayError, TcpControlGateway, CONTROL_GATEWAY_PORT,
};
use serde_json::Value;

const GROUP: &str = "sleeper.default";
const IDENT: &str = "local/sleeper/0.1.0/20250101000000";
/// The control secret every supervisor reads from its `/hab/sup/default/CTL_SECRET`.
const SECRET: &str = "dGVzdC1jb250cm9sLXNlY3JldC1mb3ItdGhlLXJpbmctb2YtdGhyZWU=";

/// The supervisors' binaries, or None when the test skips.
fn binaries() -> Option<PathBuf> {
    match std::env::var_os("HABITAT_SUPERVISOR_BIN").map(PathBuf::from) {
        Some(dir)
            if ["hab", "hab-launch", "hab-sup"]
                .iter()
                .all(|b| dir.join(b).is_file()) =>
        {
            Some(dir)
        }
        other => {
            assert!(
                std::env::var("HABITAT_REQUIRE_SUPERVISOR").as_deref() != Ok("1"),
                "HABITAT_REQUIRE_SUPERVISOR=1 but HABITAT_SUPERVISOR_BIN ({other:?}) does not \
                 hold hab, hab-launch and hab-sup"
            );
            eprintln!("skipped: HABITAT_SUPERVISOR_BIN is not set");
            None
        }
    }
}

/// Real supervisors, each in its own session (the launcher's pid), killed on drop.
struct Ring {
    bin: PathBuf,
    dir: tempfile::TempDir,
    ips: Vec<String>,
    sessions: Vec<Option<std::process::Child>>,
}

impl Ring {
    /// `n` supervisors, and one spare address (index `n`) for a supervisor started later.
    fn new(bin: PathBuf, n: usize) -> Ring {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Addresses of their own: other tests may run supervisors on 127.0.0.x at once.
        let net = 20 + std::process::id() % 200;
        let ips: Vec<String> = (0..=n)
            .map(|i| format!("127.61.{net}.{}", 11 + i))
            .collect();
        let ring = Ring {
            bin,
            dir,
            ips,
            sessions: (0..=n).map(|_| None).collect(),
        };
        for i in 0..n {
            ring.prepare(i);
        }
        ring
    }

    fn root(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("sup{i}"))
    }

    /// The package (made by hand, as `tools/mkpkg.sh` does), the peer file, the control secret.
    fn prepare(&self, i: usize) {
        let root = self.root(i);
        let pkg = root.join("hab/pkgs").join(IDENT);
        std::fs::create_dir_all(pkg.join("hooks")).unwrap();
        std::fs::create_dir_all(root.join("hab/sup/default")).unwrap();
        std::fs::create_dir_all(root.join("hab/cache/keys")).unwrap();
        for (file, content) in [
            ("IDENT", format!("{IDENT}\n")),
            ("TARGET", "x86_64-linux\n".into()),
            ("SVC_USER", "root\n".into()),
            ("SVC_GROUP", "root\n".into()),
            ("PACKAGE_TYPE", "native\n".into()),
            ("default.toml", "port = 6379\n".into()),
            ("hooks/run", "#!/bin/sh\nexec sleep infinity\n".into()),
        ] {
            std::fs::write(pkg.join(file), content).unwrap();
        }
        set_mode(&pkg.join("hooks/run"), 0o755);
        let peers: Vec<String> = (0..self.ips.len() - 1)
            .filter(|j| *j != i)
            .map(|j| format!("{}:9638", self.ips[j]))
            .collect();
        std::fs::write(root.join("peers"), peers.join("\n") + "\n").unwrap();
        // Read-only, as a Secret volume mounts it: the supervisor only reads an existing one.
        let secret = root.join("hab/sup/default/CTL_SECRET");
        std::fs::write(&secret, SECRET).unwrap();
        set_mode(&secret, 0o400);
    }

    /// Starts supervisor `i` as `hab sup run` in a new session, logging to its root.
    fn start(&mut self, i: usize) {
        let root = self.root(i);
        let ip = &self.ips[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("sup.log"))
            .unwrap();
        let child = Command::new("setsid")
            .arg(self.bin.join("hab"))
            .args(["sup", "run", "--listen-gossip"])
            .arg(format!("{ip}:9638"))
            .arg("--listen-http")
            .arg(format!("{ip}:9631"))
            .arg("--listen-ctl")
            .arg(format!("{ip}:{CONTROL_GATEWAY_PORT}"))
            .arg("--sys-ip-address")
            .arg(ip)
            .arg("--peer-watch-file")
            .arg(root.join("peers"))
            .args(["--topology", "leader", "--no-color", IDENT])
            .env("FS_ROOT", &root)
            .env("HAB_CACHE_KEY_PATH", root.join("hab/cache/keys"))
            .env("HAB_LICENSE", "accept-no-persist")
            .env("HAB_NONINTERACTIVE", "true")
            .env("HAB_LAUNCH_BINARY", self.bin.join("hab-launch"))
            .env("HAB_SUP_BINARY", self.bin.join("hab-sup"))
            .env("HAB_BLDR_URL", "http://127.0.0.1:9")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting hab sup run");
        self.sessions[i] = Some(child);
    }

    /// A container restarted after a crash: the same address, a new filesystem (no `MEMBER_ID`,
    /// no data), the same mounted control secret. The old filesystem is kept at `sup<i>-old`.
    fn fresh_container(&mut self, i: usize) {
        let root = self.root(i);
        std::fs::rename(&root, self.dir.path().join(format!("sup{i}-old"))).unwrap();
        self.prepare(i);
        self.start(i);
    }

    /// SIGKILL to every process of supervisor `i`'s session: a crash (the launcher alone would
    /// let the supervisor leave cleanly).
    fn crash(&mut self, i: usize) {
        if let Some(child) = &self.sessions[i] {
            signal_session(child.id(), "KILL");
        }
        if let Some(mut child) = self.sessions[i].take() {
            let _ = child.wait();
        }
    }

    fn census(&self, i: usize) -> Option<Value> {
        let url = format!("http://{}:9631/census", self.ips[i]);
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .new_agent();
        let text = agent
            .get(&url)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        serde_json::from_str(&text).ok()
    }

    /// `alive`, `suspect`, `confirmed` or `departed`: member `id` in supervisor `i`'s census.
    fn health_of(&self, i: usize, id: &str) -> Option<String> {
        let c = self.census(i)?;
        let m = &c["census_groups"][GROUP]["population"][id];
        ["alive", "suspect", "confirmed", "departed"]
            .into_iter()
            .find(|h| m[*h] == true)
            .map(str::to_string)
    }

    /// Whether supervisor `i` runs its service (`/services/NAME/GROUP`: process up).
    fn service_up(&self, i: usize) -> bool {
        let url = format!("http://{}:9631/services/sleeper/default", self.ips[i]);
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .new_agent();
        agent
            .get(&url)
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["process"]["state"] == "up")
    }

    fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.root(i).join("sup.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let live: Vec<u32> = self.sessions.iter().flatten().map(|c| c.id()).collect();
        for sid in &live {
            signal_session(*sid, "TERM");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && live.iter().any(|s| !session_pids(*s).is_empty()) {
            std::thread::sleep(Duration::from_millis(100));
        }
        for sid in &live {
            signal_session(*sid, "KILL");
        }
        for child in self.sessions.iter_mut().flatten() {
            let _ = child.wait();
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The pids of session `sid` (the launcher, the supervisor and its hooks).
fn session_pids(sid: u32) -> Vec<String> {
    let out = Command::new("ps")
        .args(["-o", "pid=", "-s", &sid.to_string()])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace().map(str::to_string).collect()
}

fn signal_session(sid: u32, signal: &str) {
    let pids = session_pids(sid);
    if !pids.is_empty() {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .args(&pids)
            .status();
    }
}

/// Polls `f` every 250 ms until it holds; panics with `what` after `limit`.
fn wait_for(limit: Duration, what: &str, ring: &Ring, mut f: impl FnMut() -> bool) -> Duration {
    let began = Instant::now();
    while !f() {
        assert!(
            began.elapsed() < limit,
            "waited {limit:?} for {what}; supervisor 0's log ends:\n{}",
            ring.log_tail(0)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    began.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_member_is_departed_through_a_survivors_control_gateway() {
    let Some(bin) = binaries() else { return };
    let mut ring = Ring::new(bin, 3);
    for i in 0..3 {
        ring.start(i);
    }
    let formed = tokio::task::block_in_place(|| {
        wait_for(
            Duration::from_secs(90),
            "a ring of 3 with a leader",
            &ring,
            || {
                (0..3).all(|i| {
                    ring.census(i).is_some_and(|c| {
                        let g = &c["census_groups"][GROUP];
                        g["election_status"] == "ElectionFinished"
                            && g["population"].as_object().is_some_and(|p| {
                                p.values().filter(|m| m["alive"] == true).count() == 3
                            })
                    })
                })
            },
        )
    });
    eprintln!("ring of 3 formed in {formed:?}");
    let victim_census = ring.census(2).expect("the victim's census");
    let victim = victim_census["local_member_id"]
        .as_str()
        .expect("local_member_id")
        .to_string();
    // No MEMBER_ID was given: the supervisor wrote a random one.
    let written = std::fs::read_to_string(ring.root(2).join("hab/sup/default/MEMBER_ID")).unwrap();
    assert_eq!(written.trim(), victim);

    let gateway = TcpControlGateway::new(CONTROL_GATEWAY_PORT, Duration::from_secs(5));
    match gateway
        .depart(&ring.ips[0], "not-the-secret", &victim)
        .await
    {
        Err(ControlGatewayError::Unauthorized(_)) => {}
        other => panic!("a wrong secret must be refused, got {other:?}"),
    }
    assert_eq!(ring.health_of(0, &victim).as_deref(), Some("alive"));

    // A crash, and the container restarted as Kubernetes does: same address, new filesystem,
    // hence a new member.
    ring.crash(2);
    let restarted = Instant::now();
    ring.fresh_container(2);
    let serving = tokio::task::block_in_place(|| {
        wait_for(
            Duration::from_secs(30),
            "the restarted container, a new member, to run its service",
            &ring,
            || {
                ring.census(2).is_some_and(|c| {
                    c["local_member_id"] != victim.as_str()
                        && c["census_groups"][GROUP]["election_status"] == "ElectionFinished"
                }) && ring.service_up(2)
            },
        )
    });
    eprintln!("the restarted container runs its service {serving:?} after the crash");
    let confirmed = tokio::task::block_in_place(|| {
        wait_for(
            Duration::from_secs(60),
            "the crashed member confirmed dead",
            &ring,
            || ring.health_of(0, &victim).as_deref() == Some("confirmed"),
        )
    });
    eprintln!(
        "old id confirmed dead {:?} after the crash",
        restarted.elapsed().max(confirmed)
    );

    let began = Instant::now();
    gateway
        .depart(&ring.ips[0], SECRET, &victim)
        .await
        .expect("the departure is accepted");
    let answered = began.elapsed();
    let shown_at_once: Vec<Option<String>> = (0..2).map(|i| ring.health_of(i, &victim)).collect();
    eprintln!(
        "departure answered in {answered:?}; the survivors' census then shows {shown_at_once:?}"
    );

    // Permanent: the same id (its old filesystem, on the spare address) cannot start again.
    let spare = ring.root(3);
    std::fs::rename(ring.dir.path().join("sup2-old"), &spare).unwrap();
    let peers: Vec<String> = ring.ips[..3]
        .iter()
        .map(|ip| format!("{ip}:9638"))
        .collect();
    std::fs::write(spare.join("peers"), peers.join("\n") + "\n").unwrap();
    ring.start(3);
    let mut child = ring.sessions[3].take().expect("started");
    let began = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "a supervisor with a departed id kept running; its log ends:\n{}",
            ring.log_tail(3)
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!(
        "restarted with the departed id: {status} after {:?}",
        began.elapsed()
    );
    assert_eq!(status.code(), Some(86), "{}", ring.log_tail(3));
    signal_session(child.id(), "KILL");
    // The supervisor marks a departed member without bumping its member list's update counter,
    // so its census may go on showing `confirmed` until the next membership change (here, the
    // departed id's attempt to rejoin).
    let began = Instant::now();
    tokio::task::block_in_place(|| {
        wait_for(
            Duration::from_secs(20),
            "departed in both survivors' census",
            &ring,
            || (0..2).all(|i| ring.health_of(i, &victim).as_deref() == Some("departed")),
        )
    });
    eprintln!(
        "departed in both survivors' census {:?} after the rejoin attempt",
        began.elapsed()
    );
}
