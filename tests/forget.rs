//! The operator's per-Habitat state is forgotten when the Habitats are deleted: created and
//! deleted by the thousand, it returns to its baseline.

#[macro_use]
mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use habitat_operator::api::Habitat;
use kube::api::{ListParams, PostParams};

use support::{wait_for, Env, Ground};

/// `habitat_operator_habitat_state_entries` in the operator's metrics.
fn state_entries(env: &Env) -> Option<u64> {
    env.metrics()
        .lines()
        .find_map(|l| l.strip_prefix("habitat_operator_habitat_state_entries "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_of_deleted_habitats_is_forgotten() {
    require_kubectl!();
    let n: usize = std::env::var("HABITAT_FORGET_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let Some(env) = Env::start(Ground::Sandbox, "forget").await else {
        return;
    };
    wait_for(
        Duration::from_secs(30),
        "the operator's metrics",
        || async { state_entries(&env).is_some() },
    )
    .await;
    let baseline = state_entries(&env).expect("the gauge");
    let habitats = env.habitats();
    futures::stream::iter(0..n)
        .map(|i| {
            let habitats = habitats.clone();
            async move {
                let h: Habitat = serde_json::from_value(serde_json::json!({
                    "apiVersion": "habitat.sh/v1", "kind": "Habitat",
                    "metadata": {"name": format!("h{i}")},
                    "spec": {"image": "kinvolk/redis-hab", "count": 1,
                        "service": {"name": "redis", "group": format!("g{i}")}},
                }))
                .expect("a Habitat");
                habitats
                    .create(&PostParams::default(), &h)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("the Habitats created");
    let timeout = Duration::from_secs(600);
    wait_for(timeout, "state kept about every Habitat", || async {
        state_entries(&env).is_some_and(|e| e >= baseline + n as u64)
    })
    .await;
    env.kubectl_ok(&["delete", "habitats", "--all", "--wait=false"]);
    wait_for(timeout, "every Habitat gone", || async {
        habitats
            .list_metadata(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = state_entries(&env);
        if now == Some(baseline) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the state is {now:?} entries, not back at its baseline {baseline}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
