//! Unit tests for membership and elections. Each rule is pinned to the fact it follows in
//! `../shared/reference/habitat-supervisor-facts.md`, quoted in the test's doc comment.

use super::*;
use serde_json::json;
use std::collections::BTreeSet;

fn member(id: &str, ns: &str, leader: bool) -> Member {
    Member {
        member_id: id.into(),
        pod: format!("p-{id}"),
        pod_uid: format!("u-{id}"),
        namespace: ns.into(),
        ip: "127.1.0.2".into(),
        service: "redis".into(),
        group: "default".into(),
        leader_topology: leader,
        strategy: Strategy::None,
        package: "core/redis/0.1.0/20250101000000".into(),
        health: Health::Alive,
        started: false,
        ring: "r".into(),
        restored_peers: None,
        mounts: vec![],
        disk: None,
        departed_at: None,
        departure_rumor: false,
        cut_off: false,
        listed_ip: None,
        stale_election: None,
        gossip_key: None,
        noticed: None,
        joining_until: None,
        hooks_at: None,
    }
}

fn group(st: &State) -> Group {
    st.groups
        .get(&("ns/r".to_string(), "redis.default".to_string()))
        .cloned()
        .expect("group")
}

fn settle(st: &mut State) {
    elect::elect(st);
    std::thread::sleep(ELECTION_DURATION + Duration::from_millis(10));
    elect::elect(st);
}

/// A pod of a 'redis' leader group, reading peer file `peers`. `extra` is merged into the
/// container (volume mounts, args) and `volumes` added to the pod's.
fn pod(name: &str, uid: &str, ip: &str, container: Value, volumes: Value) -> Arc<Value> {
    let mut c = json!({"name": "habitat-service", "image": "core/redis-hab:v1",
        "args": ["--topology", "leader", "--group", "default"],
        "readinessProbe": {"httpGet": {"path": "/services/redis/default/health", "port": 9631}}});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        for (k, v) in extra {
            c.insert(k.clone(), v.clone());
        }
    }
    let mut vols = vec![json!({"name": "peer", "configMap": {"name": "redis-peer"}})];
    vols.extend(volumes.as_array().cloned().unwrap_or_default());
    Arc::new(
        json!({"metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"containers": [c], "volumes": vols},
        "status": {"phase": "Running", "podIP": ip}}),
    )
}

/// `p` crashed: the simulated kubelet marks it Failed (it is not being deleted).
fn crashed(p: &Arc<Value>) -> Arc<Value> {
    let mut v = (**p).clone();
    v["status"]["phase"] = json!("Failed");
    Arc::new(v)
}

fn peer_file(ip: &str) -> Vec<Arc<Value>> {
    vec![Arc::new(
        json!({"metadata": {"namespace": "ns", "name": "redis-peer"}, "data": {"peer-ip": ip}}),
    )]
}

/// The hub's only group: (election status, leader, alive, total counted for quorum).
fn census_of(hub: &Hub, uid: &str) -> (String, Option<String>, usize, usize) {
    let doc = hub.census(uid).expect("a census");
    let g = &doc["census_groups"]["redis.default"];
    let pop: Vec<&Value> = g["population"]
        .as_object()
        .expect("population")
        .values()
        .collect();
    let alive = pop.iter().filter(|m| m["alive"] == true).count();
    let total = pop.iter().filter(|m| m["departed"] == false).count();
    (
        g["election_status"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        g["leader_id"].as_str().map(String::from),
        alive,
        total,
    )
}

fn step_settled(hub: &Arc<Hub>, pods: &[Arc<Value>], cms: &[Arc<Value>]) {
    hub.step(Some((pods, cms)));
    std::thread::sleep(ELECTION_DURATION + Duration::from_millis(10));
    hub.step(None);
}

/// Facts §1: "A lone supervisor does not have its own member entry in its member list until
/// it has gossiped with peers. Its election therefore stays NoQuorum".
#[test]
fn lone_member_never_elects() {
    let mut st = State::default();
    st.members.insert("a".into(), member("a", "ns", true));
    settle(&mut st);
    assert_eq!(group(&st).status, Election::NoQuorum);
    assert!(!st.members["a"].started);
}

/// Facts §6: "Quorum: `alive > total/2` (integer division). `total` = group members ... whose
/// health is Alive, Suspect or Confirmed (Departed and unknown members are excluded)."
#[test]
fn quorum_counts_confirmed_members_and_excludes_departed_ones() {
    let mut st = State::default();
    for id in ["a1", "b2", "c3", "d4"] {
        st.members.insert(id.into(), member(id, "ns", true));
    }
    settle(&mut st);
    assert_eq!(group(&st).status, Election::Finished);
    // 2 alive of 4 counted: 2 > 4/2 is false.
    for id in ["a1", "b2"] {
        st.members.get_mut(id).expect("member").health = Health::Confirmed;
    }
    settle(&mut st);
    assert_eq!(group(&st).status, Election::NoQuorum);
    // Departing one leaves 2 alive of 3 counted: 2 > 1.
    st.members.get_mut("a1").expect("member").health = Health::Departed;
    settle(&mut st);
    assert_eq!(group(&st).status, Election::Finished);
}

/// Facts §6: merge rules "higher term wins; then higher suitability ...; then the
/// lexicographically higher member_id"; "When a non-leader sees the finished leader at health
/// ≥ Confirmed, it restarts the election with term+1"; "A leader that loses quorum also
/// restarts the election. The old leader, if it is running again, re-enters with suitability
/// `u64::MAX`".
#[test]
fn a_dead_leader_is_replaced_with_a_new_term_and_a_leader_that_kept_running_wins_again() {
    let mut st = State::default();
    for id in ["a1", "c3", "b2"] {
        st.members.insert(id.into(), member(id, "ns", true));
    }
    settle(&mut st);
    let g = group(&st);
    assert_eq!(
        (g.status, g.leader_id.as_deref()),
        (Election::Finished, Some("c3"))
    );
    assert!(st.members.values().all(|m| m.started));
    st.members.get_mut("c3").expect("member").health = Health::Confirmed;
    elect::elect(&mut st);
    assert_eq!(group(&st).status, Election::InProgress);
    settle(&mut st);
    let g = group(&st);
    assert_eq!((g.leader_id.as_deref(), g.term), (Some("b2"), 1));
    // a1 dies: 1 alive of 3, no quorum; b2 stays the leader once a1 is back.
    st.members.get_mut("a1").expect("member").health = Health::Confirmed;
    settle(&mut st);
    assert_eq!(group(&st).status, Election::NoQuorum);
    st.members.get_mut("a1").expect("member").health = Health::Alive;
    settle(&mut st);
    let g = group(&st);
    assert_eq!(
        (g.status, g.leader_id.as_deref()),
        (Election::Finished, Some("b2"))
    );
    assert_eq!(g.term, 1, "a lost quorum is no new term");
}

/// Facts §6: "a Confirmed member becomes Departed only after 3 days ... Until then it counts
/// in `total`." and "Departed and confirmed members stay in `population`."
#[tokio::test]
async fn a_crashed_pod_leaves_a_confirmed_member_that_still_counts() {
    let hub = Arc::new(Hub::default());
    let ips = ["127.250.1.2", "127.250.1.3", "127.250.1.4"];
    let cms = peer_file(ips[0]);
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                ips[i],
                json!({}),
                json!([]),
            )
        })
        .collect();
    step_settled(&hub, &pods, &cms);
    assert_eq!(census_of(&hub, "u0").0, "ElectionFinished");
    // redis-2 crashes.
    step_settled(
        &hub,
        &[pods[0].clone(), pods[1].clone(), crashed(&pods[2])],
        &cms,
    );
    let (status, _, alive, total) = census_of(&hub, "u0");
    assert_eq!((status.as_str(), alive, total), ("ElectionFinished", 2, 3));
    let doc = hub.census("u0").expect("census");
    let confirmed = doc["census_groups"]["redis.default"]["population"]
        .as_object()
        .expect("population")
        .values()
        .filter(|m| m["confirmed"] == true && m["sys"]["hostname"] == "redis-2")
        .count();
    assert_eq!(confirmed, 1);
    hub.shutdown();
}

/// Facts §6, "Kubernetes impact": "a pod that restarts with a new MEMBER_ID (non-persisted
/// `/hab/sup`) ... adds Confirmed members that can cost quorum", and "when a new member joins
/// a group without quorum, the Confirmed member with the lowest ID is auto-departed
/// (`insert_service_impl`, issue #1994)". A rollout of three fresh-id pods, one at a time:
/// the second stop leaves 2 alive of 4 counted; the third successor finds 3 alive of 6.
#[tokio::test]
async fn fresh_ids_after_crashes_cost_quorum_and_a_newcomer_departs_the_lowest_confirmed() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.2.{i}");
    let cms = peer_file(&ip(2));
    let mut pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i as u8),
                json!({}),
                json!([]),
            )
        })
        .collect();
    step_settled(&hub, &pods, &cms);
    let status = |hub: &Hub, uid: &str| {
        let (s, _, alive, total) = census_of(hub, uid);
        (s, alive, total)
    };
    // redis-1 crashes and is replaced: a new member joins while the group has quorum: nothing
    // departs.
    step_settled(
        &hub,
        &[pods[0].clone(), crashed(&pods[1]), pods[2].clone()],
        &cms,
    );
    assert_eq!(status(&hub, "u0"), ("ElectionFinished".into(), 2, 3));
    pods[1] = pod("redis-1", "u1b", &ip(10), json!({}), json!([]));
    step_settled(&hub, &pods, &cms);
    assert_eq!(status(&hub, "u0"), ("ElectionFinished".into(), 3, 4));
    // redis-2 crashes: 2 alive of 4 counted, no quorum.
    step_settled(
        &hub,
        &[pods[0].clone(), pods[1].clone(), crashed(&pods[2])],
        &cms,
    );
    assert_eq!(status(&hub, "u0"), ("ElectionNoQuorum".into(), 2, 4));
    // Its successor brings 3 alive of 5: quorum again, nothing departs.
    pods[2] = pod("redis-2", "u2b", &ip(11), json!({}), json!([]));
    step_settled(&hub, &pods, &cms);
    assert_eq!(status(&hub, "u0"), ("ElectionFinished".into(), 3, 5));
    // redis-0 crashes (2 of 5); its successor makes 3 of 6, no quorum: the lowest Confirmed
    // member departs and 3 of 5 elect.
    step_settled(
        &hub,
        &[crashed(&pods[0]), pods[1].clone(), pods[2].clone()],
        &cms,
    );
    assert_eq!(status(&hub, "u1b"), ("ElectionNoQuorum".into(), 2, 5));
    let confirmed: Vec<String> = {
        let st = hub.state();
        let mut v: Vec<String> = st
            .members
            .values()
            .filter(|m| m.health == Health::Confirmed)
            .map(|m| m.member_id.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(confirmed.len(), 3);
    pods[0] = pod("redis-0", "u0b", &ip(12), json!({}), json!([]));
    step_settled(&hub, &pods, &peer_file(&ip(10)));
    assert_eq!(status(&hub, "u1b"), ("ElectionFinished".into(), 3, 5));
    let st = hub.state();
    assert_eq!(st.members[&confirmed[0]].health, Health::Departed);
    assert!(confirmed[1..]
        .iter()
        .all(|id| st.members[id].health == Health::Confirmed));
    drop(st);
    hub.shutdown();
}

/// Facts §1, "Persistent state": "Supervisor root is `/hab/sup/default`: `MEMBER_ID` file" —
/// a pod that finds its `MEMBER_ID` (here projected from its name) is the same member at a new
/// address, so replacing pods one at a time never grows `total`.
#[tokio::test]
async fn a_projected_member_id_rejoins_as_the_same_member_even_when_every_ip_changed() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.3.{i}");
    let id_mount = json!({"volumeMounts": [
        {"name": "id", "mountPath": "/hab/sup/default/MEMBER_ID", "subPath": "MEMBER_ID"}]});
    let id_volume = json!([{"name": "id", "downwardAPI": {"items": [
        {"path": "MEMBER_ID", "fieldRef": {"fieldPath": "metadata.name"}}]}}]);
    let at = |gen: u8| -> Vec<Arc<Value>> {
        (0..3)
            .map(|i| {
                pod(
                    &format!("redis-{i}"),
                    &format!("u{gen}-{i}"),
                    &ip(gen * 10 + i),
                    id_mount.clone(),
                    id_volume.clone(),
                )
            })
            .collect()
    };
    let first = at(1);
    step_settled(&hub, &first, &peer_file(&ip(10)));
    assert_eq!(
        census_of(&hub, "u1-0"),
        ("ElectionFinished".into(), Some("redis-2".into()), 3, 3)
    );
    // Every pod replaced at once, every IP new; the peer file names a new pod.
    let second = at(2);
    step_settled(&hub, &[], &peer_file(&ip(10)));
    step_settled(&hub, &second, &peer_file(&ip(20)));
    let (status, _, alive, total) = census_of(&hub, "u2-0");
    assert_eq!((status.as_str(), alive, total), ("ElectionFinished", 3, 3));
    // One at a time: redis-0 stops, 2 alive of 3, quorum holds; it comes back as itself.
    step_settled(&hub, &second[1..], &peer_file(&ip(21)));
    assert_eq!(census_of(&hub, "u2-1").0, "ElectionFinished");
    let third = vec![at(3)[0].clone(), second[1].clone(), second[2].clone()];
    step_settled(&hub, &third, &peer_file(&ip(21)));
    assert_eq!(
        census_of(&hub, "u3-0"),
        ("ElectionFinished".into(), Some("redis-2".into()), 3, 3)
    );
    hub.shutdown();
}

/// Facts §1: "`data/<member_id>.rst` (saved member list and rumors, restored at boot, so a
/// restarted supervisor with persisted `/hab/sup` has a non-empty member list and **ignores
/// the peer-watch-file**)". A persisted supervisor keeps its id; when every address it saved
/// changed, it reaches no one.
#[tokio::test]
async fn a_persisted_hab_sup_keeps_the_id_and_ignores_the_peer_file() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.4.{i}");
    let mount = json!({"volumeMounts": [{"name": "data", "mountPath": "/hab/sup"}]});
    let claim = |i: u8| json!([{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-redis-{i}")}}]);
    let at = |gen: u8, i: u8| {
        pod(
            &format!("redis-{i}"),
            &format!("u{gen}-{i}"),
            &ip(gen * 10 + i),
            mount.clone(),
            claim(i),
        )
    };
    let first: Vec<Arc<Value>> = (0..3).map(|i| at(1, i)).collect();
    step_settled(&hub, &first, &peer_file(&ip(10)));
    let ids: HashSet<String> = hub.state().members.keys().cloned().collect();
    // redis-0 replaced alone: it rejoins through the saved addresses of redis-1 and redis-2.
    let second = vec![at(2, 0), first[1].clone(), first[2].clone()];
    step_settled(&hub, &second[1..], &peer_file(&ip(11)));
    step_settled(&hub, &second, &peer_file(&ip(11)));
    assert_eq!(
        hub.state().members.keys().cloned().collect::<HashSet<_>>(),
        ids
    );
    assert_eq!(census_of(&hub, "u2-0").2, 3);
    // All three replaced at once: each restored list names only dead addresses.
    let third: Vec<Arc<Value>> = (0..3).map(|i| at(3, i)).collect();
    step_settled(&hub, &[], &peer_file(&ip(30)));
    step_settled(&hub, &third, &peer_file(&ip(30)));
    let (status, _, alive, _) = census_of(&hub, "u3-1");
    assert_eq!((status.as_str(), alive), ("ElectionNoQuorum", 1));
    hub.shutdown();
}

/// Facts §6: "The same applies to `update_election_status`, which is used by the `rolling`
/// update strategy"; §1: `--strategy` "Values `none` (default), `at-once`, `rolling`".
#[tokio::test]
async fn update_elections_run_for_the_rolling_strategy_only() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.5.{i}");
    let rolling = json!({"args": ["--topology", "leader", "--strategy", "rolling"]});
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i),
                rolling.clone(),
                json!([]),
            )
        })
        .collect();
    step_settled(&hub, &pods, &peer_file(&ip(2)));
    let doc = hub.census("u0").expect("census");
    let g = &doc["census_groups"]["redis.default"];
    assert_eq!(g["update_election_status"], "ElectionFinished");
    let leader = g["update_leader_id"].as_str().expect("an update leader");
    assert_eq!(g["population"][leader]["update_leader"], true);
    assert_eq!(hub.strategy("u0"), Some(Strategy::Rolling));

    let plain: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("web-{i}"),
                &format!("w{i}"),
                &ip(20 + i),
                json!({}),
                json!([]),
            )
        })
        .collect();
    let hub = Arc::new(Hub::default());
    step_settled(&hub, &plain, &peer_file(&ip(20)));
    let doc = hub.census("w0").expect("census");
    assert_eq!(
        doc["census_groups"]["redis.default"]["update_election_status"],
        "None"
    );
    assert_eq!(
        doc["census_groups"]["redis.default"]["update_leader_id"],
        json!(null)
    );
}

#[test]
fn standalone_reports_none_and_census_shape() {
    let mut st = State::default();
    st.members.insert("a".into(), member("a", "ns", false));
    elect::elect(&mut st);
    let g = group(&st);
    assert_eq!(g.status, Election::None);
    let me = &st.members["a"];
    let doc = census::document(
        me,
        &[census::Gossiped {
            service_group: me.service_group(),
            group: Some(&g),
            members: vec![me],
        }],
    );
    let grp = &doc["census_groups"]["redis.default"];
    assert_eq!(grp["election_status"], "None");
    assert_eq!(grp["update_election_status"], "None");
    assert_eq!(grp["leader_id"], json!(null));
    assert_eq!(grp["population"]["a"]["sys"]["ip"], "127.1.0.2");
    assert_eq!(grp["population"]["a"]["alive"], true);
    assert_eq!(doc["local_member_id"], "a");
}

#[test]
fn member_from_pod() {
    let pod = json!({"metadata": {"name": "redis-0", "namespace": "ns"},
        "spec": {"containers": [{"name": "habitat-service", "image": "habitat/redis-hab",
            "args": ["--topology", "leader", "--group=prod", "--strategy", "at-once"],
            "readinessProbe": {"httpGet": {"path": "/services/redis/prod/health", "port": 9631}}}]},
        "status": {"podIP": "127.3.0.2"}});
    let m = member_for(&pod).expect("member");
    assert_eq!((m.service.as_str(), m.group.as_str()), ("redis", "prod"));
    assert!(m.leader_topology);
    assert_eq!(m.strategy, Strategy::AtOnce);
    assert_eq!(m.member_id.len(), 32);
    assert!(m.package.starts_with("habitat/redis/"));
}

#[test]
fn the_image_tag_picks_the_release() {
    let a = package_for("kinvolk/redis-hab:v2", "redis");
    let b = package_for("kinvolk/redis-hab:v3", "redis");
    assert!(a.starts_with("kinvolk/redis/0.1.0/"), "{a}");
    assert_ne!(a, b);
    assert_eq!(a, package_for("kinvolk/redis-hab:v2", "redis"));
    assert_eq!(
        package_for("localhost:5000/redis", "redis"),
        "localhost:5000/redis/0.1.0/20250101000000"
    );
    let release = a.rsplit('/').next().unwrap_or_default();
    assert_eq!(release.len(), 14);
}

fn peer_cm(name: &str, ip: &str) -> Value {
    json!({"metadata": {"namespace": "ns", "name": name, "uid": format!("cm-{name}")},
        "data": {"peer-ip": ip}})
}

/// Members `(id, ip, peer file)` of one namespace, alive and in no ring yet, joined to `links`.
fn ringless(links: &mut rings::Links, list: &[(&str, &str, &str)]) -> HashMap<String, Member> {
    let mut members = HashMap::new();
    for (id, ip, file) in list {
        let mut m = member(id, "ns", true);
        m.ip = ip.to_string();
        m.ring = String::new();
        m.mounts = vec![file.to_string()];
        links.join(&m);
        members.insert(id.to_string(), m);
    }
    members
}

/// A member with another ring key never reaches the members its peer file names, nor they it
/// (the real supervisor: `tests/real_quorum.rs`, a member with another ring key stays out);
/// one with the same key does.
#[test]
fn a_member_with_another_ring_key_stays_out_of_the_ring_it_knows() {
    let mut links = rings::Links::default();
    let cm = peer_cm("x-peer", "127.1.0.2");
    links.set_config_map(meta::uid_of(&cm), Some(&cm));
    let mut members = ringless(
        &mut links,
        &[
            ("a", "127.1.0.2", "x-peer"),
            ("b", "127.1.0.3", "x-peer"),
            ("c", "127.1.0.4", "x-peer"),
        ],
    );
    for (id, key) in [("a", "ring-a"), ("b", "ring-a"), ("c", "ring-b")] {
        members.get_mut(id).expect("member").gossip_key = Some(key.to_string());
    }
    rings::merge(&mut members, &mut links, ["a", "b", "c"].map(String::from));
    assert_eq!(members["a"].ring, members["b"].ring, "the same key joins");
    assert_ne!(
        members["a"].ring, members["c"].ring,
        "another key stays out"
    );
    // Without a key at all, a member stays out of an encrypted ring too.
    members.get_mut("c").expect("member").gossip_key = None;
    links.learn(&members["c"]);
    rings::merge(&mut members, &mut links, ["c".to_string()]);
    assert_ne!(members["a"].ring, members["c"].ring, "no key stays out");
}

#[test]
fn rings_follow_the_peer_files_and_keep_their_key_when_members_join() {
    let mut links = rings::Links::default();
    // a and b read a file naming a; c reads its own file naming itself: two rings.
    for cm in [
        peer_cm("x-peer", "127.1.0.2"),
        peer_cm("y-peer", "127.1.0.4"),
    ] {
        links.set_config_map(meta::uid_of(&cm), Some(&cm));
    }
    let list = [
        ("a", "127.1.0.2", "x-peer"),
        ("b", "127.1.0.3", "x-peer"),
        ("c", "127.1.0.4", "y-peer"),
    ];
    let mut members = ringless(&mut links, &list);
    let moved = rings::merge(&mut members, &mut links, ["a".to_string()]);
    assert_eq!(moved.len(), 2, "the rings reached from a: a and b, not c");
    assert_eq!(members["c"].ring, "");
    rings::merge(&mut members, &mut links, ["c".to_string()]);
    assert_eq!(members["a"].ring, members["b"].ring);
    assert_ne!(members["a"].ring, members["c"].ring);
    let key = members["a"].ring.clone();
    // A newcomer joining through the same file keeps the ring's key.
    members.extend(ringless(&mut links, &[("d", "127.1.0.5", "x-peer")]));
    let moved = rings::merge(&mut members, &mut links, ["d".to_string()]);
    assert_eq!(moved, [("d".to_string(), String::new())]);
    assert_eq!(members["a"].ring, key);
    // Once in a ring, members stay in it when the file names someone else.
    let readers = links.set_config_map("cm-x-peer", Some(&peer_cm("x-peer", "10.9.9.9")));
    assert_eq!(readers.len(), 3, "a, b and d read x-peer");
    for id in &readers {
        links.learn(&members[id]);
    }
    assert!(rings::merge(&mut members, &mut links, readers).is_empty());
    assert!(["a", "b", "d"].iter().all(|m| members[*m].ring == key));
    assert_ne!(members["c"].ring, key);
    // A file naming an address joins its reader to the member that takes the address later:
    // the newcomer is linked from a reader it does not know.
    let readers = links.set_config_map("cm-y-peer", Some(&peer_cm("y-peer", "127.1.0.9")));
    assert_eq!(readers, ["c"]);
    links.learn(&members["c"]);
    rings::merge(&mut members, &mut links, readers);
    members.extend(ringless(&mut links, &[("e", "127.1.0.9", "z-peer")]));
    rings::merge(&mut members, &mut links, ["e".to_string()]);
    assert_eq!(members["e"].ring, members["c"].ring);
    // A file whose addresses did not change touches no reader.
    let same = links.set_config_map("cm-y-peer", Some(&peer_cm("y-peer", "127.1.0.9")));
    assert!(same.is_empty());
    // y-peer deleted and made again (a new uid) in one pass, its deletion seen last: the new
    // file stands.
    let mut again = peer_cm("y-peer", "127.1.0.4");
    again["metadata"]["uid"] = json!("cm-y-peer-2");
    assert_eq!(links.set_config_map("cm-y-peer-2", Some(&again)), ["c"]);
    assert!(links.set_config_map("cm-y-peer", None).is_empty());
    assert_eq!(links.set_config_map("cm-y-peer-2", None), ["c"]);
}

/// Between world changes only a running election's clock moves a group, so a tick does
/// nothing until the first running election is due; membership is regrouped on world changes
/// only, and a census lists the members of its own group.
#[test]
fn a_tick_only_finishes_elections_that_are_due() {
    let mut st = State::default();
    for id in ["a1", "b2", "c3"] {
        st.members.insert(id.into(), member(id, "ns", true));
    }
    let mut lone = member("s9", "ns", false);
    lone.service = "nginx".into();
    st.members.insert("s9".into(), lone);
    elect::elect(&mut st);
    assert_eq!(group(&st).status, Election::InProgress);
    let due = st.next_deadline.expect("a running election has a deadline");
    assert!(due > Instant::now());
    elect::tick(&mut st);
    assert_eq!(group(&st).status, Election::InProgress, "not due yet");
    std::thread::sleep(ELECTION_DURATION + Duration::from_millis(10));
    elect::tick(&mut st);
    let g = group(&st);
    assert_eq!(
        (g.status, g.leader_id.as_deref()),
        (Election::Finished, Some("c3"))
    );
    assert_eq!(st.next_deadline, None, "every group at rest");
    assert!(st.members.values().all(|m| m.started));
    // A death is seen by the next world step, not by a tick.
    st.members.get_mut("c3").expect("member").health = Health::Confirmed;
    elect::tick(&mut st);
    assert_eq!(group(&st).status, Election::Finished);
    elect::elect(&mut st);
    assert_eq!(group(&st).status, Election::InProgress);
    assert!(st.next_deadline.is_some());
    // The index keeps groups apart.
    let ids = |key: (&str, &str)| {
        let mut ids = st.index[&(key.0.to_string(), key.1.to_string())].clone();
        ids.sort();
        ids
    };
    assert_eq!(ids(("ns/r", "redis.default")), ["a1", "b2", "c3"]);
    assert_eq!(ids(("ns/r", "nginx.default")), ["s9"]);
}

/// A world step with no member change still sees a changed peer file (the rings are derived
/// again), and one that changes nothing the rings depend on leaves the elections alone.
#[tokio::test]
async fn a_changed_peer_file_alone_joins_rings_and_an_unchanged_world_restarts_nothing() {
    let hub = Arc::new(Hub::default());
    let pods = vec![
        pod("a", "ua", "127.1.0.2", json!({}), json!([])),
        pod("b", "ub", "127.1.0.3", json!({}), json!([])),
        pod("c", "uc", "127.1.0.4", json!({}), json!([])),
    ];
    step_settled(&hub, &pods, &peer_file("10.9.9.9"));
    assert_eq!(census_of(&hub, "ua").2, 1, "nobody named: lone rings");
    // Same pods (the same allocations), a new peer file: one ring of three.
    let cms = peer_file("127.1.0.2");
    step_settled(&hub, &pods, &cms);
    let (status, leader, alive, total) = census_of(&hub, "ua");
    assert_eq!((status.as_str(), alive, total), ("ElectionFinished", 3, 3));
    assert!(leader.is_some());
    // Nothing changed: the finished election stands, without a new term.
    hub.step(Some((&pods, &cms)));
    assert_eq!(
        census_of(&hub, "ub"),
        ("ElectionFinished".into(), leader, 3, 3)
    );
    hub.shutdown();
}

/// The container's volume mount and the pod's volume that project its `MEMBER_ID` file from
/// its `member` annotation: a member id that survives the pod.
fn member_id_from_annotation() -> (Value, Value) {
    let mount = json!({"volumeMounts": [{"name": "id", "mountPath": "/hab/sup/default/MEMBER_ID",
        "subPath": "MEMBER_ID"}]});
    let volume = json!([{"name": "id", "downwardAPI": {"items": [{"path": "MEMBER_ID",
        "fieldRef": {"fieldPath": "metadata.annotations['member']"}}]}}]);
    (mount, volume)
}

/// A pass told which pods changed ([`Hub::step_changed`]) tracks members as a pass over every
/// pod does: a stopped pod's member is Confirmed, a deleted one's too, and a supervisor refused
/// because a running one has its member id joins once that one is gone, with no change to its
/// own pod.
#[tokio::test]
async fn a_pass_over_the_changed_pods_tracks_members_as_a_full_pass_does() {
    let (id_mount, id_volume) = member_id_from_annotation();
    let with_id = |name: &str, uid: &str, ip: &str, id: &str| {
        let mut p = (*pod(name, uid, ip, id_mount.clone(), id_volume.clone())).clone();
        p["metadata"]["annotations"] = json!({"member": id});
        Arc::new(p)
    };
    let a = with_id("a", "u1", "127.251.7.2", "m1");
    let b = with_id("b", "u2", "127.251.7.3", "m2");
    let c = with_id("c", "u3", "127.251.7.4", "m3");
    let twin = with_id("twin", "u4", "127.251.7.5", "m1");
    let cms = peer_file("127.251.7.2");
    let hub = Arc::new(Hub::default());
    let all = vec![a.clone(), b.clone(), c.clone(), twin.clone()];
    step_settled(&hub, &all, &cms);
    assert_eq!(census_of(&hub, "u1").2, 3, "the twin never joined");
    assert!(hub.census("u4").is_none());

    let mut stopped = (*b).clone();
    stopped["status"]["phase"] = json!("Failed");
    let stopped = Arc::new(stopped);
    hub.step_changed(&[("u2".to_string(), Some(stopped))], &[]);
    let (_, _, alive, total) = census_of(&hub, "u1");
    assert_eq!(
        (alive, total),
        (2, 3),
        "a stopped pod's member is Confirmed"
    );

    hub.step_changed(&[("u1".to_string(), None)], &[]);
    assert!(
        hub.census("u1").is_none(),
        "a deleted pod's supervisor is gone"
    );
    let (_, _, alive, total) = census_of(&hub, "u4");
    assert_eq!(
        (alive, total),
        (2, 3),
        "the twin took member m1 over: c and the twin alive, b Confirmed"
    );
    assert_eq!(census_of(&hub, "u3").2, 2);
}

/// The kubelet's readiness follows the health check without the pod changing, so every change
/// of a health check's answer must be reported by [`Hub::take_health_moved`]: an election that
/// starts the services, and a pod that stops.
#[tokio::test]
async fn every_change_of_a_health_checks_answer_is_reported() {
    let hub = Arc::new(Hub::default());
    let ips = ["127.250.2.2", "127.250.2.3", "127.250.2.4"];
    let uids = ["h0", "h1", "h2"];
    let cms = peer_file(ips[0]);
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| pod(&format!("redis-{i}"), uids[i], ips[i], json!({}), json!([])))
        .collect();
    let answers = |hub: &Hub| -> Vec<bool> { uids.iter().map(|u| hub.healthy(u)).collect() };
    // Each step: the answers that changed are among the reported uids.
    let check = |hub: &Arc<Hub>, before: Vec<bool>| -> Vec<String> {
        let moved = hub.take_health_moved();
        for (i, (was, is)) in before.iter().zip(answers(hub)).enumerate() {
            if *was != is {
                assert!(moved.contains(&uids[i].to_string()), "{moved:?}");
            }
        }
        moved
    };
    let before = answers(&hub);
    hub.step(Some((&pods, &cms)));
    check(&hub, before);
    std::thread::sleep(ELECTION_DURATION + Duration::from_millis(10));
    let before = answers(&hub);
    hub.step(None);
    let mut moved = check(&hub, before);
    moved.sort();
    assert_eq!(moved, uids, "the election started every service");
    assert_eq!(answers(&hub), [true, true, true]);
    assert!(hub.take_health_moved().is_empty(), "taken once");
    // redis-2 is deleted.
    let before = answers(&hub);
    hub.step(Some((&pods[..2], &cms)));
    assert_eq!(check(&hub, before), ["h2"]);
    assert_eq!(answers(&hub), [true, true, false]);
    hub.shutdown();
}

/// Members by id with their health, and the groups as sets of member ids with their
/// election status: what two hubs must agree on, whatever keys their rings got.
type Seen = (
    BTreeMap<String, Health>,
    BTreeSet<(Vec<String>, &'static str, &'static str)>,
);

fn seen(hub: &Hub) -> Seen {
    let st = hub.state();
    let members = st
        .members
        .iter()
        .map(|(id, m)| (id.clone(), m.health))
        .collect();
    let groups = st
        .index
        .iter()
        .map(|(key, ids)| {
            let mut ids = ids.clone();
            ids.sort();
            let g = st.groups.get(key).cloned().unwrap_or_default();
            (ids, g.status.as_str(), g.update_status.as_str())
        })
        .collect();
    (members, groups)
}

/// A pass told only what changed ([`Hub::step_changed`]) must leave the hub as a pass over the
/// whole world ([`Hub::step`]) does: the same members, healths, rings and elections. Two hubs
/// see the same random sequence of pods starting, stopping, restarting at new addresses and
/// being deleted, and of peer files changing. Two pods share a member id with others, and two
/// keep `/hab/sup` on a claim (they restore their member list); now and then the elections'
/// time passes.
#[tokio::test]
async fn a_pass_over_what_changed_derives_the_rings_a_pass_over_the_world_does() {
    let (id_mount, id_volume) = member_id_from_annotation();
    let disk_mount = json!({"volumeMounts": [{"name": "data", "mountPath": "/hab/sup"}]});
    let claim = |k: usize| json!([{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-s{k}")}}]);
    let ip = |i: u64| format!("127.249.0.{}", 2 + i);
    for seed in [23770u64, 39608, 55446, 79203] {
        let mut rng = seed;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        // Pod slots: (uid, the pod as it is now).
        let mut slots: Vec<Option<(String, Arc<Value>)>> = vec![None; 12];
        let mut files: BTreeMap<String, Arc<Value>> = BTreeMap::new();
        let (incremental, whole) = (Arc::new(Hub::default()), Arc::new(Hub::default()));
        // The claims' member ids, which a first start draws at random, are the same in both.
        for hub in [&incremental, &whole] {
            for k in [10, 11] {
                let disk = Disk {
                    member_id: format!("d{k}"),
                    peers: vec![],
                };
                hub.state().disks.insert(format!("ns/data-s{k}"), disk);
            }
        }
        let mut uids = 0;
        for round in 0..500 {
            let mut pods_changed = Vec::new();
            let mut cms_changed = Vec::new();
            for _ in 0..1 + next(3) {
                if next(4) == 0 {
                    let name = format!("p{}", next(3));
                    let key = format!("cm-{name}");
                    if next(5) == 0 {
                        files.remove(&key);
                        cms_changed.push((key, None));
                    } else {
                        let named: Vec<String> = (0..1 + next(2)).map(|_| ip(next(16))).collect();
                        let cm = Arc::new(peer_cm(&name, &named.join("\n")));
                        files.insert(key.clone(), cm.clone());
                        cms_changed.push((key, Some(cm)));
                    }
                    continue;
                }
                let k = next(12) as usize;
                match slots[k].take() {
                    None => {
                        let used: HashSet<&str> = slots
                            .iter()
                            .flatten()
                            .filter_map(|(_, p)| p["status"]["podIP"].as_str())
                            .collect();
                        let Some(free) = (0..16)
                            .map(ip)
                            .find(|a| !used.contains(a.as_str()) && next(3) != 0)
                        else {
                            continue;
                        };
                        uids += 1;
                        let uid = format!("u{uids}");
                        let (mount, volume) = match k {
                            10.. => (disk_mount.clone(), claim(k)),
                            _ => (id_mount.clone(), id_volume.clone()),
                        };
                        let mut p = (*pod(&format!("s{k}"), &uid, &free, mount, volume)).clone();
                        p["metadata"]["annotations"] = json!({"member": format!("m{}", k % 8)});
                        p["spec"]["volumes"][0]["configMap"]["name"] = json!(format!("p{}", k % 3));
                        let p = Arc::new(p);
                        pods_changed.push((uid.clone(), Some(p.clone())));
                        slots[k] = Some((uid, p));
                    }
                    Some((uid, p)) if p["status"]["phase"] == "Running" && next(2) == 0 => {
                        let mut stopped = (*p).clone();
                        stopped["status"]["phase"] = json!("Failed");
                        let stopped = Arc::new(stopped);
                        pods_changed.push((uid.clone(), Some(stopped.clone())));
                        slots[k] = Some((uid, stopped));
                    }
                    Some((uid, _)) => pods_changed.push((uid, None)),
                }
            }
            // In uid order, as the nodes' mirror lists them: of two pods with one member id
            // starting together, both passes let the same one join.
            let pods: BTreeMap<&String, Arc<Value>> = slots
                .iter()
                .flatten()
                .map(|(u, p)| (u, p.clone()))
                .collect();
            let pods: Vec<Arc<Value>> = pods.into_values().collect();
            let cms: Vec<Arc<Value>> = files.values().cloned().collect();
            incremental.step_changed(&pods_changed, &cms_changed);
            whole.step(Some((&pods, &cms)));
            assert_eq!(
                seen(&incremental),
                seen(&whole),
                "seed {seed}, round {round}"
            );
            if round % 100 == 99 {
                std::thread::sleep(ELECTION_DURATION + Duration::from_millis(10));
                incremental.step(None);
                whole.step(None);
                assert_eq!(
                    seen(&incremental),
                    seen(&whole),
                    "seed {seed}, round {round}, elections due"
                );
            }
        }
        incremental.shutdown();
        whole.shutdown();
    }
}

/// The message id of a complete reply of the control gateway.
async fn reply_id(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let header = s.read_u32().await.unwrap();
    let txn = s.read_u32().await.unwrap();
    assert_eq!(txn >> 30, 0b11, "a complete reply");
    let mut id = vec![0; ((header >> 20) & 0x3F) as usize];
    s.read_exact(&mut id).await.unwrap();
    let mut body = vec![0; (header & 0xF_FFFF) as usize];
    s.read_exact(&mut body).await.unwrap();
    String::from_utf8(id).unwrap()
}

/// Pods of a leader group whose `MEMBER_ID` is projected from the pod name (the identity the
/// operator gave leader groups before it measured the real supervisor).
fn named_ids(gen: u8, ip: impl Fn(u8) -> String) -> Vec<Arc<Value>> {
    let id_mount = json!({"volumeMounts": [
        {"name": "id", "mountPath": "/hab/sup/default/MEMBER_ID", "subPath": "MEMBER_ID"}]});
    let id_volume = json!([{"name": "id", "downwardAPI": {"items": [
        {"path": "MEMBER_ID", "fieldRef": {"fieldPath": "metadata.name"}}]}}]);
    (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{gen}-{i}"),
                &ip(gen * 10 + i),
                id_mount.clone(),
                id_volume.clone(),
            )
        })
        .collect()
}

fn member_in<'a>(doc: &'a Value, id: &str) -> &'a Value {
    &doc["census_groups"]["redis.default"]["population"][id]
}

/// Measured with the real supervisor (README of `../shared/habitat`, item 1 of "What the real
/// supervisor showed"... and the facts' section 7): a pod deleted gracefully gets SIGTERM and
/// its supervisor departs itself, so it no longer counts toward quorum.
#[tokio::test]
async fn a_deleted_pod_departs_itself() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.6.{i}");
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i),
                json!({}),
                json!([]),
            )
        })
        .collect();
    step_settled(&hub, &pods, &peer_file(&ip(2)));
    step_settled(&hub, &pods[..2], &peer_file(&ip(2)));
    let (status, _, alive, total) = census_of(&hub, "u0");
    assert_eq!((status.as_str(), alive, total), ("ElectionFinished", 2, 2));
    hub.shutdown();
}

/// Measured (facts §7): after an unclean death, the same `MEMBER_ID` with an empty
/// `/hab/sup/default/data` leaves the restarted member cut off in its own view (one alive
/// member, no election, its hooks never run) while the others list it alive; and the others
/// keep listing a rejoined same-id member at its old address.
#[tokio::test]
async fn the_same_id_after_a_crash_is_cut_off_and_listed_at_its_old_address() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.7.{i}");
    let first = named_ids(1, ip);
    step_settled(&hub, &first, &peer_file(&ip(10)));
    let crash = vec![first[0].clone(), first[1].clone(), crashed(&first[2])];
    step_settled(&hub, &crash, &peer_file(&ip(10)));
    let back = vec![
        first[0].clone(),
        first[1].clone(),
        named_ids(2, ip)[2].clone(),
    ];
    step_settled(&hub, &back, &peer_file(&ip(10)));
    let (status, leader, alive, _) = census_of(&hub, "u2-2");
    assert_eq!(
        (status.as_str(), leader, alive),
        ("ElectionInProgress", None, 1)
    );
    assert!(!hub.healthy("u2-2"), "its hooks never run");
    let theirs = hub.census("u1-0").expect("census");
    let m = member_in(&theirs, "redis-2");
    assert_eq!(
        (m["alive"].clone(), m["sys"]["ip"].clone()),
        (json!(true), json!(ip(12)))
    );
    assert_eq!(
        member_in(&hub.census("u2-2").unwrap(), "redis-2")["sys"]["ip"],
        ip(22)
    );
    hub.shutdown();
}

/// Measured: `hab sup depart` is permanent, a supervisor started again with a departed id
/// exits (code 86); and the control gateway on `IP:9632` takes the handshake and the departure.
#[tokio::test]
async fn the_control_gateway_departs_a_member_for_good() {
    use tokio::io::AsyncWriteExt;
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.8.{i}");
    let first = named_ids(1, ip);
    step_settled(&hub, &first, &peer_file(&ip(10)));
    let crash = vec![first[0].clone(), first[1].clone(), crashed(&first[2])];
    step_settled(&hub, &crash, &peer_file(&ip(10)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let frame = |id: &str, body: &[u8], txn: u32| {
        let header = (1u32 << 31) | ((id.len() as u32) << 20) | body.len() as u32;
        let mut out = header.to_be_bytes().to_vec();
        out.extend_from_slice(&txn.to_be_bytes());
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(body);
        out
    };
    let string = |s: &str| {
        let mut b = vec![0x0A, s.len() as u8];
        b.extend_from_slice(s.as_bytes());
        b
    };
    let addr = format!("{}:9632", ip(10));
    // An empty secret is refused.
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(&frame("Handshake", &string(""), 0))
        .await
        .unwrap();
    assert_eq!(reply_id(&mut s).await, "NetErr");
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(&frame("Handshake", &string("secret"), 0))
        .await
        .unwrap();
    assert_eq!(reply_id(&mut s).await, "NetOk");
    s.write_all(&frame("SupDepart", &string("redis-2"), 1))
        .await
        .unwrap();
    assert_eq!(reply_id(&mut s).await, "NetOk");
    let doc = hub.census("u1-0").expect("census");
    assert_eq!(member_in(&doc, "redis-2")["departed"], true);
    // The same id never starts again.
    let back = vec![
        first[0].clone(),
        first[1].clone(),
        named_ids(2, ip)[2].clone(),
    ];
    step_settled(&hub, &back, &peer_file(&ip(10)));
    assert!(hub.census("u2-2").is_none(), "a departed id does not start");
    assert_eq!(
        member_in(&hub.census("u1-0").unwrap(), "redis-2")["departed"],
        true
    );
    hub.shutdown();
}

/// Measured: a supervisor restarted with its saved data serves its old election (its old
/// leader, finished) for about a second before gossip corrects it.
#[tokio::test]
async fn a_restart_with_saved_data_reports_its_old_election_for_a_moment() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.9.{i}");
    let mount = json!({"volumeMounts": [{"name": "data", "mountPath": "/hab/sup"}]});
    let claim = |i: u8| json!([{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-redis-{i}")}}]);
    let at = |gen: u8, i: u8| {
        pod(
            &format!("redis-{i}"),
            &format!("u{gen}-{i}"),
            &ip(gen * 10 + i),
            mount.clone(),
            claim(i),
        )
    };
    let first: Vec<Arc<Value>> = (0..3).map(|i| at(1, i)).collect();
    step_settled(&hub, &first, &peer_file(&ip(10)));
    let (_, old_leader, _, _) = census_of(&hub, "u1-0");
    // redis-0 crashes; while it is away the group's election restarts without a quorum change
    // being visible to it: its view is the one it saved.
    let crash = vec![crashed(&first[0]), first[1].clone(), first[2].clone()];
    step_settled(&hub, &crash, &peer_file(&ip(11)));
    {
        let mut st = hub.state();
        let key = (
            "ns/".to_string() + &st.members.values().next().unwrap().ring,
            "redis.default".to_string(),
        );
        if let Some(g) = st.groups.get_mut(&key) {
            g.status = Election::InProgress;
            g.leader_id = None;
            g.running_until = Some(Instant::now() + Duration::from_secs(30));
        }
    }
    let back = vec![at(2, 0), first[1].clone(), first[2].clone()];
    hub.step(Some((&back, &peer_file(&ip(11)))));
    let (status, leader, _, _) = census_of(&hub, "u2-0");
    assert_eq!(
        (status.as_str(), leader.clone()),
        ("ElectionFinished", old_leader.clone())
    );
    std::thread::sleep(STALE_ELECTION + Duration::from_millis(50));
    let (status, _, _, _) = census_of(&hub, "u2-0");
    assert_eq!(
        status,
        census_of(&hub, "u1-1").0,
        "corrected: the group's own view"
    );
    hub.shutdown();
}

/// A failed pod that its StatefulSet controller then deletes signals no supervisor: it died
/// with the crash, so its member stays Confirmed (the nodes may see only the deletion).
#[tokio::test]
async fn deleting_a_crashed_pod_departs_nothing() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.10.{i}");
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i),
                json!({}),
                json!([]),
            )
        })
        .collect();
    step_settled(&hub, &pods, &peer_file(&ip(2)));
    let mut failed_and_deleted = (*crashed(&pods[2])).clone();
    failed_and_deleted["metadata"]["deletionTimestamp"] = json!("2026-12-07T15:00:00Z");
    let world = vec![
        pods[0].clone(),
        pods[1].clone(),
        Arc::new(failed_and_deleted),
    ];
    step_settled(&hub, &world, &peer_file(&ip(2)));
    let (_, _, alive, total) = census_of(&hub, "u0");
    assert_eq!((alive, total), (2, 3));
    hub.shutdown();
}

/// `p` with [`crate::nodes::CRASH_ANNOTATION`] set to `token`: a test asks the nodes to crash
/// its container.
fn crash_asked(p: &Arc<Value>, token: &str) -> Arc<Value> {
    let mut v = (**p).clone();
    v["metadata"]["annotations"][crate::nodes::CRASH_ANNOTATION] = json!(token);
    Arc::new(v)
}

/// The population of the census served for pod `uid`: (member id, IP, alive, confirmed).
fn population(hub: &Hub, uid: &str) -> Vec<(String, String, bool, bool)> {
    let doc = hub.census(uid).expect("a census");
    doc["census_groups"]["redis.default"]["population"]
        .as_object()
        .expect("population")
        .iter()
        .map(|(id, m)| {
            (
                id.clone(),
                m["sys"]["ip"].as_str().unwrap_or_default().to_string(),
                m["alive"] == true,
                m["confirmed"] == true,
            )
        })
        .collect()
}

/// Facts §7 and issue 53: a crashed container restarts in the same pod (same uid and IP), as
/// a new member from a fresh filesystem; the dead member stays `confirmed` at that same IP
/// until departed. Nothing answers at the pod's IP during the kubelet's backoff; a crash
/// token already seen crashes nothing again.
#[tokio::test]
async fn a_crashed_container_restarts_in_the_same_pod_as_a_new_member() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.11.{i}");
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i),
                json!({}),
                json!([]),
            )
        })
        .collect();
    step_settled(&hub, &pods, &peer_file(&ip(2)));
    let before = population(&hub, "u2");
    let dead = hub.census("u2").expect("census")["local_member_id"]
        .as_str()
        .expect("an id")
        .to_string();
    assert_eq!(hub.restarts("u2"), 0);

    // The nodes see the annotated pod as a change.
    let asked = crash_asked(&pods[2], "t1");
    let key = |p: &Arc<Value>| (meta::uid_of(p).to_string(), Some(p.clone()));
    hub.step_changed(&[key(&asked)], &[]);
    assert_eq!(hub.restarts("u2"), 1);
    assert!(hub.census("u2").is_none(), "nothing answers in the backoff");
    assert!(!hub.healthy("u2"));
    let (_, _, alive, total) = census_of(&hub, "u0");
    assert_eq!((alive, total), (2, 3), "the dead member still counts");

    // The same token again (another change of the pod) crashes nothing more.
    hub.step_changed(&[key(&asked)], &[]);
    assert_eq!(hub.restarts("u2"), 1);

    std::thread::sleep(crate::nodes::habitat::restart_backoff(0) + Duration::from_millis(20));
    hub.step(None);
    let again = hub.census("u2").expect("the restarted container's census");
    let fresh = again["local_member_id"]
        .as_str()
        .expect("an id")
        .to_string();
    assert_ne!(fresh, dead, "a fresh filesystem: a new member id");
    std::thread::sleep(ELECTION_DURATION + Duration::from_millis(20));
    hub.step(None);
    assert!(hub.healthy("u2"), "the new member serves");
    let mut after = population(&hub, "u0");
    after.sort();
    let at_ip: Vec<_> = after.iter().filter(|m| m.1 == ip(4)).collect();
    assert_eq!(
        at_ip.len(),
        2,
        "a dead and a live member at the pod's IP: {after:?} (before: {before:?})"
    );
    assert!(at_ip.iter().any(|m| m.0 == dead && !m.2 && m.3));
    assert!(at_ip.iter().any(|m| m.0 == fresh && m.2 && !m.3));
    let (status, _, alive, total) = census_of(&hub, "u0");
    assert_eq!((status.as_str(), alive, total), ("ElectionFinished", 3, 4));

    // A second crash waits twice as long; a deletion meanwhile ends the restart.
    hub.step_changed(&[key(&crash_asked(&pods[2], "t2"))], &[]);
    assert_eq!(hub.restarts("u2"), 2);
    hub.step_changed(&[("u2".to_string(), None)], &[]);
    std::thread::sleep(crate::nodes::habitat::restart_backoff(1) + Duration::from_millis(20));
    hub.step(None);
    assert!(
        hub.census("u2").is_none(),
        "a deleted pod's container never starts again"
    );
    hub.shutdown();
}

/// The real census has a `census_groups` entry for every service group whose rumors reach the
/// member (`CensusRing::update_from_rumors` files every service rumor of the ring), each
/// naming the viewer as `local_member_id`: a consumer whose peer file names a producer's pod
/// shares its ring and sees the producer's group and election, and the producer sees the
/// consumer's. A group of another ring is not seen.
#[tokio::test]
async fn the_census_lists_every_group_of_the_ring() {
    let hub = Arc::new(Hub::default());
    let ip = |i: u8| format!("127.250.12.{i}");
    let mut world: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i),
                json!({}),
                json!([]),
            )
        })
        .collect();
    let standalone = |name: &str, uid: &str, ip: &str, peer: &str| {
        Arc::new(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": "habitat-service", "image": "core/web-hab:v1",
                "args": ["--bind", "db:redis.default"],
                "readinessProbe": {"httpGet": {"path": "/services/web/default/health",
                    "port": 9631}}}],
                "volumes": [{"name": "peer", "configMap": {"name": peer}}]},
            "status": {"phase": "Running", "podIP": ip}}),
        )
    };
    world.push(standalone("web-0", "w0", &ip(10), "web-peer"));
    world.push(standalone("lone-0", "l0", &ip(20), "lone-peer"));
    let mut cms = peer_file(&ip(2));
    cms.push(Arc::new(
        json!({"metadata": {"namespace": "ns", "name": "web-peer"}, "data": {"peer-ip": ip(2)}}),
    ));
    cms.push(Arc::new(
        json!({"metadata": {"namespace": "ns", "name": "lone-peer"}, "data": {"peer-ip": ip(20)}}),
    ));
    step_settled(&hub, &world, &cms);
    let groups = |uid: &str| -> Vec<String> {
        let doc = hub.census(uid).expect("a census");
        let mut g: Vec<String> = doc["census_groups"]
            .as_object()
            .expect("groups")
            .keys()
            .cloned()
            .collect();
        g.sort();
        g
    };
    assert_eq!(groups("w0"), ["redis.default", "web.default"]);
    assert_eq!(groups("u1"), ["redis.default", "web.default"]);
    assert_eq!(groups("l0"), ["web.default"], "another ring is not seen");
    let web = hub.census("w0").expect("census");
    let redis = hub.census("u0").expect("census");
    let (mine, theirs) = (
        &web["census_groups"]["web.default"],
        &web["census_groups"]["redis.default"],
    );
    assert_eq!(mine["local_member_id"], web["local_member_id"]);
    assert_eq!(theirs["local_member_id"], web["local_member_id"]);
    assert_eq!(mine["election_status"], "None");
    assert_eq!(theirs["election_status"], "ElectionFinished");
    assert_eq!(
        theirs["leader_id"], redis["census_groups"]["redis.default"]["leader_id"],
        "the producer's leader, as its own members see it"
    );
    assert_eq!(theirs["population"].as_object().map(|p| p.len()), Some(3));
    assert_eq!(mine["population"].as_object().map(|p| p.len()), Some(1));
    assert_eq!(hub.service_group("w0").as_deref(), Some("web.default"));
    hub.shutdown();
}

/// Facts §6 and §7, the gossip delays ([`Gossip`]), here scaled down: after an unclean death
/// the others list the member alive for `suspect_after`, then suspect for `confirm_after`
/// (counted, and a leader still leads), then confirmed, and only then is a dead leader
/// replaced; a new supervisor sees only itself, with no finished election and no hooks run,
/// for `join`.
#[tokio::test]
async fn deaths_are_noticed_and_joins_done_after_the_gossip_delays() {
    let gossip = Gossip {
        election: Duration::from_millis(100),
        suspect_after: Duration::from_millis(400),
        confirm_after: Duration::from_millis(400),
        join: Duration::from_millis(300),
        hooks: Duration::from_millis(300),
    };
    let hub = Arc::new(Hub::new(gossip));
    let ip = |i: u8| format!("127.250.13.{i}");
    let pods: Vec<Arc<Value>> = (0..3)
        .map(|i| {
            pod(
                &format!("redis-{i}"),
                &format!("u{i}"),
                &ip(2 + i),
                json!({}),
                json!([]),
            )
        })
        .collect();
    hub.step(Some((&pods, &peer_file(&ip(2)))));
    let joining = hub.census("u0").expect("a census");
    assert_eq!(
        joining["census_groups"]["redis.default"]["population"]
            .as_object()
            .map(|p| p.len()),
        Some(1),
        "joining: only itself"
    );
    assert!(!hub.healthy("u0"));
    std::thread::sleep(gossip.join + Duration::from_millis(20));
    hub.step(None);
    std::thread::sleep(gossip.election + Duration::from_millis(20));
    hub.step(None);
    let (status, leader, alive, _) = census_of(&hub, "u0");
    assert_eq!((status.as_str(), alive), ("ElectionFinished", 3));
    assert!(
        !hub.healthy("u0"),
        "joined and elected, its hooks not run yet"
    );
    std::thread::sleep(gossip.hooks);
    hub.step(None);
    assert!(hub.healthy("u0"), "its hooks ran");
    let leader = leader.expect("a leader");
    let (leader_uid, survivor) = {
        let doc = hub.census("u0").expect("census");
        let ip = doc["census_groups"]["redis.default"]["population"][&leader]["sys"]["ip"]
            .as_str()
            .expect("ip")
            .to_string();
        let i = pods
            .iter()
            .position(|p| p["status"]["podIP"] == ip.as_str())
            .expect("the leader's pod");
        (format!("u{i}"), format!("u{}", (i + 1) % 3))
    };
    let health = |hub: &Hub| {
        let doc = hub.census(&survivor).expect("census");
        let m = &doc["census_groups"]["redis.default"]["population"][&leader];
        (
            m["alive"] == true,
            m["suspect"] == true,
            m["confirmed"] == true,
        )
    };
    let world: Vec<Arc<Value>> = pods
        .iter()
        .map(|p| {
            if meta::uid_of(p) == leader_uid {
                crashed(p)
            } else {
                p.clone()
            }
        })
        .collect();
    hub.step(Some((&world, &peer_file(&ip(2)))));
    assert_eq!(health(&hub), (true, false, false), "not noticed yet");
    std::thread::sleep(gossip.suspect_after + Duration::from_millis(20));
    hub.step(None);
    assert_eq!(health(&hub), (false, true, false), "suspect");
    let (status, still, alive, total) = census_of(&hub, &survivor);
    assert_eq!(
        (status.as_str(), still.as_deref(), alive, total),
        ("ElectionFinished", Some(leader.as_str()), 2, 3),
        "a suspect leader still leads"
    );
    std::thread::sleep(gossip.confirm_after + Duration::from_millis(20));
    hub.step(None);
    assert_eq!(health(&hub), (false, false, true), "confirmed");
    assert_eq!(census_of(&hub, &survivor).0, "ElectionInProgress");
    std::thread::sleep(gossip.election + Duration::from_millis(20));
    hub.step(None);
    let (status, new, _, _) = census_of(&hub, &survivor);
    assert_eq!(status, "ElectionFinished");
    assert_ne!(
        new.as_deref(),
        Some(leader.as_str()),
        "a confirmed leader is replaced"
    );
    assert_eq!(Hub::default().state().gossip, Gossip::FAST);
    hub.shutdown();
}
