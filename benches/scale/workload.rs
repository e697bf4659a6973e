//! The workload: N Habitats, 70% standalone with 1 to 3 members and 30% leader groups of 3, in
//! a fixed order; created at a fixed concurrency; watched until every one is Ready.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use habitat_operator::api::Habitat;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};

/// Habitats created at once by the driver (both runs alike).
pub const CREATE_CONCURRENCY: usize = 8;

/// Habitat `i` of the mix: every `i % 10` in {3, 6, 9} is a leader group of 3, the others are
/// standalone with `1 + i % 3` members.
pub fn shape(i: usize) -> (bool, i32) {
    if matches!(i % 10, 3 | 6 | 9) {
        (true, 3)
    } else {
        (false, 1 + (i % 3) as i32)
    }
}

/// Pods and leader groups of the first `n` Habitats.
pub fn totals(n: usize) -> (usize, usize) {
    (0..n)
        .map(shape)
        .fold((0, 0), |(pods, leaders), (leader, count)| {
            (pods + count as usize, leaders + usize::from(leader))
        })
}

/// Habitat `i`, named `bench-i`, in its own group of the service `redis`.
pub fn habitat(i: usize) -> Habitat {
    let (leader, count) = shape(i);
    let topology = if leader { "leader" } else { "standalone" };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "habitat.sh/v1",
        "kind": "Habitat",
        "metadata": {"name": format!("bench-{i}")},
        "spec": {
            "image": "kinvolk/redis-hab",
            "count": count,
            "service": {"name": "redis", "group": format!("g{i}"), "topology": topology},
        },
    }))
    .expect("a valid Habitat")
}

/// Creates the `n` Habitats in `namespace`, `CREATE_CONCURRENCY` at a time; each created
/// object (with its uid) is handed to `created`.
pub async fn create(
    client: &Client,
    namespace: &str,
    n: usize,
    created: impl Fn(Habitat),
) -> Result<(), String> {
    let api: Api<Habitat> = Api::namespaced(client.clone(), namespace);
    let mut creates = futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &habitat(i))
                    .await
                    .map_err(|e| format!("creating bench-{i}: {e}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY);
    while let Some(h) = creates.next().await {
        created(h?);
    }
    Ok(())
}

/// Whether `h` is Ready for its current generation.
pub fn is_ready(h: &Habitat) -> bool {
    h.phase_str() == Some("Ready")
        && h.status.as_ref().and_then(|s| s.observed_generation) == h.metadata.generation
}

/// When the Habitats became Ready, as times since the run's start.
#[derive(Debug, Clone, Copy)]
pub struct ReadyTimes {
    /// Half of them were Ready.
    pub half: Duration,
    /// Nine in ten were.
    pub p90: Duration,
    /// All of them were.
    pub all: Duration,
}

/// Watches the Habitats of `namespace` until `n` are Ready; returns when half, nine in ten and
/// all of them were (a slow tail shows apart from a slow pace).
pub async fn wait_ready(
    client: &Client,
    namespace: &str,
    n: usize,
    start: Instant,
    timeout: Duration,
) -> Result<ReadyTimes, String> {
    let api: Api<Habitat> = Api::namespaced(client.clone(), namespace);
    let mut ready = BTreeSet::new();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(events);
    let until = tokio::time::Instant::from_std(start + timeout);
    let (mut half, mut p90) = (None, None);
    loop {
        let next = tokio::time::timeout_at(until, events.try_next()).await;
        match next {
            Err(_) => {
                return Err(format!(
                    "only {}/{n} Habitats Ready after {:.0?}",
                    ready.len(),
                    start.elapsed()
                ))
            }
            Ok(Err(e)) => eprintln!("watching Habitats: {e} (retrying)"),
            Ok(Ok(None)) => return Err("the Habitat watch ended".into()),
            Ok(Ok(Some(h))) => {
                if is_ready(&h) {
                    ready.insert(h.name_any());
                } else {
                    ready.remove(&h.name_any());
                }
                let at = start.elapsed();
                if ready.len() * 2 >= n {
                    half.get_or_insert(at);
                }
                if ready.len() * 10 >= n * 9 {
                    p90.get_or_insert(at);
                }
                if ready.len() == n {
                    return Ok(ReadyTimes {
                        half: half.unwrap_or(at),
                        p90: p90.unwrap_or(at),
                        all: at,
                    });
                }
            }
        }
    }
}

/// Removes the finalizers of every Habitat in `namespace` (the required floor's, which no
/// operator would remove), `CREATE_CONCURRENCY` at a time, so that the namespace can go.
pub async fn release(client: &Client, namespace: &str) -> Result<(), String> {
    let api: Api<Habitat> = Api::namespaced(client.clone(), namespace);
    let names: Vec<String> = api
        .list_metadata(&Default::default())
        .await
        .map_err(|e| format!("listing the Habitats of {namespace}: {e}"))?
        .items
        .iter()
        .map(|h| h.name_any())
        .collect();
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    let mut patches = futures::stream::iter(names)
        .map(|name| {
            let (api, patch) = (api.clone(), &patch);
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(drop)
                    .map_err(|e| format!("releasing {name}: {e}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY);
    while let Some(done) = patches.next().await {
        done?;
    }
    Ok(())
}
