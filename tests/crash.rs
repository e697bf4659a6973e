//! Crash safety: the operator process is SIGKILLed at random moments while many Habitats
//! converge, and restarted each time. Every Habitat reaches Ready; every ring key is created
//! once and never replaced; every phase history a watcher records is a legal path of the
//! machine (`habitat_machine::check_history`).
//!
//! `HABITAT_CRASH_N` sets the number of Habitats (default below), `HABITAT_CRASH_KILLS` the
//! number of kills (default 10).

#[macro_use]
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use habitat_machine::{check_history, Phase};
use habitat_operator::api::{Habitat, LABEL_RING};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::ResourceExt;
use rand::Rng;
use support::Ground;

/// Habitats converging while the operator is killed. Measured on the 2-core CI machine in a
/// debug build: see the CHANGELOG.
const DEFAULT_N: usize = 200;
const DEFAULT_KILLS: usize = 10;
/// Every `RING_EVERY`-th Habitat joins one of `RINGS` shared rings with a generated key.
const RING_EVERY: usize = 4;
const RINGS: usize = 3;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn habitat_yaml(i: usize) -> String {
    let ring = if i % RING_EVERY == 0 {
        format!(", ring: {{name: crash-ring-{}}}", (i / RING_EVERY) % RINGS)
    } else {
        String::new()
    };
    format!(
        "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: h{i:03}}}\nspec:\n  image: kinvolk/redis-hab\n  count: 1\n  service: {{name: redis, group: h{i:03}{ring}}}\n"
    )
}

/// The `.status.phase` values of each Habitat (by uid), in the order a watch saw them, with
/// repeats collapsed.
type Histories = Arc<Mutex<BTreeMap<String, (String, Vec<String>)>>>;

fn record_phases(env: &support::Env) -> (Histories, tokio::task::JoinHandle<()>) {
    let histories: Histories = Arc::default();
    let stream = watcher(env.habitats(), watcher::Config::default());
    let h = histories.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let obj: Habitat = match event {
                Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => o,
                _ => continue,
            };
            let Some(phase) = obj.phase_str().map(str::to_string) else {
                continue;
            };
            let mut all = h.lock().expect("lock");
            let entry = all
                .entry(obj.uid().unwrap_or_default())
                .or_insert_with(|| (obj.name_any(), Vec::new()));
            if entry.1.last() != Some(&phase) {
                entry.1.push(phase);
            }
        }
    });
    (histories, task)
}

/// One ring Secret as a watch saw it.
#[derive(Debug)]
struct SeenKey {
    ring: String,
    name: String,
    data: Option<BTreeMap<String, k8s_openapi::ByteString>>,
    changed: bool,
    deleted: bool,
}

type Keys = Arc<Mutex<BTreeMap<String, SeenKey>>>;

fn record_ring_keys(env: &support::Env) -> (Keys, tokio::task::JoinHandle<()>) {
    let keys: Keys = Arc::default();
    let stream = watcher(
        env.api::<Secret>(),
        watcher::Config::default().labels(LABEL_RING),
    );
    let k = keys.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let (s, deleted): (Secret, bool) = match event {
                Ok(watcher::Event::Apply(s)) | Ok(watcher::Event::InitApply(s)) => (s, false),
                Ok(watcher::Event::Delete(s)) => (s, true),
                _ => continue,
            };
            let mut all = k.lock().expect("lock");
            let entry = all
                .entry(s.uid().unwrap_or_default())
                .or_insert_with(|| SeenKey {
                    ring: s.labels().get(LABEL_RING).cloned().unwrap_or_default(),
                    name: s.name_any(),
                    data: s.data.clone(),
                    changed: false,
                    deleted: false,
                });
            entry.changed |= entry.data != s.data;
            entry.deleted |= deleted;
        }
    });
    (keys, task)
}

async fn ready_count(env: &support::Env) -> usize {
    env.habitats()
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|h| {
                    h.phase_str() == Some("Ready")
                        && h.status.as_ref().and_then(|s| s.observed_generation)
                            == h.metadata.generation
                })
                .count()
        })
        .unwrap_or(0)
}

async fn killed_at_random_moments_every_habitat_converges_and_nothing_is_lost(ground: Ground) {
    require_kubectl!();
    let n = env_usize("HABITAT_CRASH_N", DEFAULT_N);
    let kills = env_usize("HABITAT_CRASH_KILLS", DEFAULT_KILLS);
    let mut env = env_on!(ground, "crash");
    let (histories, phase_task) = record_phases(&env);
    let (keys, key_task) = record_ring_keys(&env);

    let start = Instant::now();
    let manifests: Vec<String> = (0..n).map(habitat_yaml).collect();
    let file = env.temp_dir().join("habitats.yaml");
    std::fs::write(&file, manifests.join("---\n")).expect("write the manifests");
    // Created while the kills go on (killed if the test fails first).
    let mut apply = support::Proc(
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .args(["-n", &env.namespace, "apply", "-f"])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("kubectl apply"),
        "kubectl apply",
    );

    // Kill at random moments, 0.2 to 2.5 s apart (some while the new process is still
    // syncing its caches), restarting each time.
    let mut ready_at_kill = Vec::new();
    for _ in 0..kills {
        let wait = rand::thread_rng().gen_range(200..2500);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        env.assert_processes_running("the Habitats converge");
        env.stop_operator(); // Child::kill: SIGKILL
        ready_at_kill.push(ready_count(&env).await);
        env.start_operator();
    }
    let killed_by = start.elapsed();
    assert!(
        apply.0.wait().expect("kubectl apply").success(),
        "kubectl apply failed"
    );

    let deadline = Duration::from_secs(if env.is_real() { 600 } else { 300 });
    let mut ready = 0;
    while start.elapsed() < deadline {
        ready = ready_count(&env).await;
        if ready == n {
            break;
        }
        env.assert_processes_running("the Habitats converge after the kills");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged = start.elapsed();
    assert_eq!(
        ready,
        n,
        "{ready} of {n} Habitats Ready after {converged:?}; operator log tail:\n{}",
        support::tail(&env.operator_log(), 40)
    );
    // Let the watches catch up with the last writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    phase_task.abort();
    key_task.abort();

    // Phase histories: every one is a legal path and ends Ready.
    let histories = std::mem::take(&mut *histories.lock().expect("lock"));
    assert_eq!(histories.len(), n, "a phase history for every Habitat");
    let mut transitions = 0;
    let mut shapes: BTreeMap<String, usize> = BTreeMap::new();
    for (name, phases) in histories.values() {
        *shapes.entry(phases.join(">")).or_default() += 1;
        let parsed: Vec<Phase> = phases
            .iter()
            .map(|p| p.parse().unwrap_or_else(|e| panic!("{name}: {e}")))
            .collect();
        if let Err((from, to)) = check_history(&parsed) {
            panic!("{name}: {from} -> {to} is not a path of the machine; history {phases:?}");
        }
        assert_eq!(parsed.last(), Some(&Phase::Ready), "{name}: {phases:?}");
        // No spec changes here: Updating would be a spurious rollout.
        assert!(
            !parsed.contains(&Phase::Updating),
            "{name} went through Updating without a spec change: {phases:?}"
        );
        transitions += parsed.len();
    }

    // Ring keys: one Secret per ring, created once, never changed or deleted.
    let keys = std::mem::take(&mut *keys.lock().expect("lock"));
    let mut per_ring: BTreeMap<&str, Vec<&SeenKey>> = BTreeMap::new();
    for k in keys.values() {
        per_ring.entry(&k.ring).or_default().push(k);
    }
    let rings_used = n.div_ceil(RING_EVERY).min(RINGS);
    assert_eq!(
        per_ring.len(),
        rings_used,
        "one key per ring: {:?}",
        per_ring.keys()
    );
    for (ring, seen) in &per_ring {
        let names: Vec<&str> = seen.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(
            seen.len(),
            1,
            "ring {ring} got {} keys: {names:?}",
            seen.len()
        );
        assert!(!seen[0].changed, "the key of ring {ring} was replaced");
        assert!(!seen[0].deleted, "the key of ring {ring} was deleted");
    }
    let now: Vec<Secret> = env
        .api::<Secret>()
        .list(&kube::api::ListParams::default().labels(LABEL_RING))
        .await
        .expect("list ring Secrets")
        .items;
    for s in &now {
        let seen = keys
            .get(&s.uid().unwrap_or_default())
            .expect("every ring Secret was seen by the watch");
        assert_eq!(seen.data, s.data, "{} unchanged", s.name_any());
    }
    assert_eq!(now.len(), rings_used);

    eprintln!(
        "crash: N={n} kills={kills} (Ready at each kill: {ready_at_kill:?}) killed within {killed_by:?}, \
         all Ready after {converged:?}; ring keys {} for {rings_used} rings, {} histories \
         ({transitions} phases) checked: {shapes:?}",
        now.len(),
        histories.len()
    );
}

on_both_grounds!(killed_at_random_moments_every_habitat_converges_and_nothing_is_lost);
