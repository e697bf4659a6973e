//! Gossip rings: supervisors reach each other only through the addresses they know: those in
//! their peer files (`--peer-watch-file`), or, for a supervisor that restored a member list from
//! a persisted `/hab/sup`, the addresses of that list (it ignores its peer file, facts §1). A
//! ring is a connected set of pods linked by those addresses. Elections and the census are per
//! ring, as in real Habitat.

use super::{Health, Member};
use crate::meta;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The addresses in the peer files a pod mounts (ConfigMap volumes with a `peer-ip` key).
fn peer_addresses(pod: &Value, config_maps: &HashMap<(&str, &str), &Value>) -> Vec<String> {
    let ns = meta::namespace(pod);
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .filter_map(|name| config_maps.get(&(ns, name)))
        .filter_map(|c| c["data"]["peer-ip"].as_str())
        .flat_map(|text| {
            text.lines()
                .map(|l| l.trim().split(':').next().unwrap_or_default().to_string())
        })
        .filter(|ip| !ip.is_empty())
        .collect()
}

fn find(parent: &mut HashMap<String, String>, x: &str) -> String {
    let mut root = x.to_string();
    while let Some(p) = parent.get(&root).filter(|p| **p != root) {
        root = p.clone();
    }
    parent.insert(x.to_string(), root.clone());
    root
}

/// Recomputes the ring of every alive member (`members` by member id, `by_pod` the running
/// pods' member ids): members already in a ring stay there, and others join through the
/// addresses they know. A ring keeps the key most of its members
/// already have, so joins and deaths do not restart its elections, and no two rings share a
/// key; dead members keep their last ring.
pub fn assign(
    members: &mut HashMap<String, Member>,
    by_pod: &HashMap<String, String>,
    pods: &[Arc<Value>],
    config_maps: &[Arc<Value>],
) {
    let cms: HashMap<(&str, &str), &Value> = config_maps
        .iter()
        .map(|c| ((meta::namespace(c), meta::name(c)), &**c))
        .collect();
    let alive: Vec<String> = members
        .iter()
        .filter(|(_, m)| m.health == Health::Alive)
        .map(|(id, _)| id.clone())
        .collect();
    let by_ip: HashMap<(String, String), String> = alive
        .iter()
        .filter_map(|id| {
            members
                .get(id)
                .map(|m| ((m.namespace.clone(), m.ip.clone()), id.clone()))
        })
        .collect();
    let mut parent: HashMap<String, String> =
        alive.iter().map(|id| (id.clone(), id.clone())).collect();
    // Members of one ring stay in it: they gossip with each other's current addresses, which
    // no peer file needs to name any more.
    let mut first_of_ring: HashMap<String, String> = HashMap::new();
    for id in &alive {
        let Some(ring) = members
            .get(id)
            .map(|m| m.ring.clone())
            .filter(|r| !r.is_empty())
        else {
            continue;
        };
        match first_of_ring.get(&ring) {
            Some(first) => {
                let (a, b) = (find(&mut parent, id), find(&mut parent, first));
                if a != b {
                    parent.insert(a, b);
                }
            }
            None => {
                first_of_ring.insert(ring, id.clone());
            }
        }
    }
    for pod in pods {
        let Some(id) = by_pod.get(meta::uid_of(pod)) else {
            continue;
        };
        let Some(m) = members.get(id).filter(|m| m.health == Health::Alive) else {
            continue;
        };
        let known = match &m.restored_peers {
            Some(ips) => ips.clone(),
            None => peer_addresses(pod, &cms),
        };
        for ip in known {
            if let Some(other) = by_ip.get(&(meta::namespace(pod).to_string(), ip)) {
                let (a, b) = (find(&mut parent, id), find(&mut parent, other));
                if a != b {
                    parent.insert(a, b);
                }
            }
        }
    }
    let mut components: HashMap<String, Vec<String>> = HashMap::new();
    for id in &alive {
        let root = find(&mut parent, id);
        components.entry(root).or_default().push(id.clone());
    }
    // Larger rings choose first; a key is never given to two rings.
    let mut components: Vec<(String, Vec<String>)> = components.into_iter().collect();
    components.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut taken: HashSet<String> = HashSet::new();
    for (root, ids) in components {
        let mut votes: HashMap<String, usize> = HashMap::new();
        for id in &ids {
            if let Some(m) = members.get(id).filter(|m| !m.ring.is_empty()) {
                *votes.entry(m.ring.clone()).or_default() += 1;
            }
        }
        let mut votes: Vec<(String, usize)> = votes
            .into_iter()
            .filter(|(k, _)| !taken.contains(k))
            .collect();
        votes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let key = votes.into_iter().next().map(|(k, _)| k).unwrap_or(root);
        taken.insert(key.clone());
        for id in &ids {
            if let Some(m) = members.get_mut(id) {
                m.ring = key.clone();
            }
        }
    }
}
