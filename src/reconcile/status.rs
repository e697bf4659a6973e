//! The status the operator wants a Habitat to show: phase, counts and conditions, computed
//! from the final snapshot of a reconcile. Pure; `persist` writes it only when it differs.

use chrono::{DateTime, Utc};
use habitat_machine::{Blocker, Facts, Phase};
use kube::ResourceExt;

use std::collections::BTreeSet;
use std::time::Duration;

use crate::api::{Habitat, HabitatStatus, MemberStatus, Topology};
use crate::cluster::census::Election;
use crate::reconcile::conditions::{self, ConditionType as T, Desired, Reason as R};
use crate::reconcile::observe::{LeaderView, Snapshot};
use crate::reconcile::ring::KeyState;

/// How the reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The machine waits on this.
    Waiting(Blocker),
    /// The step limit was reached before the machine settled; it goes on at once.
    Busy,
    /// A step failed with this message.
    Failed(String),
    /// The namespace is being deleted and refused a new object; nothing more can be done until
    /// the Habitat is deleted with it. Not a failure.
    NamespaceTerminating,
}

/// Everything the status depends on.
pub struct Inputs<'a> {
    /// The Habitat as read.
    pub habitat: &'a Habitat,
    /// The phase reached.
    pub phase: Phase,
    /// The final snapshot.
    pub snapshot: &'a Snapshot,
    /// The final facts.
    pub facts: &'a Facts,
    /// How the reconcile ended.
    pub outcome: &'a Outcome,
    /// Whether the phase changed in this reconcile.
    pub phase_changed: bool,
    /// The clock.
    pub now: DateTime<Utc>,
}

/// The status to persist.
pub fn desired(i: &Inputs<'_>) -> HabitatStatus {
    let h = i.habitat;
    let previous = h.status.clone().unwrap_or_default();
    let generation = h.metadata.generation.unwrap_or(0);
    // Counted as the machine's `rollout_done` is: the pods are ahead of the StatefulSet's status.
    let progress = i
        .snapshot
        .statefulset
        .as_ref()
        .map(|s| crate::reconcile::rollout::progress(s, &i.snapshot.pods, h.spec.count));
    let replicas = progress.map_or(0, |p| p.replicas);
    let ready_replicas = progress.map_or(0, |p| p.ready);
    let leader = match &i.snapshot.leader {
        LeaderView::Observed { pod, .. } => pod.clone(),
        // The census could not be read: keep what was known rather than blanking the column.
        LeaderView::Unreachable(_) | LeaderView::NotObserved
            if h.spec.service.topology == Topology::Leader =>
        {
            previous.leader.clone()
        }
        _ => None,
    };
    let members = match &i.snapshot.leader {
        LeaderView::Observed { members, .. } => members.clone(),
        // Unread or unreachable: keep what was known.
        _ => previous.members.clone(),
    };
    let release = release_of(&members);
    let mut wanted = conditions_for(i, ready_replicas);
    if let Some(c) = mixed_condition(&previous, release.as_deref(), &members, i.now) {
        wanted.push(c);
    }
    HabitatStatus {
        phase: Some(i.phase.to_string()),
        observed_generation: Some(generation),
        conditions: conditions::merge(&previous.conditions, &wanted, generation, i.now),
        replicas,
        ready_replicas,
        ready: Some(format!("{ready_replicas}/{}", h.spec.count)),
        peer_ip: i.snapshot.current_peer().map(str::to_string),
        leader,
        ring_secret_name: i.snapshot.key.key().map(|k| k.full()),
        members,
        release,
        last_phase_transition_time: if i.phase_changed
            || previous.last_phase_transition_time.is_none()
        {
            Some(conditions::to_time(i.now))
        } else {
            previous.last_phase_transition_time
        },
    }
}

/// How long alive members may run different releases before `MixedReleases` says
/// `MixedTooLong`: a rolling update of a large group, one member at a time, fits in it.
pub const MIXED_RELEASES_GRACE: Duration = Duration::from_secs(15 * 60);

/// What the RELEASE column shows.
pub const MIXED: &str = "mixed";

/// `version/release` of a package ident `origin/name/version/release`.
fn version_release(package: &str) -> &str {
    let mut slashes = package.match_indices('/').map(|(i, _)| i);
    match slashes.nth(1) {
        Some(i) => &package[i + 1..],
        None => package,
    }
}

/// The release the alive members run, [`MIXED`] when they differ, `None` when none is known.
fn release_of(members: &[MemberStatus]) -> Option<String> {
    let releases: BTreeSet<&str> = members
        .iter()
        .filter(|m| m.alive && !m.package.is_empty())
        .map(|m| version_release(&m.package))
        .collect();
    match releases.len() {
        0 => None,
        1 => releases.into_iter().next().map(str::to_string),
        _ => Some(MIXED.to_string()),
    }
}

/// `MixedReleases`, once the census was read: True while alive members run different
/// releases, since the time that started (kept in the condition's transition time), and
/// `MixedTooLong` after [`MIXED_RELEASES_GRACE`].
fn mixed_condition(
    previous: &HabitatStatus,
    release: Option<&str>,
    members: &[MemberStatus],
    now: DateTime<Utc>,
) -> Option<Desired> {
    release?;
    if release != Some(MIXED) {
        return Some(Desired::new(
            T::MixedReleases,
            false,
            R::OneRelease,
            format!("every alive member runs {}", release.unwrap_or_default()),
        ));
    }
    let mut packages: Vec<&str> = members
        .iter()
        .filter(|m| m.alive)
        .map(|m| m.package.as_str())
        .collect();
    packages.sort_unstable();
    packages.dedup();
    let since = previous
        .conditions
        .iter()
        .find(|c| c.type_ == T::MixedReleases.as_str() && c.status == "True")
        .map(|c| conditions::from_time(&c.last_transition_time))
        .unwrap_or(now);
    let lasted = (now - since).to_std().unwrap_or_default();
    let (reason, message) = if lasted > MIXED_RELEASES_GRACE {
        (
            R::MixedTooLong,
            format!(
                "the members have run different releases for {} minutes, longer than a rollout should take: {}; check the supervisors' update logs and spec.service.updateStrategy",
                lasted.as_secs() / 60,
                packages.join(", ")
            ),
        )
    } else {
        (
            R::RollingUpdate,
            format!(
                "the members run different releases: {}",
                packages.join(", ")
            ),
        )
    };
    Some(Desired::new(T::MixedReleases, true, reason, message))
}

/// Whether two statuses say the same thing (conditions compared regardless of order).
pub fn same(a: &HabitatStatus, b: &HabitatStatus) -> bool {
    let strip = |s: &HabitatStatus| HabitatStatus {
        conditions: vec![],
        ..s.clone()
    };
    strip(a) == strip(b) && conditions::same(&a.conditions, &b.conditions)
}

/// What a status that differs from the stored one is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worth {
    /// Nothing: it says what the stored status says, or only what rides along with the next
    /// change that matters.
    Nothing,
    /// A write now.
    Now,
    /// A write once this much more time has passed, if it still differs then: the workload's
    /// progress while it converges, written at most once per [`PROGRESS_INTERVAL`].
    Later(Duration),
}

/// How often progress is written while the workload converges (the READY column counts up at
/// this pace; the phase change that ends the convergence is written at once).
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// What `new` is worth over `old`, the status the object carries, when the pass ended in
/// `phase`, its progress having waited `since` ([`ProgressClock::waited`]; None: no wait to
/// respect).
///
/// While the workload converges (Deploying, Updating, LeaderElected) the pods' progress changes
/// the observed pod count, the peer address and condition messages several times; those ride
/// along with the next change that matters: the phase, the observed generation, the ring key,
/// the leader, a change of the release, a condition's status, or a condition that is not True
/// taking a reason the user may have to act on. Progress (the ready count, the first census
/// reading, or a condition moving from one reason of a workload on its way to another,
/// [`R::is_progress`]: an election starting, pods becoming ready) is written too, since a user watching a slow rollout wants to see it
/// move, but at most once per [`PROGRESS_INTERVAL`], and that long after it appeared. So a
/// Habitat's way to Ready costs two writes when its pods come up within that interval of each
/// other (it leaves Pending; it becomes Ready), whatever its count. In every other phase any
/// difference is written at once.
pub fn worth_writing(
    new: &HabitatStatus,
    old: &HabitatStatus,
    phase: Phase,
    since: Option<Duration>,
) -> Worth {
    if same(new, old) {
        return Worth::Nothing;
    }
    // The first census reading (the release, and MixedReleases=False: one release) is progress.
    let first_reading = old.release.is_none();
    let news = |s| {
        let mut m = material(s, false);
        if first_reading {
            m.release = None;
        }
        m.conditions
            .retain(|&(t, status, _)| (t, status) != (T::MixedReleases.as_str(), "False"));
        m
    };
    if !converging(phase) || news(new) != news(old) {
        return Worth::Now;
    }
    if new.ready_replicas == old.ready_replicas && material(new, true) == material(old, true) {
        return Worth::Nothing;
    }
    match since {
        Some(since) if since < PROGRESS_INTERVAL => Worth::Later(PROGRESS_INTERVAL - since),
        _ => Worth::Now,
    }
}

/// When each converging Habitat's pending progress was first seen, by object uid: progress that
/// the stored status does not show yet is written once it has waited [`PROGRESS_INTERVAL`] (so
/// at most once per interval, as a write clears the wait). Pods that come up one by one within
/// an interval of each other cost no write before the one that says Ready. (Counted from the
/// last write instead, progress that followed a long wait was written at once: at N = 1000 on the
/// real ground, with ready pods counted as they came, that was a write per pod.)
#[derive(Debug, Default)]
pub struct ProgressClock {
    seen: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl ProgressClock {
    fn seen(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `uid`'s progress has waited at `now`: zero when it is first seen now.
    pub fn waited(&self, uid: &str, now: std::time::Instant) -> Duration {
        self.seen()
            .get(uid)
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(*t))
    }

    /// Forgets `uid`.
    pub fn forget(&self, uid: &str) {
        self.seen().remove(uid);
    }

    /// How many Habitats' progress waits.
    pub fn len(&self) -> usize {
        self.seen().len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records what the pass decided at `now`: a deferred write starts (or keeps) the wait; a
    /// write, nothing to write, or a phase that does not converge (those write at once) ends it.
    pub fn decided(&self, uid: &str, worth: Worth, converging: bool, now: std::time::Instant) {
        let mut seen = self.seen();
        match worth {
            Worth::Later(_) if converging => {
                seen.entry(uid.to_string()).or_insert(now);
            }
            _ => {
                seen.remove(uid);
            }
        }
    }
}

/// Whether the workload converges in `phase` (Deploying, Updating, LeaderElected): pods come and
/// go, and their progress is not news.
pub fn converging(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Deploying | Phase::Updating | Phase::LeaderElected
    )
}

/// What of a status is news (compared between two statuses).
#[derive(PartialEq, Eq)]
struct Material<'a> {
    phase: Option<&'a str>,
    observed_generation: Option<i64>,
    ring_secret_name: Option<&'a str>,
    leader: Option<&'a str>,
    release: Option<&'a str>,
    /// (type, status, reason); the reason only of a condition that is not True.
    conditions: BTreeSet<(&'a str, &'a str, &'a str)>,
}

/// What of `s` is news: with `progress`, the reasons of conditions on their way too.
fn material(s: &HabitatStatus, progress: bool) -> Material<'_> {
    let conditions = s
        .conditions
        .iter()
        .map(|c| {
            let reason = match c.reason.as_str() {
                _ if c.status == "True" => "",
                r if !progress && R::is_progress(r) => "progress",
                r => r,
            };
            (c.type_.as_str(), c.status.as_str(), reason)
        })
        .collect();
    Material {
        phase: s.phase.as_deref(),
        observed_generation: s.observed_generation,
        ring_secret_name: s.ring_secret_name.as_deref(),
        leader: s.leader.as_deref(),
        release: s.release.as_deref(),
        conditions,
    }
}

fn conditions_for(i: &Inputs<'_>, ready_replicas: i32) -> Vec<Desired> {
    let h = i.habitat;
    let s = i.snapshot;
    let f = i.facts;
    let count = h.spec.count;
    let name = h.name_any();
    let mut out = Vec::with_capacity(7);

    out.push(match (&s.peer_config, s.current_peer()) {
        (Some(_), Some(ip)) => Desired::new(
            T::ConfigMapReady,
            true,
            R::PeerSelected,
            format!("the peer file points to {ip}"),
        ),
        (Some(_), None) => Desired::new(
            T::ConfigMapReady,
            true,
            R::NoRunningPod,
            "no pod runs yet; the peer file is empty",
        ),
        (None, _) => Desired::new(
            T::ConfigMapReady,
            false,
            R::PeerConfigPending,
            format!("ConfigMap {}-peer is not created yet", name),
        ),
    });

    out.push(match &s.key {
        KeyState::NotRequired => Desired::new(T::KeyReady, true, R::NotRequired, "gossip is not encrypted"),
        KeyState::Ready(k) => Desired::new(T::KeyReady, true, R::KeyFound, format!("gossip is encrypted with the ring key in Secret {}", k.full())),
        KeyState::Missing { secret } => Desired::new(
            T::KeyReady,
            false,
            R::SecretNotFound,
            format!("Secret {secret} named in spec.service.ringSecretName does not exist; create it with the ring key file under the key ring-key"),
        ),
        KeyState::Malformed { problem, .. } => {
            let field = if h.spec.service.ring_secret_name.is_some() { "spec.service.ringSecretName" } else { "spec.service.ring" };
            Desired::new(T::KeyReady, false, R::KeyMalformed, format!("{problem} (the ring key of {field}); fix the Secret or name another one"))
        }
        KeyState::ToGenerate { ring } => Desired::new(T::KeyReady, false, R::KeyPending, format!("no key for ring {ring} yet; the operator generates one")),
    });

    out.push(match (&s.secret_problem, f.workload_current) {
        (Some(problem), _) => Desired::new(
            T::Deployed,
            false,
            R::ReferencedSecretMissing,
            problem.clone(),
        ),
        (None, true) => Desired::new(
            T::Deployed,
            true,
            R::UpToDate,
            format!(
                "StatefulSet {name} matches generation {}",
                h.metadata.generation.unwrap_or(0)
            ),
        ),
        (None, false) => Desired::new(
            T::Deployed,
            false,
            R::NotApplied,
            "the StatefulSet has not been applied for the current spec yet",
        ),
    });

    // A Service still being created leaves the rollout undone, not the replicas unavailable.
    let available = ready_replicas == count && (f.rollout_done || s.creating.is_some());
    out.push(if available {
        Desired::new(
            T::Available,
            true,
            R::AllReplicasReady,
            format!("{ready_replicas}/{count} replicas ready"),
        )
    } else {
        Desired::new(
            T::Available,
            false,
            R::ReplicasNotReady,
            format!("{ready_replicas}/{count} replicas ready"),
        )
    });

    if h.spec.service.topology == Topology::Leader {
        out.push(leader_condition(h, &s.leader));
    }

    let progressing = converging(i.phase);
    out.push(match i.phase {
        Phase::Terminating => Desired::new(
            T::Progressing,
            false,
            R::Terminating,
            "the Habitat is being deleted",
        ),
        _ if progressing => Desired::new(
            T::Progressing,
            true,
            R::RollingOut,
            format!(
                "rolling out generation {}",
                h.metadata.generation.unwrap_or(0)
            ),
        ),
        _ => Desired::new(T::Progressing, false, R::Settled, "no rollout in progress"),
    });

    out.push(ready_condition(i, &out, available));
    out
}

fn leader_condition(h: &Habitat, view: &LeaderView) -> Desired {
    let group = format!("{}.{}", h.spec.service.name, h.spec.service.group);
    let count = h.spec.count;
    let warning = if count < 3 {
        format!("; warning: a leader group needs at least 3 members to survive the loss of one (count is {count})")
    } else if count % 2 == 0 {
        format!(
            "; warning: an even count ({count}) tolerates no more failures than {}",
            count - 1
        )
    } else {
        String::new()
    };
    let (status, reason, message) = match view {
        LeaderView::Observed { pod: Some(pod), .. } => (true, R::Elected, format!("{pod} leads {group}")),
        LeaderView::Observed { election: Election::InProgress, .. } => {
            (false, R::ElectionInProgress, format!("the supervisors of {group} are electing a leader"))
        }
        LeaderView::Observed { election: Election::NoQuorum, .. } => (
            false,
            R::NoQuorum,
            format!("{group} has no quorum yet: a majority of its members must be alive to elect a leader"),
        ),
        LeaderView::Observed { election: Election::Elected { ip }, pod: None, .. } => {
            (false, R::NoElection, format!("the census names leader {ip}, which is no running pod of this Habitat"))
        }
        LeaderView::Observed { .. } => (false, R::NoElection, format!("no election has finished in {group}")),
        LeaderView::Unreachable(e) => (false, R::CensusUnreachable, format!("cannot read the census: {e}")),
        LeaderView::NotObserved => (false, R::CensusPending, "the census is read once pods run".to_string()),
    };
    Desired::new(
        T::LeaderElected,
        status,
        reason,
        format!("{message}{warning}"),
    )
}

fn ready_condition(i: &Inputs<'_>, others: &[Desired], available: bool) -> Desired {
    let first_false = others
        .iter()
        .find(|d| !d.status && !matches!(d.type_, T::Progressing | T::MixedReleases));
    if let Some(problem) = &i.snapshot.spec_problem {
        return Desired::new(T::Ready, false, R::InvalidSpec, problem.clone());
    }
    match (i.phase, i.outcome) {
        (_, Outcome::Failed(msg)) => Desired::new(
            T::Ready,
            false,
            R::ReconcileFailed,
            format!("{msg}; retrying with backoff"),
        ),
        (Phase::Ready, _) if available && first_false.is_none() => Desired::new(
            T::Ready,
            true,
            R::HabitatReady,
            format!("all {} replicas ready", i.habitat.spec.count),
        ),
        (Phase::Ready, _) => Desired::new(
            T::Ready,
            false,
            R::Degraded,
            first_false
                .map(|d| d.message.clone())
                .unwrap_or_else(|| "replicas are not ready".to_string()),
        ),
        (Phase::Terminating, _) => Desired::new(
            T::Ready,
            false,
            R::Terminating,
            "the Habitat is being deleted",
        ),
        (phase, _) => {
            let why = first_false
                .map(|d| d.message.clone())
                .unwrap_or_else(|| "waiting for pods".to_string());
            let reason = first_false
                .map(|d| d.reason)
                .filter(|r| r.needs_user())
                .unwrap_or(R::NotYetReady);
            Desired::new(T::Ready, false, reason, format!("phase {phase}: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::conditions::merge;

    fn member(id: &str, package: &str, alive: bool) -> MemberStatus {
        MemberStatus {
            pod: Some(format!("redis-{id}")),
            member_id: id.into(),
            package: package.into(),
            alive,
            leader: false,
        }
    }

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: conditions::to_time(Utc::now()),
            observed_generation: Some(1),
        }
    }

    fn deploying() -> HabitatStatus {
        HabitatStatus {
            phase: Some("Deploying".into()),
            observed_generation: Some(1),
            ready: Some("0/1".into()),
            conditions: vec![
                condition("ConfigMapReady", "True", "NoRunningPod", "no pod runs yet"),
                condition(
                    "Available",
                    "False",
                    "ReplicasNotReady",
                    "0/1 replicas ready",
                ),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn the_release_column_shows_one_release_or_mixed_among_alive_members() {
        let v1 = "core/redis/7.0.1/20250101000000";
        let v2 = "core/redis/7.0.2/20250202000000";
        assert_eq!(release_of(&[]), None);
        assert_eq!(
            release_of(&[member("a", v1, true), member("b", v2, false)]).as_deref(),
            Some("7.0.1/20250101000000"),
            "a dead member's release does not count"
        );
        assert_eq!(
            release_of(&[member("a", v1, true), member("b", v2, true)]).as_deref(),
            Some(MIXED)
        );
    }

    #[test]
    fn progress_waits_its_interval_from_when_it_appeared_not_from_the_last_write() {
        let clock = ProgressClock::default();
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Long after the last write, a first pod is ready: that progress waits a whole
        // interval from now.
        assert_eq!(clock.waited("u", at(30)), Duration::ZERO);
        clock.decided("u", Worth::Later(PROGRESS_INTERVAL), true, at(30));
        assert_eq!(clock.waited("u", at(32)), Duration::from_secs(2));
        // More progress within the interval keeps the first sighting.
        clock.decided("u", Worth::Later(Duration::from_secs(3)), true, at(32));
        assert_eq!(clock.waited("u", at(35)), PROGRESS_INTERVAL);
        // Written: the next progress waits from when it appears.
        clock.decided("u", Worth::Now, true, at(35));
        assert_eq!(clock.waited("u", at(37)), Duration::ZERO);
        // Nothing pending any more ends the wait too.
        clock.decided("u", Worth::Later(PROGRESS_INTERVAL), true, at(37));
        clock.decided("u", Worth::Nothing, true, at(38));
        assert_eq!(clock.waited("u", at(50)), Duration::ZERO);
        // Out of the converging phases, the object is forgotten.
        clock.decided("u", Worth::Later(PROGRESS_INTERVAL), false, at(51));
        assert!(clock.seen().is_empty());
        // What the wait means for a write: a pod ready long after the last write is not
        // written at once, but once it has waited the interval.
        let old = HabitatStatus {
            phase: Some("Deploying".into()),
            ready_replicas: 0,
            ..HabitatStatus::default()
        };
        let new = HabitatStatus {
            ready_replicas: 1,
            ..old.clone()
        };
        assert_eq!(
            worth_writing(&new, &old, Phase::Deploying, Some(Duration::ZERO)),
            Worth::Later(PROGRESS_INTERVAL)
        );
        assert_eq!(
            worth_writing(&new, &old, Phase::Deploying, Some(PROGRESS_INTERVAL)),
            Worth::Now
        );
    }

    #[test]
    fn mixed_releases_turn_into_a_warning_after_the_grace_and_clear_when_uniform() {
        let v1 = "core/redis/7.0.1/20250101000000";
        let v2 = "core/redis/7.0.2/20250202000000";
        let mixed = [member("a", v1, true), member("b", v2, true)];
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let mut previous = HabitatStatus::default();
        let at = |previous: &HabitatStatus, members: &[MemberStatus], now| {
            mixed_condition(previous, release_of(members).as_deref(), members, now)
                .expect("a condition")
        };
        let c = at(&previous, &mixed, t0);
        assert_eq!((c.status, c.reason), (true, R::RollingUpdate));
        assert!(
            c.message.contains(v1) && c.message.contains(v2),
            "{}",
            c.message
        );
        previous.conditions = merge(&[], &[c], 1, t0);
        let later = t0 + chrono::Duration::seconds(60);
        assert_eq!(at(&previous, &mixed, later).reason, R::RollingUpdate);
        let too_late = t0
            + chrono::Duration::from_std(MIXED_RELEASES_GRACE).expect("grace")
            + chrono::Duration::seconds(1);
        let c = at(&previous, &mixed, too_late);
        assert_eq!((c.status, c.reason), (true, R::MixedTooLong));
        assert!(
            c.message.contains("longer than a rollout should take"),
            "{}",
            c.message
        );
        let uniform = [member("a", v2, true), member("b", v2, true)];
        let c = at(&previous, &uniform, too_late);
        assert_eq!((c.status, c.reason), (false, R::OneRelease));
        assert_eq!(mixed_condition(&previous, None, &[], too_late), None);
    }

    #[test]
    fn while_deploying_only_material_changes_are_written() {
        let w =
            |new: &HabitatStatus, old: &HabitatStatus, phase| worth_writing(new, old, phase, None);
        let old = deploying();
        assert_eq!(w(&old, &old, Phase::Deploying), Worth::Nothing);
        // The pod was created and got an address; the peer file names it: not worth a write.
        let mut new = old.clone();
        new.replicas = 1;
        new.peer_ip = Some("10.0.0.1".into());
        new.conditions[0] = condition(
            "ConfigMapReady",
            "True",
            "PeerSelected",
            "the peer file points to 10.0.0.1",
        );
        assert_eq!(w(&new, &old, Phase::Deploying), Worth::Nothing);
        // The same difference in a settled phase is written.
        let mut settled_old = old.clone();
        settled_old.phase = Some("Ready".into());
        let mut settled_new = new.clone();
        settled_new.phase = Some("Ready".into());
        assert_eq!(w(&settled_new, &settled_old, Phase::Ready), Worth::Now);
        // A condition flipped, or a failing condition's reason changed: written.
        let mut flipped = new.clone();
        flipped.conditions[1] = condition("Available", "True", "AllReplicasReady", "1/1");
        assert_eq!(w(&flipped, &old, Phase::Deploying), Worth::Now);
        let mut failing = new.clone();
        failing.conditions[1] = condition(
            "Available",
            "False",
            "ReferencedSecretMissing",
            "Secret x is gone",
        );
        assert_eq!(w(&failing, &old, Phase::Deploying), Worth::Now);
        // The running release (the RELEASE column, `mixed` during a rolling update): written.
        let mut release = new.clone();
        release.release = Some("mixed".into());
        assert_eq!(w(&release, &old, Phase::Deploying), Worth::Now);
        // Leaving the phase is always written.
        let mut next = new;
        next.phase = Some("Ready".into());
        assert_eq!(
            worth_writing(&next, &old, Phase::Ready, Some(Duration::ZERO)),
            Worth::Now
        );
    }

    #[test]
    fn the_ready_count_is_written_at_most_once_per_progress_interval_while_converging() {
        let old = deploying();
        let mut ready = old.clone();
        ready.ready_replicas = 1;
        // Nothing written by this process yet (it just started): written.
        assert_eq!(
            worth_writing(&ready, &old, Phase::Deploying, None),
            Worth::Now
        );
        // Written a second ago: again in four seconds, if it still differs then.
        assert_eq!(
            worth_writing(&ready, &old, Phase::Deploying, Some(Duration::from_secs(1))),
            Worth::Later(Duration::from_secs(4))
        );
        assert_eq!(
            worth_writing(
                &ready,
                &old,
                Phase::LeaderElected,
                Some(Duration::from_secs(1))
            ),
            Worth::Later(Duration::from_secs(4))
        );
        assert_eq!(
            worth_writing(&ready, &old, Phase::Deploying, Some(PROGRESS_INTERVAL)),
            Worth::Now
        );
        // An election starting is progress too; a condition that asks the user to act is not.
        let mut electing = old.clone();
        electing.conditions.push(condition(
            "LeaderElected",
            "False",
            "CensusUnreachable",
            "no pod runs",
        ));
        let mut voting = electing.clone();
        voting.conditions.last_mut().expect("a condition").reason = "ElectionInProgress".into();
        let soon = Some(Duration::from_secs(1));
        assert_eq!(
            worth_writing(&voting, &electing, Phase::Deploying, soon),
            Worth::Later(Duration::from_secs(4))
        );
        let mut missing = electing.clone();
        missing.conditions.last_mut().expect("a condition").reason =
            "ReferencedSecretMissing".into();
        assert_eq!(
            worth_writing(&missing, &electing, Phase::Deploying, soon),
            Worth::Now
        );
        // The first census reading (a release, one release among the members) is progress; a
        // change of release is news.
        let mut read = old.clone();
        read.release = Some("1.0/1".into());
        read.conditions.push(condition(
            "MixedReleases",
            "False",
            "OneRelease",
            "every alive member runs 1.0/1",
        ));
        assert_eq!(
            worth_writing(&read, &old, Phase::Deploying, soon),
            Worth::Later(Duration::from_secs(4))
        );
        let mut mixed = read.clone();
        mixed.release = Some("mixed".into());
        assert_eq!(
            worth_writing(&mixed, &read, Phase::Deploying, soon),
            Worth::Now
        );
        // Outside convergence a changed count is written at once.
        let mut settled_old = old.clone();
        settled_old.phase = Some("Ready".into());
        let mut settled_new = ready.clone();
        settled_new.phase = Some("Ready".into());
        assert_eq!(
            worth_writing(
                &settled_new,
                &settled_old,
                Phase::Ready,
                Some(Duration::ZERO)
            ),
            Worth::Now
        );
    }
}
