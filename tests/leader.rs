//! Leader topology end to end: the elected leader is published (status, pod label, Service),
//! follows re-elections, and rollouts replace followers one at a time and the leader last.

#[macro_use]
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher;
use kube::ResourceExt;
use support::{timeout, wait_for, Env, Ground};

fn leader_label(p: &Pod) -> bool {
    p.labels()
        .get("habitat.sh/leader")
        .is_some_and(|v| v == "true")
}

/// The published leader, once exactly that pod carries the label.
async fn published_leader(env: &Env, habitat: &str) -> Option<String> {
    published_leader_pod(env, habitat)
        .await
        .map(|p| p.name_any())
}

/// The published leader's pod, read with the labels in one listing, once exactly that pod
/// carries the leader label and is not being deleted.
async fn published_leader_pod(env: &Env, habitat: &str) -> Option<Pod> {
    let h = env.habitats().get(habitat).await.ok()?;
    let leader = h.status.as_ref()?.leader.clone()?;
    let pods = env.pods(habitat).await;
    let labelled: Vec<&Pod> = pods.iter().filter(|p| leader_label(p)).collect();
    match labelled.as_slice() {
        [p] if p.name_any() == leader && p.metadata.deletion_timestamp.is_none() => {
            Some((*p).clone())
        }
        _ => None,
    }
}

fn leader_changes(env: &Env) -> f64 {
    env.metrics()
        .lines()
        .find_map(|l| l.strip_prefix("habitat_operator_leader_changes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn leader_habitat(name: &str, count: u32) -> String {
    format!("apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {{name: {name}}}\nspec:\n  image: kinvolk/redis-hab\n  count: {count}\n  service: {{name: redis, topology: leader}}\n")
}

async fn the_leader_is_published_and_follows_a_re_election_when_it_dies(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "leader-kill");
    env.apply_example("leader");
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    let first = published_leader(&env, "example-leader")
        .await
        .expect("a published leader");

    let svc = env
        .api::<Service>()
        .get("example-leader-leader")
        .await
        .expect("leader Service");
    let selector = svc.spec.and_then(|s| s.selector).unwrap_or_default();
    assert_eq!(
        selector.get("habitat.sh/leader").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        selector.get("habitat.sh/name").map(String::as_str),
        Some("example-leader")
    );
    let pdb = env
        .api::<PodDisruptionBudget>()
        .get("example-leader")
        .await
        .expect("a PodDisruptionBudget");
    assert_eq!(
        pdb.spec.and_then(|s| s.max_unavailable),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );

    let old_uid = env
        .pods("example-leader")
        .await
        .iter()
        .find(|p| p.name_any() == first)
        .and_then(|p| p.uid());
    env.kubectl_ok(&["delete", "pod", &first, "--wait=false"]);
    wait_for(timeout(&env), "a new leader to be published", || async {
        published_leader_pod(&env, "example-leader")
            .await
            .is_some_and(|p| p.uid() != old_uid)
    })
    .await;
    env.wait_phase("example-leader", "Ready", timeout(&env))
        .await;
    // The first publication and the re-election.
    wait_for(
        timeout(&env),
        "two leader changes to be counted",
        || async { leader_changes(&env) >= 2.0 },
    )
    .await;
}

async fn a_count_below_three_is_warned_about_and_a_lone_member_never_elects(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "leader-small");
    env.apply_yaml(&leader_habitat("lone", 1));
    let start = std::time::Instant::now();
    let h = loop {
        let h = env.habitats().get("lone").await.expect("get");
        let c = h.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "LeaderElected")
                .cloned()
        });
        if c.as_ref().is_some_and(|c| c.reason == "NoQuorum") {
            break c.expect("condition");
        }
        assert!(
            start.elapsed() < timeout(&env),
            "no NoQuorum condition: {:?}",
            h.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(h.status, "False");
    assert!(
        h.message
            .contains("warning: a leader group needs at least 3 members"),
        "{}",
        h.message
    );
    assert_eq!(
        env.habitats().get("lone").await.expect("get").phase_str(),
        Some("Deploying")
    );
}

/// Records the order in which pods start terminating, once per pod incarnation.
fn record_deletions(env: &Env) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(BTreeMap::<String, ()>::new()));
    let stream = watcher(env.api::<Pod>(), watcher::Config::default());
    let (o, s) = (order.clone(), seen.clone());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let pods: Vec<(Pod, bool)> = match event {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => vec![(p, false)],
                Ok(watcher::Event::Delete(p)) => vec![(p, true)],
                _ => vec![],
            };
            for (p, deleted) in pods {
                if deleted || p.metadata.deletion_timestamp.is_some() {
                    let uid = p.uid().unwrap_or_default();
                    let mut seen = s.lock().expect("lock");
                    if seen.insert(uid, ()).is_none() {
                        o.lock().expect("lock").push(p.name_any());
                    }
                }
            }
        }
    });
    (order, task)
}

async fn an_update_of_five_members_restarts_followers_one_at_a_time_and_the_leader_last(
    ground: Ground,
) {
    require_kubectl!();
    let env = env_on!(ground, "leader-update");
    env.apply_yaml(&leader_habitat("group", 5));
    env.wait_phase("group", "Ready", timeout(&env)).await;
    let leader = published_leader(&env, "group").await.expect("a leader");
    let (order, task) = record_deletions(&env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.patch("group", r#"{"spec":{"image":"kinvolk/redis-hab:v2"}}"#);
    wait_for(
        Duration::from_secs(60),
        "every pod at the new image",
        || env.all_pods_at_image("group", 5, "kinvolk/redis-hab:v2"),
    )
    .await;
    env.wait_phase("group", "Ready", timeout(&env)).await;
    task.abort();
    let order = order.lock().expect("lock").clone();
    assert_eq!(order.len(), 5, "each pod restarts exactly once: {order:?}");
    assert_eq!(
        order.last(),
        Some(&leader),
        "the leader must restart last: {order:?}"
    );
    let mut unique = order.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 5, "{order:?}");
}

async fn killing_the_leader_during_an_update_still_completes_the_rollout(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "leader-kill-update");
    env.apply_yaml(&leader_habitat("group", 5));
    env.wait_phase("group", "Ready", timeout(&env)).await;
    let leader = published_leader(&env, "group").await.expect("a leader");
    let (order, task) = record_deletions(&env);
    env.patch("group", r#"{"spec":{"image":"kinvolk/redis-hab:v3"}}"#);
    wait_for(
        timeout(&env),
        "the first follower to be replaced",
        || async { !order.lock().expect("lock").is_empty() },
    )
    .await;
    env.kubectl_ok(&["delete", "pod", &leader, "--wait=false"]);
    wait_for(
        Duration::from_secs(60),
        "every pod at the new image",
        || env.all_pods_at_image("group", 5, "kinvolk/redis-hab:v3"),
    )
    .await;
    let h = env.wait_phase("group", "Ready", timeout(&env)).await;
    task.abort();
    assert!(
        h.status.as_ref().and_then(|s| s.leader.clone()).is_some(),
        "no leader after the rollout"
    );
    wait_for(timeout(&env), "the leader to be published", || async {
        published_leader(&env, "group").await.is_some()
    })
    .await;
}

on_both_grounds!(
    the_leader_is_published_and_follows_a_re_election_when_it_dies,
    a_count_below_three_is_warned_about_and_a_lone_member_never_elects,
    an_update_of_five_members_restarts_followers_one_at_a_time_and_the_leader_last,
    killing_the_leader_during_an_update_still_completes_the_rollout,
);
