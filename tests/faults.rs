//! Injected API faults (sandbox ground only: faults are a sandbox feature). Many Habitats
//! converge while the operator's requests get 20% server errors (500, 503, 429 with
//! Retry-After), 10% conflicts on writes, expired resourceVersions, a watch cut every 5 s and
//! 0-50 ms of added latency. Every Habitat reaches Ready with exactly its children, every
//! generated ring key exists once, no child is orphaned, the operator never panics, and its
//! backoff histogram shows delays that grow and stay under the cap.
//!
//! `HABITAT_FAULTS_N` sets the number of Habitats (default 200, as issue 12 asks: 133 s in a
//! debug build on an otherwise idle 2-core machine, 150 took 115 s).

#[macro_use]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Resource, ResourceExt};
use support::{Env, Ground};

/// The faults of the issue: the operator (User-Agent habitat-operator/...) is hit; the test
/// driver (kubectl and the assertions) is not, and the simulated nodes never are.
const FAULTS: &str =
    "server-errors=0.2,conflicts=0.1,expired=0.1,watch-cut=5s,latency=0-50ms,only=habitat-operator";

/// The backoff cap of src/reconcile/requeue.rs (`Backoffs::default`).
const CAP_SECONDS: f64 = 300.0;

fn size() -> usize {
    std::env::var("HABITAT_FAULTS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Habitat `i`: every fifth a leader group of 3, the rest standalone of 1; every seventh joins
/// one of four generated rings (shared: their keys are created concurrently).
fn manifest(i: usize) -> String {
    let (topology, count) = if i % 5 == 4 {
        ("leader", 3)
    } else {
        ("standalone", 1)
    };
    let ring = if i % 7 == 0 {
        format!("\n    ring: {{name: ring-{}}}", (i / 7) % 4)
    } else {
        String::new()
    };
    format!(
        "---\napiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: f-{i}}}\nspec:\n  image: kinvolk/redis-hab\n  count: {count}\n  service:\n    name: redis\n    group: g{i}\n    topology: {topology}{ring}\n"
    )
}

/// Owner uid of `o` when a Habitat owns it.
fn habitat_owner<K: Resource>(o: &K) -> Option<String> {
    o.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.kind == "Habitat")
        .map(|r| r.uid.clone())
}

/// Counts of the Habitat-owned objects of kind K per owner uid, failing on orphans.
async fn owned<K>(
    env: &Env,
    uids: &BTreeMap<String, String>,
    kind: &str,
) -> BTreeMap<String, Vec<String>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let list = env
        .api::<K>()
        .list(&ListParams::default())
        .await
        .expect("list");
    for o in list.items {
        if let Some(uid) = habitat_owner(&o) {
            let owner = uids.get(&uid).unwrap_or_else(|| {
                panic!(
                    "orphaned {kind} {}: its Habitat {uid} is gone",
                    o.name_any()
                )
            });
            out.entry(owner.clone()).or_default().push(o.name_any());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_habitat_converges_under_injected_api_faults() {
    require_kubectl!();
    let n = size();
    let Some(mut env) =
        Env::start_full(Ground::Sandbox, "faults", true, &["--faults", FAULTS]).await
    else {
        return;
    };
    let manifests: String = (0..n).map(manifest).collect();
    let path = env.temp_dir().join("habitats.yaml");
    std::fs::write(&path, manifests).expect("write manifests");
    let start = Instant::now();
    env.kubectl_ok(&["apply", "-f", path.to_str().unwrap_or_default()]);

    let deadline = Duration::from_secs(120 + 2 * n as u64);
    let api = env.habitats();
    let ready = loop {
        env.assert_processes_running("Habitats converge under faults");
        let list = api
            .list(&ListParams::default())
            .await
            .expect("list Habitats");
        let ready = list
            .items
            .iter()
            .filter(|h| {
                h.phase_str() == Some("Ready")
                    && h.status.as_ref().and_then(|s| s.observed_generation)
                        == h.metadata.generation
            })
            .count();
        if ready == n {
            break list.items;
        }
        if start.elapsed() > deadline {
            let stuck: Vec<String> = list
                .items
                .iter()
                .filter(|h| h.phase_str() != Some("Ready"))
                .take(10)
                .map(|h| format!("{}: {:?}", h.name_any(), h.status))
                .collect();
            panic!(
                "only {ready}/{n} Ready after {:?}; some not Ready:\n{}\noperator log tail:\n{}",
                start.elapsed(),
                stuck.join("\n"),
                support::tail(&env.operator_log(), 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let to_ready = start.elapsed();

    // Children: exactly the expected set per Habitat, none orphaned.
    let uids: BTreeMap<String, String> = ready
        .iter()
        .map(|h| (h.uid().unwrap_or_default(), h.name_any()))
        .collect();
    let sts = owned::<StatefulSet>(&env, &uids, "StatefulSet").await;
    let cms = owned::<ConfigMap>(&env, &uids, "ConfigMap").await;
    let svcs = owned::<Service>(&env, &uids, "Service").await;
    let pdbs = owned::<PodDisruptionBudget>(&env, &uids, "PodDisruptionBudget").await;
    for (i, name) in (0..n).map(|i| (i, format!("f-{i}"))) {
        let leader = i % 5 == 4;
        let sorted = |m: &BTreeMap<String, Vec<String>>| {
            let mut v = m.get(&name).cloned().unwrap_or_default();
            v.sort();
            v
        };
        assert_eq!(sorted(&sts), vec![name.clone()], "{name}'s StatefulSets");
        assert_eq!(
            sorted(&cms),
            vec![format!("{name}-peer")],
            "{name}'s ConfigMaps"
        );
        let want_svcs = if leader {
            vec![name.clone(), format!("{name}-leader")]
        } else {
            vec![name.clone()]
        };
        assert_eq!(sorted(&svcs), want_svcs, "{name}'s Services");
        assert_eq!(sorted(&pdbs).len(), usize::from(leader), "{name}'s PDBs");
    }

    // Generated ring keys: one Secret per ring, however many Habitats raced to create it.
    let secrets = env
        .api::<Secret>()
        .list(&ListParams::default().labels("habitat.sh/ring"))
        .await
        .expect("list Secrets")
        .items;
    let mut per_ring: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &secrets {
        let ring = s
            .labels()
            .get("habitat.sh/ring")
            .cloned()
            .unwrap_or_default();
        per_ring.entry(ring).or_default().push(s.name_any());
    }
    let rings: BTreeSet<String> = (0..n)
        .filter(|i| i % 7 == 0)
        .map(|i| format!("ring-{}", (i / 7) % 4))
        .collect();
    assert_eq!(
        per_ring.keys().cloned().collect::<BTreeSet<_>>(),
        rings,
        "rings with a generated key: {per_ring:?}"
    );
    for (ring, keys) in &per_ring {
        assert_eq!(keys.len(), 1, "ring {ring} has keys {keys:?}");
    }

    let log = env.operator_log();
    assert!(
        !log.contains("panicked"),
        "the operator panicked:\n{}",
        support::tail(&log, 40)
    );

    // Backoff: delays grow past the first interval, and none exceeds the cap.
    let metrics = env.metrics();
    let b = support::prometheus::buckets(&metrics, "habitat_operator_requeue_backoff_seconds");
    let count = |le: f64| b.iter().find(|(l, _)| *l >= le).map_or(0, |(_, c)| *c);
    let total = count(f64::INFINITY);
    assert!(total > 0, "no backoff recorded:\n{metrics}");
    assert!(
        count(1.0) < total,
        "no delay grew beyond 1 s (the first is about 0.5 s): {b:?}"
    );
    assert_eq!(
        count(CAP_SECONDS),
        total,
        "a delay exceeded the {CAP_SECONDS} s cap: {b:?}"
    );

    let faults: serde_json::Value = {
        let kc = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
        let server = kc
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("server in kubeconfig")
            .to_string();
        ureq::get(&format!("{server}/debug/faults"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .expect("fault counts")
    };
    assert!(faults["requests"].as_u64() > Some(0), "{faults}");
    assert!(faults["watchCuts"].as_u64() > Some(0), "{faults}");
    eprintln!(
        "{n} Habitats Ready in {:.1} s under {FAULTS}\ninjected: {faults}\nbackoff buckets (le, cumulative): {b:?}\nreconcile errors: {}",
        to_ready.as_secs_f64(),
        metrics
            .lines()
            .filter(|l| l.starts_with("habitat_operator_reconcile_errors_total")
                || l.starts_with("habitat_operator_reconciles_total"))
            .collect::<Vec<_>>()
            .join("; ")
    );
}
