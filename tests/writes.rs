//! How many times the operator writes a Habitat's status on its way to Ready: the pods'
//! progress rides along with the writes that matter (it leaves Pending; it becomes Ready).

#[macro_use]
mod support;

use futures::StreamExt;
use habitat_operator::api::Habitat;
use kube::runtime::watcher;
use std::time::Instant;

use habitat_operator::reconcile::status::PROGRESS_INTERVAL;
use support::{timeout, wait_for, Env, Ground};

/// One version of a Habitat whose status differs from the version before, when it was seen.
struct Seen {
    at: Instant,
    phase: String,
    status: String,
}

/// Watches `name` until it is Ready for its generation and answers the statuses the operator
/// wrote on the way: one entry per version whose status differs from the version before (the
/// status the Habitat is created with, without a phase, is not the operator's).
async fn statuses_until_ready(env: &Env, name: &str) -> Vec<Seen> {
    let stream = watcher(
        env.habitats(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    );
    let mut stream = std::pin::pin!(stream);
    let mut seen: Vec<Seen> = vec![];
    let deadline = tokio::time::Instant::now() + timeout(env);
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.next()).await {
        let h: Habitat = match event {
            Ok(watcher::Event::Apply(h)) | Ok(watcher::Event::InitApply(h)) => h,
            _ => continue,
        };
        let status = h.status.clone().unwrap_or_default();
        let Some(phase) = status.phase.clone() else {
            continue;
        };
        let shown = serde_json::to_string(&status).unwrap_or_default();
        if seen.last().map(|s| &s.status) != Some(&shown) {
            seen.push(Seen {
                at: Instant::now(),
                phase: phase.clone(),
                status: shown,
            });
        }
        if phase == "Ready" && status.observed_generation == h.metadata.generation {
            return seen;
        }
    }
    let phases: Vec<&str> = seen.iter().map(|s| s.phase.as_str()).collect();
    panic!("{name} not Ready in time; statuses seen: {phases:?}");
}

/// A Habitat of three pods is written twice on its way to Ready (it leaves Pending; it becomes
/// Ready), a leader group three times (LeaderElected too): the pods coming up one by one, the
/// first census reading and the election's progress ride along, unless the way takes longer
/// than the progress interval (then the READY column counts up, once per interval).
async fn the_way_to_ready_costs_one_status_write_per_phase_reached(ground: Ground) {
    require_kubectl!();
    let env = env_on!(ground, "writes");
    let standalone = "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: plain}\nspec:\n  image: kinvolk/redis-hab\n  count: 3\n  service: {name: redis, group: plain}\n";
    let leader = "apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: lead}\nspec:\n  image: kinvolk/redis-hab\n  count: 3\n  service: {name: redis, group: lead, topology: leader}\n";
    let (plain, lead) = tokio::join!(statuses_until_ready(&env, "plain"), async {
        env.apply_yaml(standalone);
        env.apply_yaml(leader);
        statuses_until_ready(&env, "lead").await
    });
    for (name, seen, phases) in [
        ("plain", plain, vec!["Deploying", "Ready"]),
        ("lead", lead, vec!["Deploying", "LeaderElected", "Ready"]),
    ] {
        let walked: Vec<&str> = seen.iter().map(|s| s.phase.as_str()).collect();
        let took = seen.last().map(|l| l.at - seen[0].at).unwrap_or_default();
        // Progress writes happen at most once per interval of the way.
        let progress = (took.as_secs_f64() / PROGRESS_INTERVAL.as_secs_f64()).floor() as usize;
        eprintln!("{name}: {walked:?} in {took:?}");
        assert!(
            seen.len() <= phases.len() + progress,
            "{name}: {} status writes on a way of {took:?} (phases {walked:?}); at most {} expected:\n{}",
            seen.len(),
            phases.len() + progress,
            seen.iter().map(|s| s.status.as_str()).collect::<Vec<_>>().join("\n")
        );
        let mut distinct = walked.clone();
        distinct.dedup();
        assert_eq!(distinct.first(), phases.first(), "{name}: {walked:?}");
        assert_eq!(distinct.last(), phases.last(), "{name}: {walked:?}");
    }
}

on_both_grounds!(the_way_to_ready_costs_one_status_write_per_phase_reached);

/// The children of a leader group (StatefulSet, headless Service, leader Service, budget) are
/// written concurrently by one pass, not one after another: with every request of the operator
/// held 500 ms by the sandbox (`--faults latency=500ms`), the four appear within one such wait
/// of each other, where written in turn they would appear 500 ms apart, 1.5 s from first to
/// last. Sandbox only: injected latency is a sandbox fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_writes_the_children_of_a_workload_together() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::ListParams;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn names<K: Clone>(
        list: kube::Result<kube::core::ObjectList<kube::core::PartialObjectMeta<K>>>,
        kind: &str,
    ) -> Vec<String> {
        list.map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .map(|o| format!("{kind} {}", o.metadata.name.unwrap_or_default()))
            .collect()
    }

    require_kubectl!();
    let latency = Duration::from_millis(500);
    let Some(env) = Env::start_full(
        Ground::Sandbox,
        "together",
        true,
        &["--faults", "latency=500ms,only=habitat-operator"],
    )
    .await
    else {
        return;
    };
    env.apply_yaml("apiVersion: habitat.sh/v1\nkind: Habitat\nmetadata: {name: lead}\nspec:\n  image: kinvolk/redis-hab\n  count: 3\n  service: {name: redis, group: lead, topology: leader}\n");
    let (sts, svc, pdb) = (
        env.api::<StatefulSet>(),
        env.api::<Service>(),
        env.api::<PodDisruptionBudget>(),
    );
    let lp = ListParams::default();
    let mut first_seen: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = Instant::now() + timeout(&env);
    while first_seen.len() < 4 {
        assert!(
            Instant::now() < deadline,
            "the children did not all appear; seen: {:?}",
            first_seen.keys().collect::<Vec<_>>()
        );
        let listed = [
            names(sts.list_metadata(&lp).await, "StatefulSet"),
            names(svc.list_metadata(&lp).await, "Service"),
            names(pdb.list_metadata(&lp).await, "PodDisruptionBudget"),
        ];
        let now = Instant::now();
        for key in listed.into_iter().flatten() {
            first_seen.entry(key).or_insert(now);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (first, last) = (
        first_seen
            .values()
            .min()
            .copied()
            .unwrap_or_else(Instant::now),
        first_seen
            .values()
            .max()
            .copied()
            .unwrap_or_else(Instant::now),
    );
    assert!(
        last - first < latency * 2,
        "the children appeared {:?} apart (each request waits {latency:?}): {:?}",
        last - first,
        first_seen
            .iter()
            .map(|(k, t)| (k, *t - first))
            .collect::<Vec<_>>()
    );
}

/// The operator's entries in an object's `managedFields`, as (operation, field set).
fn operator_entries(cm: &k8s_openapi::api::core::v1::ConfigMap) -> Vec<(String, String)> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some("habitat-operator"))
        .map(|e| {
            (
                e.operation.clone().unwrap_or_default(),
                e.fields_v1
                    .as_ref()
                    .map(|f| f.0.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// A pod's address reaches the peer ConfigMap by the one write of every child, a server-side
/// apply: the operator's one entry is its `Apply`. Another writer's key in the data is theirs:
/// it stays while the address changes.
async fn a_peer_address_is_applied_and_another_writers_key_stays(ground: Ground) {
    require_kubectl!();
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{DeleteParams, Patch, PatchParams};
    use kube::ResourceExt;
    let env = env_on!(ground, "peer-patch");
    env.apply_example("standalone");
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
    let cms = env.api::<ConfigMap>();
    let peer = "example-standalone-peer";
    let cm = cms.get(peer).await.expect("the peer ConfigMap");
    let first = env.peer_ip("example-standalone").await;
    assert!(!first.is_empty(), "no address in {:?}", cm.data);
    let entries = operator_entries(&cm);
    assert!(
        entries.len() == 1 && entries[0].0 == "Apply",
        "the address was not applied: {entries:?}"
    );

    cms.patch(
        peer,
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "data": {"theirs": "kept"},
        })),
    )
    .await
    .expect("another writer's key");
    // A new pod, a new address.
    let pod = env.pods("example-standalone").await[0].name_any();
    env.api::<Pod>()
        .delete(&pod, &DeleteParams::default())
        .await
        .expect("delete the pod");
    wait_for(
        timeout(&env),
        "a new address in the peer ConfigMap",
        || async {
            let ip = env.peer_ip("example-standalone").await;
            !ip.is_empty() && ip != first
        },
    )
    .await;
    let cm = cms.get(peer).await.expect("the peer ConfigMap");
    assert_eq!(
        cm.data
            .clone()
            .unwrap_or_default()
            .get("theirs")
            .map(String::as_str),
        Some("kept"),
        "{:?}",
        cm.data
    );
    let entries = operator_entries(&cm);
    assert!(
        entries.len() == 1 && entries[0].0 == "Apply",
        "the address was not applied over another writer's data: {entries:?}"
    );
    env.wait_phase("example-standalone", "Ready", timeout(&env))
        .await;
}

on_both_grounds!(a_peer_address_is_applied_and_another_writers_key_stays);
