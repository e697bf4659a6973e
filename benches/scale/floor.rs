//! The floor: a plain client that does the least any operator must, at the operator's
//! concurrency, against the same server. For each Habitat it creates the same children (the
//! operator's own builders: peer ConfigMap, StatefulSet, Services, PodDisruptionBudget), writes
//! the address of its first running pod into the peer ConfigMap, and once every pod is ready
//! makes one status write (`Ready`). No finalizer, no status on the way, no Events, no census.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use habitat_operator::api::{Habitat, LABEL_NAME, PEER_IP_KEY};
use habitat_operator::children::{self, peer_config::peer_config, peer_config::peer_file_content};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc;

use crate::workload;

/// The floor's User-Agent, by which its requests are counted.
pub const AGENT: &str = "habitat-bench/floor";

enum Job {
    Children(Box<Habitat>),
    Peer { name: String, ip: String },
    Status { name: String, generation: i64 },
}

#[derive(Default)]
struct Progress {
    /// Per Habitat: (members, generation), once its children exist.
    deployed: BTreeMap<String, (usize, i64)>,
    /// Per Habitat: pod name → (IP when running, ready).
    pods: BTreeMap<String, BTreeMap<String, (Option<String>, bool)>>,
    peer_written: BTreeSet<String>,
    status_sent: BTreeSet<String>,
}

impl Progress {
    /// The jobs that `habitat`'s state now calls for (each at most once).
    fn due(&mut self, habitat: &str) -> Vec<Job> {
        let Some(&(count, generation)) = self.deployed.get(habitat) else {
            return vec![];
        };
        let pods = self.pods.get(habitat).cloned().unwrap_or_default();
        let mut jobs = vec![];
        if !self.peer_written.contains(habitat) {
            if let Some(ip) = pods.values().find_map(|(ip, _)| ip.clone()) {
                self.peer_written.insert(habitat.to_string());
                jobs.push(Job::Peer {
                    name: habitat.to_string(),
                    ip,
                });
            }
        }
        let ready = pods.values().filter(|(_, r)| *r).count();
        if ready >= count
            && self.peer_written.contains(habitat)
            && self.status_sent.insert(habitat.to_string())
        {
            jobs.push(Job::Status {
                name: habitat.to_string(),
                generation,
            });
        }
        jobs
    }
}

async fn create<K>(api: Api<K>, obj: &K) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&PostParams::default(), obj)
        .await
        .map(drop)
        .map_err(|e| format!("creating {}: {e}", obj.name_any()))
}

async fn perform(
    client: &Client,
    ns: &str,
    job: Job,
) -> Result<(Option<(String, usize, i64)>, bool), String> {
    match job {
        Job::Children(h) => {
            let w = children::workload(&h, None);
            create(
                Api::<ConfigMap>::namespaced(client.clone(), ns),
                &peer_config(&h, &[]),
            )
            .await?;
            create(
                Api::<StatefulSet>::namespaced(client.clone(), ns),
                &w.statefulset,
            )
            .await?;
            let services = Api::<Service>::namespaced(client.clone(), ns);
            create(services.clone(), &w.headless).await?;
            if let Some((svc, pdb)) = &w.leader {
                create(services, svc).await?;
                create(
                    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
                    pdb,
                )
                .await?;
            }
            let count = h.spec.count.max(0) as usize;
            Ok((
                Some((h.name_any(), count, h.metadata.generation.unwrap_or(1))),
                false,
            ))
        }
        Job::Peer { name, ip } => {
            let patch = serde_json::json!({"data": {PEER_IP_KEY: peer_file_content(&[ip])}});
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .patch(
                    &format!("{name}-peer"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(|e| format!("patching {name}-peer: {e}"))?;
            Ok((None, false))
        }
        Job::Status { name, generation } => {
            let patch =
                serde_json::json!({"status": {"phase": "Ready", "observedGeneration": generation}});
            Api::<Habitat>::namespaced(client.clone(), ns)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("writing the status of {name}: {e}"))?;
            Ok((None, true))
        }
    }
}

/// Runs the floor for `n` Habitats in `namespace` with `concurrency` requests at a time; returns
/// the time from the first create until every Habitat's status is written.
pub async fn run(
    driver: &Client,
    client: &Client,
    namespace: &str,
    n: usize,
    concurrency: usize,
    timeout: Duration,
) -> Result<Duration, String> {
    let progress = Arc::new(Mutex::new(Progress::default()));
    let (tx, rx) = mpsc::unbounded_channel::<Job>();

    // The pods, as a controller sees them: one watch.
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let watch = {
        let (progress, tx) = (progress.clone(), tx.clone());
        tokio::spawn(async move {
            let events = watcher(pods, watcher::Config::default().labels(LABEL_NAME))
                .default_backoff()
                .touched_objects();
            futures::pin_mut!(events);
            while let Ok(Some(pod)) = events.try_next().await {
                let Some(habitat) = pod.labels().get(LABEL_NAME).cloned() else {
                    continue;
                };
                let deleting = pod.metadata.deletion_timestamp.is_some();
                let ip = habitat_operator::reconcile::peer::pod_ip(&pod)
                    .filter(|_| habitat_operator::reconcile::peer::is_running(&pod) && !deleting)
                    .map(str::to_string);
                let ready = habitat_operator::reconcile::peer::is_ready(&pod) && !deleting;
                let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                p.pods
                    .entry(habitat.clone())
                    .or_default()
                    .insert(pod.name_any(), (ip, ready));
                for job in p.due(&habitat) {
                    let _ = tx.send(job);
                }
            }
        })
    };

    let start = Instant::now();
    let workers = {
        let (client, ns, progress, tx) = (
            client.clone(),
            namespace.to_string(),
            progress.clone(),
            tx.clone(),
        );
        tokio::spawn(async move {
            let jobs = tokio_stream_from(rx);
            let mut done = jobs
                .map(|job| {
                    let (client, ns) = (client.clone(), ns.clone());
                    async move { perform(&client, &ns, job).await }
                })
                .buffer_unordered(concurrency);
            let mut statuses = 0;
            while let Some(result) = done.next().await {
                let (deployed, status) = result?;
                if let Some((name, count, generation)) = deployed {
                    let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                    p.deployed.insert(name.clone(), (count, generation));
                    for job in p.due(&name) {
                        let _ = tx.send(job);
                    }
                }
                if status {
                    statuses += 1;
                    if statuses == n {
                        return Ok::<Duration, String>(start.elapsed());
                    }
                }
            }
            Err("the floor's job queue ended".to_string())
        })
    };
    let children = tx.clone();
    drop(tx);
    workload::create(driver, namespace, n, move |h| {
        let _ = children.send(Job::Children(Box::new(h)));
    })
    .await?;
    let result = match tokio::time::timeout(timeout, workers).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("the floor's workers failed: {e}")),
        Err(_) => {
            let p = progress.lock().unwrap_or_else(|e| e.into_inner());
            Err(format!(
                "the floor did not finish in {timeout:?}: {} deployed, {} peer files, {} statuses",
                p.deployed.len(),
                p.peer_written.len(),
                p.status_sent.len()
            ))
        }
    };
    watch.abort();
    result
}

/// The receiver as a stream.
fn tokio_stream_from(mut rx: mpsc::UnboundedReceiver<Job>) -> impl futures::Stream<Item = Job> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
