//! Scale benchmark: N Habitats created at once in the sandbox, with the operator running in the
//! same process. Prints the time until every Habitat is Ready, reconcile counts and latency
//! quantiles from the operator's own metrics, and the API writes made while settled.
//!
//! `cargo bench --bench scale -- 200` (default 50). CI runs it small:
//! `cargo bench --profile dev --bench scale -- 10`. Compare numbers from one run on one machine.

use std::time::{Duration, Instant};

use habitat_operator::api::Habitat;
use habitat_operator::runtime::cli::RunArgs;
use habitat_operator::runtime::telemetry::LogFormat;
use habitat_sandbox::{Options, Sandbox};
use kube::api::ListParams;
use kube::{Api, Client, CustomResourceExt};

fn quantile(metrics: &str, name: &str, q: f64) -> Option<f64> {
    let buckets: Vec<(f64, f64)> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, count))
        })
        .collect();
    let total = buckets.last()?.1;
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| *le)
}

fn counter(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn global_resource_version(client: &Client) -> u64 {
    let api: Api<Habitat> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.expect("list");
    list.metadata
        .resource_version
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(50);
    let sandbox = Sandbox::start(Options::default()).await.expect("sandbox");
    let client = habitat_operator::runtime::runner::client_from_yaml(&sandbox.kubeconfig_yaml())
        .await
        .expect("client");
    sandbox
        .apply_yaml(&serde_yaml::to_string(&Habitat::crd()).expect("crd"))
        .await
        .expect("install the CRD");

    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let args = RunArgs::embedded(metrics_addr, "error", LogFormat::Text);
    let operator = client.clone();
    tokio::spawn(async move { habitat_operator::runtime::runner::run(operator, &args).await });

    let mut manifests = String::new();
    for i in 0..n {
        let topology = if i % 5 == 4 { "leader" } else { "standalone" };
        let count = if topology == "leader" { 3 } else { 1 };
        manifests.push_str(&format!(
            "---\napiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: bench-{i}}}\nspec:\n  image: kinvolk/redis-hab\n  count: {count}\n  service: {{name: redis, group: g{i}, topology: {topology}}}\n"
        ));
    }
    let start = Instant::now();
    sandbox.apply_yaml(&manifests).await.expect("apply");
    let api: Api<Habitat> = Api::all(client.clone());
    let deadline = Duration::from_secs(60 + 2 * n as u64);
    loop {
        let list = api.list(&ListParams::default()).await.expect("list");
        let ready = list
            .items
            .iter()
            .filter(|h| h.phase_str() == Some("Ready"))
            .count();
        if ready == n {
            break;
        }
        assert!(
            start.elapsed() < deadline,
            "only {ready}/{n} Ready after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let to_ready = start.elapsed();
    let text = ureq::get(&format!("http://{metrics_addr}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();

    // Quiet period: a settled fleet should cost (almost) no writes; leader groups re-read the
    // census every 10 s but write only when something changed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = global_resource_version(&client).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = global_resource_version(&client)
        .await
        .saturating_sub(before);

    let pods: usize = (0..n).map(|i| if i % 5 == 4 { 3 } else { 1 }).sum();
    println!(
        "habitats                         {n} ({pods} pods, {} leader groups)",
        n / 5
    );
    println!(
        "time to all Ready                {:.2} s",
        to_ready.as_secs_f64()
    );
    println!(
        "Habitats Ready per second        {:.1}",
        n as f64 / to_ready.as_secs_f64()
    );
    let ok = counter(
        &text,
        "habitat_operator_reconciles_total{result=\"success\"}",
    );
    let err = counter(&text, "habitat_operator_reconciles_total{result=\"error\"}");
    println!(
        "reconciles (success / error)     {ok} / {err}  ({:.1} per Habitat)",
        (ok + err) / n as f64
    );
    let name = "habitat_operator_reconcile_duration_seconds";
    for q in [0.5, 0.9, 0.99] {
        let v = quantile(&text, name, q)
            .map(|s| format!("<= {:.1} ms", s * 1000.0))
            .unwrap_or_else(|| "-".into());
        println!("reconcile latency p{:<3}           {v}", (q * 100.0) as u32);
    }
    println!("API writes in 5 s while settled  {writes}");
    sandbox.shutdown().await;
}
