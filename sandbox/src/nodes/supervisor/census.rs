//! The `/census` JSON document, in the supervisor's exact shape.

use super::{Election, Group, Health, Member, GATEWAY_PORT};
use serde_json::{json, Map, Value};

fn member_json(m: &Member, status: Election, leader: Option<&str>) -> Value {
    let mut parts = m.package.split('/');
    let (origin, name, version, release) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let is_leader = leader == Some(m.member_id.as_str());
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
        "update_leader": false,
        "update_follower": false,
        "election_is_running": status == Election::InProgress,
        "election_is_no_quorum": status == Election::NoQuorum,
        "election_is_finished": status == Election::Finished,
        "update_election_is_running": false,
        "update_election_is_no_quorum": false,
        "update_election_is_finished": false,
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
    let status = group.map_or(Election::None, |g| g.status);
    let leader = group.and_then(|g| g.leader_id.as_deref());
    let population: Map<String, Value> = peers
        .iter()
        .map(|m| (m.member_id.clone(), member_json(m, status, leader)))
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
                "election_status": status.as_str(),
                "update_election_status": "None",
                "pkg_incarnation": 0,
                "leader_id": leader,
                "update_leader_id": null,
                "local_member_id": me.member_id,
                "service_config": null,
                "changed_service_files": [],
                "service_files": {},
                "population": population,
            }
        }
    })
}
