//! The floor: a plain client that does the least any operator must, at the operator's
//! concurrency, against the same server. For each Habitat it creates the same children (the
//! operator's own builders: peer ConfigMap, StatefulSet, Services, PodDisruptionBudget, the
//! control-gateway Secret of a leader group), writes
//! the address of its first running pod into the peer ConfigMap, and once every pod is ready
//! makes one status write (`Ready`). No finalizer, no status on the way, no Events, no census.
//!
//! The required floor ([`Floor::Required`]) adds what the issue asks of any operator beyond the
//! children, at its minimal count: the finalizer before the children, a status write once they
//! exist (the Habitat leaves Pending), the leader label on one pod of a leader group, the Ready
//! status, and one Event per pass (two per Habitat), written by the operator's own Event
//! recorder. Its writes are the minimal set (7 per standalone Habitat, 11 per leader group: the
//! "Minimal writes" of docs/performance.md), so its time is the best
//! any operator can reach with them, and the operator's time over it is what the operator adds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use habitat_machine::Phase;
use habitat_operator::api::{Habitat, FINALIZER, LABEL_LEADER, LABEL_NAME, PEER_IP_KEY};
use habitat_operator::children::control_gateway::{self, control_secret};
use habitat_operator::children::{self, peer_config::peer_config, peer_config::peer_file_content};
use habitat_operator::cluster::events::{Note, Recorder};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::workload;

/// Which floor runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Floor {
    /// The children, the peer file and one status write.
    Plain,
    /// Plus the finalizer, the status leaving Pending, the leader label and two Events.
    Required,
    /// The plain floor on a fresh server before anything is measured, so that every measured
    /// run finds the server warm; its time is printed, not compared.
    WarmUp,
}

impl Floor {
    /// The User-Agent by which its requests are counted (neither contains the other).
    pub fn agent(self) -> &'static str {
        match self {
            Floor::Plain => "habitat-bench/floor",
            Floor::Required => "habitat-bench/required-floor",
            Floor::WarmUp => "habitat-bench/warm-up",
        }
    }

    /// Its namespace.
    pub fn namespace(self) -> &'static str {
        match self {
            Floor::Plain => "floor",
            Floor::Required => "required-floor",
            Floor::WarmUp => "warm-up",
        }
    }

    /// How the tables call it.
    pub fn name(self) -> &'static str {
        match self {
            Floor::Plain => "floor",
            Floor::Required => "required floor",
            Floor::WarmUp => "warm-up",
        }
    }
}

enum Job {
    Children(Box<Habitat>),
    Peer {
        name: String,
        ip: String,
    },
    Status {
        habitat: Deployed,
        /// The pod to label as the leader (a leader group's first ready pod).
        leader: Option<String>,
    },
}

/// A Habitat whose children exist.
#[derive(Clone)]
struct Deployed {
    count: usize,
    generation: i64,
    leader_group: bool,
    reference: ObjectReference,
}

#[derive(Default)]
struct Progress {
    /// Per Habitat, once its children exist.
    deployed: BTreeMap<String, Deployed>,
    /// Per Habitat: pod name → (IP when running, ready).
    pods: BTreeMap<String, BTreeMap<String, (Option<String>, bool)>>,
    peer_written: BTreeSet<String>,
    status_sent: BTreeSet<String>,
}

impl Progress {
    /// The jobs that `habitat`'s state now calls for (each at most once).
    fn due(&mut self, habitat: &str) -> Vec<Job> {
        let Some(deployed) = self.deployed.get(habitat).cloned() else {
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
        if ready >= deployed.count
            && self.peer_written.contains(habitat)
            && self.status_sent.insert(habitat.to_string())
        {
            let leader = pods
                .iter()
                .find(|(_, (_, ready))| *ready)
                .map(|(name, _)| name.clone())
                .filter(|_| deployed.leader_group);
            jobs.push(Job::Status {
                habitat: deployed,
                leader,
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

/// Writes `status` into the Habitat `name`'s status.
async fn write_status(
    client: &Client,
    ns: &str,
    name: &str,
    status: serde_json::Value,
) -> Result<(), String> {
    Api::<Habitat>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "status": status })),
        )
        .await
        .map(drop)
        .map_err(|e| format!("writing the status of {name}: {e}"))
}

/// Records `note` about the Habitat `reference`.
async fn record(
    events: &Recorder,
    reference: &ObjectReference,
    note: Option<Note>,
) -> Result<(), String> {
    match note {
        Some(note) => events
            .publish(&note, reference)
            .await
            .map_err(|e| format!("recording {}: {e}", note.reason)),
        None => Ok(()),
    }
}

/// Performs `job`. `required` is the required floor's Event recorder: with it, the job makes the
/// required writes too; without it, the plain floor's only.
async fn perform(
    client: &Client,
    required: Option<&Recorder>,
    ns: &str,
    job: Job,
) -> Result<(Option<(String, Deployed)>, bool), String> {
    match job {
        Job::Children(h) => {
            if required.is_some() {
                let patch = serde_json::json!({"metadata": {"finalizers": [FINALIZER]}});
                Api::<Habitat>::namespaced(client.clone(), ns)
                    .patch(
                        &h.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|e| format!("adding the finalizer of {}: {e}", h.name_any()))?;
            }
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
                create(
                    Api::<Secret>::namespaced(client.clone(), ns),
                    &control_secret(&h, control_gateway::generate()),
                )
                .await?;
            }
            let deployed = Deployed {
                count: h.spec.count.max(0) as usize,
                generation: h.metadata.generation.unwrap_or(1),
                leader_group: w.leader.is_some(),
                reference: h.object_ref(&()),
            };
            if let Some(events) = required {
                let status = serde_json::json!({"phase": "Deploying", "observedGeneration": deployed.generation});
                write_status(client, ns, &h.name_any(), status).await?;
                let path = [
                    Phase::Pending,
                    Phase::ConfigMapReady,
                    Phase::KeyReady,
                    Phase::Deploying,
                ];
                let note = Note::passage(&path, "the children are applied");
                record(events, &deployed.reference, note).await?;
            }
            Ok((Some((h.name_any(), deployed)), false))
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
        Job::Status { habitat, leader } => {
            let name = habitat.reference.name.as_deref().unwrap_or_default();
            if let Some(pod) = leader.filter(|_| required.is_some()) {
                let patch = serde_json::json!({"metadata": {"labels": {LABEL_LEADER: "true"}}});
                Api::<Pod>::namespaced(client.clone(), ns)
                    .patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("labelling the leader {pod}: {e}"))?;
            }
            let status =
                serde_json::json!({"phase": "Ready", "observedGeneration": habitat.generation});
            write_status(client, ns, name, status).await?;
            if let Some(events) = required {
                let note =
                    Note::passage(&[Phase::Deploying, Phase::Ready], "every member is ready");
                record(events, &habitat.reference, note).await?;
            }
            Ok((None, true))
        }
    }
}

/// Runs the floor `kind` for `n` Habitats in `namespace` with `concurrency` requests at a time;
/// returns the time from the first create until every Habitat's status is written.
pub async fn run(
    kind: Floor,
    driver: &Client,
    client: &Client,
    namespace: &str,
    n: usize,
    concurrency: usize,
    timeout: Duration,
) -> Result<Duration, String> {
    let events = (kind == Floor::Required).then(|| {
        Recorder::new(
            client.clone(),
            Reporter {
                controller: kind.agent().into(),
                instance: None,
            },
        )
    });
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
                    let (client, ns, events) = (client.clone(), ns.clone(), events.clone());
                    async move { perform(&client, events.as_ref(), &ns, job).await }
                })
                .buffer_unordered(concurrency);
            let mut statuses = 0;
            while let Some(result) = done.next().await {
                let (deployed, status) = result?;
                if let Some((name, deployed)) = deployed {
                    let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                    p.deployed.insert(name.clone(), deployed);
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
