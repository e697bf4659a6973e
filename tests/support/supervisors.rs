//! Real Habitat supervisors in the test grounds' pods: the binaries from
//! `HABITAT_SUPERVISOR_BIN` (skip when unset, fail when `HABITAT_REQUIRE_SUPERVISOR=1`), the
//! containers the nodes describe in their state directory (`NAMESPACE/POD.json`), and what a
//! test does to them: crash a pod (SIGKILL of its whole session), kill `hab-sup` alone (the
//! launcher then exits, and the container restarts), turn the health check unhealthy, read a member's census.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The directory named by `HABITAT_SUPERVISOR_BIN` when it holds hab, hab-launch and hab-sup;
/// None (with a message) when unset, a panic when `HABITAT_REQUIRE_SUPERVISOR=1`.
pub fn bin() -> Option<PathBuf> {
    let required = std::env::var("HABITAT_REQUIRE_SUPERVISOR").is_ok_and(|v| v == "1");
    let dir = std::env::var_os("HABITAT_SUPERVISOR_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let missing = match &dir {
        None => Some("HABITAT_SUPERVISOR_BIN is not set".to_string()),
        Some(d) => ["hab", "hab-launch", "hab-sup"]
            .iter()
            .find(|b| !d.join(b).is_file())
            .map(|b| format!("{} has no {b}", d.display())),
    };
    match missing {
        None => dir,
        Some(why) => {
            assert!(
                !required,
                "real Habitat supervisors are required (HABITAT_REQUIRE_SUPERVISOR=1): {why}"
            );
            eprintln!("skipped: {why} (the directory of hab, hab-launch and hab-sup)");
            None
        }
    }
}

/// A child process stopped gracefully when dropped: SIGTERM, a wait of up to `grace`, then
/// SIGKILL. The nodes with real supervisors need the SIGTERM to stop the supervisors.
pub struct Graceful(pub Child, pub Duration);

impl Drop for Graceful {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let began = Instant::now();
        while began.elapsed() < self.1 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running container as the nodes describe it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Container {
    /// The pod's name.
    pub pod: String,
    /// The pod's uid.
    pub uid: String,
    /// The pod's IP (the supervisor listens there).
    pub ip: String,
    /// The session id (the launcher's pid) of the container's processes.
    pub session: i32,
    /// The container's filesystem root.
    pub fs_root: PathBuf,
    /// The Habitat service.
    pub service: String,
    /// The package the container runs.
    pub package: String,
    /// Which start of the container this is (1, then 2 after a restart, ...).
    pub incarnation: u32,
    /// How many times the container was restarted.
    pub restarts: u32,
    /// The supervisor's output.
    pub log: PathBuf,
}

/// The state directory of the nodes, and what it describes.
#[derive(Debug, Clone)]
pub struct States {
    /// The directory (`NAMESPACE/POD.json` under it).
    pub dir: PathBuf,
    /// The test's namespace.
    pub namespace: String,
}

impl States {
    /// The running container of `pod`, if any.
    pub fn container(&self, pod: &str) -> Option<Container> {
        let file = self.dir.join(&self.namespace).join(format!("{pod}.json"));
        serde_json::from_slice(&std::fs::read(file).ok()?).ok()
    }

    /// Waits until `pod` has a running container that `accept`s; returns it.
    pub async fn wait_container(
        &self,
        pod: &str,
        timeout: Duration,
        what: &str,
        accept: impl Fn(&Container) -> bool,
    ) -> Container {
        let began = Instant::now();
        loop {
            if let Some(c) = self.container(pod).filter(|c| accept(c)) {
                return c;
            }
            assert!(
                began.elapsed() < timeout,
                "{pod}: no running container that {what} after {timeout:?} (now: {:?})",
                self.container(pod)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Crashes `pod`: SIGKILL to every process of its container (a node or container crash;
    /// the supervisor does not depart). Returns the container that was killed.
    pub fn crash(&self, pod: &str) -> Container {
        let c = self
            .container(pod)
            .unwrap_or_else(|| panic!("{pod} has no running container to crash"));
        let pids = session_pids(c.session);
        assert!(
            !pids.is_empty(),
            "{pod}: no process in session {}",
            c.session
        );
        kill("-KILL", &pids);
        c
    }

    /// Kills only `hab-sup` of `pod` (SIGKILL). The real launcher (2.1.78) then stops the
    /// service and exits ("Supervisor process killed by signal 9; shutting everything down"),
    /// so the container ends and the kubelet restarts it. Returns the pid killed.
    pub fn kill_sup(&self, pod: &str) -> i32 {
        let c = self
            .container(pod)
            .unwrap_or_else(|| panic!("{pod} has no running container"));
        let sup = session_pids(c.session)
            .into_iter()
            .find(|p| comm(*p).as_deref() == Some("hab-sup"))
            .unwrap_or_else(|| panic!("{pod}: no hab-sup in session {}", c.session));
        kill("-KILL", &[sup]);
        sup
    }

    /// Turns `pod`'s health check critical (or back to ok): the package's health-check hook
    /// fails while `FS_ROOT/hab/svc/SERVICE/data/unhealthy` exists.
    pub fn set_unhealthy(&self, pod: &str, unhealthy: bool) {
        let c = self
            .container(pod)
            .unwrap_or_else(|| panic!("{pod} has no running container"));
        let data = c.fs_root.join("hab/svc").join(&c.service).join("data");
        let flag = data.join("unhealthy");
        if unhealthy {
            std::fs::create_dir_all(&data).expect("the service's data directory");
            std::fs::write(flag, "").expect("the unhealthy flag");
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// The sessions of every running container: after the nodes stop, none may have a
    /// process left ([`session_pids`]).
    pub fn sessions(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir(self.dir.join(&self.namespace)) else {
            return vec![];
        };
        entries
            .flatten()
            .filter_map(|e| {
                serde_json::from_slice::<Container>(&std::fs::read(e.path()).ok()?).ok()
            })
            .map(|c| c.session)
            .collect()
    }
}

/// Crashes the container of `pod` (in the test's namespace), the same call on both kinds of
/// supervisor: the nodes SIGKILL every process of it (the supervisor does not depart) and
/// start it again in the same pod from a fresh filesystem, as a kubelet restarts a container
/// killed by the OOM killer. It sets the nodes' crash annotation
/// (`habitat_sandbox::nodes::CRASH_ANNOTATION`) to a new value.
pub async fn crash_container(env: &super::Env, pod: &str) {
    use kube::api::{Patch, PatchParams};
    let token = format!("{}", rand::random::<u64>());
    let patch = serde_json::json!({"metadata": {"annotations": {
        habitat_sandbox::nodes::CRASH_ANNOTATION: token}}});
    env.api::<k8s_openapi::api::core::v1::Pod>()
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("ask the nodes to crash {pod}'s container: {e}"));
}

/// A member's census from its gateway at `ip` (`/census` on port 9631), None when it does not
/// answer.
pub fn census(ip: &str) -> Option<serde_json::Value> {
    gateway_json(ip, "/census")
}

/// The JSON the HTTP gateway of the member at `ip` answers at `path`, None when it does not.
pub fn gateway_json(ip: &str, path: &str) -> Option<serde_json::Value> {
    let body = ureq::get(&format!("http://{ip}:9631{path}"))
        .config()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    serde_json::from_str(&body).ok()
}

/// A test world on the real control plane whose pods run real supervisors, and their states;
/// None (the test returns) when kubectl, the control plane or the binaries are not here.
pub async fn start_real(test: &str) -> Option<(super::Env, States)> {
    if !super::have_kubectl() {
        assert!(
            std::env::var_os("HABITAT_REQUIRE_KUBECTL").is_none(),
            "kubectl is required but not installed"
        );
        eprintln!("skipped: kubectl is not installed");
        return None;
    }
    let env = super::Env::start_real_supervisors(super::Ground::Real, test, true).await?;
    let states = env.supervisors.clone().expect("real supervisors' states");
    Some((env, states))
}

/// Stops the nodes and checks that no process of any container is left.
pub fn stop_and_check_no_process_left(env: &mut super::Env, states: &States) {
    let sessions = states.sessions();
    assert!(!sessions.is_empty(), "containers ran");
    env.stop_real_supervisors();
    let left: Vec<i32> = sessions.iter().flat_map(|s| session_pids(*s)).collect();
    assert!(
        left.is_empty(),
        "processes left after the nodes stopped: {left:?}"
    );
}

/// The leader's member id and the alive members' ids in `census` for `service_group`
/// (`redis.default`).
pub fn election(census: &serde_json::Value, service_group: &str) -> (Option<String>, Vec<String>) {
    let g = &census["census_groups"][service_group];
    let leader = (g["election_status"] == "ElectionFinished")
        .then(|| g["leader_id"].as_str().map(String::from))
        .flatten();
    let alive = g["population"]
        .as_object()
        .map(|p| {
            p.values()
                .filter(|m| m["alive"] == true)
                .filter_map(|m| m["member_id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (leader, alive)
}

impl States {
    /// The alive members of `sg` in the census of `pod`'s member, None when it does not answer.
    pub fn alive_in(&self, pod: &str, sg: &str) -> Option<usize> {
        let c = census(&self.container(pod)?.ip)?;
        Some(election(&c, sg).1.len())
    }
}

/// Every process of session `sid`, from /proc.
pub fn session_pids(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s[s.rfind(')')? + 1..].to_string();
                    rest.split_whitespace().nth(3)?.parse::<i32>().ok()
                })
                == Some(sid)
        })
        .collect()
}

fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn kill(signal: &str, pids: &[i32]) {
    let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
    let _ = Command::new("kill").arg(signal).args(&pids).status();
}

/// A producer with `topology: leader` (3 members) and a standalone consumer bound to it, the
/// same manifest on either kind of supervisor.
pub const BOUND_LEADER_GROUP: &str = "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: bound-db}\nspec:\n  image: kinvolk/redis-hab:v1\n  count: 3\n  service: {name: redis, topology: leader}\n---\napiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: bound-web}\nspec:\n  image: kinvolk/bindgo-hab\n  count: 1\n  service:\n    name: go-app\n    bind: [{name: db, service: redis, group: default}]\n";

/// What the census of every pod of [`BOUND_LEADER_GROUP`] shows, when it shows the ring whole:
/// each one's `census_groups` holds both groups (the real census lists every group whose
/// rumors reach the member), the producer's group with its 3 members alive and one finished
/// election; returns the producer's leader id and its IP. None until then.
pub async fn bound_ring_whole(env: &super::Env) -> Option<(String, String)> {
    let mut ips = vec![];
    for habitat in ["bound-db", "bound-web"] {
        for p in env.pods(habitat).await {
            ips.push(p.status.and_then(|s| s.pod_ip)?);
        }
    }
    if ips.len() != 4 {
        return None;
    }
    let censuses = tokio::task::spawn_blocking(move || {
        ips.iter().map(|ip| census(ip)).collect::<Option<Vec<_>>>()
    })
    .await
    .ok()??;
    let mut leaders = std::collections::BTreeSet::new();
    for c in &censuses {
        let groups = &c["census_groups"];
        groups.get("go-app.default")?;
        for g in ["go-app.default", "redis.default"] {
            if groups[g]["local_member_id"] != c["local_member_id"] {
                return None;
            }
        }
        let (leader, alive) = election(c, "redis.default");
        if alive.len() != 3 {
            return None;
        }
        leaders.insert(leader?);
    }
    let leader = leaders.pop_first().filter(|_| leaders.is_empty())?;
    let ip = censuses[0]["census_groups"]["redis.default"]["population"][&leader]["sys"]["ip"]
        .as_str()?
        .to_string();
    Some((leader, ip))
}

/// The case of [`BOUND_LEADER_GROUP`], on either kind of supervisor: once each census lists
/// both groups ([`bound_ring_whole`]), the operator publishes the producer's leader (the pod
/// at its leader's IP) with `LeaderElected=True`, read from such a census, and no leader for
/// the consumer.
pub async fn bound_leader_group(env: &super::Env, timeout: Duration) {
    env.apply_yaml(BOUND_LEADER_GROUP);
    env.wait_phase("bound-db", "Ready", timeout).await;
    env.wait_phase("bound-web", "Ready", timeout).await;
    let began = Instant::now();
    let (leader, ip) = loop {
        if let Some(seen) = bound_ring_whole(env).await {
            break seen;
        }
        assert!(
            began.elapsed() < timeout,
            "the censuses never listed both groups with the producer's election"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let leader_pod = env
        .pods("bound-db")
        .await
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(ip.as_str()))
        .and_then(|p| p.metadata.name)
        .unwrap_or_else(|| panic!("no producer pod at the leader {leader}'s IP {ip}"));
    let published = |name: &'static str| {
        let api = env.habitats();
        async move {
            let st = api.get(name).await.ok()?.status?;
            let elected = st
                .conditions
                .iter()
                .find(|c| c.type_ == "LeaderElected")
                .map(|c| c.status.clone());
            Some((st.leader, elected))
        }
    };
    let began = Instant::now();
    loop {
        let db = published("bound-db").await;
        if db == Some((Some(leader_pod.clone()), Some("True".to_string()))) {
            break;
        }
        assert!(
            began.elapsed() < timeout,
            "bound-db publishes {db:?}, not its leader {leader_pod} ({leader} at {ip})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let web = published("bound-web").await.expect("bound-web's status");
    assert_eq!(web.0, None, "a standalone consumer has no leader");
}
