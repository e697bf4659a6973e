//! Unit tests for membership and elections.

use super::*;
use serde_json::json;

fn member(id: &str, ns: &str, leader: bool) -> Member {
    Member {
        member_id: id.into(),
        pod: format!("p-{id}"),
        namespace: ns.into(),
        ip: "127.1.0.2".into(),
        service: "redis".into(),
        group: "default".into(),
        leader_topology: leader,
        package: "core/redis/0.1.0/20250101000000".into(),
        health: Health::Alive,
        started: false,
        ring: "r".into(),
        departed_at: None,
    }
}

fn group(st: &State) -> Group {
    st.groups
        .get(&("ns/r".to_string(), "redis.default".to_string()))
        .cloned()
        .expect("group")
}

#[test]
fn lone_member_never_elects() {
    let mut st = State::default();
    st.members.insert("u1".into(), member("a", "ns", true));
    elect(&mut st);
    assert_eq!(group(&st).status, Election::NoQuorum);
    assert!(!st.members["u1"].started);
}

#[test]
fn election_runs_then_finishes_with_highest_id() {
    let mut st = State::default();
    for (u, id) in [("u1", "a1"), ("u2", "c3"), ("u3", "b2")] {
        st.members.insert(u.into(), member(id, "ns", true));
    }
    elect(&mut st);
    assert_eq!(group(&st).status, Election::InProgress);
    std::thread::sleep(ELECTION_DURATION);
    elect(&mut st);
    let g = group(&st);
    assert_eq!(
        (g.status, g.leader_id.as_deref()),
        (Election::Finished, Some("c3"))
    );
    assert!(st.members.values().all(|m| m.started));
    // the leader dies: a new election among the two others, still with quorum (2 > 3/2)
    if let Some(m) = st.members.get_mut("u2") {
        m.health = Health::Confirmed;
    }
    elect(&mut st);
    assert_eq!(group(&st).status, Election::InProgress);
    std::thread::sleep(ELECTION_DURATION);
    elect(&mut st);
    assert_eq!(group(&st).leader_id.as_deref(), Some("b2"));
    // another dies: 1 alive of 3 → no quorum
    if let Some(m) = st.members.get_mut("u3") {
        m.health = Health::Confirmed;
    }
    elect(&mut st);
    assert_eq!(group(&st).status, Election::NoQuorum);
}

#[test]
fn standalone_reports_none_and_census_shape() {
    let mut st = State::default();
    st.members.insert("u1".into(), member("a", "ns", false));
    elect(&mut st);
    let g = group(&st);
    assert_eq!(g.status, Election::None);
    let me = &st.members["u1"];
    let doc = census::document(me, Some(&g), &[me]);
    let grp = &doc["census_groups"]["redis.default"];
    assert_eq!(grp["election_status"], "None");
    assert_eq!(grp["leader_id"], json!(null));
    assert_eq!(grp["population"]["a"]["sys"]["ip"], "127.1.0.2");
    assert_eq!(grp["population"]["a"]["alive"], true);
    assert_eq!(doc["local_member_id"], "a");
}

#[test]
fn member_from_pod() {
    let pod = json!({"metadata": {"name": "redis-0", "namespace": "ns"},
        "spec": {"containers": [{"name": "habitat-service", "image": "habitat/redis-hab",
            "args": ["--topology", "leader", "--group=prod"],
            "readinessProbe": {"httpGet": {"path": "/services/redis/prod/health", "port": 9631}}}]},
        "status": {"podIP": "127.3.0.2"}});
    let m = member_for(&pod).expect("member");
    assert_eq!((m.service.as_str(), m.group.as_str()), ("redis", "prod"));
    assert!(m.leader_topology);
    assert_eq!(m.member_id.len(), 32);
    assert!(m.package.starts_with("habitat/redis/"));
}

fn pod_with_peer(uid: &str, ns: &str, cm: &str) -> Value {
    json!({"metadata": {"uid": uid, "namespace": ns, "name": uid},
           "spec": {"volumes": [{"name": "peer", "configMap": {"name": cm}}]}})
}

#[test]
fn rings_follow_the_peer_files_and_keep_their_key_when_members_join() {
    let mut members: HashMap<String, Member> = HashMap::new();
    for (uid, ip) in [("a", "127.1.0.2"), ("b", "127.1.0.3"), ("c", "127.1.0.4")] {
        let mut m = member(uid, "ns", true);
        m.ip = ip.into();
        m.ring = String::new();
        members.insert(uid.into(), m);
    }
    // a and b read a file naming a; c reads its own file naming itself: two rings.
    let cms = vec![
        json!({"metadata": {"namespace": "ns", "name": "x-peer"}, "data": {"peer-ip": "127.1.0.2"}}),
        json!({"metadata": {"namespace": "ns", "name": "y-peer"}, "data": {"peer-ip": "127.1.0.4"}}),
    ];
    let pods = vec![
        pod_with_peer("a", "ns", "x-peer"),
        pod_with_peer("b", "ns", "x-peer"),
        pod_with_peer("c", "ns", "y-peer"),
    ];
    rings::assign(&mut members, &pods, &cms);
    assert_eq!(members["a"].ring, members["b"].ring);
    assert_ne!(members["a"].ring, members["c"].ring);
    let key = members["a"].ring.clone();
    // A newcomer joining through the same file keeps the ring's key.
    let mut d = member("d", "ns", true);
    d.ip = "127.1.0.5".into();
    d.ring = String::new();
    members.insert("d".into(), d);
    let mut pods = pods;
    pods.push(pod_with_peer("d", "ns", "x-peer"));
    rings::assign(&mut members, &pods, &cms);
    assert_eq!(members["d"].ring, key);
    assert_eq!(members["a"].ring, key);
}
