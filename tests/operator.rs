//! The operator process as a whole: a settled Habitat costs no writes, with `--leader-elect`
//! exactly one replica acts, and it runs on one thread.

#[macro_use]
mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt;
use support::{timeout, wait_for, Env, Ground};

async fn versions(env: &Env, name: &str) -> Vec<Option<String>> {
    vec![
        env.habitats()
            .get(name)
            .await
            .ok()
            .and_then(|o| o.resource_version()),
        env.api::<StatefulSet>()
            .get(name)
            .await
            .ok()
            .and_then(|o| o.resource_version()),
        env.api::<ConfigMap>()
            .get(&format!("{name}-peer"))
            .await
            .ok()
            .and_then(|o| o.resource_version()),
        env.api::<Service>()
            .get(name)
            .await
            .ok()
            .and_then(|o| o.resource_version()),
    ]
}

async fn a_settled_habitat_makes_no_writes_even_when_reconciled_again(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "quiet");
    env.apply_example("leader");
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // An annotation is a change the operator is woken by but has nothing to do about.
    env.kubectl_ok(&["annotate", "habitat", "example-leader", "note=poke"]);
    let before = versions(&env, "example-leader").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        versions(&env, "example-leader").await,
        before,
        "a settled Habitat was written to"
    );
    let reconciles: f64 = env
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix("habitat_operator_reconciles_total{result=\"success\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(reconciles > 0.0);
}

fn ready(addr: &str) -> bool {
    ureq::get(&format!("http://{addr}/readyz"))
        .call()
        .is_ok_and(|r| r.status() == 200)
}

async fn with_leader_election_exactly_one_replica_is_ready_and_acts(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "lease", false);
    let ns = env.namespace.clone();
    let flags = ["--leader-elect", "--leader-elect-namespace", ns.as_str()];
    let (first, a) = env.extra_operator(&flags);
    let (second, b) = env.extra_operator(&flags);
    wait_for(Duration::from_secs(20), "one replica to lead", || async {
        ready(&a) || ready(&b)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        ready(&a) != ready(&b),
        "exactly one replica must be ready (a={}, b={})",
        ready(&a),
        ready(&b)
    );
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let lease = env.kubectl_ok(&[
        "get",
        "lease",
        "habitat-operator",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert!(!lease.is_empty());
    // The leader goes away; the standby takes over once the lease expires (15 s).
    let (leader, standby) = if ready(&a) { (first, b) } else { (second, a) };
    drop(leader);
    wait_for(
        Duration::from_secs(40),
        "the standby to take over",
        || async { ready(&standby) },
    )
    .await;
    env.patch("example-standalone", r#"{"spec":{"count":2}}"#);
    let h = env
        .wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    assert_eq!(
        h.status.and_then(|s| s.ready).as_deref(),
        Some("2/2"),
        "the new leader does not act"
    );
}

async fn the_operator_reports_ready_once_its_caches_are_synced(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "readyz");
    wait_for(Duration::from_secs(15), "/readyz to answer 200", || async {
        ready(&env.metrics)
    })
    .await;
    let health = ureq::get(&format!("http://{}/healthz", env.metrics))
        .call()
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    assert_eq!(health, 200);
}

/// `run` keeps its controller, its watches and its HTTP connections on one thread: kube's
/// Controller polls every reconcile on the thread that awaits it, and with worker threads each
/// request crossed threads twice (context switches were 13% of the operator's CPU at N = 1000).
async fn the_operator_runs_on_one_thread(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "thread");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let pid = env.operator_pid().expect("the operator runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
    let Ok(status) = status else {
        eprintln!("skipped: no /proc on this system");
        return;
    };
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(str::trim);
    assert_eq!(threads, Some("1"), "the operator's threads:\n{status}");
}

on_both_grounds!(
    a_settled_habitat_makes_no_writes_even_when_reconciled_again,
    with_leader_election_exactly_one_replica_is_ready_and_acts,
    the_operator_reports_ready_once_its_caches_are_synced,
    the_operator_runs_on_one_thread,
);
