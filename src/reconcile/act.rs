//! Acting: performs one step of the machine, idempotently, towards the [`Desired`] state the
//! decision drew, and records its result in the snapshot so that the next decision of the same
//! reconcile sees it.

use std::time::{Duration, Instant};

use chrono::Utc;
use habitat_machine::Step;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::key_name::KeyName;
use crate::api::{Habitat, LABEL_LEADER};
use crate::children::peer_config::peer_config;
use crate::children::ring_key;
use crate::children::Workload;
use crate::cluster::apply::{apply, delete, is_current, stamped, FIELD_MANAGER};
use crate::cluster::events::Note;
use crate::error::Error;
use crate::reconcile::allocating::needs_cluster_ip;
use crate::reconcile::context::Context;
use crate::reconcile::decide::Desired;
use crate::reconcile::leader;
use crate::reconcile::observe::Snapshot;
use crate::reconcile::ring::{newest, KeyState};
use crate::watch::recent::Recent;
use crate::watch::slim::Slim;

/// How long a generated key is trusted from memory while the cache catches up.
const GENERATED_KEY_MEMORY: Duration = Duration::from_secs(120);

/// Performs `step` for `h`, updating `snap`; Events worth recording are pushed to `notes`.
pub async fn act(
    step: Step,
    h: &Habitat,
    ctx: &Context,
    snap: &mut Snapshot,
    desired: &Desired<'_>,
    notes: &mut Vec<Note>,
) -> Result<(), Error> {
    let ns = h
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let recent = &ctx.stores.recent;
    match step {
        Step::ApplyPeerConfig => {
            let cm = peer_config(h, &desired.peers);
            apply_over(ctx, &recent.config_maps, &mut snap.peer_config, &cm).await?;
        }
        Step::ResolveRingKey => {
            if let KeyState::ToGenerate { ring } = &snap.key {
                let key = generate_key(ctx, &ns, ring, notes).await?;
                snap.key = KeyState::Ready(key);
            }
        }
        Step::ApplyWorkload => {
            // Destructured without `..`: a new kind of child does not compile until it is applied.
            let Some(Workload {
                statefulset,
                headless,
                leader,
            }) = desired.workload
            else {
                return Ok(());
            };
            let Snapshot {
                statefulset: seen_statefulset,
                headless: seen_headless,
                leader_service: seen_leader_service,
                budget: seen_budget,
                creating,
                ..
            } = snap;
            // The StatefulSet goes first, with only the control-gateway Secret its pods mount
            // beside it (member identity): kube-controller-manager starts the pods, the longest
            // road to Ready, as soon as the StatefulSet exists. A pod created before its Secret
            // waits for it in ContainerCreating, as any pod does for a missing volume source.
            // The Services and the budget follow, concurrently with each other, so that they do
            // not compete with the StatefulSet on a busy server. Every write of a group runs to
            // its end, so that one refused does not cancel the others mid-request.
            let (secret, sts) = futures::join!(
                crate::reconcile::depart::ensure_secret(ctx, h),
                apply_over(ctx, &recent.statefulsets, seen_statefulset, statefulset),
            );
            secret.and(sts)?;
            let (svc, lead) = futures::join!(
                apply_over(ctx, &recent.services, seen_headless, headless),
                async {
                    if let Some((svc, pdb)) = leader {
                        let (a, b) = futures::join!(
                            apply_service(ctx, h, seen_leader_service, creating, svc),
                            apply_over(ctx, &recent.budgets, seen_budget, pdb),
                        );
                        a.and(b)
                    } else {
                        Ok(())
                    }
                }
            );
            svc.and(lead)?;
            if leader.is_none() {
                if seen_leader_service.take().is_some() {
                    delete::<Service>(&ctx.client, &ns, &h.leader_service_name()).await?;
                }
                if seen_budget.take().is_some() {
                    delete::<PodDisruptionBudget>(&ctx.client, &ns, &h.name_any()).await?;
                }
            }
        }
        Step::ReplacePod => {
            if let Some(pod) = &desired.replacement {
                let role = if snap.leader.pod() == Some(pod.as_str()) {
                    "leader"
                } else {
                    "follower"
                };
                delete::<Pod>(&ctx.client, &ns, pod).await?;
                notes.push(Note::normal(
                    "ReplacingPod",
                    format!("deleted {role} {pod} so that it restarts with the new spec"),
                ));
            }
            snap.replaced_pod = true;
        }
        Step::ObserveLeader => {
            let (view, read) = leader::observe_read(h, ctx.census.as_ref(), &snap.pods).await;
            snap.leader = view;
            // Member identity: members confirmed dead are departed so they leave the quorum.
            crate::reconcile::depart::depart_dead(ctx, h, read.as_ref(), notes).await;
        }
        Step::PublishLeader => {
            let leader = snap.leader.pod().map(str::to_string);
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let mislabelled = &desired.mislabelled;
            // The label lands on a pod without it exactly when a new member leads: another pod,
            // or the same pod name after its pod was replaced (a new supervisor).
            let mut new_leader = false;
            for (name, should) in mislabelled.iter().cloned() {
                let value = if should {
                    json!("true")
                } else {
                    serde_json::Value::Null
                };
                let patch = json!({"metadata": {"labels": {LABEL_LEADER: value}}});
                let updated = match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(updated) => updated,
                    // Deleted since the cache showed it (its namespace going, a node lost): this
                    // pass goes on without it (not asked again), and its deletion's watch event
                    // wakes the Habitat again.
                    Err(e) if crate::error::is_not_found(&e) => {
                        snap.pods.retain(|p| p.name_any() != name);
                        continue;
                    }
                    Err(source) => {
                        return Err(Error::Apply {
                            action: "label",
                            kind: "Pod".into(),
                            name: name.clone(),
                            source,
                        })
                    }
                };
                new_leader |= should;
                ctx.echoes.wrote(&updated);
                if let Some(slot) = snap.pods.iter_mut().find(|p| p.name_any() == name) {
                    // As the cache keeps it, like every object in the snapshot.
                    *slot = updated;
                    slot.slim();
                }
            }
            if new_leader {
                ctx.metrics.leader_changed();
                let from = h
                    .status
                    .as_ref()
                    .and_then(|s| s.leader.clone())
                    .unwrap_or_else(|| "none".into());
                let to = leader.unwrap_or_else(|| "none".into());
                notes.push(Note::normal(
                    LEADER_CHANGED,
                    format!("{to} leads now (previously {from})"),
                ));
            }
        }
        Step::Advance | Step::Cleanup | Step::Wait(_) => {}
    }
    Ok(())
}

/// The reason of the Event that tells a leader group's new leader.
pub const LEADER_CHANGED: &str = "LeaderChanged";

/// Applies `desired` over `seen`, the snapshot's copy, which then holds the server's answer as
/// the cache would keep it ([`Slim`]); `recent` remembers the write until the cache shows it.
async fn apply_over<K>(
    ctx: &Context,
    recent: &Recent<K>,
    seen: &mut Option<K>,
    desired: &K,
) -> Result<(), Error>
where
    K: crate::cluster::apply::Child + Slim,
{
    let written = apply(&ctx.client, desired).await?;
    remember(ctx, recent, seen, written);
    Ok(())
}

/// Applies a Service as [`apply_over`] does, but creates one that needs a cluster IP in the
/// background ([`Allocating`](crate::reconcile::allocating::Allocating)): the pass goes on with
/// the Service as sent. A create under way of the same desired Service is left to run; one the
/// background handed back (it failed, or the name was taken) is applied here, so that an error
/// ends the pass and a Service of that name is taken over.
async fn apply_service(
    ctx: &Context,
    h: &Habitat,
    seen: &mut Option<Service>,
    creating: &mut Option<String>,
    desired: &Service,
) -> Result<(), Error> {
    let allocating = &ctx.allocating;
    let ns = desired.namespace().unwrap_or_default();
    let name = desired.name_any();
    if let Some(sent) = allocating.pending(&ns, &name) {
        if is_current(&sent.metadata, desired) {
            *seen = Some(sent);
            *creating = Some(name);
            return Ok(());
        }
    } else if !allocating.handed_back(&ns, &name) && seen.is_none() && needs_cluster_ip(desired) {
        allocating.start(
            &ctx.client,
            &ctx.stores.recent,
            ObjectRef::from_obj(h),
            desired.clone(),
        );
        *seen = Some(stamped(desired));
        *creating = Some(name);
        return Ok(());
    }
    // Made here, over a pending create of an older version if any (which then finds it, 409).
    if creating.as_deref() == Some(name.as_str()) {
        *creating = None;
    }
    apply_over(ctx, &ctx.stores.recent.services, seen, desired).await
}

/// Keeps `written`, the server's answer to a write of a child, as the snapshot's view of it and
/// in the memory of recent writes, until the watch delivers it.
fn remember<K>(ctx: &Context, recent: &Recent<K>, seen: &mut Option<K>, mut written: K)
where
    K: kube::Resource<DynamicType = ()> + Clone + Slim,
{
    written.slim();
    recent.record(seen.as_ref(), &written);
    ctx.echoes.wrote(&written);
    *seen = Some(written);
}

/// The key this process generated for `ring` in `ns` within the last two minutes.
pub fn remembered_key(ctx: &Context, ns: &str, ring: &str) -> Option<KeyName> {
    let keys = ctx.generated_keys.lock().unwrap_or_else(|e| e.into_inner());
    keys.get(&(ns.to_string(), ring.to_string()))
        .filter(|(_, at)| at.elapsed() < GENERATED_KEY_MEMORY)
        .map(|(k, _)| k.clone())
}

/// Generates the ring's key once: serialised, re-checked against the cache and memory, and
/// created (never replaced) as a Secret owned by nobody.
async fn generate_key(
    ctx: &Context,
    ns: &str,
    ring: &str,
    notes: &mut Vec<Note>,
) -> Result<KeyName, Error> {
    let _guard = ctx.key_generation.lock().await;
    if let Some(k) = remembered_key(ctx, ns, ring) {
        return Ok(k);
    }
    let existing = ctx.secrets.ring(&ctx.client, &ctx.stores, ns, ring).await?;
    if let Some(k) = newest(&existing, ring) {
        return Ok(k);
    }
    let (key, file) = ring_key::generate(ring, Utc::now());
    let secret = ring_key::ring_secret(ns, &key, file);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    match api
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            },
            &secret,
        )
        .await
    {
        Ok(_) => notes.push(Note::normal(
            "RingKeyGenerated",
            format!("generated the key of ring {ring} in Secret {}", key.full()),
        )),
        // Same name: generated in the same second by another writer; it is this ring's key.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(source) => {
            return Err(Error::Apply {
                action: "create",
                kind: "Secret".into(),
                name: key.full(),
                source,
            })
        }
    }
    ctx.generated_keys
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            (ns.to_string(), ring.to_string()),
            (key.clone(), Instant::now()),
        );
    Ok(key)
}
