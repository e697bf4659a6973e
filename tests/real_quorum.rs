//! Leader groups on REAL Habitat supervisors, on the real control plane (the nodes are
//! `sandbox --supervisors real`, binaries from `HABITAT_SUPERVISOR_BIN`): a crashed pod of a
//! follower and of the leader, a supervisor process dying inside its pod, image updates of 3
//! and 5 members and a scale-down 5 -> 3. Every running pod's own census is sampled all along,
//! as `tests/quorum.rs` does on simulated supervisors, and each test prints a table of what it
//! measured:
//!
//! - **serve**: from the SIGKILL to the pod's new member running its service again (its own
//!   census: alive exactly the running containers' members, the election finished with one of
//!   them leading; `/services/redis/default` with its process `up`), bound by [`SERVE_BOUND`];
//! - **failover**: when the leader's pod was killed, until the other members agree on another
//!   leader;
//! - **departed**: until the operator's `MemberDeparted` Event names the dead member id;
//! - **no election**: the longest stretch without a finished election, from the first sample
//!   in which a running pod's census reports anything but `ElectionFinished` (or none answers)
//!   to the next sample in which every one reports it;
//! - **no running leader**: the same, where a finished election also names a member that
//!   answers (after a crash the survivors keep naming the dead leader until gossip suspects it);
//! - **most counted**: the most members counted for quorum (not departed) in one census.
//!
//! Each scenario runs once, at the smallest size that shows it; timeouts are sized for the real
//! gossip (a member joins in about 4 s, a failover after SIGKILL takes 16 to 22 s).

#[macro_use]
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use habitat_operator::api::Habitat;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use support::supervisors::{
    census, election, gateway_json, start_real, stop_and_check_no_process_left, Container, States,
};
use support::{wait_for, Env};

/// Time for a group to form, elect and pass its readiness probes.
const FORM: Duration = Duration::from_secs(150);
/// A crashed pod of a leader group runs its service again within this (issue 53).
const SERVE_BOUND: Duration = Duration::from_secs(30);
/// How long a test waits for something before it fails with what every member sees.
const PATIENCE: Duration = Duration::from_secs(120);
/// How long a rollout of 5 may take.
const ROLLOUT: Duration = Duration::from_secs(240);
/// The longest window without a finished election a rollout or a scale-down may leave. The
/// target is the time one new member takes to join (about 4 s); this bound leaves room for
/// the sampler's steps and a loaded machine.
const WINDOW_BOUND: Duration = Duration::from_secs(10);
/// How often every pod's census is read.
const SAMPLE_EVERY: Duration = Duration::from_millis(150);
const SG: &str = "redis.default";

fn leader_habitat(name: &str, count: u32, image: &str) -> String {
    format!("apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: {name}}}\nspec:\n  image: {image}\n  count: {count}\n  service: {{name: redis, topology: leader}}\n")
}

/// What one running pod's census said in one sample.
#[derive(Debug, Clone)]
struct Seen {
    status: String,
    /// The answering member's id.
    me: String,
    /// The leader, when the election is finished.
    leader: Option<String>,
    /// Members not departed: those that count for quorum.
    counted: usize,
}

type Sample = (Instant, Vec<Seen>);

/// The election status of `redis.default` in the census of the supervisor at `ip`, and how
/// many members count for quorum there.
fn seen_at(ip: &str) -> Option<Seen> {
    let c = census(ip)?;
    let g = &c["census_groups"][SG];
    let counted = g["population"]
        .as_object()
        .map(|p| p.values().filter(|m| m["departed"] != true).count())
        .unwrap_or(0);
    let status = g["election_status"].as_str()?.to_string();
    let leader = (status == "ElectionFinished")
        .then(|| g["leader_id"].as_str().map(String::from))
        .flatten();
    Some(Seen {
        status,
        me: c["local_member_id"].as_str()?.to_string(),
        leader,
        counted,
    })
}

/// Reads every running pod's census each [`SAMPLE_EVERY`] until dropped.
struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sampler {
    fn start(env: &Env, habitat: &str) -> Sampler {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let api = env.api::<Pod>();
        let lp = kube::api::ListParams::default().labels(&format!("habitat.sh/name={habitat}"));
        let out = samples.clone();
        let task = tokio::spawn(async move {
            loop {
                let began = Instant::now();
                let ips: Vec<String> = api
                    .list(&lp)
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter_map(|p| p.status.and_then(|s| s.pod_ip))
                    .collect();
                let seen = tokio::task::spawn_blocking(move || {
                    ips.iter().filter_map(|ip| seen_at(ip)).collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
                out.lock().expect("lock").push((began, seen));
                tokio::time::sleep(SAMPLE_EVERY.saturating_sub(began.elapsed())).await;
            }
        });
        Sampler { samples, task }
    }

    /// Among the samples taken from `from` on: the longest window without a finished
    /// election, the longest without a running leader (every answering census finished and
    /// naming a member that answers: a census still naming a dead leader is no leader), the
    /// number of those samples, and the most members counted for quorum in one census.
    fn window(&self, from: Instant) -> Windows {
        let samples = self.samples.lock().expect("lock");
        let samples: Vec<&Sample> = samples.iter().filter(|(t, _)| *t >= from).collect();
        let finished =
            |seen: &[Seen]| !seen.is_empty() && seen.iter().all(|s| s.status == "ElectionFinished");
        let led = |seen: &[Seen]| {
            finished(seen)
                && seen.iter().all(|s| {
                    s.leader
                        .as_ref()
                        .is_some_and(|l| seen.iter().any(|o| &o.me == l))
                })
        };
        let counted = samples
            .iter()
            .flat_map(|(_, s)| s.iter().map(|x| x.counted))
            .max()
            .unwrap_or(0);
        Windows {
            no_election: longest(&samples, finished),
            no_leader: longest(&samples, led),
            samples: samples.len(),
            counted,
        }
    }
}

/// What [`Sampler::window`] measured.
struct Windows {
    no_election: Duration,
    no_leader: Duration,
    samples: usize,
    counted: usize,
}

/// The longest stretch of `samples` in which `ok` does not hold: from the first sample where
/// it fails to the next where it holds (or the last sample).
fn longest(samples: &[&Sample], ok: impl Fn(&[Seen]) -> bool) -> Duration {
    let mut longest = Duration::ZERO;
    let mut since: Option<Instant> = None;
    for (t, seen) in samples {
        match (ok(seen), since) {
            (false, None) => since = Some(*t),
            (true, Some(s)) => {
                longest = longest.max(*t - s);
                since = None;
            }
            _ => {}
        }
    }
    if let (Some(s), Some((t, _))) = (since, samples.last()) {
        longest = longest.max(*t - s);
    }
    longest
}

/// One line of a test's table.
struct Row {
    what: String,
    serve: Option<Duration>,
    failover: Option<Duration>,
    departed: Option<Duration>,
    ready: Duration,
    windows: Windows,
}

fn secs(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1}", d.as_secs_f64()))
        .unwrap_or_else(|| "-".into())
}

fn print_table(test: &str, rows: &[Row]) {
    let mut out = format!(
        "\nreal supervisors, {test} (seconds from the change; window = longest without ElectionFinished)\n\
         | scenario | serve again | failover | dead id departed | Habitat Ready | no election | no running leader | samples | most counted |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} |\n",
            r.what,
            secs(r.serve),
            secs(r.failover),
            secs(r.departed),
            r.ready.as_secs_f64(),
            r.windows.no_election.as_secs_f64(),
            r.windows.no_leader.as_secs_f64(),
            r.windows.samples,
            r.windows.counted
        ));
    }
    eprintln!("{out}");
}

/// The local member id in the census at `ip`.
fn member_id(ip: &str) -> Option<String> {
    census(ip)?["local_member_id"].as_str().map(String::from)
}

/// The state of `redis.default`'s process on the supervisor at `ip`
/// (`/services/redis/default`, `process.state`).
fn process_state(ip: &str) -> Option<String> {
    let doc = gateway_json(ip, "/services/redis/default")?;
    doc["process"]["state"].as_str().map(String::from)
}

/// The member ids of `pods`' running containers, when every one answers.
fn live_ids(states: &States, pods: &[String]) -> Option<std::collections::BTreeSet<String>> {
    pods.iter()
        .map(|p| member_id(&states.container(p)?.ip))
        .collect()
}

/// Whether the member in container `c` serves: its own census lists alive exactly the members
/// of `pods`' running containers (a dead id not yet suspected does not count as one) and a
/// finished election with one of them as leader, and its service's process is up.
fn serving(states: &States, pods: &[String], c: &Container) -> bool {
    let Some(census) = census(&c.ip) else {
        return false;
    };
    let Some(live) = live_ids(states, pods) else {
        return false;
    };
    let (leader, alive) = election(&census, SG);
    let alive: std::collections::BTreeSet<String> = alive.into_iter().collect();
    alive == live
        && leader.is_some_and(|l| live.contains(&l))
        && census["local_member_id"]
            .as_str()
            .is_some_and(|me| live.contains(me))
        && process_state(&c.ip).as_deref() == Some("up")
}

/// Whether the Habitat is Ready with `size` ready replicas and `LeaderElected=True`.
async fn ready_with_leader(env: &Env, name: &str, size: i32) -> bool {
    let Ok(h) = env.habitats().get(name).await else {
        return false;
    };
    let st = h.status.unwrap_or_default();
    st.phase.as_deref() == Some("Ready")
        && st.ready_replicas == size
        && st
            .conditions
            .iter()
            .any(|c| c.type_ == "LeaderElected" && c.status == "True")
}

/// The restarts of `pod`'s `habitat-service` container, as its status says.
async fn pod_restarts(env: &Env, pod: &str) -> i32 {
    env.api::<Pod>()
        .get(pod)
        .await
        .ok()
        .and_then(|p| p.status)
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == "habitat-service"))
        .map_or(0, |c| c.restart_count)
}

/// Whether `pod` is Ready with its container restarted since it had `restarts`.
async fn pod_ready_after(env: &Env, pod: &str, restarts: i32) -> bool {
    let Ok(p) = env.api::<Pod>().get(pod).await else {
        return false;
    };
    let status = p.status.unwrap_or_default();
    let restarted = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .any(|c| c.name == "habitat-service" && c.restart_count > restarts);
    restarted
        && status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Whether an Event `MemberDeparted` names `id`.
async fn departed_event(env: &Env, id: &str) -> bool {
    env.events().await.iter().any(|e| {
        e.reason.as_deref() == Some("MemberDeparted")
            && e.message.as_deref().is_some_and(|m| m.contains(id))
    })
}

/// The leader's member id on which every running member other than `except` agrees.
fn survivors_leader(states: &States, pods: &[String], except: &str) -> Option<String> {
    let leaders: std::collections::BTreeSet<Option<String>> = pods
        .iter()
        .filter(|p| *p != except)
        .map(|p| {
            states
                .container(p)
                .and_then(|c| census(&c.ip))
                .and_then(|c| election(&c, SG).0)
        })
        .collect();
    (leaders.len() == 1)
        .then(|| leaders.into_iter().next().flatten())
        .flatten()
}

/// What the operator and every member see now, for a failure's message.
async fn diagnose(env: &Env, states: &States, habitat: &str) -> String {
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
        let seen = c.as_ref().and_then(|c| census(&c.ip)).map(|c| {
            let g = &c["census_groups"][SG];
            let pop: Vec<String> = g["population"]
                .as_object()
                .map(|m| {
                    m.values()
                        .map(|v| {
                            format!(
                                "{}@{} alive={} confirmed={} departed={}",
                                v["member_id"],
                                v["sys"]["ip"],
                                v["alive"],
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
        let process = c.as_ref().and_then(|c| process_state(&c.ip));
        out.push_str(&format!(
            "{name} leader-label={:?} container={:?} process={process:?}\n  census: {seen:?}\n",
            p.labels().get("habitat.sh/leader"),
            c.map(|c| (c.ip, c.incarnation))
        ));
    }
    out.push_str(&format!(
        "nodes log tail:\n{}\noperator log tail:\n{}",
        support::tail(&env.nodes_log(), 20),
        support::tail(&env.operator_log(), 30)
    ));
    out
}

/// Waits until every pod of the group serves (see [`serving`]).
async fn wait_all_serving(env: &Env, states: &States, name: &str, pods: &[String]) {
    let began = Instant::now();
    while !pods.iter().all(|p| {
        states
            .container(p)
            .is_some_and(|c| serving(states, pods, &c))
    }) {
        if began.elapsed() > PATIENCE {
            panic!(
                "the group {name} does not serve as a whole:\n{}",
                diagnose(env, states, name).await
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// How a pod's member dies.
#[derive(Clone, Copy, PartialEq)]
enum Death {
    /// SIGKILL of the container's whole process tree.
    Crash,
    /// SIGKILL of `hab-sup` alone.
    SupervisorKilled,
}

/// Kills `pod`'s member as `death` says, then measures: its new member serving, the survivors'
/// failover (when it led), the dead id's `MemberDeparted` Event and the Habitat Ready with
/// `LeaderElected=True`. Asserts the new member serves within [`SERVE_BOUND`].
#[allow(clippy::too_many_arguments)]
async fn kill_and_serve_again(
    env: &Env,
    states: &States,
    sampler: &Sampler,
    name: &str,
    pods: &[String],
    pod: &str,
    death: Death,
    what: &str,
) -> Row {
    let before = states.container(pod).expect("a running container");
    let dead = member_id(&before.ip).expect("the member's id");
    let old_leader = survivors_leader(states, pods, "");
    let restarts_before = pod_restarts(env, pod).await;
    let began = Instant::now();
    match death {
        // Through the nodes, as on simulated supervisors (`tests/quorum.rs`).
        Death::Crash => support::supervisors::crash_container(env, pod).await,
        Death::SupervisorKilled => {
            states.kill_sup(pod);
        }
    }
    let (mut serve, mut failover, mut departed, mut ready) = (None, None, None, None);
    // When the pod is Ready again with its restarted container: the operator's next pass.
    let mut pod_ready = None;
    let was_leader = old_leader.as_deref() == Some(dead.as_str());
    loop {
        let at = began.elapsed();
        if serve.is_none()
            && states
                .container(pod)
                .filter(|c| c.incarnation > before.incarnation)
                .is_some_and(|c| serving(states, pods, &c))
        {
            serve = Some(at);
        }
        if was_leader
            && failover.is_none()
            && survivors_leader(states, pods, pod).is_some_and(|l| l != dead)
        {
            failover = Some(at);
        }
        if pod_ready.is_none() && pod_ready_after(env, pod, restarts_before).await {
            pod_ready = Some(at);
        }
        if departed.is_none() && departed_event(env, &dead).await {
            departed = Some(at);
        }
        if ready.is_none()
            && serve.is_some()
            && ready_with_leader(env, name, pods.len() as i32).await
        {
            ready = Some(at);
        }
        if serve.is_some() && departed.is_some() && ready.is_some() {
            break;
        }
        if at > PATIENCE {
            panic!(
                "{what}: after {PATIENCE:?}: serve {serve:?}, departed {departed:?}, \
                 ready {ready:?}:\n{}",
                diagnose(env, states, name).await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let serve = serve.expect("checked");
    // Whatever the death set off has time to show in the windows.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let windows = sampler.window(began);
    eprintln!(
        "{what}: serves again {:.1}s, pod Ready again {}s, departed {}s, Ready {:.1}s, \
         no election {:.1}s, no running leader {:.1}s",
        serve.as_secs_f64(),
        secs(pod_ready),
        secs(departed),
        ready.unwrap_or_default().as_secs_f64(),
        windows.no_election.as_secs_f64(),
        windows.no_leader.as_secs_f64()
    );
    let row = Row {
        what: what.to_string(),
        serve: Some(serve),
        failover,
        departed,
        ready: ready.expect("checked"),
        windows,
    };
    if was_leader {
        assert!(failover.is_some(), "{what}: the survivors elected a leader");
    }
    assert!(
        serve <= SERVE_BOUND,
        "{what}: the pod's new member served again only after {serve:?} (bound {SERVE_BOUND:?})"
    );
    row
}

/// (1, 3) A leader group of 3 on real supervisors: the whole process tree of a follower's pod
/// SIGKILLed, then the leader's, then `hab-sup` alone of a follower. Each time the container
/// restarts from a fresh filesystem and so joins as a new member; it must run its service
/// again within 30 s, the operator must depart the dead id (`MemberDeparted`), and the Habitat
/// must be Ready with `LeaderElected=True`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_pod_of_a_leader_group_serves_again() {
    let Some((mut env, states)) = start_real("realq-crash").await else {
        return;
    };
    let name = "crash";
    env.apply_yaml(&leader_habitat(name, 3, "kinvolk/redis-hab:v1"));
    env.wait_phase(name, "Ready", FORM).await;
    let pods: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    wait_all_serving(&env, &states, name, &pods).await;
    let sampler = Sampler::start(&env, name);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut rows = vec![];
    let leader_pod = |env: &Env| {
        let api = env.habitats();
        async move {
            api.get(name)
                .await
                .ok()
                .and_then(|h: Habitat| h.status)
                .and_then(|s| s.leader)
                .expect("a published leader")
        }
    };
    let leader = leader_pod(&env).await;
    let follower = pods.iter().find(|p| **p != leader).expect("a follower");
    rows.push(
        kill_and_serve_again(
            &env,
            &states,
            &sampler,
            name,
            &pods,
            follower,
            Death::Crash,
            "crash of a follower's pod",
        )
        .await,
    );
    wait_all_serving(&env, &states, name, &pods).await;
    let leader = leader_pod(&env).await;
    rows.push(
        kill_and_serve_again(
            &env,
            &states,
            &sampler,
            name,
            &pods,
            &leader,
            Death::Crash,
            "crash of the leader's pod",
        )
        .await,
    );
    wait_all_serving(&env, &states, name, &pods).await;
    let leader = leader_pod(&env).await;
    let follower = pods.iter().find(|p| **p != leader).expect("a follower");
    rows.push(
        kill_and_serve_again(
            &env,
            &states,
            &sampler,
            name,
            &pods,
            follower,
            Death::SupervisorKilled,
            "hab-sup killed in a follower's pod",
        )
        .await,
    );
    print_table("a leader group of 3", &rows);
    drop(sampler);
    stop_and_check_no_process_left(&mut env, &states);
}

/// The release of `image`'s package, as the nodes make it.
fn release_of(image: &str) -> String {
    let package = habitat_sandbox::nodes::supervisor::package_for(image, "redis");
    package
        .splitn(3, '/')
        .nth(2)
        .unwrap_or_default()
        .to_string()
}

/// Applies `change` to the Ready group `name` while sampling, waits until it has `count` pods
/// at `image`, its status names `image`'s release, it is Ready with a leader and every member
/// serves; returns the measured row and asserts the window is within [`WINDOW_BOUND`].
async fn change_and_measure(
    env: &Env,
    states: &States,
    name: &str,
    what: &str,
    change: &str,
    count: usize,
    image: &str,
) -> Row {
    let pods: Vec<String> = (0..count).map(|i| format!("{name}-{i}")).collect();
    let sampler = Sampler::start(env, name);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let began = Instant::now();
    env.patch(name, change);
    let release = release_of(image);
    loop {
        let done = env.all_pods_at_image(name, count, image).await
            && ready_with_leader(env, name, count as i32).await
            && env
                .habitats()
                .get(name)
                .await
                .ok()
                .and_then(|h| h.status)
                .is_some_and(|s| s.release.as_deref() == Some(release.as_str()))
            && pods.iter().all(|p| {
                states
                    .container(p)
                    .is_some_and(|c| serving(states, &pods, &c))
            });
        if done {
            break;
        }
        if began.elapsed() > ROLLOUT {
            panic!(
                "{what}: not done after {ROLLOUT:?}:\n{}",
                diagnose(env, states, name).await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ready = began.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w = sampler.window(began);
    eprintln!(
        "{what}: done {:.1}s, no election {:.1}s, no running leader {:.1}s over {} samples, \
         at most {} counted",
        ready.as_secs_f64(),
        w.no_election.as_secs_f64(),
        w.no_leader.as_secs_f64(),
        w.samples,
        w.counted
    );
    assert!(
        w.samples >= 20,
        "{what}: too few census samples: {}",
        w.samples
    );
    for (window, without) in [
        (w.no_election, "a finished election"),
        (w.no_leader, "a running leader"),
    ] {
        assert!(
            window <= WINDOW_BOUND,
            "{what}: {:.1}s without {without} (bound {WINDOW_BOUND:?})",
            window.as_secs_f64()
        );
    }
    Row {
        what: what.to_string(),
        serve: None,
        failover: None,
        departed: None,
        ready,
        windows: w,
    }
}

/// (2) Quorum through an image update of 3 members, on real supervisors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_through_an_image_update_of_three() {
    let Some((mut env, states)) = start_real("realq-update3").await else {
        return;
    };
    let name = "group3";
    env.apply_yaml(&leader_habitat(name, 3, "kinvolk/redis-hab:v1"));
    env.wait_phase(name, "Ready", FORM).await;
    let pods: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
    wait_all_serving(&env, &states, name, &pods).await;
    let row = change_and_measure(
        &env,
        &states,
        name,
        "image update of 3",
        r#"{"spec":{"image":"kinvolk/redis-hab:v2"}}"#,
        3,
        "kinvolk/redis-hab:v2",
    )
    .await;
    print_table("an image update of 3", &[row]);
    stop_and_check_no_process_left(&mut env, &states);
}

/// (2) Quorum through an image update of 5 members, then a scale-down 5 -> 3, on real
/// supervisors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_through_an_image_update_of_five_and_a_scale_down_to_three() {
    let Some((mut env, states)) = start_real("realq-update5").await else {
        return;
    };
    let name = "group5";
    env.apply_yaml(&leader_habitat(name, 5, "kinvolk/redis-hab:v1"));
    env.wait_phase(name, "Ready", FORM).await;
    let pods: Vec<String> = (0..5).map(|i| format!("{name}-{i}")).collect();
    wait_all_serving(&env, &states, name, &pods).await;
    let mut rows = vec![];
    rows.push(
        change_and_measure(
            &env,
            &states,
            name,
            "image update of 5",
            r#"{"spec":{"image":"kinvolk/redis-hab:v2"}}"#,
            5,
            "kinvolk/redis-hab:v2",
        )
        .await,
    );
    rows.push(
        change_and_measure(
            &env,
            &states,
            name,
            "scale-down 5 to 3",
            r#"{"spec":{"count":3}}"#,
            3,
            "kinvolk/redis-hab:v2",
        )
        .await,
    );
    print_table("a group of 5", &rows);
    stop_and_check_no_process_left(&mut env, &states);
}

/// (4) A member with another ring key stays out. Two consumers bind to one producer (the
/// operator puts the producer's address in their peer files): the one on the producer's ring
/// joins it (each census shows the other's group), the one with another ring's key, gossiping
/// to the same address all along, never appears in the producer's census nor the producer in
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_another_ring_key_stays_out() {
    let Some((mut env, states)) = start_real("realq-ring").await else {
        return;
    };
    let habitat = |name: &str, image: &str, service: &str, group: &str, ring: &str, bind: &str| {
        format!(
            "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: {name}}}\nspec:\n  \
             image: {image}\n  count: 1\n  service:\n    name: {service}\n    group: {group}\n    \
             ring: {{name: {ring}}}\n{bind}"
        )
    };
    let bind = "    bind:\n      - {name: db, service: postgresql, group: default}\n";
    env.apply_yaml(&habitat(
        "db",
        "kinvolk/postgresql-hab",
        "postgresql",
        "default",
        "ring-a",
        "",
    ));
    env.wait_phase("db", "Ready", FORM).await;
    env.apply_yaml(&habitat(
        "same",
        "kinvolk/bindgo-hab",
        "go-app",
        "same",
        "ring-a",
        bind,
    ));
    env.apply_yaml(&habitat(
        "other",
        "kinvolk/bindgo-hab",
        "go-app",
        "other",
        "ring-b",
        bind,
    ));
    let began = Instant::now();
    // The control: the consumer on the producer's ring joins it.
    loop {
        let joined = states.alive_in("same-0", "postgresql.default") == Some(1)
            && states.alive_in("db-0", "go-app.same") == Some(1);
        if joined {
            break;
        }
        if began.elapsed() > FORM {
            panic!(
                "the consumer on the producer's ring did not join it:\n{}",
                diagnose(&env, &states, "same").await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let joined = began.elapsed();
    // The other ring's member has gossiped to the producer's address at least as long.
    states
        .wait_container("other-0", FORM, "runs", |_| true)
        .await;
    // It gossips to the producer's address: the peer file in its root names it.
    let db_ip = states
        .container("db-0")
        .expect("the producer's container")
        .ip;
    wait_for(
        FORM,
        "the producer's address in the other ring's peer file",
        || {
            let peers = states
                .container("other-0")
                .and_then(|c| {
                    std::fs::read_to_string(c.fs_root.join("habitat-operator/peer/peer-ip")).ok()
                })
                .unwrap_or_default();
            let ok = peers.lines().any(|l| l.trim() == db_ip);
            async move { ok }
        },
    )
    .await;
    let other_up = Instant::now();
    while other_up.elapsed() < joined.max(Duration::from_secs(15)) {
        assert_eq!(
            states.alive_in("db-0", "go-app.other").unwrap_or(0),
            0,
            "the member with another ring key is in the producer's census"
        );
        assert_eq!(
            states
                .alive_in("other-0", "postgresql.default")
                .unwrap_or(0),
            0,
            "the producer is in the census of the member with another ring key"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        states.alive_in("other-0", "go-app.other").is_some(),
        "the member with another ring key answers its census:\n{}",
        diagnose(&env, &states, "other").await
    );
    eprintln!(
        "ring: the consumer on the producer's ring joined in {:.1}s; the one with another key \
         stayed out for {:.1}s",
        joined.as_secs_f64(),
        other_up.elapsed().as_secs_f64()
    );
    stop_and_check_no_process_left(&mut env, &states);
}
