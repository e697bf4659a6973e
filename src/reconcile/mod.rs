//! The reconcile driver: observe (caches, [`mod@observe`]) → decide (the desired state, the
//! facts and the machine's answer, [`mod@decide`]) → act (one idempotent step, [`mod@act`],
//! repeated while each succeeds at once) → persist (one status write, only when it differs).
//!
//! Deletion goes through kube's `finalizer` helper: the same pipeline runs, the machine answers
//! `Terminating`/`Cleanup`, the status is written, and the helper then releases the finalizer so
//! that garbage collection removes the children (PersistentVolumeClaims and ring keys are not
//! children and stay).

pub mod act;
pub mod allocating;
pub mod conditions;
pub mod context;
pub mod decide;
pub mod depart;
pub mod drift;
pub mod leader;
pub mod memo;
pub mod metrics;
pub mod observe;
pub mod peer;
pub mod requeue;
pub mod ring;
pub mod rollout;
pub mod secrets;
pub mod state;
pub mod status;

use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use habitat_machine::{Blocker, Phase, Step};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, finalizer};
use kube::{Api, ResourceExt};

use crate::api::{Habitat, Topology, UpdateStrategy, FINALIZER};
use crate::cluster::apply::FIELD_MANAGER;
use crate::cluster::events::Note;
use crate::error::{Disposition, Error};
use crate::reconcile::act::{act, remembered_key};
use crate::reconcile::conditions::Reason;
use crate::reconcile::context::Context;
use decide::Decider;
use observe::observe;
use status::{Inputs, Outcome, Worth};

/// Steps one reconcile may take before it yields (each step changes one fact).
const MAX_STEPS: usize = 16;
/// How often a settled leader-topology Habitat re-reads the census.
const LEADER_POLL: Duration = Duration::from_secs(10);
/// How often the rollout of a group whose progress the census tells (leader groups replace
/// their pods one by one once every member rejoined; the census is not watched) is looked at.
/// Other rollouts progress by events of the watched StatefulSet and pods only, and are not
/// polled (nor resynced: the resync looks at settled objects). Polled too, every waiting Habitat
/// was reconciled once more per 15 s of its wait for nothing; at N = 1000 on the real ground,
/// where a Habitat waits minutes for kube-controller-manager, such reconciles doubled the count
/// per Habitat.
const ROLLOUT_POLL: Duration = Duration::from_secs(15);

/// Reconciles one Habitat. Entry point for kube's `Controller`.
pub async fn reconcile(h: Arc<Habitat>, ctx: Arc<Context>) -> Result<Action, Error> {
    // kube's Controller waits for the Habitat cache only; the children's and Secrets' caches
    // must be complete too before anything is decided from them.
    if !ctx.synced.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let _timer = ctx.metrics.reconcile_timer();
    let ns = h
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<Habitat> = Api::namespaced(ctx.client.clone(), &ns);
    let name = h.name_any();
    let (this, uid) = (ObjectRef::from_obj(&*h), h.uid());
    let result = if lacks_finalizer(&h) {
        // A new Habitat: its finalizer goes on alongside its first pass.
        run(&h, &ctx, Some(&api))
            .await
            .map_err(finalizer::Error::ApplyFailed)
    } else {
        finalizer(&api, FINALIZER, h, |event| async {
            match event {
                finalizer::Event::Apply(h) | finalizer::Event::Cleanup(h) => {
                    run(&h, &ctx, None).await
                }
            }
        })
        .await
    };
    let result = match result {
        Ok(action) => Ok(action),
        // A write refused because the namespace is being deleted (the status write, say): the
        // Habitat goes away with its namespace. Not a failure; wait for the deletion.
        Err(finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e))
            if e.disposition() == Disposition::NamespaceTerminating =>
        {
            tracing::debug!(%ns, %name, error = %e.chain(1024), "namespace is being deleted; waiting for the Habitat's deletion");
            Ok(Action::await_change())
        }
        Err(finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e)) => Err(e),
        // A stale cache entry of an object that is already gone: the deletion is complete.
        Err(finalizer::Error::RemoveFinalizer(e)) if crate::error::is_not_found(&e) => {
            Ok(Action::await_change())
        }
        Err(other) => Err(Error::Finalizer {
            name,
            retry_after: match &other {
                finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => {
                    crate::error::retry_after(e)
                }
                _ => None,
            },
            message: other.to_string(),
        }),
    };
    if result.is_ok() {
        ctx.metrics.reconciled();
    }
    forget_if_gone(&ctx, &this, uid.as_deref());
    result
}

/// Forgets the state of `h` (of uid `uid`) when the cache no longer holds it: it was deleted while a pass ran
/// (say, before its finalizer went on), and the pass wrote state after its Delete event
/// forgot it. Whether the Habitat is gone is what matters, not why.
fn forget_if_gone(ctx: &Context, h: &ObjectRef<Habitat>, uid: Option<&str>) -> bool {
    let Some(uid) = uid else {
        return false;
    };
    let cached = ctx.stores.habitats.get(h);
    if cached.is_some_and(|c| c.metadata.uid.as_deref() == Some(uid)) {
        return false;
    }
    ctx.habitats.forget(uid);
    ctx.metrics.state_entries(ctx.habitats.len());
    true
}

/// Whether `h` is a live Habitat without the operator's finalizer: a new one.
fn lacks_finalizer(h: &Habitat) -> bool {
    h.metadata.deletion_timestamp.is_none() && !h.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the operator's finalizer to `h`, which lacks it, and answers the patched object. The
/// patch carries the resourceVersion it was computed from, so a concurrent change of the
/// finalizers is refused (409) and looked at again, as the JSON-patch test of kube's finalizer
/// helper does; its echo wakes nothing.
///
/// It goes out alongside the Habitat's first pass (see [`run`]), with the peer ConfigMap: kube's
/// `finalizer` helper adds it and returns, leaving the first pass to the patch's watch event (a
/// second wait in the work queue for every new Habitat), and a first pass that waits for the
/// patch sends everything else one round of requests later. Children written before the
/// finalizer lands are safe: they carry the Habitat as their owner, and garbage collection
/// removes them should the Habitat go first.
async fn add_finalizer(
    api: &Api<Habitat>,
    ctx: &Context,
    h: &Habitat,
) -> Result<Habitat, kube::Error> {
    let mut finalizers = h.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": h.resource_version()},
    });
    let patched = api
        .patch(
            &h.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    ctx.echoes.wrote(&patched);
    Ok(patched)
}

/// Decides the requeue after a failed reconcile: per-object exponential backoff.
pub fn error_policy(h: Arc<Habitat>, error: &Error, ctx: Arc<Context>) -> Action {
    // `reconcile` answers these itself; should one arrive here, it is still no failure.
    if error.disposition() == Disposition::NamespaceTerminating {
        tracing::debug!(namespace = %h.namespace().unwrap_or_default(), name = %h.name_any(), error = %error.chain(1024), "namespace is being deleted; waiting for the Habitat's deletion");
        return Action::await_change();
    }
    // Not sooner than the API server asked for (429/503 with Retry-After), within the cap.
    let delay = ctx
        .habitats
        .backoffs
        .next_at_least(&h.uid().unwrap_or_default(), error.retry_after());
    ctx.metrics.failed(error.category());
    ctx.metrics.backoff(delay.as_secs_f64());
    // A Habitat deleted meanwhile keeps no backoff (the Controller drops its requeue).
    forget_if_gone(&ctx, &ObjectRef::from_obj(&*h), h.uid().as_deref());
    tracing::warn!(namespace = %h.namespace().unwrap_or_default(), name = %h.name_any(), error = %error.chain(1024), delay_ms = delay.as_millis() as u64, "reconcile failed");
    Action::requeue(delay)
}

/// One pass of the pipeline over a Habitat that has the finalizer, or gets it from `adding`
/// alongside the pass: observe → decide and act → persist → record → requeue. The status is
/// written once the finalizer is on.
async fn run(h: &Habitat, ctx: &Context, adding: Option<&Api<Habitat>>) -> Result<Action, Error> {
    let ns = h
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let uid = h.uid().ok_or(Error::MissingField("metadata.uid"))?;
    if stale(ctx, &uid, h) {
        tracing::debug!(%ns, name = %h.name_any(), "the cache does not show our last status write yet; looking again shortly");
        return Ok(Action::requeue(STALE_RETRY));
    }
    // Observe: the caches, and the Secrets the spec names.
    let mut snap = observe_pass(h, ctx, &ns).await?;
    // Decide and act until the machine waits; a new Habitat's finalizer goes out alongside.
    let mut decider = Decider::remembering(&ctx.habitats.verified);
    let (added, mut pass) = futures::join!(
        async {
            match adding {
                Some(api) => Some(add_finalizer(api, ctx, h).await),
                None => None,
            }
        },
        drive(h, ctx, persisted_phase(h), &mut snap, &mut decider),
    );
    let version = match replaced_version(h, added) {
        Replaced::Version(version) => version,
        // The pass's actions are told now (a key it generated is not generated again); the
        // phases it walked are not persisted, and the pass that repeats them tells them.
        Replaced::Raced => {
            ctx.events.send(h, pass.notes);
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        Replaced::Failed(e) => return Err(e),
    };
    observe_channel_census(h, ctx, &mut snap, &mut pass.notes).await;
    // Persist: the status the pass leads to, written when worth it.
    let now = Utc::now();
    let facts = decide::facts(h, &snap, &decider.desired(h, &snap));
    let old = h.status.clone().unwrap_or_default();
    let new = status::desired(&Inputs {
        habitat: h,
        phase: pass.phase,
        snapshot: &snap,
        facts: &facts,
        outcome: &pass.outcome,
        phase_changed: !pass.transitions.is_empty(),
        now,
    });
    // Record: metrics, logs and the Events of the pass.
    let notes = record(ctx, h, &uid, &pass, &old, &new, now);
    let deferred = write_status(ctx, h, &ns, &uid, new, &old, pass.phase, version).await?;
    if h.metadata.deletion_timestamp.is_some() {
        ctx.habitats.forget(&uid);
    }
    ctx.metrics.state_entries(ctx.habitats.len());
    ctx.events.send(h, notes);
    // Requeue: the failure's backoff (error_policy), or when to look again.
    if let Some(e) = pass.failure {
        return Err(e);
    }
    let stalled = leader::stalled(&snap.leader, &snap.pods);
    let next = match (next_requeue(ctx, h, &uid, &pass.outcome, stalled), deferred) {
        (Some(after), Some(wait)) => Some(after.min(wait)),
        (None, Some(wait)) | (Some(wait), None) => Some(wait),
        (None, None) => None,
    };
    tracing::debug!(%ns, name = %h.name_any(), outcome = ?pass.outcome, requeue = ?next, "reconciled");
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// The snapshot of `h`'s world: the caches, the Secrets the spec names (read when their
/// version changes) and the ring key this process generated and the cache may not hold yet.
async fn observe_pass(h: &Habitat, ctx: &Context, ns: &str) -> Result<observe::Snapshot, Error> {
    let generated = h
        .spec
        .service
        .ring
        .as_ref()
        .and_then(|r| remembered_key(ctx, ns, &r.name));
    let secrets = match ctx.secrets.view(&ctx.client, &ctx.stores, h).await {
        Ok(view) => view,
        // Being deleted, the Habitat needs no Secret: a failed read must not hold the finalizer.
        Err(e) if h.metadata.deletion_timestamp.is_some() => {
            tracing::debug!(%ns, name = %h.name_any(), error = %e.chain(1024), "Secrets not read during deletion");
            Default::default()
        }
        Err(e) => return Err(e),
    };
    Ok(observe(h, ctx, &secrets, generated))
}

/// Which version of the Habitat the status write replaces.
enum Replaced {
    /// `h`'s, or the finalizer's when this pass added it.
    Version(Option<String>),
    /// The finalizer's patch lost a race: the copy predates a change of the finalizers
    /// (another event woke it before the watch delivered the change), so the patch's
    /// precondition failed. The pass's writes stand; it runs again shortly on a fresh copy.
    /// Not a failure.
    Raced,
    /// The finalizer could not be added.
    Failed(Error),
}

/// The version the status write replaces, given the finalizer's patch of this pass (`added`).
fn replaced_version(h: &Habitat, added: Option<Result<Habitat, kube::Error>>) -> Replaced {
    match added {
        None => Replaced::Version(h.resource_version()),
        Some(Ok(patched)) => Replaced::Version(patched.resource_version()),
        Some(Err(kube::Error::Api(s))) if s.code == 409 || s.code == 422 => {
            tracing::debug!(namespace = %h.namespace().unwrap_or_default(), name = %h.name_any(), "finalizer already being added; retrying with a fresh copy");
            Replaced::Raced
        }
        Some(Err(e)) => Replaced::Failed(Error::Finalizer {
            name: h.name_any(),
            retry_after: crate::error::retry_after(&e),
            message: e.to_string(),
        }),
    }
}

/// Standalone supervisors that update themselves: only the census says what they run, and a
/// rolling group's members confirmed dead are departed too (leader groups read theirs in
/// `act`).
async fn observe_channel_census(
    h: &Habitat,
    ctx: &Context,
    snap: &mut observe::Snapshot,
    notes: &mut Vec<Note>,
) {
    if follows_channel(h)
        && snap.leader == observe::LeaderView::NotObserved
        && snap.pods.iter().any(peer::is_running)
        && h.metadata.deletion_timestamp.is_none()
    {
        let (view, read) = leader::observe_read(h, ctx.census.as_ref(), &snap.pods).await;
        snap.leader = view;
        depart::depart_dead(ctx, h, read.as_ref(), notes).await;
    }
}

/// Writes `new` when it is worth it now ([`status::worth_writing`]), and remembers the version
/// the write replaced (a reconcile handed it again comes from a stale cache). Answers how long
/// a deferred progress write waits.
#[allow(clippy::too_many_arguments)]
async fn write_status(
    ctx: &Context,
    h: &Habitat,
    ns: &str,
    uid: &str,
    new: crate::api::HabitatStatus,
    old: &crate::api::HabitatStatus,
    phase: Phase,
    version: Option<String>,
) -> Result<Option<Duration>, Error> {
    let clock_now = std::time::Instant::now();
    let waited = ctx.habitats.progress.waited(uid, clock_now);
    let worth = status::worth_writing(&new, old, phase, Some(waited));
    let mut deferred = None;
    match worth {
        Worth::Nothing => {}
        Worth::Later(wait) => deferred = Some(wait),
        Worth::Now => {
            let written = persist(ctx, h, ns, new).await?;
            // Marked only when the write made a new version: after a write that changed nothing
            // (the server already held this status) no newer copy would ever come to clear it.
            if let (Some(before), Some(after)) = (version, written) {
                if before != after {
                    ctx.habitats
                        .written_over
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(uid.to_string(), before);
                }
            }
        }
    }
    // Only converging Habitats are remembered (the others' next write is never deferred).
    ctx.habitats
        .progress
        .decided(uid, worth, status::converging(phase), clock_now);
    Ok(deferred)
}

/// Whether the supervisors may change the package themselves (`updateStrategy` other than
/// `none`), so the census is read for `status.members` even outside the leader topology.
fn follows_channel(h: &Habitat) -> bool {
    h.spec.service.update_strategy != UpdateStrategy::None
}

/// How soon a reconcile handed a copy older than our own status write looks again (the watch
/// delivers the written object within milliseconds, and wakes the object itself).
const STALE_RETRY: Duration = Duration::from_secs(1);

/// Whether `h` is the version our last status write of it replaced. Forgets the mark once a
/// newer version arrives.
fn stale(ctx: &Context, uid: &str, h: &Habitat) -> bool {
    let mut marks = ctx
        .habitats
        .written_over
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    match (marks.get(uid), h.resource_version()) {
        (Some(over), Some(version)) if *over == version => {
            // The written copy's watch event wakes the object (it would be dropped as an echo).
            ctx.echoes.awaited(uid);
            true
        }
        (Some(_), _) => {
            marks.remove(uid);
            false
        }
        (None, _) => false,
    }
}

/// The persisted phase; an unknown value restarts the lifecycle.
fn persisted_phase(h: &Habitat) -> Phase {
    h.phase_str().map_or(Phase::Pending, |p| {
        p.parse().unwrap_or_else(|e| {
            tracing::warn!(name = %h.name_any(), error = %e, "restarting the lifecycle from Pending");
            Phase::Pending
        })
    })
}

/// What one pass of decide → act did.
struct Pass {
    phase: Phase,
    transitions: Vec<(Phase, Phase)>,
    notes: Vec<Note>,
    outcome: Outcome,
    failure: Option<Error>,
}

/// Decides and acts until the machine waits, a step fails, or the step limit is reached.
async fn drive(
    h: &Habitat,
    ctx: &Context,
    phase: Phase,
    snap: &mut observe::Snapshot,
    decider: &mut Decider<'_>,
) -> Pass {
    let mut pass = Pass {
        phase,
        transitions: vec![],
        notes: vec![],
        outcome: Outcome::Busy,
        failure: None,
    };
    for _ in 0..MAX_STEPS {
        let plan = decider.next(h, snap, pass.phase, &pass.transitions);
        let d = plan.decision;
        if d.phase != pass.phase {
            pass.transitions.push((pass.phase, d.phase));
            pass.phase = d.phase;
        }
        match d.step {
            Step::Advance => {}
            Step::Wait(b) => {
                pass.outcome = Outcome::Waiting(b);
                break;
            }
            // Termination is recorded by the status write; the finalizer helper then releases.
            Step::Cleanup => {
                pass.outcome = Outcome::Waiting(Blocker::Nothing);
                break;
            }
            step => {
                if let Err(e) = act(step, h, ctx, snap, &plan.desired, &mut pass.notes).await {
                    if e.disposition() == Disposition::NamespaceTerminating {
                        tracing::debug!(namespace = %h.namespace().unwrap_or_default(), name = %h.name_any(), error = %e.chain(1024), "namespace is being deleted; stopping until the Habitat is deleted");
                        pass.outcome = Outcome::NamespaceTerminating;
                        break;
                    }
                    pass.outcome = Outcome::Failed(e.chain(1024));
                    pass.failure = Some(e);
                    break;
                }
            }
        }
    }
    pass
}

/// Metrics and logs of the pass, and the Events to publish: one for the phases the pass walked,
/// one per condition that asks the user to act, and one per distinct failure.
fn record(
    ctx: &Context,
    h: &Habitat,
    uid: &str,
    pass: &Pass,
    old: &crate::api::HabitatStatus,
    new: &crate::api::HabitatStatus,
    now: chrono::DateTime<Utc>,
) -> Vec<Note> {
    let mut notes = pass.notes.clone();
    let since = old
        .last_phase_transition_time
        .as_ref()
        .map(crate::reconcile::conditions::from_time);
    for (i, (from, to)) in pass.transitions.iter().enumerate() {
        // Only the first phase of the pass was entered before it; later ones lasted no time.
        let seconds = if i == 0 {
            since.map(|s| (now - s).num_milliseconds() as f64 / 1000.0)
        } else {
            Some(0.0)
        };
        ctx.metrics.transition(*from, *to, seconds);
        tracing::info!(namespace = %h.namespace().unwrap_or_default(), name = %h.name_any(), from = %from, to = %to, "phase transition");
    }
    // One Event for the pass, naming the path it took and why it stopped where it did.
    let path: Vec<Phase> = pass
        .transitions
        .first()
        .map(|(from, _)| *from)
        .into_iter()
        .chain(pass.transitions.iter().map(|(_, to)| *to))
        .collect();
    if let Some(last) = path.last() {
        let mut why = transition_reason(*last, new);
        // A group's first leader is told by this Event (the LeaderElected condition names the
        // pod), not by a LeaderChanged Event from "none" beside it: one Event fewer per group.
        let elected_here = path[1..].contains(&Phase::LeaderElected);
        if elected_here && old.leader.is_none() && new.leader.is_some() {
            notes.retain(|n| n.reason != act::LEADER_CHANGED);
            if *last != Phase::LeaderElected {
                why = format!("{}; {why}", transition_reason(Phase::LeaderElected, new));
            }
        }
        notes.extend(Note::passage(&path, &why));
    }
    notes.extend(user_warnings(&old.conditions, &new.conditions));
    let mut last = ctx
        .habitats
        .last_failure
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    match &pass.failure {
        Some(e) => {
            let message = e.chain(1024);
            if last.get(uid) != Some(&message) {
                notes.push(Note::warning(e.category(), message.clone()));
                last.insert(uid.to_string(), message);
            }
        }
        None => {
            last.remove(uid);
        }
    }
    notes
}

/// Why a Habitat entered `to`, from the condition that gates that phase.
fn transition_reason(to: Phase, status: &crate::api::HabitatStatus) -> String {
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    match to {
        Phase::Pending => "accepted".to_string(),
        Phase::ConfigMapReady => condition("ConfigMapReady"),
        Phase::KeyReady => condition("KeyReady"),
        Phase::Deploying => condition("Deployed"),
        Phase::LeaderElected => condition("LeaderElected"),
        Phase::Ready => condition("Available"),
        Phase::Updating => format!(
            "the spec changed (generation {})",
            status.observed_generation.unwrap_or(0)
        ),
        Phase::Terminating => "the Habitat is being deleted".to_string(),
    }
}

/// Warning Events for conditions that turned False with a reason the user must act on.
fn user_warnings(
    old: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    new: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Vec<Note> {
    let user_reasons = [
        Reason::SecretNotFound,
        Reason::KeyMalformed,
        Reason::ReferencedSecretMissing,
        Reason::InvalidSpec,
    ];
    new.iter()
        .filter(|c| {
            c.status == "False" && (c.type_ != "Ready" || c.reason == Reason::InvalidSpec.as_str())
        })
        .filter(|c| user_reasons.iter().any(|r| r.as_str() == c.reason))
        .filter(|c| {
            !old.iter()
                .any(|o| o.type_ == c.type_ && o.reason == c.reason && o.message == c.message)
        })
        .map(|c| Note::warning(&c.reason, c.message.clone()))
        .collect()
}

/// Writes the status, whole, in place of the one the server holds (a JSON patch that adds
/// `/status`, which replaces it when there is one); answers the resourceVersion written. An
/// object already gone is fine.
///
/// Not a server-side apply: the status is the operator's alone, so an apply's field ownership
/// buys nothing here, and an apply is the costliest way to write it. kube-apiserver parses an
/// apply's body as YAML (twice) and merges its field sets; a JSON patch is applied to the stored
/// JSON. Profiled at N = 300 on the real ground, the
/// YAML parsing and the field manager's apply took 1.28 of kube-apiserver's CPU seconds in 10 s
/// of the operator's run with the status written by apply, 0.72 without.
async fn persist(
    ctx: &Context,
    h: &Habitat,
    ns: &str,
    status: crate::api::HabitatStatus,
) -> Result<Option<String>, Error> {
    let api: Api<Habitat> = Api::namespaced(ctx.client.clone(), ns);
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "add", "path": "/status", "value": status},
    ]))
    .map_err(|e| Error::PersistStatus {
        name: h.name_any(),
        source: kube::Error::SerdeError(e),
    })?;
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api
        .patch_status(&h.name_any(), &params, &Patch::Json::<()>(patch))
        .await
    {
        Ok(written) => {
            ctx.echoes.wrote(&written);
            Ok(written.resource_version())
        }
        Err(e) if crate::error::is_not_found(&e) && h.metadata.deletion_timestamp.is_some() => {
            Ok(None)
        }
        Err(source) => Err(Error::PersistStatus {
            name: h.name_any(),
            source,
        }),
    }
}

/// When to look at the object again, given how the reconcile ended and whether its election
/// can finish before another of its supervisors starts ([`leader::stalled`]).
fn next_requeue(
    ctx: &Context,
    h: &Habitat,
    uid: &str,
    outcome: &Outcome,
    stalled: bool,
) -> Option<Duration> {
    // Leader groups, and supervisors following a channel, are re-read at the census' pace.
    let leader = h.spec.service.topology == Topology::Leader || follows_channel(h);
    match outcome {
        Outcome::Busy => Some(Duration::from_millis(200)),
        // Not reached: a failed pass returns its error, and `error_policy` picks the delay.
        Outcome::Failed(_) => Some(Duration::from_secs(1)),
        // The namespace refuses new objects: its deletion takes the Habitat along, and that
        // deletion (or any other change) wakes the object. No backoff: this is not a failure.
        Outcome::NamespaceTerminating => None,
        // The election cannot finish before another supervisor starts, which the pod watch
        // says: until then the census is read only at the resync interval, in case the group
        // has members this Habitat's pods do not show. Polled meanwhile, a leader group waiting
        // for kube-controller-manager to create its pods was reconciled 6 times for nothing at
        // N = 1000 on the real ground.
        Outcome::Waiting(Blocker::Election) if stalled => {
            ctx.habitats.backoffs.reset(uid);
            Some(ctx.resync)
        }
        // The census is not watched: poll it, backing off while the election does not finish.
        Outcome::Waiting(Blocker::Election) => {
            let delay = ctx.habitats.backoffs.next(uid).min(LEADER_POLL);
            ctx.metrics.backoff(delay.as_secs_f64());
            Some(delay)
        }
        Outcome::Waiting(Blocker::Rollout) if leader => Some(ROLLOUT_POLL),
        // The StatefulSet's and the pods' watch events say when it moved.
        Outcome::Waiting(Blocker::Rollout) => None,
        Outcome::Waiting(_) if h.metadata.deletion_timestamp.is_some() => None,
        Outcome::Waiting(blocker) => {
            ctx.habitats.backoffs.reset(uid);
            Some(if !leader {
                ctx.resync
            } else if *blocker == Blocker::Nothing && !follows_channel(h) {
                settled_census_poll(h, ctx.resync, Utc::now())
            } else {
                LEADER_POLL
            })
        }
    }
}

/// How soon a settled leader group reads its census again: [`LEADER_POLL`] just after a
/// condition changed, then as long as it has stood since (10 s, then 20, 40...), up to the
/// resync interval. A leader group that stays settled is read less and less; a member that
/// dies or is replaced changes its pods, whose watch events wake it at once and, through the
/// election they start, its conditions. A re-election no pod event shows (the supervisors
/// lost each other but kept running) is seen within the resync interval. Supervisors that
/// follow a channel update themselves without any Kubernetes event, and keep the short poll.
fn settled_census_poll(h: &Habitat, resync: Duration, now: DateTime<Utc>) -> Duration {
    let changed = h
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| conditions::from_time(&c.last_transition_time))
        .max();
    let settled_for = changed.map_or(Duration::ZERO, |t| (now - t).to_std().unwrap_or_default());
    settled_for.clamp(LEADER_POLL, resync.max(LEADER_POLL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::census::{CensusSource, HttpCensus};
    use crate::cluster::events::Recorder;
    use crate::reconcile::metrics::Metrics;
    use crate::watch::Stores;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{DeleteParams, PostParams};
    use kube::runtime::events::Reporter;
    use kube::runtime::reflector;
    use kube::CustomResourceExt;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// One pass of decisions over unchanging facts, as `drive` takes them.
    fn dry_pass(mut phase: Phase, facts: habitat_machine::Facts) -> (Phase, Vec<(Phase, Phase)>) {
        let mut transitions = vec![];
        for _ in 0..MAX_STEPS {
            let d = habitat_machine::decide(phase, &decide::facts_in_pass(facts, &transitions));
            if d.phase != phase {
                transitions.push((phase, d.phase));
                phase = d.phase;
            }
            if d.step != Step::Advance {
                break;
            }
        }
        (phase, transitions)
    }

    /// A ring key the operator is still generating is progress, not something the user must
    /// fix: no Warning. A missing Secret the user named is. Told apart by the reason alone.
    #[test]
    fn a_key_being_generated_warns_nobody_and_a_missing_secret_warns() {
        let key = |reason: conditions::Reason| {
            conditions::Desired::new(
                conditions::ConditionType::KeyReady,
                false,
                reason,
                "the same words either way",
            )
        };
        let merged = |d: conditions::Desired| conditions::merge(&[], &[d], 1, chrono::Utc::now());
        assert!(user_warnings(&[], &merged(key(conditions::Reason::KeyPending))).is_empty());
        assert_eq!(
            user_warnings(&[], &merged(key(conditions::Reason::SecretNotFound))).len(),
            1
        );
    }
    #[test]
    fn a_pass_that_walks_to_ready_does_not_go_on_to_updating() {
        // No status yet (observedGeneration unset, so generation 1 is "above" it) and every
        // child in shape: the operator was killed after creating them, before its first status
        // write. Found by tests/crash.rs.
        let facts = habitat_machine::Facts {
            peer_config_current: true,
            key_ready: true,
            referenced_secrets_present: true,
            workload_current: true,
            rollout_done: true,
            spec_changed: true,
            ..habitat_machine::Facts::default()
        };
        let (phase, transitions) = dry_pass(Phase::Pending, facts);
        assert_eq!(phase, Phase::Ready, "{transitions:?}");
        assert_eq!(transitions.len(), 4, "{transitions:?}");
        // A Ready object whose spec changed still enters Updating, once, and finishes the
        // rollout in the same pass when it is already done.
        let (phase, transitions) = dry_pass(Phase::Ready, facts);
        assert_eq!(
            transitions,
            vec![
                (Phase::Ready, Phase::Updating),
                (Phase::Updating, Phase::Ready)
            ]
        );
        assert_eq!(phase, Phase::Ready);
    }

    fn context(client: kube::Client) -> Arc<Context> {
        Arc::new(Context {
            client: client.clone(),
            stores: Stores {
                habitats: reflector::store().0,
                statefulsets: reflector::store().0,
                config_maps: reflector::store().0,
                services: reflector::store().0,
                budgets: reflector::store().0,
                pods: reflector::store().0,
                secrets: reflector::store().0,
                index: Default::default(),
                recent: Default::default(),
            },
            allocating: Arc::new(allocating::Allocating::new(1).0),
            secrets: Default::default(),
            events: crate::cluster::events::EventSink::spawn(Recorder::new(
                client,
                Reporter {
                    controller: crate::api::MANAGER.into(),
                    instance: None,
                },
            )),
            metrics: Metrics::default(),
            resync: crate::reconcile::requeue::RESYNC,
            census: Arc::new(HttpCensus::new(9631, Duration::from_millis(100)))
                as Arc<dyn CensusSource>,
            habitats: Default::default(),
            generated_keys: Mutex::new(Default::default()),
            key_generation: tokio::sync::Mutex::new(()),
            echoes: Default::default(),
            synced: Arc::new(AtomicBool::new(true)),
        })
    }

    /// A reconcile handed the copy that our own status write replaced (the cache has not caught
    /// up) would walk the phases again: it waits instead, once the newer copy arrives it goes on.
    #[tokio::test]
    async fn the_copy_a_status_write_replaced_is_recognised_as_stale() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let ctx = context(kube::Client::try_from(config).expect("a client"));
        let mut h = crate::api::fixtures::habitat();
        h.metadata.resource_version = Some("41".into());
        assert!(!stale(&ctx, "uid", &h), "nothing written yet");
        ctx.habitats
            .written_over
            .lock()
            .expect("lock")
            .insert("uid".into(), "41".into());
        let mut written = h.clone();
        written.metadata.uid = Some("uid".into());
        written.metadata.resource_version = Some("42".into());
        ctx.echoes.wrote(&written);
        assert!(stale(&ctx, "uid", &h));
        assert!(
            !ctx.echoes.is_echo(&written),
            "the written copy's event wakes the reconcile that waits for it"
        );
        assert!(!stale(&ctx, "other", &h));
        h.metadata.resource_version = Some("42".into());
        assert!(!stale(&ctx, "uid", &h), "the written copy arrived");
        h.metadata.resource_version = Some("41".into());
        assert!(
            !stale(&ctx, "uid", &h),
            "the mark is gone once a newer copy was seen"
        );
    }

    /// A standalone rollout progresses by watch events only; a leader group's also by its census,
    /// which no watch delivers, so only that one is polled.
    #[tokio::test]
    async fn only_a_rollout_the_census_tells_is_polled() {
        use crate::api::fixtures::HabitatFixture;
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let ctx = context(kube::Client::try_from(config).expect("a client"));
        let rollout = Outcome::Waiting(Blocker::Rollout);
        let standalone = crate::api::fixtures::habitat();
        assert_eq!(next_requeue(&ctx, &standalone, "a", &rollout, false), None);
        let group = crate::api::fixtures::habitat().leader();
        assert_eq!(
            next_requeue(&ctx, &group, "b", &rollout, false),
            Some(ROLLOUT_POLL)
        );
    }

    /// A leader group waiting for its election polls the census, unless the election cannot
    /// finish before another supervisor starts, which the pod watch says.
    #[tokio::test]
    async fn a_stalled_election_is_not_polled() {
        use crate::api::fixtures::HabitatFixture;
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let ctx = context(kube::Client::try_from(config).expect("a client"));
        let election = Outcome::Waiting(Blocker::Election);
        let group = crate::api::fixtures::habitat().leader();
        // Polled, backing off from half a second up to LEADER_POLL.
        let polls: Vec<_> = (0..8)
            .map(|_| next_requeue(&ctx, &group, "g", &election, false).expect("a poll"))
            .collect();
        assert!(polls[0] <= Duration::from_secs(1), "{polls:?}");
        assert_eq!(polls[7], LEADER_POLL, "{polls:?}");
        // Stalled: read again only at the resync interval, and the backoff starts over.
        assert_eq!(
            next_requeue(&ctx, &group, "g", &election, true),
            Some(ctx.resync)
        );
        let again = next_requeue(&ctx, &group, "g", &election, false).expect("a poll");
        assert!(again <= Duration::from_secs(1), "{again:?}");
    }

    /// A settled leader group reads its census less often the longer it has stood, up to the
    /// resync interval; one whose conditions just changed, or whose supervisors follow a
    /// channel, keeps the short poll.
    #[tokio::test]
    async fn a_settled_leader_group_is_read_less_often_the_longer_it_stands() {
        use crate::api::fixtures::HabitatFixture;
        use crate::api::HabitatStatus;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let ctx = context(kube::Client::try_from(config).expect("a client"));
        let settled = Outcome::Waiting(Blocker::Nothing);
        let stood = |ago: i64| {
            let mut h = crate::api::fixtures::habitat().leader();
            let at = Utc::now() - chrono::Duration::seconds(ago);
            h.status = Some(HabitatStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    reason: "Ready".into(),
                    message: String::new(),
                    last_transition_time: conditions::to_time(at),
                    observed_generation: Some(1),
                }],
                ..HabitatStatus::default()
            });
            h
        };
        let poll = |h: &Habitat| next_requeue(&ctx, h, "g", &settled, false).expect("a poll");
        let secs = |d: Duration| d.as_secs_f64().round() as u64;
        assert_eq!(poll(&crate::api::fixtures::habitat().leader()), LEADER_POLL);
        assert_eq!(poll(&stood(2)), LEADER_POLL);
        assert_eq!(secs(poll(&stood(40))), 40);
        assert_eq!(poll(&stood(3600)), ctx.resync.max(LEADER_POLL));
        let mut channel = stood(3600);
        channel.spec.service.update_strategy = UpdateStrategy::AtOnce;
        assert_eq!(poll(&channel), LEADER_POLL);
        let standalone = crate::api::fixtures::habitat();
        assert_eq!(poll(&standalone), ctx.resync);
    }

    /// A sandbox with the Habitat CRD installed, and a client of it (the sandbox runs while the
    /// first is held).
    async fn sandbox_with_crd() -> (habitat_sandbox::Sandbox, kube::Client) {
        let sandbox = habitat_sandbox::Sandbox::start(habitat_sandbox::Options::default())
            .await
            .expect("sandbox starts");
        let crd = serde_yaml::to_string(&Habitat::crd()).expect("the CRD serialises");
        sandbox.apply_yaml(&crd).await.expect("the CRD installs");
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&sandbox.kubeconfig_yaml()).expect("a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration");
        let client = kube::Client::try_from(config).expect("a client");
        (sandbox, client)
    }

    /// Creates namespace `ns` and, in it, the fixture Habitat `redis` with `finalizers`.
    async fn habitat_in(
        client: &kube::Client,
        ns: &str,
        finalizers: Option<Vec<String>>,
    ) -> (Api<Habitat>, Habitat) {
        let mut h = crate::api::fixtures::habitat();
        h.metadata.finalizers = finalizers;
        habitat_of(client, ns, h).await
    }

    /// Creates namespace `ns` and, in it, `h` as the Habitat `redis`.
    async fn habitat_of(
        client: &kube::Client,
        ns: &str,
        mut h: Habitat,
    ) -> (Api<Habitat>, Habitat) {
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(ns.into());
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace created");
        h.metadata = kube::api::ObjectMeta {
            name: Some("redis".into()),
            namespace: Some(ns.into()),
            finalizers: h.metadata.finalizers.take(),
            ..Default::default()
        };
        let habitats: Api<Habitat> = Api::namespaced(client.clone(), ns);
        let created = habitats
            .create(&PostParams::default(), &h)
            .await
            .expect("Habitat created");
        (habitats, created)
    }

    /// A new Habitat gets its finalizer and its first pass in one reconcile: kube's finalizer
    /// helper alone added the finalizer and left the first pass to the next wake-up.
    #[tokio::test]
    async fn the_first_reconcile_adds_the_finalizer_and_goes_on() {
        let (sandbox, client) = sandbox_with_crd().await;
        let (habitats, created) = habitat_in(&client, "first", None).await;
        let ctx = context(client.clone());
        reconcile(Arc::new(created.clone()), ctx.clone())
            .await
            .expect("the reconcile succeeds");
        let now = habitats.get("redis").await.expect("the Habitat");
        assert_eq!(now.finalizers(), [FINALIZER.to_string()]);
        let peer: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "first");
        assert!(
            peer.get_opt(&now.peer_config_name())
                .await
                .expect("a read")
                .is_some(),
            "the first pass did not run in the reconcile that added the finalizer"
        );
        assert_eq!(
            now.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Deploying")
        );
        // A copy from before the finalizer was added is refused (409): the finalizers changed
        // since.
        let mut raced = created.clone();
        raced.metadata.finalizers = None;
        let refused = add_finalizer(&habitats, &ctx, &raced).await;
        assert!(
            matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 409),
            "{refused:?}"
        );
        // Reconciled from that copy, the pass goes on and asks to look again, with no failure.
        let action = reconcile(Arc::new(raced), ctx.clone())
            .await
            .expect("no failure");
        assert_eq!(action, Action::requeue(Duration::from_millis(200)));
        sandbox.shutdown().await;
    }

    /// A pass whose finalizer is refused (409: its copy predates another change of the
    /// finalizers) still tells what it did: the ring key it generated is not generated again by
    /// the pass that repeats it, so its Event is recorded now or never.
    #[tokio::test]
    async fn a_refused_finalizer_keeps_the_events_of_the_pass() {
        let (sandbox, client) = sandbox_with_crd().await;
        let mut h = crate::api::fixtures::habitat();
        h.spec.service.ring = Some(crate::api::RingSpec {
            name: "blue".into(),
        });
        let (habitats, created) = habitat_of(&client, "raced", h).await;
        // Another writer changes the finalizers after the copy was read.
        let other = serde_json::json!({"metadata": {"finalizers": ["example.com/other"]}});
        habitats
            .patch("redis", &PatchParams::default(), &Patch::Merge(&other))
            .await
            .expect("finalizer added");
        let ctx = context(client.clone());
        let action = reconcile(Arc::new(created), ctx.clone())
            .await
            .expect("no failure");
        assert_eq!(action, Action::requeue(Duration::from_millis(200)));
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), "raced");
        let reasons = || async {
            let listed = events.list(&Default::default()).await.expect("Events");
            listed
                .items
                .into_iter()
                .filter_map(|e| e.reason)
                .collect::<Vec<_>>()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let reasons = reasons().await;
            if reasons.iter().any(|r| r == "RingKeyGenerated") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no RingKeyGenerated Event: {reasons:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A pass's Events go out in order, its phases' last: had they been sent, they would
        // be recorded by now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let reasons = reasons().await;
        assert!(
            !reasons.iter().any(|r| r.starts_with("Entered")),
            "the phases were not persisted, so the repeated pass tells them: {reasons:?}"
        );
        sandbox.shutdown().await;
    }

    /// A status write replaces the status the server holds, whole: a field the new status no
    /// longer has (the leader of a group that lost it) is gone after it, as it was when the
    /// status was written by server-side apply.
    #[tokio::test]
    async fn a_status_write_replaces_the_whole_status() {
        let (sandbox, client) = sandbox_with_crd().await;
        let (habitats, created) = habitat_in(&client, "whole", None).await;
        let ctx = context(client.clone());
        let led = crate::api::HabitatStatus {
            phase: Some("LeaderElected".into()),
            leader: Some("redis-0".into()),
            ..Default::default()
        };
        persist(&ctx, &created, "whole", led)
            .await
            .expect("written");
        let read = habitats.get("redis").await.expect("the Habitat");
        assert_eq!(
            read.status.as_ref().and_then(|s| s.leader.as_deref()),
            Some("redis-0")
        );
        let lost = crate::api::HabitatStatus {
            phase: Some("Deploying".into()),
            ..Default::default()
        };
        let written = persist(&ctx, &read, "whole", lost).await.expect("written");
        let read = habitats.get("redis").await.expect("the Habitat");
        assert_eq!(written, read.resource_version());
        let status = read.status.expect("a status");
        assert_eq!(status.phase.as_deref(), Some("Deploying"));
        assert_eq!(status.leader, None, "the old leader stayed: {status:?}");
        sandbox.shutdown().await;
    }

    /// What [`Timed`] saw of one request: its method and path, when it went out, and when its
    /// answer came back.
    #[derive(Clone, Debug)]
    struct Span {
        method: String,
        path: String,
        sent: std::time::Instant,
        answered: Option<std::time::Instant>,
    }

    /// A client layer that holds every request for `delay` before it goes on, and logs when each
    /// was sent and answered: with it, writes sent one after another never overlap, and writes
    /// sent together always do.
    #[derive(Clone)]
    struct Timed {
        delay: Duration,
        log: Arc<Mutex<Vec<Span>>>,
        /// Holds the Nth write (from 0) of a Service this much longer.
        hold_service_write: Option<(usize, Duration)>,
    }

    impl<S> tower::Layer<S> for Timed {
        type Service = TimedService<S>;
        fn layer(&self, inner: S) -> Self::Service {
            TimedService {
                inner,
                timed: self.clone(),
            }
        }
    }

    struct TimedService<S> {
        inner: S,
        timed: Timed,
    }

    impl<S, B> tower::Service<hyper::Request<B>> for TimedService<S>
    where
        S: tower::Service<hyper::Request<B>>,
        S::Future: Send + 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

        fn poll_ready(
            &mut self,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
            let log = self.timed.log.clone();
            let mut delay = self.timed.delay;
            let at = {
                let mut spans = log.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((nth, longer)) = self.timed.hold_service_write {
                    let before = spans.iter().filter(|s| service_write(s)).count();
                    if is_service_write(request.method().as_str(), request.uri().path())
                        && before == nth
                    {
                        delay += longer;
                    }
                }
                spans.push(Span {
                    method: request.method().to_string(),
                    path: request.uri().path().to_string(),
                    sent: std::time::Instant::now(),
                    answered: None,
                });
                spans.len() - 1
            };
            let answer = self.inner.call(request);
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                let answer = answer.await;
                log.lock().unwrap_or_else(|p| p.into_inner())[at].answered =
                    Some(std::time::Instant::now());
                answer
            })
        }
    }

    /// Whether a request is a write of a Service (every child is written by an apply: a PATCH).
    fn is_service_write(method: &str, path: &str) -> bool {
        method == "PATCH"
            && path
                .rsplit_once('/')
                .is_some_and(|(c, _)| c.ends_with("/services"))
    }

    fn service_write(s: &Span) -> bool {
        is_service_write(&s.method, &s.path)
    }

    /// A client of `sandbox` whose requests go through `timed`.
    async fn timed_client(sandbox: &habitat_sandbox::Sandbox, timed: &Timed) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&sandbox.kubeconfig_yaml()).expect("a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client configuration");
        kube::client::ClientBuilder::try_from(config)
            .expect("a client stack")
            .with_layer(timed)
            .build()
    }

    /// A new Habitat's first pass sends its finalizer together with its peer ConfigMap, then its
    /// workload's children, then its status once all of them are answered: three rounds of
    /// requests, where waiting for the finalizer first made four.
    #[tokio::test]
    async fn a_first_pass_sends_its_finalizer_with_its_peer_config() {
        let (sandbox, plain) = sandbox_with_crd().await;
        let (habitats, created) = habitat_in(&plain, "together", None).await;
        let timed = Timed {
            delay: Duration::from_millis(100),
            log: Default::default(),
            hold_service_write: None,
        };
        let ctx = context(timed_client(&sandbox, &timed).await);
        reconcile(Arc::new(created), ctx)
            .await
            .expect("the reconcile succeeds");
        let log = timed.log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // Every child is written by an apply, new or not: a PATCH of the object.
        let writes: Vec<&Span> = log
            .iter()
            .filter(|s| s.method == "PATCH" || (s.method == "POST" && !s.path.ends_with("/events")))
            .collect();
        let write = |path: &str| {
            *writes
                .iter()
                .find(|s| s.path.ends_with(path))
                .unwrap_or_else(|| panic!("no write of {path} in {writes:#?}"))
        };
        let answered = |s: &Span| s.answered.expect("every write is answered");
        let (finalizer, config) = (write("/habitats/redis"), write("/configmaps/redis-peer"));
        assert!(
            finalizer.sent < answered(config) && config.sent < answered(finalizer),
            "the finalizer and the peer ConfigMap waited for each other: {writes:#?}"
        );
        let children = write("/statefulsets/redis");
        assert!(
            answered(config) <= children.sent,
            "the workload went out before the peer ConfigMap was applied: {writes:#?}"
        );
        let status = write("/habitats/redis/status");
        assert!(
            [finalizer, config, children]
                .iter()
                .all(|s| answered(s) <= status.sent),
            "the status went out before the pass's writes were answered: {writes:#?}"
        );
        assert_eq!(
            writes.len(),
            5,
            "the headless Service too, and nothing else: {writes:#?}"
        );
        let now = habitats.get("redis").await.expect("the Habitat");
        assert_eq!(now.finalizers(), [FINALIZER.to_string()]);
        assert_eq!(
            now.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Deploying")
        );
        sandbox.shutdown().await;
    }

    /// A Habitat with the operator's finalizer in `namespace`, whose deletion then starts: the
    /// finalizer keeps the namespace terminating. The Habitat as created.
    async fn in_terminating_namespace(client: &kube::Client, namespace: &str) -> Habitat {
        let (_, h) = habitat_in(client, namespace, Some(vec![FINALIZER.into()])).await;
        Api::<Namespace>::all(client.clone())
            .delete(namespace, &DeleteParams::default())
            .await
            .expect("namespace deletion starts");
        h
    }

    /// Waits (at most 10 s) until the background create of `namespace/name` has ended.
    async fn until_created(allocating: &allocating::Allocating, namespace: &str, name: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while allocating.pending(namespace, name).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the create of {namespace}/{name} never ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A leader group's first pass does not wait for its leader Service, whose cluster IP the
    /// server allocates in turn with every other's: the create runs beside the pass, later
    /// passes see it pending, and its answer is remembered as the pass's own writes are.
    #[tokio::test]
    async fn a_first_pass_does_not_wait_for_its_leader_service() {
        use crate::api::fixtures::HabitatFixture;
        use k8s_openapi::api::core::v1::Service;
        let (sandbox, plain) = sandbox_with_crd().await;
        let (_, created) =
            habitat_of(&plain, "leader", crate::api::fixtures::habitat().leader()).await;
        // The pass's writes of Services: the headless Service's, then, from the task beside it,
        // the leader Service's, held for 3 s.
        let timed = Timed {
            delay: Duration::ZERO,
            log: Default::default(),
            hold_service_write: Some((1, Duration::from_secs(3))),
        };
        let ctx = context(timed_client(&sandbox, &timed).await);
        let started = std::time::Instant::now();
        reconcile(Arc::new(created.clone()), ctx.clone())
            .await
            .expect("the reconcile succeeds");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the pass waited for the held create: {:?}",
            started.elapsed()
        );
        let now: Habitat = Api::namespaced(plain.clone(), "leader")
            .get("redis")
            .await
            .expect("the Habitat");
        assert_eq!(
            now.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Deploying")
        );
        let leader_name = created.leader_service_name();
        let services: Api<Service> = Api::namespaced(plain, "leader");
        assert!(
            services
                .get_opt(&leader_name)
                .await
                .expect("a read")
                .is_none(),
            "the leader Service is not created yet"
        );
        // A pass meanwhile sees it pending: it does not send it again.
        let snap = observe(&now, &ctx, &Default::default(), None);
        assert!(snap.leader_service.is_some(), "pending, so seen");
        assert_eq!(snap.creating.as_deref(), Some(leader_name.as_str()));
        let mut decider = decide::Decider::default();
        let desired = decider.desired(&now, &snap);
        assert!(
            !decide::facts(&now, &snap, &desired).rollout_done,
            "no Ready before the leader Service exists"
        );
        // Once created, the answer is what later passes see until the cache shows it.
        until_created(&ctx.allocating, "leader", &leader_name).await;
        let live = services
            .get_opt(&leader_name)
            .await
            .expect("a read")
            .expect("the leader Service");
        let seen = observe(&now, &ctx, &Default::default(), None);
        assert_eq!(seen.creating, None);
        assert_eq!(
            seen.leader_service.and_then(|s| s.metadata.uid),
            live.metadata.uid,
            "the created Service, from the memory of recent writes"
        );
        let writes = timed
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|s| service_write(s))
            .count();
        assert_eq!(writes, 2, "one apply for each Service");
        sandbox.shutdown().await;
    }

    /// A leader Service whose name is taken (by a Service another writer made) is handed back by
    /// the background create, and the next pass takes it over, as a create in the pass did.
    #[tokio::test]
    async fn a_taken_leader_service_name_is_taken_over_by_the_next_pass() {
        use crate::api::fixtures::HabitatFixture;
        use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
        let (sandbox, client) = sandbox_with_crd().await;
        let (_, created) =
            habitat_of(&client, "taken", crate::api::fixtures::habitat().leader()).await;
        let leader_name = created.leader_service_name();
        let services: Api<Service> = Api::namespaced(client.clone(), "taken");
        let other = Service {
            metadata: kube::api::ObjectMeta {
                name: Some(leader_name.clone()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        services
            .create(&PostParams::default(), &other)
            .await
            .expect("another writer's Service");
        let ctx = context(client.clone());
        reconcile(Arc::new(created.clone()), ctx.clone())
            .await
            .expect("the first pass succeeds");
        until_created(&ctx.allocating, "taken", &leader_name).await;
        let now: Habitat = Api::namespaced(client.clone(), "taken")
            .get("redis")
            .await
            .expect("the Habitat");
        reconcile(Arc::new(now), ctx.clone())
            .await
            .expect("the next pass succeeds");
        let live = services
            .get(&leader_name)
            .await
            .expect("the leader Service");
        assert!(
            live.annotations()
                .contains_key(crate::cluster::apply::FINGERPRINT_ANNOTATION),
            "not taken over: {:?}",
            live.metadata
        );
        assert!(ctx.allocating.pending("taken", &leader_name).is_none());
        sandbox.shutdown().await;
    }

    /// A leader Service created in the background in a namespace that is being deleted is
    /// refused (403, NamespaceTerminating): no warning, as a pass that meets it stops quietly
    /// (tests/e2e.rs met it as a warning, when the namespace went while groups converged), and
    /// nothing kept: the Habitat goes with its namespace, so no pass would take the Service back.
    #[tokio::test]
    async fn a_background_create_in_a_terminating_namespace_warns_nothing() {
        use crate::api::fixtures::HabitatFixture;
        use futures::StreamExt;
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
            type Writer = Captured;
            fn make_writer(&'a self) -> Self::Writer {
                self.clone()
            }
        }
        let (sandbox, client) = sandbox_with_crd().await;
        let h = in_terminating_namespace(&client, "ending").await;
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_max_level(tracing::Level::WARN)
            .finish();
        let _logs = tracing::subscriber::set_default(subscriber);
        let (allocating, woken) = allocating::Allocating::new(1);
        let mut woken = Box::pin(woken);
        let mut leader = h.clone().leader();
        leader.metadata = h.metadata.clone();
        let svc = crate::children::workload(&leader, None)
            .leader
            .expect("a leader group's Services")
            .0;
        allocating.start(
            &client,
            &Default::default(),
            kube::runtime::reflector::ObjectRef::from_obj(&h),
            svc.clone(),
        );
        until_created(&allocating, "ending", &svc.name_any()).await;
        assert!(
            !allocating.handed_back("ending", &svc.name_any()),
            "nothing handed back to a Habitat whose namespace goes"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(200), woken.next())
                .await
                .is_err(),
            "no Habitat woken"
        );
        let logs = String::from_utf8_lossy(&captured.0.lock().unwrap_or_else(|p| p.into_inner()))
            .to_string();
        assert!(!logs.contains("WARN"), "warned: {logs}");
        sandbox.shutdown().await;
    }

    /// The namespace of a Habitat is deleted while the reconciler still holds a copy from
    /// before: creating the first child is refused with 403 NamespaceTerminating. The
    /// reconcile stops quietly: no error, no Warning Event, no error metrics, no backoff.
    #[tokio::test]
    async fn a_terminating_namespace_stops_the_reconcile_quietly() {
        let (sandbox, client) = sandbox_with_crd().await;
        let stale = in_terminating_namespace(&client, "going").await;

        let ctx = context(client);
        let action = reconcile(Arc::new(stale.clone()), ctx.clone())
            .await
            .expect("not a failure");
        assert_eq!(action, Action::await_change());
        assert!(
            ctx.habitats.last_failure.lock().expect("lock").is_empty(),
            "no Warning Event is recorded"
        );
        let text = ctx.metrics.render();
        assert!(
            text.contains("habitat_operator_reconciles_total{result=\"error\"} 0"),
            "{text}"
        );
        assert!(!text.contains("habitat_operator_reconcile_errors_total{reason=\"ApplyFailed\"} 1"));
        assert!(
            text.contains("habitat_operator_requeue_backoff_seconds_count 0"),
            "{text}"
        );

        // Should such an error reach the error policy, it waits without backing off either.
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "configmaps \"redis\" is forbidden: unable to create new content in namespace going because it is being terminated",
            "details": {"name": "redis", "kind": "configmaps", "causes": [
                {"reason": "NamespaceTerminating", "message": "namespace going is being terminated", "field": "metadata.namespace"}
            ]}
        }))
        .expect("a Status");
        let error = Error::Apply {
            action: "apply",
            kind: "ConfigMap".into(),
            name: "redis".into(),
            source: kube::Error::Api(status.boxed()),
        };
        let action = error_policy(Arc::new(stale), &error, ctx.clone());
        assert_eq!(action, Action::await_change());
        let text = ctx.metrics.render();
        assert!(text.contains("habitat_operator_reconciles_total{result=\"error\"} 0"));
        assert!(text.contains("habitat_operator_requeue_backoff_seconds_count 0"));
        sandbox.shutdown().await;
    }

    /// The pod to label as leader was deleted after the cache showed it (its namespace going: a
    /// CI run of `tests/e2e.rs` logged "cannot label Pod example-leader-2: NotFound"). The step
    /// goes on without it, quietly: no error, no LeaderChanged Event, and the pass does not ask
    /// for it again.
    #[tokio::test]
    async fn labelling_a_pod_deleted_meanwhile_is_no_failure() {
        let (sandbox, client) = sandbox_with_crd().await;
        let (_, h) = habitat_in(&client, "gone-pod", None).await;
        let ctx = context(client);
        let mut snap = observe::observe(&h, &ctx, &Default::default(), None);
        let mut pod = k8s_openapi::api::core::v1::Pod::default();
        pod.metadata.name = Some("redis-0".into());
        pod.metadata.namespace = Some("gone-pod".into());
        snap.pods.push(pod);
        let desired = decide::Desired {
            workload_current: false,
            workload: None,
            peers: vec![],
            peer_config_current: false,
            mislabelled: vec![("redis-0".into(), true)],
            replacement: None,
        };
        let mut notes = vec![];
        let result = act(
            Step::PublishLeader,
            &h,
            &ctx,
            &mut snap,
            &desired,
            &mut notes,
        )
        .await;
        assert!(result.is_ok(), "{result:?}");
        assert!(snap.pods.is_empty(), "the pass forgets the deleted pod");
        assert!(notes.is_empty(), "no leader change is told: {notes:?}");
        sandbox.shutdown().await;
    }

    /// The sandbox sheds load (429 with Retry-After: 1, as kube-apiserver's priority and
    /// fairness does): the failed reconcile is requeued after at least that second, although
    /// the object's backoff would have retried after 0.25 to 0.75 s.
    #[tokio::test]
    async fn a_429_with_retry_after_requeues_no_sooner_than_asked() {
        let sandbox = habitat_sandbox::Sandbox::start(habitat_sandbox::Options {
            faults: habitat_sandbox::faults::Faults {
                server_errors: 1.0,
                ..Default::default()
            },
            ..Default::default()
        })
        .await
        .expect("sandbox starts");
        let kc = kube::config::Kubeconfig::from_yaml(&sandbox.kubeconfig_yaml()).expect("yaml");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("a config");
        // kube's client retries 429 and 503 itself by default; this test wants the answer.
        config.default_retry = false;
        let client = kube::Client::try_from(config).expect("a client");
        let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "default");
        let mut too_many = None;
        for _ in 0..100 {
            match config_maps.list(&Default::default()).await {
                Err(e @ kube::Error::Api(_)) if matches!(&e, kube::Error::Api(s) if s.code == 429) =>
                {
                    too_many = Some(e);
                    break;
                }
                _ => continue,
            }
        }
        let source = too_many.expect("the sandbox answered 429 at least once in 100 requests");
        let error = Error::PersistStatus {
            name: "redis".into(),
            source,
        };
        assert_eq!(error.retry_after(), Some(Duration::from_secs(1)));
        let mut h = crate::api::fixtures::habitat();
        h.metadata.uid = Some("uid-429".into());
        let ctx = context(client);
        let action = error_policy(Arc::new(h), &error, ctx.clone());
        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        let text = ctx.metrics.render();
        assert!(
            text.contains("habitat_operator_requeue_backoff_seconds_sum 1"),
            "{text}"
        );
        sandbox.shutdown().await;
    }
}
