//! The `/census` JSON document, in the supervisor's exact shape.

use super::{Election, Group, Health, Member, GATEWAY_PORT};
use serde_json::{json, Map, Value};

fn member_json(m: &Member, g: &Group) -> Value {
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
        "follower": leader.is_some() && !is_leader && m.health != Health::Departed,
        "update_leader": is_update_leader,
        "update_follower": update_leader.is_some() && !is_update_leader && m.health != Health::Departed,
        "election_is_running": status == Election::InProgress,
        "election_is_no_quorum": status == Election::NoQuorum,
        "election_is_finished": status == Election::Finished,
        "update_election_is_running": update_status == Election::InProgress,
        "update_election_is_no_quorum": update_status == Election::NoQuorum,
        "update_election_is_finished": update_status == Election::Finished,
        "alive": m.health == Health::Alive,
        "suspect": false,
        "confirmed": m.health == Health::Confirmed,
        "departed": m.health == Health::Departed,
        "sys": {
            "ip": m.ip, "hostname": m.pod, "gossip_ip": m.ip, "gossip_port": 9638,
            "http_gateway_ip": "0.0.0.0", "http_gateway_port": GATEWAY_PORT,
            "ctl_gateway_ip": "127.0.0.1", "ctl_gateway_port": 9632,
        },
        "cfg": {},
    })
}

/// The census as served by `me`, whose group members (itself included) are `peers`.
pub fn document(me: &Member, group: Option<&Group>, peers: &[&Member]) -> Value {
    let none = Group::default();
    let g = group.unwrap_or(&none);
    let population: Map<String, Value> = peers
        .iter()
        .map(|m| (m.member_id.clone(), member_json(m, g)))
        .collect();
    let sg = me.service_group();
    json!({
        "local_member_id": me.member_id,
        "changed": false,
        "last_service_counter": 0,
        "last_election_counter": 0,
        "last_election_update_counter": 0,
        "last_membership_counter": 0,
        "last_service_config_counter": 0,
        "last_service_file_counter": 0,
        "census_groups": {
            sg.clone(): {
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
            }
        }
    })
}
