//! The Habitat half against the real thing: the operator on the real control plane, its pods
//! running the real Habitat supervisor (`sandbox --supervisors real`, binaries from
//! `HABITAT_SUPERVISOR_BIN`). Each scenario runs once, at the smallest size that shows the
//! behaviour; timeouts are sized for the real gossip (a ring of 3 elects in about 10 s, a
//! failover after SIGKILL takes 16 to 22 s).

#[macro_use]
mod support;

use std::time::Duration;

use habitat_operator::api::Habitat;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use support::supervisors::{
    census, election, session_pids, start_real, stop_and_check_no_process_left, States,
};
use support::{wait_for, Env, Ground};

/// Time for a group to form, elect and pass its readiness probes.
const FORM: Duration = Duration::from_secs(120);
/// Time for a failover after SIGKILL (16 to 22 s measured) and its publication.
const FAILOVER: Duration = Duration::from_secs(90);

fn leader_label(p: &Pod) -> bool {
    p.labels()
        .get("habitat.sh/leader")
        .is_some_and(|v| v == "true")
}

/// Every member's own census for `service_group`: (pod, leader id, alive ids).
fn censuses(
    states: &States,
    pods: &[String],
    sg: &str,
) -> Vec<(String, Option<String>, Vec<String>)> {
    pods.iter()
        .filter_map(|p| {
            let c = states.container(p)?;
            let (leader, alive) = election(&census(&c.ip)?, sg);
            Some((p.clone(), leader, alive))
        })
        .collect()
}

/// What the operator and every member see now, for a failure's message.
async fn diagnose(env: &Env, states: &States, habitat: &str, sg: &str) -> String {
    let status = env
        .habitats()
        .get(habitat)
        .await
        .ok()
        .and_then(|h| h.status)
        .map(|s| serde_json::to_string(&s).unwrap_or_default());
    let mut out = format!("status: {status:?}\n");
    for p in env.pods(habitat).await {
        let name = p.name_any();
        let c = states.container(&name);
        let census = c.as_ref().and_then(|c| census(&c.ip));
        let g = census.as_ref().map(|c| {
            let g = &c["census_groups"][sg];
            let pop: Vec<String> = g["population"]
                .as_object()
                .map(|m| {
                    m.values()
                        .map(|v| {
                            format!(
                                "{}@{} alive={} suspect={} confirmed={} departed={}",
                                v["member_id"],
                                v["sys"]["ip"],
                                v["alive"],
                                v["suspect"],
                                v["confirmed"],
                                v["departed"]
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "me={} election={} leader={} population={pop:?}",
                c["local_member_id"], g["election_status"], g["leader_id"]
            )
        });
        out.push_str(&format!(
            "{name} labels={:?} container={:?}\n  census: {g:?}\n",
            p.labels(),
            c.map(|c| (c.ip, c.incarnation, c.session))
        ));
    }
    out.push_str(&format!(
        "nodes log tail:\n{}\noperator log tail:\n{}",
        support::tail(&env.nodes_log(), 20),
        support::tail(&env.operator_log(), 30)
    ));
    out
}

/// (a) A leader group of 3 forms a real ring, elects, and the operator publishes what the real
/// census says: the leader (status and the pod label), every member with its id and package,
/// and the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_group_publishes_the_real_census() {
    let Some((mut env, states)) = start_real("real-leader").await else {
        return;
    };
    env.apply_example("leader");
    let h: Habitat = env.wait_phase("example-leader", "Ready", FORM).await;
    let pods: Vec<String> = (0..3).map(|i| format!("example-leader-{i}")).collect();
    let sg = "redis.default";
    // The members agree on one leader, seen by every member's own census.
    let mut agreed = None;
    wait_for(
        FORM,
        "the three members' censuses agree on a leader",
        || {
            let seen = censuses(&states, &pods, sg);
            let leaders: std::collections::BTreeSet<Option<String>> =
                seen.iter().map(|(_, l, _)| l.clone()).collect();
            let ok = seen.len() == 3
                && leaders.len() == 1
                && leaders.iter().all(Option::is_some)
                && seen.iter().all(|(_, _, alive)| alive.len() == 3);
            if ok {
                agreed = seen.first().and_then(|(_, l, _)| l.clone());
            }
            async move { ok }
        },
    )
    .await;
    let leader_id = agreed.expect("an agreed leader");
    let status = h.status.clone().expect("a status");
    let leader_pod = status.leader.clone().expect("a published leader");
    let leader_container = states
        .container(&leader_pod)
        .expect("the leader's container");
    let (_, members) = election(&census(&leader_container.ip).expect("a census"), sg);
    assert_eq!(members.len(), 3);
    // The published members are the real ones: ids from the census, the leader's pod.
    wait_for(FORM, "status.members to be the census's members", || {
        let api = env.habitats();
        let (leader_id, members) = (leader_id.clone(), members.clone());
        let leader_pod = leader_pod.clone();
        async move {
            let Ok(h) = api.get("example-leader").await else {
                return false;
            };
            let st = h.status.unwrap_or_default();
            let mut ids: Vec<String> = st
                .members
                .iter()
                .filter(|m| m.alive)
                .map(|m| m.member_id.clone())
                .collect();
            ids.sort();
            let mut want = members;
            want.sort();
            let leader = st.members.iter().find(|m| m.leader);
            ids == want
                && leader.is_some_and(|m| {
                    m.member_id == leader_id && m.pod.as_deref() == Some(&leader_pod)
                })
                && st.leader.as_deref() == Some(&leader_pod)
        }
    })
    .await;
    let h = env
        .habitats()
        .get("example-leader")
        .await
        .expect("the Habitat");
    let st = h.status.unwrap_or_default();
    let package = &leader_container.package;
    assert!(
        st.members.iter().all(|m| &m.package == package),
        "{:?} run {package}",
        st.members
    );
    let release = package.splitn(3, '/').nth(2).expect("version/release");
    assert_eq!(st.release.as_deref(), Some(release));
    let labelled: Vec<String> = env
        .pods("example-leader")
        .await
        .iter()
        .filter(|p| leader_label(p))
        .map(|p| p.name_any())
        .collect();
    assert_eq!(labelled, vec![leader_pod.clone()]);
    stop_and_check_no_process_left(&mut env, &states);
}

/// The group as every member's own census shows it, when all agree: every member alive in
/// each census, one finished election, the same leader. None otherwise.
fn whole_group(states: &States, pods: &[String], sg: &str) -> Option<String> {
    let seen = censuses(states, pods, sg);
    let leaders: std::collections::BTreeSet<Option<String>> =
        seen.iter().map(|(_, l, _)| l.clone()).collect();
    let whole = seen.len() == pods.len()
        && leaders.len() == 1
        && seen.iter().all(|(_, _, alive)| alive.len() == pods.len());
    whole
        .then(|| leaders.into_iter().next().flatten())
        .flatten()
}

/// (b) A crash of the leader's pod: SIGKILL of its whole process tree (it does not depart).
/// The kubelet restarts the container (restartCount 1) with a fresh filesystem at once, on the
/// same pod IP. Expected then: the group serves again as one, whoever leads (the survivors
/// fail over, 16 to 22 s of real gossip, or the restarted member rejoins): every member's own
/// census lists all three alive and the same finished election, the operator publishes that
/// leader (status, label, members) and every pod is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_pod_restarts_and_the_group_serves_again() {
    let Some((mut env, states)) = start_real("real-failover").await else {
        return;
    };
    env.apply_example("leader");
    let h = env.wait_phase("example-leader", "Ready", FORM).await;
    let old = h.status.and_then(|s| s.leader).expect("a published leader");
    let pods: Vec<String> = (0..3).map(|i| format!("example-leader-{i}")).collect();
    let sg = "redis.default";
    let crashed = states.crash(&old);
    let began = std::time::Instant::now();
    // The kubelet's part: the container starts again, from a fresh filesystem.
    let restarted = states
        .wait_container(&old, FAILOVER, "is a new incarnation", |c| {
            c.incarnation > crashed.incarnation
        })
        .await;
    assert_ne!(restarted.fs_root, crashed.fs_root, "a fresh filesystem");
    assert!(
        !crashed.fs_root.exists(),
        "the crashed container's filesystem is gone"
    );
    wait_for(FAILOVER, "the crashed pod's restartCount", || {
        let api = env.api::<Pod>();
        let old = old.clone();
        async move {
            api.get(&old).await.ok().is_some_and(|p| {
                p.status
                    .and_then(|s| s.container_statuses)
                    .is_some_and(|cs| cs.iter().any(|c| c.restart_count == 1))
            })
        }
    })
    .await;
    // The group's part: whole again, and published as it is.
    loop {
        if let Some(leader_id) = whole_group(&states, &pods, sg) {
            let h = env.habitats().get("example-leader").await.ok();
            let st = h.and_then(|h| h.status).unwrap_or_default();
            let leader = st.members.iter().find(|m| m.leader);
            let published = leader
                .is_some_and(|m| m.member_id == leader_id && m.pod.is_some() && m.pod == st.leader);
            let labelled: Vec<String> = env
                .pods("example-leader")
                .await
                .iter()
                .filter(|p| leader_label(p))
                .map(|p| p.name_any())
                .collect();
            if published && st.leader.iter().eq(labelled.iter()) && st.ready_replicas == 3 {
                eprintln!(
                    "the group serves again {:.1}s after SIGKILL of the leader {old}; {} leads",
                    began.elapsed().as_secs_f64(),
                    st.leader.unwrap_or_default()
                );
                break;
            }
        }
        if began.elapsed() > FAILOVER {
            panic!(
                "the group does not serve as one {FAILOVER:?} after SIGKILL of the leader {old}:\n{}",
                diagnose(&env, &states, "example-leader", sg).await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop_and_check_no_process_left(&mut env, &states);
}

/// The text of `file` under `pod`'s container root, "" when missing.
fn read_in(states: &States, pod: &str, file: &str) -> String {
    states
        .container(pod)
        .and_then(|c| std::fs::read_to_string(c.fs_root.join(file)).ok())
        .unwrap_or_default()
}

/// (c) A standalone Habitat with `spec.service.configSecretName`: the Secret's user.toml is in
/// the service's rendered config, and a change of the Secret reaches it (through the volume's
/// `..data` swap and the supervisor's user.toml watcher) without a pod or container restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_toml_change_reaches_the_service_without_a_restart() {
    let Some((mut env, states)) = start_real("real-user-toml").await else {
        return;
    };
    env.apply_example("config");
    env.wait_phase("example-config", "Ready", FORM).await;
    let pod = "example-config-0";
    let rendered = "hab/svc/redis/config/service.toml";
    wait_for(FORM, "user.toml's port in the rendered config", || {
        let ok = read_in(&states, pod, rendered).contains("port = 6380");
        async move { ok }
    })
    .await;
    let before = states.container(pod).expect("a running container");
    let uid = env.api::<Pod>().get(pod).await.expect("the pod").uid();
    env.apply_yaml(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: example-config-user-toml\n\
         type: Opaque\nstringData:\n  user.toml: |\n    port = 6390\n",
    );
    let began = std::time::Instant::now();
    wait_for(
        Duration::from_secs(60),
        "the new port in the rendered config",
        || {
            let ok = read_in(&states, pod, rendered).contains("port = 6390");
            async move { ok }
        },
    )
    .await;
    eprintln!(
        "the Secret's change was rendered {:.1}s after it was applied",
        began.elapsed().as_secs_f64()
    );
    let after = states.container(pod).expect("a running container");
    assert_eq!(
        (after.incarnation, after.session),
        (before.incarnation, before.session),
        "the container was not restarted"
    );
    let now = env.api::<Pod>().get(pod).await.expect("the pod").uid();
    assert_eq!(now, uid, "the pod was not replaced");
    stop_and_check_no_process_left(&mut env, &states);
}

/// (d) A generated ring key: the operator makes the key Secret, each supervisor runs with
/// `--ring` and the key in its cache, and the members gossip as one encrypted ring (each one's
/// census lists both alive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_a_generated_ring_key_form_a_ring() {
    let Some((mut env, states)) = start_real("real-ring").await else {
        return;
    };
    env.apply_yaml(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: ringed}\nspec:\n  \
         image: kinvolk/redis-hab\n  count: 2\n  service:\n    name: redis\n    \
         ring: {name: test-ring}\n",
    );
    env.wait_phase("ringed", "Ready", FORM).await;
    let pods = ["ringed-0", "ringed-1"];
    for pod in pods {
        let c = states.container(pod).expect("a running container");
        let keys: Vec<String> = std::fs::read_dir(c.fs_root.join("hab/cache/keys"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            keys.iter()
                .any(|k| k.starts_with("test-ring-") && k.ends_with(".sym.key")),
            "{pod}: the ring key in the cache: {keys:?}"
        );
    }
    let began = std::time::Instant::now();
    loop {
        let both = pods.iter().all(|pod| {
            states
                .container(pod)
                .and_then(|c| census(&c.ip))
                .is_some_and(|c| election(&c, "redis.default").1.len() == 2)
        });
        if both {
            break;
        }
        if began.elapsed() > FORM {
            panic!(
                "the members of ring test-ring do not gossip as one ring:\n{}",
                diagnose(&env, &states, "ringed", "redis.default").await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop_and_check_no_process_left(&mut env, &states);
}

/// A real ring key made by `hab ring key generate RING` (the binary of
/// `HABITAT_SUPERVISOR_BIN`, its key cache in a temporary directory): the key's name
/// (`RING-YYYYMMDDhhmmss`) and the key file's content.
fn real_ring_key(ring: &str) -> (String, String) {
    let bin = support::supervisors::bin().expect("the supervisor's binaries");
    let cache = tempfile::tempdir().expect("a key cache");
    let out = std::process::Command::new(bin.join("hab"))
        .args(["ring", "key", "generate", ring])
        .env("HAB_CACHE_KEY_PATH", cache.path())
        .env("HAB_LICENSE", "accept-no-persist")
        .env("HAB_NOCOLORING", "true")
        .output()
        .expect("run hab ring key generate");
    assert!(
        out.status.success(),
        "hab ring key generate {ring}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::read_dir(cache.path())
        .expect("the key cache")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".sym.key"))
        .expect("a .sym.key file in the cache");
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".sym.key"))
        .expect("a key file name")
        .to_string();
    let content = std::fs::read_to_string(&file).expect("the key file");
    (name, content)
}

/// The names of the ring keys in `pod`'s key cache.
fn cached_keys(states: &States, pod: &str) -> Vec<String> {
    let Some(c) = states.container(pod) else {
        return vec![];
    };
    std::fs::read_dir(c.fs_root.join("hab/cache/keys"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|k| k.ends_with(".sym.key"))
                .collect()
        })
        .unwrap_or_default()
}

/// (g) A user-supplied ring key (`spec.service.ringSecretName`): two real keys of one ring,
/// made by `hab ring key generate` a second apart, each in the Secret the user makes. A leader
/// group of 3 on the first key gossips and elects with it (the key, and no other, in each
/// member's cache); a consumer bound to that group on the second key, gossiping to its
/// address all along, never appears in its census nor it in the consumer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_ring_key_elects_and_a_member_with_another_key_stays_out() {
    use k8s_openapi::api::core::v1::Secret;
    let Some((mut env, states)) = start_real("real-user-ring").await else {
        return;
    };
    let (first, first_key) = real_ring_key("userring");
    std::thread::sleep(Duration::from_millis(1100));
    let (second, second_key) = real_ring_key("userring");
    assert_ne!(first, second, "two revisions of the ring's key");
    for (name, key) in [(&first, &first_key), (&second, &second_key)] {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "stringData": {"ring-key": key},
        }))
        .expect("a Secret");
        env.api::<Secret>()
            .create(&Default::default(), &secret)
            .await
            .expect("create the user's ring key Secret");
    }
    let began = std::time::Instant::now();
    env.apply_yaml(&format!(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: keyed}}\nspec:\n  \
         image: kinvolk/redis-hab:v1\n  count: 3\n  service:\n    name: redis\n    \
         topology: leader\n    ringSecretName: {first}\n"
    ));
    env.wait_phase("keyed", "Ready", FORM).await;
    let pods = ["keyed-0", "keyed-1", "keyed-2"];
    let leader = loop {
        let leaders: std::collections::BTreeSet<Option<String>> = pods
            .iter()
            .map(|pod| {
                states
                    .container(pod)
                    .and_then(|c| census(&c.ip))
                    .map(|c| election(&c, "redis.default"))
                    .filter(|(_, alive)| alive.len() == 3)
                    .and_then(|(leader, _)| leader)
            })
            .collect();
        if leaders.len() == 1 {
            if let Some(Some(l)) = leaders.into_iter().next() {
                break l;
            }
        }
        if began.elapsed() > FORM {
            panic!(
                "the group on the user's key did not elect:\n{}",
                diagnose(&env, &states, "keyed", "redis.default").await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let elected = began.elapsed();
    for pod in pods {
        assert_eq!(
            cached_keys(&states, pod),
            [format!("{first}.sym.key")],
            "{pod}: the user's key, and only it, in the cache"
        );
    }
    let published = env
        .habitats()
        .get("keyed")
        .await
        .expect("the Habitat")
        .status
        .unwrap_or_default();
    assert!(
        published.ring_secret_name.as_deref() == Some(first.as_str()),
        "the status names the user's key: {:?}",
        published.ring_secret_name
    );

    env.apply_yaml(&format!(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: intruder}}\nspec:\n  \
         image: kinvolk/bindgo-hab\n  count: 1\n  service:\n    name: go-app\n    \
         ringSecretName: {second}\n    bind:\n      - {{name: db, service: redis, group: default}}\n"
    ));
    states
        .wait_container("intruder-0", FORM, "runs", |_| true)
        .await;
    assert_eq!(
        cached_keys(&states, "intruder-0"),
        [format!("{second}.sym.key")],
        "the intruder has the ring's other key"
    );
    // It gossips to the group's addresses: its peer file names them.
    let group_ips: Vec<String> = pods
        .iter()
        .filter_map(|p| states.container(p).map(|c| c.ip))
        .collect();
    wait_for(
        FORM,
        "the group's address in the intruder's peer file",
        || {
            let peers = states
                .container("intruder-0")
                .and_then(|c| {
                    std::fs::read_to_string(c.fs_root.join("habitat-operator/peer/peer-ip")).ok()
                })
                .unwrap_or_default();
            let ok = peers
                .lines()
                .any(|l| group_ips.iter().any(|ip| l.trim() == ip));
            async move { ok }
        },
    )
    .await;
    let watched = std::time::Instant::now();
    // As long as the group took to elect, and at least 15 s (a join takes about 4 s).
    while watched.elapsed() < elected.max(Duration::from_secs(15)) {
        for pod in pods {
            assert_eq!(
                states.alive_in(pod, "go-app.default").unwrap_or(0),
                0,
                "the member with another key is in {pod}'s census"
            );
        }
        assert_eq!(
            states.alive_in("intruder-0", "redis.default").unwrap_or(0),
            0,
            "the group is in the census of the member with another key"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        states.alive_in("intruder-0", "go-app.default").is_some(),
        "the member with another key answers its census:\n{}",
        diagnose(&env, &states, "intruder", "go-app.default").await
    );
    let after = states
        .container("keyed-0")
        .and_then(|c| census(&c.ip))
        .map(|c| election(&c, "redis.default"));
    assert_eq!(
        after.as_ref().map(|(l, alive)| (l.clone(), alive.len())),
        Some((Some(leader), 3)),
        "the group still elects alone"
    );
    eprintln!(
        "user ring key: the group of 3 elected in {:.1}s; the member with another key stayed out for {:.1}s",
        elected.as_secs_f64(),
        watched.elapsed().as_secs_f64()
    );
    stop_and_check_no_process_left(&mut env, &states);
}

/// Whether `pod` is Ready, as its status says.
async fn pod_ready(env: &Env, pod: &str) -> bool {
    env.api::<Pod>().get(pod).await.ok().is_some_and(|p| {
        p.status
            .and_then(|s| s.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
}

/// Inside one pod, on the sandbox with real supervisors: a health check turned critical makes
/// the pod not Ready through its readiness probe (the supervisor's health endpoint), and Ready
/// again once it passes. `hab-sup` killed alone (SIGKILL): the real launcher (2.1.78) does not
/// restart it but shuts everything down and exits ("Supervisor process killed by signal 9"),
/// so the container ends and the kubelet restarts it (restartCount 1, a fresh filesystem), and
/// the pod is Ready again. Deleting the pod stops its container with SIGTERM (the supervisor
/// stops its service and exits well before the 30 s grace period that ends in SIGKILL), and
/// the pod is gone only once nothing of it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_follows_its_health_check_and_restarts_when_its_supervisor_dies() {
    require_kubectl!();
    let Some((mut env, states)) = Env::start_real_supervisors(Ground::Sandbox, "real-health", true)
        .await
        .map(|env| {
            let states = env.supervisors.clone().expect("real supervisors' states");
            (env, states)
        })
    else {
        return;
    };
    env.apply_example("standalone");
    let h = env.wait_phase("example-standalone", "Ready", FORM).await;
    let pod = format!("{}-0", h.name_any());
    let before = states.container(&pod).expect("a running container");
    // The supervisor runs the health check every 30 s by default; the probe every 5 s.
    let health = Duration::from_secs(75);
    states.set_unhealthy(&pod, true);
    wait_for(health, "the pod not Ready while unhealthy", || {
        let env = &env;
        let pod = pod.clone();
        async move { !pod_ready(env, &pod).await }
    })
    .await;
    states.set_unhealthy(&pod, false);
    wait_for(health, "the pod Ready again once healthy", || {
        let env = &env;
        let pod = pod.clone();
        async move { pod_ready(env, &pod).await }
    })
    .await;
    states.kill_sup(&pod);
    let after = states
        .wait_container(&pod, FORM, "is a new incarnation", |c| {
            c.incarnation > before.incarnation
        })
        .await;
    assert_ne!(after.fs_root, before.fs_root, "a fresh filesystem");
    wait_for(FORM, "the pod Ready again, restarted once", || {
        let api = env.api::<Pod>();
        let env = &env;
        let pod = pod.clone();
        async move {
            let restarts = api
                .get(&pod)
                .await
                .ok()
                .and_then(|p| p.status)
                .and_then(|s| s.container_statuses)
                .map(|cs| cs.iter().map(|c| c.restart_count).sum::<i32>());
            restarts == Some(1) && pod_ready(env, &pod).await
        }
    })
    .await;
    let running = states.container(&pod).expect("a running container");
    let uid = env.api::<Pod>().get(&pod).await.expect("the pod").uid();
    let began = std::time::Instant::now();
    env.kubectl_ok(&["delete", "pod", &pod, "--wait=false"]);
    wait_for(Duration::from_secs(25), "the deleted pod gone", || {
        let api = env.api::<Pod>();
        let (pod, uid) = (pod.clone(), uid.clone());
        async move { api.get(&pod).await.ok().map(|p| p.uid()) != Some(uid) }
    })
    .await;
    let left = session_pids(running.session);
    assert!(
        left.is_empty(),
        "the deleted pod's processes {left:?} outlive it"
    );
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "stopped by SIGTERM, not SIGKILL after the grace period: {:?}",
        began.elapsed()
    );
    states
        .wait_container(&pod, FORM, "runs the new pod", |c| {
            uid.as_deref() != Some(&c.uid)
        })
        .await;
    stop_and_check_no_process_left(&mut env, &states);
}

/// (e) Binds between two Habitats: the consumer's supervisor (`--bind db:redis.default`)
/// gossips with the producer's, a leader group of 3 (the operator's peer file joins them), and
/// starts its service once the bound group is there. Every member's census lists both groups,
/// and the operator publishes the producer's leader read from such a census
/// ([`support::supervisors::bound_leader_group`], the same case as `tests/quorum.rs` runs on
/// simulated supervisors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_habitat_sees_the_group_it_binds_to() {
    let Some((mut env, states)) = start_real("real-bind").await else {
        return;
    };
    let began = std::time::Instant::now();
    support::supervisors::bound_leader_group(&env, FORM).await;
    eprintln!(
        "bound leader group on real supervisors: both groups in every census and the leader published in {:.1}s",
        began.elapsed().as_secs_f64()
    );
    stop_and_check_no_process_left(&mut env, &states);
}

/// Channel-driven updates (`spec.service.channel`, `updateStrategy: rolling`): the real
/// supervisors take the operator's `--channel` and `--strategy` and run the update election the
/// rolling strategy needs (every member agrees on one update leader), and the operator
/// publishes the members and the release from the census. An update itself cannot be shown
/// here: it needs Builder to serve a newer release of the package, and nothing reaches Builder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_strategy_runs_the_update_election() {
    let Some((mut env, states)) = start_real("real-rolling").await else {
        return;
    };
    env.apply_yaml(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: follows}\nspec:\n  image: kinvolk/redis-hab\n  count: 3\n  service: {name: redis, channel: stable, updateStrategy: rolling}\n",
    );
    env.wait_phase("follows", "Ready", FORM).await;
    let began = std::time::Instant::now();
    let pods: Vec<String> = (0..3).map(|i| format!("follows-{i}")).collect();
    // The update leader each member names once its update election finished (one census read
    // per member).
    let update_leaders = || -> Vec<Option<String>> {
        pods.iter()
            .filter_map(|p| {
                let g = census(&states.container(p)?.ip)?["census_groups"]["redis.default"].clone();
                Some(
                    (g["update_election_status"] == "ElectionFinished")
                        .then(|| g["update_leader_id"].as_str().map(String::from))
                        .flatten(),
                )
            })
            .collect()
    };
    let mut agreed = None;
    wait_for(
        FORM,
        "the three members to agree on an update leader",
        || {
            let named = update_leaders();
            let finished = named.iter().flatten().count();
            let leaders: std::collections::BTreeSet<String> = named.into_iter().flatten().collect();
            let ok = finished == 3 && leaders.len() == 1;
            if ok {
                agreed = leaders.into_iter().next();
            }
            async move { ok }
        },
    )
    .await;
    let update_leader = agreed.expect("an agreed update leader");
    eprintln!(
        "rolling strategy on real supervisors: update leader {update_leader} agreed {:.1}s after Ready",
        began.elapsed().as_secs_f64()
    );
    // The members and the release come from the census.
    let package = states.container("follows-0").expect("a container").package;
    let release = package
        .splitn(3, '/')
        .nth(2)
        .expect("version/release")
        .to_string();
    wait_for(
        FORM,
        "status.members and status.release from the census",
        || {
            let api = env.habitats();
            let (package, release, update_leader) =
                (package.clone(), release.clone(), update_leader.clone());
            async move {
                let Ok(h) = api.get("follows").await else {
                    return false;
                };
                let st = h.status.unwrap_or_default();
                st.members.iter().filter(|m| m.alive).count() == 3
                    && st.members.iter().all(|m| m.package == package)
                    && st.members.iter().any(|m| m.member_id == update_leader)
                    && st.release.as_deref() == Some(release.as_str())
            }
        },
    )
    .await;
    stop_and_check_no_process_left(&mut env, &states);
}
