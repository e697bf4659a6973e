//! The operator's own cost on the real control plane (issue 10, items 3 to 5): N standalone
//! Habitats with one replica each, optionally beside many unrelated large Secrets, until all are
//! Ready. Reads the API server's audit log for the operator's requests, and `/proc` for the
//! operator process's peak RSS and CPU seconds.
//!
//! `HABITAT_OPCOST_N` (default 10) Habitats, `HABITAT_OPCOST_SECRETS` (default 0) unrelated
//! Secrets of 100 KiB in the watched namespace:
//! `HABITAT_OPCOST_N=1000 HABITAT_OPCOST_SECRETS=2000 cargo test --release --test opcost -- --nocapture`.
//!
//! It fails when the writes per Habitat exceed 1.1 times the minimal set (finalizer 1, peer
//! ConfigMap 2, StatefulSet 1, Service 1, status 2), Events aside, or when one pass records more
//! than one transition Event.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use habitat_operator::api::Habitat;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::Value;
use support::control_plane::{ControlPlane, OPERATOR_USER};
use support::Ground;

/// Writes per standalone Habitat with one replica on its way to Ready.
const MINIMAL_WRITES: f64 = 7.0;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak resident set (KiB) and CPU seconds (user + system) of process `pid`.
fn process_cost(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (in parentheses): utime and stime are the 12th and 13th.
    let after = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    (hwm, ticks / 100.0)
}

/// The operator's requests in `ns` from the audit log: one per request (ResponseComplete).
/// The API server rotates its log at 100 MB (`audit-TIME.log` beside `audit.log`): all are read.
fn operator_requests(cp: &ControlPlane, ns: &str) -> Vec<Value> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(cp.dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
    });
    let text: String = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| e["user"]["username"] == OPERATOR_USER)
        .filter(|e| e["objectRef"]["namespace"] == ns)
        .collect()
}

fn resource(e: &Value) -> String {
    let r = e["objectRef"]["resource"].as_str().unwrap_or_default();
    match e["objectRef"]["subresource"].as_str() {
        Some(sub) => format!("{r}/{sub}"),
        None => r.to_string(),
    }
}

fn is_write(e: &Value) -> bool {
    matches!(
        e["verb"].as_str(),
        Some("create" | "update" | "patch" | "delete")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_of_standalone_habitats() {
    let Some(cp) = ControlPlane::shared() else {
        eprintln!("skipped: KUBEBUILDER_ASSETS is not set");
        return;
    };
    let n = env_usize("HABITAT_OPCOST_N", 10);
    let secrets = env_usize("HABITAT_OPCOST_SECRETS", 0);
    let mut env = match support::Env::start_with(Ground::Real, "opcost", false).await {
        Some(env) => env,
        None => return,
    };
    let ns = env.namespace.clone();

    // Unrelated Secrets, as Helm keeps its releases: 100 KiB each, in the watched namespace.
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &ns);
    let blob = ByteString(vec![b'x'; 100 * 1024]);
    let created = futures::stream::iter(0..secrets)
        .map(|i| {
            let api = api.clone();
            let blob = blob.clone();
            async move {
                let mut s = Secret::default();
                s.metadata.name = Some(format!("sh.helm.release.v1.unrelated-{i}.v1"));
                s.type_ = Some("helm.sh/release.v1".into());
                s.data = Some([("release".to_string(), blob)].into());
                api.create(&PostParams::default(), &s).await.is_ok()
            }
        })
        .buffer_unordered(16)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    assert_eq!(created, secrets, "every unrelated Secret is created");

    let (mut operator, metrics) = env.extra_operator(&["--log-level", "warn"]);
    env.metrics = metrics;
    let pid = operator.0.id();
    let manifests: String = (0..n)
        .map(|i| {
            format!(
                "---\napiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: cost-{i}}}\nspec:\n  image: kinvolk/redis-hab\n  count: 1\n  service: {{name: redis, group: g{i}}}\n"
            )
        })
        .collect();
    let file = env.temp_dir().join("habitats.yaml");
    std::fs::write(&file, manifests).expect("write the manifests");
    let start = Instant::now();
    env.kubectl_ok(&["create", "-f", file.to_str().unwrap_or_default()]);
    let habitats: Api<Habitat> = env.habitats();
    let deadline = Duration::from_secs(120 + n as u64);
    loop {
        let list = habitats
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let ready = list
            .iter()
            .filter(|h| h.phase_str() == Some("Ready"))
            .count();
        if ready == n {
            break;
        }
        assert!(
            start.elapsed() < deadline,
            "only {ready}/{n} Ready after {:?}; operator log:\n{}",
            start.elapsed(),
            support::tail(&env.operator_log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let to_ready = start.elapsed();
    // Let the last status writes and Events land in the audit log.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss_kib, cpu_s) = process_cost(pid);
    operator.assert_running("measuring", &env.temp_dir().join("operator.log"));

    let requests = operator_requests(cp, &ns);
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for e in &requests {
        *by_kind
            .entry(format!(
                "{} {}",
                e["verb"].as_str().unwrap_or_default(),
                resource(e)
            ))
            .or_default() += 1;
    }
    let writes = requests
        .iter()
        .filter(|e| is_write(e) && resource(e) != "events")
        .count();
    let events = requests
        .iter()
        .filter(|e| is_write(e) && resource(e) == "events")
        .count();
    let per = |k: usize| k as f64 / n as f64;
    println!("opcost: N = {n}, unrelated Secrets = {secrets}");
    println!(
        "opcost: time to all Ready        {:.1} s",
        to_ready.as_secs_f64()
    );
    println!(
        "opcost: operator peak RSS        {:.1} MiB",
        rss_kib as f64 / 1024.0
    );
    println!(
        "opcost: operator CPU             {cpu_s:.2} s ({:.2} ms per Habitat)",
        1000.0 * cpu_s / n as f64
    );
    println!(
        "opcost: writes per Habitat       {:.2} (minimal {MINIMAL_WRITES}), Events {:.2}",
        per(writes),
        per(events)
    );
    let lists: Vec<&str> = requests
        .iter()
        .filter(|e| e["verb"] == "list")
        .filter_map(|e| e["requestURI"].as_str())
        .collect();
    println!("opcost: lists {lists:?}");
    for (k, v) in &by_kind {
        println!("opcost:   {k:<40} {v:>6} ({:.2} per Habitat)", per(*v));
    }
    assert!(
        per(writes) <= 1.1 * MINIMAL_WRITES,
        "{:.2} writes per Habitat, more than 1.1 x {MINIMAL_WRITES}: {by_kind:?}",
        per(writes)
    );
    assert!(
        per(events) <= 2.0,
        "{:.2} Events per Habitat: one per pass (the first pass to Deploying, the last to Ready)",
        per(events)
    );
}
