//! Simulated Habitat supervisors: one member per running `habitat-service` pod, gossip assumed
//! perfect inside a namespace's service group, and leader elections with quorum.

pub mod census;
mod gateway;

use crate::meta;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long an election runs before it finishes.
pub const ELECTION_DURATION: Duration = Duration::from_millis(200);
/// How long departed members stay in the census.
pub const DEPARTED_TTL: Duration = Duration::from_secs(120);
/// The HTTP gateway port.
pub const GATEWAY_PORT: u16 = 9631;

/// SWIM health of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Alive.
    Alive,
    /// Confirmed dead.
    Confirmed,
    /// Departed (excluded from quorum).
    Departed,
}

/// Census election status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// No election (standalone).
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

/// One supervisor (one pod incarnation).
#[derive(Debug, Clone)]
pub struct Member {
    /// 32-hex member id.
    pub member_id: String,
    /// Pod name.
    pub pod: String,
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
    /// Package ident `origin/name/version/release`.
    pub package: String,
    /// Health.
    pub health: Health,
    /// The service has started (leader topology: an election finished while alive).
    pub started: bool,
    /// The gossip ring: members that reach each other through their peer files. Kept by a
    /// member after its pod stops, so that a death does not re-key its ring.
    pub ring: String,
    departed_at: Option<Instant>,
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
}

/// Election state of one service group.
#[derive(Debug, Clone)]
pub struct Group {
    /// Status.
    pub status: Election,
    /// Leader of the last finished election.
    pub leader_id: Option<String>,
    running_until: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    members: HashMap<String, Member>,
    groups: HashMap<(String, String), Group>,
    listeners: HashMap<String, JoinHandle<()>>,
}

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

/// Build a member for a running pod with a `habitat-service` container.
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
    let origin = image
        .split('/')
        .next()
        .filter(|o| *o != image)
        .unwrap_or("core");
    Some(Member {
        member_id: meta::hex32(),
        pod: meta::name(pod).to_string(),
        namespace: meta::namespace(pod).to_string(),
        ip: pod["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        package: format!("{origin}/{service}/0.1.0/20250101000000"),
        service,
        group,
        leader_topology: arg(c, "--topology").as_deref() == Some("leader")
            || arg(c, "-t").as_deref() == Some("leader"),
        health: Health::Alive,
        started: false,
        ring: String::new(),
        departed_at: None,
    })
}

impl Hub {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when the pod's supervisor answers its health check with 200.
    pub fn healthy(&self, pod_uid: &str) -> bool {
        self.state()
            .members
            .get(pod_uid)
            .is_some_and(|m| m.health == Health::Alive && m.started)
    }

    /// The `/census` document as seen by the supervisor of `pod_uid`.
    pub fn census(&self, pod_uid: &str) -> Option<Value> {
        let st = self.state();
        let me = st.members.get(pod_uid)?;
        let group = st.groups.get(&(me.scope(), me.service_group()));
        let peers: Vec<&Member> = st
            .members
            .values()
            .filter(|m| m.scope() == me.scope() && m.service_group() == me.service_group())
            .collect();
        Some(census::document(me, group, &peers))
    }

    /// One pass: run elections, and when the world changed (`Some((pods, config_maps))`, every
    /// pod and ConfigMap the nodes see), track members, open and close gateways, and rederive
    /// the gossip rings.
    pub fn step(self: &Arc<Self>, world: Option<(&[Value], &[Value])>) {
        let Some((pods, config_maps)) = world else {
            elect(&mut self.state());
            return;
        };
        let mut st = self.state();
        let mut seen = HashSet::new();
        for pod in pods {
            let uid = meta::uid_of(pod).to_string();
            let running = pod["status"]["phase"] == "Running"
                && !meta::is_deleting(pod)
                && pod["status"]["podIP"]
                    .as_str()
                    .is_some_and(|ip| !ip.is_empty());
            match st.members.get_mut(&uid) {
                Some(m) => {
                    seen.insert(uid.clone());
                    if !running && m.health == Health::Alive {
                        m.health = Health::Confirmed;
                        if let Some(l) = st.listeners.remove(&uid) {
                            l.abort();
                        }
                    }
                }
                None if running => {
                    if let Some(m) = member_for(pod) {
                        seen.insert(uid.clone());
                        let handle = gateway::spawn(self.clone(), uid.clone(), m.ip.clone());
                        st.listeners.insert(uid.clone(), handle);
                        st.members.insert(uid, m);
                    }
                }
                None => {}
            }
        }
        let gone: Vec<String> = st
            .members
            .keys()
            .filter(|u| !seen.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(l) = st.listeners.remove(&uid) {
                l.abort();
            }
            if let Some(m) = st.members.get_mut(&uid) {
                if m.health != Health::Departed {
                    m.health = Health::Departed;
                    m.departed_at = Some(Instant::now());
                }
            }
        }
        st.members
            .retain(|_, m| m.departed_at.is_none_or(|t| t.elapsed() < DEPARTED_TTL));
        rings::assign(&mut st.members, pods, config_maps);
        elect(&mut st);
    }

    /// Close every gateway.
    pub fn shutdown(&self) {
        let mut st = self.state();
        for (_, l) in st.listeners.drain() {
            l.abort();
        }
    }
}

mod rings;

fn elect(st: &mut State) {
    let mut keys: HashSet<(String, String)> = HashSet::new();
    for m in st.members.values() {
        keys.insert((m.scope(), m.service_group()));
    }
    st.groups.retain(|k, _| keys.contains(k));
    let now = Instant::now();
    for key in keys {
        let members: Vec<&Member> = st
            .members
            .values()
            .filter(|m| {
                m.scope() == key.0 && m.service_group() == key.1 && m.health != Health::Departed
            })
            .collect();
        let leader_topology = members.iter().any(|m| m.leader_topology);
        let g = st.groups.entry(key.clone()).or_insert(Group {
            status: Election::None,
            leader_id: None,
            running_until: None,
        });
        if !leader_topology {
            g.status = Election::None;
            g.leader_id = None;
            continue;
        }
        let total = members.len();
        let alive: Vec<&&Member> = members
            .iter()
            .filter(|m| m.health == Health::Alive)
            .collect();
        let quorum = total >= 2 && alive.len() > total / 2;
        let leader_alive = g
            .leader_id
            .as_ref()
            .is_some_and(|l| alive.iter().any(|m| m.member_id == *l));
        if !quorum {
            g.status = Election::NoQuorum;
            g.running_until = None;
        } else if g.status == Election::Finished && leader_alive {
        } else if let Some(until) = g.running_until.filter(|_| g.status == Election::InProgress) {
            if now >= until {
                g.status = Election::Finished;
                g.leader_id = alive.iter().map(|m| m.member_id.clone()).max();
                g.running_until = None;
            }
        } else {
            g.status = Election::InProgress;
            g.running_until = Some(now + ELECTION_DURATION);
        }
    }
    let finished: HashSet<(String, String)> = st
        .groups
        .iter()
        .filter(|(_, g)| g.status == Election::Finished || g.status == Election::None)
        .map(|(k, _)| k.clone())
        .collect();
    for m in st.members.values_mut() {
        if m.health == Health::Alive && finished.contains(&(m.scope(), m.service_group())) {
            m.started = true;
        }
    }
}

#[cfg(test)]
mod tests;
