//! Simulated Habitat supervisors: one member per running `habitat-service` pod, gossip assumed
//! perfect inside a gossip ring, and leader and update elections under Habitat's quorum rules
//! (`../shared/reference/habitat-supervisor-facts.md` §6, from `butterfly/src/server.rs`):
//!
//! - quorum is `alive > total / 2`, where `total` counts every group member that is Alive or
//!   Confirmed (dead but not departed) and `alive` those that are Alive (`check_quorum_mlr`);
//! - a member whose pod is deleted departs itself (the supervisor does on SIGTERM: a member
//!   rumor with a higher incarnation, so the same id may rejoin); one whose container crashes
//!   ([`super::CRASH_ANNOTATION`]; or whose pod is marked `Failed`) stays Confirmed, and
//!   counted, until it is departed;
//! - a crashed container starts again in the same pod (same uid and IP) after the kubelet's
//!   backoff ([`super::habitat::restart_backoff`]), as a new supervisor from a fresh
//!   filesystem: a new member (or, with a projected `MEMBER_ID`, the same id cut off, below),
//!   listed by the others next to the dead one at the same IP, as the real census shows it;
//! - `hab sup depart ID` through the control gateway on `IP:9632` (module `control`) departs a
//!   member for good: a supervisor started again with that id never joins (the real one exits
//!   with code 86);
//! - a new member joining a group that then has no quorum departs the Confirmed member with the
//!   lowest id (`insert_service_impl`, habitat#1994);
//! - a pod replaced without a persisted `/hab/sup` is a new member (see [`identity`]); one that
//!   comes back with the same id from another address is listed by the others at its old
//!   address; after a crash, with nothing saved, it is cut off: its own census shows it alone
//!   and no election, and its hooks never run; with its saved data it reports its old election
//!   for [`STALE_ELECTION`] (all measured with the real supervisor, facts §7);
//! - elections finish when the group has quorum, won by the previous leader when it is alive
//!   (it re-enters with the highest suitability), otherwise by the highest member id; a dead
//!   leader or a lost quorum restarts them. Groups run with `--strategy rolling` also hold
//!   update elections by the same rules.
//!
//! The gossip layer's delays are named ([`Gossip`]): with [`Gossip::REAL`] an unclean death is
//! noticed as the real one is (listed alive, then Suspect, then Confirmed), a new supervisor
//! takes its join and its hooks' time, and elections take seconds; with [`Gossip::FAST`], the
//! default, all of it happens at once or in [`ELECTION_DURATION`].
//!
//! Simplifications: a new member is listed by the others as soon as it starts (the real one
//! reaches their census within its join); a self-departure always arrives (the real one is best effort); a departure through the
//! control gateway shows in every census at once (the real census may go on showing the member
//! Confirmed until the next membership change); the control secret is not checked against the
//! pod's (the simulated nodes do not read Secrets).

pub mod census;
mod control;
mod elect;
mod gateway;
pub mod identity;
mod rings;

use crate::meta;
use identity::{Disk, Identity};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long an election runs before it finishes, in the fast setting ([`Gossip::FAST`]).
pub const ELECTION_DURATION: Duration = Duration::from_millis(200);

/// The gossip layer's delays, named: how long an election runs, how long the others take to
/// notice an unclean death, and how long a new supervisor takes to join. Two settings:
/// [`Gossip::REAL`], the real supervisor's as measured (facts §7, `../habitat/README.md`), and
/// [`Gossip::FAST`], 10 to 20 times faster, the default, for the many-Habitat runs (the scale
/// bench, `tests/forget.rs`, the sandbox's own runs) and most scenarios. The nodes take the
/// setting from [`Gossip::ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gossip {
    /// How long an election runs before it finishes (real: about 3 s, the last part of a
    /// failover; 3.8 to 4.4 s after a SIGTERM with the departure's spread).
    pub election: Duration,
    /// How long after an unclean death the others still list the member alive: SWIM's failed
    /// ping and ping-req rounds (real: 4 to 10 s).
    pub suspect_after: Duration,
    /// How long the others then list it `suspect` before `confirmed` (real: about 9.3 s, three
    /// protocol periods). A dead leader is replaced only once it is confirmed.
    pub confirm_after: Duration,
    /// How long a new supervisor takes to join its ring: until then its own census shows only
    /// itself with no finished election, and its hooks do not run (real: about 4 s).
    pub join: Duration,
    /// How long after it joined its service's process is up (its hooks ran: the health check
    /// passes): real, about 2 s (census complete about 4 s, service up about 6 s).
    pub hooks: Duration,
}

impl Gossip {
    /// The real supervisor's delays (habitat 2.1.78, measured on loopback).
    pub const REAL: Gossip = Gossip {
        election: Duration::from_secs(3),
        suspect_after: Duration::from_secs(7),
        confirm_after: Duration::from_millis(9_300),
        join: Duration::from_secs(4),
        hooks: Duration::from_secs(2),
    };
    /// The fast setting: elections of [`ELECTION_DURATION`], deaths noticed and joins done at
    /// once.
    pub const FAST: Gossip = Gossip {
        election: ELECTION_DURATION,
        suspect_after: Duration::ZERO,
        confirm_after: Duration::ZERO,
        join: Duration::ZERO,
        hooks: Duration::ZERO,
    };
    /// The environment variable that picks the setting of the nodes: `real` for
    /// [`Gossip::REAL`], anything else (or unset) for [`Gossip::FAST`].
    pub const ENV: &'static str = "HABITAT_SANDBOX_GOSSIP";

    /// The setting [`Gossip::ENV`] names.
    pub fn from_env() -> Gossip {
        match std::env::var(Self::ENV).as_deref() {
            Ok("real") => Gossip::REAL,
            _ => Gossip::FAST,
        }
    }
}

impl Default for Gossip {
    fn default() -> Self {
        Gossip::FAST
    }
}
/// How long departed members stay in the census.
pub const DEPARTED_TTL: Duration = Duration::from_secs(120);
/// The HTTP gateway port.
pub const GATEWAY_PORT: u16 = 9631;
/// How long a supervisor restarted with its saved data reports its old election (measured
/// with the real supervisor: about 1 s).
pub const STALE_ELECTION: Duration = Duration::from_secs(1);

/// SWIM health of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Alive.
    Alive,
    /// Dead, and the others' pings to it failed: counted in `total` for quorum, not alive; a
    /// leader still leads. Only ever seen ([`Member::seen_health`]), never kept.
    Suspect,
    /// Confirmed dead: still counted in `total` for quorum.
    Confirmed,
    /// Departed (excluded from quorum).
    Departed,
}

/// Census election status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Election {
    /// No election (standalone, or no `rolling` strategy for update elections).
    #[default]
    None,
    /// Running.
    InProgress,
    /// No quorum.
    NoQuorum,
    /// Finished.
    Finished,
}

impl Election {
    /// The JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            Election::None => "None",
            Election::InProgress => "ElectionInProgress",
            Election::NoQuorum => "ElectionNoQuorum",
            Election::Finished => "ElectionFinished",
        }
    }
}

/// `--strategy` of `hab sup run` (facts §1: `none` by default, `at-once`, `rolling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Never updates itself.
    #[default]
    None,
    /// Every member updates when a new release appears.
    AtOnce,
    /// Members update one at a time, led by the update election's leader.
    Rolling,
}

impl Strategy {
    fn parse(s: Option<&str>) -> Strategy {
        match s {
            Some("at-once") => Strategy::AtOnce,
            Some("rolling") => Strategy::Rolling,
            _ => Strategy::None,
        }
    }

    /// The `/services` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::AtOnce => "at-once",
            Strategy::Rolling => "rolling",
        }
    }
}

/// One supervisor, known by its member id. It may outlive its pod (as a Confirmed member) and
/// come back in another pod when that pod has the same `MEMBER_ID`.
#[derive(Debug, Clone)]
pub struct Member {
    /// Member id (32 hex characters when generated).
    pub member_id: String,
    /// Name of the pod it last ran in.
    pub pod: String,
    /// Uid of that pod.
    pub pod_uid: String,
    /// Namespace.
    pub namespace: String,
    /// Pod IP.
    pub ip: String,
    /// Service name.
    pub service: String,
    /// Group name.
    pub group: String,
    /// Leader topology.
    pub leader_topology: bool,
    /// `--strategy`.
    pub strategy: Strategy,
    /// Package ident `origin/name/version/release`.
    pub package: String,
    /// Health.
    pub health: Health,
    /// The service has started (leader topology: an election finished while alive).
    pub started: bool,
    /// The gossip ring: members that reach each other. Kept by a member after its pod stops, so
    /// that a death does not re-key its ring.
    pub ring: String,
    /// The addresses of the member list it restored at boot from a persisted `/hab/sup`, until
    /// it reached one of them: such a supervisor ignores its peer file (facts §1).
    pub restored_peers: Option<Vec<String>>,
    /// The ConfigMaps its pod mounts, by name: its possible peer files.
    pub mounts: Vec<String>,
    /// The claim holding its `/hab/sup`, when persisted.
    disk: Option<String>,
    departed_at: Option<Instant>,
    /// Departed through a control gateway (`hab sup depart`): a departure rumor, which no
    /// supervisor with this id outlives (it exits with code 86 at start). A supervisor's own
    /// departure on SIGTERM is a member rumor with a higher incarnation instead: the same id may
    /// rejoin.
    pub departure_rumor: bool,
    /// Rejoined with the same id and an empty `/hab/sup/default/data` after an unclean death:
    /// the others list it alive, but its own census shows it alone, with no election, and its
    /// hooks never run (measured with the real supervisor: 85 s and more, three runs of three).
    pub cut_off: bool,
    /// The address the other members list for it, when it rejoined with the same id from
    /// another address: the real supervisors keep listing the old one (measured).
    pub listed_ip: Option<String>,
    /// Restarted with its saved data: until this instant its own census reports the election
    /// it saw before it stopped (status, leader), as the real one does for about a second.
    pub stale_election: Option<(Instant, Election, Option<String>)>,
    /// The ring key it encrypts its gossip with (`--ring NAME`), None in the clear. Members
    /// with different keys cannot read each other's gossip, so they never reach each other,
    /// whatever addresses they know (measured with the real supervisor: a consumer bound to a
    /// producer of another ring never joins it, `tests/real_quorum.rs`).
    pub gossip_key: Option<String>,
    /// After an unclean death, until when the others still list it alive and then suspect
    /// ([`Gossip::suspect_after`], [`Gossip::confirm_after`]); None when noticed at once.
    pub noticed: Option<(Instant, Instant)>,
    /// Until when it is joining its ring ([`Gossip::join`]).
    pub joining_until: Option<Instant>,
    /// Not before when its hooks run ([`Gossip::join`] and [`Gossip::hooks`] after it started).
    pub hooks_at: Option<Instant>,
}

impl Member {
    /// `service.group`.
    pub fn service_group(&self) -> String {
        format!("{}.{}", self.service, self.group)
    }

    /// Where the member gossips: its namespace and ring.
    pub fn scope(&self) -> String {
        format!("{}/{}", self.namespace, self.ring)
    }

    fn key(&self) -> GroupKey {
        (self.scope(), self.service_group())
    }

    /// Its health as the other members see it at `now`: a member that died uncleanly is
    /// Confirmed, but listed alive, then suspect, until the others notice ([`Member::noticed`]).
    pub fn seen_health(&self, now: Instant) -> Health {
        match (self.health, self.noticed) {
            (Health::Confirmed, Some((suspect, _))) if now < suspect => Health::Alive,
            (Health::Confirmed, Some((_, confirmed))) if now < confirmed => Health::Suspect,
            (h, _) => h,
        }
    }

    /// Whether it is still joining its ring at `now`.
    pub fn joining(&self, now: Instant) -> bool {
        self.joining_until.is_some_and(|t| now < t)
    }

    /// Whether its hooks may run at `now` (it joined, and the hooks' delay passed).
    pub fn hooks_may_run(&self, now: Instant) -> bool {
        !self.joining(now) && self.hooks_at.is_none_or(|t| now >= t)
    }

    /// The instants after `now` at which it changes without anything else changing.
    fn deadlines(&self, now: Instant) -> impl Iterator<Item = Instant> {
        let (s, c) = self.noticed.unzip();
        [s, c, self.joining_until, self.hooks_at]
            .into_iter()
            .flatten()
            .filter(move |t| *t > now)
    }
}

/// A service group of one ring: (`namespace/ring`, `service.group`).
type GroupKey = (String, String);

/// Election state of one service group.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// Status.
    pub status: Election,
    /// Leader of the last finished election.
    pub leader_id: Option<String>,
    /// Election term: one more each time a dead leader is replaced.
    pub term: u64,
    running_until: Option<Instant>,
    /// Update election status (`--strategy rolling` only).
    pub update_status: Election,
    /// Update leader of the last finished update election.
    pub update_leader_id: Option<String>,
    update_running_until: Option<Instant>,
    /// Two members have gossiped: a lone supervisor has no entry of its own and never reaches
    /// quorum (facts §1 "Leader topology with fewer than 3 members").
    gossiped: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Every member by member id.
    members: HashMap<String, Member>,
    /// Running pods' member ids, by pod uid.
    by_pod: HashMap<String, String>,
    /// Persisted `/hab/sup` directories, by `namespace/claim`.
    disks: HashMap<String, Disk>,
    groups: HashMap<GroupKey, Group>,
    /// Member ids by service group, kept as members join, move between rings and are
    /// forgotten (rebuilt whole by [`elect::elect`]), so that a census or an election costs its
    /// group, not the world.
    index: HashMap<GroupKey, Vec<String>>,
    /// The groups whose membership or members' health changed since their elections last ran.
    dirty: HashSet<GroupKey>,
    /// The groups with a running election.
    running: HashSet<GroupKey>,
    /// When the next running election finishes: between world changes, the elections change
    /// state only then.
    next_deadline: Option<Instant>,
    /// Who links to whom: the rings are derived again around what changed.
    links: rings::Links,
    /// Members that are not alive (Confirmed or Departed), whom [`State::forget`] may forget.
    dead: HashSet<String>,
    /// Members with a persisted `/hab/sup` or a restored member list ([`State::save_disks`]).
    persisted: HashSet<String>,
    /// Supervisors that stopped using their restored member list: their links change at the
    /// next pass.
    reached: Vec<String>,
    /// Running pods whose supervisor could not join yet (another running supervisor has its
    /// member id), as last seen: tried again on every pass, changed or not.
    refused: HashMap<String, Arc<Value>>,
    listeners: HashMap<String, JoinHandle<()>>,
    /// Pods whose health check may answer otherwise than when [`Hub::take_health_moved`] last
    /// asked: the kubelet's readiness follows them without the pod changing.
    health_moved: Vec<String>,
    /// Containers that crashed and wait for the kubelet's backoff to start again, by pod uid:
    /// when they start, and the pod as last seen.
    restarting: HashMap<String, (Instant, Arc<Value>)>,
    /// Each pod's container restarts, by uid.
    restarts: HashMap<String, Restarts>,
    /// The gossip layer's delays.
    gossip: Gossip,
}

/// The restarts of one pod's container.
#[derive(Debug, Default, Clone)]
struct Restarts {
    /// How many times it started again after a crash.
    count: u32,
    /// The last [`super::CRASH_ANNOTATION`] value seen on the pod.
    token: Option<String>,
}

/// What the nodes observed: every pod, and every ConfigMap (for the peer files).
pub type World<'a> = (&'a [Arc<Value>], &'a [Arc<Value>]);

/// The objects (pods or ConfigMaps) that changed since the last pass, by key (a pod's uid; a
/// ConfigMap's uid, or `namespace/name` when it has none), each as it is now (`None`:
/// deleted).
pub type Changed<'a> = &'a [(String, Option<Arc<Value>>)];

/// All simulated supervisors. They learn the world from what the caller observed (pods and
/// peer-file ConfigMaps) and never read an API themselves.
#[derive(Debug, Default)]
pub struct Hub {
    state: Mutex<State>,
}

/// Argument value of `--flag value` or `--flag=value` in a container's args/command.
fn arg(container: &Value, flag: &str) -> Option<String> {
    let args: Vec<&str> = ["command", "args"]
        .iter()
        .flat_map(|k| container[*k].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let prefix = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if *a == flag {
            args.get(i + 1).map(|s| s.to_string())
        } else {
            a.strip_prefix(&prefix).map(String::from)
        }
    })
}

/// The package a supervisor runs for `image`: `origin/service/version/release`, where the
/// image's tag picks the release (a new tag is a new release), so that an image rollout shows
/// in the census as members with different packages.
pub fn package_for(image: &str, service: &str) -> String {
    let (repo, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (image, ""),
    };
    let origin = repo
        .split('/')
        .next()
        .filter(|o| *o != repo)
        .unwrap_or("core");
    let release = if tag.is_empty() || tag == "latest" {
        20250101000000u64
    } else {
        let h = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        20250101000000 + 1_000_000 + h % 1_000_000
    };
    format!("{origin}/{service}/0.1.0/{release}")
}

/// Build a member for a running pod with a `habitat-service` container, with a new random id.
pub fn member_for(pod: &Value) -> Option<Member> {
    let c = pod["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "habitat-service")?;
    let path = c["readinessProbe"]["httpGet"]["path"]
        .as_str()
        .unwrap_or_default();
    let from_probe: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let group = arg(c, "--group").unwrap_or_else(|| "default".into());
    let service = match from_probe.as_slice() {
        ["services", svc, _grp, "health"] => svc.to_string(),
        _ => pod["metadata"]["labels"]["habitat.sh/service"]
            .as_str()
            .map(String::from)
            .or_else(|| {
                pod["metadata"]["ownerReferences"][0]["name"]
                    .as_str()
                    .map(String::from)
            })
            .unwrap_or_else(|| meta::name(pod).to_string()),
    };
    let image = c["image"].as_str().unwrap_or("core/unknown");
    let strategy = arg(c, "--strategy").or_else(|| arg(c, "-s"));
    Some(Member {
        member_id: meta::hex32(),
        pod: meta::name(pod).to_string(),
        pod_uid: meta::uid_of(pod).to_string(),
        namespace: meta::namespace(pod).to_string(),
        ip: pod["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        package: package_for(image, &service),
        service,
        group,
        leader_topology: arg(c, "--topology").as_deref() == Some("leader")
            || arg(c, "-t").as_deref() == Some("leader"),
        strategy: Strategy::parse(strategy.as_deref()),
        health: Health::Alive,
        started: false,
        ring: String::new(),
        restored_peers: None,
        mounts: rings::mounts(pod),
        disk: None,
        departed_at: None,
        departure_rumor: false,
        cut_off: false,
        listed_ip: None,
        stale_election: None,
        gossip_key: arg(c, "--ring"),
        noticed: None,
        joining_until: None,
        hooks_at: None,
    })
}

/// Whether a pod that no longer runs stopped gracefully: deleted (the kubelet sends SIGTERM),
/// as opposed to crashed (a pod marked `Failed`; deleting a failed pod
/// afterwards, as its StatefulSet controller does, signals no supervisor).
fn graceful(pod: Option<&Value>) -> bool {
    pod.is_none_or(|p| meta::is_deleting(p) && p["status"]["phase"] != "Failed")
}

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && !meta::is_deleting(pod)
        && pod["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty())
}

impl State {
    /// Files `id` under its group's key, leaving its `old` group, and marks both groups for
    /// their elections to run again. A forgotten member only leaves; a member without a ring
    /// yet belongs to no group.
    fn regroup(&mut self, id: &str, old: Option<GroupKey>) {
        let now = self
            .members
            .get(id)
            .filter(|m| !m.ring.is_empty())
            .map(Member::key);
        if old == now {
            return;
        }
        if let Some(key) = old {
            if let Some(ids) = self.index.get_mut(&key) {
                ids.retain(|i| i != id);
                if ids.is_empty() {
                    self.index.remove(&key);
                }
            }
            self.dirty.insert(key);
        }
        if let Some(key) = now {
            let ids = self.index.entry(key.clone()).or_default();
            if !ids.iter().any(|i| i == id) {
                ids.push(id.to_string());
            }
            self.dirty.insert(key);
        }
    }

    /// The member's group runs its elections again (its health changed).
    fn touch(&mut self, id: &str) {
        if let Some(m) = self.members.get(id).filter(|m| !m.ring.is_empty()) {
            self.dirty.insert(m.key());
        }
    }

    /// The member's pod stopped. `graceful`: the pod was deleted, so the supervisor got SIGTERM
    /// and departed itself (it no longer counts); otherwise (a crash) it is Confirmed dead, and
    /// still counted. Its last election is kept for a restart with saved data.
    fn stop(&mut self, uid: &str, graceful: bool) {
        self.restarting.remove(uid);
        if let Some(l) = self.listeners.remove(uid) {
            l.abort();
        }
        if let Some(id) = self.by_pod.remove(uid) {
            self.health_moved.push(uid.to_string());
            let seen = self
                .members
                .get(&id)
                .filter(|m| !m.ring.is_empty())
                .and_then(|m| self.groups.get(&m.key()))
                .map(|g| (g.status, g.leader_id.clone()));
            if let Some(m) = self.members.get_mut(&id) {
                if m.health == Health::Alive {
                    if graceful {
                        m.health = Health::Departed;
                        m.departed_at = Some(Instant::now());
                    } else {
                        m.health = Health::Confirmed;
                        let g = self.gossip;
                        let now = Instant::now();
                        m.noticed =
                            (g.suspect_after + g.confirm_after > Duration::ZERO).then(|| {
                                (
                                    now + g.suspect_after,
                                    now + g.suspect_after + g.confirm_after,
                                )
                            });
                    }
                    m.joining_until = None;
                    m.hooks_at = None;
                    m.stale_election = seen.map(|(s, l)| (Instant::now(), s, l));
                    self.links.leave(m);
                    self.dead.insert(id.clone());
                }
            }
            self.touch(&id);
        }
    }

    /// Whether `pod` asks for a crash of its container ([`super::CRASH_ANNOTATION`] has a value
    /// not seen before) while its supervisor runs. A value seen first on a pod whose container
    /// the nodes have not started is only remembered.
    fn crash_asked(&mut self, uid: &str, pod: &Value) -> bool {
        let Some(token) = pod["metadata"]["annotations"][super::CRASH_ANNOTATION].as_str() else {
            return false;
        };
        let r = self.restarts.entry(uid.to_string()).or_default();
        if r.token.as_deref() == Some(token) {
            return false;
        }
        r.token = Some(token.to_string());
        self.by_pod.contains_key(uid)
    }

    /// The container of pod `uid` crashed: its member is Confirmed dead (no departure), at the
    /// pod's IP, and the container starts again after the kubelet's backoff, in the same pod,
    /// as a new supervisor from a fresh filesystem.
    fn crash(&mut self, uid: &str, pod: &Arc<Value>) {
        self.stop(uid, false);
        let r = self.restarts.entry(uid.to_string()).or_default();
        let backoff = super::habitat::restart_backoff(r.count);
        r.count += 1;
        self.restarting
            .insert(uid.to_string(), (Instant::now() + backoff, pod.clone()));
    }

    /// The crashed containers whose backoff is over, with their pods as last seen.
    fn restarts_due(&self) -> Vec<(String, Option<Arc<Value>>)> {
        let now = Instant::now();
        self.restarting
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(uid, (_, pod))| (uid.clone(), Some(pod.clone())))
            .collect()
    }

    /// `hab sup depart ID` through a control gateway: a departure rumor, permanent.
    fn depart(&mut self, id: &str) {
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        m.departure_rumor = true;
        if m.health != Health::Departed {
            if m.health == Health::Alive {
                self.links.leave(m);
            }
            m.health = Health::Departed;
            m.departed_at = Some(Instant::now());
            self.dead.insert(id.to_string());
            self.health_moved.push(m.pod_uid.clone());
        }
        self.touch(id);
    }

    /// A supervisor starts in `pod`: its member id comes from its `MEMBER_ID` file. Returns
    /// the id when it is a member the ring has never seen.
    fn start(&mut self, mut m: Member, pod: &Value) -> Option<(String, bool)> {
        match identity::identity(pod) {
            Identity::Fresh => {}
            Identity::Projected(id) => m.member_id = id,
            Identity::Persisted(claim) => {
                let disk = self.disks.entry(claim.clone()).or_insert_with(|| Disk {
                    member_id: m.member_id.clone(),
                    peers: vec![],
                });
                m.member_id = disk.member_id.clone();
                m.restored_peers = (!disk.peers.is_empty()).then(|| disk.peers.clone());
                m.disk = Some(claim);
            }
        }
        let id = m.member_id.clone();
        if m.disk.is_some() {
            self.persisted.insert(id.clone());
        }
        let g = self.gossip;
        m.joining_until = (g.join > Duration::ZERO).then(|| Instant::now() + g.join);
        m.hooks_at = (g.join + g.hooks > Duration::ZERO).then(|| Instant::now() + g.join + g.hooks);
        let new = match self.members.get_mut(&id) {
            // Two running supervisors with one id: the second never joins.
            Some(old) if old.health == Health::Alive => return None,
            // Departed through a control gateway: a supervisor with this id exits at start.
            Some(old) if old.departure_rumor => return None,
            // The same member again (its id survived): Alive in its ring, listed by the others
            // at the address they knew. After an unclean death with nothing saved it is cut
            // off; with its saved data it reports its old election for a moment.
            Some(old) => {
                self.health_moved.push(m.pod_uid.clone());
                old.cut_off = old.health == Health::Confirmed && m.disk.is_none();
                old.noticed = None;
                old.joining_until = m.joining_until;
                old.hooks_at = m.hooks_at;
                if old.ip != m.ip {
                    old.listed_ip = Some(old.listed_ip.take().unwrap_or_else(|| old.ip.clone()));
                }
                old.stale_election = old
                    .stale_election
                    .take()
                    .filter(|_| m.disk.is_some())
                    .map(|(_, s, l)| (Instant::now() + STALE_ELECTION, s, l));
                old.pod = m.pod;
                old.pod_uid = m.pod_uid;
                old.ip = m.ip;
                old.package = m.package;
                old.strategy = m.strategy;
                old.leader_topology = m.leader_topology;
                old.health = Health::Alive;
                old.started = false;
                old.departed_at = None;
                old.restored_peers = m.restored_peers;
                old.mounts = m.mounts;
                old.disk = m.disk;
                self.dead.remove(&id);
                self.touch(&id);
                false
            }
            None => {
                self.members.insert(id.clone(), m);
                true
            }
        };
        if let Some(m) = self.members.get(&id) {
            self.links.join(m);
        }
        Some((id, new))
    }

    /// Facts §6, "Mitigation in the code": "when a new member joins a group without quorum,
    /// the Confirmed member with the lowest ID is auto-departed" (`insert_service_impl`).
    /// Newcomers are taken in order, each seeing the departures of those before it.
    fn depart_for_newcomers(&mut self, newcomers: &[String]) {
        for id in newcomers {
            let Some(key) = self.members.get(id).map(Member::key) else {
                continue;
            };
            let group: Vec<&Member> = self
                .index
                .get(&key)
                .into_iter()
                .flatten()
                .filter_map(|id| self.members.get(id))
                .collect();
            // The rule applies when rumors already exist for the group.
            if group.len() < 2 || elect::has_quorum(&group, true) {
                continue;
            }
            let now = Instant::now();
            let lowest = group
                .iter()
                .filter(|m| m.seen_health(now) == Health::Confirmed)
                .map(|m| m.member_id.clone())
                .min();
            if let Some(m) = lowest.and_then(|id| self.members.get_mut(&id)) {
                m.health = Health::Departed;
                m.departed_at = Some(Instant::now());
                self.dirty.insert(key);
            }
        }
    }

    /// Forget what no live supervisor remembers: departed members after [`DEPARTED_TTL`], and
    /// dead members of a ring with no alive member left. Returns true when it forgot one.
    fn forget(&mut self) -> bool {
        let live = |m: &Member| {
            self.links
                .ring(&m.ring)
                .filter_map(|id| self.members.get(id))
                .any(|other| other.namespace == m.namespace)
        };
        let forgotten: Vec<String> = self
            .dead
            .iter()
            .filter_map(|id| self.members.get(id))
            .filter(|m| match m.health {
                Health::Alive | Health::Suspect => false,
                Health::Confirmed => !live(m),
                Health::Departed => {
                    !live(m) || m.departed_at.is_some_and(|t| t.elapsed() >= DEPARTED_TTL)
                }
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &forgotten {
            self.dead.remove(id);
            self.persisted.remove(id);
            let key = self
                .members
                .remove(id)
                .filter(|m| !m.ring.is_empty())
                .map(|m| m.key());
            self.regroup(id, key);
        }
        !forgotten.is_empty()
    }

    /// Persisted supervisors save their member list's addresses, and a supervisor that
    /// restored its list stops using it once it reached its ring. Returns those that did.
    fn save_disks(&mut self) -> Vec<String> {
        let peers_of: Vec<(String, Vec<String>)> = self
            .persisted
            .iter()
            .filter_map(|id| self.members.get(id))
            .filter(|m| m.health == Health::Alive)
            .map(|m| {
                let peers = self
                    .links
                    .ring(&m.ring)
                    .filter_map(|id| self.members.get(id))
                    .filter(|o| o.namespace == m.namespace && o.ip != m.ip)
                    .map(|o| o.ip.clone())
                    .collect();
                (m.member_id.clone(), peers)
            })
            .collect();
        let mut reached = Vec::new();
        for (id, mut peers) in peers_of {
            let Some(m) = self.members.get_mut(&id) else {
                continue;
            };
            if peers.is_empty() {
                continue;
            }
            peers.sort();
            // It reached its ring: from now on gossip keeps it there.
            if m.restored_peers.take().is_some() {
                reached.push(id.clone());
            }
            if m.disk.is_none() {
                self.persisted.remove(&id);
            } else if let Some(disk) = m.disk.as_ref().and_then(|d| self.disks.get_mut(d)) {
                disk.peers = peers;
            }
        }
        reached
    }

    /// The group index, the dead and the persisted members from scratch, every group to hold
    /// its elections again.
    fn reindex(&mut self) {
        self.index.clear();
        self.dead.clear();
        self.persisted.clear();
        for m in self.members.values() {
            if m.health != Health::Alive {
                self.dead.insert(m.member_id.clone());
            }
            if m.disk.is_some() || m.restored_peers.is_some() {
                self.persisted.insert(m.member_id.clone());
            }
            if !m.ring.is_empty() {
                self.index
                    .entry(m.key())
                    .or_default()
                    .push(m.member_id.clone());
            }
        }
        let index = &self.index;
        self.groups.retain(|k, _| index.contains_key(k));
        self.dirty = self.index.keys().cloned().collect();
    }

    /// Re-derives the rings around `touched` and files every member that moved (`whole`: every
    /// member, from scratch, and every group holds its elections), then applies the rules that
    /// follow membership: newcomers' departures, forgetting, saved member lists, and the
    /// elections of the groups that changed.
    fn settle(&mut self, touched: Vec<String>, joined: &[String], whole: bool) {
        let moved = rings::merge(&mut self.members, &mut self.links, touched);
        for (id, old) in moved {
            let key = self
                .members
                .get(&id)
                .filter(|_| !old.is_empty())
                .map(|m| (format!("{}/{old}", m.namespace), m.service_group()));
            self.regroup(&id, key);
        }
        if whole {
            self.reindex();
        }
        self.depart_for_newcomers(joined);
        self.forget();
        self.reached = self.save_disks();
        elect::run(self);
    }
}

impl Hub {
    /// Supervisors whose gossip takes `gossip`'s delays.
    pub fn new(gossip: Gossip) -> Self {
        Hub {
            state: Mutex::new(State {
                gossip,
                ..State::default()
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn member_of<'a>(st: &'a State, pod_uid: &str) -> Option<&'a Member> {
        st.by_pod.get(pod_uid).and_then(|id| st.members.get(id))
    }

    /// True when the pod's supervisor answers its health check with 200.
    pub fn healthy(&self, pod_uid: &str) -> bool {
        Self::member_of(&self.state(), pod_uid)
            .is_some_and(|m| m.health == Health::Alive && m.started)
    }

    /// The pods whose health check may have changed its answer since the last call, by uid.
    pub fn take_health_moved(&self) -> Vec<String> {
        std::mem::take(&mut self.state().health_moved)
    }

    /// How many times the container of pod `pod_uid` started again after a crash.
    pub fn restarts(&self, pod_uid: &str) -> u32 {
        self.state().restarts.get(pod_uid).map_or(0, |r| r.count)
    }

    /// The pod's supervisor's `--strategy`.
    pub fn strategy(&self, pod_uid: &str) -> Option<Strategy> {
        Self::member_of(&self.state(), pod_uid).map(|m| m.strategy)
    }

    /// The `/census` document as seen by the supervisor of `pod_uid`: its own group first,
    /// then every other service group its ring gossips about (the real census has a
    /// `census_groups` entry for every group whose rumors reach the member: two Habitats whose
    /// supervisors share a ring see each other's groups). A cut-off member sees only itself.
    pub fn census(&self, pod_uid: &str) -> Option<Value> {
        let st = self.state();
        let me = Self::member_of(&st, pod_uid)?;
        let own = me.key();
        let mut keys = std::collections::BTreeSet::new();
        if !me.cut_off && !me.joining(Instant::now()) && !me.ring.is_empty() {
            keys.extend(
                st.links
                    .ring(&me.ring)
                    .filter_map(|id| st.members.get(id))
                    .filter(|m| m.namespace == me.namespace)
                    .map(Member::key)
                    .filter(|k| *k != own),
            );
        }
        let groups: Vec<census::Gossiped> = std::iter::once(own)
            .chain(keys)
            .map(|key| census::Gossiped {
                group: st.groups.get(&key),
                members: st
                    .index
                    .get(&key)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| st.members.get(id))
                    .collect(),
                service_group: key.1,
            })
            .collect();
        Some(census::document(me, &groups))
    }

    /// The `service.group` the supervisor of `pod_uid` runs.
    pub fn service_group(&self, pod_uid: &str) -> Option<String> {
        Self::member_of(&self.state(), pod_uid).map(Member::service_group)
    }

    /// One pass over the whole world (`Some((pods, config_maps))`, every pod and ConfigMap the
    /// nodes see): track members, open and close gateways, read every peer file, derive every
    /// ring and group again and run every group's elections. `None`: nothing
    /// changed, only the elections' clocks move ([`elect::tick`]). A pass over the world costs
    /// the world; [`Hub::step_changed`] costs what changed.
    pub fn step(self: &Arc<Self>, world: Option<World<'_>>) {
        let Some((pods, config_maps)) = world else {
            let due = {
                let mut st = self.state();
                let due = !st.restarts_due().is_empty();
                if !due {
                    elect::tick(&mut st);
                }
                due
            };
            // A crashed container's backoff is over: it starts again.
            if due {
                self.step_changed(&[], &[]);
            }
            return;
        };
        let mut st = self.state();
        st.reached.clear();
        st.refused.clear();
        let all: HashSet<&str> = pods.iter().map(|p| meta::uid_of(p)).collect();
        st.restarts.retain(|uid, _| all.contains(uid.as_str()));
        // Stops first: a supervisor whose pod is gone no longer holds its member id.
        let seen: HashSet<&str> = pods
            .iter()
            .filter(|p| is_running(p))
            .map(|p| meta::uid_of(p))
            .collect();
        st.restarting.retain(|uid, _| seen.contains(uid.as_str()));
        let gone: Vec<String> = st
            .by_pod
            .keys()
            .filter(|u| !seen.contains(u.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            let pod = pods.iter().find(|p| meta::uid_of(p) == uid);
            st.stop(&uid, graceful(pod.map(|p| &**p)));
        }
        let mut joined = Vec::new();
        for pod in pods {
            self.look_at(&mut st, pod, &mut Vec::new(), &mut joined);
        }
        st.links.reset_config_maps(config_maps);
        let alive: Vec<String> = st
            .members
            .values()
            .filter(|m| m.health == Health::Alive)
            .map(|m| m.member_id.clone())
            .collect();
        let State { members, links, .. } = &mut *st;
        for id in &alive {
            if let Some(m) = members.get(id) {
                links.learn(m);
            }
        }
        st.settle(alive, &joined, true);
    }

    /// A pass told what changed since the last one: the pods (`pods`) and the ConfigMaps
    /// (`config_maps`). Only those, the pods whose supervisor was refused and the supervisors
    /// that reached their ring are looked at, and only the rings around them derived again, so
    /// a pass costs what changed, not the world.
    pub fn step_changed(self: &Arc<Self>, pods: Changed<'_>, config_maps: Changed<'_>) {
        let mut st = self.state();
        // Supervisors whose known addresses changed: those that left their restored member
        // list, and (below) the readers of a changed peer file. Those that start learn theirs
        // as they join.
        let mut relearn = std::mem::take(&mut st.reached);
        let mut started = Vec::new();
        let mut joined = Vec::new();
        // The refused pods as last seen, unless they changed since; in uid order.
        let mut look: BTreeMap<String, Option<Arc<Value>>> = std::mem::take(&mut st.refused)
            .into_iter()
            .map(|(uid, pod)| (uid, Some(pod)))
            .collect();
        look.extend(st.restarts_due());
        look.extend(pods.iter().cloned());
        for (uid, pod) in pods {
            if pod.is_none() {
                st.restarts.remove(uid);
            }
        }
        // Stops first: a supervisor whose pod is gone no longer holds its member id.
        for (uid, pod) in &look {
            if !pod.as_deref().is_some_and(is_running) {
                st.stop(uid, graceful(pod.as_deref()));
            }
        }
        for pod in look.values().flatten() {
            self.look_at(&mut st, pod, &mut started, &mut joined);
        }
        for (key, cm) in config_maps {
            let readers = st.links.set_config_map(key, cm.as_deref());
            relearn.extend(readers);
        }
        let State { members, links, .. } = &mut *st;
        for id in &relearn {
            if let Some(m) = members.get(id).filter(|m| m.health == Health::Alive) {
                links.learn(m);
            }
        }
        let mut touched = relearn;
        touched.append(&mut started);
        st.settle(touched, &joined, false);
    }

    /// One pod as it is now: its supervisor stops when the pod no longer runs, starts when it
    /// runs and has none (its id goes into `started`, and into `joined` when the ring never saw
    /// it).
    fn look_at(
        self: &Arc<Self>,
        st: &mut State,
        pod: &Arc<Value>,
        started: &mut Vec<String>,
        joined: &mut Vec<String>,
    ) {
        let uid = meta::uid_of(pod);
        let running = is_running(pod);
        if running && st.crash_asked(uid, pod) {
            st.crash(uid, pod);
            return;
        }
        if st.by_pod.contains_key(uid) {
            if !running {
                st.stop(uid, graceful(Some(pod)));
            }
            return;
        }
        if !running {
            st.restarting.remove(uid);
            return;
        }
        // A crashed container starts again only after its backoff.
        if let Some((at, _)) = st.restarting.remove(uid) {
            if Instant::now() < at {
                st.restarting.insert(uid.to_string(), (at, pod.clone()));
                return;
            }
        }
        let Some(m) = member_for(pod) else {
            return;
        };
        let ip = m.ip.clone();
        let Some((id, new)) = st.start(m, pod) else {
            st.refused.insert(uid.to_string(), pod.clone());
            return;
        };
        st.by_pod.insert(uid.to_string(), id.clone());
        let handle = gateway::spawn(self.clone(), uid.to_string(), ip);
        st.listeners.insert(uid.to_string(), handle);
        started.push(id.clone());
        if new {
            joined.push(id);
        }
    }

    /// Departs `member_id` (its control gateway got `SupDepart`), and runs its group's elections.
    pub fn depart(&self, member_id: &str) {
        let mut st = self.state();
        st.depart(member_id);
        elect::run(&mut st);
    }

    /// Close every gateway.
    pub fn shutdown(&self) {
        let mut st = self.state();
        for (_, l) in st.listeners.drain() {
            l.abort();
        }
    }
}

#[cfg(test)]
mod tests;
