//! The `/census` JSON document, in the supervisor's exact shape.

use super::{Election, Group, Health, Member, GATEWAY_PORT};
use serde_json::{json, Map, Value};

fn member_json(m: &Member, g: &Group, ip: &str, now: std::time::Instant) -> Value {
    let health = m.seen_health(now);
    let (status, leader) = (g.status, g.leader_id.as_deref());
    let (update_status, update_leader) = (g.update_status, g.update_leader_id.as_deref());
    let mut parts = m.package.split('/');
    let (origin, name, version, release) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let is_leader = leader == Some(m.member_id.as_str());
    let is_update_leader = update_leader == Some(m.member_id.as_str());
    json!({
        "member_id": m.member_id,
        "pkg": {"origin": origin, "name": name, "version": version, "release": release},
        "package": m.package,
        "pkg_incarnation": 0,
        "service": m.service,
        "group": m.group,
        "org": null,
        "persistent": true,
        "leader": is_leader,
        "follower": leader.is_some() && !is_leader && health != Health::Departed,
        "update_leader": is_update_leader,
        "update_follower": update_leader.is_some() && !is_update_leader && health != Health::Departed,
        "election_is_running": status == Election::InProgress,
        "election_is_no_quorum": status == Election::NoQuorum,
        "election_is_finished": status == Election::Finished,
        "update_election_is_running": update_status == Election::InProgress,
        "update_election_is_no_quorum": update_status == Election::NoQuorum,
        "update_election_is_finished": update_status == Election::Finished,
        "alive": health == Health::Alive,
        "suspect": health == Health::Suspect,
        "confirmed": health == Health::Confirmed,
        "departed": health == Health::Departed,
        "sys": {
            "ip": ip, "hostname": m.pod, "gossip_ip": ip, "gossip_port": 9638,
            "http_gateway_ip": "0.0.0.0", "http_gateway_port": GATEWAY_PORT,
            "ctl_gateway_ip": "127.0.0.1", "ctl_gateway_port": 9632,
        },
        "cfg": {},
    })
}

/// One service group of a census: its election state and its members.
pub struct Gossiped<'a> {
    /// `service.group`.
    pub service_group: String,
    /// Its elections (none before its first).
    pub group: Option<&'a Group>,
    /// Its members, dead ones included.
    pub members: Vec<&'a Member>,
}

/// The census as served by `me`: `groups` are the service groups it knows, its own first (its
/// members, itself included, and those of the other groups its ring gossips about). The others
/// are listed at the address they first had ([`Member::listed_ip`]); a cut-off member sees only
/// itself and no election; one restarted with its saved data reports its old election for a
/// moment ([`Member::stale_election`]). Every group names `me` as its `local_member_id`, as the
/// real census does.
pub fn document(me: &Member, groups: &[Gossiped<'_>]) -> Value {
    let own = me.service_group();
    let now = std::time::Instant::now();
    // Cut off, or still joining its ring: it sees only itself, with no finished election.
    let alone = me.cut_off || me.joining(now);
    let census_groups: Map<String, Value> = groups
        .iter()
        .map(|gossiped| {
            let mine = gossiped.service_group == own;
            let mut g = gossiped.group.cloned().unwrap_or_default();
            if mine {
                if let Some((until, status, leader)) = &me.stale_election {
                    if std::time::Instant::now() < *until {
                        g.status = *status;
                        g.leader_id = leader.clone();
                    }
                }
                if alone {
                    g.status = Election::InProgress;
                    g.leader_id = None;
                    g.update_status = Election::None;
                    g.update_leader_id = None;
                }
            }
            let g = &g;
            let population: Map<String, Value> = gossiped
                .members
                .iter()
                .filter(|m| !alone || m.member_id == me.member_id)
                .map(|m| {
                    let ip = if m.member_id == me.member_id {
                        &m.ip
                    } else {
                        m.listed_ip.as_ref().unwrap_or(&m.ip)
                    };
                    (m.member_id.clone(), member_json(m, g, ip, now))
                })
                .collect();
            let sg = &gossiped.service_group;
            (
                sg.clone(),
                json!({
                    "service_group": sg,
                    "election_status": g.status.as_str(),
                    "update_election_status": g.update_status.as_str(),
                    "pkg_incarnation": 0,
                    "leader_id": g.leader_id,
                    "update_leader_id": g.update_leader_id,
                    "local_member_id": me.member_id,
                    "service_config": null,
                    "changed_service_files": [],
                    "service_files": {},
                    "population": population,
                }),
            )
        })
        .collect();
    json!({
        "local_member_id": me.member_id,
        "changed": false,
        "last_service_counter": 0,
        "last_election_counter": 0,
        "last_election_update_counter": 0,
        "last_membership_counter": 0,
        "last_service_config_counter": 0,
        "last_service_file_counter": 0,
        "census_groups": census_groups,
    })
}
